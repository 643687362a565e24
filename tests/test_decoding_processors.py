"""Each minillm logits processor against its transformers twin, on random logits and ids.

Cases include ties, -inf entries, top_p of 1.0 and tiny values, top_k of 1 and above the
vocabulary size, and min_tokens_to_keep > 1. Scores must match exactly (same -inf positions,
finite values equal to 1e-6)."""

import random

import pytest
import torch
from transformers.generation import logits_process as hf

from minillm.decoding import (BadWordsProcessor, MinPProcessor, NoRepeatNGramProcessor,
                              ProcessorList, RepetitionPenaltyProcessor, TemperatureProcessor,
                              TopKProcessor, TopPProcessor, build_processors, GenerationConfig,
                              IgnoredSamplingOptionsWarning)

CASES = 120


def random_case(rng: random.Random):
    """(input_ids, scores): small vocabularies, so ids repeat and ties happen."""
    batch, vocab, length = rng.randint(1, 4), rng.choice([2, 5, 11, 32, 100]), rng.randint(1, 12)
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    kind = rng.choice(["normal", "ties", "inf", "peaked", "flat"])
    if kind == "ties":  # few distinct values: many exact ties
        scores = torch.randint(-2, 3, (batch, vocab), generator=gen).float()
    elif kind == "flat":
        scores = torch.zeros(batch, vocab)
    elif kind == "peaked":
        scores = torch.randn(batch, vocab, generator=gen)
        scores[:, 0] += 20
    else:
        scores = torch.randn(batch, vocab, generator=gen) * rng.choice([0.5, 2.0, 8.0])
    if kind == "inf" and vocab > 1:  # some tokens already filtered out, never all in a row
        mask = torch.rand(batch, vocab, generator=gen) < 0.4
        mask[:, rng.randrange(vocab)] = False
        scores = scores.masked_fill(mask, float("-inf"))
    ids_vocab = rng.choice([vocab, min(vocab, 3)])  # few distinct ids: many repeats
    input_ids = torch.randint(0, ids_vocab, (batch, length), generator=gen)
    return input_ids, scores


def assert_same(got, want):
    assert got.shape == want.shape
    assert torch.equal(torch.isneginf(got), torch.isneginf(want)), "different tokens removed"
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], rtol=1e-6, atol=1e-6)


def run_cases(make_pair, seed):
    rng = random.Random(seed)
    for _ in range(CASES):
        input_ids, scores = random_case(rng)
        ours, theirs = make_pair(rng, scores.shape[-1])
        assert_same(ours(input_ids, scores.clone()), theirs(input_ids, scores.clone()))


def test_temperature_matches_transformers():
    def pair(rng, vocab):
        t = rng.choice([0.01, 0.5, 0.7, 1.3, 3.0])
        return TemperatureProcessor(t), hf.TemperatureLogitsWarper(t)
    run_cases(pair, 1)


def test_top_k_matches_transformers():
    def pair(rng, vocab):
        k = rng.choice([1, 2, 3, vocab, vocab + 7, 50])
        keep = rng.choice([1, 1, 2, 3])
        return (TopKProcessor(k, min_tokens_to_keep=keep),
                hf.TopKLogitsWarper(k, min_tokens_to_keep=keep))
    run_cases(pair, 2)


def test_top_p_matches_transformers():
    def pair(rng, vocab):
        p = rng.choice([1.0, 1e-9, 1e-3, 0.1, 0.5, 0.9, 0.95, 0.999])
        keep = rng.choice([1, 1, 2, 3])
        return (TopPProcessor(p, min_tokens_to_keep=keep),
                hf.TopPLogitsWarper(p, min_tokens_to_keep=keep))
    run_cases(pair, 3)


def test_min_p_matches_transformers():
    def pair(rng, vocab):
        p = rng.choice([0.0, 0.01, 0.05, 0.1, 0.5, 1.0])
        keep = rng.choice([1, 1, 2, 200])
        return (MinPProcessor(p, min_tokens_to_keep=keep),
                hf.MinPLogitsWarper(p, min_tokens_to_keep=keep))
    run_cases(pair, 4)


def test_repetition_penalty_matches_transformers():
    def pair(rng, vocab):
        p = rng.choice([0.5, 1.0, 1.2, 1.8, 3.0])
        return RepetitionPenaltyProcessor(p), hf.RepetitionPenaltyLogitsProcessor(p)
    run_cases(pair, 5)


def test_no_repeat_ngram_matches_transformers():
    def pair(rng, vocab):
        n = rng.choice([1, 2, 3, 4, 6])
        return NoRepeatNGramProcessor(n), hf.NoRepeatNGramLogitsProcessor(n)
    run_cases(pair, 6)


