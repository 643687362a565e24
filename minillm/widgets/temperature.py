"""Temperature explorer: a slider from 0.01 to 3 redraws the next-token distribution of a prompt.

P_i = e^(z_i / T) / sum_j e^(z_j / T): T < 1 sharpens the distribution, T > 1 flattens it."""

from __future__ import annotations

import math

import torch


@torch.no_grad()
def next_token_logits(model, tokenizer, prompt) -> torch.Tensor:
    """The model's logits (vocab,) for the token after `prompt` (a string or token ids)."""
    ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
    device = next(model.parameters()).device if hasattr(model, "parameters") else "cpu"
    return model(torch.tensor([ids], device=device))[0, -1].float().cpu()


def temperature_table(logits: torch.Tensor, temperature: float, top_n: int = 12) -> dict:
    """The distribution at `temperature`: the `top_n` most likely token ids (ranked by the raw
    logits, so the bars keep their places as T moves), their probabilities, the entropy in bits
    and how many tokens it takes to cover 90% of the probability."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if logits.dim() != 1:
        raise ValueError(f"logits must be one row (vocab,), got shape {tuple(logits.shape)}")
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    ids = torch.topk(logits, min(top_n, logits.numel())).indices
    logp = torch.log2(probs.clamp_min(1e-300))
    entropy = float(-(probs * logp).sum())
    sorted_probs = probs.sort(descending=True).values
    cover90 = int((sorted_probs.cumsum(0) < 0.9).sum()) + 1
    return {"ids": ids.tolist(), "probs": probs[ids].tolist(), "entropy_bits": entropy,
            "max_entropy_bits": math.log2(logits.numel()), "tokens_for_90pct": cover90}


def token_label(tokenizer, token_id: int) -> str:
    return repr(tokenizer.decode([token_id]))[1:-1] or "∅"


def temperature_explorer(model, tokenizer, prompt: str = "The weather today is",
                         temperature: float = 1.0, top_n: int = 12):
    """A FloatSlider (0.01 to 3) over a bar chart of the next-token probabilities."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    logits = next_token_logits(model, tokenizer, prompt)
    slider = w.FloatSlider(value=temperature, min=0.01, max=3.0, step=0.01,
                           description="temperature", continuous_update=False,
                           layout=w.Layout(width="420px"))
    out = w.Output()

    def draw(change=None):
        table = temperature_table(logits, slider.value, top_n)
        labels = [token_label(tokenizer, i) for i in table["ids"]]
        with out:
            out.clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(8, 3.2))
            ax.bar(range(len(labels)), table["probs"], color="tab:blue")
            ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
            ax.set_ylim(0, 1)
            ax.set_ylabel("probability")
            ax.set_title(f"{prompt!r} → next token at T = {slider.value:.2f}: entropy "
                         f"{table['entropy_bits']:.2f} bits, {table['tokens_for_90pct']} tokens "
                         "cover 90%", fontsize=9)
            fig.tight_layout()
            plt.show()

    slider.observe(draw, names="value")
    draw()
    box = w.VBox([slider, out])
    box.draw, box.slider = draw, slider
    return box
