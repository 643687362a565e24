"""Token agreement across runs: exact on a CPU, up to the first near tie elsewhere."""

import torch

from fake_cuda import FakeCuda
from minillm.generation.agreement import (agree, beams_agree, first_difference,
                                          mean_logprob, rule)


class Scores(torch.nn.Module):
    """Logits that depend on the last token only: after token t, token t+1 leads by `gap`."""

    def __init__(self, gap, device="cpu"):
        super().__init__()
        self.gap, self.where = gap, torch.device(device)

    @property
    def device(self):
        return self.where

    def forward(self, ids, logits_to_keep=0):
        logits = torch.zeros(ids.shape[0], ids.shape[1], 10, device=ids.device)
        logits[..., :] = 0.0
        nxt = (ids + 1) % 10
        logits.scatter_(-1, nxt[..., None], self.gap)
        return logits[:, -logits_to_keep:]


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_exact_on_a_cpu_and_up_to_a_near_tie_elsewhere():
    assert agree(Scores(5.0), [1], [2, 3], [2, 3])
    assert not agree(Scores(1e-4), [1], [2, 3], [2, 4])  # a CPU: exact, even at a near tie
    assert "exactly" in rule(Scores(1.0))
    gpu_tie, gpu_clear = Scores(1e-4, "meta"), Scores(5.0, "meta")
    assert agree(gpu_tie, [1], [2, 3], [2, 4])  # the model barely preferred 3 after 2
    assert not agree(gpu_clear, [1], [2, 3], [2, 4])  # a clear choice must agree
    assert not agree(gpu_tie, [1], [2, 3], [2])  # one ended early: not the same answer
    assert "near tie" in rule(gpu_tie)


def test_beams_agree_exactly_on_a_cpu_and_else_when_the_model_scores_them_as_a_tie():
    """Two different best beams are right off the CPU only when their mean log-probabilities
    (beam search's score) are within the near tie."""
    assert beams_agree(Scores(5.0), [1], [2, 3], [2, 3])
    assert not beams_agree(Scores(1e-4), [1], [2, 3], [2, 4])
    with FakeCuda():
        tie, clear = Scores(1e-4, "cuda"), Scores(5.0, "cuda")
        assert abs(mean_logprob(tie, [1], [2, 3]) - mean_logprob(tie, [1], [2, 4])) < 1e-3
        assert beams_agree(tie, [1], [2, 3], [2, 4])
        assert not beams_agree(clear, [1], [2, 3], [2, 4])  # 3 after 2: the model's clear choice
        assert not beams_agree(tie, [1], [2, 3], [])


def test_exact_false_holds_two_dtypes_to_the_near_tie_rule_on_a_cpu():
    assert agree(Scores(0.05), [1], [2, 3], [2, 4], near_tie=0.1, exact=False)
    assert not agree(Scores(0.05), [1], [2, 3], [2, 4], near_tie=0.01, exact=False)
    assert not agree(Scores(0.05), [1], [2, 3], [2, 4], near_tie=0.1)  # a CPU: exact
