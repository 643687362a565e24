"""An engine on a clock of its own, for measuring schedules rather than a machine's mood.

`ClockedEngine` steps an `Engine` and moves its clock forward by the seconds each step took, as
measured; nothing else moves it. The time between steps (the Python around them, a notebook
redrawing a chart) is not counted, and when the engine has nothing to do the clock jumps to the
next event instead of sleeping. Two ClockedEngines in one process behave as two machines side by
side: one process runs their steps one after the other, but each clock counts only its own
engine's work (chapter 06 serves prefill and decode on separate "machines" this way,
disaggregation.py).

Each new token is stamped with the clock at the end of the step that chose it, so
`metrics(request_id)` gives TTFT and TPOT (chapter 05's definitions) on this clock.
"""

from __future__ import annotations

from ..measure.metrics import RequestMetrics
from ..utils.devices import Timer
from .engine import Engine


class ClockedEngine:
    """`engine` with its own clock `now` (seconds), advanced by each step's measured time."""

    def __init__(self, engine: Engine, now: float = 0.0):
        self.engine = engine
        self.now = float(now)
        self.arrival: dict = {}       # request id -> when it arrived, on this clock
        self.token_times: dict = {}   # (request id, sample index) -> when each token was ready
        self.finished: dict = {}      # (request id, sample index) -> its final RequestOutput
        self.steps = 0
        self.busy_seconds = 0.0

    def add(self, prompt, *, at: float | None = None, **settings):
        """Queue a request that arrives at `at` on this clock (default: now); returns its id."""
        at = self.now if at is None else float(at)
        rid = self.engine.add_request(prompt, **settings)
        self.arrival[rid] = at
        return rid

    def wait_until(self, t: float) -> None:
        """Nothing to do until `t`: the clock jumps there (it never goes back)."""
        self.now = max(self.now, float(t))

    def has_work(self) -> bool:
        return self.engine.has_unfinished()

    def step(self) -> list:
        """One engine step, timed; returns its outputs."""
        with Timer(self.engine.device) as timer:
            outputs = self.engine.step()
        self.now += timer.seconds
        self.busy_seconds += timer.seconds
        self.steps += 1
        for out in outputs:
            key = (out.request_id, out.index)
            times = self.token_times.setdefault(key, [])
            times.extend([self.now] * (len(out.token_ids) - len(times)))
            if out.finished:
                self.finished[key] = out
        return outputs

    def metrics(self, request_id, index: int = 0) -> RequestMetrics:
        """TTFT, TPOT and latency of one request (one sample of it) on this clock."""
        times = self.token_times.get((request_id, index), [])
        return RequestMetrics(self.arrival[request_id], tuple(times))
