"""`python -m minillm bench step`: where one batch-1 decode step's time goes, operation by
operation.

The step is the fast path's fused decode step (minillm/fast/decode.py), the one `bench latency`
and `minillm.generate` run. Each of its operations is one call of a function of decode.py's;
`timers` swaps those functions for timed ones while a measurement runs, so the step timed is
the step itself, not a copy: per layer the two norms, the fused q/k/v projection, RoPE with the
cache write (one kernel), attention, the o projection, the two residual adds, the fused gate/up
projection, SiLU·mul and the down projection; per step the embedding row (with the id check),
the RoPE angles, the kernel plan (with the check of the tensors the kernels take), the final
norm and the LM head. What no timer covers (the loop, attribute lookups, model.forward's check
that the step applies, the cache's advance, the timers' own calls) is the row "between the
ops".

Each figure is an operation's time in one step (summed over the layers), averaged over the
middle half of many steps ranked by their wall time (`_middle_half`: the rows add up to the
step); the steps stay at one cache length (each is cropped back). The step is also run
untimed in between, so the table says what the timers add. Where the step runs its blocks in
one C call (minillm/fast/blocks.py: what `generate` runs there), the operations are timed on
the Python step they replace, and the one call is timed untimed in between as well. For each matrix multiply: the bytes
of weights it reads and the GB/s that makes, against `read_bandwidth` measured here. CPU only:
a GPU step's operations overlap, so a timer around one would need a sync each.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from contextlib import contextmanager, nullcontext

import torch

from ... import kernels
from ...fast import decode
from ...kernels.decode_plan import choose, plan_of
from ...measure.bandwidth import read_bandwidth
from ...model.memory import weight_bytes
from ...utils.validate import check_int
from .options import STEP_FORMATS as FORMATS

# The rows of the table, in the order a step runs them.
NAMES = ("embed", "rope angles", "kernel plan", "attn norm", "qkv proj", "rope+cache write",
         "attention", "o proj", "residual adds", "mlp norm", "gate_up proj", "silu*mul",
         "down proj", "final norm", "lm head")
INDEX = {name: i for i, name in enumerate(NAMES)}
BETWEEN = "between the ops"
# decode.py's function -> the row it is timed in (the norms and projections: by their layer).
TIMED = {"_embed": "embed", "_angles": "rope angles", "_plan": "kernel plan",
         "_rope_cache": "rope+cache write", "_attend": "attention",
         "_silu_mul": "silu*mul", "_head": "lm head", "_norm": None, "_linear": None}


def _timer(spent: list, i: int, f):
    """f, its time added to spent[i] at each call."""
    clock = time.perf_counter

    def timed(*args):
        start = clock()
        out = f(*args)
        spent[i] += clock() - start
        return out

    return timed


def _splits_residual(layer, x: torch.Tensor) -> bool:
    """Whether `decode._linear(layer, x, residual)` is the layer's own product and then `add_`
    (a few float32 rows through its kernel: its first branch). Otherwise the residual is added
    inside the multiply (addmm) or by the module's path, and the two are timed as one."""
    return x.dtype is torch.float32 and x.shape[0] <= getattr(layer, "few_rows_max", 0)


