"""What one long prompt does to the requests already decoding, with and without chunked prefill.

A decode step of a few rows is short. When a long prompt arrives, the continuous scheduler puts
its prefill into the next step beside those decodes, and every running request waits for the
whole step before its next token. With a token budget (`max_num_batched_tokens`) smaller than the
prompt, the prefill is cut into chunks, one per step (chunked prefill, 分块预填充): each step
stays short, so the running requests keep getting tokens, and the long prompt takes more steps
to its first token.

`long_prompt_arrival` measures that on a ClockedEngine: the gaps between the running requests'
tokens while the long prompt is prefilled, and the long prompt's time to first token.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..utils.validate import check_int
from .engine import Engine
from .virtual_clock import ClockedEngine


@dataclass
class Arrival:
    """The running requests' token gaps (seconds) from the long prompt's arrival to its first
    token, the longest of them (`stall`), the long prompt's TTFT and the steps in between."""

    budget: int
    gaps: list[float]
    ttft: float
    steps: int

    @property
    def stall(self) -> float:
        return max(self.gaps)

    @property
    def mean_gap(self) -> float:
        return sum(self.gaps) / len(self.gaps)


def long_prompt_arrival(engine: Engine, running_prompts, long_prompt, *,
                        warm_steps: int = 2) -> Arrival:
    """Start `running_prompts` on `engine` and step until each is decoding (`warm_steps` decode
    steps more), then add `long_prompt` and step until it has its first token. The engine's
    token budget decides whether the prompt is chunked. Every request is cancelled afterwards,
    so the engine ends empty. Prefix caching should be off, or a repeated run would find the
    prompts cached."""
    check_int("warm_steps", warm_steps, 0)
    if not running_prompts:
        raise ValueError("running_prompts is empty: the measurement needs requests decoding")
    if engine.max_num_seqs < len(running_prompts) + 1:
        raise ValueError(f"the engine runs at most {engine.max_num_seqs} sequences at once; "
                         f"{len(running_prompts)} running requests and the long prompt need "
                         f"max_num_seqs >= {len(running_prompts) + 1}")
    clocked = ClockedEngine(engine)
    budget = engine.scheduler.max_num_batched_tokens
    per_step = max(1, budget - len(running_prompts))  # prompt tokens a step takes beside decodes
    starting = len(running_prompts) + -(-sum(map(len, running_prompts)) // per_step)
    # enough tokens to keep decoding through the start, the warm-up and the long prefill
    new_tokens = starting + warm_steps + -(-len(long_prompt) // per_step) + 2
    running = [clocked.add(p, max_new_tokens=new_tokens, ignore_eos=True)
               for p in running_prompts]
    while not all(clocked.token_times.get((rid, 0)) for rid in running):
        clocked.step()
    for _ in range(warm_steps):
        clocked.step()
    start = clocked.now
    before = {rid: len(clocked.token_times[(rid, 0)]) for rid in running}
    long_id = clocked.add(long_prompt, max_new_tokens=1, ignore_eos=True)
    steps = 0
    while not clocked.token_times.get((long_id, 0)):
        clocked.step()
        steps += 1
    end = clocked.token_times[(long_id, 0)][0]
    gaps = []
    for rid in running:
        times = clocked.token_times[(rid, 0)]
        if len(times) >= new_tokens:
            raise RuntimeError("a running request finished before the long prompt's first "
                               "token: give it more tokens")
        window = times[before[rid] - 1:]  # the last token before the arrival, then the rest
        gaps += [b - a for a, b in zip(window, window[1:]) if b <= end]
    for rid in running:
        engine.cancel(rid)
    while engine.has_unfinished():
        engine.step()
    return Arrival(budget, gaps, end - start, steps)
