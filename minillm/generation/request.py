"""The front door for a request (请求): a prompt and its options, checked once for every runner.

    request = make_request(model, tokenizer, prompt, config, max_new_tokens=32, do_sample=True)

turns what a caller gives (text, token ids, or a batch of either; a GenerationConfig and/or its
options as keywords; a logits processor of the caller's own) into a `GenerationRequest`: each
prompt's token ids, the config in force, the ids that end a sequence, the stop strings, the
logits processors in transformers' order, and the seeded sampler. `generate` and `stream`
(loop.py), `Engine.add_request`, `speculative_generate` and the OpenAI-compatible server (through
the engine) all start here, so a bad prompt or option gets the same message wherever it is
given. Each option's own check is GenerationConfig's (minillm/decoding/config.py); what is
checked here is what needs the model and the prompt: the vocabulary, the context window, and
what the runner can do (one prompt or a batch, beam search or not).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..decoding.config import GenerationConfig
from ..decoding.processors import ProcessorList, build_processors
from ..decoding.sampling import make_generator
from .stopping import Sequence, check_stop_strings


@dataclass
class GenerationRequest:
    """A checked request, ready to run: what `make_request` returns.

    prompts           each prompt's token ids
    batch             whether the caller passed a batch (a list of prompts)
    config            the GenerationConfig in force
    eos_ids           the ids that end a sequence (none with ignore_eos)
    stop              the stop strings
    processors        the config's logits processors in transformers' order, after the caller's
                      `logits_processor` when one was given; they serve this one request
    pad_id            the id left padding uses in a batch
    tokenizer         what turns each sequence's tokens into text (None: ids only)
    """

    prompts: list[list[int]]
    batch: bool
    config: GenerationConfig
    eos_ids: list[int]
    stop: tuple[str, ...]
    processors: ProcessorList
    pad_id: int
    tokenizer: object = None

    @property
    def prompt_ids(self) -> list[int]:
        """The one prompt's ids (a runner that takes one prompt)."""
        return self.prompts[0]

    def generator(self, device) -> torch.Generator | None:
        """The sampler's torch.Generator on `device`, seeded from config.seed; None when the
        config does not sample (greedy or beam search)."""
        return make_generator(self.config, device) if self.config.do_sample else None

    def sequences(self) -> list[Sequence]:
        """One fresh `Sequence` per prompt: its new tokens, text and stopping rules."""
        return [Sequence(p, self.tokenizer, self.eos_ids, self.config.max_new_tokens, self.stop)
                for p in self.prompts]


def make_request(model, tokenizer, prompt, config: GenerationConfig | None = None, *,
                 logits_processor=None, runner: str | None = None,
                 **fields) -> GenerationRequest:
    """Check `prompt` (a string, a list of token ids, or a list of those for a batch) and the
    options (`config`, changed by keyword `fields`) for `model`; return the request.

    runner   None for `generate`, which takes a batch and runs beam search; else the name of a
             runner that takes one prompt and does not (e.g. "Engine.add_request"), for its
             messages
    logits_processor  a function of (input_ids, scores) -> scores run before the config's own
             processors (a minillm.decoding.JSONConstraint, or a rule of your own)"""
    request = checked_options(model, config, tokenizer=tokenizer, runner=runner,
                              logits_processor=logits_processor, **fields)
    prompts, batch = encode_prompts(tokenizer, prompt, model.config.vocab_size)
    if runner is not None and batch:
        raise ValueError(f"{runner} takes one prompt, got a batch of {len(prompts)}: call it "
                         "once per prompt (minillm.generate runs a batch)")
    check_context(prompts, request.config.max_new_tokens, model.config.max_seq_len, batch)
    if request.stop and tokenizer is None:
        raise ValueError("stop strings need a tokenizer to see text; without one, stop with "
                         "eos_token_id or max_new_tokens")
    request.prompts, request.batch = prompts, batch
    return request


def checked_options(model, config: GenerationConfig | None = None, *, tokenizer=None,
                    logits_processor=None, runner: str | None = None,
                    **fields) -> GenerationRequest:
    """The options half of `make_request`: a request with no prompt yet, for a runner that is
    handed its prompt's ids later (speculative decoding's SpeculativeDecoder)."""
    config = GenerationConfig.merge(config, **fields)
    if runner is not None and config.num_beams > 1:
        raise ValueError(f"{runner} runs greedy decoding or sampling, not beam search "
                         f"(num_beams={config.num_beams}): use minillm.generate for beam search, "
                         "or num_beams=1")
    if logits_processor is not None and not callable(logits_processor):
        raise TypeError(f"logits_processor must be a function of (input_ids, scores), got "
                        f"{type(logits_processor).__name__}")
    if logits_processor is not None and config.num_beams > 1:
        raise ValueError("logits_processor is not supported with beam search (num_beams > 1)")
    eos = eos_ids(model, tokenizer, config)
    processors = build_processors(config, eos)
    if logits_processor is not None:
        processors.insert(0, logits_processor)
    return GenerationRequest([], False, config, eos, check_stop_strings(config.stop), processors,
                             pad_id(tokenizer, eos), tokenizer)


# --- the pieces, for callers that need one alone (the server reads a prompt's length first) -----

def _is_ids(value) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in value)


def encode_prompts(tokenizer, prompt, vocab_size: int | None = None
                   ) -> tuple[list[list[int]], bool]:
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


def check_context(prompts: list[list[int]], max_new_tokens: int, max_seq_len: int,
                  batch: bool = False) -> None:
    """Every prompt, with max_new_tokens more, must fit the model's context window."""
    if max_new_tokens >= max_seq_len:
        raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in the "
                         f"model's context window of {max_seq_len}: lower it to at most "
                         f"{max_seq_len - 1}")
    for n, p in enumerate(prompts):
        if len(p) + max_new_tokens > max_seq_len:
            where = f"prompt {n} (of {len(prompts)}) in the batch" if batch else "the prompt"
            raise ValueError(
                f"{where} has {len(p)} token{'s' * (len(p) != 1)}; with max_new_tokens="
                f"{max_new_tokens} that needs {len(p) + max_new_tokens} positions, more than the "
                f"model's context window of {max_seq_len}: shorten the prompt to at most "
                f"{max_seq_len - max_new_tokens} tokens or lower max_new_tokens")


def eos_ids(model, tokenizer, config: GenerationConfig) -> list[int]:
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


def pad_id(tokenizer, eos: list[int]) -> int:
    """The id a left-padded batch pads with: the tokenizer's, else the first EOS id, else 0."""
    pad = getattr(tokenizer, "pad_token_id", None)
    return int(pad) if pad is not None else (eos[0] if eos else 0)
