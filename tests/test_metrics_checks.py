"""The chapter 05 checkers pass the right answers and name the common mistakes."""

import pytest

from minillm.checks import ch05_metrics as checks
from minillm.checks._base import CheckFailed


def test_right_answers_pass(capsys):
    checks.check_ttft(lambda s, t: t[0] - s)

    def tpot(t):
        if len(t) < 2:
            raise ValueError("one token")
        return (t[-1] - t[0]) / (len(t) - 1)

    checks.check_tpot(tpot)
    checks.check_latency(lambda s, t: t[-1] - s)
    checks.check_predict_latency(lambda a, b, n: a + b * (n - 1))
    checks.check_throughput(lambda reqs: sum(len(t) for _, t in reqs)
                            / (max(t[-1] for _, t in reqs) - min(s for s, _ in reqs)))
    assert capsys.readouterr().out.count("✅") == 5


@pytest.mark.parametrize("check,wrong,message", [
    (checks.check_tpot, lambda t: (t[-1] - t[0]) / len(t), "gaps"),
    (checks.check_tpot, lambda t: (t[-1] - t[0]) / max(len(t) - 1, 1), "ValueError"),
    (checks.check_predict_latency, lambda a, b, n: a + b * n, "n_tokens - 1"),
    (checks.check_latency, lambda s, t: t[-1] - t[0], "first token"),
    (checks.check_ttft, lambda s, t: t[0], "subtract the start"),
    (checks.check_throughput, lambda reqs: sum(len(t) / (t[-1] - s) for s, t in reqs), "overlap"),
])
def test_common_mistakes_are_named(check, wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check(wrong)


def test_an_unwritten_stub_says_so():
    def tpot(t):
        raise NotImplementedError

    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_tpot(tpot)
