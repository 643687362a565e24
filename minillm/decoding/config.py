"""GenerationConfig: every decoding option in one validated value, with transformers' names.

A field means what the field of the same name means in transformers' `GenerationConfig`, so a
setting copied from a model card works here unchanged. One difference: transformers defaults to
top_k=50; minillm defaults to top_k=0 (off), so that each filter is on only when you ask for it.
A few fields transformers lacks take their names from the APIs that have them: `ignore_eos` and
`stop` (vLLM), `presence_penalty` and `frequency_penalty` (OpenAI).

    greedy (the default)     GenerationConfig()
    sampling                 GenerationConfig(do_sample=True, temperature=0.8, top_p=0.9)
    beam search              GenerationConfig(num_beams=4, length_penalty=1.0)

A config is checked when it is built: a bad value raises a ValueError (a wrong type a TypeError)
that names the field, the value and what is allowed. A sampling option (temperature, top_k,
top_p, min_p) set on a config that does not sample is ignored, as in transformers, and said so
once: an `IgnoredSamplingOptionsWarning` naming the options and the fix.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from dataclasses import dataclass, field
from functools import partial

from ..utils.validate import check_int, check_number, is_int


@dataclass(frozen=True)
class GenerationConfig:
    """How to pick each new token, and when to stop.

    max_new_tokens        most tokens to generate after the prompt (>= 1). Default 64.
    do_sample             False: greedy (or beam search when num_beams > 1) — always the most
                          likely token. True: draw the token at random from the processed
                          distribution. Default False.
    temperature           divides the logits before sampling: P_i = e^(z_i/T) / sum_j e^(z_j/T).
                          Below 1 sharpens, above 1 flattens. Used only when do_sample. Must be
                          > 0 when sampling. Default 1.0.
    top_k                 keep only the k most likely tokens (ties with the k-th are kept too).
                          0 or None: off. Used only when do_sample. Default 0.
    top_p                 nucleus sampling: keep the smallest set of most likely tokens whose
                          probability adds up to at least top_p (the token that crosses the line
                          is kept). In (0, 1]; 1.0 is off. Used only when do_sample. Default 1.0.
    min_p                 keep tokens whose probability is at least min_p x the top token's.
                          In [0, 1]; None is off. Used only when do_sample. Default None.
    repetition_penalty    every token already in the sequence, prompt included, has its logit
                          divided by the penalty when positive, multiplied when negative.
                          > 0; 1.0 is off; above 1 discourages repeats. Default 1.0.
    presence_penalty      OpenAI's: every token already *generated* (the prompt does not count)
                          has this subtracted from its logit, once. In [-2, 2]; 0.0 is off;
                          above 0 favours new tokens. Default 0.0.
    frequency_penalty     OpenAI's: every token already generated has this times the number of
                          times it was generated subtracted from its logit. In [-2, 2]; 0.0 is
                          off; above 0 discourages repeats. Default 0.0.
    no_repeat_ngram_size  n > 0: no n-gram (run of n tokens) may appear twice, prompt included.
                          0 is off. Default 0.
    num_beams             1: greedy or sampling. More: beam search keeps that many candidate
                          sequences. Default 1.
    length_penalty        beam search scores a finished sequence as sum(log p) / length**penalty;
                          above 0 favours longer sequences, below 0 shorter ones. Default 1.0.
    early_stopping        beam search: True stops once num_beams sequences have finished; False
                          stops when no running beam can plausibly do better (transformers'
                          heuristic); "never" only when no beam can do better at all.
                          Default False.
    num_return_sequences  how many finished beams to return, best first (<= num_beams).
                          Default 1.
    bad_words_ids         token sequences that may never be generated, e.g.
                          [[1234], [56, 78]]. None: off. Default None.
    eos_token_id          the token id(s) that end generation. None: the tokenizer's own.
                          Default None.
    ignore_eos            True: no token ends generation; every sequence runs to
                          max_new_tokens (or a stop string). vLLM's name, for benchmarks and
                          tests that need answers of a known length. Default False.
    seed                  seeds the sampler's torch.Generator, so the same seed gives the same
                          text. None: a fresh random seed. Default None.
    stop                  strings that end generation as soon as the text contains one; the
                          stop string is not part of the returned text. None: off. Default None.
    """

    max_new_tokens: int = 64
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = 0
    top_p: float = 1.0
    min_p: float | None = None
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    no_repeat_ngram_size: int = 0
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1
    bad_words_ids: list[list[int]] | None = None
    eos_token_id: int | list[int] | None = None
    ignore_eos: bool = False
    seed: int | None = None
    stop: list[str] | None = field(default=None)

    def __post_init__(self):
        _validate(self)
        _warn_if_sampling_options_ignored(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def merge(cls, config: "GenerationConfig | None" = None, **fields) -> "GenerationConfig":
        """A validated config: `config` (or the defaults, when None) with `fields` changed;
        `config` itself when nothing changes (a config is a value, checked when it was built).

        >>> GenerationConfig.merge(None, do_sample=True, top_p=0.9).top_p
        0.9
        """
        if config is not None and not isinstance(config, GenerationConfig):
            raise TypeError(f"config must be a GenerationConfig or None, got "
                            f"{type(config).__name__}")
        unknown = sorted(set(fields) - set(cls.field_names()))
        if unknown:
            raise TypeError(f"unknown generation option(s) {', '.join(unknown)}; the options "
                            f"are: {', '.join(cls.field_names())}")
        if config is not None and not fields:
            return config
        base = config if config is not None else cls()
        return dataclasses.replace(base, **fields)

    @property
    def is_beam_search(self) -> bool:
        return self.num_beams > 1

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# --- validation: each option's check, declared once -------------------------------------------
# GenerationConfig runs these when it is built; the processors run the same ones on their
# arguments, and the server's request model on its fields (minillm/tools/server/protocol.py).

_OPENAI_PENALTY = "a number from -2.0 to 2.0 (0.0 is off), as in OpenAI's API"
CHECKS = {
    "max_new_tokens": partial(check_int, "max_new_tokens", low=1),
    "temperature": partial(check_number, "temperature", ok=lambda t: t >= 0,
                           allowed="a number >= 0 (0 or do_sample=False: greedy)"),
    "top_k": partial(check_int, "top_k", low=0, allow_none=True,
                     allowed="an int >= 0 (0 or None turns top-k off)"),
    "top_p": partial(check_number, "top_p", ok=lambda p: 0 < p <= 1,
                     allowed="a number in (0, 1] (1.0 turns top-p off)"),
    "min_p": partial(check_number, "min_p", low=0, high=1, allow_none=True,
                     allowed="a number in [0, 1] (None turns min-p off)"),
    "repetition_penalty": partial(check_number, "repetition_penalty",
                                  ok=lambda p: 0 < p < math.inf,
                                  allowed="a number > 0 (1.0 is no penalty)"),
    "presence_penalty": partial(check_number, "presence_penalty", low=-2.0, high=2.0,
                                allowed=_OPENAI_PENALTY),
    "frequency_penalty": partial(check_number, "frequency_penalty", low=-2.0, high=2.0,
                                 allowed=_OPENAI_PENALTY),
    "no_repeat_ngram_size": partial(check_int, "no_repeat_ngram_size", low=0,
                                    allowed="an int >= 0 (0 is off)"),
    "num_beams": partial(check_int, "num_beams", low=1, allowed="an int >= 1 (1: no beam search)"),
    "length_penalty": partial(check_number, "length_penalty", allowed="a finite number"),
    "num_return_sequences": partial(check_int, "num_return_sequences", low=1),
    "seed": partial(check_int, "seed", low=0, allow_none=True, allowed="an int >= 0 or None"),
}
_SAMPLING_TEMPERATURE = partial(check_number, "temperature", ok=lambda t: t > 0,
                                allowed="a number > 0 when do_sample=True (use do_sample=False "
                                        "for greedy decoding)")


def check_option(name: str, value, *, sampling: bool = False):
    """`value` checked as the option `name` of GenerationConfig (a TypeError or ValueError naming
    the option, the value and what is allowed). `sampling`: the value is used to sample now,
    which makes a temperature of 0 an error."""
    if name == "temperature" and sampling:
        return _SAMPLING_TEMPERATURE(value)
    return CHECKS[name](value)


def _token_ids(name, value, allowed):
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    for token in value:
        if not is_int(token) or token < 0:
            raise ValueError(f"{name} must be {allowed}, got {value!r} (bad entry {token!r})")


def _validate(c: GenerationConfig) -> None:
    if not isinstance(c.do_sample, bool):
        raise TypeError(f"do_sample must be True or False, got {c.do_sample!r}")
    for name in CHECKS:
        check_option(name, getattr(c, name), sampling=c.do_sample)
    if c.early_stopping not in (True, False, "never") or not isinstance(c.early_stopping,
                                                                        (bool, str)):
        raise ValueError(f"early_stopping must be True, False or 'never', got "
                         f"{c.early_stopping!r}")
    if c.num_return_sequences > c.num_beams:
        raise ValueError(f"num_return_sequences must be <= num_beams ({c.num_beams}), got "
                         f"{c.num_return_sequences}: beam search returns at most num_beams "
                         "sequences")
    if c.num_beams > 1 and c.do_sample:
        raise ValueError(f"num_beams={c.num_beams} together with do_sample=True (beam "
                         "sampling) is not supported: use num_beams=1 to sample, or "
                         "do_sample=False for beam search")
    if c.bad_words_ids is not None:
        if not isinstance(c.bad_words_ids, (list, tuple)) or not c.bad_words_ids:
            raise ValueError(f"bad_words_ids must be a non-empty list of token-id lists, e.g. "
                             f"[[1234], [56, 78]], or None, got {c.bad_words_ids!r}")
        for sequence in c.bad_words_ids:
            try:
                _token_ids("bad_words_ids", sequence, "")
            except ValueError:
                raise ValueError(f"bad_words_ids must be a list of non-empty lists of token "
                                 f"ids >= 0, e.g. [[1234], [56, 78]], got {c.bad_words_ids!r} "
                                 f"(bad entry {sequence!r})") from None
        object.__setattr__(c, "bad_words_ids", [list(s) for s in c.bad_words_ids])
    if c.eos_token_id is not None:
        if is_int(c.eos_token_id):
            if c.eos_token_id < 0:
                raise ValueError(f"eos_token_id must be a token id >= 0, a list of them, or "
                                 f"None, got {c.eos_token_id!r}")
        else:
            _token_ids("eos_token_id", c.eos_token_id,
                       "a token id >= 0, a non-empty list of them, or None")
            object.__setattr__(c, "eos_token_id", list(c.eos_token_id))
    if not isinstance(c.ignore_eos, bool):
        raise TypeError(f"ignore_eos must be True or False, got {c.ignore_eos!r}")
    if c.stop is not None:
        stop = [c.stop] if isinstance(c.stop, str) else c.stop
        if (not isinstance(stop, (list, tuple)) or not stop
                or not all(isinstance(s, str) and s for s in stop)):
            raise ValueError(f"stop must be a non-empty string, a list of them, or None, got "
                             f"{c.stop!r}")
        object.__setattr__(c, "stop", list(stop))


# --- sampling options on a config that does not sample ----------------------------------------

SAMPLING_OPTIONS = {"temperature": (1.0, 0), "top_k": (0, None), "top_p": (1.0,),
                    "min_p": (None,)}  # each option, and the values that leave sampling as is


class IgnoredSamplingOptionsWarning(UserWarning):
    """Sampling options set on a GenerationConfig whose do_sample is False: they are ignored."""


def ignored_sampling_options(config: GenerationConfig) -> list[str]:
    """The sampling options `config` sets that its decoding ignores (do_sample=False). A
    temperature of 0 asks for greedy decoding (OpenAI's spelling), so it is not among them."""
    if config.do_sample:
        return []
    return [name for name, off in SAMPLING_OPTIONS.items() if getattr(config, name) not in off]


def _warn_if_sampling_options_ignored(config: GenerationConfig) -> None:
    """Warn, as transformers does, when sampling options would be silently ignored. The message
    names the options, not their values, so Python's warnings show it once per line of code
    that builds such configs, however often a loop runs that line."""
    names = ignored_sampling_options(config)
    if not names:
        return
    listed = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    them = "them" if len(names) > 1 else "it"
    beams = config.num_beams > 1
    mode = "beam search" if beams else "greedy decoding"
    message = (f"{listed} {'are' if len(names) > 1 else 'is'} set but do_sample=False, so "
               f"{mode} ignores {them}: pass {'num_beams=1 and ' if beams else ''}"
               f"do_sample=True to sample with {them}, or leave {them} out for {mode}")
    warnings.warn(message, IgnoredSamplingOptionsWarning, stacklevel=_callers_level())


def _callers_level() -> int:
    """warnings.warn's stacklevel, called from the function that calls this one, that points at
    the first frame outside minillm and the dataclass machinery (a dataclass's generated
    __init__ runs in its module's globals): the line that asked for the config."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in (
            "minillm", "dataclasses"):
        frame, level = frame.f_back, level + 1
    return level