def test_bad_words_match_transformers():
    def pair(rng, vocab):
        words = [[rng.randrange(min(vocab, 3)) for _ in range(rng.randint(1, 3))]
                 for _ in range(rng.randint(1, 4))]
        words = [list(w) for w in dict.fromkeys(map(tuple, words))]
        eos = rng.choice([None, 0, [0, 1]])
        if eos is not None and all(len(w) == 1 and w[0] in ([eos] if isinstance(eos, int)
                                                             else eos) for w in words):
            words.append([vocab - 1, vocab - 1])  # transformers refuses an empty list
        return BadWordsProcessor(words, eos), hf.NoBadWordsLogitsProcessor(words, eos)
    run_cases(pair, 7)


def test_built_chain_matches_transformers_order():
    """build_processors gives transformers' chain: penalties and bans, then the sampling filters."""
    rng = random.Random(8)
    for _ in range(CASES):
        input_ids, scores = random_case(rng)
        vocab = scores.shape[-1]
        config = GenerationConfig(
            do_sample=True, temperature=rng.choice([0.5, 1.0, 1.7]),
            top_k=rng.choice([0, 1, 3, vocab + 1]), top_p=rng.choice([1.0, 0.5, 0.9]),
            min_p=rng.choice([None, 0.1]), repetition_penalty=rng.choice([1.0, 1.8]),
            no_repeat_ngram_size=rng.choice([0, 2]))
        theirs = hf.LogitsProcessorList()
        if config.repetition_penalty != 1.0:
            theirs.append(hf.RepetitionPenaltyLogitsProcessor(config.repetition_penalty))
        if config.no_repeat_ngram_size:
            theirs.append(hf.NoRepeatNGramLogitsProcessor(config.no_repeat_ngram_size))
        if config.temperature != 1.0:
            theirs.append(hf.TemperatureLogitsWarper(config.temperature))
        if config.top_k:
            theirs.append(hf.TopKLogitsWarper(config.top_k))
        if config.top_p < 1.0:
            theirs.append(hf.TopPLogitsWarper(config.top_p))
        if config.min_p is not None:
            theirs.append(hf.MinPLogitsWarper(config.min_p))
        ours = build_processors(config)
        assert [type(p).__name__ for p in ours] == [
            type(p).__name__.replace("LogitsWarper", "Processor")
            .replace("LogitsProcessor", "Processor") for p in theirs]
        assert_same(ours(input_ids, scores.clone()), theirs(input_ids, scores.clone()))


def test_greedy_builds_no_sampling_filters():
    with pytest.warns(IgnoredSamplingOptionsWarning, match="temperature, top_k, top_p and min_p"):
        config = GenerationConfig(temperature=0.5, top_k=5, top_p=0.5, min_p=0.1,
                                  repetition_penalty=1.2)
    assert [type(p) for p in build_processors(config)] == [RepetitionPenaltyProcessor]
    assert isinstance(build_processors(GenerationConfig()), ProcessorList)
    assert len(build_processors(GenerationConfig())) == 0


# --- the subtle rules, pinned on hand-made inputs ---------------------------------------------

def test_top_p_keeps_the_token_that_crosses_the_threshold():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    out = TopPProcessor(0.7)(None, probs.log())
    # 0.5 alone is below 0.7; 0.5 + 0.3 crosses it, so the 0.3 token is kept; nothing else.
    assert torch.isfinite(out).tolist() == [[True, True, False, False]]


def test_top_k_keeps_ties_with_the_kth_token():
    out = TopKProcessor(2)(None, torch.tensor([[3.0, 1.0, 1.0, 0.0]]))
    assert torch.isfinite(out).tolist() == [[True, True, True, False]]


def test_repetition_penalty_counts_prompt_tokens_once():
    scores = torch.tensor([[2.0, -2.0, 2.0, 1.0]])
    input_ids = torch.tensor([[0, 0, 0, 1]])  # the prompt: token 0 three times, token 1 once
    out = RepetitionPenaltyProcessor(2.0)(input_ids, scores)
    assert out.tolist() == [[1.0, -4.0, 2.0, 1.0]]  # positive halved once, negative doubled


def test_no_repeat_ngram_bans_the_token_that_completes_a_seen_ngram():
    input_ids = torch.tensor([[5, 6, 7, 5, 6]])  # "5 6" was followed by 7 before
    out = NoRepeatNGramProcessor(3)(input_ids, torch.zeros(1, 10))
    assert torch.isneginf(out).nonzero()[:, 1].tolist() == [7]


def test_bad_words_ban_only_completions_and_never_eos():
    proc = BadWordsProcessor([[3], [1, 2], [9]], eos_token_id=9)
    out = proc(torch.tensor([[0, 1], [1, 0]]), torch.zeros(2, 10))
    assert torch.isneginf(out[0]).nonzero().flatten().tolist() == [2, 3]
    assert torch.isneginf(out[1]).nonzero().flatten().tolist() == [3]


@pytest.mark.parametrize("make", [lambda: TemperatureProcessor(0), lambda: TopKProcessor(0),
                                  lambda: TopPProcessor(1.5), lambda: MinPProcessor(-0.1),
                                  lambda: RepetitionPenaltyProcessor(0.0),
                                  lambda: NoRepeatNGramProcessor(0)])
def test_processors_refuse_bad_settings(make):
    with pytest.raises(ValueError):
        make()
