"""Measuring the engine: a fixed workload, offline throughput, KV memory use, and an online mode
with requests arriving at random (Poisson) times. `scripts/bench_batching.py` and the chapter 06
lesson both use these, so the lesson's figures and the benchmark's are made the same way.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import torch

from ...utils.devices import Timer, model_device
from ...utils.devices import now as clock
from ...measure.metrics import throughput
from ...utils.stats import percentile, spread
from ...engine.engine import Engine

@dataclass
class Work:
    """One request of a workload: prompt token ids and how many tokens to generate."""

    prompt: list[int]
    max_new_tokens: int


def make_workload(tokenizer, n: int = 64, prompt_lengths=(16, 512), output_lengths=(16, 256),
                  seed: int = 0, text: str | None = None) -> list[Work]:
    """`n` requests with prompt and output lengths drawn uniformly from the given ranges
    (inclusive), the prompts cut from real text so the model sees ordinary tokens."""
    if text is None:
        from ...tokenizer.samples import corpus

        text = corpus("english")[:60_000]
    ids = list(tokenizer.encode(text))
    rng = random.Random(seed)
    work = []
    for _ in range(n):
        length = rng.randint(*prompt_lengths)
        start = rng.randrange(0, len(ids) - length)
        work.append(Work(ids[start:start + length], rng.randint(*output_lengths)))
    return work


def run_engine(engine: Engine, work: list[Work], progress: bool = False) -> dict:
    """Run every request of `work` through `engine` at once (offline); returns the outputs and
    the throughput figures."""
    with Timer(engine.device) as stopwatch:
        outs = engine.generate([w.prompt for w in work],
                               [{"max_new_tokens": w.max_new_tokens} for w in work],
                               ignore_eos=True, progress=progress)
    wall = stopwatch.seconds
    rejected = [o.error for o in outs if o.finish_reason == "rejected"]
    if rejected:
        raise ValueError(f"{len(rejected)} requests were rejected, the first: {rejected[0]}")
    tokens = sum(len(o.token_ids) for o in outs)
    return {"outputs": outs, "wall_s": wall, "new_tokens": tokens, "tokens_per_s": tokens / wall,
            "steps": len(engine.steps) or None, "preemptions": engine.scheduler.num_preemptions,
            "computed_rows": sum(s.computed_rows for s in engine.steps) or None}


def memory_use(steps, max_len: int | None = None) -> dict:
    """KV memory actually used over memory reserved, token-weighted over a run's steps:
    paged (blocks held), contiguous per request (prompt + max_new_tokens reserved up front), and
    contiguous at `max_len` per running request (a preallocated max-length cache)."""
    used = sum(s.used_tokens for s in steps)
    out = {"paged": used / max(1, sum(s.paged_slots for s in steps)),
           "contiguous_per_request": used / max(1, sum(s.contiguous_slots for s in steps))}
    if max_len:
        out["contiguous_max_length"] = used / max(1, sum(s.running * max_len for s in steps))
    return out


PROMPT_KINDS = ("prefill", "recompute")  # StepRecord item kinds that run prompt tokens


def time_split(steps) -> dict:
    """Where a run's time went: the steps that ran only decode rows (a static batch's ghost rows
    included; how many, their seconds, their rows on average, the seconds of one) against the
    steps that carried prompt tokens, first or recomputed (how many, their seconds, the prompt
    tokens they ran)."""
    prompt = [s for s in steps if any(kind in PROMPT_KINDS for _, _, kind in s.items)]
    decode = [s for s in steps if not any(kind in PROMPT_KINDS for _, _, kind in s.items)]
    decode_s = sum(s.end - s.start for s in decode)
    return {"decode_steps": len(decode), "decode_s": decode_s,
            "decode_step_s": decode_s / max(1, len(decode)),
            "decode_rows_mean": sum(len(s.items) for s in decode) / max(1, len(decode)),
            "prompt_steps": len(prompt), "prompt_s": sum(s.end - s.start for s in prompt),
            "prompt_tokens": sum(n for s in prompt for _, n, kind in s.items
                                 if kind in PROMPT_KINDS)}


def compare_weights(engines: dict, work: list[Work], repeats: int = 3) -> dict:
    """Run `work` offline on each engine of `engines` ({weight format: a function making a fresh
    Engine with record=True}) `repeats` times, interleaved: each repetition runs every format
    once, the order rotated, so a change in the machine's load hits all of them alike. Returns,
    per format, the spread (utils.stats.spread) of tokens/s, of a decode-only step's seconds and
    of the seconds of the steps that carried prompt tokens, the new tokens, and the ratio of its
    median tokens/s to the first format's."""
    if repeats < 1 or not engines:
        raise ValueError(f"compare_weights needs at least one engine and one repetition, got "
                         f"{len(engines)} engines and repeats={repeats}")
    names = list(engines)
    runs = {name: {"tokens_per_s": [], "decode_step_s": [], "prompt_s": []} for name in names}
    tokens = {}
    for rep in range(repeats):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            engine = engines[name]()
            result = run_engine(engine, work)
            split = time_split(engine.steps)
            runs[name]["tokens_per_s"].append(result["tokens_per_s"])
            runs[name]["decode_step_s"].append(split["decode_step_s"])
            runs[name]["prompt_s"].append(split["prompt_s"])
            tokens[name] = result["new_tokens"]
    out = {name: {**{k: spread(v) for k, v in runs[name].items()}, "new_tokens": tokens[name]}
           for name in names}
    first = out[names[0]]["tokens_per_s"]["median"]
    for row in out.values():
        row["over_first"] = row["tokens_per_s"]["median"] / first
    return out


