"""The command lines of `python -m minillm bench latency` and `bench step` (kept apart so that
building them imports no torch). The load test of a server, `bench serve`, has its own options in
minillm.tools.loadtest.options."""

from __future__ import annotations

import os

STEP_FORMATS = ("fp32", "bf16", "fp16", "int8", "q4_1")
KERNEL_LEVELS = ("avx2", "avx512", "avx512-vnni", "amx", "native")  # minillm.kernels.build's


def main(argv=None) -> int:
    import argparse

    from .run import run_cli

    parser = build_parser(argparse.ArgumentParser(prog="python -m minillm bench latency"))
    return run_cli(parser.parse_args(argv))


def thread_counts(text: str) -> list[int]:
    """`--threads 1,2` -> [1, 2]; anything else is refused with what is allowed."""
    import argparse

    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of thread counts: give positive integers separated by "
            f"commas, e.g. 1 or 1,2")
    return counts


def build_parser(parser):
    ci = bool(os.environ.get("CI"))
    parser.add_argument("--dtypes", default="fp32,bf16,int8,q4_1",
                        help="comma-separated weight formats: fp32, bf16, fp16, int8, q4_1 "
                             "(the GGUF file's own 4-bit blocks; default fp32,bf16,int8,q4_1)")
    parser.add_argument("--tokens", type=int, default=8 if ci else 32,
                        help="new tokens per decode run (default 32; 8 when CI is set)")
    parser.add_argument("--prompt-tokens", type=int, default=64 if ci else 512,
                        help="prompt length of the prefill run (default 512; 64 when CI is set)")
    parser.add_argument("--repeats", type=int, default=1 if ci else 3,
                        help="interleaved repetitions (default 3; 1 when CI is set)")
    parser.add_argument("--threads", default=None, type=thread_counts,
                        help="comma-separated thread counts, every engine at each, e.g. 1,2 "
                             "(default: PyTorch's own choice)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    parser.add_argument("--level", default=None, choices=KERNEL_LEVELS,
                        help="the instruction-set level minillm's CPU kernels build for "
                             "(MINILLM_KERNEL_LEVEL): avx2, avx512, avx512-vnni, amx, or native "
                             "(the default: the highest this CPU runs)")
    parser.add_argument("--llama-cpp", default=None, metavar="DIR",
                        help="time the llama-cpp-python installed in DIR (pip install --target "
                             "DIR), e.g. one built for the same level as --level, instead of "
                             "this environment's")
    parser.add_argument("--budget", type=float, default=120.0,
                        help="start no new repetition after this many seconds (default 120)")
    parser.add_argument("--no-transformers", action="store_true",
                        help="time minillm alone (no ratios)")
    parser.add_argument("--json", default=None, help="also write the JSON report to this file")
    return parser


def step_parser(parser):
    """The options of `python -m minillm bench step` (minillm.tools.bench.step)."""
    ci = bool(os.environ.get("CI"))
    parser.add_argument("--weights", default="fp32", choices=STEP_FORMATS,
                        help="how the weights are stored: fp32, bf16, fp16, int8 or q4_1 (the "
                             "GGUF file's own 4-bit blocks); default fp32")
    parser.add_argument("--threads", type=_positive("threads"), default=None,
                        help="PyTorch's threads (default: its own choice)")
    parser.add_argument("--steps", type=_positive("steps", 3), default=20 if ci else 200,
                        help="timed steps, each also run untimed (default 200; 20 when CI is "
                             "set)")
    parser.add_argument("--context", type=_positive("context"), default=128,
                        help="tokens in the cache the step attends over (default 128)")
    parser.add_argument("--model", default="smollm2-135m",
                        help="a model name, .gguf file or Hugging Face folder (default "
                             "smollm2-135m)")
    parser.add_argument("--json", default=None, help="also write the report to this file")
    return parser


def _positive(name: str, low: int = 1):
    import argparse

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"{name} must be an int >= {low}, got {text!r}")
        return value

    return parse
