"""The two JSON grammar backends (minillm.decoding.grammar_backend) on SmolLM2's 49,152-token
vocabulary: the time to compile a Pydantic schema (anyOf, $ref/$defs, Optional fields) into a
constraint, and the time of each token's mask over a real constrained generation.

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_grammar.py [--tokens 60]

The real model writes the answer greedily under the minillm backend; the llguidance backend must
write the same tokens (checked). Then the answer's tokens are replayed through a fresh constraint
of each backend, as a server builds one per request, timing every call (one mask per token);
the two backends alternate, so load that comes and goes lands on both. Prints a Markdown table
(medians over the repetitions, with their range) and the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from typing import Optional

import torch
from pydantic import BaseModel, Field

import minillm
from minillm.decoding import GRAMMAR_BACKENDS, make_json_constraint
from minillm.decoding.vocabulary import Vocabulary, token_bytes
from minillm.measure.comparison import Comparison, load_average


class Address(BaseModel):
    street: str = Field(max_length=40)
    city: str
    postcode: Optional[str] = None


class Pet(BaseModel):
    name: str = Field(max_length=20)
    kind: str
    age: Optional[int] = None


class Person(BaseModel):
    name: str = Field(max_length=30)
    age: int
    email: Optional[str] = None
    address: Address
    pets: list[Pet] = Field(default_factory=list, max_length=3)
    score: Optional[float] = None
    member: bool = False


PROMPT = ("Write a JSON record for a person called Ann Lee, 34, who lives at 12 Park Road in "
          "Leeds and has a cat called Tom.")


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def replay(tokenizer, schema, backend, prompt_ids, answer_ids) -> tuple[float, list[float]]:
    """A fresh constraint's compile time, and the seconds of each of its masks along the
    answer (one call per generated token, as generate makes them)."""
    start = time.perf_counter()
    constraint = make_json_constraint(tokenizer, schema, backend=backend)
    compile_s = time.perf_counter() - start
    scores = torch.zeros(1, tokenizer.vocab_size)
    masks = []
    for k in range(len(answer_ids)):
        ids = torch.tensor([prompt_ids + answer_ids[:k]])
        masks.append(seconds(lambda: constraint(ids, scores)))
    return compile_s, masks


def masks_alone(tokenizer, schema, backend, answer_ids) -> list[float]:
    """The seconds of each of the engine's own masks along the answer (`allowed`, without the
    logits processor around it), from a fresh constraint."""
    constraint = make_json_constraint(tokenizer, schema, backend=backend)
    times = []
    if backend == "minillm":
        grammar, state = constraint.grammar, constraint.grammar.start
        for token in answer_ids:
            times.append(seconds(lambda: constraint.allowed(state)))
            state = grammar.feed(state, token_bytes(tokenizer, token))
    else:
        matcher = constraint.state_after(()).deep_copy()
        for token in answer_ids:
            times.append(seconds(lambda: constraint.allowed(matcher)))
            matcher.consume_token(token)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=100, help="longest answer (100)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repetitions (5)")
    args = parser.parse_args()
    import llguidance

    model, tok = minillm.load("smollm2-135m")
    schema = Person.model_json_schema()
    prompt = tok.apply_chat_template([{"role": "user", "content": PROMPT}])
    # once per tokenizer, whatever the schema: minillm's trie, llguidance's token table
    setup = {"minillm": seconds(lambda: Vocabulary.of(tok)),
             "llguidance": seconds(lambda: make_json_constraint(tok, schema,
                                                                backend="llguidance"))}
    answers = {b: minillm.generate(model, tok, prompt, max_new_tokens=args.tokens,
                                   logits_processor=make_json_constraint(tok, schema, backend=b))
               for b in GRAMMAR_BACKENDS}
    texts = {b: a.text for b, a in answers.items()}
    assert texts["minillm"] == texts["llguidance"], texts
    answer = list(answers["minillm"].token_ids)

    compile_s = {b: [] for b in GRAMMAR_BACKENDS}
    per_token = {b: [] for b in GRAMMAR_BACKENDS}  # mean seconds per token, one per repetition
    slowest = {b: [] for b in GRAMMAR_BACKENDS}
    request = {b: [] for b in GRAMMAR_BACKENDS}  # compile + every mask of the answer
    alone = {b: [] for b in GRAMMAR_BACKENDS}  # the engine's mask alone, mean per token
    for rep in range(args.repeats):
        order = GRAMMAR_BACKENDS if rep % 2 == 0 else GRAMMAR_BACKENDS[::-1]
        for backend in order:
            c, masks = replay(tok, schema, backend, tok.encode(prompt), answer)
            compile_s[backend].append(c)
            per_token[backend].append(statistics.fmean(masks))
            slowest[backend].append(max(masks))
            request[backend].append(c + sum(masks))
            alone[backend].append(statistics.fmean(masks_alone(tok, schema, backend, answer)))
    def ratio(times) -> tuple[Comparison, str]:
        """minillm's time over llguidance's, per interleaved repetition: above 1, llguidance
        is faster."""
        c = Comparison(tuple(times["llguidance"]), tuple(times["minillm"]))
        return c, f"{c.ratio:.3g}x ({min(c.ratios):.3g}-{max(c.ratios):.3g})"

    def ms(values) -> str:
        return (f"{statistics.median(values) * 1e3:.3g} ms "
                f"({min(values) * 1e3:.3g}-{max(values) * 1e3:.3g})")

    (compile_ratio, compile_text), (mask_ratio, mask_text) = ratio(compile_s), ratio(per_token)
    request_ratio, request_text = ratio(request)
    alone_ratio, alone_text = ratio(alone)

    print(f"SmolLM2-135M-Instruct, vocabulary {tok.vocab_size}; a Pydantic schema "
          f"({len(json.dumps(schema))} characters: $defs/$ref, anyOf with null, maxLength, "
          f"an array of objects); an answer of {len(answer)} tokens, {answers['minillm'].finish_reason}; "
          f"{args.repeats} interleaved repetitions; {load_average()}; "
          f"torch threads {torch.get_num_threads()}; llguidance {llguidance.__version__}")
    print()
    print("| median (min-max) | minillm (Python) | llguidance (Rust) | minillm / llguidance |")
    print("|---|---:|---:|---:|")
    print(f"| once per tokenizer | {setup['minillm'] * 1e3:.0f} ms | "
          f"{setup['llguidance'] * 1e3:.0f} ms | |")
    print(f"| compile the schema | {ms(compile_s['minillm'])} | {ms(compile_s['llguidance'])} | "
          f"{compile_text} |")
    print(f"| mask per token, mean | {ms(per_token['minillm'])} | "
          f"{ms(per_token['llguidance'])} | {mask_text} |")
    print(f"| of which the engine's mask alone, mean | {ms(alone['minillm'])} | "
          f"{ms(alone['llguidance'])} | {alone_text} |")
    print(f"| slowest mask | {ms(slowest['minillm'])} | {ms(slowest['llguidance'])} | |")
    print(f"| compile + every mask of the answer | {ms(request['minillm'])} | "
          f"{ms(request['llguidance'])} | {request_text} |")
    print()
    print(json.dumps({
        "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(), "llguidance": llguidance.__version__,
        "tokens": len(answer), "repeats": args.repeats, "answer": texts["minillm"],
        "setup_s": setup, "compile_s": compile_s, "mask_mean_s": per_token,
        "mask_slowest_s": slowest, "request_s": request, "mask_alone_mean_s": alone, "mask_ratio_median": mask_ratio.ratio,
        "compile_ratio_median": compile_ratio.ratio, "request_ratio_median": request_ratio.ratio,
        "alone_ratio_median": alone_ratio.ratio},
        indent=1))


if __name__ == "__main__":
    main()