def hf_generate(model, tokenizer, work: list[Work], batch_size: int = 16,
                progress: bool = False) -> dict:
    """transformers' batched `generate()` on the same requests: batches of `batch_size` in
    arrival order, left-padded, each batch run to its longest max_new_tokens (static batching).
    Only each request's own max_new_tokens count as useful tokens."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    batches = [work[i:i + batch_size] for i in range(0, len(work), batch_size)]
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="transformers generate", unit="batch")
    device = model_device(model)
    start = clock(device)
    for batch in batches:
        longest = max(len(w.prompt) for w in batch)
        ids = torch.full((len(batch), longest), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, w in enumerate(batch):
            ids[row, longest - len(w.prompt):] = torch.tensor(w.prompt)
            mask[row, longest - len(w.prompt):] = 1
        with torch.inference_mode():
            model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                           max_new_tokens=max(w.max_new_tokens for w in batch),
                           min_new_tokens=max(w.max_new_tokens for w in batch),
                           do_sample=False, pad_token_id=pad)
    wall = clock(device) - start
    tokens = sum(w.max_new_tokens for w in work)
    return {"wall_s": wall, "new_tokens": tokens, "tokens_per_s": tokens / wall}


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> list[float]:
    """`n` arrival times (seconds from 0) of a Poisson process with `rate` requests a second:
    the gaps are exponential with mean 1 / rate."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0 requests per second, got {rate}")
    rng, t, times = random.Random(seed), 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        times.append(t)
    return times


def run_online(engine: Engine, work: list[Work], rate: float, seed: int = 0) -> dict:
    """Serve `work` with requests arriving at `rate` per second (Poisson), as a server would:
    each step first admits every request that has arrived. TTFT counts from the arrival."""
    arrivals = poisson_arrivals(len(work), rate, seed)
    t0 = time.perf_counter()
    pending = list(zip(arrivals, work))
    final = {}
    while pending or engine.has_unfinished():
        now = time.perf_counter() - t0
        while pending and pending[0][0] <= now:
            at, w = pending.pop(0)
            engine.add_request(w.prompt, max_new_tokens=w.max_new_tokens,
                               ignore_eos=True, arrival_time=t0 + at)
        if not engine.has_unfinished():
            time.sleep(max(0.0, pending[0][0] - (time.perf_counter() - t0)))
            continue
        for out in engine.step():
            if out.finished:
                final[out.request_id] = out
    metrics = [o.metrics for o in final.values()]
    ttft = [m.ttft for m in metrics]
    tpot = [m.tpot for m in metrics]
    total = throughput(metrics)
    return {"rate": rate, "requests": len(metrics), "ttft_p50": percentile(ttft, 50),
            "ttft_p99": percentile(ttft, 99), "tpot_p50": percentile(tpot, 50),
            "tpot_p99": percentile(tpot, 99), "tokens_per_s": total.tokens_per_second,
            "metrics": metrics}
