"""An OpenAI-compatible server (chapter 09): the chapter 06 engine behind HTTP.

    protocol.py   the request shapes (strictly checked) and OpenAI's error body
    responses.py  the answer shapes: every body and stream chunk, as pydantic models
    answers.py    engine outputs -> answers (n choices, echo, streamed or whole)
    logprobs.py   log-probabilities in OpenAI's chat and legacy completions shapes
    metrics.py    /metrics: Prometheus counters, gauges and histograms (prometheus-client)
    runner.py     EngineLoop: one thread steps the engine; each HTTP request waits on its queue
    app.py        create_app(engine): the FastAPI routes, streaming with server-sent events
    launch.py     `python -m minillm serve`, ServerThread (in this process), ServerProcess (a child)
    options.py    the command line's options

Names are imported on first use, so `python -m minillm --help` does not import FastAPI or torch.
docs/server.md describes what the server supports.
"""

from minillm.utils.lazy import lazy_exports

_EXPORTS = {"create_app": "app", "ServerThread": "launch", "ServerProcess": "launch",
            "free_port": "launch", "make_engine": "launch", "EngineLoop": "runner",
            "APIError": "protocol", "CompletionRequest": "protocol",
            "ChatCompletionRequest": "protocol"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
