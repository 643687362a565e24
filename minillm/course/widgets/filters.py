"""Top-k / top-p / min-p explorer: which tokens each filter keeps, where it cuts, and the
probabilities after renormalising over the kept tokens.

The filters are minillm's own processors, applied in transformers' order: temperature, then
top-k, then top-p, then min-p. So top-p adds up the distribution that top-k left (renormalised),
not the model's raw one, and the line the chart draws is that running sum: the cut falls where it
crosses top_p. min-p keeps the tokens at least min_p times as likely as the most likely one. Every
filter keeps a prefix of the ranking, so "where the cut is" is one number, the count of kept
tokens; when it lies beyond the bars drawn, the chart says so with an arrow, and the panel beside
the bars shows the cut over the whole vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...decoding.processors import (MinPProcessor, ProcessorList, TemperatureProcessor,
                                   TopKProcessor, TopPProcessor)
from .readable import number, percent, plural
from .render import chart_html, new_figure
from ..language import say
from .tokens import bytes_note, has_byte_labels, token_label

KEPT, BY_TOP_K, BY_TOP_P, BY_MIN_P = "", "top-k", "top-p", "min-p"
COLOURS = {KEPT: "tab:blue", BY_TOP_P: "#f5c38f", BY_TOP_K: "lightgrey", BY_MIN_P: "#c9b3e6"}
GIDS = {KEPT: "kept", BY_TOP_K: "topk", BY_TOP_P: "topp",
        BY_MIN_P: "minp"}  # bar ids: filters-bar-kept-3, ...


@dataclass
class FilterView:
    ids: list[int]             # the `show` most likely tokens, most likely first
    probs: list[float]         # their probabilities after temperature, before top-k and top-p
    removed_by: list[str]      # per token: "" (kept), or the first filter that removed it
    renormalised: list[float]  # their probabilities after filtering (0 when removed)
    cumulative: list[float]    # what top-p adds up: the running sum, over the ranking, of the
    #                            distribution after temperature and top-k (renormalised)
    n_after_top_k: int         # tokens of the whole vocabulary that top-k leaves
    n_after_top_p: int         # ... that top-k and top-p leave
    n_kept: int                # ... that survive every filter
    kept_mass: float           # the probability the kept tokens had before renormalising
    vocab_k: list[int]         # ranks 1..vocabulary, spread on a log scale, and the running sum
    vocab_cumulative: list[float]  # top-p adds up at each of them, for the whole-vocabulary panel

    @property
    def kept(self) -> list[bool]:
        return [r == KEPT for r in self.removed_by]

    @property
    def cut(self) -> int:
        """Where the cut is: the tokens ranked before it are kept (it equals `n_kept`, and may
        lie beyond the tokens shown)."""
        return self.n_kept


def filter_view(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0,
                temperature: float = 1.0, show: int = 30, min_p: float = 0.0) -> FilterView:
    """Apply temperature, top-k (0: off), top-p (1.0: off) and min-p (0.0: off) to one row of
    logits (vocab,)."""
    from .temperature import coverage_curve

    if logits.dim() != 1:
        raise ValueError(f"logits must be one row (vocab,), got shape {tuple(logits.shape)}")
    logits = logits.detach().cpu()  # float64 below: on the CPU (Apple's GPUs have none)
    after_t = ProcessorList([TemperatureProcessor(temperature)])(None, logits[None].float())
    after_k = TopKProcessor(top_k)(None, after_t) if top_k else after_t
    after_p = TopPProcessor(top_p)(None, after_k) if top_p < 1.0 else after_k
    after_m = MinPProcessor(min_p)(None, after_p) if min_p > 0.0 else after_p
    before = torch.softmax(after_t[0].double(), dim=-1)
    seen_by_top_p = torch.softmax(after_k[0].double(), dim=-1)
    kept_k, kept_p = torch.isfinite(after_k[0]), torch.isfinite(after_p[0])
    kept = torch.isfinite(after_m[0])
    order = torch.argsort(before, descending=True, stable=True)
    shown = order[:show]
    removed = [KEPT if m else (BY_MIN_P if p else (BY_TOP_P if k else BY_TOP_K))
               for k, p, m in zip(kept_k[shown].tolist(), kept_p[shown].tolist(),
                                  kept[shown].tolist())]
    running = seen_by_top_p[order].cumsum(0).clamp(max=1.0)
    vocab_k, vocab_cumulative = coverage_curve(seen_by_top_p)
    return FilterView(ids=shown.tolist(), probs=before[shown].tolist(), removed_by=removed,
                      renormalised=torch.softmax(after_m[0].double(), dim=-1)[shown].tolist(),
                      cumulative=running[:show].tolist(), n_after_top_k=int(kept_k.sum()),
                      n_after_top_p=int(kept_p.sum()), n_kept=int(kept.sum()),
                      kept_mass=float(before[kept].sum()),
                      vocab_k=vocab_k, vocab_cumulative=vocab_cumulative)


def describe_filters(view: FilterView, top_k: int, top_p: float, temperature: float,
                     min_p: float = 0.0) -> str:
    """The chart's title: how many tokens each step keeps."""
    steps = [f"T = {number(float(temperature))}"]
    steps.append(say("top-k {k} keeps {n:,}", "top-k {k} 保留 {n:,} 个", k=top_k,
                     n=view.n_after_top_k) if top_k else say("top-k off", "top-k 关闭"))
    steps.append(say("top-p {p} keeps {n:,}", "top-p {p} 保留 {n:,} 个", p=number(float(top_p)),
                     n=view.n_after_top_p) if top_p < 1.0 else say("top-p off", "top-p 关闭"))
    if min_p > 0.0:
        steps.append(say("min-p {p} keeps {n:,}", "min-p {p} 保留 {n:,} 个",
                         p=number(float(min_p)), n=view.n_kept))
    return say("{tokens} kept ({steps}), holding {mass} of the probability before renormalising",
               "保留 {n:,} 个词元（{steps_zh}），重新归一化之前它们合计占 {mass} 的概率",
               tokens=plural(view.n_kept, "token"), n=view.n_kept, steps=", then ".join(steps),
               steps_zh="，然后 ".join(steps), mass=percent(view.kept_mass))


