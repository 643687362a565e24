"""Temperature explorer: a slider from 0.01 to 3 redraws the next-token distribution of a prompt.

P_i = e^(z_i / T) / sum_j e^(z_j / T): T < 1 sharpens the distribution, T > 1 flattens it.

The chart has to stay readable at both ends: at T = 3 the top tokens hold about 0.1% each and the
rest of the vocabulary holds almost everything, so the bars use a log scale, the rest of the
vocabulary is one more bar, and a coverage curve beside them shows how many tokens it takes to
hold 90% of the probability.
"""

from __future__ import annotations

import math

import torch

from ..language import say
from .readable import number, percent, plural
from .render import chart_html, new_figure
from .tokens import bytes_note, has_byte_labels, token_label

FLOOR = 1e-6  # the log axis starts here; smaller probabilities are drawn at it and labelled


@torch.no_grad()
def next_token_logits(model, tokenizer, prompt) -> torch.Tensor:
    """The model's logits (vocab,) for the token after `prompt` (a string or token ids)."""
    from ...utils.devices import model_device

    ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
    return model(torch.tensor([ids], device=model_device(model)))[0, -1].float().cpu()


def coverage_curve(probs: torch.Tensor, points: int = 200) -> tuple[list[int], list[float]]:
    """How much probability the k most likely tokens hold, at about `points` values of k spread
    evenly on a log scale from 1 to the vocabulary size: (k values, probabilities)."""
    cumulative = probs.cpu().double().sort(descending=True).values.cumsum(0)
    n = cumulative.numel()
    ks = sorted({max(1, round(n ** (i / (points - 1)))) for i in range(points)} | {n})
    return ks, [min(float(cumulative[k - 1]), 1.0) for k in ks]


def temperature_table(logits: torch.Tensor, temperature: float, top_n: int = 12) -> dict:
    """The distribution at `temperature`: the `top_n` most likely token ids (ranked by the raw
    logits, so the bars keep their places as T moves), their probabilities, the probability of
    all other tokens together (`rest`), the entropy in bits, how many tokens it takes to cover
    90% of the probability, and the coverage curve (`coverage_k`, `coverage`)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not temperature > 0:
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}")
    if logits.dim() != 1:
        raise ValueError(f"logits must be one row (vocab,), got shape {tuple(logits.shape)}")
    logits = logits.detach().cpu()  # float64 below: on the CPU (Apple's GPUs have none)
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    ids = torch.topk(logits, min(top_n, logits.numel())).indices
    logp = torch.log2(probs.clamp_min(1e-300))
    entropy = float(-(probs * logp).sum())
    sorted_probs = probs.sort(descending=True).values
    cumulative = sorted_probs.cumsum(0)
    cover90 = min(int((cumulative < 0.9).sum()) + 1, logits.numel())
    shown = probs[ids]
    ks, coverage = coverage_curve(probs)
    return {"ids": ids.tolist(), "probs": shown.tolist(),
            "rest": max(float(1 - shown.sum()), 0.0), "vocab_size": logits.numel(),
            "entropy_bits": entropy, "max_entropy_bits": math.log2(logits.numel()),
            "tokens_for_90pct": cover90, "covered_90": min(float(cumulative[cover90 - 1]), 1.0),
            "coverage_k": ks, "coverage": coverage}


def covers_90(n: int) -> str:
    return say("{tokens} {cover} 90%", "{n:,} 个词元覆盖 90%", tokens=plural(n, "token"),
               cover="covers" if n == 1 else "cover", n=n)


def _percent_axis(axis) -> None:
    """Log-axis ticks as percentages: 0.0001% ... 100%."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda p, _: f"{100 * p:.10g}%"))


