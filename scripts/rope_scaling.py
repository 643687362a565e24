"""Perplexity of SmolLM2-135M past its trained context of 8,192 tokens, with each RoPE scaling.

    .venv/bin/python scripts/rope_scaling.py [--factors 2,4] [--start 100000]
        [--json data/rope_scaling.json]

One long passage of held-out Shakespeare (the corpus from token `--start` on; the lessons read
its first 20,000 characters) is read whole, in one prefill, by the model loaded with
`rope_scaling=(kind, factor)` for a context of 8,192 x factor tokens: "none" (the trained angles,
read further), "pi" (position interpolation), "ntk" (NTK-aware) and "yarn", none fine-tuned.
Each run reports the perplexity of the next-token predictions inside the trained length (the
first 8,191) and past it, so a scaling's cost where the model needs none shows beside its gain.
Prints a table with the load average; `--json` also writes the figures (lesson 10d reads them
from data/rope_scaling.json). A 32,768-token prefill in float32 takes minutes on a CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

KINDS = ("none", "pi", "ntk", "yarn")


def next_token_nll(model, ids, chunk: int = 2048):
    """Each position's negative log-likelihood of the token after it: (len(ids) - 1,) floats.
    One prefill; the logits are made `chunk` positions at a time (all of them at once would be
    len(ids) x 49,152 floats)."""
    import torch
    import torch.nn.functional as F

    x = torch.tensor([ids])
    positions = torch.arange(len(ids))[None]
    with torch.inference_mode():
        hidden = model.run_layers(model.embed_tokens(x, positions), positions)[0, :-1]
        targets = x[0, 1:]
        return torch.cat([F.cross_entropy(model.logits(hidden[None, s:s + chunk])[0].float(),
                                          targets[s:s + chunk], reduction="none")
                          for s in range(0, len(targets), chunk)])


def measure(kind: str, factor: int, ids: list[int]) -> dict:
    import torch

    import minillm

    model, _ = minillm.load("smollm2-135m", dtype=torch.float32, device="cpu", fast=False,
                            rope_scaling=(kind, float(factor)))
    trained = model.config.rope_scaling.trained
    started = time.perf_counter()
    nll = next_token_nll(model, ids[:trained * factor])
    seconds = time.perf_counter() - started
    inside, past = nll[:trained - 1], nll[trained - 1:]
    return {"scaling": kind, "factor": factor, "tokens": trained * factor,
            "inside": math.exp(inside.mean().item()),
            "past": math.exp(past.mean().item()) if len(past) else None,
            "seconds": round(seconds, 1)}


def command(factors: list[int], kinds: list[str], start: int) -> str:
    """The command that measures these figures again (where they are written does not matter)."""
    return (f"python scripts/rope_scaling.py --factors {','.join(map(str, factors))} "
            f"--kinds {','.join(kinds)} --start {start}")


def machine() -> str:
    from minillm.kernels.build import cpu_field

    return cpu_field("model name") or platform.machine()


def table(rows: list[dict]) -> str:
    lines = ["| RoPE | factor | tokens read | perplexity, first 8,191 | past 8,192 | seconds |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        past = "" if r["past"] is None else f"{r['past']:.2f}"
        lines.append(f"| {r['scaling']} | {r['factor']} | {r['tokens']:,} | {r['inside']:.2f} | "
                     f"{past} | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--factors", default="2,4", help="context factors past 1 (default 2,4)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="scalings to compare")
    parser.add_argument("--start", type=int, default=100_000,
                        help="the passage's first token in the Shakespeare corpus")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    factors = [int(f) for f in args.factors.split(",")]
    kinds = args.kinds.split(",")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not factors or min(factors) < 2:
        parser.error(f"--kinds takes {', '.join(KINDS)} (got {', '.join(unknown) or 'none'}); "
                     f"--factors takes whole numbers >= 2 (got {args.factors})")

    import torch

    import minillm
    from minillm.tokenizer.samples import corpus

    tokenizer = minillm.load_tokenizer("smollm2-135m")
    ids = tokenizer.encode(corpus("english"))[args.start:]
    need = 8192 * max(factors)
    if len(ids) < need:
        sys.exit(f"--start {args.start} leaves {len(ids):,} tokens of the corpus; "
                 f"the longest run reads {need:,}")
    runs = [("none", 1)] + [(kind, f) for f in factors for kind in kinds]
    rows = []
    before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for kind, factor in runs:
        rows.append(measure(kind, factor, ids))
        print(f"{kind} x{factor}: {rows[-1]}", flush=True)
    result = {"command": command(factors, kinds, args.start),
              "machine": machine(), "cpus": os.cpu_count(),
              "threads": torch.get_num_threads(), "torch": torch.__version__,
              "load before": before,
              "load after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
              "corpus start": args.start, "rows": rows}
    print(table(rows))
    print(f"load average {before} before, {result['load after']} after, on {os.cpu_count()} CPUs")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
