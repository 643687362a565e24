"""Does the fast path's fused decode step (minillm/fast/decode.py) earn its keep? Batch-1 decode
speed of the same fast model with the fused step and with the module path it replaces, runs
interleaved, for each weight format.

    .venv/bin/python scripts/bench_fused_decode.py [--weights fp32,bf16,int8] [--tokens 48]
        [--repeats 4] [--threads 1]

The fused step is the second of the package's two implementations of the decoder block's math
(the readable one is the model family's file); it stays only while this ratio is clearly above 1.
Prints one line per format: median (min-max) tok/s each way and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", default="fp32,bf16,int8")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import torch

    import minillm

    torch.set_num_threads(args.threads)
    for weights in [w.strip() for w in args.weights.split(",") if w.strip()]:
        model, tokenizer = minillm.load("smollm2-135m", weights=weights)
        fused = model.fused_decode
        runs = {"fused": [], "modules": []}
        for _ in range(args.repeats):
            for way in runs:
                model.fused_decode = fused if way == "fused" else None
                out = minillm.generate(model, tokenizer, "The history of the printing press",
                                       max_new_tokens=args.tokens, ignore_eos=True)
                runs[way].append(out.metrics.decode_tokens_per_second)
        model.fused_decode = fused
        a, b = (statistics.median(runs[w]) for w in ("fused", "modules"))
        print(f"{weights}: fused {a:.1f} tok/s ({min(runs['fused']):.1f}-{max(runs['fused']):.1f}),"
              f" modules {b:.1f} ({min(runs['modules']):.1f}-{max(runs['modules']):.1f}): "
              f"{a / b:.2f}x", flush=True)


if __name__ == "__main__":
    main()
