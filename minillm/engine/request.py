"""One request (请求) as the engine tracks it, and what the engine reports about it.

A request's tokens are `prompt + generated`. `num_computed` of them have their keys and values in
the paged cache; the rest are run by the next forward pass that schedules it. That one number
covers every phase:

    prefill (预填充)        num_computed < len(prompt): run (a chunk of) the prompt
    decode (解码)           one token not computed: the one sampled last step
    after a preemption     num_computed = 0 again: prompt and generated tokens are recomputed

When a pass brings `num_computed` up to `num_tokens`, the last position's logits give the next
token, which is checked against this request's own stopping rules.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..metrics import RequestMetrics
from ..results import Completion
from ..stopping import Sequence, check_stop_strings

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"
FINISH_REASONS = ("eos", "length", "stop", "cancelled")


@dataclass
class RequestOutput(Completion):
    """The state of one request after an engine step: the fields every runner shares
    (minillm.results: text and token_ids so far, finish_reason, prompt_token_ids, and metrics
    once it has finished), plus

    request_id         the id `add_request` returned
    new_text           text that became ready in this step (stream it)
    finished           True once it has ended; finish_reason is then "eos", "length", "stop" or
                       "cancelled" (or "rejected" in `Engine.generate` for a request it refused)
    num_cached_tokens  prompt tokens found in the prefix cache
    num_preemptions    times it lost its blocks and was recomputed
    error              why `Engine.generate` rejected it
    """

    request_id: object = None
    new_text: str = ""
    finished: bool = False
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    error: str | None = None


class Request:
    """A request inside the engine: its settings, tokens, block table and timing."""

    def __init__(self, request_id, prompt_ids: list[int], config, processors, generator,
                 tokenizer, eos_ids, arrival_time: float | None = None):
        self.id = request_id
        self.prompt_ids = list(prompt_ids)
        self.config = config
        self.processors = processors
        self.generator = generator
        self.sequence = Sequence(self.prompt_ids, tokenizer, eos_ids, config.max_new_tokens,
                                 check_stop_strings(config.stop))
        self.tokens = list(self.prompt_ids)  # prompt + generated (a policy may add padding)
        self.num_computed = 0
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # hashes of the full blocks at the table's start
        self.status = WAITING
        self.arrival_time = time.perf_counter() if arrival_time is None else arrival_time
        self.token_times: list[float] = []
        self.finish_time: float | None = None
        self.finish_reason: str | None = None
        self.num_cached_tokens = 0  # prompt tokens found in the prefix cache at first admission
        self.num_preemptions = 0
        self.admitted = False

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def max_tokens(self) -> int:
        """The most tokens this request can ever hold: prompt + max_new_tokens."""
        return len(self.prompt_ids) + self.config.max_new_tokens

    @property
    def remaining(self) -> int:
        """Tokens not yet in the cache: what the next pass has to run."""
        return self.num_tokens - self.num_computed

    @property
    def in_prefill(self) -> bool:
        return self.num_computed < len(self.prompt_ids)

    @property
    def finished(self) -> bool:
        return self.status == FINISHED

    def add_token(self, token: int, now: float) -> str:
        """Record the token chosen for this request at time `now`; return the text it made
        ready."""
        piece = self.sequence.add(token)
        self.tokens.append(token)
        self.token_times.append(now)
        return piece

    def output(self, new_text: str = "") -> RequestOutput:
        metrics = None
        if self.finished:
            end = max([self.finish_time, *self.token_times[-1:]])
            metrics = RequestMetrics(self.arrival_time, tuple(self.token_times),
                                     len(self.prompt_ids), end)
        return RequestOutput(text=self.sequence.text, token_ids=list(self.sequence.token_ids),
                             finish_reason=self.finish_reason, prompt_token_ids=self.prompt_ids,
                             metrics=metrics, request_id=self.id, new_text=new_text,
                             finished=self.finished, num_cached_tokens=self.num_cached_tokens,
                             num_preemptions=self.num_preemptions)

    def __repr__(self):
        return (f"Request({self.id!r}, {self.status}, prompt={len(self.prompt_ids)}, "
                f"generated={len(self.sequence.token_ids)}, computed={self.num_computed}, "
                f"blocks={self.block_table})")
