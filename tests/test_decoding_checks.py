"""The chapter 04 checkers pass correct code and name the usual mistakes."""

import pytest
import torch

from minillm.checks import ch04_decoding as checks
from minillm.checks._base import CheckFailed
from minillm.decoding import RepetitionPenaltyProcessor, TopKProcessor, TopPProcessor


def test_correct_functions_pass(capsys):
    checks.check_apply_temperature(lambda logits, t: logits / t)
    checks.check_top_k(lambda logits, k: TopKProcessor(k)(None, logits))
    checks.check_top_p(lambda logits, p: TopPProcessor(p)(None, logits))
    checks.check_repetition_penalty(
        lambda ids, logits, p: RepetitionPenaltyProcessor(p)(ids, logits))
    checks.check_beam_step(checks.reference_beam_step)
    assert capsys.readouterr().out.count("✅") == 5


def drops_crossing_token(logits, p):
    sorted_logits, order = torch.sort(logits, descending=True)
    remove = sorted_logits.softmax(-1).cumsum(-1) > p
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def strict_top_k(logits, k):
    k = min(k, logits.shape[-1])
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, torch.topk(logits, k).indices,
                                                              True)
    return logits.masked_fill(~keep, float("-inf"))


def swapped_beam_step(log_probs, beam_scores, num_beams):
    scores, parents, tokens = checks.reference_beam_step(log_probs, beam_scores, num_beams)
    return scores, tokens, parents


@pytest.mark.parametrize("check, wrong, message", [
    (checks.check_apply_temperature, lambda logits, t: logits * t, "multiplied"),
    (checks.check_top_k, strict_top_k, "tied"),
    (checks.check_top_p, drops_crossing_token, "crosses"),
    (checks.check_repetition_penalty,
     lambda ids, logits, p: logits.scatter(1, ids, logits.gather(1, ids) / p), "negative"),
    (checks.check_beam_step, swapped_beam_step, "swapped"),
    (checks.check_beam_step,
     lambda lp, bs, n: checks.reference_beam_step(lp, torch.zeros_like(bs), n),
     "running scores"),
])
def test_usual_mistakes_get_a_plain_message(check, wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check(wrong)
