"""A live latency chart (chapter 05): stream a generation and watch each token's latency arrive.

The chart shows one bar per new token: the first bar is the TTFT (prefill, orange), each later
bar the gap since the previous token (blue), with the running TPOT (the mean of the gaps so far)
as a line. The text grows beside it.

A chart must not time its own drawing. So the generation runs in a thread of its own, where
`minillm.stream` (also `minillm.timed_stream`) stamps each token the moment it is ready on the host (the token is
read back from the device first, so on a GPU the stamp is after the work, not after the launch)
and puts its `TokenEvent` on a queue. The notebook's thread takes the events off the queue and
redraws on a clock of its own, every `redraw_seconds` while something new has arrived, never
between two tokens of the generation loop: a drawing that waits (for the browser, for the
screen) is not in any gap. A drawing that computes in Python would still hold the token loop up,
through the GIL the two threads share, so each frame is written as SVG directly, in about a
millisecond (latency_svg.py), instead of through matplotlib.

    >>> chart = LatencyChart(model, tokenizer, max_new_tokens=48)
    >>> chart                       # in Jupyter: a prompt box, a button, the chart and the text
    >>> chart.run("Tell me a story")  # or from code; returns the Generation (with .metrics)

As in the playground (chapter 04), a "chat template" box, ticked by default when the tokenizer
has one, wraps the prompt as a user's message in the model's chat format, so an instruction is
answered instead of continued.

`plot_latency(metrics, ax)` draws the same chart for any `RequestMetrics`, without widgets.
"""

from __future__ import annotations

import html
import queue
import threading
import time

from ..language import say
from .latency_svg import frame_svg, latency_bars, latency_frame, latency_title
from .readable import finish_reason_text
from .render import new_figure

__all__ = ["LatencyChart", "plot_latency"]


def plot_latency(metrics, ax=None, title: str | None = None, max_tokens: int | None = None):
    """Per-token latency of one request on `ax` with matplotlib (a new figure when None): token
    1's bar is the TTFT (orange), each later token's bar the gap after the previous one (blue),
    the running TPOT a line. With `max_tokens` the x-axis spans 1..max_tokens. The live chart
    draws the same picture without matplotlib (latency_svg.py says why). Returns the axes."""
    from matplotlib.ticker import MaxNLocator

    if ax is None:
        ax = new_figure(6, 3.4).subplots()
    times, running, clip = latency_bars(metrics)
    n = len(times)
    if n:
        ax.bar([1], times[:1], color="tab:orange", label=f"TTFT {times[0]:.0f} ms")
    if n > 1:
        ax.bar(range(2, n + 1), times[1:], color="tab:blue",
               label=say("gap after the previous token", "与上一个词元的间隔"))
        ax.plot(range(2, n + 1), running, color="black", lw=1.5,
                label=say("running TPOT {ms:.1f} ms", "累计 TPOT {ms:.1f} ms", ms=running[-1]))
    if clip is not None:  # keep the decode bars readable when the TTFT towers over them
        ax.set_ylim(0, clip)
        ax.annotate(f"TTFT {times[0]:.0f} ms ↑", (1.5, clip * 0.92), ha="left", fontsize=8,
                    color="tab:orange")
    if max_tokens or n:
        ax.set_xlim(0.4, max(max_tokens or 0, n) + 0.6)
    else:
        ax.set_ylim(0, 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(say("new token", "新词元"))
    ax.set_ylabel(say("milliseconds", "毫秒"))
    ax.set_title(title or latency_title(metrics), fontsize=10)
    if n:  # below the axes, never over the bars
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=3, fontsize=8,
                  frameon=False)
    return ax


class _Done:
    """What the generation thread puts on the queue last: the result, or the error."""

    def __init__(self, result=None, error: BaseException | None = None):
        self.result, self.error = result, error


