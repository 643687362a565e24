"""One background thread drives the engine; every HTTP request waits on its own queue.

    handler (event loop)                 engine thread
    --------------------                 -------------
    submit(prompt, config) ---add----->  engine.step()   one forward pass for the whole batch
    async for out in stream:  <--out---  each output goes to its request's asyncio.Queue
    (client gone) abort(id) --cancel-->  engine.cancel(id): its KV blocks go back to the pool

A request for n samples gets the outputs of all n on its one queue (each names its `index`);
it is done when n of them have finished. The loop also counts what /metrics reports.

Requests that arrive while others run join the running batch at the next step: continuous
batching (连续批处理) across HTTP clients. The engine's lock makes add/cancel safe from other
threads; `submit` runs `add_request` in a worker thread so the event loop never waits for a step.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import deque

from .metrics import ServerMetrics
from .protocol import APIError


class EngineLoop:
    """Own an `Engine` and step it in a daemon thread while any request is unfinished."""

    def __init__(self, engine, poll_s: float = 0.05, model_name: str = "minillm"):
        self.engine = engine
        self.poll_s = poll_s
        self.metrics = ServerMetrics(engine, model_name)
        self._queues: dict[str, _Waiting] = {}
        self._cancels: deque = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.steps = 0
        self.max_batch = 0      # the most requests that shared one step
        self.completed = 0
        self.cancelled = 0
        self.error: str | None = None

    # --- the thread --------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="minillm-engine", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        engine = self.engine
        while not self._stop.is_set():
            while self._cancels:
                if engine.cancel(self._cancels.popleft()):
                    self.cancelled += 1
            if not engine.wait_for_work(timeout=self.poll_s):
                continue
            try:
                outputs = engine.step()
            except Exception as error:  # a bug: fail the waiting requests, keep serving
                self.error = f"{type(error).__name__}: {error}"
                for rid in list(self._queues):
                    engine.cancel(rid)
                    self._deliver(rid, error)
                continue
            self.steps += 1
            self.max_batch = max(self.max_batch, engine.num_running())
            for out in outputs:
                self.metrics.observe(out)
                self._deliver(out.request_id, out)

    def _deliver(self, rid, item) -> None:
        target = self._queues.get(rid)
        if target is None:
            return
        if isinstance(item, Exception):
            self._queues.pop(rid, None)
        elif item.finished:
            target.left -= 1
            if target.left == 0:
                self._queues.pop(rid, None)
                if item.finish_reason != "cancelled":
                    self.completed += 1
        try:
            target.loop.call_soon_threadsafe(target.queue.put_nowait, item)
        except RuntimeError:  # the event loop has closed: nobody is waiting any more
            pass

    # --- the handlers' side ------------------------------------------------------------------

    async def submit(self, prompt, config, prefix: str = "cmpl", **options
                     ) -> tuple[str, asyncio.Queue]:
        """Queue a request (`options`: add_request's n, logprobs, prompt_logprobs,
        logits_processor, adapter); returns its id and the queue its outputs will arrive on.
        A request the engine refuses raises APIError(400) with the engine's reason."""
        if not self.alive:
            raise APIError(503, "the engine loop is not running", type="server_error")
        rid = f"{prefix}-{uuid.uuid4().hex[:24]}"
        queue: asyncio.Queue = asyncio.Queue()
        self._queues[rid] = _Waiting(asyncio.get_running_loop(), queue, options.get("n", 1))
        try:
            await asyncio.to_thread(self.engine.add_request, prompt, config, request_id=rid,
                                    **options)
            self.metrics.accepted(len(prompt))
        except (ValueError, TypeError) as error:
            self._queues.pop(rid, None)
            raise APIError(400, str(error), "prompt" if "prompt" in str(error) else None) \
                from None
        except BaseException:
            self._queues.pop(rid, None)
            self.abort(rid)
            raise
        return rid, queue

    def abort(self, rid) -> None:
        """Cancel a request (its client went away); the engine thread frees its blocks."""
        if self._queues.pop(rid, None) is not None or self.engine.is_active(rid):
            self._cancels.append(rid)

    async def outputs(self, rid, queue: asyncio.Queue, n: int = 1):
        """Yield the request's outputs until its n samples have finished; cancel it if the
        caller stops early."""
        left = n
        try:
            while left:
                item = await queue.get()
                if isinstance(item, Exception):
                    raise APIError(500, f"the engine failed: {type(item).__name__}: {item}",
                                   type="server_error")
                left -= item.finished
                yield item
        finally:
            if left:
                self.abort(rid)

    def stats(self) -> dict:
        return {"steps": self.steps, "max_batch": self.max_batch, "completed": self.completed,
                "cancelled": self.cancelled, "waiting_clients": len(self._queues),
                "engine_error": self.error, **self.engine.stats()}


class _Waiting:
    """A request's queue, on its event loop, and how many of its samples are still running."""

    __slots__ = ("loop", "queue", "left")

    def __init__(self, loop, queue, n: int):
        self.loop, self.queue, self.left = loop, queue, n


def now() -> int:
    return int(time.time())
