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

`token_steps` is the one per-token loop: `generate` and `stream` both run it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from ..utils.devices import model_device
from .kv_cache import KVCache
from ..measure.metrics import RequestMetrics, TokenClock, TokenEvent
from .results import Completion
from .stopping import Sequence, check_stop_strings
from ..utils.validate import check_int


@dataclass
class Generation(Completion):
    """One prompt's result from `generate`: the fields every runner shares (minillm.generation.results:
    text, token_ids, finish_reason, prompt_token_ids, metrics), plus beam search's

    score      the beam's length-normalised log-probability (beam search only)
    sequences  every returned beam, best first (beam search only)
    """

    score: float | None = None
    sequences: list["Generation"] = field(default_factory=list, repr=False)


# --- the decoding seam (chapter 04 fills it in) -----------------------------------------------------

def _decoding():
    """Chapter 04's pieces: GenerationConfig, build_processors, make_generator,
    choose_next_token (greedy argmax unless do_sample) and beam_search."""
    from .. import decoding

    return decoding


# --- inputs ---------------------------------------------------------------------------------------

def _is_ids(value) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in value)


def encode_prompts(tokenizer, prompt, vocab_size: int | None = None) -> tuple[list[list[int]], bool]:
    """`prompt` (a string, a list of ids, or a list of those) as a list of id lists, and whether
    it was a batch. Empty prompts and ids outside the vocabulary raise ValueError."""
    if isinstance(prompt, str) or (_is_ids(prompt) and len(prompt) > 0):
        prompts, batch = [prompt], False
    elif isinstance(prompt, (list, tuple)) and len(prompt) > 0:
        prompts, batch = list(prompt), True
    elif isinstance(prompt, (list, tuple)):
        raise ValueError("the prompt is empty: give a non-empty string, a non-empty list of "
                         "token ids, or a non-empty list of those")
    else:
        raise TypeError(f"prompt must be a string, a list of token ids, or a list of those, "
                        f"got {type(prompt).__name__}")
    ids = []
    for n, p in enumerate(prompts):
        where = f"prompt {n} (of {len(prompts)}) in the batch" if batch else "the prompt"
        if isinstance(p, str) and tokenizer is None:
            raise TypeError(f"{where} is text, but there is no tokenizer (the model was loaded "
                            "without one): pass token ids instead")
        if isinstance(p, str):
            p = list(tokenizer.encode(p)) if p else []
        elif not _is_ids(p):
            raise TypeError(f"{where} must be a string or a list of int token ids, got "
                            f"{type(p).__name__}" + (f" {p!r}" if len(repr(p)) < 60 else ""))
        if len(p) == 0:
            raise ValueError(f"{where} is empty: the model needs at least one token to continue")
        if vocab_size is not None:
            bad = [i for i in p if not 0 <= i < vocab_size]
            if bad:
                raise ValueError(f"{where} has token id {bad[0]}, outside the vocabulary "
                                 f"(0 to {vocab_size - 1})")
        ids.append([int(i) for i in p])
    return ids, batch


def _check_max_new_tokens(value) -> None:
    check_int("max_new_tokens", value, 1)


def _check_context(prompts: list[list[int]], max_new_tokens: int, max_seq_len: int,
                   batch: bool) -> None:
    for n, p in enumerate(prompts):
        if len(p) + max_new_tokens > max_seq_len:
            where = f"prompt {n} (of {len(prompts)}) in the batch" if batch else "the prompt"
            raise ValueError(
                f"{where} has {len(p)} token{'s' * (len(p) != 1)}; with max_new_tokens={max_new_tokens} that needs "
                f"{len(p) + max_new_tokens} positions, more than the model's context window of "
                f"{max_seq_len}: shorten the prompt to at most {max_seq_len - max_new_tokens} "
                f"tokens or lower max_new_tokens")


def eos_ids(model, tokenizer, config) -> list[int]:
    """The ids that end a sequence: none with `ignore_eos`, the config's when set, else the
    model's and tokenizer's."""
    if config.ignore_eos:
        return []
    if config.eos_token_id is not None:
        value = config.eos_token_id
        return [value] if isinstance(value, int) else list(value)
    ids = list(getattr(model.config, "eos_token_ids", ()) or ())
    for i in getattr(tokenizer, "eos_token_ids", None) or ():
        if i not in ids:
            ids.append(i)
    return ids


def _pad_id(tokenizer, eos: list[int]) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    return int(pad) if pad is not None else (eos[0] if eos else 0)


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

