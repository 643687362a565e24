"""Measuring what quantization costs: quality (perplexity, logit error) and speed.

    perplexity (困惑度)   exp(mean negative log-likelihood of each next token) on a text: how
                         surprised the model is; lower is better, the same model gives the same
                         number, so two schemes compare directly.
    logit error          |logits(scheme) - logits(fp32)|, maximum and mean over every position
                         and vocabulary entry, on the same tokens.
    top-1 agreement      the share of positions whose most likely next token is the fp32 one.
    tokens/s             prefill: prompt tokens / TTFT; decode: 1 / TPOT, from `minillm.generate`'s
                         `.metrics` (chapter 05).

The text is cut into windows of `window` tokens, each run on its own (no overlap), so memory
stays small; the first token of each window has no prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..utils.devices import model_device


def _windows(token_ids, window: int) -> list[torch.Tensor]:
    if not isinstance(window, int) or isinstance(window, bool) or window < 2:
        raise ValueError(f"window must be an integer >= 2, got {window!r}")
    ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1)
    if ids.numel() < 2:
        raise ValueError(f"need at least 2 tokens to measure perplexity, got {ids.numel()}")
    return [ids[i:i + window] for i in range(0, ids.numel(), window) if ids[i:i + window].numel() > 1]


@dataclass
class Evaluation:
    """One model on one text: perplexity, and errors against reference logits when given."""

    perplexity: float
    tokens: int  # how many next-token predictions were scored
    max_logit_error: float | None = None
    mean_logit_error: float | None = None
    top1_agreement: float | None = None
    logits: list = field(default_factory=list, repr=False)  # per window, when kept


@torch.inference_mode()
def evaluate(model, token_ids, window: int = 512, reference: list | None = None,
             keep_logits: bool = False, progress: bool = False) -> Evaluation:
    """Perplexity of `model` on `token_ids`; with `reference` (the per-window logits of another
    model, such as `evaluate(fp32, ..., keep_logits=True).logits`) also the logit errors and top-1
    agreement against it."""
    chunks = _windows(token_ids, window)
    if reference is not None and len(reference) != len(chunks):
        raise ValueError(f"reference has {len(reference)} windows, the text makes {len(chunks)}; "
                         f"use the same tokens and window")
    if progress:
        from tqdm.auto import tqdm
        chunks = tqdm(chunks, desc="windows", leave=False)
    nll, count, max_err, sum_err, n_err, agree = 0.0, 0, 0.0, 0.0, 0, 0
    kept = []
    for i, chunk in enumerate(chunks):
        logits = model(chunk[None].to(model_device(model)))[0].float().cpu()
        nll += F.cross_entropy(logits[:-1], chunk[1:], reduction="sum").item()
        count += chunk.numel() - 1
        if reference is not None:
            diff = (logits - reference[i]).abs()
            max_err = max(max_err, diff.max().item())
            sum_err += diff.sum().item()
            n_err += diff.numel()
            agree += (logits.argmax(-1) == reference[i].argmax(-1)).sum().item()
        if keep_logits:
            kept.append(logits)
    result = Evaluation(perplexity=math.exp(nll / count), tokens=count, logits=kept)
    if reference is not None:
        positions = n_err // reference[0].shape[-1]
        result.max_logit_error = max_err
        result.mean_logit_error = sum_err / n_err
        result.top1_agreement = agree / positions
    return result


def perplexity(model, token_ids, window: int = 512) -> float:
    """exp(mean negative log-likelihood) of each next token of `token_ids` under `model`."""
    return evaluate(model, token_ids, window).perplexity


def logit_error(model, reference_model, token_ids) -> dict:
    """Max and mean |logits - reference logits| and top-1 agreement on one window of tokens."""
    ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(1, -1)
    with torch.inference_mode():
        a = model(ids.to(model_device(model)))[0].float().cpu()
        b = reference_model(ids.to(model_device(reference_model)))[0].float().cpu()
    diff = (a - b).abs()
    return {"max": diff.max().item(), "mean": diff.mean().item(),
            "top1": (a.argmax(-1) == b.argmax(-1)).float().mean().item()}


def speed(model, tokenizer, prompt_ids, new_tokens: int = 32, repeats: int = 1) -> dict:
    """Prefill and decode tokens/s of `model` with `minillm.generate` (greedy, KV cache), the best
    of `repeats` runs after one short untimed run (first calls build kernels, warm caches, and
    on a GPU load its libraries). `prompt_ids` is a list of token ids; generation does not stop
    at EOS."""
    from ..generation.loop import generate

    generate(model, tokenizer, list(prompt_ids), max_new_tokens=2, ignore_eos=True)  # warm-up
    best = {"prefill_tokens_per_s": 0.0, "decode_tokens_per_s": 0.0}
    for _ in range(repeats):
        out = generate(model, tokenizer, list(prompt_ids), max_new_tokens=new_tokens,
                       ignore_eos=True)
        m = out.metrics
        best["prefill_tokens_per_s"] = max(best["prefill_tokens_per_s"], len(prompt_ids) / m.ttft)
        best["decode_tokens_per_s"] = max(best["decode_tokens_per_s"],
                                          m.decode_tokens_per_second)
    return best



def bytes_moved_per_token(model) -> int:
    """Bytes of memory traffic for the weights in one batch-1 decode step: what
    `minillm.model.memory.bytes_per_token` reads, plus, for each int8 layer whose decode row
    takes the "dequantize" path on the model's device (a GPU: `Int8Linear.decode_path`), the
    float copy of its weight that the call writes and reads back (2 x weights x the
    activations' bytes: 1 + 2 x 4 = 9 bytes a weight in float32 instead of 1)."""
    from ..model.memory import bytes_per_token
    from .linear import Int8Linear

    dtype = getattr(model, "dtype", torch.float32)
    extra = sum(2 * m.qweight.numel() * dtype.itemsize for m in model.modules()
                if isinstance(m, Int8Linear) and m.decode_path(dtype) == "dequantize")
    return bytes_per_token(model) + extra


def int8_decode_paths(model) -> list[str]:
    """The decode paths (`Int8Linear.decode_path`) the model's int8 layers take, each once."""
    from .linear import Int8Linear

    dtype = getattr(model, "dtype", torch.float32)
    return sorted({m.decode_path(dtype) for m in model.modules() if isinstance(m, Int8Linear)})
