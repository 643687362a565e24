"""The live latency chart: the plot on fixed timestamps, and the widget run headless."""

import matplotlib

matplotlib.use("Agg")

from minillm.metrics import RequestMetrics  # noqa: E402
from minillm.widgets.latency import LatencyChart, plot_latency  # noqa: E402
from tests.test_fast import _Tok, _tiny  # noqa: E402


def test_plot_marks_ttft_and_the_running_tpot():
    m = RequestMetrics(0.0, (1.0, 1.1, 1.3, 1.4))
    ax = plot_latency(m)
    bars = ax.patches
    assert len(bars) == 4
    assert bars[0].get_height() == 1000.0  # the TTFT bar
    assert [round(b.get_height()) for b in bars[1:]] == [100, 200, 100]
    running = ax.lines[0].get_ydata()
    assert list(map(round, running)) == [100, 150, 133]
    assert ax.get_ylim()[1] < 1000.0  # the tall TTFT bar is clipped so the gaps stay visible
    assert any("TTFT" in t.get_text() for t in ax.texts)


def test_widget_streams_and_draws_headless():
    chart = LatencyChart(_tiny(), _Tok(), prompt="abc", max_new_tokens=12, redraw_seconds=0)
    result = chart.run()
    assert result.metrics.n_tokens == 12
    assert chart.redraws >= 12  # redrawn as tokens arrived, then once at the end
    assert "done" in chart.stats.value and "TTFT" in chart.stats.value
    assert not chart.button.disabled