def token_steps(model, prompts: list[list[int]], sequences: list[Sequence], config, *,
                use_cache: bool = True, pad_id: int = 0,
                logits_processor=None) -> Iterator[list[str]]:
    """The generation loop. Each iteration runs one forward pass (the first is the prefill),
    chooses one token per row, records it in that row's `Sequence`, and yields the text each row
    can show now ("" for rows that have finished). It ends when every row has finished.
    `logits_processor` (a function of (input_ids, scores), e.g. a JSONConstraint) runs before
    the config's own processors."""
    decoding = _decoding()
    device = model_device(model)
    process = decoding.build_processors(config, sorted(sequences[0].eos_token_ids))
    if logits_processor is not None:
        process.insert(0, logits_processor)
    generator = decoding.make_generator(config, device) if config.do_sample else None
    input_ids, mask = left_pad(prompts, pad_id, device)
    padded = bool((mask == 0).any())
    max_new = max(s.max_new_tokens for s in sequences)
    cache = KVCache.for_model(model, len(prompts), input_ids.shape[1] + max_new) \
        if use_cache else None
    all_ids = input_ids
    with torch.inference_mode():
        logits = model(input_ids, cache=cache, position_ids=positions(mask) if padded else None,
                       attention_mask=mask if padded else None, logits_to_keep=1)  # prefill
        while True:
            scores = process(all_ids, logits[:, -1, :].float())
            chosen = decoding.choose_next_token(scores, config, generator)
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

    prompts     each prompt's token ids
    sequences   one `Sequence` per prompt: its new tokens, text and stopping rules
    config      the GenerationConfig in force
    batch       whether the caller passed a batch (a list of prompts)
    pad_id      the id left padding uses
    logits_processor  an extra rule run before the config's own (None: none)
    """

    model: object
    prompts: list[list[int]]
    sequences: list[Sequence]
    config: object
    batch: bool
    pad_id: int
    logits_processor: Callable | None = None

    def steps(self, use_cache: bool = True) -> Iterator[list[str]]:
        """The generation loop (`token_steps`) over these prompts."""
        return token_steps(self.model, self.prompts, self.sequences, self.config,
                           use_cache=use_cache, pad_id=self.pad_id,
                           logits_processor=self.logits_processor)

    def results(self, clock: TokenClock | None = None) -> list[Generation]:
        """Each sequence as a `Generation`, with its timing from `clock` when given."""
        results = [Generation(text=s.text, token_ids=s.token_ids, finish_reason=s.finish_reason,
                              prompt_token_ids=s.prompt_ids) for s in self.sequences]
        if clock is not None:
            for result, metrics in zip(results, clock.metrics(self.sequences)):
                result.metrics = metrics
        return results


def start(model, tokenizer, prompt, config=None, *, logits_processor=None, **fields) -> Setup:
    """Check the inputs and set up a generation (see `Setup`)."""
    decoding = _decoding()
    if "max_new_tokens" in fields:
        _check_max_new_tokens(fields["max_new_tokens"])
    config = decoding.GenerationConfig.merge(config, **fields)
    _check_max_new_tokens(config.max_new_tokens)
    prompts, batch = encode_prompts(tokenizer, prompt, model.config.vocab_size)
    _check_context(prompts, config.max_new_tokens, model.config.max_seq_len, batch)
    eos = eos_ids(model, tokenizer, config)
    stop = check_stop_strings(config.stop)
    if stop and tokenizer is None:
        raise ValueError("stop strings need a tokenizer to see text; without one, stop with "
                         "eos_token_id or max_new_tokens")
    if logits_processor is not None and not callable(logits_processor):
        raise TypeError(f"logits_processor must be a function of (input_ids, scores), got "
                        f"{type(logits_processor).__name__}")
    if logits_processor is not None and config.num_beams > 1:
        raise ValueError("logits_processor is not supported with beam search (num_beams > 1)")
    sequences = [Sequence(p, tokenizer, eos, config.max_new_tokens, stop) for p in prompts]
    return Setup(model, prompts, sequences, config, batch, _pad_id(tokenizer, eos),
                 logits_processor)


def _beam_results(setup: Setup, tokenizer) -> list[Generation]:
    """Beam search (chapter 04) for each prompt: the best hypothesis, with all returned ones."""
    results = []
    config, eos = setup.config, sorted(setup.sequences[0].eos_token_ids)
    stop = check_stop_strings(config.stop)
    for p in setup.prompts:
        hypotheses = _decoding().beam_search(setup.model, p, config, eos)
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
        self._setup = setup = start(model, tokenizer, prompt, config,
                                    logits_processor=logits_processor, **fields)
        if setup.batch:
            raise ValueError(f"a stream takes one prompt, got a batch of {len(setup.prompts)}: "
                             "use minillm.generate for a batch (each result has .metrics)")
        if setup.config.num_beams > 1:
            raise ValueError("a stream does not run beam search (num_beams > 1): the best beam "
                             "is known only at the end; use minillm.generate")
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
