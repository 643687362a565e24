"""`python -m minillm bench`: minillm against transformers' generate() on the same weights.

One process, one machine, the same prompt and token counts. The engines take turns (interleaved,
the order rotated each repetition) so a change in the machine's load hits all of them alike, and
each figure is the median over the repetitions. For each engine and dtype:

    TTFT, TPOT, decode tokens/s     greedy, `tokens` new tokens (EOS ignored), a short chat prompt
    prefill tokens/s                a `prompt_tokens`-token prompt, one new token: prompt / TTFT
    x transformers                  the ratio against transformers in the same dtype, same run

and the bandwidth bound: measured read bandwidth / bytes of weights read per token.
A table goes to the screen, then one JSON line with the machine, versions and settings.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, field

import torch

from ..metrics import RequestMetrics, TokenClock
from .bandwidth import decode_bound, read_bandwidth, weight_bytes

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PROMPT = "Explain in a few sentences why the sky is blue."


@dataclass
class Engine:
    name: str          # "minillm", "transformers", "llama.cpp"
    dtype: str
    decode: object     # (ids, n) -> RequestMetrics
    bytes_per_token: int | None = None
    runs: dict = field(default_factory=lambda: {"decode": [], "prefill": []})

    @property
    def label(self) -> str:
        return f"{self.name} {self.dtype}"


# --- the engines ------------------------------------------------------------------------------

def minillm_engine(model, tokenizer, dtype: str) -> Engine:
    from ..generation import start, token_steps
    from ..stopping import Sequence

    def run(ids, n):
        clock = TokenClock()
        prompts, _, config, _, pad_id = start(model, tokenizer, list(ids), max_new_tokens=n)
        sequences = [Sequence(prompts[0], tokenizer, (), n)]  # no EOS: always n tokens
        for _ in token_steps(model, prompts, sequences, config, pad_id=pad_id):
            clock.tick(sequences)
        return clock.metrics(sequences)[0]

    return Engine("minillm", dtype, run, weight_bytes(model))


def transformers_engine(model, dtype: str) -> Engine:
    from transformers.generation.streamers import BaseStreamer

    class Stamps(BaseStreamer):
        """transformers calls put() with the prompt, then with each new token."""

        def __init__(self):
            self.times, self.prompt_seen = [], False

        def put(self, value):
            value.cpu()  # wait for the device: the token exists now
            if not self.prompt_seen:
                self.prompt_seen = True
                return
            self.times.append(time.perf_counter())

        def end(self):
            pass

    device = next(model.parameters()).device
    eos = model.config.eos_token_id
    pad = eos[0] if isinstance(eos, (list, tuple)) else eos

    def run(ids, n):
        stamps = Stamps()
        start = time.perf_counter()
        input_ids = torch.tensor([list(ids)], device=device)
        with torch.inference_mode():
            model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                           max_new_tokens=n, min_new_tokens=n, do_sample=False, streamer=stamps,
                           pad_token_id=pad, top_k=None, top_p=None, temperature=None)
        return RequestMetrics(start, tuple(stamps.times), len(ids))

    return Engine("transformers", dtype, run, weight_bytes(model))


def llama_cpp_engine(path, threads: int, context: int) -> Engine | None:
    """llama.cpp's Python binding on the same GGUF file (its own Q4_1 kernels), when installed."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=str(path), n_ctx=context, n_threads=threads, verbose=False)

    def run(ids, n):
        llm.reset()
        start, times = time.perf_counter(), []
        for _ in llm.generate(list(ids), top_k=1, temp=0.0, reset=True):
            times.append(time.perf_counter())
            if len(times) == n:
                break
        return RequestMetrics(start, tuple(times), len(ids))

    return Engine("llama.cpp", "Q4_1", run, os.path.getsize(path))


# --- the run ----------------------------------------------------------------------------------

