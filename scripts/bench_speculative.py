"""Benchmark speculative decoding on SmolLM2-135M: acceptance rate and speed-up against plain
greedy decoding, for three tasks (edit: repeat a given text corrected; summarise; open chat).

    .venv/bin/python scripts/bench_speculative.py [--small] [--tokens 96] [--ks 1,2,3,4,6,8]
        [--layers 8] [--fast] [--repeats 2] [--json out.json] [--chart speedup.png]

Drafts: prompt lookup (the latest n-gram's earlier continuation) and SmolLM2's own first
`--layers` layers (with its final norm and head). Greedy decoding, so every speculative run must
give exactly the plain run's tokens: the script checks and reports it. Times are wall clock and
CPU time of this process (on a shared machine CPU time is the steadier one), the fastest of
`--repeats` runs. `--fast` runs both plain and speculative decoding on minillm.fast's model.
Prints a table, a JSON summary with the machine and versions, and saves a chart of speed-up
against k.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true",
                        help="a quick run: 32 new tokens, k in 2,4,8, the layer draft at k=2 only")
    parser.add_argument("--tokens", type=int, help="new tokens per request (default 96)")
    parser.add_argument("--ks", help="comma-separated k values for prompt lookup")
    parser.add_argument("--layer-ks", help="comma-separated k values for the first-layers draft")
    parser.add_argument("--layers", type=int, default=8, help="layers in the draft model")
    parser.add_argument("--tasks", default="edit,summarise,chat")
    parser.add_argument("--fast", action="store_true", help="use minillm.fast.optimize(model)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--chart", default="speculative_speedup.png",
                        help="where to save the speed-up chart ('' for none)")
    args = parser.parse_args(argv)
    tokens = args.tokens or (32 if args.small else 96)
    ks = [int(k) for k in (args.ks or ("2,4,8" if args.small else "1,2,3,4,6,8")).split(",")]
    layer_ks = [int(k) for k in (args.layer_ks or ("2" if args.small else "1,2,4")).split(",")]
    repeats = args.repeats or (1 if args.small else 2)
    tasks = args.tasks.split(",")

    import torch

    import minillm
    from minillm.speculative import ModelDraft, PromptLookupDraft, first_layers
    from minillm.tools.bench.speculative import compare, task_prompt

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device="cpu")
    draft_model = first_layers(model, args.layers)
    if args.fast:
        import minillm.fast

        model, draft_model = minillm.fast.optimize(model), minillm.fast.optimize(draft_model)
    layer_name = f"first {args.layers} layers"
    results = {}
    for task in tasks:
        ids = task_prompt(tokenizer, task)
        rows = compare(model, tokenizer, ids, {"prompt lookup": PromptLookupDraft()}, ks,
                       tokens, repeats)
        rows += compare(model, tokenizer, ids, {layer_name: ModelDraft(draft_model)}, layer_ks,
                        tokens, repeats)[1:]
        results[task] = dict(prompt_tokens=len(ids), rows=rows)
        print(f"\n== {task} ({len(ids)} prompt tokens, {tokens} new) ==")
        print(f"{'draft':>16} {'k':>2} {'tokens':>6} {'seconds':>8} {'speed-up':>8} "
              f"{'cpu x':>6} {'accept':>7} {'tok/pass':>8} same tokens")
        for r in rows:
            print(f"{r['draft']:>16} {r['k']:>2} {r['tokens']:>6} {r['seconds']:>8.2f} "
                  f"{r['speedup']:>7.2f}x {r['cpu_speedup']:>5.2f}x "
                  f"{100 * r['acceptance']:>6.0f}% {r['tokens_per_pass']:>8.2f} {r['same_tokens']}")
        print("plain output:", repr(rows[0]["text"][:160]))

    summary = dict(machine=dict(platform=platform.platform(), python=sys.version.split()[0],
                                torch=torch.__version__, threads=torch.get_num_threads(),
                                cpus=os.cpu_count(), load_average=os.getloadavg()),
                   settings=dict(tokens=tokens, ks=ks, layer_ks=layer_ks, layers=args.layers,
                                 fast=args.fast, repeats=repeats, greedy=True),
                   results={t: dict(prompt_tokens=v["prompt_tokens"],
                                    rows=[{k: v2 for k, v2 in r.items() if k != "text"}
                                          for r in v["rows"]])
                            for t, v in results.items()})
    print(json.dumps(summary, indent=1, default=float))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1, default=float)
    if args.chart:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for task, value in results.items():
            for name, style in (("prompt lookup", "-o"), (layer_name, "--s")):
                rows = [r for r in value["rows"] if r["draft"] == name]
                if rows:
                    ax.plot([r["k"] for r in rows], [r["speedup"] for r in rows], style,
                            label=f"{task}, {name}")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("k (tokens drafted per round)")
        ax.set_ylabel("speed-up over plain greedy (wall clock)")
        ax.set_title(f"SmolLM2-135M, {tokens} new tokens, {torch.get_num_threads()} threads")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.chart, dpi=120)
        print("chart saved to", args.chart)
    bad = [(t, r["draft"], r["k"]) for t, v in results.items() for r in v["rows"]
           if not r["same_tokens"]]
    if bad:
        print("NOT the tokens of plain greedy:", bad)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
