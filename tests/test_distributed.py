"""Tensor and pipeline parallelism on torch.distributed (gloo, two processes on this machine):
the same logits and greedy tokens as one process, and the all-reduces the formula predicts."""

import pytest
import torch

from minillm.distributed import (all_reduce_cost, compare_pipeline_parallel,
                                 compare_tensor_parallel, split_evenly)
from minillm.distributed import shard_model
from minillm.loading import load_model

pytestmark = pytest.mark.slow


def test_split_evenly_covers_everything_once():
    assert split_evenly(3, 2) == [range(0, 2), range(2, 3)]
    assert split_evenly(1536, 2) == [range(0, 768), range(768, 1536)]
    for total, parts in [(9, 4), (30, 3), (5, 5)]:
        ranges = split_evenly(total, parts)
        assert [i for r in ranges for i in r] == list(range(total))
        assert max(map(len, ranges)) - min(map(len, ranges)) <= 1


@pytest.mark.parametrize("total, parts", [(3, 4), (3, 0)])
def test_split_evenly_refuses_impossible_splits(total, parts):
    with pytest.raises(ValueError, match="cannot split"):
        split_evenly(total, parts)


PROMPT = [5, 17, 3, 40, 22, 9, 31]


def test_tensor_parallel_tiny_model_matches_one_process(tiny_folder):
    report = compare_tensor_parallel(str(tiny_folder), PROMPT, world_size=2, new_tokens=6)
    assert report.max_abs_diff < 1e-4, report  # partial sums add up in another order
    assert report.top1_agree and report.tokens_equal, report
    assert [r["kv_heads"] for r in report.ranks] == [[0, 1], [2]]
    # The all-reduces counted during the prompt's forward pass are the formula's.
    config = load_model(tiny_folder, device="cpu").config
    calls, nbytes = all_reduce_cost(config, len(PROMPT))
    for rank in report.ranks:
        assert (rank["prefill_calls"], rank["prefill_bytes"]) == (calls, nbytes)
    assert calls == 2 * config.n_layers


def test_pipeline_parallel_tiny_model_matches_one_process(tiny_folder):
    report = compare_pipeline_parallel(str(tiny_folder), PROMPT, world_size=3)
    # the same operations, but each stage's process runs on fewer threads than this one, and
    # the matrix kernels block their sums by thread count: the last bits differ
    assert report.max_abs_diff < 1e-4 and report.top1_agree, report
    assert [r["layers"] for r in report.ranks] == [[0], [1], [2]]
    hidden = 48 * len(PROMPT) * 4
    assert [r["sent_bytes"] for r in report.ranks] == [hidden, hidden, 0]


def test_single_process_tensor_parallel_is_the_whole_model(tiny_folder):
    """world_size 1 needs no process group: a quick check of the sharding arithmetic alone."""
    model = load_model(tiny_folder, device="cpu", fast=False)
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        want = model(ids)
        torch.testing.assert_close(shard_model(model, 0, 1)(ids), want)


def test_more_ranks_than_heads_is_a_clear_error(tiny_folder):
    model = load_model(tiny_folder, device="cpu", fast=False)
    with pytest.raises(ValueError, match="cannot split 3 items over 4 ranks"):
        shard_model(model, 0, 4)


def test_smollm2_on_two_processes(gguf_path):
    import minillm

    ids = minillm.load_tokenizer("smollm2-135m").encode("The capital of France is")
    report = compare_tensor_parallel("smollm2-135m", ids, world_size=2, new_tokens=6)
    assert report.max_abs_diff < 1e-4, report
    assert report.top1_agree and report.tokens_equal, report
    assert report.ranks[0]["prefill_calls"] == 60


def test_the_backend_follows_where_the_ranks_tensors_are(monkeypatch):
    """gloo for CPU tensors even on a machine with several GPUs (nccl moves GPU tensors only:
    lesson 09 on a 2-GPU machine picked nccl for its CPU ranks); nccl only for ranks on CUDA
    with a GPU each."""
    from minillm.distributed import demos, launch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert launch.default_backend(2, "cpu") == "gloo"
    assert launch.default_backend(2, "cuda") == "nccl"
    with pytest.raises(ValueError, match="3 ranks on cuda need 3 GPUs, this machine has 2"):
        launch.default_backend(3, "cuda")
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        launch.default_backend(2, "mps")
    chosen = []
    monkeypatch.setattr(demos, "run_distributed", lambda fn, n, args, device: chosen.append(
        launch.default_backend(n, device)) or [{"logits": torch.zeros(1, 3), "tokens": []}] * n)
    monkeypatch.setattr(demos, "_reference", lambda *args: (torch.zeros(1, 3), []))
    demos.compare_tensor_parallel("unused", [1, 2], world_size=2, new_tokens=0)
    demos.compare_pipeline_parallel("unused", [1, 2], world_size=2)
    assert chosen == ["gloo", "gloo"] and demos.DEVICE == "cpu"