def filter_figure(view: FilterView, labels: list[str], top_k: int, top_p: float,
                  temperature: float, min_p: float = 0.0, note: str = ""):
    """Bars for the tokens shown (kept in blue, removed by top-p in orange, by top-k in grey, by
    min-p in lilac, the renormalised probability as a black outline), the running sum top-p adds
    up with its threshold, the cut, and beside them the cut over the whole vocabulary. `note`
    (e.g. what a \\x.. label means) follows the x axis's label."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter

    fig = new_figure(10.5, 4.2)
    bars_ax, vocab_ax = fig.subplots(1, 2, width_ratios=[5, 2])
    sums_ax = bars_ax.twinx()
    x = range(len(view.ids))
    bars = bars_ax.bar(x, view.probs, color=[COLOURS[r] for r in view.removed_by])
    for i, (bar, removed) in enumerate(zip(bars, view.removed_by)):
        bar.set_gid(f"filters-bar-{GIDS[removed]}-{i}")
    bars_ax.bar(x, view.renormalised, fill=False, edgecolor="black", linewidth=0.8)
    top = max(max(view.probs), max(view.renormalised))
    bars_ax.set_ylim(0, top * 1.15)
    bars_ax.yaxis.set_major_formatter(FuncFormatter(lambda p, _: f"{100 * p:.3g}%"))
    bars_ax.set_ylabel(say("probability of the token", "词元的概率"))
    bars_ax.set_xticks(list(x), labels, rotation=60, ha="right", rotation_mode="anchor",
                       fontsize=8)
    bars_ax.set_xlim(-0.6, len(view.ids) - 0.4)
    bars_ax.set_xlabel(say("the {n} most likely tokens at this temperature",
                           "该温度下最可能的 {n} 个词元", n=len(view.ids))
                       + (f"\n{note}" if note else ""))

    sums_ax.plot(x, view.cumulative, color="tab:orange", marker=".", linewidth=1)
    if top_p < 1.0:
        sums_ax.axhline(top_p, color="tab:orange", linestyle=":", linewidth=1)
    sums_ax.set_ylim(0, 1.05)
    sums_ax.yaxis.set_major_formatter(FuncFormatter(lambda p, _: f"{100 * p:.0f}%"))
    sums_ax.set_ylabel(say("running sum that top-p adds up", "top-p 累加的累计概率"),
                       color="tab:orange")

    if view.n_kept <= len(view.ids):
        line = bars_ax.axvline(view.n_kept - 0.5, color="tab:red", linestyle="--")
        line.set_gid("filters-cut")
    else:
        note = bars_ax.annotate(say("cut after token {n:,} →", "在第 {n:,} 个词元之后截断 →",
                                    n=view.n_kept), (0.99, 0.8),
                                xycoords="axes fraction", ha="right", color="tab:red",
                                fontsize=9, bbox={"facecolor": "white", "edgecolor": "tab:red"})
        note.set_gid("filters-cut-beyond")

    vocab_ax.plot(view.vocab_k, view.vocab_cumulative, color="tab:orange")
    if top_p < 1.0:
        vocab_ax.axhline(top_p, color="tab:orange", linestyle=":", linewidth=1)
    if top_k:
        vocab_ax.axvline(top_k, color="grey", linestyle="-", linewidth=1)
    vocab_ax.axvline(view.n_kept, color="tab:red", linestyle="--").set_gid("filters-cut-vocab")
    vocab_ax.set_xscale("log")
    vocab_ax.set_xlim(1, view.vocab_k[-1])
    vocab_ax.set_ylim(0, 1.05)
    vocab_ax.xaxis.set_major_formatter(FuncFormatter(lambda k, _: f"{k:,.0f}"))
    vocab_ax.yaxis.set_major_formatter(FuncFormatter(lambda p, _: f"{100 * p:.0f}%"))
    vocab_ax.set_xlabel(say("rank (whole vocabulary, log)", "排名（整个词表，对数坐标）"))
    vocab_ax.set_ylabel(say("running sum", "累计概率"))
    vocab_ax.set_title(say("cut after token {n:,}", "在第 {n:,} 个词元之后截断", n=view.n_kept),
                       fontsize=9, color="tab:red")

    handles = [Patch(color=COLOURS[KEPT], label=say("kept", "保留")),
               Patch(color=COLOURS[BY_TOP_P], label=say("removed by top-p", "被 top-p 去掉")),
               Patch(color=COLOURS[BY_TOP_K], label=say("removed by top-k", "被 top-k 去掉")),
               *([Patch(color=COLOURS[BY_MIN_P], label=say("removed by min-p", "被 min-p 去掉"))]
                 if min_p else []),
               Patch(fill=False, edgecolor="black",
                     label=say("after renormalising", "重新归一化之后")),
               bars_ax.plot([], [], color="tab:orange", marker=".",
                            label=say("running sum", "累计概率"))[0],
               bars_ax.plot([], [], color="tab:orange", linestyle=":", label="top_p")[0],
               bars_ax.plot([], [], color="tab:red", linestyle="--",
                            label=say("cut", "截断"))[0]]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8,
               frameon=False)
    fig.suptitle(describe_filters(view, top_k, top_p, temperature, min_p),
                 fontsize=10).set_gid(
        "filters-title")
    return fig


def top_k_top_p_explorer(model, tokenizer, prompt: str = "My favourite food is",
                         top_k: int = 0, top_p: float = 0.9, show: int = 25,
                         min_p: float = 0.0, temperature: float = 1.0):
    """Sliders for top-k, top-p, min-p and temperature over the next-token distribution of a
    prompt. The returned box has `.controls`, `.draw()`, `.view` and `.figure` (the chart last
    drawn)."""
    import ipywidgets as w

    from .temperature import next_token_logits

    wide = {"style": {"description_width": "initial"}, "continuous_update": False}
    text = w.Text(value=prompt, description=say("prompt", "提示词"),
                  layout=w.Layout(width="420px"), continuous_update=False)
    k = w.IntSlider(value=top_k, min=0, max=100,
                    description=say("top_k (0: off)", "top_k（0：关闭）"), **wide)
    p = w.FloatSlider(value=top_p, min=0.01, max=1.0, step=0.01,
                      description=say("top_p (1: off)", "top_p（1：关闭）"), **wide)
    m = w.FloatSlider(value=min_p, min=0.0, max=0.5, step=0.01,
                      description=say("min_p (0: off)", "min_p（0：关闭）"), **wide)
    t = w.FloatSlider(value=temperature, min=0.05, max=3.0, step=0.05,
                      description=say("temperature", "温度"), **wide)
    chart = w.HTML()
    box = w.VBox([text, w.HBox([k, p]), w.HBox([m, t]), chart])
    state = {"prompt": None, "logits": None}

    def draw(change=None):
        if state["prompt"] != text.value:
            state["prompt"], state["logits"] = text.value, next_token_logits(model, tokenizer,
                                                                              text.value)
        box.view = filter_view(state["logits"], k.value, p.value, t.value, show, m.value)
        labels = [token_label(tokenizer, i) for i in box.view.ids]
        note = bytes_note() if has_byte_labels(tokenizer, box.view.ids) else ""
        box.figure = filter_figure(box.view, labels, k.value, p.value, t.value, m.value, note)
        chart.value = chart_html(box.figure, "filters")

    for control in (text, k, p, m, t):
        control.observe(draw, names="value")
    draw()
    box.draw, box.chart = draw, chart
    box.controls = {"prompt": text, "top_k": k, "top_p": p, "min_p": m, "temperature": t}
    return box
