"""The engine (推理引擎): many requests, one model, one paged KV cache.

    engine = Engine(model, tokenizer, num_blocks=256)        # continuous batching by default
    rid = engine.add_request("Hello", max_new_tokens=20, temperature=0.7, do_sample=True)
    while engine.has_unfinished():
        for out in engine.step():                           # one forward pass for the batch
            print(out.request_id, out.new_text, out.finished)

Each `step()` asks the scheduler what to run, runs it (through the paged cache), picks each
request's next token with its *own* settings (chapter 04's processors and sampler), checks its own
stopping rules, and frees the blocks of requests that ended.

    rid = engine.add_request("Once upon a time", n=4, do_sample=True, logprobs=5)

asks for four samples of one prompt: the prompt is prefilled once and its blocks are shared by the
four (copy-on-write, see block_manager.py); each output names its sample by `index`. `logprobs=k`
adds each new token's log-probability and the k most likely alternatives, `prompt_logprobs=k`
the same for the prompt's tokens (the model's raw distribution: see logprobs.py).

`add_request`, `cancel` and `step` take one lock, so other threads may add and cancel requests
while one loop calls `step()` (`wait_for_work` lets that loop sleep while there is nothing to do).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass, field

import torch

from ..decoding import GenerationConfig, choose_next_token
from ..generation.request import make_request
from ..utils.devices import model_device
from ..utils.devices import now as clock
from ..utils.notices import say_once
from ..utils.validate import check_int
from .block_manager import BlockManager
from .logprobs import token_logprobs
from .paged_cache import PagedKVPool, paged_forward
from .quantized_pool import QuantizedKVPool
from .request import FINISHED, Request, RequestOutput
from .scheduler import SCHEDULERS, Scheduler
from .weights import batched_fallback, weight_format


@dataclass
class StepRecord:
    """What one step ran, for timelines and memory charts (kept when `record=True`).

    items            (request id, tokens run, kind) with kind "prefill", "decode", "recompute"
                     or "ghost" (a finished row of a static batch, still running)
    used_tokens      tokens whose keys and values sit in the cache for running requests
    paged_slots      slots in the blocks those requests hold (blocks in use x block size)
    contiguous_slots slots a contiguous cache would reserve for them: prompt + max_new_tokens each
    computed_rows    token positions the forward passes computed: batch x padded length per pass,
                     so padding and ghost rows count (the work the hardware did)
    """

    start: float
    end: float
    items: list = field(default_factory=list)
    used_tokens: int = 0
    paged_slots: int = 0
    contiguous_slots: int = 0
    running: int = 0
    waiting: int = 0
    computed_rows: int = 0


class Engine:
    """Serve many requests with one model. `scheduler` names a policy ("continuous" or
    "static", the keys of minillm.engine.scheduler.SCHEDULERS) or is a Scheduler subclass.
    `kv_cache_format` None keeps the pool in the model's dtype; "int8" or "fp8_e4m3" stores keys
    and values in 8 bits with per-token scales (QuantizedKVPool)."""

    def __init__(self, model, tokenizer, *, scheduler="continuous",
                 num_blocks: int = 256, block_size: int = 16, max_num_seqs: int = 16,
                 max_num_batched_tokens: int = 512, enable_prefix_caching: bool = True,
                 record: bool = False, kv_cache_format: str | None = None, lora=None):
        policy = SCHEDULERS.get(scheduler) if isinstance(scheduler, str) else scheduler
        if not (isinstance(policy, type) and issubclass(policy, Scheduler)):
            raise ValueError(f"scheduler must be {' or '.join(map(repr, SCHEDULERS))} or a "
                             f"Scheduler subclass, got {scheduler!r}")
        self.model, self.tokenizer = model, tokenizer
        self.device = model_device(model)
        self.max_seq_len = model.config.max_seq_len
        self.blocks = BlockManager(num_blocks, block_size,
                                   enable_prefix_caching and policy.uses_prefix_cache)
        self.pool = (PagedKVPool.for_model(model, num_blocks, block_size)
                     if kv_cache_format is None else  # keys and values in 8 bits, per token
                     QuantizedKVPool.for_model(model, num_blocks, block_size, kv_cache_format))
        self.scheduler = policy(self.blocks, max_num_seqs, max_num_batched_tokens,
                                self.max_seq_len)
        self.kind = scheduler if isinstance(scheduler, str) else policy.__name__
        self.lora = lora  # a MultiLoRA installed on `model`: each request may name an adapter
        self.requests: dict[object, Request] = {}  # live requests; forgotten once ended
        self.record = record
        self.steps: list[StepRecord] = []
        self._ids = itertools.count()
        self._lock = threading.RLock()
        self._work = threading.Condition(self._lock)
        self._cancelled: list[RequestOutput] = []
        fallback = batched_fallback(model, max_num_seqs, max_num_batched_tokens)
        if fallback is not None:
            say_once(fallback)

    # --- requests in ------------------------------------------------------------------------------

    def add_request(self, prompt, config: GenerationConfig | None = None, *, request_id=None,
                    arrival_time: float | None = None, n: int = 1, logprobs: int | None = None,
                    prompt_logprobs: int | None = None, logits_processor=None,
                    adapter: str | None = None, **fields) -> object:
        """Queue one prompt (text or token ids) with its own settings; returns its id.

        n                 samples of this prompt, 1 to max_num_seqs: the prompt is prefilled
                          once; outputs carry `index` 0..n-1 (sample i uses seed + i)
        logprobs          None, or k >= 0: each new token's log-probability and the k most
                          likely tokens at its position (RequestOutput.logprobs)
        prompt_logprobs   the same for every prompt token (RequestOutput.prompt_logprobs)
        logits_processor  a function of (input_ids, scores) run before the config's processors,
                          e.g. a minillm.decoding.JSONConstraint; the n samples share it
        adapter           the name of a LoRA adapter of the engine's `lora` to run the request
                          with (None: the base model); its cached blocks are its adapter's own

        The prompt and its options are checked at the front door every runner shares
        (minillm.generation.request.make_request). A setting that is invalid, or a request that
        could never fit (longer than the model's context window or than the whole block pool),
        raises ValueError/TypeError for this request alone: nothing is queued and the other
        requests are not touched."""
        vocab = self.model.config.vocab_size
        check_int("n", n, 1, self.max_num_seqs,
                  allowed=f"an int from 1 to max_num_seqs ({self.max_num_seqs})")
        check_int("logprobs", logprobs, 0, vocab, allow_none=True)
        check_int("prompt_logprobs", prompt_logprobs, 0, vocab, allow_none=True)
        if adapter is not None and self.lora is None:
            raise ValueError(f"adapter {adapter!r} asked for, but this engine serves no LoRA "
                             "adapters: pass Engine(..., lora=MultiLoRA(model, adapters))")
        adapter_id = -1 if self.lora is None else self.lora.index(adapter)
        checked = make_request(self.model, self.tokenizer, prompt, config,
                               runner="Engine.add_request", logits_processor=logits_processor,
                               **fields)
        ids, config = checked.prompt_ids, checked.config
        total = len(ids) + config.max_new_tokens
        need = self.blocks.blocks_for(total)
        if need > self.blocks.num_blocks:
            raise ValueError(f"this request can never fit: prompt ({len(ids)}) + max_new_tokens "
                             f"({config.max_new_tokens}) = {total} tokens need {need} blocks of "
                             f"{self.blocks.block_size}, the pool has only "
                             f"{self.blocks.num_blocks}; lower max_new_tokens, shorten the "
                             "prompt, or make the pool larger")
        generator = checked.generator(self.device)
        with self._lock:
            if request_id is None:
                request_id = next(self._ids)
                while request_id in self.requests:
                    request_id = next(self._ids)
            elif request_id in self.requests:
                raise ValueError(f"request id {request_id!r} is already in use")
            request = Request(request_id, ids, config, checked.processors, generator,
                              self.tokenizer, checked.eos_ids, arrival_time, n=n,
                              logprobs=logprobs, prompt_logprobs=prompt_logprobs)
            if adapter_id >= 0:
                request.adapter, request.cache_salt = adapter_id, hash(("lora", adapter_id))
            self.requests[request_id] = request
            self.scheduler.add(request)
            self._work.notify_all()
        return request_id

    def cancel(self, request_id) -> bool:
        """Stop a request now, every sample of it; their blocks go back to the pool. False if it
        had already ended (or is unknown). Each unfinished sample's last output (finish_reason
        "cancelled") comes from the next step, also for samples that had not started yet."""
        with self._lock:
            request = self.requests.get(request_id)
            if request is None or request.all_finished:
                return False
            del self.requests[request_id]
            now = time.perf_counter()
            for sample in request.group:
                if not sample.finished:
                    self.scheduler.cancel(sample)
                    self._finish(sample, "cancelled", now)
                    self._cancelled.append(sample.output())
            for index in range(len(request.group), request.n):  # never forked
                self._cancelled.append(RequestOutput(
                    finish_reason="cancelled", prompt_token_ids=request.prompt_ids,
                    request_id=request_id, finished=True, index=index))
            request.forks_due = 0
            self._work.notify_all()
            return True

    def has_unfinished(self) -> bool:
        with self._lock:
            return self.scheduler.has_unfinished() or bool(self._cancelled)

    def wait_for_work(self, timeout: float | None = None) -> bool:
        """Block until there is something to step (or `timeout` seconds pass)."""
        with self._work:
            return self._work.wait_for(self.has_unfinished, timeout)

    # --- one iteration ----------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Schedule, run the scheduled forward passes, sample each request's next token, finish
        what ended. Returns an output for every request that gained text or ended in this step."""
        with self._lock:
            outputs, self._cancelled = self._cancelled, []
            batch = self.scheduler.schedule()
            if not batch:
                return outputs
            start, kinds = time.perf_counter(), [self.scheduler.kind(r, n) for r, n in batch.items]
            logits, computed_rows = self._run(batch)
            outputs += self._sample(batch, logits)
            if self.record:
                self._record(start, batch.items, kinds, computed_rows)
            self._forget_ended(outputs)
            return outputs

    def _run(self, batch) -> tuple[list[torch.Tensor], int]:
        self.pool.copy_blocks(batch.copies)  # copy-on-write, before any pass writes
        return self._forward(batch)

    def _sample(self, batch, logits: list[torch.Tensor]) -> list[RequestOutput]:
        """Each request's next token from its rows of logits: the prompt's log-probabilities
        first where asked for; a request whose prompt just finished forks into its n samples."""
        now = clock(self.device)  # once the device has computed them: the tokens are ready
        outputs = []
        for (request, n), rows in zip(batch.items, logits):
            if request.needs_prompt_logits:
                self._add_prompt_logprobs(request, rows)
            if not self.scheduler.computed(request, n):
                continue  # a prompt chunk with more to come, or a row with no token to give
            for sample in (request, *self.scheduler.fork(request)):
                outputs.append(self._next_token(sample, rows[-1], now))
        return outputs

    def _forget_ended(self, outputs: list[RequestOutput]) -> None:
        """An ended request is reported once, then forgotten."""
        for out in outputs:
            request = self.requests.get(out.request_id)
            if out.finished and request is not None and request.all_finished:
                del self.requests[out.request_id]

    def _next_token(self, request: Request, logits: torch.Tensor, now: float) -> RequestOutput:
        """Choose `request`'s next token from its last position's `logits`, record it (and its
        log-probability, when asked for), and end the request if it is done."""
        token = self._choose(request, logits)
        logprob = None
        if request.logprobs is not None:
            logprob = token_logprobs(logits[None], [token], request.logprobs_top)[0]
        piece = request.add_token(token, now, logprob)
        if request.sequence.done:
            self._finish(request, request.sequence.finish_reason, now)
            self.scheduler.finish(request)
        return request.output(piece)

    @staticmethod
    def _add_prompt_logprobs(request: Request, rows: torch.Tensor) -> None:
        """Positions num_computed.. of the pass just run predict the prompt tokens after them."""
        start, prompt = request.num_computed, request.prompt_ids
        targets = prompt[start + 1:start + 1 + rows.shape[0]]
        if targets:
            request.add_prompt_logprobs(start + 1, token_logprobs(
                rows[:len(targets)], targets, request.prompt_logprobs_top))

    def _forward(self, batch) -> tuple[list[torch.Tensor], int]:
        """Logits for every item of the batch, (positions, vocab): the last position's only,
        or every position run for a request that needs its prompt's log-probabilities; one
        forward pass per group the scheduler planned. Also the token positions those passes
        computed."""
        items = batch.items
        out: list = [None] * len(items)
        computed = 0
        with torch.inference_mode():
            for group in batch.passes:
                reqs = [items[i][0] for i in group]
                rows = [r.tokens[r.num_computed:r.num_computed + items[i][1]]
                        for i, r in zip(group, reqs)]
                every = any(r.needs_prompt_logits for r in reqs)
                with self._adapters([r.adapter for r in reqs]):
                    logits = paged_forward(self.model, self.pool, [r.block_table for r in reqs],
                                           [r.num_computed for r in reqs], rows,
                                           all_positions=every)
                for i, row, logit in zip(group, rows, logits):
                    out[i] = logit[-len(row):] if every else logit[None]
                computed += len(group) * max(len(r) for r in rows)
        return out, computed

    def _adapters(self, ids: list[int]):
        """Each row's LoRA adapter for the passes inside (nothing to set without adapters)."""
        return self.lora.rows(ids) if self.lora is not None else contextlib.nullcontext()

    def _choose(self, request: Request, logits: torch.Tensor) -> int:
        scores = logits[None].float()
        if request.processors:
            ids = torch.tensor([request.tokens], dtype=torch.long, device=scores.device)
            scores = request.processors(ids, scores)
        return int(choose_next_token(scores, request.config, request.generator)[0])

    def _finish(self, request: Request, reason: str, now: float) -> None:
        request.status = FINISHED
        request.finish_reason = reason
        request.finish_time = now

    def _record(self, start: float, items, kinds, computed_rows: int) -> None:
        live = self.scheduler.live()
        self.steps.append(StepRecord(
            start, time.perf_counter(), [(r.id, n, k) for (r, n), k in zip(items, kinds)],
            used_tokens=sum(r.num_computed for r in live),
            paged_slots=sum(len(r.block_table) for r in live) * self.blocks.block_size,
            contiguous_slots=sum(r.max_tokens for r in live), running=len(live),
            waiting=len(self.scheduler.waiting), computed_rows=computed_rows))

    # --- running to the end -----------------------------------------------------------------------

    def run(self, progress: bool = False) -> dict:
        """Step until every request has ended; returns {request id: final RequestOutput}. For a
        request with n > 1 that is sample 0's output, and `.samples` holds all n, by index."""
        samples: dict = {}
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(self.requests),
                       desc="requests", unit="req")
        while self.has_unfinished():
            for out in self.step():
                if out.finished:
                    samples.setdefault(out.request_id, {})[out.index] = out
                    if bar is not None and out.index == 0:
                        bar.update(1)
        if bar is not None:
            bar.close()
        final = {}
        for rid, by_index in samples.items():
            outs = [by_index[i] for i in sorted(by_index)]
            if len(outs) > 1:
                outs[0].samples = outs
            final[rid] = outs[0]
        return final

    def generate(self, prompts, configs=None, *, progress: bool = False, **fields
                 ) -> list[RequestOutput]:
        """Run a list of prompts to the end; one output per prompt, in order. `configs` is one
        GenerationConfig for all, or a list with one per prompt (None entries: defaults);
        `fields` apply to all. A prompt whose settings are invalid gets an output with
        finish_reason "rejected" and the reason in `error`; the others run."""
        if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)):
            raise TypeError("generate takes a list of prompts (strings or token-id lists)")
        if configs is None or isinstance(configs, GenerationConfig):
            configs = [configs] * len(prompts)
        if len(configs) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(configs)} configs")
        ids, rejected = [], {}
        for n, (prompt, config) in enumerate(zip(prompts, configs)):
            try:
                if isinstance(config, dict):
                    rid = self.add_request(prompt, **{**fields, **config})
                else:
                    rid = self.add_request(prompt, config, **fields)
            except (ValueError, TypeError) as error:
                rid = ("rejected", n)
                rejected[rid] = RequestOutput(request_id=rid, finished=True,
                                              finish_reason="rejected",
                                              error=f"{type(error).__name__}: {error}")
            ids.append(rid)
        final = self.run(progress=progress)
        return [rejected[i] if i in rejected else final[i] for i in ids]

    # --- numbers ----------------------------------------------------------------------------------

    def num_running(self) -> int:
        """Requests that ran in the last step's batch and still produce tokens."""
        with self._lock:
            return len(self.scheduler.live())

    @property
    def weights(self) -> str:
        """How the model's weights are stored: "fp32", "bf16", "int8", "q4_1", ... (weights.py)."""
        return weight_format(self.model)

    @property
    def max_num_seqs(self) -> int:
        """The most sequences one step runs: the limit on a request's n too."""
        return self.scheduler.max_num_seqs

    def num_waiting(self) -> int:
        with self._lock:
            return len(self.scheduler.waiting)

    def is_active(self, request_id) -> bool:
        """Whether `request_id` is queued or running (not yet ended)."""
        with self._lock:
            return request_id in self.requests

    def stats(self) -> dict:
        return {"scheduler": self.kind, "steps": len(self.steps),
                "preemptions": self.scheduler.num_preemptions,
                "prefix_cache_hit_tokens": self.blocks.hit_tokens,
                "prefix_cache_queried_tokens": self.blocks.queried_tokens,
                "prefix_cache_hit_rate": self.blocks.hit_rate,
                "free_blocks": self.blocks.num_free, "num_blocks": self.blocks.num_blocks,
                "kv_blocks_used": self.blocks.num_used,
                "kv_pool_bytes": self.pool.nbytes}
