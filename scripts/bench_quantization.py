"""Chapter 07's measurement: SmolLM2-135M in fp32, bf16, fp16, int8 and int4 on this machine.

For each scheme: weight bytes, perplexity on held-out English text (data/factbook_europe.txt, not
from the model's prompts), max/mean logit error and top-1 agreement against fp32, prefill and
decode tokens/s (minillm.generate's metrics). Prints a Markdown table, writes JSON (with the
machine and the settings) and the chart.

    .venv/bin/python scripts/bench_quantization.py            # full: 2,048 tokens of text
    .venv/bin/python scripts/bench_quantization.py --small    # a quick run (256 tokens)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import minillm
from minillm.tools.bench.quantization import DEFAULT_ROWS, ROWS, benchmark, machine, plot_benchmark, table


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="a quick run at small sizes")
    p.add_argument("--tokens", type=int, help="held-out tokens scored (default 2048; small 256)")
    p.add_argument("--window", type=int, help="tokens per forward pass (default 512; small 128)")
    p.add_argument("--prompt-tokens", type=int, help="prompt length for prefill speed "
                                                     "(default 128; small 32)")
    p.add_argument("--new-tokens", type=int, help="tokens generated for decode speed "
                                                  "(default 32; small 8)")
    p.add_argument("--repeats", type=int, default=1, help="speed runs per scheme (best kept)")
    p.add_argument("--rows", nargs="+", default=list(DEFAULT_ROWS), choices=list(ROWS),
                   help="schemes to measure (fp32 first)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    p.add_argument("--out", type=Path, default=Path("bench_results"),
                   help="folder for quantization.json and quantization.png")
    args = p.parse_args(argv)
    small = args.small
    settings = {
        "text_tokens": args.tokens or (256 if small else 2048),
        "window": args.window or (128 if small else 512),
        "prompt_tokens": args.prompt_tokens or (32 if small else 128),
        "new_tokens": args.new_tokens or (8 if small else 32),
        "repeats": args.repeats,
    }
    torch.manual_seed(0)
    model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device=args.device,
                                    fast=False)  # quantize() swaps the readable layers
    start = time.perf_counter()
    results = benchmark(model, tokenizer, tuple(args.rows), **settings)
    print(table(results))
    info = machine()
    print(f"\n{info['cores']} cores, {info['threads']} torch threads, {info['cpu_capability']}, "
          f"torch {info['torch']}, load average {info['load_average_1min']}, "
          f"{time.perf_counter() - start:.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quantization.json").write_text(json.dumps(
        {"machine": info, "settings": settings, "device": args.device, "results": results},
        indent=2))
    fig = plot_benchmark(results, f"SmolLM2-135M, {settings['text_tokens']} held-out tokens, "
                                  f"{info['cpu_capability']} CPU, {info['threads']} threads")
    fig.savefig(args.out / "quantization.png", dpi=120)
    print(f"wrote {args.out / 'quantization.json'} and {args.out / 'quantization.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
