"""Benchmark chapter 06's engine: continuous against static batching, against transformers'
batched generate(), paged KV memory use, and latency under Poisson arrivals.

    .venv/bin/python scripts/bench_batching.py [--small] [--json results.json] [--threads 1]

One fixed-seed workload (default: 64 requests, prompts of 16-512 tokens cut from the English
corpus, 16-256 new tokens each, EOS ignored so each request runs to its own length), run in the
same process, one after another:

  1. continuous batching (minillm.engine.Engine, paged cache, token budget), at most as many
     sequences at once as static batching runs (--max-num-seqs)
  2. continuous batching with the same KV pool but a looser sequence limit (--pool-max-num-seqs):
     paged blocks hold only the tokens a sequence has, so the pool that static batching fills
     with 16 max-length reservations holds more sequences; the pool, not the limit, bounds them
     (vLLM's argument: memory saved is batch gained)
  3. static batching (the same engine, scheduler="static": a batch ends with its longest request)
  4. transformers' generate() in left-padded batches of --max-num-seqs, on the same weights
  5. KV memory used over reserved during run 1: paged blocks against contiguous preallocation
  6. online: requests arrive as a Poisson process at three rates (fractions of the capacity
     measured in run 1); TTFT and TPOT p50 / p99

`--weights` chooses how the model's weights are stored (fp32, bf16, int8, q4_1: as `minillm serve
--weights` and `minillm.load(..., weights=...)`). Given several, separated by commas, the
benchmark compares them instead: run 1 alone, for each format in turn, `--repeats` times
interleaved (the order rotated each time), with the tokens/s, a decode-only step's time and the
prompt steps' time of each, and its tokens/s over the first format's:

    .venv/bin/python scripts/bench_batching.py --small --max-num-seqs 4 --weights fp32,int8,q4_1

Prints a table and a JSON summary (machine, versions, settings, figures). Nothing is asserted:
on a shared machine timings are noisy, so compare the ratios from one run. `--small` runs 16
requests with prompts of 16-128 and outputs of 16-64 tokens (a few minutes on a 2-core CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

POOL_BOUND = "continuous, pool-bound"  # the continuous run that only the KV pool limits


def weight_formats(text: str) -> list[str]:
    """`--weights fp32,int8` -> ["fp32", "int8"]; anything else is refused with what is allowed."""
    from minillm.tools.server.options import SERVE_WEIGHTS

    formats = [part.strip() for part in text.split(",") if part.strip()]
    wrong = [f for f in formats if f not in SERVE_WEIGHTS]
    if not formats or wrong or len(set(formats)) < len(formats):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of weight formats: give one or more of "
            f"{', '.join(SERVE_WEIGHTS)}, separated by commas, each once")
    return formats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="a quick run (16 short requests)")
    parser.add_argument("--requests", type=int, help="number of requests (default 64; 16 small)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-num-seqs", type=int, default=16,
                        help="batch size of static, transformers and the first continuous run")
    parser.add_argument("--pool-max-num-seqs", type=int, default=48,
                        help="sequence limit of the continuous run bounded by the KV pool "
                             "(0: skip)")
    parser.add_argument("--budget", type=int, default=512, help="tokens per continuous step")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--rates", default="0.3,0.6,0.9",
                        help="online arrival rates, as fractions of the measured capacity")
    parser.add_argument("--threads", type=int, help="torch threads (1 is faster on a busy CPU)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--weights", type=weight_formats, default=["fp32"],
                        help="weight formats, comma-separated: fp32, bf16, int8, q4_1 (default "
                             "fp32); several: compare them on the continuous run")
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved repetitions of a comparison of formats (default 3)")
    parser.add_argument("--skip-hf", action="store_true", help="leave out transformers")
    parser.add_argument("--json", help="also write the summary to this file")
    args = parser.parse_args(argv)

    import torch

    import minillm
    from minillm.engine import Engine
    from minillm.tools.bench.batching import (hf_generate, make_workload, memory_use, run_engine,
                                      run_online, time_split)

    if args.threads:
        torch.set_num_threads(args.threads)
    n = args.requests or (16 if args.small else 64)
    prompts, outputs = ((16, 128), (16, 64)) if args.small else ((16, 512), (16, 256))
    device = minillm.pick_device(args.device)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if len(args.weights) > 1:
        return compare(args, device, n, prompts, outputs)
    model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=device,
                                    weights=args.weights[0])
    work = make_workload(tokenizer, n, prompts, outputs, seed=args.seed)
    longest = prompts[1] + outputs[1]
    num_blocks = args.max_num_seqs * -(-longest // args.block_size)

    def engine(kind, max_num_seqs=args.max_num_seqs, **kw):
        return Engine(model, tokenizer, scheduler=kind, num_blocks=num_blocks,
                      block_size=args.block_size, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=args.budget, record=True, **kw)

    print(f"{n} requests, prompts {prompts[0]}-{prompts[1]} tokens, outputs {outputs[0]}-"
          f"{outputs[1]}, batch {args.max_num_seqs}, {args.weights[0]} weights, device {device}, "
          f"{torch.get_num_threads()} threads", flush=True)
    results = {}
    cont_engine = engine("continuous", enable_prefix_caching=False)
    results["continuous"] = run_engine(cont_engine, work, progress=True)
    if args.pool_max_num_seqs:
        results[POOL_BOUND] = run_engine(
            engine("continuous", args.pool_max_num_seqs, enable_prefix_caching=False), work,
            progress=True)
    results["static"] = run_engine(engine("static"), work, progress=True)
    if not args.skip_hf:
        reference, ref_tokenizer = minillm.load_reference()
        reference.to(device)
        results["transformers"] = hf_generate(reference, ref_tokenizer, work,
                                              args.max_num_seqs, progress=True)
    memory = memory_use(cont_engine.steps, max_len=longest)
    split = time_split(cont_engine.steps)

    capacity = n / results["continuous"]["wall_s"]  # requests per second, offline
    online = []
    n_online = max(8, n // 2)
    for fraction in [float(f) for f in args.rates.split(",")]:
        rate = fraction * capacity
        print(f"online: {n_online} requests at {rate:.3f} req/s ({fraction:.0%} of capacity)",
              flush=True)
        row = run_online(engine("continuous"), work[:n_online], rate, seed=args.seed)
        row.pop("metrics")
        row["fraction_of_capacity"] = fraction
        online.append(row)

    cont = results["continuous"]["tokens_per_s"]
    print()
    static = results["static"]["tokens_per_s"]
    print(f"{'run':<24}{'seqs':>5}{'new tokens':>12}{'seconds':>9}{'tok/s':>8}"
          f"{'over static':>13}{'preemptions':>13}{'rows computed':>15}")
    for name, r in results.items():
        seqs = args.pool_max_num_seqs if name == POOL_BOUND else args.max_num_seqs
        print(f"{name:<24}{seqs:>5}{r['new_tokens']:>12}{r['wall_s']:>9.1f}"
              f"{r['tokens_per_s']:>8.1f}{r['tokens_per_s'] / static:>12.2f}x"
              f"{r.get('preemptions', ''):>13}{r.get('computed_rows') or '':>15}")
    if "transformers" in results:
        print(f"continuous batching over transformers' batched generate(): "
              f"{cont / results['transformers']['tokens_per_s']:.2f}x")
    work_ratio = results["static"]["computed_rows"] / results["continuous"]["computed_rows"]
    print(f"static batching computed {work_ratio:.2f}x the token positions continuous batching did "
          "(padding and ghost rows):\n  where time follows work (a compute-bound CPU) continuous "
          "batching gains about that much at the same batch size")
    print(f"continuous run: {split['prompt_s']:.1f} s in {split['prompt_steps']} steps carrying "
          f"{split['prompt_tokens']} prompt tokens, {split['decode_s']:.1f} s in "
          f"{split['decode_steps']} decode-only steps of {split['decode_rows_mean']:.1f} rows "
          f"on average ({1000 * split['decode_step_s']:.0f} ms each)")
    print(f"KV pool: {num_blocks} blocks of {args.block_size} tokens = {args.max_num_seqs} "
          f"sequences of {longest} tokens (static batching's reservation)")
    print()
    print("KV memory used / reserved (token-weighted over the continuous run's steps):")
    print(f"  paged blocks of {args.block_size}:                 {memory['paged']:.1%}")
    print(f"  contiguous, prompt + max_new_tokens each: {memory['contiguous_per_request']:.1%}")
    print(f"  contiguous, {longest} tokens each (max length):  "
          f"{memory['contiguous_max_length']:.1%}")
    print()
    print(f"{'rate req/s':>10}{'of cap.':>9}{'TTFT p50':>10}{'TTFT p99':>10}{'TPOT p50':>10}"
          f"{'TPOT p99':>10}  (seconds)")
    for row in online:
        print(f"{row['rate']:>10.3f}{row['fraction_of_capacity']:>9.0%}{row['ttft_p50']:>10.3f}"
              f"{row['ttft_p99']:>10.3f}{row['tpot_p50']:>10.3f}{row['tpot_p99']:>10.3f}")

    summary = {
        **machine_and_versions(device),
        "settings": {"requests": n, "weights": args.weights[0], "prompt_lengths": prompts,
                     "output_lengths": outputs,
                     "max_num_seqs": args.max_num_seqs,
                     "pool_max_num_seqs": args.pool_max_num_seqs, "budget": args.budget,
                     "block_size": args.block_size, "num_blocks": num_blocks, "seed": args.seed,
                     "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())},
        "throughput": {k: {f: v for f, v in r.items() if f != "outputs"}
                       for k, r in results.items()},
        "continuous_over_static": cont / static,
        "static_over_continuous_computed_rows": work_ratio,
        "pool_bound_continuous_over_static": (
            results[POOL_BOUND]["tokens_per_s"] / static
            if POOL_BOUND in results else None),
        "continuous_over_transformers": (cont / results["transformers"]["tokens_per_s"]
                                         if "transformers" in results else None),
        "memory_used_over_reserved": memory,
        "continuous_time_split": split,
        "online": online,
    }
    report(summary, args.json)


def machine_and_versions(device) -> dict:
    import torch

    import minillm

    return {"machine": {"platform": platform.platform(), "processor": platform.processor(),
                        "cpus": os.cpu_count(), "device": str(device),
                        "torch_threads": torch.get_num_threads(),
                        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None},
            "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                         "minillm": minillm.__version__}}


def report(summary: dict, path) -> None:
    print()
    print(json.dumps(summary, indent=1, default=str))
    if path:
        with open(path, "w") as f:
            json.dump(summary, f, indent=1, default=str)


def compare(args, device, n, prompts, outputs) -> None:
    """The continuous run once per weight format, `args.repeats` times interleaved."""
    import torch

    import minillm
    from minillm.engine import Engine
    from minillm.tools.bench.batching import compare_weights, make_workload

    models = {fmt: minillm.load("smollm2-135m", device=device, weights=fmt)
              for fmt in args.weights}
    tokenizer = models[args.weights[0]][1]
    work = make_workload(tokenizer, n, prompts, outputs, seed=args.seed)
    num_blocks = args.max_num_seqs * -(-(prompts[1] + outputs[1]) // args.block_size)

    def engine(fmt):
        return lambda: Engine(*models[fmt], num_blocks=num_blocks, block_size=args.block_size,
                              max_num_seqs=args.max_num_seqs,
                              max_num_batched_tokens=args.budget,
                              enable_prefix_caching=False, record=True)

    print(f"{n} requests, prompts {prompts[0]}-{prompts[1]} tokens, outputs {outputs[0]}-"
          f"{outputs[1]}, batch {args.max_num_seqs}, continuous batching, device {device}, "
          f"{torch.get_num_threads()} threads, {args.repeats} interleaved repetitions",
          flush=True)
    rows = compare_weights({fmt: engine(fmt) for fmt in args.weights}, work, args.repeats)
    first = args.weights[0]

    def cell(s, scale=1.0, digits=1):
        return (f"{scale * s['median']:.{digits}f} ({scale * s['min']:.{digits}f}-"
                f"{scale * s['max']:.{digits}f})")

    print()
    print(f"{'weights':<9}{'tok/s (min-max)':>22}{f'x {first}':>9}{'decode step ms':>22}"
          f"{'prompt steps s':>20}")
    for fmt, row in rows.items():
        print(f"{fmt:<9}{cell(row['tokens_per_s']):>22}{row['over_first']:>8.2f}x"
              f"{cell(row['decode_step_s'], 1000):>22}{cell(row['prompt_s'], 1, 2):>20}")
    summary = {**machine_and_versions(device),
               "settings": {"requests": n, "prompt_lengths": prompts,
                            "output_lengths": outputs, "max_num_seqs": args.max_num_seqs,
                            "budget": args.budget, "block_size": args.block_size,
                            "num_blocks": num_blocks, "seed": args.seed,
                            "repeats": args.repeats, "weights": args.weights,
                            "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())},
               "weights": rows}
    report(summary, args.json)


if __name__ == "__main__":
    main()
