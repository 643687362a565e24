"""Logits processors (logits 处理器): small pieces that each change the next-token scores one way.

Each is a class with one method, `__call__(input_ids, scores) -> scores`:
    input_ids  (batch, length) LongTensor: every token so far, the prompt included
    scores     (batch, vocab) float: the logits (or log-probabilities) for the next token
A token that must not be picked gets the score -inf, so softmax gives it probability 0. Each
checks its argument in its constructor with the check GenerationConfig runs on the option of the
same name (decoding/config.py's CHECKS), so a value is refused with one message everywhere.

The semantics are transformers' (`transformers/generation/logits_process.py`), and
tests/test_decoding_processors.py checks each one against its transformers twin; the presence and
frequency penalties, which transformers does not have, follow OpenAI's definitions and are checked
against a hand computation. `build_processors` chains them in the order transformers' `generate()`
does: first the rules about repeats and banned words, then, only when sampling, temperature,
top-k, top-p and min-p.
"""

from __future__ import annotations

import math

import torch

from ..utils.validate import check_int
from .config import check_option

NEG_INF = float("-inf")


class TemperatureProcessor:
    """Divide the logits by T: P_i = e^(z_i/T) / sum_j e^(z_j/T). T < 1 sharpens, T > 1 flattens."""

    def __init__(self, temperature: float):
        self.temperature = check_option("temperature", temperature, sampling=True)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores / self.temperature


class TopKProcessor:
    """Keep the k highest scores; every token tied with the k-th is kept too."""

    def __init__(self, top_k: int, min_tokens_to_keep: int = 1):
        check_int("top_k", top_k, 1, allowed="an int >= 1 (a config's top_k 0 means no filter)")
        self.top_k = max(top_k, min_tokens_to_keep)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        k = min(self.top_k, scores.shape[-1])  # a k above the vocabulary keeps everything
        kth_best = torch.topk(scores, k).values[..., -1:]
        return scores.masked_fill(scores < kth_best, NEG_INF)


