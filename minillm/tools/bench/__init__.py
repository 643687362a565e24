"""`python -m minillm bench latency`: minillm's fast engine against transformers' generate() on
the same weights, in the same process (chapter 05).

    run.py        the workload, the interleaved repetitions, the table and the JSON line
    options.py    the command's options (and `bench step`'s)
    step.py       `bench step`: one decode step timed operation by operation

The read bandwidth and the decode bound it implies are the engine's: `minillm.measure.bandwidth`.
"""

from importlib import import_module

_NAMES = {"run": "run", "table": "run", "run_cli": "run", "main": "options",
          "build_parser": "options"}
__all__ = sorted(_NAMES)


def __getattr__(name):  # imported on first use: building the command line needs no torch
    if name in _NAMES:
        return getattr(import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'minillm.tools.bench' has no attribute {name!r}")