class LatencyChart:
    """A prompt box, a Generate button, a live chart of per-token latency and the text."""

    def __init__(self, model, tokenizer, prompt: str = "Tell me about the Moon.",
                 redraw_seconds: float = 0.2, chat: bool | None = None, **fields):
        import ipywidgets as w

        if isinstance(redraw_seconds, bool) or not isinstance(redraw_seconds, (int, float)) \
                or not 0 < redraw_seconds <= 0.25:
            raise ValueError(f"redraw_seconds must be a number from 0 (excluded) to 0.25, so the "
                             f"chart redraws at least 4 times a second; got {redraw_seconds!r}")
        has_template = getattr(tokenizer, "chat_template", None) is not None
        if chat is None:
            chat = has_template
        elif not isinstance(chat, bool):
            raise ValueError(f"chat must be True, False or None (use the template when the "
                             f"tokenizer has one), got {chat!r}")
        elif chat and not has_template:
            raise ValueError("chat=True needs a tokenizer with a chat template; this one has "
                             "none: pass chat=False to send the prompt as raw text")
        self.model, self.tokenizer, self.fields = model, tokenizer, fields
        self.fields.setdefault("max_new_tokens", 48)
        self.redraw_seconds = redraw_seconds
        self.prompt = w.Text(value=prompt, description=say("prompt", "提示词"),
                             layout=w.Layout(width="60%"))
        self.button = w.Button(description=say("Generate", "生成"), button_style="primary")
        self.chat = w.Checkbox(value=chat, disabled=not has_template, indent=False,
                               description=say("chat template", "对话模板"),
                               layout=w.Layout(width="130px"))
        self.chart = w.HTML(layout=w.Layout(width="600px"))
        self.text = w.HTML(layout=w.Layout(width="360px"))
        self.stats = w.HTML(layout=w.Layout(width="960px"))
        self.button.on_click(lambda _: self.run())
        self.widget = w.VBox([w.HBox([self.prompt, self.button, self.chat]),
                              w.HBox([self.chart, self.text]), self.stats])
        self.result = None
        self.redraws = 0
        self.draw_times: list[float] = []  # when each redraw of the last run started
        self._show([], "", "")

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    def draw_chart(self, metrics) -> str:
        """One frame of `metrics` as HTML: about a millisecond of work (latency_svg.py)."""
        frame = latency_frame(metrics, self.fields["max_new_tokens"])
        return f'<div class="minillm-chart" data-chart="latency">{frame_svg(frame)}</div>'

    def _show(self, events, text: str, state: str, final=None):
        from ...utils.devices import model_device
        from ...measure.metrics import RequestMetrics

        self.draw_times.append(time.perf_counter())
        metrics = final.metrics if final is not None else \
            RequestMetrics(0.0, tuple(e.time for e in events))
        self.chart.value = self.draw_chart(metrics)
        self.text.value = (f"<div style='white-space:pre-wrap;word-break:normal;"
                           f"overflow-wrap:break-word;font-family:monospace;font-size:12px'>"
                           f"{html.escape(text)}</div>")
        line = state
        if metrics.n_tokens:
            tpot = f"{1000 * metrics.tpot:.1f} ms" if metrics.n_tokens > 1 else "—"
            line += say(" · TTFT {ttft:.0f} ms · TPOT {tpot} · device {device}",
                        " · TTFT {ttft:.0f} ms · TPOT {tpot} · 设备 {device}",
                        ttft=1000 * metrics.ttft, tpot=tpot, device=model_device(self.model))
        if final is not None:
            line += " · " + finish_reason_text(final.finish_reason, len(final.token_ids),
                                               final.text)
        elif state:
            line += say(" · {n}/{most} tokens", " · {n}/{most} 个词元", n=metrics.n_tokens,
                        most=self.fields["max_new_tokens"])
        self.stats.value = (f"<div style='white-space:nowrap;overflow:hidden;"
                            f"text-overflow:ellipsis'>{html.escape(line)}</div>")
        self.redraws += 1

    @staticmethod
    def _generate(stream, events: queue.Queue, stop: threading.Event):
        """The generation thread: run the stream (its `on_token` puts each TokenEvent on the
        queue), then put `_Done`."""
        try:
            for _ in stream:
                if stop.is_set():
                    break
            events.put(_Done(stream.result))
        except BaseException as error:  # handed to the notebook's thread, raised there
            events.put(_Done(error=error))

    def run(self, prompt: str | None = None):
        """Generate for `prompt` (the box's text when None), updating the chart as tokens arrive.
        Returns the `Generation`, with `.metrics`."""
        from ...generation.loop import timed_stream

        if prompt is not None:
            self.prompt.value = prompt
        events: queue.Queue = queue.Queue()
        text = self.prompt.value
        if self.chat.value:
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                      add_generation_prompt=True)
        stream = timed_stream(self.model, self.tokenizer, text, on_token=events.put,
                              **self.fields)
        stop = threading.Event()
        worker = threading.Thread(target=self._generate, args=(stream, events, stop),
                                  name="minillm-latency-chart", daemon=True)
        arrived, text, done = [], "", None
        self.draw_times = []
        self.button.disabled = True
        try:
            worker.start()
            self._show(arrived, text, say("generating…", "生成中…"))
            next_draw, fresh = time.perf_counter() + self.redraw_seconds, False
            while done is None:
                # Nothing new: sleep until something arrives. Something new: until the next draw.
                wait = max(next_draw - time.perf_counter(), 0.0) if fresh else 0.5
                try:
                    item = events.get(timeout=wait)
                except queue.Empty:
                    item = None
                while item is not None:
                    if isinstance(item, _Done):
                        done = item
                    else:
                        arrived.append(item)
                        text += item.piece
                        fresh = True
                    item = events.get_nowait() if not events.empty() else None
                if done is None and fresh and time.perf_counter() >= next_draw:
                    next_draw = time.perf_counter() + self.redraw_seconds
                    self._show(arrived, text, say("generating…", "生成中…"))
                    fresh = False
        finally:
            stop.set()
            self.button.disabled = False
        worker.join()
        if done.error is not None:
            self.stats.value = f"<span style='color:#b00'>{html.escape(str(done.error))}</span>"
            raise done.error
        self.result = done.result
        self._show(arrived, self.result.text, say("done", "完成"), final=self.result)
        return self.result
