"""An OpenAI-compatible server (chapter 09): the chapter 06 engine behind HTTP.

    protocol.py   the request shapes (strictly checked) and OpenAI's error body
    runner.py     EngineLoop: one thread steps the engine; each HTTP request waits on its queue
    app.py        create_app(engine): the FastAPI routes, streaming with server-sent events
    launch.py     `python -m minillm serve`, ServerThread (in this process), ServerProcess (a child)
    options.py    the command line's options

Names are imported on first use, so `python -m minillm --help` does not import FastAPI or torch.
"""

from importlib import import_module

_EXPORTS = {"create_app": "app", "ServerThread": "launch", "ServerProcess": "launch",
            "free_port": "launch", "make_engine": "launch", "EngineLoop": "runner",
            "APIError": "protocol", "CompletionRequest": "protocol",
            "ChatCompletionRequest": "protocol"}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'minillm.server' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