def _machine(device: torch.device) -> dict:
    info = {"platform": platform.platform(), "machine": platform.machine(),
            "processor": _cpu_name(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "device": str(device)}
    if hasattr(os, "getloadavg"):
        info["load_average_1min"] = round(os.getloadavg()[0], 2)
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _versions() -> dict:
    import minillm

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "minillm": minillm.__version__}
    try:
        import transformers
        out["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        import llama_cpp
        out["llama_cpp"] = llama_cpp.__version__
    except ImportError:
        pass
    return out


def prompt_ids(tokenizer, n: int | None = None) -> list[int]:
    """The chat prompt's ids; with `n`, a prompt of exactly n tokens (the text repeated)."""
    ids = list(tokenizer.encode(PROMPT))
    if n is None:
        return ids
    text_ids = list(tokenizer.encode(" The sky is blue because air scatters blue light "
                                     "more than red light, and our eyes see it everywhere."))
    while len(ids) < n:
        ids += text_ids
    return ids[:n]


def run(dtypes=("fp32", "bf16"), tokens: int = 64, prompt_tokens: int = 512, repeats: int = 3,
        device="auto", threads: int | None = None, budget_s: float = 150.0,
        with_transformers: bool = True, with_llama_cpp: bool = True, progress=print) -> dict:
    """Run the benchmark; return the report (what the JSON line holds)."""
    import minillm
    from ..devices import pick_device
    from ..fast import optimize

    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown or not dtypes:
        raise ValueError(f"unknown dtype(s) {unknown}; choose from {', '.join(DTYPES)}")
    for name, value in [("tokens", tokens), ("prompt_tokens", prompt_tokens),
                        ("repeats", repeats)]:
        if not isinstance(value, int) or value < (2 if name == "tokens" else 1):
            raise ValueError(f"{name} must be an int >= {2 if name == 'tokens' else 1}, "
                             f"got {value!r}")
    if threads is not None:
        torch.set_num_threads(threads)
    device = pick_device(device)
    began = time.perf_counter()
    progress(f"loading the models on {device} ...")
    base, tokenizer = minillm.load("smollm2-135m", device=device)
    engines = []
    reference = None
    if with_transformers:
        reference, _ = minillm.load_reference("smollm2-135m")
    for d in dtypes:
        if with_transformers:  # a converted copy per dtype, the fp32 original kept
            ref = reference.to(device) if d == "fp32" else \
                copy.deepcopy(reference).to(device=device, dtype=DTYPES[d])
            engines.append(transformers_engine(ref, d))
        engines.append(minillm_engine(optimize(base, dtype=DTYPES[d], logits="last"),
                                      tokenizer, d))
    if with_llama_cpp and device.type == "cpu":
        engine = llama_cpp_engine(minillm.model_file("smollm2-135m"),
                                  torch.get_num_threads(), prompt_tokens + tokens + 8)
        if engine is not None:
            engines.append(engine)
    del base

    short = prompt_ids(tokenizer)
    long = prompt_ids(tokenizer, prompt_tokens)
    progress("warming up ...")
    for e in engines:
        e.decode(short, 2)
    progress("measuring the read bandwidth ...")
    bandwidth = read_bandwidth(device)
    done_reps = 0
    for rep in range(repeats):
        order = engines[rep % len(engines):] + engines[:rep % len(engines)]
        for e in order:
            e.runs["decode"].append(e.decode(short, tokens))
            e.runs["prefill"].append(e.decode(long, 1))
        done_reps += 1
        progress(f"repetition {rep + 1}/{repeats} done ({time.perf_counter() - began:.0f} s)")
        if time.perf_counter() - began > budget_s and rep + 1 < repeats:
            progress(f"stopping after {rep + 1} repetitions: the time budget of {budget_s:.0f} s "
                     "is spent")
            break

    rows = []
    for e in engines:
        dec, pre = e.runs["decode"], e.runs["prefill"]
        row = {"engine": e.name, "dtype": e.dtype,
               "ttft_ms": 1000 * statistics.median(m.ttft for m in dec),
               "tpot_ms": 1000 * statistics.median(m.tpot for m in dec),
               "decode_tok_s": statistics.median(m.decode_tokens_per_second for m in dec),
               "prefill_tok_s": statistics.median(m.prefill_tokens_per_second for m in pre),
               "weight_bytes": e.bytes_per_token}
        if e.bytes_per_token:
            row["bound_tok_s"] = decode_bound(e.bytes_per_token, bandwidth)
            row["of_bound"] = row["decode_tok_s"] / row["bound_tok_s"]
        rows.append(row)
    for row in rows:
        ref = next((r for r in rows if r["engine"] == "transformers"
                    and r["dtype"] == (row["dtype"] if row["dtype"] in DTYPES else "fp32")), None)
        if ref is not None:
            row["decode_x_transformers"] = row["decode_tok_s"] / ref["decode_tok_s"]
            row["prefill_x_transformers"] = row["prefill_tok_s"] / ref["prefill_tok_s"]
            row["ttft_x_transformers"] = row["ttft_ms"] / ref["ttft_ms"]
    machine = _machine(device)
    if hasattr(os, "getloadavg"):
        machine["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    return {"machine": machine, "versions": _versions(),
            "settings": {"model": "smollm2-135m", "dtypes": list(dtypes), "new_tokens": tokens,
                         "short_prompt_tokens": len(short), "prefill_prompt_tokens": prompt_tokens,
                         "repeats": done_reps, "batch": 1, "greedy": True,
                         "interleaved": True, "statistic": "median"},
            "bandwidth_gb_s": bandwidth / 1e9, "results": rows,
            "seconds": time.perf_counter() - began}


def table(report: dict) -> str:
    """The report as a plain-text table."""
    head = (f"{'engine':<22}{'TTFT ms':>9}{'TPOT ms':>9}{'decode tok/s':>14}{'x HF':>7}"
            f"{'prefill tok/s':>15}{'x HF':>7}{'bound tok/s':>13}{'of bound':>10}")
    lines = [head, "-" * len(head)]
    for r in report["results"]:
        def ratio(key):
            return f"{r[key]:>6.2f}x" if key in r else f"{'':>7}"
        lines.append(
            f"{r['engine'] + ' ' + r['dtype']:<22}{r['ttft_ms']:>9.1f}{r['tpot_ms']:>9.1f}"
            f"{r['decode_tok_s']:>14.1f}{ratio('decode_x_transformers')}"
            f"{r['prefill_tok_s']:>15.1f}{ratio('prefill_x_transformers')}"
            f"{r.get('bound_tok_s', float('nan')):>13.1f}"
            f"{100 * r.get('of_bound', float('nan')):>9.0f}%")
    s = report["settings"]
    m = report["machine"]
    lines.append(f"batch 1, greedy, {s['new_tokens']} new tokens after a "
                 f"{s['short_prompt_tokens']}-token prompt; prefill at {s['prefill_prompt_tokens']} "
                 f"tokens; median of {s['repeats']} interleaved repetitions")
    lines.append(f"read bandwidth {report['bandwidth_gb_s']:.1f} GB/s; {m['device']}, "
                 f"{m['torch_threads']} threads, load average {m.get('load_average_1min', '?')} "
                 f"on {m['cpu_count']} CPUs; {report['seconds']:.0f} s")
    return "\n".join(lines)


def run_cli(args) -> int:
    import sys

    try:
        report = run(dtypes=tuple(d.strip() for d in args.dtypes.split(",") if d.strip()),
                     tokens=args.tokens, prompt_tokens=args.prompt_tokens,
                     repeats=args.repeats, device=args.device, threads=args.threads,
                     budget_s=args.budget, with_transformers=not args.no_transformers,
                     progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    except ValueError as error:
        print(f"minillm bench: {error}", file=sys.stderr)
        return 2
    print(table(report))
    line = json.dumps(report, sort_keys=True)
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    return 0
