"""minillm's float32 kernels against PyTorch's multiply for a decode step's few rows: every linear
layer of the fast SmolLM2 (one decode step's weights, LM head included) times a batch of rows,
through `FastLinear.few_rows` (kernels.gemv_f32 for one row, kernels.gemm_f32 for more) and
through `torch.addmm` on the same (in, out) matrices, runs interleaved.

    .venv/bin/python scripts/bench_gemm_f32.py [--rows 1,2,4,8,12,16,32,64,512] [--repeats 5]
        [--threads 1]

Prints one line per row count: the median (min-max) milliseconds for all the layers each way,
the arithmetic rate (GFLOP/s) and PyTorch's time over the kernel's. A decode batch of 8-16 rows
is where continuous batching spends its steps (scripts/bench_batching.py).
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1,2,4,8,12,16,32,64,512")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import torch

    import minillm
    from minillm.kernels import dispatch
    from minillm.utils.devices import Timer
    from minillm.fast import FastLinear

    torch.set_num_threads(args.threads)
    limit = dispatch.f32_max_rows() if dispatch.cpu_kernels("cpu") else 0
    if not limit:
        raise SystemExit(f"minillm's float32 kernels do not run here ({dispatch.why_not('cpu')}): "
                         f"nothing to compare")
    model, _ = minillm.load("smollm2-135m")
    layers = [m for m in model.modules() if isinstance(m, FastLinear) and m.few_rows_max]
    weights = sum(layer.in_features * layer.out_features for layer in layers)
    print(f"{len(layers)} float32 layers, {weights / 1e6:.1f}M weights; the kernel takes up to "
          f"{limit} rows; {args.threads} thread(s)")
    for rows in [int(r) for r in args.rows.split(",") if r.strip()]:
        if not 1 <= rows <= limit:
            print(f"{rows} rows: outside 1..{limit}, skipped")
            continue
        xs = {n: torch.randn(rows, n) for n in {layer.in_features for layer in layers}}

        def kernel():
            for layer in layers:
                layer.few_rows(xs[layer.in_features])

        def pytorch():
            for layer in layers:
                if layer._b is None:
                    torch.mm(xs[layer.in_features], layer._w_in_out)
                else:
                    torch.addmm(layer._b, xs[layer.in_features], layer._w_in_out)

        times = {"kernel": [], "torch": []}
        with torch.inference_mode():
            kernel(), pytorch()  # warm-up
            for _ in range(args.repeats):
                for name, fn in (("kernel", kernel), ("torch", pytorch)):
                    with Timer("cpu") as t:
                        fn()
                    times[name].append(t.seconds)
        gflop = 2 * rows * weights / 1e9
        k, p = (statistics.median(times[n]) for n in ("kernel", "torch"))
        print(f"{rows:3d} rows: kernel {1e3 * k:6.1f} ms ({1e3 * min(times['kernel']):.1f}-"
              f"{1e3 * max(times['kernel']):.1f}) {gflop / k:5.1f} GFLOP/s | torch "
              f"{1e3 * p:6.1f} ms ({1e3 * min(times['torch']):.1f}-"
              f"{1e3 * max(times['torch']):.1f}) {gflop / p:5.1f} GFLOP/s | torch/kernel "
              f"{p / k:.2f}x", flush=True)


if __name__ == "__main__":
    main()
