"""Comparing two timings on a busy machine, so that a lesson's verdict does not flip with load.

A laptop with a browser and a call open runs other work between our timings: two runs of the same
code can differ by 2x. `compare` times both sides interleaved (a, b, then b, a, ...), several
times, so that load which comes and goes lands on both; `Comparison` keeps every repetition's
ratio and calls a verdict only when all of them agree. When the ratios fall on both sides of the
threshold, the honest answer is "too noisy to call", not whichever side the middle fell on.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

from ..utils.devices import Timer
from ..utils.validate import check_int, check_number
from ..utils.wording import text


def too_noisy() -> str:
    """The verdict when the repetitions disagree, in the current language."""
    return text("too noisy to call: close other programs and rerun this cell",
                "噪声太大，无法下结论；关掉其他程序，再运行一次这个单元格")



@dataclass(frozen=True)
class Comparison:
    """Seconds of side a and side b in each interleaved repetition."""

    a: tuple[float, ...]
    b: tuple[float, ...]

    @property
    def ratios(self) -> list[float]:
        """b's time over a's, one per repetition."""
        return [tb / ta for ta, tb in zip(self.a, self.b)]

    @property
    def ratio(self) -> float:
        """The median of the repetitions' ratios."""
        return statistics.median(self.ratios)

    def above(self, threshold: float = 1.0) -> bool | None:
        """True when every repetition's b/a exceeds `threshold`, False when none does, None when
        the repetitions disagree (the load moved the answer)."""
        check_number("threshold", threshold, 0)
        over = [r > threshold for r in self.ratios]
        return True if all(over) else False if not any(over) else None

    def near(self, threshold: float = 1.0, tolerance: float = 0.15) -> bool:
        """True when every repetition's b/a lies within `tolerance` of `threshold` (0.15: from
        0.85 to 1.15 times it): the two are about even, a finding in itself, where `above`
        answers None because the repetitions fall on both sides."""
        check_number("threshold", threshold, 0)
        check_number("tolerance", tolerance, 0)
        return all(abs(r / threshold - 1) <= tolerance for r in self.ratios)

    def spread_text(self) -> str:
        """'1.32x (1.20-1.45 over 5 interleaved repetitions)'."""
        r = self.ratios
        return text("{ratio:.2f}x ({low:.2f}-{high:.2f} over {n} interleaved repetition{s})",
                    "{ratio:.2f}x（交替计时 {n} 轮，范围 {low:.2f}-{high:.2f}）",
                    ratio=self.ratio, low=min(r), high=max(r), n=len(r),
                    s="s" if len(r) != 1 else "")


def compare(a, b, repeats: int = 5, *, device=None, warmup: int = 1) -> Comparison:
    """Time the calls `a()` and `b()` interleaved `repeats` times (a first in even repetitions,
    b first in odd ones), after `warmup` untimed calls of each, waiting for `device`."""
    check_int("repeats", repeats, 1)
    check_int("warmup", warmup, 0)
    for _ in range(warmup):
        a()
        b()
    times_a, times_b = [], []
    for i in range(repeats):
        for fn, times in ((a, times_a), (b, times_b)) if i % 2 == 0 else \
                ((b, times_b), (a, times_a)):
            with Timer(device) as t:
                fn()
            times.append(t.seconds)
    return Comparison(tuple(times_a), tuple(times_b))


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
