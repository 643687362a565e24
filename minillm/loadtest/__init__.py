"""A load client for any OpenAI-compatible server (chapter 09): `python -m minillm bench --url`.

    workload.py   Workload: requests, concurrency, rate, prompt and output lengths, seed
    client.py     send the workload (httpx, asyncio), time every streamed piece; run(url, ...)
    report.py     percentiles (p50, p90, p99) of TTFT, TPOT and latency; throughput; a table
    options.py    the command-line options, added to `python -m minillm bench`
    cli.py        the command

The figures follow minillm.metrics' definitions (chapter 05).
"""

from minillm.lazy import lazy_exports

_EXPORTS = {"Workload": "workload", "run": "client", "run_async": "client",
            "RequestResult": "client", "summarize": "report", "table": "report",
            "percentile": "report"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