@contextmanager
def timers(fused: decode.FusedDecode, spent: list):
    """While inside, `fused`'s steps add each operation's seconds to spent[INDEX[row]] (its
    blocks run in Python: the one C call has no operations to time)."""
    model = fused.model
    rows = {id(model.norm): "final norm"}
    for layer in fused.layers:
        for name, module in (("attn norm", layer.attn_norm), ("mlp norm", layer.mlp_norm),
                             ("qkv proj", layer.qkv), ("o proj", layer.o),
                             ("gate_up proj", layer.gate_up), ("down proj", layer.down)):
            rows[id(module)] = name
    original = {name: getattr(decode, name) for name in TIMED}
    timed = {name: _timer(spent, INDEX[row], original[name])
             for name, row in TIMED.items() if row}
    norms = {row: _timer(spent, INDEX[row], original["_norm"])
             for row in ("attn norm", "mlp norm", "final norm")}
    products = {row: _timer(spent, INDEX[row], original["_linear"])
                for row in ("qkv proj", "o proj", "gate_up proj", "down proj")}
    add = _timer(spent, INDEX["residual adds"], torch.Tensor.add_)

    def norm(module, x, kernel):
        return norms[rows[id(module)]](module, x, kernel)

    def linear(layer, x, residual=None):
        product = products[rows[id(layer)]]
        if residual is None:
            return product(layer, x)
        if _splits_residual(layer, x):
            return add(product(layer, x), residual)
        return product(layer, x, residual)

    timed.update(_norm=norm, _linear=linear)
    c_blocks, fused.c_blocks = fused.c_blocks, False
    try:
        for name, f in timed.items():
            setattr(decode, name, f)
        yield
    finally:
        fused.c_blocks = c_blocks
        for name, f in original.items():
            setattr(decode, name, f)


def matmul_bytes(fused: decode.FusedDecode) -> dict[str, int]:
    """Bytes of weights each matrix-multiply row of the table reads in one step (all layers)."""
    out = {"qkv proj": 0, "o proj": 0, "gate_up proj": 0, "down proj": 0}
    for layer in fused.layers:
        for name, module in (("qkv proj", layer.qkv), ("o proj", layer.o),
                             ("gate_up proj", layer.gate_up), ("down proj", layer.down)):
            out[name] += weight_bytes(module)
    out["lm head"] = weight_bytes(fused.model.lm_head)
    return out


def measure(model, steps: int = 200, context: int = 128, progress=None) -> dict:
    """Per-operation times of `model`'s fused decode step at batch 1 after `context` cached
    tokens: `steps` timed steps and as many untimed ones, alternated. Returns the figures the
    table shows (seconds)."""
    from ...generation.kv_cache import KVCache

    fused = model.fused_decode
    if fused is None:
        raise ValueError("this model has no fused decode step (minillm.fast gives one to "
                         "Llama-family models: Llama, Qwen2, Qwen3); `bench step` times that step")
    check_int("steps", steps, 3)
    limit = model.config.max_seq_len - 1
    check_int("context", context, 1, limit, allowed=f"an int from 1 to {limit} (the model's "
              f"longest sequence less the new token)")
    cache = KVCache.for_model(model, 1, context + 1)
    prompt = torch.arange(context, device=model.device)[None] % model.config.vocab_size
    token = prompt[:, -1:]
    with torch.inference_mode():
        model(prompt, cache=cache)
        if not fused.applies(token, cache, None, None):
            raise ValueError("the fused decode step does not apply to this model's steps")
        ways = ["timed", "untimed"] + (["one call"] if _one_call(fused, token, cache) else [])
        timed, runs, c_blocks = [], {way: [] for way in ways}, fused.c_blocks
        try:
            for rep in range(steps + 3):  # the first three warm up
                spent = [0.0] * len(NAMES)
                for way in ways[rep % len(ways):] + ways[:rep % len(ways)]:
                    fused.c_blocks = way == "one call"  # timers() keeps the Python step
                    with timers(fused, spent) if way == "timed" else nullcontext():
                        start = time.perf_counter()
                        model(token, cache=cache)  # as generate calls it: forward, the step
                        elapsed = time.perf_counter() - start
                    cache.crop(context)
                    if rep >= 3:
                        runs[way].append(elapsed)
                if rep >= 3:
                    timed.append(spent)
                if progress and rep and rep % 50 == 0:
                    progress(f"{rep}/{steps} steps")
        finally:
            fused.c_blocks = c_blocks
    walls, untimed, one_call = runs["timed"], runs["untimed"], runs.get("one call")
    kept = _middle_half(walls)
    ops = {name: statistics.fmean(timed[k][i] for k in kept) for i, name in enumerate(NAMES)}
    return {"ops": ops,
            "between": statistics.fmean(walls[k] - sum(timed[k]) for k in kept),
            "step_timed": statistics.fmean(walls[k] for k in kept),
            "step": statistics.fmean(untimed[k] for k in _middle_half(untimed)),
            "step_spread": [min(untimed), max(untimed)],
            "step_one_call": (statistics.fmean(one_call[k] for k in _middle_half(one_call))
                              if one_call else None),
            "ops_median": {name: statistics.median(s[i] for s in timed)
                           for i, name in enumerate(NAMES)},
            "steps": steps, "context": context, "layers": len(fused.layers),
            "matmul_bytes": matmul_bytes(fused),
            "per_step": [{"wall": w, "ops": s} for w, s in zip(walls, timed)]}


