"""A live latency chart (chapter 05): stream a generation and watch each token's latency arrive.

The chart shows one bar per new token: the first bar is the TTFT (prefill, marked), each later
bar the gap since the previous token, with the running TPOT (the mean of the gaps so far) as a
line. The text grows beside it. It runs on whatever device the model is on (CUDA, MPS or CPU):
each token is read back to the CPU before it is timed, so the times are real.

    >>> chart = LatencyChart(model, tokenizer, max_new_tokens=48)
    >>> chart                       # in Jupyter: a prompt box, a button, the chart and the text
    >>> chart.run("Tell me a story")  # or from code; returns the Generation (with .metrics)

`plot_latency(metrics, ax)` draws the same chart for any `RequestMetrics`, without widgets.
"""

from __future__ import annotations

import html
import time

__all__ = ["LatencyChart", "plot_latency"]


def plot_latency(metrics, ax=None, title: str | None = None):
    """Per-token latency of one request on `ax` (a new figure when None): TTFT in orange, the
    gaps after it in blue, the running TPOT as a line. Returns the axes."""
    if ax is None:
        from matplotlib.figure import Figure

        ax = Figure(figsize=(6, 3.2)).subplots()
    times = [1000 * metrics.ttft] + [1000 * g for g in metrics.gaps]
    n = len(times)
    if n:
        ax.bar([0], times[:1], color="tab:orange", label=f"TTFT {times[0]:.0f} ms")
        if n > 1:
            ax.bar(range(1, n), times[1:], color="tab:blue", label="gap after the previous token")
            running, total = [], 0.0
            for i, gap in enumerate(times[1:], start=1):
                total += gap
                running.append(total / i)
            ax.plot(range(1, n), running, color="black", lw=1.5,
                    label=f"running TPOT {running[-1]:.1f} ms")
            # Keep the decode bars readable when the TTFT towers over them.
            top = max(times[1:]) * 1.6
            if times[0] > top:
                ax.set_ylim(0, top)
                ax.annotate(f"TTFT {times[0]:.0f} ms ↑", (0, top * 0.92), ha="left",
                            fontsize=8, color="tab:orange")
    ax.set_xlabel("new token")
    ax.set_ylabel("milliseconds")
    ax.set_title(title or f"{n} tokens, {metrics.tokens_per_second:.1f} tok/s end to end"
                 if n else "no tokens yet")
    ax.legend(loc="upper right", fontsize=8)
    return ax


class LatencyChart:
    """A prompt box, a Generate button, a live chart of per-token latency and the text."""

    def __init__(self, model, tokenizer, prompt: str = "Tell me about the Moon.",
                 redraw_seconds: float = 0.25, **fields):
        import ipywidgets as w

        if not isinstance(redraw_seconds, (int, float)) or redraw_seconds < 0:
            raise ValueError(f"redraw_seconds must be a number >= 0, got {redraw_seconds!r}")
        self.model, self.tokenizer, self.fields = model, tokenizer, fields
        self.fields.setdefault("max_new_tokens", 48)
        self.redraw_seconds = redraw_seconds
        self.prompt = w.Text(value=prompt, description="prompt", layout=w.Layout(width="60%"))
        self.button = w.Button(description="Generate", button_style="primary")
        self.chart = w.Output(layout=w.Layout(width="560px"))
        self.text = w.HTML(layout=w.Layout(width="340px"))
        self.stats = w.HTML()
        self.button.on_click(lambda _: self.run())
        self.widget = w.VBox([w.HBox([self.prompt, self.button]),
                              w.HBox([self.chart, self.text]), self.stats])
        self.result = None
        self.redraws = 0

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    def _draw(self, metrics, final: bool = False):
        from IPython.display import clear_output, display
        from matplotlib.figure import Figure

        fig = Figure(figsize=(5.6, 3.0), layout="tight")
        plot_latency(metrics, fig.subplots())
        with self.chart:
            clear_output(wait=True)
            display(fig)
        self.redraws += 1
        state = "done" if final else "generating ..."
        self.stats.value = (f"<b>{state}</b> TTFT {1000 * metrics.ttft:.0f} ms · TPOT "
                            f"{1000 * metrics.tpot:.1f} ms · {metrics.n_tokens} tokens · "
                            f"device {getattr(self.model, 'device', '?')}"
                            if metrics.n_tokens else f"<b>{state}</b>")

    def run(self, prompt: str | None = None):
        """Generate for `prompt` (the box's text when None), updating the chart as tokens arrive.
        Returns the `Generation`, with `.metrics`."""
        from ..generation import timed_stream

        if prompt is not None:
            self.prompt.value = prompt
        stream = timed_stream(self.model, self.tokenizer, self.prompt.value, **self.fields)
        shown, last_draw = "", 0.0
        self.button.disabled = True
        try:
            for piece in stream:
                shown += piece
                self.text.value = f"<pre style='white-space: pre-wrap'>{html.escape(shown)}</pre>"
                if time.perf_counter() - last_draw >= self.redraw_seconds:
                    self._draw(stream.metrics)
                    last_draw = time.perf_counter()
        finally:
            self.button.disabled = False
        self._draw(stream.metrics, final=True)
        self.text.value = (f"<pre style='white-space: pre-wrap'>"
                           f"{html.escape(stream.result.text)}</pre>")
        self.result = stream.result
        return self.result