class TopPProcessor:
    """Nucleus sampling (核采样): keep the smallest set of most likely tokens whose probabilities
    add up to at least top_p. The token that crosses top_p is kept.

    Worked from the unlikely end, as transformers does: sort ascending, and drop every token whose
    cumulative probability (itself and everything less likely) is still <= 1 - top_p."""

    def __init__(self, top_p: float, min_tokens_to_keep: int = 1):
        self.top_p = check_option("top_p", top_p)
        self.min_tokens_to_keep = min_tokens_to_keep

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        sorted_scores, order = torch.sort(scores, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= 1 - self.top_p
        drop_sorted[..., -self.min_tokens_to_keep:] = False  # the most likely tokens stay
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        return scores.masked_fill(drop, NEG_INF)


class MinPProcessor:
    """Keep the tokens whose probability is at least min_p times the most likely token's."""

    def __init__(self, min_p: float, min_tokens_to_keep: int = 1):
        self.min_p = check_option("min_p", min_p)
        self.min_tokens_to_keep = min_tokens_to_keep

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = scores.softmax(dim=-1)
        drop = probs < self.min_p * probs.amax(dim=-1, keepdim=True)
        k = min(self.min_tokens_to_keep, probs.shape[-1])
        drop.scatter_(-1, torch.topk(probs, k).indices, False)
        return scores.masked_fill(drop, NEG_INF)


class RepetitionPenaltyProcessor:
    """Make every token already in `input_ids` (prompt included) less likely: its score is
    divided by the penalty when positive and multiplied by it when negative, once however often
    the token appeared."""

    def __init__(self, penalty: float):
        self.penalty = check_option("repetition_penalty", penalty)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        seen = torch.gather(scores, 1, input_ids)
        seen = torch.where(seen < 0, seen * self.penalty, seen / self.penalty)
        return scores.scatter(1, input_ids, seen)


class GeneratedTokens:
    """Where the generated tokens start in `input_ids`, for rules that look at them alone (not at
    the prompt). `prompt_length` says so; None means the length of `input_ids` at the first call,
    which is the prompt (left-padded to one length in a batch). So one processor serves one
    generation: every row of one batch, or the n samples of one request, not a second prompt."""

    def __init__(self, prompt_length: int | None = None):
        self.prompt_length = check_int("prompt_length", prompt_length, 0, allow_none=True)

    def generated(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        return input_ids[:, self.prompt_length:]

    def counts(self, input_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """(batch, vocab): how often each token was generated so far in each row."""
        new = self.generated(input_ids)
        counts = torch.zeros((input_ids.shape[0], vocab_size), device=input_ids.device)
        return counts.scatter_add_(1, new, torch.ones_like(new, dtype=counts.dtype))


class PresencePenaltyProcessor(GeneratedTokens):
    """OpenAI's presence penalty: every token generated at least once so far has `penalty`
    subtracted from its logit, however often it appeared: z_j -= penalty * (c_j > 0). The prompt
    does not count (unlike repetition_penalty). In [-2, 2]; above 0 favours new tokens, below 0
    repeats."""

    def __init__(self, penalty: float, prompt_length: int | None = None):
        super().__init__(prompt_length)
        self.penalty = check_option("presence_penalty", penalty)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        seen = self.counts(input_ids, scores.shape[-1]) > 0
        return scores - self.penalty * seen.to(scores.dtype)


class FrequencyPenaltyProcessor(GeneratedTokens):
    """OpenAI's frequency penalty: each token's logit goes down by `penalty` times the number of
    times it was generated so far: z_j -= penalty * c_j. The prompt does not count. In [-2, 2];
    above 0 discourages repeating a token more the more often it came."""

    def __init__(self, penalty: float, prompt_length: int | None = None):
        super().__init__(prompt_length)
        self.penalty = check_option("frequency_penalty", penalty)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores - self.penalty * self.counts(input_ids, scores.shape[-1]).to(scores.dtype)


class NoRepeatNGramProcessor:
    """Ban any token that would repeat an n-gram (n tokens in a row) already in the sequence,
    prompt included: if the last n-1 tokens appeared before, the token that followed them then
    is banned now."""

    def __init__(self, ngram_size: int):
        self.n = check_int("no_repeat_ngram_size", ngram_size, 1,
                           allowed="an int >= 1 (a config's 0 means no rule)")

    def banned_tokens(self, tokens: list[int]) -> list[int]:
        n, length = self.n, len(tokens)
        if length < n:
            return []
        prefix = tokens[length - n + 1:]  # the n-1 tokens a new n-gram would start with
        return [tokens[i + n - 1] for i in range(length - n + 1) if tokens[i:i + n - 1] == prefix]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.clone()
        for row, tokens in enumerate(input_ids.tolist()):
            banned = self.banned_tokens(tokens)
            if banned:
                scores[row, banned] = NEG_INF
        return scores


class BadWordsProcessor:
    """Never generate the token sequences in `bad_words_ids`: a one-token word is always banned; a
    longer one has its last token banned whenever the sequence so far ends with the rest of it.
    A one-token entry equal to an EOS id is ignored, as in transformers, so generation can stop."""

    def __init__(self, bad_words_ids: list[list[int]], eos_token_id=None):
        eos = [] if eos_token_id is None else (
            [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id))
        self.bad_words_ids = [list(word) for word in bad_words_ids
                              if not (len(word) == 1 and word[0] in eos)]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.clone()
        for row, tokens in enumerate(input_ids.tolist()):
            for word in self.bad_words_ids:
                start = word[:-1]
                if len(start) <= len(tokens) and tokens[len(tokens) - len(start):] == start:
                    scores[row, word[-1]] = NEG_INF
        return scores


class MinNewTokensProcessor(GeneratedTokens):
    """No end of sequence before `min_new_tokens` tokens: the EOS tokens' logits are -inf while
    fewer have been generated (transformers' MinNewTokensLengthLogitsProcessor, vLLM's
    min_tokens). Stop strings still end the text where they appear."""

    def __init__(self, min_new_tokens: int, eos_token_ids, prompt_length: int | None = None):
        super().__init__(prompt_length)
        self.min_new_tokens = check_int("min_new_tokens", min_new_tokens, 0)
        self.eos_token_ids = [check_int("eos_token_ids", i, 0) for i in eos_token_ids]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if not self.eos_token_ids or self.generated(input_ids).shape[1] >= self.min_new_tokens:
            return scores
        scores = scores.clone()
        scores[..., self.eos_token_ids] = -math.inf
        return scores


class ProcessorList(list):
    """Processors applied one after another, in list order."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


def build_processors(config, eos_token_ids=None) -> ProcessorList:
    """The processors `config` asks for, in transformers' order:

        repetition, presence and frequency penalties,
        no-repeat n-gram, bad words                          (always)
        temperature, top-k, top-p, min-p                     (only when do_sample=True)

    `eos_token_ids` (default: config.eos_token_id) keeps an EOS token out of the banned words."""
    if eos_token_ids is None:
        eos_token_ids = config.eos_token_id
    processors = ProcessorList()
    if config.repetition_penalty != 1.0:
        processors.append(RepetitionPenaltyProcessor(config.repetition_penalty))
    if config.presence_penalty != 0.0:
        processors.append(PresencePenaltyProcessor(config.presence_penalty))
    if config.frequency_penalty != 0.0:
        processors.append(FrequencyPenaltyProcessor(config.frequency_penalty))
    if config.no_repeat_ngram_size > 0:
        processors.append(NoRepeatNGramProcessor(config.no_repeat_ngram_size))
    if config.bad_words_ids:
        processors.append(BadWordsProcessor(config.bad_words_ids, eos_token_ids))
    if config.do_sample:
        if config.temperature != 1.0:
            processors.append(TemperatureProcessor(config.temperature))
        if config.top_k:
            processors.append(TopKProcessor(config.top_k))
        if config.top_p < 1.0:
            processors.append(TopPProcessor(config.top_p))
        if config.min_p is not None:
            processors.append(MinPProcessor(config.min_p))
    return processors


def bad_words_ids(tokenizer, words: list[str]) -> list[list[int]]:
    """Token-id sequences for `bad_words_ids`: each word as it appears at the start of a text and
    after a space (" word"), which a byte-level BPE tokenizes differently."""
    if isinstance(words, str) or not all(isinstance(w, str) and w for w in words):
        raise ValueError(f"words must be a list of non-empty strings, got {words!r}")
    sequences = []
    for word in words:
        for variant in (word, " " + word):
            ids = list(tokenizer.encode(variant))
            if ids and ids not in sequences:
                sequences.append(ids)
    return sequences
