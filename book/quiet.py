"""Whether the machine was quiet while a lesson ran: the CPU time other programs took from it.

A lesson's timings are only as true as the machine was quiet. The load average cannot say so
while the lesson itself runs (its own threads count in it), so the book measures the CPU time the
whole machine spent busy and subtracts what this process and its children (the kernel, the
processes a lesson starts) spent: the rest went to other programs (and, on a virtual machine, to
its neighbours: steal time counts as busy). Sampled every second through the run, and in a short
probe before it starts. A copy recorded while others took more than QUIET_SHARE of the cores is
not written (book/__main__.py waits and runs it again, then stops)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import psutil

# Other programs may take at most this share of the machine's cores, on average over the run:
# one core of two kept busy by another program is 0.5, a browser idling beside it a few percent.
QUIET_SHARE = 0.2


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (all cores, steal included)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) \
        - getattr(t, "guest_nice", 0.0)


def own_tree_seconds() -> float:
    """CPU seconds this process and every process below it have used: each living process's own
    time and its reaped children's (a child that ends moves its time into its parent's
    children_user and children_system, so the sum goes on counting it)."""
    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            t = process.cpu_times()
        except psutil.Error:  # gone between the listing and the read: its parent has it
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


@dataclass(frozen=True)
class Quiet:
    """What a watch measured: others' CPU seconds over `wall` seconds on `cores` cores, and the
    1-minute load average at its start and its highest."""

    others_seconds: float
    wall: float
    cores: int
    load_start: float
    load_max: float

    @property
    def share(self) -> float:
        """The share of the machine's cores other programs took (0 to 1: over a short watch the
        kernel's CPU clocks, counted in ticks, can add up to a little more than the wall time
        allows)."""
        return min(1.0, max(0.0, self.others_seconds) / max(self.wall * self.cores, 1e-9))

    @property
    def quiet(self) -> bool:
        return self.share <= QUIET_SHARE

    def record(self) -> dict:
        return {"others_share": round(self.share, 3), "load_average": round(self.load_start, 2),
                "load_average_max": round(self.load_max, 2), "quiet": self.quiet}

    def sentence(self) -> str:
        return (f"other programs took {self.share:.0%} of the {self.cores} cores over "
                f"{self.wall:.0f} s (at most {QUIET_SHARE:.0%} is quiet); load average "
                f"{self.load_start:.2f} at the start, {self.load_max:.2f} at its highest")


class CpuWatch:
    """`with CpuWatch() as watch: ...`, then `watch.result`: the machine's busy CPU time against
    this process tree's, sampled every `interval` seconds in a thread. `busy` and `ours` read the
    two clocks (tests give their own)."""

    def __init__(self, interval: float = 1.0, busy=machine_busy_seconds, ours=own_tree_seconds):
        self.interval, self.busy, self.ours = interval, busy, ours
        self.result: Quiet | None = None
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._ours = max(self._ours, self.ours())
            self._load_max = max(self._load_max, os.getloadavg()[0])

    def __enter__(self):
        self._load_start = self._load_max = os.getloadavg()[0]
        self._busy0, self._ours0 = self.busy(), self.ours()
        self._ours, self._wall0 = self._ours0, time.monotonic()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        ours = max(self.ours(), self._ours)
        self.result = Quiet(others_seconds=(self.busy() - self._busy0) - (ours - self._ours0),
                            wall=time.monotonic() - self._wall0, cores=os.cpu_count() or 1,
                            load_start=self._load_start,
                            load_max=max(self._load_max, os.getloadavg()[0]))
        return False


def probe(seconds: float = 3.0) -> Quiet:
    """How quiet the machine is now, this process idle: others' share over `seconds`."""
    with CpuWatch(interval=min(1.0, seconds)) as watch:
        time.sleep(seconds)
    return watch.result
