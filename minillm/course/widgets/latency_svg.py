"""The live latency chart's frames, written as SVG by hand.

Why not matplotlib here: the chart redraws five times a second while the generation runs in
another thread of the same process, and Python runs one thread's bytecode at a time (the GIL).
Whatever the drawing thread computes in Python holds the generation thread up: a matplotlib frame
(40-80 ms of Python) would freeze the token loop for about as long, and the chart would time its
own drawing again. A frame written here costs about a millisecond. `plot_latency` draws the same
picture with matplotlib, for a finished request.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from ..language import say
from .readable import plural

ORANGE, BLUE = "#ff7f0e", "#1f77b4"  # matplotlib's tab:orange and tab:blue, as plot_latency
WIDTH, HEIGHT = 600, 330
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 30, 78  # margins in px around the plot area


def latency_bars(metrics) -> tuple[list[float], list[float], float | None]:
    """(per-token milliseconds: the TTFT then each gap; the running TPOT after each decode
    token; the y-axis top when the TTFT is clipped to keep the gaps readable, else None)."""
    times = [1000 * metrics.ttft] + [1000 * g for g in metrics.gaps] if metrics.n_tokens else []
    running, total = [], 0.0
    for i, gap in enumerate(times[1:], start=1):
        total += gap
        running.append(total / i)
    clip = max(times[1:]) * 1.6 if len(times) > 1 else None
    return times, running, clip if clip is not None and times[0] > clip else None


def latency_title(metrics) -> str:
    n = metrics.n_tokens
    return (say("{tokens}, {speed:.1f} tok/s end to end", "{n} 个词元，端到端 {speed:.1f} tok/s",
                tokens=plural(n, "token"), n=n, speed=metrics.tokens_per_second) if n
            else say("waiting for the first token (prefill)…", "正在等第一个词元（预填充）…"))


def nice_step(span: float, ticks: int = 5) -> float:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving about `ticks` ticks."""
    raw = span / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)


@dataclass
class LatencyFrame:
    times: list[float]        # per token, ms: the TTFT, then each gap
    running: list[float]      # running TPOT, ms, after tokens 2..n
    y_top: float              # the y-axis top, ms
    y_ticks: list[float]
    x_ticks: list[int]        # token numbers, 1-based
    max_tokens: int
    title: str
    ttft_clipped: bool        # the TTFT bar runs past the top (its value is written there)


def latency_frame(metrics, max_tokens: int) -> LatencyFrame:
    """What one frame shows: the bars, the line, round axes with integer token ticks."""
    times, running, clip = latency_bars(metrics)
    n_slots = max(max_tokens, len(times))
    top = clip if clip is not None else max(times, default=0.0) * 1.1 or 100.0
    step = nice_step(top)
    y_top = math.ceil(top / step - 1e-9) * step
    if clip is not None and y_top > clip:  # the clip keeps its place under a round top
        y_top = clip
    y_ticks = [i * step for i in range(int(y_top / step + 1e-9) + 1)]
    x_step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500) if n_slots / s <= 12)
    x_ticks = sorted({1, *range(x_step, n_slots + 1, x_step)})
    return LatencyFrame(times, running, y_top, y_ticks, x_ticks, n_slots,
                        latency_title(metrics), clip is not None)


def _text(x, y, text, size=11, anchor="middle", **attributes) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attributes.items())
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}>'
            f"{html.escape(text)}</text>")


def frame_svg(frame: LatencyFrame) -> str:
    """The frame as an inline `<svg>`: bars with ids `latency-ttft` and `latency-bar-<token>`
    and their milliseconds in `data-ms`, the running TPOT, axes, labels and a key below."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / frame.max_tokens

    def x_of(token: float) -> float:  # the centre of token's slot
        return LEFT + (token - 0.5) * slot

    def y_of(ms: float) -> float:
        return TOP + plot_h * (1 - min(ms, frame.y_top) / frame.y_top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             'style="max-width:100%;height:auto" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, sans-serif">',
             '<rect width="100%" height="100%" fill="white"/>',
             _text(LEFT + plot_w / 2, 18, frame.title, 12, id="latency-title")]
    for ms in frame.y_ticks:
        y = y_of(ms)
        parts.append(f'<line x1="{LEFT - 4}" x2="{LEFT}" y1="{y:.1f}" y2="{y:.1f}" '
                     'stroke="black"/>')
        parts.append(_text(LEFT - 7, y + 4, f"{ms:g}", 10, "end"))
    for token in frame.x_ticks:
        x = x_of(token)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP + plot_h}" '
                     f'y2="{TOP + plot_h + 4}" stroke="black"/>')
        parts.append(_text(x, TOP + plot_h + 16, str(token), 10, class_="latency-xtick"))
    for i, ms in enumerate(frame.times):
        y = y_of(ms)
        bar_id = "latency-ttft" if i == 0 else f"latency-bar-{i + 1}"
        parts.append(f'<rect id="{bar_id}" data-ms="{ms:.3f}" x="{x_of(i + 1) - 0.4 * slot:.2f}" '
                     f'y="{y:.2f}" width="{0.8 * slot:.2f}" height="{TOP + plot_h - y:.2f}" '
                     f'fill="{ORANGE if i == 0 else BLUE}"/>')
    if frame.ttft_clipped:
        parts.append(_text(x_of(1) + 0.6 * slot, TOP + 13, f"TTFT {frame.times[0]:.0f} ms ↑",
                           10, "start", fill=ORANGE))
    if frame.running:
        points = " ".join(f"{x_of(i + 2):.1f},{y_of(ms):.1f}"
                          for i, ms in enumerate(frame.running))
        parts.append(f'<polyline id="latency-tpot" points="{points}" fill="none" '
                     'stroke="black" stroke-width="1.5"/>')
    parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" '
                 'stroke="black" stroke-width="0.8"/>')
    parts.append(_text(LEFT + plot_w / 2, TOP + plot_h + 34, say("new token", "新词元")))
    parts.append(_text(16, TOP + plot_h / 2, say("milliseconds", "毫秒"), transform=f"rotate(-90 16 "
                       f"{TOP + plot_h / 2:.1f})"))
    key = []
    if frame.times:
        key.append((ORANGE, "rect", f"TTFT {frame.times[0]:.0f} ms"))
    if len(frame.times) > 1:
        key.append((BLUE, "rect", say("gap after the previous token", "与上一个词元的间隔")))
        key.append(("black", "line", say("running TPOT {ms:.1f} ms", "累计 TPOT {ms:.1f} ms",
                                           ms=frame.running[-1])))
    x, y = LEFT, HEIGHT - 16
    for colour, shape, label in key:
        parts.append(f'<rect x="{x}" y="{y - 9}" width="16" height="9" fill="{colour}"/>'
                     if shape == "rect" else
                     f'<line x1="{x}" x2="{x + 16}" y1="{y - 4}" y2="{y - 4}" stroke="{colour}" '
                     'stroke-width="1.5"/>')
        parts.append(_text(x + 21, y, label, 10, "start"))
        x += 30 + 6.2 * len(label)
    parts.append("</svg>")
    return "".join(parts)
