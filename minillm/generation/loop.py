"""Generation (生成): the loop that turns a prompt into new tokens.

Two phases:
- prefill (预填充): one forward pass over the whole prompt. Every prompt token is processed in
  parallel, their keys and values go into the KV cache, and the last position's logits give the
  first new token.
- decode (解码): one forward pass per new token, fed only that token; attention reads the keys and
  values of all earlier tokens from the cache instead of recomputing them.

With `use_cache=False` every step runs the model over the whole sequence again (prompt plus all
new tokens): the same tokens, at O(n^2) total work instead of O(n). It stays for teaching and
testing.

A batch of prompts of different lengths is left-padded to one length; the attention mask hides
the padding and the position ids count only real tokens, so each row gives the tokens it would
give alone.

Every generation starts at the front door, `request.make_request`: the prompt and its options
checked once, turned into token ids, a GenerationConfig, EOS ids, processors and a sampler.
`token_steps` is the one per-token loop: `generate` and `stream` both run it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from ..decoding.beam_search import beam_search
from ..decoding.sampling import choose_next_token
from ..measure.metrics import RequestMetrics, TokenClock, TokenEvent
from ..utils.devices import model_device
from .kv_cache import KVCache
from .request import GenerationRequest, make_request
from .results import Completion
from .stopping import Sequence


@dataclass
class Generation(Completion):
    """One prompt's result from `generate`: the fields every runner shares (minillm.generation.results:
    text, token_ids, finish_reason, prompt_token_ids, metrics), plus beam search's

    score      the beam's length-normalised log-probability (beam search only)
    sequences  every returned beam, best first (beam search only)
    """

    score: float | None = None
    sequences: list["Generation"] = field(default_factory=list, repr=False)


# --- inputs ---------------------------------------------------------------------------------------

def left_pad(prompts: list[list[int]], pad_id: int, device="cpu"):
    """(input_ids, attention_mask), both (batch, longest): shorter prompts padded on the left."""
    longest = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), longest), dtype=torch.long)
    for row, p in enumerate(prompts):
        input_ids[row, longest - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[row, longest - len(p):] = 1
    return input_ids.to(device), mask.to(device)


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count real tokens only: padding does not move a row's positions."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


# --- the loop -------------------------------------------------------------------------------------

def token_steps(model, request: GenerationRequest, sequences: list[Sequence], *,
                use_cache: bool = True) -> Iterator[list[str]]:
    """The generation loop. Each iteration runs one forward pass (the first is the prefill),
    chooses one token per row, records it in that row's `Sequence`, and yields the text each row
    can show now ("" for rows that have finished). It ends when every row has finished. The
    request (request.py) brings the prompts, the config, its processors and the pad id."""
    device = model_device(model)
    config, process, pad_id = request.config, request.processors, request.pad_id
    generator = request.generator(device)
    input_ids, mask = left_pad(request.prompts, pad_id, device)
    padded = bool((mask == 0).any())
    max_new = max(s.max_new_tokens for s in sequences)
    cache = KVCache.for_model(model, len(sequences), input_ids.shape[1] + max_new) \
        if use_cache else None
    all_ids = input_ids
    with torch.inference_mode():
        logits = model(input_ids, cache=cache, position_ids=positions(mask) if padded else None,
                       attention_mask=mask if padded else None, logits_to_keep=1)  # prefill
        while True:
            scores = process(all_ids, logits[:, -1, :].float())
            chosen = choose_next_token(scores, config, generator)
            if any(s.done for s in sequences):  # finished rows of a batch run padding
                running = torch.tensor([not s.done for s in sequences], device=device)
                chosen = torch.where(running, chosen, torch.full_like(chosen, pad_id))
            pieces = [s.add(t) if not s.done else "" for s, t in zip(sequences, chosen.tolist())]
            yield pieces
            if all(s.done for s in sequences):
                return
            if process or not use_cache:  # the processors read, and a recompute runs, every id
                all_ids = torch.cat([all_ids, chosen[:, None]], dim=1)
            if padded:
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            if use_cache:  # decode: feed only the new token; the cache holds the rest
                logits = model(chosen[:, None], cache=cache,
                               position_ids=positions(mask)[:, -1:] if padded else None,
                               attention_mask=mask if padded else None, logits_to_keep=1)
            else:  # no cache: recompute the whole sequence
                logits = model(all_ids, position_ids=positions(mask) if padded else None,
                               attention_mask=mask if padded else None, logits_to_keep=1)


@dataclass
class Setup:
    """A checked generation, ready to run: what `start` returns.

    request     the checked request (request.py): prompts, config, EOS ids, processors
    sequences   one `Sequence` per prompt: its new tokens, text and stopping rules
    """

    model: object
    request: GenerationRequest
    sequences: list[Sequence]

    @property
    def prompts(self) -> list[list[int]]:
        return self.request.prompts

    @property
    def config(self):
        return self.request.config

    @property
    def batch(self) -> bool:
        return self.request.batch

    def steps(self, use_cache: bool = True) -> Iterator[list[str]]:
        """The generation loop (`token_steps`) over these prompts."""
        return token_steps(self.model, self.request, self.sequences, use_cache=use_cache)

    def results(self, clock: TokenClock | None = None) -> list[Generation]:
        """Each sequence as a `Generation`, with its timing from `clock` when given."""
        results = [Generation(text=s.text, token_ids=s.token_ids, finish_reason=s.finish_reason,
                              prompt_token_ids=s.prompt_ids) for s in self.sequences]
        if clock is not None:
            for result, metrics in zip(results, clock.metrics(self.sequences)):
                result.metrics = metrics
        return results


def start(model, tokenizer, prompt, config=None, *, logits_processor=None,
          runner: str | None = None, **fields) -> Setup:
    """Check the inputs at the front door (`make_request`) and set up a generation."""
    request = make_request(model, tokenizer, prompt, config, logits_processor=logits_processor,
                           runner=runner, **fields)
    return Setup(model, request, request.sequences())


def _beam_results(setup: Setup, tokenizer) -> list[Generation]:
    """Beam search (chapter 04) for each prompt: the best hypothesis, with all returned ones."""
    results = []
    config, eos, stop = setup.config, sorted(set(setup.request.eos_ids)), setup.request.stop
    for p in setup.prompts:
        cache = KVCache.for_model(setup.model, batch_size=1,
                                  max_tokens=len(p) + config.max_new_tokens)
        hypotheses = beam_search(setup.model, p, config, eos, cache=cache)
        returned = []
        for h in hypotheses:
            s = Sequence(p, tokenizer, eos, max(len(h.token_ids), 1), stop)
            for t in h.token_ids:
                if s.done:
                    break
                s.add(t)
            returned.append(Generation(
                text=s.text, token_ids=list(h.token_ids), prompt_token_ids=s.prompt_ids,
                finish_reason="stop" if s.finish_reason == "stop" else h.finish_reason,
                score=float(h.score)))
        best = returned[0]
        best.sequences = returned
        results.append(best)
    return results


def generate(model, tokenizer, prompt, config=None, *, use_cache: bool = True,
             logits_processor=None, **fields):
    """Generate text after `prompt` (a string, a list of token ids, or a list of those for a
    batch). `config` is a GenerationConfig; keyword `fields` (max_new_tokens=..., do_sample=...,
    stop=[...]) change it. `logits_processor`, a function of (input_ids, scores) -> scores
    (minillm.decoding.JSONConstraint, or your own rule), runs before the config's processors.
    Returns a `Generation`, or a list of them for a batch.

        >>> out = generate(model, tokenizer, "The capital of France is", max_new_tokens=8)
        >>> out.text, out.finish_reason
    """
    clock = TokenClock()  # the request starts now: TTFT includes tokenizing and prefill
    setup = start(model, tokenizer, prompt, config, logits_processor=logits_processor, **fields)
    if setup.config.num_beams > 1:
        results = _beam_results(setup, tokenizer)
    else:
        for _ in setup.steps(use_cache):
            clock.tick(setup.sequences)
        results = setup.results(clock)
    return results if setup.batch else results[0]


class TimedStream:
    """A streaming generation that times every token: iterate it for text pieces; joined, the
    pieces equal `generate(...).text`. A piece may hold several tokens' text or none (a token
    that ends inside a UTF-8 character, or text that may be the start of a stop string, waits).
    `metrics` grows as tokens arrive; `result` is the finished `Generation`, with `.metrics`,
    once the iteration is over.

    The clock starts when the stream is made (the request's arrival): tokenizing, prefill and
    the first token are in the TTFT. `on_token(event)`, when given, is called for each new token
    with a `minillm.measure.metrics.TokenEvent`."""

    def __init__(self, model, tokenizer, prompt, config=None, *,
                 on_token: Callable[[TokenEvent], None] | None = None, use_cache: bool = True,
                 logits_processor=None, **fields):
        if on_token is not None and not callable(on_token):
            raise TypeError(f"on_token must be a function of one TokenEvent, got "
                            f"{type(on_token).__name__}")
        self._clock = TokenClock()
        self._setup = setup = start(model, tokenizer, prompt, config, runner="a stream",
                                    logits_processor=logits_processor, **fields)
        self.on_token, self.use_cache = on_token, use_cache
        self.prompt_tokens = len(setup.prompts[0])
        self._started = False
        self.result: Generation | None = None

    @property
    def metrics(self) -> RequestMetrics:
        return self._clock.metrics(self._setup.sequences)[0]

    def __iter__(self) -> Iterator[str]:
        if self._started:
            raise RuntimeError("a stream runs once; make a new one to generate again")
        self._started = True
        clock, seq = self._clock, self._setup.sequences[0]
        last = clock.start
        for step in self._setup.steps(self.use_cache):
            before = len(clock.times[0]) if clock.times else 0
            now = clock.tick(self._setup.sequences)
            if self.on_token is not None:
                for i in range(before, len(seq.token_ids)):
                    self.on_token(TokenEvent(i, seq.token_ids[i], step[0], now - clock.start,
                                             now - last))
            last = now
            if step[0]:
                yield step[0]
        self.result = self._setup.results(clock)[0]


def stream(model, tokenizer, prompt, config=None, *, on_token=None, use_cache: bool = True,
           logits_processor=None, **fields) -> TimedStream:
    """Generate for one prompt, yielding text pieces as they become ready, each token timed
    (see `TimedStream`).

        >>> s = stream(model, tokenizer, "Hello", max_new_tokens=16)
        >>> text = "".join(s)
        >>> s.metrics.ttft, s.metrics.tpot, s.result.text == text
    """
    return TimedStream(model, tokenizer, prompt, config, on_token=on_token, use_cache=use_cache,
                       logits_processor=logits_processor, **fields)


timed_stream = stream  # the chapter 05 name: every stream is timed
