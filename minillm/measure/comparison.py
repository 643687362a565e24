"""Comparing two timings on a busy machine, so that a lesson's verdict does not flip with load.

A laptop with a browser and a call open runs other work between our timings: two runs of the same
code can differ by 2x. `compare` times both sides interleaved (a, b, then b, a, ...), several
times, so that load which comes and goes lands on both; `Comparison` keeps every repetition's
ratio and calls a verdict only when all of them agree. When the ratios fall on both sides of the
threshold, the honest answer is "too noisy to call", not whichever side the middle fell on.

`compare` also keeps this process's CPU time for each side. Another program's work lengthens wall
time but never enters this process's CPU time, so where the process ran one thread (its CPU time
is then its work) and load split the wall-time repetitions, the CPU times give the verdict, and
`spread_text` says that they did.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import torch

from ..utils.devices import Timer
from ..utils.validate import check_int, check_number
from ..utils.wording import text


def too_noisy() -> str:
    """The verdict when the repetitions disagree, in the current language."""
    return text("too noisy to call: close other programs and rerun this cell",
                "噪声太大，无法下结论；关掉其他程序，再运行一次这个单元格")



# CPU time speaks for a one-thread run when it is at least this share of the wall time, and the
# wall-time ratios of the repetitions spread wider than this (max over min) and than its own
CPU_SHARE = 0.3
WALL_SPREAD = 1.1
MIN_SECONDS = 1e-3


@dataclass(frozen=True)
class Comparison:
    """Seconds of side a and side b in each interleaved repetition (wall time), and this
    process's CPU seconds of each where `compare` measured them with `threads` torch threads."""

    a: tuple[float, ...]
    b: tuple[float, ...]
    cpu_a: tuple[float, ...] = ()
    cpu_b: tuple[float, ...] = ()
    threads: int = 0

    @property
    def ratios(self) -> list[float]:
        """b's time over a's, one per repetition."""
        return [tb / ta for ta, tb in zip(self.a, self.b)]

    @property
    def cpu_ratios(self) -> list[float]:
        """b's CPU time over a's, one per repetition ([] where not measured)."""
        return [tb / ta for ta, tb in zip(self.cpu_a, self.cpu_b) if ta > 0]

    @property
    def by_cpu_time(self) -> bool:
        """Whether the ratios are CPU time's: the run took one thread, its CPU time is most of
        its wall time (work done elsewhere, a server process or a sleep, is not), each side took
        MIN_SECONDS or more (below, the clocks' own jitter spreads the ratios), and the wall-time
        repetitions disagree by more than WALL_SPREAD and more than the CPU times."""
        if self.threads != 1 or len(self.cpu_ratios) != len(self.a) or not self.a \
                or min(statistics.median(self.a), statistics.median(self.b)) < MIN_SECONDS:
            return False
        share = (sum(self.cpu_a) + sum(self.cpu_b)) / (sum(self.a) + sum(self.b))
        wall = _spread(self.ratios)
        return share >= CPU_SHARE and wall > WALL_SPREAD and wall > _spread(self.cpu_ratios)

    def _verdict_ratios(self) -> list[float]:
        return self.cpu_ratios if self.by_cpu_time else self.ratios

    @property
    def ratio(self) -> float:
        """The median of the repetitions' ratios (of CPU time where `by_cpu_time`)."""
        return statistics.median(self._verdict_ratios())

    def above(self, threshold: float = 1.0) -> bool | None:
        """True when every repetition's b/a exceeds `threshold`, False when none does, None when
        the repetitions disagree (the load moved the answer). The ratios are of CPU time where
        `by_cpu_time`, else of wall time."""
        check_number("threshold", threshold, 0)
        return _side(self._verdict_ratios(), threshold)

    def near(self, threshold: float = 1.0, tolerance: float = 0.15) -> bool:
        """True when every repetition's b/a lies within `tolerance` of `threshold` (0.15: from
        0.85 to 1.15 times it): the two are about even, a finding in itself, where `above`
        answers None because the repetitions fall on both sides."""
        check_number("threshold", threshold, 0)
        check_number("tolerance", tolerance, 0)
        return all(abs(r / threshold - 1) <= tolerance for r in self._verdict_ratios())

    def spread_text(self) -> str:
        """'1.32x (1.20-1.45 over 5 interleaved repetitions)', and where the verdict comes from
        CPU time, '1.32x of this process's CPU time (...); wall time 0.90-1.60x, disturbed by
        other programs'."""
        r = self._verdict_ratios()
        if not self.by_cpu_time:
            return text("{ratio:.2f}x ({low:.2f}-{high:.2f} over {n} interleaved repetition{s})",
                        "{ratio:.2f}x（交替计时 {n} 轮，范围 {low:.2f}-{high:.2f}）",
                        ratio=self.ratio, low=min(r), high=max(r), n=len(r),
                        s="s" if len(r) != 1 else "")
        wall = self.ratios
        return text("{ratio:.2f}x of this process's CPU time ({low:.2f}-{high:.2f} over {n} "
                    "interleaved repetitions); wall time {wlow:.2f}-{whigh:.2f}x, disturbed by "
                    "other programs ({load})",
                    "按本进程的 CPU 时间为 {ratio:.2f}x（交替计时 {n} 轮，范围 {low:.2f}-{high:.2f}）；"
                    "墙钟时间为 {wlow:.2f}-{whigh:.2f}x，受其他程序干扰（{load}）",
                    ratio=self.ratio, low=min(r), high=max(r), n=len(r), wlow=min(wall),
                    whigh=max(wall), load=load_average())


def _spread(ratios: list[float]) -> float:
    """The largest ratio over the smallest (infinite when one is 0: a side that took no time)."""
    return max(ratios) / min(ratios) if min(ratios) > 0 else float("inf")


def _side(ratios: list[float], threshold: float) -> bool | None:
    over = [r > threshold for r in ratios]
    return True if all(over) else False if not any(over) else None


def compare(a, b, repeats: int = 5, *, device=None, warmup: int = 1) -> Comparison:
    """Time the calls `a()` and `b()` interleaved `repeats` times (a first in even repetitions,
    b first in odd ones), after `warmup` untimed calls of each, waiting for `device`."""
    check_int("repeats", repeats, 1)
    check_int("warmup", warmup, 0)
    for _ in range(warmup):
        a()
        b()
    times_a, times_b, cpu_a, cpu_b = [], [], [], []
    for i in range(repeats):
        for fn, times, cpu in ((a, times_a, cpu_a), (b, times_b, cpu_b)) if i % 2 == 0 else \
                ((b, times_b, cpu_b), (a, times_a, cpu_a)):
            cpu_start = time.process_time()
            with Timer(device) as t:
                fn()
            cpu.append(time.process_time() - cpu_start)
            times.append(t.seconds)
    on_cpu = device is None or str(device) == "cpu"
    return Comparison(tuple(times_a), tuple(times_b), tuple(cpu_a), tuple(cpu_b),
                      torch.get_num_threads() if on_cpu else 0)


def load_average() -> str:
    """'load average 1.3 on 2 CPUs' (what else the machine was doing), or '' where the system
    does not report one."""
    if not hasattr(os, "getloadavg"):
        return ""
    return text("load average {load:.1f} on {cpus} CPUs",
                "{cpus} 个 CPU 上的平均负载为 {load:.1f}", load=os.getloadavg()[0], cpus=os.cpu_count())


def __getattr__(name):
    # TOO_NOISY is read, not stored, so that a notebook importing it after set_language("zh")
    # gets the Chinese.
    if name == "TOO_NOISY":
        return too_noisy()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