def _one_call(fused: decode.FusedDecode, token: torch.Tensor, cache) -> bool:
    """Whether `fused`'s step of `token` runs its blocks in one C call (blocks.py; not where
    `fused.c_blocks` is switched off)."""
    x = decode._embed(fused.model, token)
    facts = fused.facts(decode._plan(fused, x, cache.keys[0]), cache, x.shape[0])
    return choose(facts).path == "one C call"


def _middle_half(walls: list) -> list:
    """The indices of the steps ranked in the middle half by wall time (all of them below 4).
    Means over these steps add up (the rows' sum is the step's figure) and a step slowed by
    another process's burst, or a rare fast one, is left out: medians are as robust but do not
    add, and under load the sum of the operations' medians falls short of the step's."""
    order = sorted(range(len(walls)), key=walls.__getitem__)
    quarter = len(walls) // 4
    return order[quarter:len(walls) - quarter]


def table(figures: dict, bandwidth: float, title: str = "") -> str:
    """The figures as a plain-text table: op, ms per token, % of the step, and for the matrix
    multiplies the bytes read and the GB/s achieved against `bandwidth` (bytes/s)."""
    ops, nbytes = figures["ops"], figures["matmul_bytes"]
    total = sum(ops.values()) + figures["between"]
    head = f"{'operation':<17}{'ms/token':>9}{'% step':>8}{'MB read':>9}{'GB/s':>7}{'of bw':>7}"
    lines = ([title] if title else []) + [head, "-" * len(head)]

    def line(name, seconds, extra=""):
        lines.append(f"{name:<17}{1e3 * seconds:>9.3f}{100 * seconds / total:>7.1f}%{extra}")

    for name in NAMES:
        extra = ""
        if name in nbytes:
            rate = nbytes[name] / ops[name] if ops[name] > 0 else float("nan")
            extra = f"{nbytes[name] / 1e6:>9.1f}{rate / 1e9:>7.1f}{100 * rate / bandwidth:>6.0f}%"
        line(name, ops[name], extra)
    line(BETWEEN, figures["between"])
    lines.append("-" * len(head))
    matmul_s = sum(ops[n] for n in nbytes)
    rate = sum(nbytes.values()) / matmul_s
    line("sum", total, f"{sum(nbytes.values()) / 1e6:>9.1f}{rate / 1e9:>7.1f}"
                       f"{100 * rate / bandwidth:>6.0f}%")
    low, high = figures["step_spread"]
    lines.append(
        f"mean of the middle half of {figures['steps']} steps ranked by wall time, at "
        f"{figures['context']} cached tokens, {figures['layers']} layers summed; read "
        f"bandwidth {bandwidth / 1e9:.1f} GB/s")
    one_call = figures.get("step_one_call")
    lines.append(
        f"the step untimed ({'in Python' if one_call else 'as generate runs it'}, "
        f"interleaved): {1e3 * figures['step']:.3f} ms "
        f"(all steps {1e3 * low:.3f}-{1e3 * high:.3f}); timed: "
        f"{1e3 * figures['step_timed']:.3f} ms; untimed less the ops: "
        f"{1e3 * (figures['step'] - sum(ops.values())):.3f} ms (the Python between the ops "
        f"without the timers' own calls)")
    if one_call:
        lines.append(
            f"the step with its blocks in one C call (as generate runs it, interleaved): "
            f"{1e3 * one_call:.3f} ms, {figures['step'] / one_call:.2f}x the Python step's "
            f"speed; the rows above time the Python step's operations")
    lines.append(_what_is_left(figures, total))
    return "\n".join(lines)


