"""Benchmark: decode-step time with and without the KV cache, and the cache's memory.

    .venv/bin/python scripts/bench_kv_cache.py                 # 512 steps, no-cache sampled
    .venv/bin/python scripts/bench_kv_cache.py --stride 1      # every no-cache step, exactly

With the cache, every one of the `--steps` decode steps is timed in the real generation loop.
Without it, step n costs one forward pass over the whole sequence (prompt + n tokens); that cost
is timed at every `--stride`-th step (a forward pass at exactly that length, as the loop would
run it) and interpolated in between, so the O(n^2) loop need not run in full. `--stride 1` runs
the real no-cache loop for every step instead. The output is a table, the speed-up for
`--at` new tokens (total time with against without the cache), and the cache's measured bytes
against 2 x layers x kv_heads x head_dim x tokens x bytes per value. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import minillm  # noqa: E402
from minillm.utils.devices import Timer, now  # noqa: E402
from minillm.generation.kv_cache import KVCache  # noqa: E402
from minillm.generation.step_timing import (decode_step_times, kv_cache_formula_bytes,  # noqa: E402
                                 recompute_step_time)

PROMPT = "The history of the printing press begins in"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=512, help="decode steps to time")
    parser.add_argument("--at", type=int, default=256, help="speed-up reported at this many "
                        "new tokens")
    parser.add_argument("--stride", type=int, default=16, help="time every Nth no-cache step "
                        "(1: run the real no-cache loop)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.at > args.steps or args.stride < 1:
        parser.error("need --at <= --steps and --stride >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tokenizer = minillm.load(args.model, dtype=torch.float32, device=args.device)
    prompt_ids = tokenizer.encode(PROMPT)
    p = len(prompt_ids)
    print(f"{args.model}: prompt {p} tokens, {args.steps} new tokens, device {args.device}, "
          f"{torch.get_num_threads()} threads")

    decode_step_times(model, tokenizer, prompt_ids, 8)  # warm-up
    with Timer(model) as stopwatch:
        cached, tokens = decode_step_times(model, tokenizer, prompt_ids, args.steps)
    print(f"with cache: {args.steps} steps in {stopwatch.seconds:.1f} s")

    # step n (n = 0 is the prefill) sees p + n tokens without a cache
    if args.stride == 1:
        begin = now(model)
        uncached, same = decode_step_times(model, tokenizer, prompt_ids, args.steps,
                                           use_cache=False)
        assert same == tokens, "the cache changed the tokens"
        sampled = list(range(args.steps))
        how = "every step, real no-cache loop"
    else:
        sampled = sorted(set(range(0, args.steps, args.stride)) | {args.steps - 1, args.at - 1})
        begin = now(model)
        measured = [recompute_step_time(model, p + n) for n in sampled]
        uncached = list(np.interp(range(args.steps), sampled, measured))
        how = f"every {args.stride}th step timed, interpolated between"
    print(f"without cache ({how}): {now(model) - begin:.1f} s")

    print(f"\n{'step':>6} {'tokens seen':>12} {'cache ms':>10} {'no cache ms':>12} {'ratio':>7}")
    show = [n for n in sampled if n % max(args.stride, 32) == 0 or n in (1, args.steps - 1)]
    for n in show:
        print(f"{n:>6} {p + n:>12} {1e3 * cached[n]:>10.1f} {1e3 * uncached[n]:>12.1f} "
              f"{uncached[n] / cached[n]:>7.1f}")

    total_cached = sum(cached[:args.at])
    total_uncached = sum(uncached[:args.at])
    speedup = total_uncached / total_cached
    decode_ratio = np.median(uncached[args.at - 16:args.at]) / np.median(cached[args.at - 16:args.at])
    print(f"\n{args.at} new tokens: {total_cached:.2f} s with the cache, {total_uncached:.2f} s "
          f"without -> speed-up {speedup:.1f}x (total); the step at {args.at} tokens is "
          f"{decode_ratio:.1f}x faster with the cache")

    # the cache's memory: measured tensor bytes against the formula
    c = model.config
    tokens_held = p + args.steps
    cache = KVCache.for_model(model, 1, tokens_held)
    with torch.inference_mode():
        model(torch.tensor([prompt_ids + tokens[:args.steps]], device=args.device), cache=cache)
    bytes_per_value = cache.keys[0].element_size()
    formula = kv_cache_formula_bytes(c, tokens_held, bytes_per_value)
    storage = sum(t.untyped_storage().nbytes() for t in cache.keys + cache.values)
    print(f"\nKV cache for {tokens_held} tokens: measured {cache.nbytes:,} bytes "
          f"(allocated storage {storage:,}); formula 2 x {c.n_layers} layers x {c.n_kv_heads} "
          f"kv heads x {c.head_dim} head_dim x {tokens_held} tokens x {bytes_per_value} bytes = "
          f"{formula:,} -> {'equal' if cache.nbytes == formula == storage else 'DIFFERENT'}")

    print(json.dumps({
        "bench": "kv_cache", "model": args.model, "machine": platform.machine(),
        "processor": platform.processor(), "python": platform.python_version(),
        "torch": torch.__version__, "device": args.device, "threads": torch.get_num_threads(),
        "prompt_tokens": p, "steps": args.steps, "stride": args.stride, "at": args.at,
        "seconds_with_cache": round(total_cached, 4),
        "seconds_without_cache": round(total_uncached, 4),
        "speedup_total": round(speedup, 2), "speedup_step": round(float(decode_ratio), 2),
        "cache_step_ms": [round(1e3 * t, 2) for t in cached],
        "no_cache_step_ms_sampled": {n: round(1e3 * uncached[n], 2) for n in sampled},
        "cache_bytes": cache.nbytes, "formula_bytes": formula, "storage_bytes": storage,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
