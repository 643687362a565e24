"""A speculative speed-up is held to what its tokens per target pass allow: a timing above that
bound is measured again, and if it stays above, shown as disturbed, never as a finding."""

import pytest

from minillm.tools.bench import speculative as bench


def test_the_bound_is_the_tokens_per_pass_with_a_little_slack():
    assert bench.within_bound({"speedup": 2.9, "tokens_per_pass": 3.0})
    assert bench.within_bound({"speedup": 1.15, "tokens_per_pass": 1.0})
    assert not bench.within_bound({"speedup": 2.31, "tokens_per_pass": 1.02})


def test_a_disturbed_row_says_what_it_measured_and_why_it_is_no_finding():
    row = {"speedup": 2.31, "tokens_per_pass": 1.02, "disturbed": True}
    said = bench.speedup_text(row)
    assert said.startswith("disturbed (2.31x measured, above what 1.02 tokens/pass allow")
    assert bench.speedup_text({**row, "disturbed": False}) == "2.31x"


class _Stats:
    acceptance_rate, tokens_per_pass = 0.013, 1.02
    accepted_per_pass = proposed_per_pass = ()


class _Out:
    token_ids, text, stats = [1, 2, 3], "abc", _Stats()


@pytest.mark.parametrize("plain_seconds, disturbed", [
    ([2.31, 2.31, 2.31], True),   # the plain run stays slow: the speed-up stays out of bounds
    ([2.31, 1.0, 1.0], False),    # a second plain run gives the true baseline
])
def test_a_row_above_its_bound_is_timed_again_with_the_plain_row(monkeypatch, plain_seconds,
                                                                  disturbed):
    runs = {"plain": list(plain_seconds), "draft": [1.0, 1.05, 1.1]}

    def timed(fn, device=None):
        kind = fn()
        return _Out(), runs[kind].pop(0), 1.0

    monkeypatch.setattr(bench, "_timed", timed)
    monkeypatch.setattr("minillm.generation.loop.generate", lambda *a, **k: "plain")
    monkeypatch.setattr("minillm.speculative.loop.speculative_generate", lambda *a, **k: "draft")
    monkeypatch.setattr("minillm.generation.agreement.agree", lambda *a: True)
    rows = bench.compare(None, None, [1, 2], {"prompt lookup": object()}, [8], 3)
    row = rows[1]
    assert row["disturbed"] is disturbed
    tries = 3 if disturbed else 2
    assert len(plain_seconds) - len(runs["plain"]) == tries
    assert rows[0]["seconds"] == min(plain_seconds[:tries])
    assert row["speedup"] == pytest.approx(rows[0]["seconds"] / row["seconds"])
