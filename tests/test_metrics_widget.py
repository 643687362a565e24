"""The live latency chart: the plot on fixed timestamps, and the widget run headless. The
generation runs in a thread of its own; the chart draws in the caller's thread from a queue, so
a slow drawing never lands inside a token's gap, and it redraws on its own clock."""

import statistics
import time
from xml.etree import ElementTree

import matplotlib
import pytest

matplotlib.use("Agg")

from minillm.measure.metrics import RequestMetrics  # noqa: E402
from minillm.course.widgets.latency import LatencyChart, plot_latency  # noqa: E402
from minillm.course.widgets.latency_svg import frame_svg, latency_frame, nice_step  # noqa: E402
from tests.test_fast import _Tok, _tiny  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"


def test_plot_marks_ttft_and_the_running_tpot():
    m = RequestMetrics(0.0, (1.0, 1.1, 1.3, 1.4))
    ax = plot_latency(m)
    bars = ax.patches
    assert len(bars) == 4
    assert [b.get_x() + b.get_width() / 2 for b in bars] == [1, 2, 3, 4]  # token 1 is the TTFT
    assert bars[0].get_height() == 1000.0
    assert [round(b.get_height()) for b in bars[1:]] == [100, 200, 100]
    running = ax.lines[0].get_ydata()
    assert list(map(round, running)) == [100, 150, 133]
    assert ax.get_ylim()[1] < 1000.0  # the tall TTFT bar is clipped so the gaps stay visible
    assert any("TTFT" in t.get_text() for t in ax.texts)
    assert ax.get_title() == "4 tokens, 2.9 tok/s end to end"
    assert ax.get_xlabel() == "new token" and ax.get_ylabel() == "milliseconds"
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 4]
    assert ticks and all(float(t).is_integer() for t in ticks)
    legend = ax.get_legend()
    assert legend.get_bbox_to_anchor().y1 < ax.get_window_extent().y0  # below the bars


def test_first_frames_have_a_fixed_frame_and_no_nan():
    ax = plot_latency(RequestMetrics(0.0, ()), max_tokens=48)
    assert ax.get_xlim() == (0.4, 48.6) and not ax.patches
    assert ax.get_title() == "waiting for the first token (prefill)…"
    ax = plot_latency(RequestMetrics(0.0, (0.3,)), max_tokens=48)
    assert ax.get_xlim() == (0.4, 48.6) and len(ax.patches) == 1
    assert ax.get_title() == "1 token, 3.3 tok/s end to end"
    assert "nan" not in " ".join(t.get_text() for t in ax.get_legend().get_texts())


def test_a_live_frame_shows_the_same_bars_with_round_axes():
    m = RequestMetrics(0.0, (1.0, 1.1, 1.3, 1.4))
    frame = latency_frame(m, max_tokens=48)
    assert [round(t) for t in frame.times] == [1000, 100, 200, 100]
    assert [round(t) for t in frame.running] == [100, 150, 133]
    assert frame.ttft_clipped and frame.y_top == pytest.approx(320)  # 1.6 x the largest gap
    assert frame.x_ticks[0] == 1 and all(isinstance(t, int) for t in frame.x_ticks)
    assert frame.x_ticks[-1] <= 48 and len(frame.x_ticks) <= 12
    assert frame.y_ticks[0] == 0 and frame.y_ticks[-1] <= frame.y_top
    assert frame.title == "4 tokens, 2.9 tok/s end to end"
    svg = frame_svg(frame)
    root = ElementTree.fromstring(svg)  # well-formed
    bars = {e.get("id"): float(e.get("data-ms")) for e in root.iter(f"{SVG}rect")
            if (e.get("id") or "").startswith("latency-")}
    assert bars == pytest.approx({"latency-ttft": 1000, "latency-bar-2": 100,
                                  "latency-bar-3": 200, "latency-bar-4": 100})
    heights = {e.get("id"): float(e.get("height")) for e in root.iter(f"{SVG}rect")
               if e.get("id") in ("latency-bar-2", "latency-bar-3")}
    assert heights["latency-bar-3"] == pytest.approx(2 * heights["latency-bar-2"], rel=1e-3)
    assert "TTFT 1000 ms ↑" in svg and "running TPOT 133.3 ms" in svg and "nan" not in svg
    empty = frame_svg(latency_frame(RequestMetrics(0.0, ()), 48))
    assert "waiting for the first token (prefill)…" in empty and "latency-ttft" not in empty
    one = latency_frame(RequestMetrics(0.0, (0.3,)), 48)
    assert one.title == "1 token, 3.3 tok/s end to end" and one.y_top >= 300


