"""A load client for any OpenAI-compatible server (chapter 09):
`python -m minillm bench serve --url URL`.

    workload.py     Workload: requests, concurrency, rate, prompt and output lengths, seed
    full_length.py  asking for answers of exactly max_tokens tokens, in the spellings servers
                    understand, and the probe that finds which ones a server accepts
    client.py       send the workload (httpx, asyncio), time every streamed piece; run(url, ...)
    tokens.py       token counts with the tokenizer where the server reports no usage
    report.py       percentiles (p50, p90, p99) of TTFT, TPOT and latency, with how many requests
                    each rests on; output tokens asked against received; throughput; a table
    caveats.py      the report's warnings: answers that ended early, too few requests, guesses
    options.py      the options of `python -m minillm bench serve`
    cli.py          the command

The figures follow minillm.measure.metrics' definitions (chapter 05).
"""

from minillm.utils.lazy import lazy_exports

_EXPORTS = {"Workload": "workload", "run": "client", "run_async": "client",
            "RequestResult": "client", "summarize": "report", "table": "report",
            "percentile": "report"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
