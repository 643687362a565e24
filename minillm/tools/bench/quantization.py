"""The chapter's measurement: every scheme on the same text, prompt and machine, one table.

`benchmark` runs it (the lesson at a small size, `scripts/bench_quantization.py` at full size);
`plot_benchmark` draws memory against perplexity against decode speed.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import torch

from ...utils.devices import Timer
from ...utils.wording import text
from ...quant.measure import evaluate, speed
from ...quant.model import quantize, weight_bytes

# row name -> (scheme, quantize() options). "int8" runs the fused kernel for decode steps;
# "int8 dequant" rebuilds the float weight every call; "int4 g64" uses groups of 64 instead of
# GGUF's 32 (the fp32 weights came from the Q4_1 file, so groups of 32 fit them almost exactly).
ROWS = {
    "fp32": ("fp32", {}),
    "bf16": ("bf16", {}),
    "fp16": ("fp16", {}),
    "int8": ("int8", {}),
    "int8 dequant": ("int8", {"int8_path": "dequantize"}),
    "int4": ("int4", {}),
    "int4 g64": ("int4", {"group_size": 64}),
}
DEFAULT_ROWS = tuple(ROWS)
HELD_OUT = Path(__file__).resolve().parents[3] / "data" / "factbook_europe.txt"


def held_out_ids(tokenizer, n_tokens: int | None = None, path=HELD_OUT) -> list[int]:
    """The first `n_tokens` token ids of the held-out English text (data/factbook_europe.txt)."""
    ids = list(tokenizer.encode(Path(path).read_text(encoding="utf-8")))
    if n_tokens is not None and n_tokens > len(ids):
        raise ValueError(f"the held-out text has {len(ids)} tokens, asked for {n_tokens}")
    return ids[:n_tokens]


class Machine(dict):
    """machine()'s dict (its keys are what scripts/bench_quantization.py writes to JSON), printed
    as one line in the language of minillm.utils.wording."""

    def __str__(self) -> str:
        return text("{cores} cores, {threads} torch threads, {cpu} ({cpu_capability}), Python "
                    "{python}, torch {torch}, load average {load_average_1min}, {time_utc} UTC",
                    "{cores} 个核心，torch 用 {threads} 个线程，{cpu}（{cpu_capability}），Python "
                    "{python}，torch {torch}，平均负载 {load_average_1min}，{time_utc} UTC",
                    **{**self, "load_average_1min": _load(self["load_average_1min"])})


def _load(average) -> str:
    return "n/a" if average is None else f"{average:.2f}"  # no getloadavg on Windows


def machine() -> Machine:
    """What the numbers were measured on."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return Machine({"python": platform.python_version(), "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), "cores": os.cpu_count(),
            "load_average_1min": load, "time_utc": time.strftime("%Y-%m-%d %H:%M:%S",
                                                                 time.gmtime())})


def benchmark(model, tokenizer, rows=DEFAULT_ROWS, *, text_tokens: int = 2048, window: int = 512,
              prompt_tokens: int = 128, new_tokens: int = 32, repeats: int = 1,
              progress: bool = True) -> list[dict]:
    """One dict per row of ROWS: weight bytes (all, and the quantized linear layers alone),
    perplexity on `text_tokens` held-out tokens, max/mean logit error and top-1 agreement
    against fp32 (the first row must be "fp32"), prefill and decode tokens/s."""
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise ValueError(f"unknown row(s) {unknown}; choose from {list(ROWS)}")
    if not rows or rows[0] != "fp32":
        raise ValueError("the first row must be 'fp32': the others are compared with it")
    ids = held_out_ids(tokenizer)
    if len(ids) < text_tokens + prompt_tokens:
        raise ValueError(f"the held-out text has {len(ids)} tokens; asked for {text_tokens} + "
                         f"{prompt_tokens}")
    text, prompt = ids[:text_tokens], ids[-prompt_tokens:]  # the prompt does not overlap the text
    iterator = rows
    if progress:
        from tqdm.auto import tqdm

        from ...utils.wording import text as words  # `text` is the held-out ids here
        iterator = tqdm(rows, desc=words("schemes", "方案"))
    results, reference, done = [], None, {}
    for name in iterator:
        scheme, options = ROWS[name]
        qmodel = model if name == "fp32" else quantize(model, scheme, **options)
        key = (scheme, options.get("group_size"))
        with Timer(qmodel) as evaluating:
            if key in done:  # same weights, another kernel: the same quality numbers
                quality = done[key]
            else:
                quality = evaluate(qmodel, text, window, reference=reference,
                                   keep_logits=name == "fp32")
                done[key] = quality
        eval_s = evaluating.seconds
        if name == "fp32":
            reference = quality.logits
        fast = speed(qmodel, tokenizer, prompt, new_tokens, repeats)
        results.append({
            "row": name, "scheme": scheme, **options,
            "weight_bytes": weight_bytes(qmodel),
            "linear_bytes": weight_bytes(qmodel, linear_only=True),
            "perplexity": quality.perplexity, "scored_tokens": quality.tokens,
            "max_logit_error": 0.0 if name == "fp32" else quality.max_logit_error,
            "mean_logit_error": 0.0 if name == "fp32" else quality.mean_logit_error,
            "top1_agreement": 1.0 if name == "fp32" else quality.top1_agreement,
            "eval_seconds": eval_s, **fast,
        })
        del qmodel
    return results


def table(results: list[dict]) -> str:
    """A Markdown table of `benchmark`'s rows."""
    head = text("| scheme | weights MB | linear MB | perplexity | max logit err | mean logit err "
                "| top-1 agree | prefill tok/s | decode tok/s |",
                "| 方案 | 权重 MB | 线性层 MB | 困惑度 | 最大 logit 误差 | 平均 logit 误差 "
                "| top-1 一致率 | 预填充词元/秒 | 解码词元/秒 |")
    lines = [head, "|" + "---|" * 9]
    for r in results:
        lines.append(f"| {r['row']} | {r['weight_bytes'] / 1e6:.1f} | {r['linear_bytes'] / 1e6:.1f}"
                     f" | {r['perplexity']:.3f} | {r['max_logit_error']:.3f} "
                     f"| {r['mean_logit_error']:.4f} | {100 * r['top1_agreement']:.1f}% "
                     f"| {r['prefill_tokens_per_s']:.1f} | {r['decode_tokens_per_s']:.2f} |")
    return "\n".join(lines)


def plot_benchmark(results: list[dict], title: str = ""):
    """Two panels: weight memory against perplexity, and against decode tokens/s."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    mb = [r["weight_bytes"] / 1e6 for r in results]
    for r, x in zip(results, mb):
        a.scatter(x, r["perplexity"], s=40)
        a.annotate(r["row"], (x, r["perplexity"]), textcoords="offset points", xytext=(4, 4),
                   fontsize=8)
        b.scatter(x, r["decode_tokens_per_s"], s=40)
        b.annotate(r["row"], (x, r["decode_tokens_per_s"]), textcoords="offset points",
                   xytext=(4, 4), fontsize=8)
    memory = text("weight memory (MB)", "权重内存（MB）")
    a.set(xlabel=memory, ylabel=text("perplexity (lower is better)", "困惑度（越低越好）"),
          title=text("memory vs quality", "内存与质量"))
    b.set(xlabel=memory, ylabel=text("decode tokens/s (higher is better)",
                                     "解码词元/秒（越高越好）"),
          title=text("memory vs speed", "内存与速度"))
    for ax in (a, b):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
