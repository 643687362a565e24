"""minillm serve against llama.cpp's own C++ `llama-server` under load (issue 33).

    .venv/bin/python scripts/bench_llama_server.py [--sdist llama_cpp_python-0.3.36.tar.gz]
        [--threads 1] [--concurrency 4,16] [--weights q4_1,int8] [--rounds 3]

1. Builds `llama-server` from the llama.cpp vendored in the llama-cpp-python 0.3.36 source
   distribution (`--sdist PATH`, or fetched with `pip download --no-binary :all: --no-deps`):
   CMake with -DGGML_NATIVE=ON, only the `llama-server` target, no HTTPS client (this llama.cpp
   has no curl option left: it downloads with its own client, built without OpenSSL here) and no
   web UI, into a folder under minillm's cache. A finished build there is reused.
2. For each concurrency C: llama-server on the GGUF file minillm's q4_1 loads
   (`minillm.model_file`), C parallel slots with continuous batching (`-np C -cb`, the context
   `-c` split evenly across the slots), then `minillm serve --weights W --max-num-seqs C` for each
   W, all with the same threads; against each, `python -m minillm bench serve` with the same
   seeded workload (C x --rounds requests, --prompt-tokens words, --tokens output tokens, full
   length asked, greedy: temperature 0).
3. Prints every report as `bench serve` prints it, then each minillm row over llama-server's at
   the same concurrency (output tokens/s, TTFT p50, TPOT p50) against issue 33's targets.

Every server is stopped when its run ends, also on Ctrl-C, SIGTERM or an error. If llama-server
dies on a signal under load (this machine's llama-cpp-python wheel segfaults with AMX/repacked
weights at some context sizes), the point is run again with `--no-repack` and a note says so.
Optional: never part of `make test` (tests/test_bench_llama_server.py tests the pure parts).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

LLAMA_CPP_PYTHON = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
VENDORED = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp"
CMAKE_OPTIONS = ("-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DBUILD_SHARED_LIBS=OFF",
                 "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
                 "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                 "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON")
WEIGHTS = ("fp32", "bf16", "int8", "q4_1")
# issue 33: minillm's output tokens/s over llama-server's at least this, at this concurrency;
# where `latency` is True, TTFT p50 and TPOT p50 no worse than llama-server's as well
TARGETS = {16: (1.5, True), 4: (1.0, False)}
LLAMA = "llama-server"


# --- arguments ----------------------------------------------------------------------------------

def positive_ints(text: str, what: str) -> list[int]:
    """'4,16' -> [4, 16]; a ValueError naming `what` and what is allowed otherwise."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{what} takes whole numbers separated by commas (4,16), "
                         f"got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{what} takes numbers of 1 or more, got {text!r}")
    return values


def weight_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",")]
    wrong = [n for n in names if n not in WEIGHTS]
    if wrong or not names:
        raise ValueError(f"--weights takes {', '.join(WEIGHTS)} separated by commas, "
                         f"got {text!r}")
    return names


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sdist", help=f"the llama-cpp-python source distribution ({SDIST_NAME}); "
                                   "default: fetched with pip download")
    p.add_argument("--build-dir", help="where llama.cpp is unpacked and built (default: "
                                       "llama-server/ in minillm's writable cache)")
    p.add_argument("--llama-server", help="a llama-server binary already built: no build")
    p.add_argument("--threads", type=int, default=1, help="threads of each server (1)")
    p.add_argument("--concurrency", default="4,16",
                   help="requests in flight, one run each; llama-server gets as many slots (4,16)")
    p.add_argument("--weights", default="q4_1,int8", help="minillm serve's formats (q4_1,int8)")
    p.add_argument("--rounds", type=int, default=3,
                   help="requests per run = rounds x concurrency (3)")
    p.add_argument("--prompt-tokens", type=int, default=64, help="words per prompt (64)")
    p.add_argument("--tokens", type=int, default=32, help="output tokens per answer (32)")
    p.add_argument("--seed", type=int, default=0, help="fixes the prompts (0)")
    p.add_argument("--no-repack", action="store_true",
                   help="start llama-server with --no-repack from the first run")
    p.add_argument("--json", help="also write the reports and ratios to this file")
    args = p.parse_args(argv)
    try:
        args.concurrency = positive_ints(args.concurrency, "--concurrency")
        args.weights = weight_list(args.weights)
        for name in ("threads", "rounds", "prompt_tokens", "tokens"):
            if getattr(args, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be 1 or more, "
                                 f"got {getattr(args, name)}")
        if args.sdist and not Path(args.sdist).is_file():
            raise ValueError(f"--sdist: no file at {args.sdist}")
        if args.llama_server and not os.access(args.llama_server, os.X_OK):
            raise ValueError(f"--llama-server: no program at {args.llama_server}")
    except ValueError as error:
        p.error(str(error))
    return args


