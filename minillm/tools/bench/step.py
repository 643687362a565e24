"""`python -m minillm bench step`: where one batch-1 decode step's time goes, operation by
operation.

The step is the fast path's fused decode step (minillm/fast/decode.py), the one `bench latency`
and `minillm.generate` run. `timed_step` runs the same step, the same calls on the same layers
in the same order (tests/test_bench_step.py holds its logits and cache equal to the fused
step's), with a timer around each call: per layer the two norms, the fused q/k/v projection,
RoPE, the cache write, attention, the o projection, the two residual adds, the fused gate/up
projection, SiLU·mul and the down projection; per step the id check, the embedding row, the
RoPE angles, the kernel plan, the final norm, the LM head and the cache's advance. What no timer
covers (the loop, attribute lookups, the timers' own calls) is the row "between the ops".

Each figure is the median over many steps of the operation's time in one step (summed over the
layers); the steps stay at one cache length (each is cropped back). The fused step itself is
timed in between, untimed, so the table also says what the timers add. For each matrix multiply:
the bytes of weights it reads and the GB/s that makes, against `read_bandwidth` measured here.
CPU only: a GPU step's operations overlap, so a timer around one would need a sync each.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from ... import kernels
from ...fast.decode import FusedDecode, _linear, _norm
from ...kernels import dispatch
from ...layers.rope import apply_rope
from ...measure.bandwidth import read_bandwidth
from ...model.memory import weight_bytes
from ...utils.validate import check_int
from .options import STEP_FORMATS as FORMATS

# The rows of the table, in the order a step runs them; (name, what it is).
OPS = (("id check", "the token ids are in the vocabulary"),
       ("embed", "the token's embedding row"),
       ("rope angles", "cos and sin of this position"),
       ("kernel plan", "which norms and attention run on minillm's kernels"),
       ("attn norm", "RMSNorm before attention"),
       ("qkv proj", "the fused q, k and v projection"),
       ("rope", "q and k rotated"),
       ("cache write", "the new key and value into the cache"),
       ("attention", "the query over the cached keys and values"),
       ("o proj", "the output projection"),
       ("residual adds", "x + attention, x + feed-forward"),
       ("mlp norm", "RMSNorm before the feed-forward"),
       ("gate_up proj", "the fused gate and up projection"),
       ("silu*mul", "SiLU(gate) * up"),
       ("down proj", "the down projection"),
       ("final norm", "RMSNorm after the last layer"),
       ("lm head", "the logits"),
       ("logits", "the logits as float32 (rows, 1, vocab)"),
       ("cache advance", "the cache counts the new token"))
NAMES = tuple(name for name, _ in OPS)
INDEX = {name: i for i, name in enumerate(NAMES)}
BETWEEN = "between the ops"


def _timed(spent: list, i: int, f, *args):
    """f(*args), its time added to spent[i]."""
    start = time.perf_counter()
    out = f(*args)
    spent[i] += time.perf_counter() - start
    return out


def _splits_residual(layer, x: torch.Tensor) -> bool:
    """Whether `_linear(layer, x, residual)` is the layer's own product and then `add_`: a few
    float32 rows through its kernel (decode.py's first branch). Otherwise the residual is added
    inside the multiply (addmm) or by the module's path, and the two are timed as one."""
    return x.dtype is torch.float32 and x.shape[0] <= getattr(layer, "few_rows_max", 0)


def _project_add(spent, name: str, layer, x, residual):
    """layer(x) + residual, the product and the add timed apart where they are apart."""
    if _splits_residual(layer, x):
        y = _timed(spent, INDEX[name], _linear, layer, x)
        return _timed(spent, INDEX["residual adds"], y.add_, residual)
    return _timed(spent, INDEX[name], _linear, layer, x, residual)


def _token_ids(input_ids, model):
    ids = input_ids.to(model.device)[:, 0]
    vocab = model.config.vocab_size
    if bool(((ids < 0) | (ids >= vocab)).any()):
        bad = ids[(ids < 0) | (ids >= vocab)][0].item()
        raise ValueError(f"token id {bad} is out of range: the vocabulary has {vocab} ids "
                         f"(0 to {vocab - 1})")
    return ids


def _angles(model, pos, x):
    return model.rotary(torch.full((1, 1), pos, device=x.device), x.dtype)


def _rope_joint(qkv, rows, nq, nkv, hd, cos, sin):
    qk = apply_rope(qkv[:, :(nq + nkv) * hd].view(rows, 1, nq + nkv, hd), cos, sin)
    return qk[:, :, :nq], qk[:, :, nq:]


def _rope_apart(attn, qkv, rows, nq, nkv, hd, cos, sin):
    q, k = attn.qk_norm(qkv[:, :nq * hd].view(rows, 1, nq, hd),
                        qkv[:, nq * hd:(nq + nkv) * hd].view(rows, 1, nkv, hd))
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


def _write_cache(keys, values, k, qkv, rows, nq, nkv, hd, pos):
    keys[:, :, pos] = k[:, 0]
    values[:, :, pos] = qkv[:, (nq + nkv) * hd:].view(rows, nkv, hd)


def _attend(plan, q, keys, values, rows, nq, nkv, hd, pos):
    if plan.attention:
        return kernels.decode_attention(q.reshape(rows, nq, hd), keys, values,
                                        pos + 1).view(rows, nq * hd)
    return F.scaled_dot_product_attention(
        q.reshape(rows, nkv, nq // nkv, hd), keys[:, :, :pos + 1],
        values[:, :, :pos + 1]).reshape(rows, nq * hd)


def _silu_mul(gate_up):
    f = gate_up.shape[1] // 2
    return F.silu(gate_up[:, :f]).mul_(gate_up[:, f:])


def timed_step(fused: FusedDecode, input_ids: torch.Tensor, cache, spent: list) -> torch.Tensor:
    """`fused(input_ids, cache)` with each operation's seconds added to spent[INDEX[name]]."""
    model = fused.model
    ids = _timed(spent, INDEX["id check"], _token_ids, input_ids, model)
    pos = cache.length
    x = _timed(spent, INDEX["embed"], model.embed, ids)
    rows = x.shape[0]
    cos, sin = _timed(spent, INDEX["rope angles"], _angles, model, pos, x)
    plan = _timed(spent, INDEX["kernel plan"], dispatch.decode_step, x, cache.keys[0])
    norm_kernel = plan.norm
    for i, layer in enumerate(fused.layers):
        attn = layer.attn
        nq, nkv, hd = attn.n_heads, attn.n_kv_heads, attn.head_dim
        h = _timed(spent, INDEX["attn norm"], _norm, layer.attn_norm, x, norm_kernel)
        qkv = _timed(spent, INDEX["qkv proj"], _linear, layer.qkv, h)
        if layer.joint_rope:
            q, k = _timed(spent, INDEX["rope"], _rope_joint, qkv, rows, nq, nkv, hd, cos, sin)
        else:
            q, k = _timed(spent, INDEX["rope"], _rope_apart, attn, qkv, rows, nq, nkv, hd,
                          cos, sin)
        keys, values = cache.keys[i], cache.values[i]
        _timed(spent, INDEX["cache write"], _write_cache, keys, values, k, qkv, rows, nq, nkv,
               hd, pos)
        out = _timed(spent, INDEX["attention"], _attend, plan, q, keys, values, rows, nq, nkv,
                     hd, pos)
        x = _project_add(spent, "o proj", layer.o, out, x)
        h = _timed(spent, INDEX["mlp norm"], _norm, layer.mlp_norm, x, norm_kernel)
        gate_up = _timed(spent, INDEX["gate_up proj"], _linear, layer.gate_up, h)
        act = _timed(spent, INDEX["silu*mul"], _silu_mul, gate_up)
        x = _project_add(spent, "down proj", layer.down, act, x)
    _timed(spent, INDEX["cache advance"], cache.advance, 1)
    h = _timed(spent, INDEX["final norm"], _norm, model.norm, x, norm_kernel)
    logits = _timed(spent, INDEX["lm head"], model.lm_head, h)
    return _timed(spent, INDEX["logits"], _as_logits, logits)


def _as_logits(logits):
    return logits.float()[:, None, :]


def matmul_bytes(fused: FusedDecode) -> dict[str, int]:
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

    fused = model.__dict__.get("fused_decode")
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
        timed, walls, untimed = [], [], []
        for rep in range(steps + 3):  # the first three warm up
            spent = [0.0] * len(NAMES)
            for way in ((0, 1) if rep % 2 else (1, 0)):
                start = time.perf_counter()
                if way == 0:
                    timed_step(fused, token, cache, spent)
                else:
                    fused(token, cache)
                elapsed = time.perf_counter() - start
                cache.crop(context)
                if rep >= 3:
                    (walls if way == 0 else untimed).append(elapsed)
            if rep >= 3:
                timed.append(spent)
            if progress and rep and rep % 50 == 0:
                progress(f"{rep}/{steps} steps")
    ops = {name: statistics.median(s[i] for s in timed) for i, name in enumerate(NAMES)}
    between = [w - sum(s) for w, s in zip(walls, timed)]
    return {"ops": ops, "between": statistics.median(between),
            "between_min": min(between), "step_timed": statistics.median(walls),
            "step": statistics.median(untimed),
            "step_spread": [min(untimed), max(untimed)], "steps": steps, "context": context,
            "layers": len(fused.layers), "matmul_bytes": matmul_bytes(fused),
            "per_step": [{"wall": w, "ops": s} for w, s in zip(walls, timed)]}


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
        f"medians of {figures['steps']} steps at {figures['context']} cached tokens, "
        f"{figures['layers']} layers summed; the step untimed: {1e3 * figures['step']:.3f} ms "
        f"({1e3 * low:.3f}-{1e3 * high:.3f}), timed: {1e3 * figures['step_timed']:.3f} ms (the "
        f"timers add {100 * (figures['step_timed'] / figures['step'] - 1):.0f}%); "
        f"read bandwidth {bandwidth / 1e9:.1f} GB/s")
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
        figures = measure(model, steps=steps, context=context, progress=progress)
        bandwidth = read_bandwidth("cpu")
        threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    return {"model": str(model_name), "weights": weights, "threads": threads,
            "bandwidth": bandwidth, "figures": figures, "load_average_1min": load,
            "torch": torch.__version__, "kernels": kernels.available()}


def report_table(report: dict) -> str:
    title = (f"{report['model']} {report['weights']}, batch 1, {report['threads']} thread(s), "
             f"minillm's kernels {'on' if report['kernels'] else 'off'}, load average "
             f"{report['load_average_1min']}")
    return table(report["figures"], report["bandwidth"], title)


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
