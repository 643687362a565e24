"""The device check that fits a lent GPU's budget: a few minutes on one GPU, with that machine's
torch and nothing else installed but the working tree (no model file, no network, no jupyter,
gguf or fastapi). The model is random-weight and shaped like SmolLM2-135M (30 layers, width 576,
9/3 heads, vocabulary 49,152); the real model runs too when its file and the `gguf` package are
both there.

    python scripts/gpu_smoke.py OUT                     # on the GPU ("auto" picks it)
    python scripts/gpu_smoke.py OUT --device cpu        # the same parts on the CPU
    python scripts/gpu_smoke.py OUT --only decode,move  # rerun some parts
    PYTHONPATH=tests/fake_cuda_site python scripts/gpu_smoke.py OUT --device cuda --quick
                                                        # on the fake GPU (what make test runs)

The parts (`--only` takes their names):

    env     versions, the device, whether minillm's C kernels run
    logits  the device's logits (fp32, bf16) against the CPU's fp32, and greedy agreement
            (`agree`: fp32 exact on a CPU and up to the first near tie elsewhere; bf16 up to
            the first near tie everywhere, one as wide as twice its logits' difference)
    decode  batch-1 TPOT, tokens/s, host syncs and kernel launches per token for fp32, bf16 and
            int8 (which int8 path runs, and the bound from the bytes it really moves)
    engine  the engine's decode step at 1, 8 and 32 rows: ms per step, tokens/s, host syncs
    chart   the live chart's TTFT/TPOT series (minillm.stream's token events) from a generation
    move    a subprocess moves an optimized CPU model to the device and generates: exit code
    real    the real model, when its file and `gguf` are present: logits and agreement

Host syncs are counted as `torch.cuda.set_sync_debug_mode` reports them on a GPU, by the fake
device's own counter under tests/fake_cuda.py, and not at all on a CPU. Launches are the CUDA
kernels torch.profiler records on a GPU, ATen operations elsewhere (a proxy; a CUDA graph's
replay counts one). On CUDA each format's decode runs twice: "graph: on", the batch-1 step
replayed from a CUDA graph (minillm/fast/graph.py), and "graph: off", launched kernel by kernel;
elsewhere once, "graph: n/a".

One table goes to stdout and one JSON file, `gpu_smoke.json`, to OUT. The exit status is 0
when every part ran and its checks held, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the carried working tree, installed or not

import torch  # noqa: E402

PARTS = ("env", "logits", "decode", "engine", "chart", "move", "real")
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, n_layers=30, n_heads=9, n_kv_heads=3,
               head_dim=64, intermediate_size=1536)
QUICK = dict(vocab_size=256, hidden_size=64, n_layers=2, n_heads=4, n_kv_heads=2,
             head_dim=16, intermediate_size=128)
ENGINE_ROWS = (1, 8, 32)


# ---- the model ---------------------------------------------------------------------------------

def random_model(quick: bool, seed: int = 0):
    """A random-weight Llama of SmolLM2-135M's shape (a tiny one with `quick`), on the CPU,
    with weights large enough that greedy choices are clear."""
    from minillm.model import registry
    from minillm.model.config import ModelConfig

    config = ModelConfig(arch="llama", **(QUICK if quick else SMOLLM2), rope_theta=100000.0,
                         norm_eps=1e-5, max_seq_len=2048, tie_embeddings=True,
                         eos_token_ids=())
    torch.manual_seed(seed)
    model = registry.architecture("llama").model_class(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(mean=1.0 if "norm" in name else 0.0, std=0.1 if "norm" in name else 0.05)
    return model.eval().requires_grad_(False)


def tokenizer():
    from minillm.model.toy import LetterTokenizer

    return LetterTokenizer()


def prompt_ids(vocab: int, n: int = 32, seed: int = 1) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


class Models:
    """The models the parts share, each built once: the readable one on the CPU, the fast one
    in a weight format on the device."""

    def __init__(self, device: torch.device, quick: bool):
        self.device, self.quick = device, quick
        self._readable = None
        self._fast = {}

    @property
    def readable(self):
        if self._readable is None:
            self._readable = random_model(self.quick)
        return self._readable

    def fast(self, fmt: str, device=None):
        from minillm.fast import optimize

        device = self.device if device is None else torch.device(device)
        key = (fmt, device.type)
        if key not in self._fast:
            from minillm.kernels import dispatch
            from minillm.utils.devices import FLOAT_DTYPES

            # the layout minillm's CPU kernel reads, F.linear's elsewhere: no timing of both
            layout = (device.type == "cpu" and dispatch.kernel_layout(FLOAT_DTYPES.get(fmt))) \
                or "out_in"
            model = copy.deepcopy(self.readable).to(device)
            self._fast[key] = optimize(model, fmt, layout=layout)
        return self._fast[key]

    @property
    def full_size(self) -> bool:
        """Whether the timed parts run at full size: on a GPU, without --quick."""
        return self.device.type != "cpu" and not self.quick

    def tokens(self, on_gpu: int) -> int:
        """New tokens per timed generation: `on_gpu` there, fewer on a CPU (a few minutes in
        all on a busy 2-core machine), 8 with --quick."""
        return 8 if self.quick else on_gpu if self.device.type != "cpu" else 8


# ---- counting -----------------------------------------------------------------------------------

def _fake():
    """The fake device harness (tests/fake_cuda.py) when it is active, else None."""
    module = sys.modules.get("fake_cuda")
    return module if module is not None and module.FakeCuda._active is not None else None


class Counts:
    """Host synchronizations and launches inside a `with` block, as this device can count them:
    `.syncs` (None where uncounted), `.launches`, `.how`."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        fake = _fake()
        if fake is not None:
            self.how = "fake GPU: host syncs by its counter, launches = ATen operations"
            self._tally = fake.Tally().__enter__()
        elif self.device.type == "cuda":
            self.how = ("torch.cuda.set_sync_debug_mode warnings; launches = CUDA kernels in "
                        "torch.profiler")
            from torch.profiler import ProfilerActivity, profile

            self._warnings = warnings.catch_warnings(record=True)
            self._caught = self._warnings.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            self._profile = profile(activities=[ProfilerActivity.CUDA]).__enter__()
        else:
            self.how = "no host syncs on a CPU; launches = ATen operations"
            self._mode = _AtenCounter().__enter__()
        return self

    def __exit__(self, *exc):
        if hasattr(self, "_tally"):
            self._tally.__exit__(*exc)
            self.syncs, self.launches = self._tally.total, self._tally.ops
        elif hasattr(self, "_profile"):
            torch.cuda.synchronize()
            self._profile.__exit__(*exc)
            torch.cuda.set_sync_debug_mode(0)
            self._warnings.__exit__(*exc)
            self.syncs = sum("synchroniz" in str(w.message).lower() for w in self._caught)
            self.launches = sum(e.device_type == torch.autograd.DeviceType.CUDA
                                for e in self._profile.events())
        else:
            self._mode.__exit__(*exc)
            self.syncs, self.launches = None, self._mode.ops