# --- the build ----------------------------------------------------------------------------------

def default_build_dir() -> Path:
    from minillm.files import writable_cache_dir

    return writable_cache_dir() / "llama-server"


def fetch_sdist(into: Path) -> Path:
    found = into / SDIST_NAME
    if not found.is_file():
        print(f"fetching the llama-cpp-python {LLAMA_CPP_PYTHON} source distribution", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:",
                        "--no-deps", "--dest", str(into),
                        f"llama-cpp-python=={LLAMA_CPP_PYTHON}"], check=True)
    return found


def build_llama_server(root: Path, sdist: Path | None) -> Path:
    """The llama-server binary under `root`, built first unless a finished build is there."""
    binary = root / "build" / "bin" / LLAMA
    if binary.is_file():
        print(f"reusing {binary}", flush=True)
        return binary
    root.mkdir(parents=True, exist_ok=True)
    source = root / VENDORED
    if not (source / "CMakeLists.txt").is_file():
        sdist = sdist or fetch_sdist(root)
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(VENDORED + "/")]
            if not members:
                raise SystemExit(f"{sdist} has no {VENDORED}/: not llama-cpp-python "
                                 f"{LLAMA_CPP_PYTHON}'s source distribution")
            archive.extractall(root, members=members, filter="data")
    print(f"building {LLAMA} in {root / 'build'} (minutes)", flush=True)
    subprocess.run(["cmake", "-S", str(source), "-B", str(root / "build"), *CMAKE_OPTIONS],
                   check=True)
    subprocess.run(["cmake", "--build", str(root / "build"), "--target", LLAMA,
                    "-j", str(os.cpu_count() or 1)], check=True)
    return binary


# --- the servers --------------------------------------------------------------------------------

