"""minillm's int8 kernel against the PyTorch paths an int8 layer had without it, at each row count:
every linear layer of the int8 SmolLM2 (one forward pass's weights, LM head included) times a
batch of rows, through `Int8Linear.few_rows` (kernels.gemm_int8: vector tiles for a decode step's
few rows, AMX's tiles from 16 rows where the CPU and Linux allow them) and through the path
`Int8Linear` takes for rows the kernel does not (`dispatch.int8_pytorch_path`: PyTorch's
weight-only int8 kernel for up to QUANT_MAX_ROWS rows, else the float weight rebuilt for the call
and multiplied), runs interleaved.

    .venv/bin/python scripts/bench_gemm_int8.py [--rows 1,2,4,8,16,32,64,128,512] [--repeats 5]
        [--threads 1]

Prints one line per row count: the median (min-max) milliseconds for all the layers each way,
the arithmetic rate (GMAC/s: weights times rows, per second) and PyTorch's time over the
kernel's. dispatch.int8_max_rows() is where the kernel stops taking rows.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1,2,4,8,16,32,64,128,512")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import torch

    import minillm
    from minillm.kernels import build, dispatch
    from minillm.quant.linear import Int8Linear
    from minillm.utils.devices import Timer

    torch.set_num_threads(args.threads)
    if not dispatch.cpu_kernels("cpu"):
        raise SystemExit(f"minillm's kernels do not run here ({dispatch.why_not('cpu')}): "
                         f"nothing to compare")
    model, _ = minillm.load("smollm2-135m", weights="int8")
    layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
    weights = sum(layer.in_features * layer.out_features for layer in layers)
    amx = "on AMX's tiles" if build.function("gemm_int8_amx")() else "without AMX"
    print(f"{len(layers)} int8 layers, {weights / 1e6:.1f}M weights; the kernel takes up to "
          f"{dispatch.int8_max_rows()} rows, many {amx}; {args.threads} thread(s)")
    for rows in [int(r) for r in args.rows.split(",") if r.strip()]:
        xs = {n: torch.randn(rows, n) for n in {layer.in_features for layer in layers}}
        path = dispatch.int8_pytorch_path(xs[layers[0].in_features], rows)

        def kernel():
            for layer in layers:
                layer.forward_kernel(xs[layer.in_features])

        def pytorch():
            for layer in layers:
                x = xs[layer.in_features]
                layer.forward_fused(x) if path == "fused" else layer.forward_dequantize(x)

        times = {"kernel": [], "torch": []}
        with torch.inference_mode():
            kernel(), pytorch()  # warm-up
            for _ in range(args.repeats):
                for name, fn in (("kernel", kernel), ("torch", pytorch)):
                    with Timer("cpu") as t:
                        fn()
                    times[name].append(t.seconds)
        gmac = rows * weights / 1e9
        k, p = (statistics.median(times[n]) for n in ("kernel", "torch"))
        print(f"{rows:3d} rows: kernel {1e3 * k:7.1f} ms ({1e3 * min(times['kernel']):.1f}-"
              f"{1e3 * max(times['kernel']):.1f}) {gmac / k:5.1f} GMAC/s | torch ({path}) "
              f"{1e3 * p:7.1f} ms ({1e3 * min(times['torch']):.1f}-"
              f"{1e3 * max(times['torch']):.1f}) {gmac / p:5.1f} GMAC/s | torch/kernel "
              f"{p / k:.2f}x", flush=True)


if __name__ == "__main__":
    main()