class _AtenCounter(torch.utils._python_dispatch.TorchDispatchMode):
    ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def per_token(model, device, ids, tokens: int = 8):
    """(host syncs, launches) per decode step: a generation of 4 + `tokens` new tokens against
    one of 4, so the prompt, prefill and first token cancel out."""
    import minillm

    tok = tokenizer()
    runs = []
    for n in (4, 4 + tokens):
        with Counts(device) as c:
            minillm.generate(model, tok, ids, max_new_tokens=n, ignore_eos=True)
        runs.append(c)
    syncs = None if runs[0].syncs is None else (runs[1].syncs - runs[0].syncs) / tokens
    return syncs, (runs[1].launches - runs[0].launches) / tokens, runs[0].how


# ---- the parts ---------------------------------------------------------------------------------

def part_env(models: Models, args) -> list[dict]:
    from minillm.kernels import dispatch

    device = models.device
    row = {"case": "machine", "python": platform.python_version(), "torch": torch.__version__,
           "device": str(device), "cpu_threads": torch.get_num_threads(),
           "kernels": dispatch.describe(device)}
    if device.type == "cuda":
        row["gpu"] = torch.cuda.get_device_name(device)
        row["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        row["cuda"] = torch.version.cuda
    for name in ("transformers", "numpy", "safetensors", "gguf"):
        try:
            row[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            row[name] = "not installed"
    row["model"] = "random weights, " + ("tiny (--quick)" if models.quick else
                                         "SmolLM2-135M's shape")
    return [row]


def another_dtypes_rule(diff: float) -> dict:
    """`agree`'s options for runs in two dtypes whose logits differ by up to `diff`: the
    near-tie rule on every device, the near tie twice that difference (at least NEAR_TIE)."""
    from minillm.generation.agreement import NEAR_TIE

    return {"near_tie": max(NEAR_TIE, 2 * diff), "exact": False}


def _compare(models: Models, fast, ids, tokens: int, same_dtype: bool) -> dict:
    """`fast` (on the device) against the readable model on the CPU in float32; another dtype
    (bf16) by `another_dtypes_rule`, its logits' difference measured on the prompt."""
    import minillm
    from minillm.generation.agreement import agree, first_difference

    tok = tokenizer()
    with torch.inference_mode():
        want = models.readable(torch.tensor([ids]))[0, -1].float()
        got = fast(torch.tensor([ids], device=models.device))[0, -1].float().cpu()
    a = minillm.generate(models.fast("fp32", "cpu"), tok, ids, max_new_tokens=tokens,
                         ignore_eos=True).token_ids
    b = minillm.generate(fast, tok, ids, max_new_tokens=tokens, ignore_eos=True).token_ids
    diff = (got - want).abs().max().item()
    rule = {} if same_dtype else another_dtypes_rule(diff)
    same = agree(fast, ids, b, a, **rule)
    return {"max_abs_logit_diff": diff, "logit_scale": want.abs().max().item(),
            "first_difference": first_difference(a, b), **{k: v for k, v in rule.items()
                                                          if k == "near_tie"},
            "agree": same, "ok": same}


def part_logits(models: Models, args) -> list[dict]:
    ids = prompt_ids(models.readable.config.vocab_size)
    tokens = models.tokens(32)
    rows = []
    for fmt in ("fp32", "bf16"):
        row = {"case": f"{fmt} on {models.device.type} vs fp32 on cpu",
               **_compare(models, models.fast(fmt), ids, tokens, same_dtype=fmt == "fp32")}
        rows.append(row)
    return rows


def part_decode(models: Models, args) -> list[dict]:
    import minillm
    from minillm.measure.bandwidth import decode_bound, read_bandwidth
    from minillm.quant.measure import bytes_moved_per_token, int8_decode_paths

    device = models.device
    ids = prompt_ids(models.readable.config.vocab_size)
    tokens = models.tokens(64)
    bandwidth = read_bandwidth(device, megabytes=16 if args.quick else 256, repeats=3)
    tok = tokenizer()
    rows = []
    graphs = (True, False) if device.type == "cuda" else (None,)
    for fmt, graph in [(fmt, graph) for fmt in ("fp32", "bf16", "int8") for graph in graphs]:
        model = models.fast(fmt)
        if graph is not None:
            model.fused_decode.cuda_graph = graph
        minillm.generate(model, tok, ids, max_new_tokens=4, ignore_eos=True)  # warm-up
        m = minillm.generate(model, tok, ids, max_new_tokens=tokens, ignore_eos=True).metrics
        syncs, launches, how = per_token(model, device, ids, 8 if models.full_size else 4)
        moved = bytes_moved_per_token(model)
        shown = {True: "on", False: "off", None: "n/a"}[graph]
        row = {"case": f"{fmt}, graph: {shown}", "tpot_ms": 1000 * m.tpot,
               "decode_tok_s": m.decode_tokens_per_second, "syncs_per_token": syncs,
               "launches_per_token": launches, "counted_by": how,
               "bytes_moved_per_token": moved,
               "bound_tok_s": decode_bound(moved, bandwidth), "bandwidth_gb_s": bandwidth / 1e9}
        if fmt == "int8":
            row["int8_path"] = ",".join(int8_decode_paths(model))
        row["ok"] = syncs is None or syncs <= 2
        if graph:
            failed = model.fused_decode.graph.failed
            row["graph_captures"] = model.fused_decode.graph.captures
            row["ok"] = row["ok"] and failed is None
            if failed:
                row["graph_failed"] = failed
        rows.append(row)
    return rows


def part_engine(models: Models, args) -> list[dict]:
    from minillm.engine import Engine
    from minillm.utils.devices import synchronize

    model = models.fast("fp32")
    vocab, prompt, steps = model.config.vocab_size, 16, 8 if models.full_size else 3
    rows = []
    for n in ENGINE_ROWS:
        blocks = n * ((prompt + steps + 4) // 16 + 2)
        engine = Engine(model, tokenizer(), num_blocks=blocks, block_size=16, max_num_seqs=n,
                        max_num_batched_tokens=max(512, n * prompt))
        for i in range(n):
            engine.add_request(prompt_ids(vocab, prompt, seed=i), max_new_tokens=steps + 3,
                               ignore_eos=True)
        engine.step()  # every prompt's prefill
        engine.step()  # a first decode step (warm-up)
        with Counts(models.device) as c:
            engine.step()
        synchronize(models.device)
        start = time.perf_counter()
        for _ in range(steps - 1):
            engine.step()
        synchronize(models.device)
        seconds = (time.perf_counter() - start) / (steps - 1)
        rows.append({"case": f"decode step, {n} rows", "ms_per_step": 1000 * seconds,
                     "tok_s": n / seconds, "syncs_per_step": c.syncs,
                     "launches_per_step": c.launches, "sync_budget": n + 3,
                     "ok": c.syncs is None or c.syncs <= n + 3})
    return rows


def part_chart(models: Models, args) -> list[dict]:
    import minillm

    model = models.fast("bf16" if models.device.type != "cpu" else "fp32")
    ids = prompt_ids(model.config.vocab_size)
    events = []
    tokens = models.tokens(48)
    stream = minillm.stream(model, tokenizer(), ids, max_new_tokens=tokens, ignore_eos=True,
                            on_token=events.append)
    for _ in stream:
        pass
    times = [e.time for e in events]
    gaps = [e.gap for e in events[1:]]
    tpot = [sum(gaps[:i + 1]) / (i + 1) for i in range(len(gaps))]  # the chart's running line
    metrics = stream.result.metrics
    ok = (len(events) == tokens and all(b >= a for a, b in zip(times, times[1:]))
          and abs(times[0] - metrics.ttft) < 1e-9 and abs(tpot[-1] - metrics.tpot) < 1e-6)
    return [{"case": f"stream of {tokens} tokens", "ttft_ms": 1000 * times[0],
             "tpot_ms": 1000 * tpot[-1], "points": len(events),
             "tpot_series_ms": [round(1000 * t, 3) for t in tpot], "ok": ok}]


def part_move(models: Models, args) -> list[dict]:
    command = [sys.executable, str(Path(__file__).resolve()), "--move-child",
               "--device", str(models.device)] + (["--quick"] if args.quick else [])
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
    return [{"case": "optimize(cpu model, 'bf16').to(device), generate",
             "exit_code": done.returncode, "seconds": time.perf_counter() - began,
             "output": tail, "ok": done.returncode == 0}]


def move_child(device: str, quick: bool) -> int:
    import minillm
    from minillm.fast import optimize

    fast = optimize(random_model(quick), "bf16").to(device)
    out = minillm.generate(fast, tokenizer(), prompt_ids(fast.config.vocab_size),
                           max_new_tokens=8, ignore_eos=True)
    print(json.dumps({"device": str(fast.device), "tokens": out.token_ids}))
    return 0 if len(out.token_ids) == 8 else 1


def real_model_file():
    from minillm import files

    source = files.model_source(files.DEFAULT_MODEL)
    return next((folder / source.filename for folder in files.cache_folders()
                 if (folder / source.filename).is_file()), None)


def part_real(models: Models, args) -> list[dict]:
    import importlib.util

    import minillm
    from minillm.generation.agreement import agree, first_difference

    path = real_model_file()
    if path is None or importlib.util.find_spec("gguf") is None:
        why = "no model file in the cache" if path is None else "the gguf package is missing"
        return [{"case": "SmolLM2-135M-Instruct", "skipped": why, "ok": True}]
    model, tok = minillm.load(path, device="cpu", weights="fp32")
    ids = tok.encode("The capital of France is")
    tokens = models.tokens(16)
    want = minillm.generate(model, tok, ids, max_new_tokens=tokens, ignore_eos=True)
    rows = []
    for fmt in ("fp32", "bf16"):
        fast, _ = minillm.load(path, device=models.device, weights=fmt)
        minillm.generate(fast, tok, ids, max_new_tokens=2, ignore_eos=True)  # warm-up
        got = minillm.generate(fast, tok, ids, max_new_tokens=tokens, ignore_eos=True)
        rule = {}
        if fmt != "fp32":  # another dtype: the near-tie rule, as wide as the logits differ
            with torch.inference_mode():
                diff = (fast(torch.tensor([ids], device=models.device))[0, -1].float().cpu()
                        - model(torch.tensor([ids]))[0, -1].float()).abs().max().item()
            rule = another_dtypes_rule(diff)
        same = agree(fast, ids, got.token_ids, want.token_ids, **rule)
        rows.append({"case": f"SmolLM2-135M {fmt} on {models.device.type}",
                     "tpot_ms": 1000 * got.metrics.tpot, "agree": same,
                     "first_difference": first_difference(got.token_ids, want.token_ids),
                     "text": got.text, "ok": same})
    return rows


# ---- the table and the run ---------------------------------------------------------------------

SHOWN = ("tpot_ms", "decode_tok_s", "ms_per_step", "tok_s", "ttft_ms", "syncs_per_token",
         "launches_per_token", "syncs_per_step", "launches_per_step", "sync_budget",
         "bound_tok_s", "int8_path", "max_abs_logit_diff", "first_difference", "agree",
         "points", "exit_code", "skipped", "error", "gpu", "torch", "cuda", "device",
         "kernels", "model", "gguf")


def _figure(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def table(report: dict) -> str:
    lines = [f"{'part':<8}{'case':<50}{'ok':<4}figures", "-" * 110]
    for part, rows in report["parts"].items():
        for row in rows:
            figures = "  ".join(f"{k}={_figure(row[k])}" for k in SHOWN if k in row)
            ok = "yes" if row.get("ok", True) else "NO"
            lines.append(f"{part:<8}{row.get('case', ''):<50}{ok:<4}{figures}")
    lines.append(f"{report['seconds']:.0f} s on {report['device']}; "
                 f"{'every check held' if report['ok'] else 'a check FAILED'}")
    return "\n".join(lines)


def run(args) -> dict:
    from minillm.utils.devices import pick_device

    device = pick_device(args.device)
    models = Models(device, args.quick)
    began = time.perf_counter()
    report = {"device": str(device), "quick": args.quick, "parts": {},
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    for part in args.only:
        started = time.perf_counter()
        try:
            rows = globals()[f"part_{part}"](models, args)
        except Exception as error:  # one part's failure is reported; the others still run
            rows = [{"case": "failed", "error": f"{type(error).__name__}: {error}",
                     "traceback": traceback.format_exc().splitlines()[-6:], "ok": False}]
        for row in rows:
            row.setdefault("seconds", time.perf_counter() - started)
        report["parts"][part] = rows
        print(f"gpu_smoke: {part} done ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)
    report["seconds"] = time.perf_counter() - began
    report["ok"] = all(r.get("ok", True) for rows in report["parts"].values() for r in rows)
    return report


def parts(text: str) -> list[str]:
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in PARTS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown part(s) {', '.join(unknown) or '(none given)'}: choose from "
            f"{', '.join(PARTS)}, separated by commas")
    return chosen


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", help="folder for gpu_smoke.json")
    parser.add_argument("--device", default="auto", help="auto, cuda, cpu or mps")
    parser.add_argument("--only", type=parts, default=list(PARTS),
                        help=f"comma-separated parts to run ({', '.join(PARTS)}; default all)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny model and few tokens: checks the script, not the device")
    parser.add_argument("--move-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.move_child:
        return move_child(args.device, args.quick)
    if args.out is None:
        parser.error("give a folder for the JSON report, e.g. gpu_smoke_out")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    report = run(args)
    print(table(report))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_smoke.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"JSON: {out / 'gpu_smoke.json'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