def context_per_slot(prompt_tokens: int, tokens: int) -> int:
    """Room for one request: a prompt of `prompt_tokens` words is about as many tokens, often
    more; twice the total, in whole 256s."""
    need = 2 * (prompt_tokens + tokens)
    return -(-need // 256) * 256


def llama_server_command(binary, model, port: int, threads: int, slots: int, ctx: int,
                         no_repack: bool) -> list[str]:
    return [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-t", str(threads), "-tb", str(threads), "-np", str(slots), "-cb",
            "-c", str(ctx * slots), "--no-webui", *(["--no-repack"] if no_repack else [])]


def minillm_serve_command(weights: str, port: int, threads: int, slots: int) -> list[str]:
    return [sys.executable, "-m", "minillm", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--weights", weights, "--threads", str(threads), "--max-num-seqs", str(slots)]


class ServerDied(RuntimeError):
    """The server was ended by a signal (a crash) before it answered."""

    def __init__(self, signal_number: int, message: str = ""):
        super().__init__(message or f"the server died on signal {signal_number}")
        self.signal = signal_number

    def __reduce__(self):
        return type(self), (self.signal, str(self))


class Server:
    """A server command in a child process: `start()` waits until GET /health answers 200 (or
    the process exits, or `timeout` passes); `stop()` ends it. Used as a `with` block it is
    stopped however the block ends."""

    def __init__(self, command, port: int, log: Path, timeout: float = 600.0):
        self.command, self.port, self.log, self.timeout = list(command), port, log, timeout
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> "Server":
        import httpx

        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT)
        try:
            self._wait_until_ready(httpx)
        except BaseException:  # a timeout, Ctrl-C while waiting: no server left behind
            self.stop()
            raise
        return self

    def _wait_until_ready(self, httpx) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            if self.process.poll() is not None:
                code = self.process.returncode
                message = (f"the server exited with code {code} before it answered: "
                           f"{' '.join(self.command)}\n{log_tail(self.log)}")
                raise ServerDied(-code, message) if code < 0 else RuntimeError(message)
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer /health within "
                                   f"{self.timeout:.0f} s: {' '.join(self.command)}")
            time.sleep(0.25)

    def stop(self) -> int | None:
        """Ends the process (SIGTERM, then SIGKILL after 10 s); its exit code, negative for a
        signal that ended it before."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def cpu_seconds(self) -> float:
        """CPU time the server process has used so far, all its threads (user + system)."""
        return process_cpu_seconds(self.process.pid)

    def died(self) -> int | None:
        """The signal that ended the process before `stop()`, if one did."""
        code = self.process.poll() if self.process else None
        return -code if code is not None and code < 0 else None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all threads) from /proc/PID/stat, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def free_port() -> int:
    from minillm.tools.server.launch import free_port as pick

    return pick()


def sigterm_as_exit() -> None:
    """SIGTERM ends the script as Ctrl-C does: through the `with` blocks that stop servers."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


# --- the load and its reports -------------------------------------------------------------------

@dataclass
class Figures:
    """What the ratios compare, from one `bench serve` JSON report (with the server's CPU time
    during the load added as `server_cpu_s`, where it was measured)."""
    tok_s: float
    ttft_p50_ms: float
    tpot_p50_ms: float
    ok: int
    requests: int
    ended_early: int
    output_tokens: int
    cpu_s: float | None = None

    @property
    def tok_per_cpu_s(self) -> float:
        """Output tokens per second of the server's own CPU time (prompts included): what the
        other work on a shared machine does not move, as the wall-clock figures move with the
        CPU share each server gets."""
        return self.output_tokens / self.cpu_s if self.cpu_s else math.nan

    @classmethod
    def from_report(cls, report: dict) -> "Figures":
        if not report.get("ok"):
            raise ValueError(f"no request of {report.get('requests', '?')} succeeded against "
                             f"{report.get('url', '?')}: {report.get('error_examples')}")
        return cls(tok_s=report["throughput_tok_s"], ttft_p50_ms=report["ttft_ms"]["p50"],
                   tpot_p50_ms=report["tpot_ms"]["p50"], ok=report["ok"],
                   requests=report["requests"],
                   ended_early=report["output_length"]["ended_early"],
                   output_tokens=report["output_tokens"], cpu_s=report.get("server_cpu_s"))


def bench_command(url: str, concurrency: int, args, json_path: Path) -> list[str]:
    return [sys.executable, "-m", "minillm", "bench", "serve", "--url", url,
            "--requests", str(concurrency * args.rounds), "--concurrency", str(concurrency),
            "--prompt-tokens", str(args.prompt_tokens), "--tokens", str(args.tokens),
            "--seed", str(args.seed), "--json", str(json_path), "--no-progress"]


def printed_table(stdout: str) -> str:
    """`bench serve` prints its table, then the report as one JSON line: the table alone."""
    return "\n".join(line for line in stdout.splitlines() if not line.startswith("{"))


