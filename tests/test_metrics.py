"""minillm.measure.metrics: the definitions pinned on fixed timestamps, and the timing of real loops."""

import math

import pytest

import minillm
from minillm.generation.loop import timed_stream
from minillm.measure.metrics import RequestMetrics, TokenClock, predict_latency, throughput


def test_definitions_on_fixed_timestamps():
    m = RequestMetrics(start=10.0, token_times=(10.3, 10.35, 10.40, 10.45, 10.50), prompt_tokens=6)
    assert m.n_tokens == 5
    assert m.ttft == pytest.approx(0.3)
    assert m.tpot == pytest.approx(0.05)  # (10.50 - 10.30) / 4: the first token is left out
    assert m.latency == pytest.approx(0.5)
    assert m.tokens_per_second == pytest.approx(10.0)
    assert m.decode_tokens_per_second == pytest.approx(20.0)
    assert m.prefill_tokens_per_second == pytest.approx(20.0)
    assert m.gaps == pytest.approx([0.05] * 4)
    assert m.latency == pytest.approx(predict_latency(m.ttft, m.tpot, m.n_tokens))


def test_the_first_token_is_left_out_of_tpot():
    # A slow first token (prefill) must not raise TPOT: only the gaps after it count.
    m = RequestMetrics(0.0, (2.0, 2.1, 2.2))
    assert m.tpot == pytest.approx(0.1)
    assert m.decode_tokens_per_second == pytest.approx(10.0)
    assert m.tokens_per_second == pytest.approx(3 / 2.2)


def test_one_or_no_token_has_no_tpot():
    assert math.isnan(RequestMetrics(0.0, (0.5,)).tpot)
    assert RequestMetrics(0.0, (0.5,)).latency == 0.5
    empty = RequestMetrics(1.0, ())
    assert math.isnan(empty.ttft) and empty.latency == 0.0


def test_end_after_the_last_token_counts_in_latency():
    m = RequestMetrics(0.0, (0.2, 0.3), end=0.4)
    assert m.latency == pytest.approx(0.4)


def test_bad_timestamps_are_refused():
    with pytest.raises(ValueError, match="back in time"):
        RequestMetrics(0.0, (0.3, 0.2))
    with pytest.raises(ValueError, match="before the request's start"):
        RequestMetrics(1.0, (0.5,))
    with pytest.raises(TypeError, match="finite"):
        RequestMetrics(0.0, (float("nan"),))
    with pytest.raises(TypeError, match="start"):
        RequestMetrics("0", (1.0,))
    with pytest.raises(ValueError, match="before the last token"):
        RequestMetrics(0.0, (0.3,), end=0.2)
    with pytest.raises(ValueError, match="n_tokens"):
        predict_latency(0.1, 0.01, 0)


def test_throughput_over_overlapping_requests():
    a = RequestMetrics(0.0, (0.5, 0.6, 0.7, 0.8))
    b = RequestMetrics(0.2, (0.6, 1.0))
    t = throughput([a, b])
    assert t.output_tokens == 6 and t.seconds == pytest.approx(1.0)
    assert t.tokens_per_second == pytest.approx(6.0)
    assert t.requests_per_second == pytest.approx(2.0)
    assert t.mean_ttft == pytest.approx((0.5 + 0.4) / 2)
    assert t.mean_tpot == pytest.approx((0.1 + 0.4) / 2)
    with pytest.raises(ValueError):
        throughput([])
    with pytest.raises(TypeError):
        throughput([1.0])


def test_token_clock_stamps_each_new_token_once():
    class Seq:
        def __init__(self):
            self.token_ids, self.prompt_ids = [], [1, 2]

    ticks = iter([0.0, 1.0, 2.0, 3.0])
    clock = TokenClock(clock=lambda: next(ticks))
    rows = [Seq(), Seq()]
    rows[0].token_ids.append(5); rows[1].token_ids.append(6)
    clock.tick(rows)  # t = 1
    rows[0].token_ids.append(7)  # row 1 has finished
    clock.tick(rows)  # t = 2
    a, b = clock.metrics(rows)
    assert a.token_times == (1.0, 2.0) and b.token_times == (1.0,)
    assert a.prompt_tokens == 2


# --- on a small stand-in model ---------------------------------------------------------------------

from tests.test_fast import _Tok, _tiny  # noqa: E402


def test_generate_attaches_metrics_to_every_result():
    model, tok = _tiny(), _Tok()
    out = minillm.generate(model, tok, [1, 2, 3], max_new_tokens=6)
    assert out.metrics.n_tokens == len(out.token_ids) == 6
    assert out.metrics.prompt_tokens == 3
    assert out.metrics.ttft > 0 and out.metrics.tpot > 0
    batch = minillm.generate(model, tok, [[1, 2, 3], [4, 5]], max_new_tokens=4)
    assert [g.metrics.n_tokens for g in batch] == [4, 4]
    assert batch[0].metrics.start == batch[1].metrics.start


def test_timed_stream_pieces_metrics_and_callback():
    model, tok = _tiny(), _Tok()
    events = []
    s = timed_stream(model, tok, [1, 2, 3], max_new_tokens=7, on_token=events.append)
    assert s.metrics.n_tokens == 0  # the clock runs from the call; no token yet
    text = "".join(s)
    assert s.result.text == text
    assert s.result.token_ids == minillm.generate(model, tok, [1, 2, 3], max_new_tokens=7).token_ids
    assert s.result.metrics.n_tokens == 7 == len(events)
    assert [e.index for e in events] == list(range(7))
    assert events[0].gap == pytest.approx(events[0].time)  # the first gap is the TTFT
    assert events[0].time == pytest.approx(s.metrics.ttft)
    with pytest.raises(RuntimeError, match="runs once"):
        list(s)
    with pytest.raises(ValueError, match="one prompt"):
        timed_stream(model, tok, [[1, 2], [3]], max_new_tokens=2)
    with pytest.raises(TypeError, match="on_token"):
        timed_stream(model, tok, [1, 2], on_token=3)


def test_metrics_str_and_dict():
    m = RequestMetrics(0.0, (0.1, 0.2))
    assert "TTFT 100.0 ms" in str(m) and m.as_dict()["new_tokens"] == 2
