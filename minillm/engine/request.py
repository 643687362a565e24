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
from dataclasses import dataclass, field

from ..decoding import GenerationConfig, make_generator
from ..measure.metrics import RequestMetrics
from ..generation.results import Completion
from ..generation.stopping import Sequence, check_stop_strings
from .logprobs import TokenLogprob

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"
FINISH_REASONS = ("eos", "length", "stop", "cancelled")


@dataclass
class RequestOutput(Completion):
    """The state of one request after an engine step: the fields every runner shares
    (minillm.generation.results: text and token_ids so far, finish_reason, prompt_token_ids, and metrics
    once it has finished), plus

    request_id         the id `add_request` returned
    new_text           text that became ready in this step (stream it)
    finished           True once it has ended; finish_reason is then "eos", "length", "stop" or
                       "cancelled" (or "rejected" in `Engine.generate` for a request it refused)
    num_cached_tokens  prompt tokens found in the prefix cache
    num_preemptions    times it lost its blocks and was recomputed
    queue_time         seconds from arrival to its first admission to the running batch (None
                       until admitted)
    error              why `Engine.generate` rejected it
    index              which of the request's n samples this is (0 to n - 1)
    logprobs           with `logprobs=k`: a TokenLogprob per token of token_ids (see
                       minillm.engine.logprobs: the model's raw distribution); else None
    prompt_logprobs    with `prompt_logprobs=k`: one per prompt token, None for the first (nothing
                       comes before it); else None
    samples            from `Engine.run` and `Engine.generate`, for a request with n > 1: the
                       final outputs of all n samples, by index (this one first)
    """

    request_id: object = None
    new_text: str = ""
    finished: bool = False
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    queue_time: float | None = None
    error: str | None = None
    index: int = 0
    logprobs: list[TokenLogprob] | None = field(default=None, repr=False)
    prompt_logprobs: list[TokenLogprob | None] | None = field(default=None, repr=False)
    samples: list["RequestOutput"] = field(default_factory=list, repr=False)


class Request:
    """A request inside the engine: its settings, tokens, block table and timing.

    A request for n samples starts as one sequence (index 0) that prefills the prompt once; when
    its first token is due, `fork()` makes the other n - 1 (see Scheduler.fork): they start with
    its prompt and its blocks, shared, and from then on run as requests of their own, all under
    the same `id` (each with its own `index`, seed and sampler). `group` lists the samples so far.

    logprobs / prompt_logprobs: None, or how many most likely alternatives to report with each
    generated / prompt token's log-probability (0: the token's own only)."""

    def __init__(self, request_id, prompt_ids: list[int], config, processors, generator,
                 tokenizer, eos_ids, arrival_time: float | None = None, *, n: int = 1,
                 logprobs: int | None = None, prompt_logprobs: int | None = None):
        self.id = request_id
        self.prompt_ids = list(prompt_ids)
        self.adapter = -1  # the LoRA adapter its rows use (-1: none), set by the engine
        self.cache_salt: int | None = None  # what its cached blocks depend on beside the tokens
        self.config = config
        self.processors = processors
        self.generator = generator
        self.tokenizer, self.eos_ids = tokenizer, eos_ids
        self.sequence = Sequence(self.prompt_ids, tokenizer, eos_ids, config.max_new_tokens,
                                 check_stop_strings(config.stop))
        self.index = 0
        self.n = n
        self.forks_due = n - 1  # samples still to start from this one when its first token is due
        self.group: list[Request] = [self]
        self.logprobs_top = logprobs
        self.logprobs: list[TokenLogprob] | None = None if logprobs is None else []
        self.prompt_logprobs_top = prompt_logprobs
        self.prompt_logprobs: list[TokenLogprob | None] | None = \
            None if prompt_logprobs is None else [None]
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
        self.scheduled_time: float | None = None  # when first admitted: the queue time ends

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

    @property
    def num_seqs(self) -> int:
        """Sequences this request will run at once: itself and the samples still to fork."""
        return 1 + self.forks_due

    @property
    def needs_prompt_logits(self) -> bool:
        """Whether the next passes must keep the logits of every prompt position (prompt
        logprobs asked for and not all known yet); such a request skips the prefix cache, whose
        blocks would skip the positions."""
        return self.prompt_logprobs is not None and len(self.prompt_logprobs) < len(self.prompt_ids)

    @property
    def all_finished(self) -> bool:
        """Whether every one of the n samples has ended."""
        return self.forks_due == 0 and len(self.group) == self.n and \
            all(r.finished for r in self.group)

    def add_token(self, token: int, now: float, logprob: TokenLogprob | None = None) -> str:
        """Record the token chosen for this request at time `now` (with its log-probability when
        they are asked for); return the text it made ready."""
        piece = self.sequence.add(token)
        self.tokens.append(token)
        self.token_times.append(now)
        if self.logprobs is not None:
            self.logprobs.append(logprob)
        return piece

    def add_prompt_logprobs(self, start: int, logprobs: list[TokenLogprob]) -> None:
        """Log-probabilities of prompt tokens start, start + 1, ... (those not yet known)."""
        for position, logprob in enumerate(logprobs, start):
            if position == len(self.prompt_logprobs) and position < len(self.prompt_ids):
                self.prompt_logprobs.append(logprob)

    def fork(self) -> list["Request"]:
        """The n - 1 samples still due, each a copy of this request as it is now (prompt
        computed, no token chosen yet) with its own index, sequence and sampler; sample i
        samples with seed + i when a seed is set. The caller shares the blocks."""
        children = []
        for index in range(len(self.group), len(self.group) + self.forks_due):
            config = self.config
            if config.seed is not None:
                config = GenerationConfig.merge(config, seed=config.seed + index)
            generator = None if self.generator is None else \
                make_generator(config, self.generator.device)
            child = Request(self.id, self.prompt_ids, config, self.processors, generator,
                            self.tokenizer, self.eos_ids, self.arrival_time,
                            logprobs=self.logprobs_top)
            child.index, child.n, child.group = index, self.n, self.group
            child.prompt_logprobs = self.prompt_logprobs
            child.tokens = list(self.tokens)
            child.num_computed = self.num_computed
            child.block_table = list(self.block_table)
            child.block_hashes = list(self.block_hashes)
            child.adapter, child.cache_salt = self.adapter, self.cache_salt
            child.status, child.admitted = self.status, True
            child.num_cached_tokens = self.num_cached_tokens
            child.scheduled_time = self.scheduled_time
            children.append(child)
        self.group.extend(children)
        self.forks_due = 0
        return children

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
                             num_preemptions=self.num_preemptions, index=self.index,
                             queue_time=None if self.scheduled_time is None
                             else self.scheduled_time - self.arrival_time,
                             logprobs=None if self.logprobs is None else list(self.logprobs),
                             prompt_logprobs=self.prompt_logprobs)

    def __repr__(self):
        index = f"[{self.index}]" if self.n > 1 else ""
        return (f"Request({self.id!r}{index}, {self.status}, prompt={len(self.prompt_ids)}, "
                f"generated={len(self.sequence.token_ids)}, computed={self.num_computed}, "
                f"blocks={self.block_table})")