def run_load(url: str, concurrency: int, args, folder: Path) -> tuple[dict, str]:
    json_path = folder / f"report-{time.monotonic_ns()}.json"
    done = subprocess.run(bench_command(url, concurrency, args, json_path),
                          capture_output=True, text=True)
    if not json_path.is_file():
        raise RuntimeError(f"bench serve against {url} wrote no report (exit code "
                           f"{done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(json_path.read_text()), printed_table(done.stdout)


def ratio_rows(results: list[dict]) -> list[dict]:
    """Each minillm result over llama-server's at its concurrency. `results`: dicts with
    concurrency, server (LLAMA or 'minillm W') and figures (Figures)."""
    reference = {r["concurrency"]: r["figures"] for r in results if r["server"] == LLAMA}
    rows = []
    for r in results:
        ref = reference.get(r["concurrency"])
        if r["server"] == LLAMA or ref is None:
            continue
        f = r["figures"]
        row = {"concurrency": r["concurrency"], "server": r["server"],
               "tok_s": f.tok_s / ref.tok_s, "ttft_p50": f.ttft_p50_ms / ref.ttft_p50_ms,
               "tpot_p50": f.tpot_p50_ms / ref.tpot_p50_ms,
               "tok_per_cpu_s": f.tok_per_cpu_s / ref.tok_per_cpu_s}
        row["verdict"] = verdict(row)
        rows.append(row)
    return rows


def verdict(row: dict) -> str:
    """Issue 33's target at this concurrency, met or missed by how much."""
    target = TARGETS.get(row["concurrency"])
    if target is None:
        return "no target"
    least, latency = target
    misses = []
    if row["tok_s"] < least:
        misses.append(f"tok/s {row['tok_s']:.2f}x of {least:.1f}x asked")
    if latency:
        misses += [f"{name} {row[key]:.2f}x llama-server's" for key, name in
                   (("ttft_p50", "TTFT p50"), ("tpot_p50", "TPOT p50")) if row[key] > 1.0]
    return "met" if not misses else "missed: " + "; ".join(misses)


def ratio_table(rows: list[dict]) -> str:
    lines = ["minillm over llama-server at the same concurrency (tok/s and tok per CPU-s: "
             "higher is better; TTFT and TPOT: lower is better)",
             f"{'concurrency':>11}  {'server':<14} {'tok/s':>7} {'TTFT p50':>9} "
             f"{'TPOT p50':>9} {'tok/CPU-s':>10}  target"]
    for r in rows:
        lines.append(f"{r['concurrency']:>11}  {r['server']:<14} {r['tok_s']:>6.2f}x "
                     f"{r['ttft_p50']:>8.2f}x {r['tpot_p50']:>8.2f}x "
                     f"{r['tok_per_cpu_s']:>9.2f}x  {r['verdict']}")
    return "\n".join(lines)


def figures_table(results: list[dict]) -> str:
    """Each run's figures side by side, with the server's CPU time during the load."""
    lines = [f"{'concurrency':>11}  {'server':<14} {'tok/s':>7} {'TTFT p50 ms':>12} "
             f"{'TPOT p50 ms':>12} {'server CPU s':>13} {'tok/CPU-s':>10}"]
    for r in results:
        f = r["figures"]
        cpu = f"{f.cpu_s:13.1f}" if f.cpu_s else f"{'-':>13}"
        lines.append(f"{r['concurrency']:>11}  {r['server']:<14} {f.tok_s:7.1f} "
                     f"{f.ttft_p50_ms:12.0f} {f.tpot_p50_ms:12.1f} {cpu} "
                     f"{f.tok_per_cpu_s:10.1f}")
    return "\n".join(lines)


# --- the comparison -----------------------------------------------------------------------------

def load_line() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} CPUs"