def _what_is_left(figures: dict, total: float) -> str:
    """One sentence: the matrix multiplies' share, the LM head's, and the largest other rows."""
    ops, nbytes = figures["ops"], figures["matmul_bytes"]
    matmul = sum(ops[n] for n in nbytes)
    rest = sorted(((s, n) for n, s in ops.items() if n not in nbytes), reverse=True)
    rest = [(figures["between"], BETWEEN), *rest]
    rest.sort(reverse=True)
    largest = ", ".join(f"{n} {100 * s / total:.1f}%" for s, n in rest[:3])
    return (f"matrix multiplies {100 * matmul / total:.0f}% of the step (the LM head alone "
            f"{100 * ops['lm head'] / total:.0f}%); everything else "
            f"{100 * (total - matmul) / total:.0f}%, largest: {largest}")


def run(model_name: str = "smollm2-135m", weights: str = "fp32", threads: int | None = None,
        steps: int = 200, context: int = 128, progress=None) -> dict:
    """Load `model_name` with `weights` on the CPU, measure, and return the report."""
    import minillm

    if weights not in FORMATS:
        raise ValueError(f"unknown weight format {weights!r}; choose from {', '.join(FORMATS)}")
    check_int("threads", threads, 1, allowed="an int >= 1", allow_none=True)
    check_int("steps", steps, 3)
    check_int("context", context, 1)
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        if progress:
            progress(f"loading {model_name} ({weights}) on the CPU ...")
        model, _ = minillm.load(model_name, device="cpu", weights=weights)
        plan = str(plan_of(model))
        figures = measure(model, steps=steps, context=context, progress=progress)
        bandwidth = read_bandwidth("cpu")
        threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    return {"model": str(model_name), "weights": weights, "threads": threads,
            "bandwidth": bandwidth, "figures": figures, "load_average_1min": load,
            "torch": torch.__version__, "kernels": kernels.dispatch.cpu_kernels("cpu"),
            "decode_path": plan, "weight_pages": huge_pages_of(model)}


def huge_pages_of(model) -> str:
    """Where the model's streamed weights lie: how many MB went into 2 MB pages, or why none."""
    from ...fast import huge_pages

    moved = getattr(model, "huge_page_bytes", 0)
    return f"{moved / 1e6:.0f} MB asked for 2 MB pages" if moved else huge_pages.describe()


def report_table(report: dict) -> str:
    title = (f"{report['model']} {report['weights']}, batch 1, {report['threads']} thread(s), "
             f"minillm's kernels {'on' if report['kernels'] else 'off'}, load average "
             f"{report['load_average_1min']}")
    return (table(report["figures"], report["bandwidth"], title)
            + f"\ndecode path as generate runs it: {report['decode_path']}"
            + (f"; weights: {report['weight_pages']}" if "weight_pages" in report else ""))


def run_cli(args) -> int:
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        report = run(args.model, args.weights, args.threads, args.steps, args.context, progress)
    except (ValueError, TypeError) as error:
        print(f"minillm bench step: {error}", file=sys.stderr)
        return 2
    print(report_table(report))
    if args.json:
        summary = {k: v for k, v in report.items() if k != "figures"}
        summary["figures"] = {k: v for k, v in report["figures"].items() if k != "per_step"}
        with open(args.json, "w") as f:
            f.write(json.dumps(summary, sort_keys=True) + "\n")
    return 0