def temperature_figure(table: dict, labels: list[str], temperature: float,
                       prompt: str | None = None, note: str = ""):
    """The chart for one `temperature_table`: the top tokens and the rest of the vocabulary as
    bars on a log scale (each labelled with its probability), and the coverage curve. `note`
    (e.g. what a \\x.. label means) follows the x axis's label."""
    from matplotlib.ticker import FuncFormatter

    fig = new_figure(10, 3.8)
    bars_ax, cover_ax = fig.subplots(1, 2, width_ratios=[2, 1])
    n_rest = table["vocab_size"] - len(table["ids"])
    heights = table["probs"] + [table["rest"]]
    names = labels + [say("the other\n{n:,}", "其余\n{n:,} 个", n=n_rest)]
    colours = ["tab:blue"] * len(labels) + ["darkgrey"]
    bars = bars_ax.bar(range(len(heights)), [max(h, FLOOR) for h in heights], color=colours)
    for i, (bar, p) in enumerate(zip(bars, heights)):
        bar.set_gid("temperature-rest" if i == len(labels) else f"temperature-bar-{i}")
        bars_ax.annotate(percent(p) if p >= FLOOR else "≈0",
                         (bar.get_x() + bar.get_width() / 2, max(p, FLOOR)),
                         xytext=(0, 2), textcoords="offset points", ha="center",
                         va="bottom", fontsize=7)
    bars_ax.patch.set_gid("temperature-axes")  # the plot area, which clips the log bars
    bars_ax.set_yscale("log")
    bars_ax.set_ylim(FLOOR, 3)
    _percent_axis(bars_ax.yaxis)
    bars_ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8,
                       rotation_mode="anchor")
    bars_ax.set_xlabel(say("next token (the most likely at T = 1 first)",
                           "下一个词元（按 T = 1 时的概率从高到低）")
                       + (f"\n{note}" if note else ""))
    bars_ax.set_ylabel(say("probability (log scale)", "概率（对数坐标）"))

    n90 = table["tokens_for_90pct"]
    cover_ax.plot(table["coverage_k"], table["coverage"], color="tab:blue")
    cover_ax.axhline(0.9, color="tab:orange", linestyle=":", linewidth=1)
    cover_ax.axvline(n90, color="tab:red", linestyle="--", linewidth=1)
    point, = cover_ax.plot([n90], [table["covered_90"]], "o", color="tab:red", clip_on=False)
    point.set_gid("temperature-cover90")
    cover_ax.set_xscale("log")
    cover_ax.set_xlim(1, table["vocab_size"])
    cover_ax.set_ylim(0, 1.02)
    cover_ax.xaxis.set_major_formatter(FuncFormatter(lambda k, _: f"{k:,.0f}"))
    cover_ax.yaxis.set_major_formatter(FuncFormatter(lambda p, _: f"{100 * p:.0f}%"))
    cover_ax.set_xlabel(say("the k most likely tokens (log scale)",
                            "概率最高的 k 个词元（对数坐标）"))
    cover_ax.set_ylabel(say("probability they hold", "它们合计的概率"))
    cover_ax.set_title(covers_90(n90), fontsize=9, color="tab:red")

    fields = dict(prompt=prompt, t=number(float(temperature)), h=table["entropy_bits"],
                  most=table["max_entropy_bits"])
    fig.suptitle(say("next token after {prompt!r} at T = {t}: entropy {h:.2f} of at most "
                     "{most:.1f} bits", "{prompt!r} 之后的下一个词元，T = {t}：熵为 {h:.2f} "
                     "比特，最多 {most:.1f} 比特", **fields) if prompt else
                 say("next token at T = {t}: entropy {h:.2f} of at most {most:.1f} bits",
                     "下一个词元，T = {t}：熵为 {h:.2f} 比特，最多 {most:.1f} 比特", **fields),
                 fontsize=10)
    return fig


def temperature_explorer(model, tokenizer, prompt: str = "The weather today is",
                         temperature: float = 1.0, top_n: int = 12):
    """A temperature slider (0.01 to 3) over the chart of the next-token probabilities.
    The returned box has `.slider`, `.draw()` and `.figure` (the chart last drawn)."""
    import ipywidgets as w

    logits = next_token_logits(model, tokenizer, prompt)
    top = torch.topk(logits, top_n).indices.tolist()
    labels = [token_label(tokenizer, i) for i in top]
    note = bytes_note() if has_byte_labels(tokenizer, top) else ""
    slider = w.FloatSlider(value=temperature, min=0.01, max=3.0, step=0.01,
                           description=say("temperature T", "温度 T"), continuous_update=False,
                           style={"description_width": "initial"},
                           layout=w.Layout(width="480px"))
    chart = w.HTML()
    box = w.VBox([slider, chart])

    def draw(change=None):
        table = temperature_table(logits, slider.value, top_n)
        box.figure = temperature_figure(table, labels, slider.value, prompt, note)
        chart.value = chart_html(box.figure, "temperature")

    slider.observe(draw, names="value")
    draw()
    box.draw, box.slider, box.chart = draw, slider, chart
    return box