def run_point(name: str, command_for, concurrency: int, args, folder: Path) -> dict:
    """Start a server, load it, stop it. `command_for(port)` -> the command. A server that dies
    on a signal, before it answers or under the load, comes back with died_on_signal set."""
    port = free_port()
    log = folder / f"{name.replace(' ', '-')}-{concurrency}.log"
    for n in range(2, 100):
        if not log.exists():
            break
        log = log.with_name(f"{name.replace(' ', '-')}-{concurrency}-{n}.log")
    server = Server(command_for(port), port, log)
    print(f"\n== {name}, concurrency {concurrency}: {' '.join(server.command)}", flush=True)
    point = {"concurrency": concurrency, "server": name, "report": None, "table": "",
             "died_on_signal": None, "log": str(log)}
    try:
        with server:
            before = server.cpu_seconds()
            point["report"], point["table"] = run_load(server.url, concurrency, args, folder)
            point["report"]["server_cpu_s"] = server.cpu_seconds() - before
            point["died_on_signal"] = server.died()
    except ServerDied as died:
        print(str(died).splitlines()[0], flush=True)
        point["died_on_signal"] = died.signal
    return point


def crash_note(signal_number: int, concurrency: int, log: str) -> str:
    name = signal.Signals(signal_number).name if signal_number in signal.valid_signals() \
        else str(signal_number)
    return (f"llama-server died on {name} at concurrency {concurrency} with its defaults (log "
            f"{log}), as this machine's llama-cpp-python does with AMX/repacked weights: every "
            "later run passes --no-repack (no AMX or repacked weights), llama-server's "
            "equivalent of the use_extra_bufts=False that minillm bench latency gives "
            "llama-cpp-python")


def compare(args, binary: Path, model: Path, folder: Path) -> tuple[list[dict], list[str]]:
    results, notes = [], []
    no_repack = args.no_repack
    ctx = context_per_slot(args.prompt_tokens, args.tokens)
    for c in args.concurrency:
        def llama(port):  # reads no_repack when called: a crash below turns it on
            return llama_server_command(binary, model, port, args.threads, c, ctx, no_repack)

        point = run_point(LLAMA, llama, c, args, folder)
        if point["died_on_signal"] and not no_repack:
            notes.append(crash_note(point["died_on_signal"], c, point["log"]))
            print("NOTE: " + notes[-1], flush=True)
            no_repack = True
            point = run_point(LLAMA, llama, c, args, folder)
        if point["died_on_signal"]:
            raise RuntimeError(f"llama-server died on signal {point['died_on_signal']} at "
                               f"concurrency {c} even with --no-repack: see {point['log']}")
        results.append(point)
        for w in args.weights:
            point = run_point(f"minillm {w}", lambda port, w=w: minillm_serve_command(
                w, port, args.threads, c), c, args, folder)
            if point["died_on_signal"]:
                raise RuntimeError(f"minillm serve --weights {w} died on signal "
                                   f"{point['died_on_signal']}: see {point['log']}")
            results.append(point)
    if not no_repack:
        notes.append("llama-server ran with its defaults (repacked weights on) and did not crash")
    return results, notes


def main(argv=None) -> int:
    args = parse_args(argv)
    sigterm_as_exit()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import minillm

    if args.llama_server:
        binary = Path(args.llama_server)
    else:
        root = Path(args.build_dir).expanduser() if args.build_dir else default_build_dir()
        binary = build_llama_server(root, Path(args.sdist) if args.sdist else None)
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    print(f"{binary}: {(version.stdout + version.stderr).strip().splitlines()[0]}")
    model = minillm.model_file("smollm2-135m")
    print(f"model {model}; {args.threads} thread(s) per server; {load_line()}", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="bench-llama-server-"))
    print(f"server logs and reports in {folder}", flush=True)
    results, notes = compare(args, binary, model, folder)
    for r in results:
        r["figures"] = Figures.from_report(r["report"])
    rows = ratio_rows(results)
    print()
    for r in results:
        print(f"== {r['server']}, concurrency {r['concurrency']}\n{r['table']}\n")
    print(figures_table(results))
    print()
    print(ratio_table(rows))
    for note in notes:
        print("note: " + note)
    print(load_line())
    if args.json:
        out = {"settings": {k: v for k, v in vars(args).items() if k != "json"},
               "binary": str(binary), "model": str(model), "notes": notes,
               "reports": [{k: r[k] for k in ("concurrency", "server", "report")}
                           for r in results], "ratios": rows}
        Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