@pytest.mark.parametrize("span,step", [(1000, 200), (320, 100), (48, 10), (7, 2), (0.9, 0.2)])
def test_nice_steps(span, step):
    assert nice_step(span) == pytest.approx(step)


def test_a_live_frame_takes_about_a_millisecond():
    """The drawing thread holds Python's GIL while it computes a frame, and the generation
    thread waits meanwhile: a frame must be cheap (matplotlib's would take 40-80 ms)."""
    m = RequestMetrics(0.0, tuple(0.3 + 0.03 * i for i in range(300)))
    chart = LatencyChart(_tiny(), _Tok(), max_new_tokens=300)
    seconds = []
    for _ in range(5):
        start = time.perf_counter()
        chart.draw_chart(m)
        seconds.append(time.perf_counter() - start)
    assert statistics.median(seconds) < 0.01


def test_widget_streams_and_draws_headless():
    chart = LatencyChart(_tiny(), _Tok(), prompt="abc", max_new_tokens=12)
    assert "<svg" in chart.chart.value  # a chart before the first run, not a figure's repr
    result = chart.run()
    assert result.metrics.n_tokens == 12
    assert chart.redraws >= 2  # the first frame, then the last
    assert "<svg" in chart.chart.value and "12 tokens," in chart.chart.value
    assert chart.stats.value.count("done · TTFT") == 1
    assert "12 tokens, ended: max_new_tokens reached" in chart.stats.value
    assert "white-space:nowrap" in chart.stats.value and "nan" not in chart.stats.value
    assert not chart.button.disabled
    assert result.text in chart.text.value and "word-break:normal" in chart.text.value


@pytest.mark.parametrize("bad", [0, 1.0, -0.1, True, "0.2"])
def test_redraw_seconds_must_keep_four_redraws_a_second(bad):
    with pytest.raises(ValueError, match="redraw_seconds must be a number from 0"):
        LatencyChart(_tiny(), _Tok(), redraw_seconds=bad)


def test_an_error_in_the_generation_thread_reaches_the_caller():
    chart = LatencyChart(_tiny(), _Tok(), max_new_tokens=4)
    chart.model.forward = _failing
    with pytest.raises(RuntimeError, match="the forward pass broke"):
        chart.run()
    assert not chart.button.disabled and "the forward pass broke" in chart.stats.value


def _failing(*args, **kwargs):
    raise RuntimeError("the forward pass broke")


def _slow_model(seconds_per_pass: float, pause_at: int | None = None, pause: float = 0.0):
    """The tiny model, each forward pass made to take `seconds_per_pass` longer (and pass
    `pause_at` `pause` longer still): a token gap that is known in advance."""
    model = _tiny()
    forward, calls = model.forward, [0]

    def slow_forward(*args, **kwargs):
        calls[0] += 1
        time.sleep(seconds_per_pass + (pause if calls[0] == pause_at else 0.0))
        return forward(*args, **kwargs)

    model.forward = slow_forward
    return model


def _slow_drawing(chart, seconds):
    draw = chart.draw_chart

    def slow(metrics):
        time.sleep(seconds)
        return draw(metrics)

    chart.draw_chart = slow


def _redraws_while_generating(chart, result):
    first, last = result.metrics.token_times[0], result.metrics.token_times[-1]
    return [t for t in chart.draw_times if first <= t <= last], last - first


