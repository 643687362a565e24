"""Threads for the cores other programs leave free.

torch runs one thread per core and splits each operation among them; every thread waits at the
end of each operation for the slowest. When another program keeps a core busy, the thread on that
core gets half its time, in slices of milliseconds, and the whole operation waits for it: on a
2-core machine with one core busy, a prompt's tokens took 24x longer with 2 threads than on a
quiet machine (docs/benchmarks.md, "A busy core"). One thread fewer than the cores others use
runs at nearly the quiet speed of that many threads.

`use_free_cores()` measures how many cores other programs keep busy (Linux: /proc/stat, over half
a second) and gives torch the rest, saying so once; it changes nothing on a quiet machine, or
where the share cannot be read. MINILLM_THREADS=N chooses the threads instead."""

from __future__ import annotations

import os
import time

import torch

from .wording import text

THREADS_VARIABLE = "MINILLM_THREADS"


def _machine_busy_ticks() -> int | None:
    """Clock ticks all cores have spent busy since boot (steal counts as busy), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    guest = sum(fields[8:10])  # already counted in user and nice
    return sum(fields) - idle - guest


def _own_seconds() -> float:
    times = os.times()
    return times.user + times.system


def others_busy_cores(seconds: float = 0.5) -> float | None:
    """How many cores programs other than this one kept busy over the next `seconds`, on
    average (1.0: one core's worth), or None where the system does not say (not Linux)."""
    ticks_per_s = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy, own, start = _machine_busy_ticks(), _own_seconds(), time.monotonic()
    if busy is None:
        return None
    time.sleep(seconds)
    busy_after, own_after = _machine_busy_ticks(), _own_seconds()
    wall = time.monotonic() - start
    others = (busy_after - busy) / ticks_per_s - (own_after - own)
    return max(0.0, others / wall)


def free_core_threads(threads: int, busy: float | None, cores: int | None = None) -> int:
    """The threads to use of `threads` when others keep `busy` of the machine's `cores` (default:
    all of them) busy: one fewer for each core more than half busy, at least one."""
    if busy is None:
        return threads
    return max(1, min(threads, (cores or os.cpu_count() or threads) - round(busy)))


def use_free_cores(seconds: float = 0.5) -> str:
    """Set torch's threads to the cores other programs leave free (or to MINILLM_THREADS), and
    say what was chosen: a line to print, naming the busy cores when threads were taken away."""
    chosen = os.environ.get(THREADS_VARIABLE, "").strip()
    if chosen:
        if not chosen.isdigit() or int(chosen) < 1:
            raise ValueError(f"{THREADS_VARIABLE}={chosen!r}: give a whole number of threads, "
                             f"1 or more (this machine has {os.cpu_count()} cores)")
        torch.set_num_threads(int(chosen))
        return text("torch threads: {n}, as {var} asks", "按 {var} 的要求，torch 使用 {n} 个线程",
                    n=int(chosen), var=THREADS_VARIABLE)
    threads = torch.get_num_threads()
    busy = others_busy_cores(seconds)
    fitted = free_core_threads(threads, busy)
    if fitted == threads:
        return text("torch threads: {n}", "torch 使用 {n} 个线程", n=threads)
    torch.set_num_threads(fitted)
    return text("other programs keep {busy:.1f} of {cores} cores busy: torch runs {n} thread(s) "
                "instead of {was}, so that no step waits for a thread on a busy core (timings "
                "are of {n} thread(s); {var}=N chooses)",
                "其他程序占着 {cores} 个核心中的 {busy:.1f} 个：torch 改用 {n} 个线程（原为 {was} "
                "个），免得每一步都等忙碌核心上的线程（计时是 {n} 个线程的；用 {var}=N 可自选）",
                busy=busy, cores=os.cpu_count(), n=fitted, was=threads, var=THREADS_VARIABLE)
