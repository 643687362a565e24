"""`python -m minillm bench latency`: minillm against transformers' generate() (and llama.cpp,
when installed) on the same weights, batch 1, in the same process.

One process, one machine, the same prompt and token counts. For each thread count the engines
take turns (interleaved, the order rotated each repetition), so a change in the machine's load
hits all of them alike. Each figure is the median over the repetitions, shown with its spread
(min–max): on a shared machine one run can be far from the next. For each engine:

    TTFT, TPOT, decode tokens/s     greedy, `tokens` new tokens (EOS ignored), a short chat prompt
    prefill tokens/s                a `prompt_tokens`-token prompt, one new token: prompt / TTFT
    x transformers                  the ratio against transformers in the same dtype (fp32 for
                                    int8 and llama.cpp's Q4_1), same thread count, same run
    bound                           measured read bandwidth / bytes of weights one token reads

minillm runs as a user runs it: `minillm.load(..., weights=fmt)` then `minillm.generate`.
A table goes to the screen, then one JSON line with the machine, versions and settings.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...fast import huge_pages
from ...kernels import build, dispatch
from ...utils.devices import FLOAT_DTYPES, synchronize
from ...measure.metrics import RequestMetrics
from ...model.memory import bytes_per_token
from ...utils.stats import spread
from ...measure.bandwidth import decode_bound, read_bandwidth

FORMATS = (*FLOAT_DTYPES, "int8", "q4_1")
PROMPT = "Explain in a few sentences why the sky is blue."
LLAMA_CPP_HOWTO = ("llama.cpp is not installed, so it has no row. It is optional (not a "
                   "dependency of minillm): CMAKE_ARGS=-DGGML_NATIVE=ON .venv/bin/pip install "
                   "llama-cpp-python==0.3.36 diskcache builds it from source in about 6 minutes; "
                   "then this benchmark times it on the same GGUF file.")


@dataclass
class Engine:
    name: str          # "minillm", "transformers", "llama.cpp"
    dtype: str         # the weights' format: "fp32", "bf16", "fp16", "int8", "Q4_1"
    decode: object     # (ids, n, threads) -> RequestMetrics
    bytes_per_token: int | None = None
    runs: dict = field(default_factory=dict)  # threads -> {"decode": [...], "prefill": [...]}

    @property
    def label(self) -> str:
        return f"{self.name} {self.dtype}"


# --- the engines ------------------------------------------------------------------------------

def minillm_engine(model, tokenizer, fmt: str) -> Engine:
    """minillm as a user runs it: `minillm.generate` on a model from `minillm.load`."""
    from ...generation.loop import generate

    def run(ids, n, threads=None):
        return generate(model, tokenizer, list(ids), max_new_tokens=n, ignore_eos=True).metrics

    return Engine("minillm", fmt, run, bytes_per_token(model))


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

    device = model.device
    eos = model.config.eos_token_id
    pad = eos[0] if isinstance(eos, (list, tuple)) else eos

    def run(ids, n, threads=None):
        stamps = Stamps()
        synchronize(device)
        start = time.perf_counter()
        input_ids = torch.tensor([list(ids)], device=device)
        with torch.inference_mode():
            model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                           max_new_tokens=n, min_new_tokens=n, do_sample=False, streamer=stamps,
                           pad_token_id=pad, top_k=None, top_p=None, temperature=None)
        return RequestMetrics(start, tuple(stamps.times), len(ids))

    return Engine("transformers", dtype, run, bytes_per_token(model))


def llama_cpp_engine(path, context: int, notes: list | None = None,
                     where: str | None = None) -> Engine | None:
    """llama.cpp's Python binding on the same GGUF file (its own Q4_1 kernels), when installed
    (`where`: the folder of another installation, first on the import path). One `Llama` per
    thread count, made on first use. Where llama.cpp dies on its first token with its default
    weight paths (a build for this CPU whose AMX or repacked-weight path crashes), it runs with
    them off (llama-server's --no-repack) and a note says so. A note says what its build uses."""
    if where is not None:
        sys.path.insert(0, str(Path(where).resolve()))
    try:
        import llama_cpp
    except ImportError:
        if where is not None:
            raise ValueError(f"--llama-cpp {where}: its llama_cpp does not import here")
        return None
    if notes is not None:
        notes.append(llama_cpp_build(llama_cpp))
    instances = {}

    def run(ids, n, threads=None):
        threads = threads or torch.get_num_threads()
        if threads not in instances:
            crash = llama_cpp_crashes(path, context, threads)
            if crash and notes is not None:
                notes.append(f"llama.cpp {getattr(llama_cpp, '__version__', '?')} crashed "
                             f"decoding its first token here at {threads} thread(s) with its "
                             f"default weight paths (signal {crash}); it is timed with its extra "
                             f"buffer types off (use_extra_bufts=False: no AMX or repacked "
                             f"weights, as llama-server's --no-repack)")
            with _plain_weights(bool(crash)):
                instances[threads] = llama_cpp.Llama(
                    model_path=str(path), n_ctx=context, n_threads=threads,
                    n_threads_batch=threads, verbose=False)
        llm = instances[threads]
        llm.reset()
        start, times = time.perf_counter(), []
        for _ in llm.generate(list(ids), top_k=1, temp=0.0, reset=True):
            times.append(time.perf_counter())
            if len(times) == n:
                break
        return RequestMetrics(start, tuple(times), len(ids))

    return Engine("llama.cpp", "Q4_1", run, os.path.getsize(path))


def llama_cpp_build(llama_cpp) -> str:
    """A line: where llama_cpp was imported from and the instruction sets its build uses."""
    where = Path(llama_cpp.__file__).parent.parent
    try:
        info = llama_cpp.llama_print_system_info().decode(errors="replace")
    except (AttributeError, OSError):
        info = ""
    used = [part.split("=")[0].split(":")[-1].strip() for part in info.replace("|", "\n").splitlines()
            if part.strip().endswith("= 1")]
    return (f"llama.cpp {getattr(llama_cpp, '__version__', '?')} from {where}, built with "
            f"{', '.join(used) or 'instruction sets it does not report'}")


LLAMA_CPP_PROBE = ("import sys\nfrom llama_cpp import Llama\n"
                   "context, threads = int(sys.argv[2]), int(sys.argv[3])\n"
                   "llm = Llama(model_path=sys.argv[1], n_ctx=context, n_threads=threads,\n"
                   "            n_threads_batch=threads, verbose=False)\n"
                   "next(llm.generate([1, 2, 3, 4], top_k=1, temp=0.0))\n")


def llama_cpp_crashes(path, context: int, threads: int) -> int:
    """The signal that kills llama.cpp decoding one token of `path` with its defaults and these
    settings, in a child process (0 when it does not crash: an error it raises is left to the
    benchmark)."""
    try:
        done = subprocess.run([sys.executable, "-c", LLAMA_CPP_PROBE, str(path), str(context),
                               str(threads)], capture_output=True, timeout=600,
                              env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    except subprocess.TimeoutExpired:
        return 0
    return -done.returncode if done.returncode < 0 else 0


@contextmanager
def _plain_weights(on: bool):
    """While a Llama is made: its model parameters with llama.cpp's extra buffer types off."""
    if not on:
        yield
        return
    from llama_cpp import llama as binding  # the module whose Llama reads the defaults

    default = binding.llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    binding.llama_cpp.llama_model_default_params = params
    try:
        yield
    finally:
        binding.llama_cpp.llama_model_default_params = default


# --- the run ----------------------------------------------------------------------------------

def _machine(device: torch.device) -> dict:
    info = {"platform": platform.platform(), "machine": platform.machine(),
            "processor": _cpu_name(), "cpu_count": os.cpu_count(), "device": str(device)}
    if hasattr(os, "getloadavg"):
        info["load_average_1min"] = round(os.getloadavg()[0], 2)
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    why_not = dispatch.why_not(device)
    info["kernels"] = f"built, {build.status().label}" if why_not is None else \
        f"not used: {why_not}"
    info["kernel_levels_here"] = build.levels_here()
    if device.type == "cpu":
        info["weight_pages"] = huge_pages.describe()
        info["pytorch_cpu"] = pytorch_cpu_level()
    return info


def pytorch_cpu_level() -> str:
    """The instruction sets transformers' multiplies run at here: PyTorch's own kernels
    (ATEN_CPU_CAPABILITY lowers them) and, on Intel, MKL's (MKL_ENABLE_INSTRUCTIONS caps them);
    a forced level compares at one level only with both lowered too."""
    said = f"PyTorch's CPU capability {torch.backends.cpu.get_cpu_capability()}"
    cap = os.environ.get("MKL_ENABLE_INSTRUCTIONS")
    return said + (f", MKL_ENABLE_INSTRUCTIONS={cap}" if cap else ", MKL at the CPU's own level")


def _cpu_name() -> str:
    return build.cpu_field("model name") or platform.processor() or "?"


def _versions() -> dict:
    import minillm

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "minillm": minillm.__version__}
    for name in ("transformers", "llama_cpp"):
        try:
            out[name] = __import__(name).__version__
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


def _check(formats, tokens, prompt_tokens, repeats, threads) -> tuple:
    from ...utils.validate import check_int

    unknown = [d for d in formats if d not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"unknown weight format(s) {unknown}; choose from {', '.join(FORMATS)}")
    check_int("tokens", tokens, 2)
    check_int("prompt_tokens", prompt_tokens, 1)
    check_int("repeats", repeats, 1)
    threads = tuple(dict.fromkeys(threads or (torch.get_num_threads(),)))
    for t in threads:
        check_int("threads", t, 1, allowed="a list of ints >= 1")
    return threads


def run(formats=("fp32", "bf16", "int8", "q4_1"), tokens: int = 64, prompt_tokens: int = 512,
        repeats: int = 3, device="auto", threads=None, budget_s: float = 150.0,
        with_transformers: bool = True, with_llama_cpp: bool = True, progress=print,
        llama_cpp_dir: str | None = None) -> dict:
    """Run the benchmark; return the report (what the JSON line holds). `threads` is a list of
    thread counts (default: PyTorch's own choice); every engine runs at each."""
    import minillm
    from ...utils.devices import pick_device
    from ...fast import optimize

    threads = _check(formats, tokens, prompt_tokens, repeats, threads)
    device = pick_device(device)
    notes = []
    if llama_cpp_dir is not None and not (Path(llama_cpp_dir) / "llama_cpp").is_dir():
        raise ValueError(f"--llama-cpp {llama_cpp_dir}: no llama_cpp package in that folder "
                         f"(make one with: pip install --target {llama_cpp_dir} "
                         f"llama-cpp-python==0.3.36)")
    if device.type != "cpu" and "q4_1" in formats:
        formats = tuple(f for f in formats if f != "q4_1")
        notes.append(f"q4_1 has no row: the GGUF file's 4-bit blocks run on minillm's CPU kernel "
                     f"only; on {device.type} time int8, bf16 or fp16 (or run --device cpu)")
        progress(notes[-1])
        if not formats:
            raise ValueError(f"no format left to time on {device.type}: q4_1 runs on the CPU "
                             f"only; choose from {', '.join(f for f in FORMATS if f != 'q4_1')}")
    began = time.perf_counter()
    progress(f"loading the models on {device} ...")
    readable, tokenizer = minillm.load("smollm2-135m", device=device, fast=False)
    engines = []
    reference = minillm.load_reference("smollm2-135m")[0] if with_transformers else None
    for fmt in formats:
        if with_transformers and fmt in FLOAT_DTYPES:  # a converted copy per dtype
            ref = reference.to(device) if fmt == "fp32" else \
                copy.deepcopy(reference).to(device=device, dtype=FLOAT_DTYPES[fmt])
            engines.append(transformers_engine(ref, fmt))
        fast = minillm.load("smollm2-135m", device=device, weights="q4_1")[0] \
            if fmt == "q4_1" else optimize(readable, fmt)  # q4_1: the file's own blocks
        engines.append(minillm_engine(fast, tokenizer, fmt))
    if with_llama_cpp and device.type == "cpu":
        engine = llama_cpp_engine(minillm.model_file("smollm2-135m"), prompt_tokens + tokens + 8,
                                  notes, where=llama_cpp_dir)
        if engine is not None:
            engines.append(engine)
        else:
            notes.append(LLAMA_CPP_HOWTO)
    del readable

    short, long = prompt_ids(tokenizer), prompt_ids(tokenizer, prompt_tokens)
    bandwidth = {}
    done = {}
    for t in threads:
        torch.set_num_threads(t)
        progress(f"{t} thread(s): warming up, measuring the read bandwidth ...")
        for e in engines:
            e.decode(short, 2, t)
            e.runs[t] = {"decode": [], "prefill": []}
        bandwidth[t] = read_bandwidth(device)
        done[t] = 0
        for rep in range(repeats):
            order = engines[rep % len(engines):] + engines[:rep % len(engines)]
            for e in order:
                e.runs[t]["decode"].append(e.decode(short, tokens, t))
                e.runs[t]["prefill"].append(e.decode(long, 1, t))
            done[t] += 1
            progress(f"{t} thread(s): repetition {rep + 1}/{repeats} done "
                     f"({time.perf_counter() - began:.0f} s)")
            if time.perf_counter() - began > budget_s * (threads.index(t) + 1) / len(threads) \
                    and rep + 1 < repeats:
                progress(f"stopping after {rep + 1} repetitions: this thread count's share of "
                         f"the time budget ({budget_s:.0f} s in all) is spent")
                break
    rows = [_row(e, t, bandwidth[t]) for t in threads for e in engines]
    _ratios(rows)
    machine = _machine(device)
    if hasattr(os, "getloadavg"):
        machine["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    return {"machine": machine, "versions": _versions(),
            "settings": {"model": "smollm2-135m", "formats": list(formats), "new_tokens": tokens,
                         "short_prompt_tokens": len(short), "prefill_prompt_tokens": prompt_tokens,
                         "repeats": done, "threads": list(threads), "batch": 1, "greedy": True,
                         "interleaved": True, "statistic": "median (min-max)"},
            "bandwidth_gb_s": {t: b / 1e9 for t, b in bandwidth.items()}, "results": rows,
            "notes": notes, "seconds": time.perf_counter() - began}


def _row(e: Engine, threads: int, bandwidth: float) -> dict:
    dec, pre = e.runs[threads]["decode"], e.runs[threads]["prefill"]
    decode = spread(m.decode_tokens_per_second for m in dec)
    prefill = spread(m.prefill_tokens_per_second for m in pre)
    row = {"engine": e.name, "dtype": e.dtype, "threads": threads,
           "ttft_ms": 1000 * statistics.median(m.ttft for m in dec),
           "tpot_ms": 1000 * statistics.median(m.tpot for m in dec),
           "decode_tok_s": decode["median"], "decode_spread": [decode["min"], decode["max"]],
           "prefill_tok_s": prefill["median"], "prefill_spread": [prefill["min"], prefill["max"]],
           "bytes_per_token": e.bytes_per_token}
    if e.bytes_per_token:
        row["bound_tok_s"] = decode_bound(e.bytes_per_token, bandwidth)
        row["of_bound"] = row["decode_tok_s"] / row["bound_tok_s"]
    return row


def _ratios(rows: list[dict]) -> None:
    """Each row against transformers in its dtype (fp32 for int8 and Q4_1), against minillm
    fp32 and against llama.cpp, at the same thread count."""
    def find(engine, dtype, threads):
        return next((r for r in rows if r["engine"] == engine and r["dtype"] == dtype
                     and r["threads"] == threads), None)

    for row in rows:
        t = row["threads"]
        for key, ref in [("transformers", find("transformers", row["dtype"] if row["dtype"]
                                               in FLOAT_DTYPES else "fp32", t)),
                         ("minillm_fp32", find("minillm", "fp32", t)),
                         ("llama_cpp", find("llama.cpp", "Q4_1", t))]:
            if ref is None or ref is row:
                continue
            row[f"decode_x_{key}"] = row["decode_tok_s"] / ref["decode_tok_s"]
            row[f"prefill_x_{key}"] = row["prefill_tok_s"] / ref["prefill_tok_s"]


def table(report: dict) -> str:
    """The report as a plain-text table."""
    def figure(r, key):
        low, high = r[key.replace("tok_s", "spread")]
        return f"{r[key]:>7.1f} ({low:.0f}-{high:.0f})"

    def ratio(r, key):
        return f"{r[key]:>6.2f}x" if key in r else f"{'':>7}"

    head = (f"{'threads':>7}  {'engine':<19}{'TTFT ms':>8}{'decode tok/s':>19}{'x HF':>7}"
            f"{'x fp32':>7}{'x l.cpp':>8}{'prefill tok/s':>20}{'x HF':>7}{'bound':>7}"
            f"{'of bound':>9}")
    lines = [head, "-" * len(head)]
    for r in report["results"]:
        lines.append(
            f"{r['threads']:>7}  {r['engine'] + ' ' + r['dtype']:<19}{r['ttft_ms']:>8.1f}"
            f"{figure(r, 'decode_tok_s'):>19}{ratio(r, 'decode_x_transformers')}"
            f"{ratio(r, 'decode_x_minillm_fp32')}{ratio(r, 'decode_x_llama_cpp'):>8}"
            f"{figure(r, 'prefill_tok_s'):>20}{ratio(r, 'prefill_x_transformers')}"
            f"{r.get('bound_tok_s', float('nan')):>7.1f}"
            f"{100 * r.get('of_bound', float('nan')):>8.0f}%")
    s, m = report["settings"], report["machine"]
    reps = ", ".join(f"{n} at {t} thread(s)" for t, n in s["repeats"].items())
    lines.append(f"batch 1, greedy, {s['new_tokens']} new tokens after a "
                 f"{s['short_prompt_tokens']}-token prompt; prefill at {s['prefill_prompt_tokens']} "
                 f"tokens; median (min-max) of interleaved repetitions ({reps})")
    bw = ", ".join(f"{b:.1f} GB/s at {t} thread(s)" for t, b in report["bandwidth_gb_s"].items())
    lines.append(f"minillm's kernels: {m.get('kernels', '?')} (levels this machine runs: "
                 f"{', '.join(m.get('kernel_levels_here', [])) or 'none'})"
                 + (f"; weights in {m['weight_pages']}" if "weight_pages" in m else ""))
    if "pytorch_cpu" in m:
        lines.append(f"transformers: {m['pytorch_cpu']}")
    lines.append(f"read bandwidth {bw}; {m['device']}, load average "
                 f"{m.get('load_average_1min', '?')} on {m['cpu_count']} CPUs; "
                 f"{report['seconds']:.0f} s")
    lines += report.get("notes", [])
    return "\n".join(lines)


def run_cli(args) -> int:
    import sys

    if getattr(args, "level", None):  # before anything builds the kernels
        os.environ[build.LEVEL_VARIABLE] = args.level
    try:
        report = run(formats=tuple(d.strip() for d in args.dtypes.split(",") if d.strip()),
                     tokens=args.tokens, prompt_tokens=args.prompt_tokens,
                     repeats=args.repeats, device=args.device, threads=args.threads,
                     budget_s=args.budget, with_transformers=not args.no_transformers,
                     progress=lambda msg: print(msg, file=sys.stderr, flush=True),
                     llama_cpp_dir=getattr(args, "llama_cpp", None))
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
