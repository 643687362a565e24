"""Decoding speed: minillm.generate against transformers' generate() on the same weights, for
greedy, sampling with every processor on, and beam search. Prints JSON (machine, versions,
settings, seconds, ratios). Nothing is asserted: the figures are for comparison.

    MINILLM_CACHE=/tmp/mcache .venv/bin/python scripts/bench_decoding.py [--tokens 32]
"""

from __future__ import annotations

import argparse
import json
import os
import platform

import torch
import transformers

import minillm
from minillm.utils.devices import best_time
from minillm.generation.request import eos_ids

SETTINGS = {
    "greedy": dict(),
    "sampling, all processors": dict(do_sample=True, temperature=0.8, top_k=50, top_p=0.9,
                                     repetition_penalty=1.3, no_repeat_ngram_size=4, seed=0),
    "beam search x4": dict(num_beams=4),
}


def best_of(fn, repeats):
    return best_time(fn, None, repeats)  # synchronizes every device in use


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    model, tokenizer = minillm.load("smollm2-135m")
    ref, _ = minillm.load_reference()
    prompt = tokenizer.encode("The best way to learn a new language is")
    eos = eos_ids(model, tokenizer, minillm.GenerationConfig())
    rows = {}
    for name, fields in SETTINGS.items():
        ours = best_of(lambda: minillm.generate(model, tokenizer, prompt,
                                                max_new_tokens=args.tokens, **fields),
                       args.repeats)
        hf_fields = {k: v for k, v in fields.items() if k != "seed"}
        hf_fields.setdefault("top_k", None)
        theirs = best_of(lambda: ref.generate(torch.tensor([prompt]),
                                              max_new_tokens=args.tokens,
                                              do_sample=fields.get("do_sample", False),
                                              eos_token_id=eos, pad_token_id=eos[0],
                                              **{k: v for k, v in hf_fields.items()
                                                 if k != "do_sample"}), args.repeats)
        rows[name] = {"minillm_s": round(ours, 3), "transformers_s": round(theirs, 3),
                      "minillm_over_transformers": round(ours / theirs, 2)}
    print(json.dumps({"machine": platform.processor() or platform.machine(),
                      "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
                      "torch": torch.__version__, "transformers": transformers.__version__,
                      "max_new_tokens": args.tokens, "repeats": args.repeats,
                      "note": "best of repeats; generation may stop early at EOS",
                      "results": rows}, indent=2))


if __name__ == "__main__":
    main()
