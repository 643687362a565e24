"""A load client for any OpenAI-compatible server (chapter 09): `python -m minillm bench --url`.

    workload.py   Workload: requests, concurrency, rate, prompt and output lengths, seed
    client.py     send the workload (httpx, asyncio), time every streamed piece; run(url, ...)
    report.py     percentiles (p50, p90, p99) of TTFT, TPOT and latency; throughput; a table
    options.py    the command-line options, added to `python -m minillm bench`
    cli.py        the command

The figures follow minillm.metrics' definitions (chapter 05).
"""

from importlib import import_module

_EXPORTS = {"Workload": "workload", "run": "client", "run_async": "client",
            "RequestResult": "client", "summarize": "report", "table": "report",
            "percentile": "report"}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'minillm.loadtest' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
