"""minillm's multi-row bf16 and Q4_1 kernels against the path a prompt's rows took before them, at
SmolLM2-135M's shapes, interleaved in one process.

    .venv/bin/python scripts/bench_prefill_kernels.py [--formats bf16,q4_1] [--rows 16,64,512]
        [--threads 1,2] [--repeats 7] [--shapes 576x576,1536x576,576x1536,49152x576]

bf16: gemm_bf16 (a strip of the (out, in) weight widened at a time for gemm_f32's tiles) against
FastLinear's paths before it: PyTorch's bf16 matmul below dispatch.UPCAST_ROWS rows, from there
the whole weight widened to float32 and PyTorch's multiply. Q4_1: gemm_q4_1 (x rounded to int8 per block; from a few rows,
register tiles of 4 weight rows by 4 rows of x) against rebuilding the float32 weight and
PyTorch's multiply (Q41Linear.forward_dequantize, a prefill's path past dispatch.QUANT_MAX_ROWS).
A shape is (out, in); the weights are random (Q4_1: random nibbles, d and m as a model's).

Prints one line per format, shape, rows and threads: the median (min-max) milliseconds of each
path over the repeats (wall clock; the two run in turn, which first alternating) and the
median of the pairwise ratios before/kernel. Nothing is asserted: tests/test_kernels.py holds
the results.

    .venv/bin/python scripts/bench_prefill_kernels.py --model [--formats bf16,q4_1,fp32]
        [--prompt-tokens 512] [--repeats 6]

times instead the course model's whole prefill (`model(ids, logits_to_keep=1)`, one thread),
each format's layers routed with its row limit as dispatch sets it and with the limit before
these kernels (bf16: 1 row; Q4_1: QUANT_MAX_ROWS; fp32, for reference: QUANT_MAX_ROWS rows
through gemm_f32, PyTorch's multiply beyond), in turn: CPU seconds of this thread (the machine
is shared), median (min-max), the first pass of each left out.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from minillm import kernels  # noqa: E402
from minillm.kernels import dispatch  # noqa: E402
from minillm.quant.linear import Q41Linear  # noqa: E402


def q4_1_blocks(rows: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """Random GGUF Q4_1 blocks (rows, k / 32 * 20): d in [0, 0.02), m in (-0.1, 0]."""
    blocks = torch.randint(0, 256, (rows, k // 32, 20), dtype=torch.uint8, generator=gen)
    for at, values in ((0, torch.rand(rows, k // 32, generator=gen) * 0.02),
                       (2, torch.rand(rows, k // 32, generator=gen) * -0.1)):
        blocks[..., at:at + 2] = values.half().view(torch.uint8).view(rows, k // 32, 2)
    return blocks.reshape(rows, -1).contiguous()


def paths(fmt: str, n: int, k: int, gen: torch.Generator):
    """(before, kernel): two functions of x giving the same product, the old way and the new."""
    if fmt == "bf16":
        weight = torch.randn(n, k, generator=gen).to(torch.bfloat16)

        def before(x):  # FastLinear's paths for rows gemv_bf16 does not take
            if x.shape[0] >= dispatch.UPCAST_ROWS:
                return x @ weight.t().to(torch.float32)
            return (x.to(torch.bfloat16) @ weight.t()).to(torch.float32)

        return before, lambda x: kernels.gemm_bf16(x, weight)
    layer = Q41Linear(q4_1_blocks(n, k, gen))
    return layer.forward_dequantize, lambda x: kernels.gemm_q4_1(x, layer.blocks)


def timed(fn, x) -> float:
    start = time.perf_counter()
    fn(x)
    return time.perf_counter() - start


def whole_prefill(formats, prompt_tokens: int, repeats: int) -> None:
    import minillm
    from minillm.kernels import build

    torch.set_num_threads(1)
    level = build.status().level
    limits = {"bf16": (dispatch.BF16_MAX_ROWS, 1), "q4_1": (dispatch.Q4_1_MAX_ROWS,
                                                            dispatch.QUANT_MAX_ROWS),
              "fp32": (dispatch.F32_MAX_ROWS, dispatch.QUANT_MAX_ROWS)}
    ids = torch.randint(0, 49152, (1, prompt_tokens), generator=torch.Generator().manual_seed(0))
    for fmt in formats:
        table, before = limits[fmt]
        now = table[level]
        model, _ = minillm.load("smollm2-135m", weights=fmt)
        routed = [m for m in model.modules() if isinstance(m, dispatch.RoutedLinear)]
        times = {now: [], before: []}
        try:
            with torch.inference_mode():
                for i in range(repeats + 1):
                    for limit in (now, before) if i % 2 else (before, now):
                        table[level] = limit
                        for layer in routed:
                            layer.replan()
                        start = time.thread_time()
                        model(ids, logits_to_keep=1)
                        if i:
                            times[limit].append(time.thread_time() - start)
        finally:
            table[level] = now
        a, b = times[now], times[before]
        print(f"{fmt:5s} {prompt_tokens}-token prefill, CPU s: rows up to {now:,} through the "
              f"kernel {statistics.median(a):.3f} ({min(a):.3f}-{max(a):.3f}) | up to {before} "
              f"{statistics.median(b):.3f} ({min(b):.3f}-{max(b):.3f}) | before/now "
              f"{statistics.median(b) / statistics.median(a):.2f}x", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--formats", default="bf16,q4_1")
    parser.add_argument("--rows", default="16,64,512")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--shapes", default="576x576,1536x576,576x1536,49152x576")
    parser.add_argument("--model", action="store_true",
                        help="time the course model's whole prefill, each limit against the old")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    args = parser.parse_args(argv)
    if not dispatch.cpu_kernels("cpu"):
        raise SystemExit(f"minillm's kernels do not run here ({dispatch.why_not('cpu')}): "
                         f"nothing to compare")
    print(f"minillm's kernels: {kernels.status().label}; torch {torch.__version__}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    if args.model:
        formats = [f.strip() for f in args.formats.split(",") if f.strip()]
        return whole_prefill(formats, args.prompt_tokens, args.repeats)
    gen = torch.Generator().manual_seed(0)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s.strip()]
    for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
        for n, k in shapes:
            before, kernel = paths(fmt, n, k, gen)
            for rows in [int(r) for r in args.rows.split(",") if r.strip()]:
                x = torch.randn(rows, k, generator=gen)
                for threads in [int(t) for t in args.threads.split(",") if t.strip()]:
                    torch.set_num_threads(threads)
                    with torch.inference_mode():
                        before(x), kernel(x)  # warm-up
                        times = {"before": [], "kernel": []}
                        for i in range(args.repeats):
                            order = (("before", before), ("kernel", kernel))
                            for name, fn in order if i % 2 == 0 else order[::-1]:
                                times[name].append(timed(fn, x))
                    b, c = times["before"], times["kernel"]
                    ratio = statistics.median(p / q for p, q in zip(b, c))
                    print(f"{fmt:5s} {n:5d}x{k:<5d} {rows:4d} rows {threads} thr: before "
                          f"{1e3 * statistics.median(b):8.2f} ms ({1e3 * min(b):.2f}-"
                          f"{1e3 * max(b):.2f}) | kernel {1e3 * statistics.median(c):8.2f} ms "
                          f"({1e3 * min(c):.2f}-{1e3 * max(c):.2f}) | before/kernel "
                          f"{ratio:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