def test_a_slow_drawing_does_not_land_in_the_token_gaps(capsys):
    """Each pass takes 40 ms more; every drawing is made 200 ms slower (waiting, as a drawing
    waits for a screen). Drawn inside the token loop, each drawing would add 200 ms to a gap;
    drawn from the queue, the gaps stay."""
    gaps = {}
    for label, draw_delay in [("normal drawing", 0.0), ("drawing + 200 ms", 0.2)]:
        chart = LatencyChart(_slow_model(0.04), _Tok(), prompt="abc", max_new_tokens=30)
        if draw_delay:
            _slow_drawing(chart, draw_delay)
        result = chart.run()
        redraws, span = _redraws_while_generating(chart, result)
        gaps[label] = result.metrics.gaps
        with capsys.disabled():
            print(f"\n{label}: median gap {1000 * statistics.median(result.metrics.gaps):.1f} "
                  f"ms, largest {1000 * max(result.metrics.gaps):.1f} ms, "
                  f"{len(redraws)} redraws in {span:.2f} s of tokens "
                  f"({len(redraws) / span:.1f} a second)")
    slow, normal = gaps["drawing + 200 ms"], gaps["normal drawing"]
    assert len(redraws) >= 3  # the slow drawings did happen while the tokens came
    assert max(slow) < 0.04 + 0.1  # no gap holds a 200 ms drawing
    assert statistics.median(slow) < statistics.median(normal) + 0.02


def test_the_chart_redraws_four_times_a_second_also_in_a_short_generation():
    """A whole generation of about 0.6 s: the chart must not wait for a number of tokens, it
    redraws on its own clock (drawing made instant here, so only the schedule is measured)."""
    chart = LatencyChart(_slow_model(0.02), _Tok(), prompt="abc", max_new_tokens=30)
    chart.draw_chart = lambda metrics: f"<svg>{metrics.n_tokens}</svg>"
    result = chart.run()
    span = result.metrics.latency
    assert span < 1.0
    draws = chart.draw_times
    intervals = [b - a for a, b in zip(draws, draws[1:])]
    assert len(draws) >= 4 * span  # at least 4 a second
    assert max(intervals[:-1]) < 0.25 + 0.05  # never a quarter-second without a redraw


def test_the_chart_does_not_redraw_when_nothing_arrives():
    """Pass 5 takes a second longer: while no token arrives, nothing changes and nothing is
    drawn."""
    chart = LatencyChart(_slow_model(0.01, pause_at=5, pause=1.0), _Tok(), prompt="abc",
                         max_new_tokens=8)
    chart.draw_chart = lambda metrics: f"<svg>{metrics.n_tokens}</svg>"
    result = chart.run()
    times = result.metrics.token_times  # perf_counter seconds, as the chart's draw_times
    quiet_from, quiet_to = times[3] + chart.redraw_seconds + 0.05, times[4]
    assert quiet_to - quiet_from > 0.6
    assert not [t for t in chart.draw_times if quiet_from < t < quiet_to]


class _ChatTok(_Tok):
    """The stand-in tokenizer with a chat template that writes what it was given."""

    chat_template = "{{ messages }}"

    def __init__(self):
        self.templated = []

    def apply_chat_template(self, messages, add_generation_prompt=True):
        self.templated.append((messages, add_generation_prompt))
        return f"<user>{messages[0]['content']}</user><assistant>"


def test_the_chat_template_box_wraps_the_prompt_when_ticked():
    tok = _ChatTok()
    chart = LatencyChart(_tiny(), tok, prompt="Write a haiku.", max_new_tokens=3)
    assert chart.chat.value and not chart.chat.disabled  # ticked: the tokenizer has a template
    chat_run = chart.run()
    assert tok.templated == [([{"role": "user", "content": "Write a haiku."}], True)]
    assert chat_run.prompt_token_ids == tok.encode("<user>Write a haiku.</user><assistant>")
    chart.chat.value = False
    raw_run = chart.run()
    assert len(tok.templated) == 1 and raw_run.prompt_token_ids == tok.encode("Write a haiku.")


def test_without_a_chat_template_the_box_is_off_and_cannot_be_forced():
    chart = LatencyChart(_tiny(), _Tok(), max_new_tokens=3)
    assert not chart.chat.value and chart.chat.disabled
    with pytest.raises(ValueError, match="chat=True needs a tokenizer with a chat template"):
        LatencyChart(_tiny(), _Tok(), chat=True)
    with pytest.raises(ValueError, match="chat must be True, False or None"):
        LatencyChart(_tiny(), _ChatTok(), chat="yes")
