"""The doctor's kernels line: are minillm's C kernels built here, and what does that mean for
decoding speed on this machine, measured now, never typed in.

With the kernels: a decode step of the course model with them against one on PyTorch's kernels
(the same model loaded inside `dispatch.without_kernels()`). Without them (a machine that cannot
build them): a step on PyTorch's kernels against the time this machine needs to read the
weights once (`measure.bandwidth.read_bandwidth`), the bound a decode step cannot beat.
"""

from __future__ import annotations

import statistics
import time

STEPS = 12  # decode steps timed per model; the median is kept


def step_seconds(model, steps: int = STEPS) -> float:
    """Median seconds of one batch-1 decode step of `model` (after a short prompt and a warm-up
    step), on the CPU."""
    import torch

    from ..generation.kv_cache import KVCache

    cache = KVCache.for_model(model, 1, steps + 8)
    times = []
    with torch.inference_mode():
        model(torch.tensor([[1, 2, 3, 4]]), cache=cache)
        model(torch.tensor([[5]]), cache=cache)
        for i in range(steps):
            start = time.perf_counter()
            model(torch.tensor([[6 + i]]), cache=cache)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(kernels_too: bool) -> dict:
    """Seconds per decode step of the course model (fp32, the default load) on PyTorch's
    kernels, with minillm's (when `kernels_too`), and the time to read its weights once."""
    import minillm

    from ..kernels import dispatch
    from ..measure.bandwidth import read_bandwidth
    from ..model.memory import weight_bytes

    found = {}
    if kernels_too:
        model, _ = minillm.load("smollm2-135m", device="cpu")
        found["kernels"] = step_seconds(model)
        del model
    with dispatch.without_kernels():
        model, _ = minillm.load("smollm2-135m", device="cpu")
        found["pytorch"] = step_seconds(model)
    found["read"] = weight_bytes(model) / read_bandwidth("cpu", megabytes=256, repeats=3)
    return found


def kernels_line(measured: bool = True) -> tuple[bool, str, str]:
    """(ok, the line, a fix) for the doctor. Not ok only where a build was tried and failed: a
    machine without kernels still runs the course, on PyTorch's kernels."""
    from ..kernels import build, dispatch

    cannot = build.cannot_build()
    state = None if cannot else build.status()  # builds on first ask
    if state is not None and state.failed:
        return (False, f"not built: {state.reason}; decoding runs on PyTorch's kernels, slower",
                "install a C compiler (gcc or clang) or set CC to a working one, then run "
                "`python -m minillm doctor` again")
    if dispatch.switched_off():
        head = f"not used: switched off by {dispatch.SWITCH}"
    elif state is not None:
        head = (f"built, {state.label} (levels this machine runs: "
                f"{', '.join(build.levels_here())}; {build.LEVEL_VARIABLE} picks one)")
    else:
        head = f"not built: {cannot}"
    if not measured:
        return True, head, ""
    times = measure(kernels_too=state is not None and state.built)
    pytorch = times["pytorch"]
    if "kernels" in times:
        ratio, speed = pytorch / times["kernels"], (
            f"a decode step takes {1e3 * times['kernels']:.1f} ms with them, "
            f"{1e3 * pytorch:.1f} ms on PyTorch's kernels")
        if dispatch.switched_off():
            return True, f"{head}; decoding runs on PyTorch, about {ratio:.1f}x slower here " \
                         f"({speed})", ""
        return True, f"{head}; {ratio:.1f}x faster decoding here ({speed})", ""
    return True, (f"{head}; decoding runs on PyTorch, about {pytorch / times['read']:.1f}x slower "
                  f"here than reading the weights allows ({1e3 * pytorch:.1f} ms a step against "
                  f"{1e3 * times['read']:.1f} ms to read them once)"), ""
