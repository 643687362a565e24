"""Top-k / top-p explorer: which tokens each filter keeps, where it cuts, and the probabilities
after renormalising over the kept tokens. The filters are minillm's own processors, applied in
transformers' order (temperature, then top-k, then top-p)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..decoding.processors import ProcessorList, TemperatureProcessor, TopKProcessor, TopPProcessor


@dataclass
class FilterView:
    ids: list[int]            # the `show` most likely tokens, most likely first
    probs: list[float]        # their probabilities before filtering (after temperature)
    kept: list[bool]          # whether the filters keep each
    renormalised: list[float]  # their probabilities after filtering (0 when removed)
    n_kept: int               # how many tokens of the whole vocabulary survive
    kept_mass: float          # the probability the kept tokens had before renormalising
    cumulative: list[float]   # running sum of `probs`, for top-p's threshold line


def filter_view(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0,
                temperature: float = 1.0, show: int = 30) -> FilterView:
    """Apply temperature, top-k (0: off) and top-p (1.0: off) to one row of logits (vocab,)."""
    if logits.dim() != 1:
        raise ValueError(f"logits must be one row (vocab,), got shape {tuple(logits.shape)}")
    chain = ProcessorList([TemperatureProcessor(temperature)])
    if top_k:
        chain.append(TopKProcessor(top_k))
    if top_p < 1.0:
        chain.append(TopPProcessor(top_p))
    scores = chain(None, logits[None].float())[0]
    before = torch.softmax(logits.double() / temperature, dim=-1)
    after = torch.softmax(scores.double(), dim=-1)
    kept = torch.isfinite(scores)
    order = torch.argsort(before, descending=True)[:show]
    return FilterView(ids=order.tolist(), probs=before[order].tolist(),
                      kept=kept[order].tolist(), renormalised=after[order].tolist(),
                      n_kept=int(kept.sum()), kept_mass=float(before[kept].sum()),
                      cumulative=before[order].cumsum(0).tolist())


def top_k_top_p_explorer(model, tokenizer, prompt: str = "My favourite food is",
                         top_k: int = 0, top_p: float = 0.9, show: int = 25):
    """Sliders for top-k, top-p and temperature over the next-token distribution of a prompt:
    kept tokens in blue, removed in grey, the renormalised probabilities as black outlines, the
    cumulative probability with top-p's line."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    from .temperature import next_token_logits, token_label

    text = w.Text(value=prompt, description="prompt", layout=w.Layout(width="420px"))
    k = w.IntSlider(value=top_k, min=0, max=100, description="top_k (0 off)",
                    continuous_update=False)
    p = w.FloatSlider(value=top_p, min=0.01, max=1.0, step=0.01, description="top_p",
                      continuous_update=False)
    t = w.FloatSlider(value=1.0, min=0.05, max=3.0, step=0.05, description="temperature",
                      continuous_update=False)
    out = w.Output()
    state = {"prompt": None, "logits": None}

    def draw(change=None):
        if state["prompt"] != text.value:
            state["prompt"], state["logits"] = text.value, next_token_logits(model, tokenizer,
                                                                              text.value)
        view = filter_view(state["logits"], k.value, p.value, t.value, show)
        x = range(len(view.ids))
        with out:
            out.clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(9, 3.4))
            colors = ["tab:blue" if kept else "lightgrey" for kept in view.kept]
            ax.bar(x, view.probs, color=colors, label="before (blue kept, grey removed)")
            ax.bar(x, view.renormalised, fill=False, edgecolor="black",
                   label="after renormalising")
            ax.plot(x, view.cumulative, color="tab:orange", marker=".", label="cumulative")
            if p.value < 1.0:
                ax.axhline(p.value, color="tab:orange", linestyle=":", label="top_p")
            shown_kept = sum(view.kept)
            if shown_kept < len(view.ids):
                ax.axvline(shown_kept - 0.5, color="red", linestyle="--", label="cut")
            ax.set_xticks(list(x), [token_label(tokenizer, i) for i in view.ids], rotation=60,
                          ha="right", fontsize=8)
            ax.set_ylim(0, 1.02)
            ax.set_title(f"{view.n_kept} tokens kept, holding {view.kept_mass:.1%} of the "
                         "probability before renormalising", fontsize=9)
            ax.legend(fontsize=7, loc="center right")
            fig.tight_layout()
            plt.show()

    for control in (text, k, p, t):
        control.observe(draw, names="value")
    draw()
    box = w.VBox([text, w.HBox([k, p, t]), out])
    box.draw, box.controls = draw, {"prompt": text, "top_k": k, "top_p": p, "temperature": t}
    return box
