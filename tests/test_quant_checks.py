"""Chapter 07's checkers: they pass correct answers and name the usual mistakes."""

import pytest
import torch

from minillm.checks import ch07_quantization as checks
from minillm.checks._base import CheckFailed


def q_absmax(x, qmax=127, rounding=torch.round):
    scale = x.abs().max().item() / qmax
    return rounding(x / scale).clamp(-127, 127).to(torch.int8), scale


def dq_absmax(q, scale):
    return q.float() * scale


def q_groups(w, g, levels=15, squeeze=True):
    rows, cols = w.shape
    if cols % g:
        raise ValueError("group size must divide the row")
    x = w.reshape(rows, cols // g, g)
    lo = x.amin(-1, keepdim=True)
    scale = (x.amax(-1, keepdim=True) - lo) / levels
    q = torch.round((x - lo) / scale).clamp(0, 15).reshape(rows, cols)
    return (q, scale.squeeze(-1), lo.squeeze(-1)) if squeeze else (q, scale, lo)


def dq_groups(q, scale, lo):
    rows, n = scale.shape
    return (q.float().reshape(rows, n, -1) * scale[..., None] + lo[..., None]).reshape(rows, -1)


def test_correct_answers_pass(capsys):
    checks.check_absmax_int8(q_absmax, dq_absmax)
    checks.check_int4_groups(q_groups, dq_groups)
    assert capsys.readouterr().out.count("✅") == 2


def test_stubs_say_not_written_yet():
    def stub(*args):
        raise NotImplementedError

    for check in (checks.check_absmax_int8, checks.check_int4_groups):
        with pytest.raises(CheckFailed, match="not written yet"):
            check(stub, stub)


@pytest.mark.parametrize("quantize, message", [
    (lambda x: q_absmax(x, qmax=128), "divide max\\|x\\| by 127"),
    (lambda x: q_absmax(x, rounding=torch.trunc), "truncated towards zero"),
    (lambda x: (torch.round(x * 10).to(torch.int16), 0.1), "torch.int8"),
])
def test_absmax_mistakes_are_named(quantize, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_absmax_int8(quantize, dq_absmax)


def test_int4_mistakes_are_named():
    with pytest.raises(CheckFailed, match="divide \\(max - min\\) by 15"):
        checks.check_int4_groups(lambda w, g: q_groups(w, g, levels=16), dq_groups)
    with pytest.raises(CheckFailed, match="squeeze"):
        checks.check_int4_groups(lambda w, g: q_groups(w, g, squeeze=False), dq_groups)

    def no_check(w, g):
        rows, cols = w.shape
        cut = cols - cols % g
        return q_groups(w[:, :cut], g) if cols % g else q_groups(w, g)

    with pytest.raises(CheckFailed, match="32 does not divide 40"):
        checks.check_int4_groups(no_check, dq_groups)
