"""Starting and stopping the server: `python -m minillm serve`, or from Python.

    python -m minillm serve --port 8000                  # SmolLM2 on http://127.0.0.1:8000
    python -m minillm serve --weights int8               # int8 weights (fp32, bf16, int8, q4_1)
    python -m minillm serve --lora sql=sql.safetensors   # and a LoRA adapter, as model "sql"

    with ServerThread(engine) as server:                 # in this process, on a free port
        httpx.get(server.url + "/health")

    with ServerProcess(["--tiny"]) as server:            # `python -m minillm serve` in a child
        ...

Both bind 127.0.0.1 unless told otherwise, and both stop the server when the `with` block ends,
also when it ends with an error.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

from .options import API_KEY_ENV, LOOPBACK, SERVE_WEIGHTS, parse_lora


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def make_engine(model: str = "smollm2-135m", *, tiny: bool = False, device: str = "cpu",
                weights: str = "fp32", max_num_seqs: int = 16, num_blocks: int = 512,
                block_size: int = 16, max_num_batched_tokens: int = 512,
                lora: dict | None = None):
    """Load a model with its `weights` in one of SERVE_WEIGHTS (as `minillm.load(...,
    weights=...)` loads it) and wrap it in the chapter 06 engine. `tiny`: a random 2-layer Llama
    with a letter tokenizer (for tests: it starts in a moment and its answers are nonsense).
    `lora`: {name: path} of LoRA adapter files (minillm.engine.lora.save_adapter's) that the
    engine serves beside the model; each is checked against the model before any is installed."""
    from ...engine import Engine

    if weights not in SERVE_WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(SERVE_WEIGHTS)}, got {weights!r}")
    for name, path in (lora or {}).items():  # before a long load, not after it
        if not os.path.isfile(path):
            raise FileNotFoundError(f"LoRA adapter {name!r}: no file {path}")
    if tiny:
        from ...model.toy import tiny_model

        if weights == "q4_1":
            raise ValueError("weights 'q4_1' runs a GGUF file's own 4-bit blocks, and the tiny "
                             f"model has no file: serve it with "
                             f"{', '.join(w for w in SERVE_WEIGHTS if w != 'q4_1')}")
        m, tok = tiny_model()
        if weights != "fp32":  # fp32 keeps the readable model, as before the option
            from ...fast import optimize

            m = optimize(m, weights)
    else:
        from ...loading import load

        check_device(device)
        m, tok = load(model, device=device, weights=weights)
        if tok is None:
            raise ValueError(f"{model} has no tokenizer minillm can read: the server needs one "
                             "to turn text into tokens and back")
    return Engine(m, tok, num_blocks=num_blocks, block_size=block_size,
                  max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                  lora=install_adapters(m, lora) if lora else None)


def install_adapters(model, files: dict):
    """A MultiLoRA of the adapter files {name: path}, installed on `model` once every one of
    them has been read and fitted to it (minillm.engine.lora.fit_adapter: the fast path's fused
    layers, one rank for all, zeros padding the smaller); ValueError naming the adapter else."""
    import warnings

    from ...engine.lora import MultiLoRA, fit_adapter, load_adapter
    from ...utils.notices import say_once

    fitted = {}
    for name, path in files.items():
        try:
            adapter = load_adapter(path)  # its errors name the file
        except (ValueError, FileNotFoundError) as error:
            raise type(error)(f"LoRA adapter {name!r}: {error}") from None
        try:
            fitted[name] = fit_adapter(model, adapter)
        except ValueError as error:
            raise ValueError(f"LoRA adapter {name!r}: {path}: {error}") from None
    rank = max(next(iter(a.values()))[0].shape[0] for a in fitted.values())
    with warnings.catch_warnings(record=True) as said:  # the fused decode step left out
        warnings.simplefilter("always", RuntimeWarning)
        lora = MultiLoRA(model, {name: fit_adapter(model, a, rank) for name, a in fitted.items()})
    for warning in said:
        say_once(str(warning.message))  # one line like the engine's other start-up notices
    return lora


def check_device(device: str) -> None:
    """ValueError when this machine's PyTorch cannot use `device` (a clear message before any
    weight is loaded, not a traceback from deep inside the load)."""
    import torch

    from ...utils.devices import pick_device

    chosen = pick_device(device)
    usable = {"cuda": torch.cuda.is_available,
              "mps": lambda: torch.backends.mps.is_available()}.get(chosen.type, lambda: True)
    if not usable():
        raise ValueError(f"device {device!r}: this machine's PyTorch cannot use {chosen.type} "
                         "(no such device, or a build without it); use 'cpu' or 'auto'")


class ServerThread:
    """Serve `engine` with uvicorn in a daemon thread of this process (a pre-bound socket: no
    race for the port). `start()` returns once /health answers."""

    def __init__(self, engine, model_name: str = "minillm", host: str = LOOPBACK,
                 port: int = 0, **app_options):
        import uvicorn

        from .app import create_app

        self.app = create_app(engine, model_name, **app_options)
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.host, self.port = host, self.socket.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning",
                                                    timeout_graceful_shutdown=2))
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def loop(self):
        return self.app.state.loop

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]},
                                       name="minillm-server", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start within {timeout:.0f} s")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout)
        self.socket.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class ServerProcess:
    """`python -m minillm serve` in a child process on a free loopback port. `start()` waits
    until /health answers (or the process dies, or `timeout` passes); `stop()` ends it."""

    def __init__(self, args=(), port: int | None = None, host: str = LOOPBACK, env=None,
                 log=None):
        self.host, self.port = host, port or free_port(host)
        self.args = [sys.executable, "-m", "minillm", "serve", "--host", host,
                     "--port", str(self.port), *args]
        self.env = {**os.environ, **(env or {})}
        self.log = log
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 120.0) -> "ServerProcess":
        import httpx

        self.process = subprocess.Popen(self.args, env=self.env, stdin=subprocess.DEVNULL,
                                        stdout=self.log or subprocess.DEVNULL,
                                        stderr=self.log or subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with code {self.process.returncode} "
                                   f"before it answered: {' '.join(self.args)}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not answer /health within {timeout:.0f} s")
            time.sleep(0.25)

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# --- the command line ---------------------------------------------------------------------------

def serve_cli(args) -> int:
    import uvicorn

    from .app import create_app

    if not 0 <= args.port < 65536:
        print(f"minillm serve: --port must be 0 to 65535, got {args.port}", file=sys.stderr)
        return 2
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        engine = make_engine(args.model, tiny=args.tiny, device=args.device,
                             weights=args.weights, max_num_seqs=args.max_num_seqs,
                             num_blocks=args.num_blocks, block_size=args.block_size,
                             max_num_batched_tokens=args.max_num_batched_tokens,
                             lora=parse_lora(args.lora))
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"minillm serve: {error}", file=sys.stderr)
        return 2
    name = args.served_model_name or ("tiny" if args.tiny else args.model)
    api_key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV)
    try:
        app = create_app(engine, name, default_max_tokens=args.default_max_tokens,
                         api_key=api_key, grammar_backend=args.grammar_backend)
    except (ValueError, ImportError) as error:
        print(f"minillm serve: {error}", file=sys.stderr)
        return 2
    if args.host not in (LOOPBACK, "localhost", "::1"):
        print(f"minillm serve: listening on {args.host}: other machines can reach this server",
              file=sys.stderr)
    adapters = f", LoRA adapters {', '.join(engine.lora.names)}" if engine.lora else ""
    print(f"minillm serve: {name} ({engine.weights} weights{adapters}) on "
          f"http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                timeout_graceful_shutdown=5)
    return 0
