"""n samples of one prompt in one request against n separate requests, on the real model.

    .venv/bin/python scripts/bench_n_samples.py [--n 4] [--repeats 3] [--json out.json]

One chat prompt (about 150 tokens), `--n` samples of `--new` tokens each (EOS ignored, seeds
s..s+n-1, so both ways draw exactly the same tokens, which is checked). Each repetition runs, in
one process on one fresh engine each:

  one request, n=N       the prompt is prefilled once; the N samples share its KV blocks and
                         copy only the partly filled last one (copy-on-write)
  N separate requests    each prefills the prompt (they arrive together, before any prompt block
                         is full, so the prefix cache cannot help) and holds its own blocks

and reports, per way: the most KV blocks in use at once, the prompt tokens run through the
model, and throughput (generated tokens per second, wall time of the whole run; the model's
device synchronized). The two ways alternate, so a busy machine slows both alike; the JSON gives
the spread over repetitions, the machine and the versions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

QUESTION = ("Here is a short story. A lighthouse keeper on a small island in the north sea keeps "
            "a diary of the ships that pass, the weather, and the birds that rest on the rocks. "
            "One winter a storm breaks the lamp, and the keeper must row to the mainland for a "
            "new lens while the fog comes in. Write three different endings for this story, "
            "each in two or three sentences, in a calm and simple style for young readers.")


def run_once(model, tokenizer, prompt, way: str, args) -> dict:
    from minillm.utils.devices import Timer
    from minillm.engine import Engine

    engine = Engine(model, tokenizer, num_blocks=args.num_blocks, block_size=args.block_size,
                    max_num_seqs=max(args.n, 4), record=True)
    settings = dict(max_new_tokens=args.new, do_sample=True, temperature=0.8,
                    ignore_eos=True)
    peak = 0
    with Timer(model) as timer:
        if way == "n":
            engine.add_request(prompt, n=args.n, seed=args.seed, request_id="x", **settings)
        else:
            for i in range(args.n):
                engine.add_request(prompt, seed=args.seed + i, request_id=("x", i), **settings)
        samples = {}
        while engine.has_unfinished():
            for out in engine.step():
                if out.finished:
                    key = out.index if way == "n" else out.request_id[1]
                    samples[key] = out.token_ids
            peak = max(peak, engine.blocks.num_used)
    prompt_tokens = sum(n for s in engine.steps for _, n, kind in s.items
                        if kind in ("prefill", "recompute"))
    generated = sum(len(t) for t in samples.values())
    assert engine.blocks.num_free == engine.blocks.num_blocks, "blocks leaked"
    return {"peak_kv_blocks": peak, "prompt_tokens_run": prompt_tokens,
            "generated_tokens": generated, "seconds": timer.seconds,
            "tokens_per_second": generated / timer.seconds,
            "samples": [samples[i] for i in range(args.n)]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=4, help="samples (default 4)")
    parser.add_argument("--new", type=int, default=64, help="tokens per sample (default 64)")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions of each way (3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--num-blocks", type=int, default=256)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", help="also write the summary to this file")
    args = parser.parse_args(argv)

    import torch

    import minillm
    from minillm.utils.devices import describe
    from minillm.utils.stats import spread

    torch.set_num_threads(args.threads)
    model, tokenizer = minillm.load("smollm2-135m", device=args.device)
    prompt = tokenizer.encode(tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}]))
    run_once(model, tokenizer, prompt, "n", args)  # warm-up: first calls allocate
    runs = {"n": [], "separate": []}
    for _ in range(args.repeats):
        for way in runs:
            runs[way].append(run_once(model, tokenizer, prompt, way, args))
    assert runs["n"][0]["samples"] == runs["separate"][0]["samples"], \
        "sample i of the n=N request must equal the separate request with seed + i"

    summary = {"machine": {**describe(), "platform": platform.platform(),
                           "minillm_python": sys.version.split()[0]},
               "settings": {**vars(args), "prompt_tokens": len(prompt)}, "ways": {}}
    print(f"prompt {len(prompt)} tokens, n={args.n} x {args.new} new tokens, "
          f"blocks of {args.block_size}, {args.threads} thread(s), {args.repeats} repetitions")
    print(f"{'':24}{'peak KV blocks':>16}{'prompt tokens run':>19}{'tok/s (median)':>16}"
          f"{'min-max':>16}")
    for way, label in (("n", f"one request, n={args.n}"),
                       ("separate", f"{args.n} separate requests")):
        rates = spread(r["tokens_per_second"] for r in runs[way])
        first = runs[way][0]
        summary["ways"][way] = {"peak_kv_blocks": first["peak_kv_blocks"],
                                "prompt_tokens_run": first["prompt_tokens_run"],
                                "generated_tokens": first["generated_tokens"],
                                "tokens_per_second": rates,
                                "seconds": spread(r["seconds"] for r in runs[way])}
        print(f"{label:24}{first['peak_kv_blocks']:>16}{first['prompt_tokens_run']:>19}"
              f"{rates['median']:>16.1f}{rates['min']:>8.1f}-{rates['max']:<7.1f}")
    n_way, sep = summary["ways"]["n"], summary["ways"]["separate"]
    summary["ratios"] = {
        "kv_blocks_separate_over_n": sep["peak_kv_blocks"] / n_way["peak_kv_blocks"],
        "tokens_per_second_n_over_separate":
            n_way["tokens_per_second"]["median"] / sep["tokens_per_second"]["median"]}
    print(json.dumps(summary["ratios"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
