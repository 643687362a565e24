"""Draft and verify: the speculative decoding loop, with the KV cache rolled back after rejections.

One round, with `ids` every token so far and the target's KV cache holding all of them but the
last:

1. the draft proposes up to k tokens d1..dn;
2. the target runs ONE forward pass over [last, d1, ..., dn]: n + 1 positions, so n + 1
   next-token distributions (after last, after d1, ..., after dn);
3. the acceptance rule keeps d1..dm and adds one token of the target's own (the replacement
   for d(m+1), or the bonus token when m = n);
4. the cache now also holds d(m+1)..dn, which were rejected: `cache.crop` forgets them, so it
   again holds every token but the last.

Decode is bound by memory bandwidth: one pass reads every weight once whether it scores 1
position or 9, so a round costs about one decode step and yields 1 to n + 1 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..utils.devices import Timer, model_device
from ..generation.loop import Generation, start
from ..generation.request import GenerationRequest, checked_options
from ..generation.kv_cache import KVCache
from ..measure.metrics import TokenClock
from ..utils.validate import check_int
from ..utils.wording import text
from .acceptance import verify_greedy, verify_sampled
from .drafts import Draft, PromptLookupDraft


@dataclass
class SpeculativeStats:
    """What happened in one speculative generation.

    passes           target forward passes after the prefill (one per round)
    proposed         tokens the draft proposed, in all
    accepted         proposed tokens the target accepted
    new_tokens       tokens generated
    draft_seconds    time spent in the draft's `propose`
    target_seconds   time spent in the target's forward passes (prefill included)
    accepted_per_pass  how many drafted tokens each round accepted
    proposed_per_pass  how many tokens the draft proposed each round (up to k; prompt lookup
                       proposes none where the context has no earlier match)
    """

    k: int
    passes: int = 0
    proposed: int = 0
    accepted: int = 0
    new_tokens: int = 0
    draft_seconds: float = 0.0
    target_seconds: float = 0.0
    accepted_per_pass: list[int] = field(default_factory=list)
    proposed_per_pass: list[int] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        """Accepted / proposed drafted tokens (NaN when nothing was proposed)."""
        return self.accepted / self.proposed if self.proposed else float("nan")

    @property
    def tokens_per_pass(self) -> float:
        """New tokens per target forward pass: plain decoding gets 1."""
        return self.new_tokens / self.passes if self.passes else float("nan")

    def summary(self) -> str:
        return text("k={k}: {tokens} tokens in {passes} target passes ({per_pass:.2f} per pass), "
                    "{accepted}/{proposed} drafted tokens accepted ({rate:.0f}%)",
                    "k={k}：目标模型前向传播 {passes} 次，生成 {tokens} 个词元（每次 {per_pass:.2f}"
                    " 个），草稿词元接受了 {accepted}/{proposed}（{rate:.0f}%）",
                    k=self.k, tokens=self.new_tokens, passes=self.passes,
                    per_pass=self.tokens_per_pass, accepted=self.accepted,
                    proposed=self.proposed, rate=100 * self.acceptance_rate)


@dataclass
class SpeculativeGeneration(Generation):
    """A `Generation` with `stats` (SpeculativeStats)."""

    stats: SpeculativeStats | None = field(default=None, repr=False)


RUNNER = "speculative decoding"  # how the front door's messages name this runner


def _check_k(k) -> None:
    check_int("k (tokens drafted per round)", k, 1)


class SpeculativeDecoder:
    """Runs speculative decoding for one sequence at a time. After `run`, `cache` is the
    target's KV cache (it holds every token but the last) and `stats` the round statistics.

    `config` is a GenerationConfig, or a request checked at the front door
    (minillm.generation.request.make_request), whose processors and sampler it then uses."""

    def __init__(self, target, draft: Draft, k: int = 4, config=None):
        if not isinstance(draft, Draft):
            raise TypeError(f"draft must be a minillm.speculative Draft (PromptLookupDraft(), "
                            f"ModelDraft(model)), got {type(draft).__name__}")
        _check_k(k)
        self.target, self.draft, self.k = target, draft, k
        self.device = model_device(target)
        request = config if isinstance(config, GenerationRequest) else \
            checked_options(target, config, runner=RUNNER)
        self.config, self.process = request.config, request.processors
        self.generator = request.generator(self.device)
        self.cache: KVCache | None = None
        self.stats = SpeculativeStats(k=k)

    def _forward(self, tokens: list[int]) -> torch.Tensor:
        with Timer(self.device) as t:
            logits = self.target(torch.tensor([tokens], device=self.device), cache=self.cache)
        self.stats.target_seconds += t.seconds
        return logits[0].float()

    def _record(self, sequence, ids: list[int], new: list[int], proposed: int,
                accepted: int) -> None:
        """A round's end: count it, and add its new tokens to `sequence` and `ids` until the
        sequence is done."""
        stats = self.stats
        stats.passes += 1
        stats.proposed += proposed
        stats.accepted += accepted
        stats.accepted_per_pass.append(accepted)
        stats.proposed_per_pass.append(proposed)
        for token in new:
            sequence.add(token)
            ids.append(token)
            if sequence.done:
                break

    def run(self, prompt_ids: list[int], sequence, on_tokens=None) -> SpeculativeStats:
        """Generate into `sequence` (a minillm.generation.stopping.Sequence) until it finishes.
        `on_tokens(sequence)` is called after each round (for timing or streaming)."""
        self.stats = stats = SpeculativeStats(k=self.k)
        ids = list(prompt_ids)
        max_new = sequence.max_new_tokens
        size = len(ids) + max_new
        self.cache = KVCache.for_model(self.target, 1, size)
        self.draft.reset(size)
        with torch.inference_mode():
            if len(ids) > 1:  # prefill: every prompt token but the last, which each round feeds
                self._forward(ids[:-1])
            while not sequence.done:
                # never draft more than can still be used: the round adds one token of its own
                room = max_new - len(sequence.token_ids) - 1
                n_draft = min(self.k, room)
                with Timer(self.device) as t:
                    drafted, q = self.draft.propose(ids, n_draft, self.process,
                                                    self.config.do_sample, self.generator) \
                        if n_draft > 0 else ([], None)
                stats.draft_seconds += t.seconds
                drafted = [int(t) for t in drafted][:n_draft]
                if q is not None:
                    q = q[:len(drafted)].to(self.device)
                before = self.cache.length  # = len(ids) - 1
                logits = self._forward([ids[-1]] + drafted)  # (n + 1, vocab)
                context = torch.tensor([ids + drafted], device=self.device)
                scores = torch.stack([
                    self.process(context[:, :len(ids) + i], logits[i:i + 1])[0]
                    for i in range(len(drafted) + 1)])
                if self.config.do_sample:
                    new, n_accepted = verify_sampled(torch.softmax(scores, dim=-1), q, drafted,
                                                     self.generator)
                else:
                    new, n_accepted = verify_greedy(scores, drafted)
                self._record(sequence, ids, new, len(drafted), n_accepted)
                # roll back: keep the accepted drafts, forget the rejected ones
                self.cache.crop(min(before + 1 + n_accepted, len(ids) - 1))
                if on_tokens is not None:
                    on_tokens(sequence)
        stats.new_tokens = len(sequence.token_ids)
        return stats


def speculative_generate(target, tokenizer, prompt, draft: Draft | str = "prompt_lookup", *,
                         k: int = 4, config=None, **fields) -> SpeculativeGeneration:
    """Generate text after one `prompt` (a string or a list of token ids) with speculative
    decoding: `draft` proposes up to k tokens a round, `target` verifies them in one pass.

    draft    a Draft (PromptLookupDraft(), ModelDraft(smaller_model)) or "prompt_lookup"
    config   a GenerationConfig (greedy or sampling; keyword fields change it, as in generate)

    Greedy: exactly the tokens `minillm.generate(target, ...)` gives. Sampling: tokens drawn from
    exactly the distribution `generate` samples from (not the same draws). Returns a
    `SpeculativeGeneration`: `.text`, `.token_ids`, `.metrics`, and `.stats` (acceptance rate,
    tokens per target pass).

        >>> out = speculative_generate(model, tokenizer, "Repeat: a b c d", k=4,
        ...                            max_new_tokens=32)
        >>> out.stats.summary()
    """
    if isinstance(draft, str):
        if draft not in ("prompt_lookup", "lookup"):
            raise ValueError(f"draft must be a Draft object or 'prompt_lookup', got {draft!r}")
        draft = PromptLookupDraft()
    _check_k(k)
    return run_one(target, tokenizer, prompt, config, fields,
                   lambda request: SpeculativeDecoder(target, draft, k, request))


def run_one(target, tokenizer, prompt, config, fields: dict, make_decoder):
    """One prompt through the front door, generated by `make_decoder(request)`'s `run`, timed
    token by token: the SpeculativeGeneration that speculative_generate (and its tree twin)
    return."""
    clock = TokenClock()
    setup = start(target, tokenizer, prompt, config, runner=RUNNER, **fields)
    stats = make_decoder(setup.request).run(setup.prompts[0], setup.sequences[0],
                                            on_tokens=lambda s: clock.tick([s]))
    (result,) = setup.results(clock)
    return SpeculativeGeneration(**vars(result), stats=stats)
