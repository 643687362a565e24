"""Speculative decoding gives exactly the target's greedy tokens, with each draft and k = 1..8,
and leaves the KV cache as a fresh prefill would after rejected drafts; the drafts themselves
(prompt lookup, first layers); sampling is seeded; bad input.

The full grid (10 prompts x 2 drafts x k = 1..8) runs on a small random Llama model in float64
(no near-ties to flip); SmolLM2 runs 10 prompts with both drafts, k cycling through 1..8."""

import dataclasses

import pytest
import torch

import minillm
from minillm.course.checks.ch08_speculative import chi_square_p_value
from minillm.generation.loop import generate
from minillm.generation.kv_cache import KVCache
from minillm.model import LlamaModel, ModelConfig
from minillm.speculative import (Draft, ModelDraft, PromptLookupDraft,
                                 SpeculativeDecoder, first_layers, speculative_generate)
from minillm.generation.stopping import Sequence


class Digits:
    """A tokenizer for the stand-in model: token n is one character."""

    eos_token_ids = []
    pad_token_id = 0

    def encode(self, text):
        return [ord(c) % 48 for c in text]

    def decode(self, ids):
        return "".join(chr(0x30 + i) for i in ids)


def tiny_llama(seed=0, n_layers=3, vocab=48, dtype=torch.float64):
    torch.manual_seed(seed)
    config = ModelConfig(arch="llama", vocab_size=vocab, hidden_size=32, n_layers=n_layers,
                         n_heads=4, n_kv_heads=2, head_dim=8, intermediate_size=64,
                         max_seq_len=128, rope_theta=10000.0)
    model = LlamaModel(config).to(dtype).eval().requires_grad_(False)
    with torch.no_grad():
        model.embed.weight.mul_(4)  # peakier logits: the model repeats itself, as real ones do
    return model


@pytest.fixture(scope="module")
def tiny():
    """The stand-in model, run on one thread: its matrices are tiny, and on a busy machine
    threads only wait for each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tiny_llama()
    torch.set_num_threads(threads)


def tiny_prompts(n=10):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 48, (3 + i,), generator=g).tolist() for i in range(n)]
    prompts[1] = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]  # a repeating prompt: lookup finds matches at once
    return prompts


class JunkDraft(Draft):
    """Proposes k copies of one token: almost always rejected (every round rolls back)."""

    def propose(self, ids, k, process=None, do_sample=False, generator=None):
        return [3] * k, None


# --- greedy: exactly the plain tokens -----------------------------------------------------------

@pytest.mark.parametrize("draft_name", ["lookup", "first_layers"])
def test_greedy_equals_plain_on_a_small_model(tiny, draft_name):
    tokenizer = Digits()
    accepted = 0
    for prompt in tiny_prompts():
        want = generate(tiny, tokenizer, prompt, max_new_tokens=16).token_ids
        for k in range(1, 9):
            draft = PromptLookupDraft() if draft_name == "lookup" \
                else ModelDraft(first_layers(tiny, 1))
            out = speculative_generate(tiny, tokenizer, prompt, draft, k=k, max_new_tokens=16)
            assert out.token_ids == want, f"prompt {prompt}, k={k}"
            assert out.stats.new_tokens == 16 and out.stats.passes <= 16
            accepted += out.stats.accepted
    assert accepted > 0, "some drafts should have been accepted"



def test_each_round_records_what_it_drafted_and_kept(tiny):
    """stats.proposed_per_pass / accepted_per_pass: one entry a round, adding up to the totals;
    prompt lookup drafts nothing where the context has no earlier match."""
    tokenizer = Digits()
    for prompt in tiny_prompts(4):
        out = speculative_generate(tiny, tokenizer, prompt, PromptLookupDraft(), k=3,
                                   max_new_tokens=16)
        s = out.stats
        assert len(s.proposed_per_pass) == len(s.accepted_per_pass) == s.passes
        assert sum(s.proposed_per_pass) == s.proposed and sum(s.accepted_per_pass) == s.accepted
        assert all(0 <= a <= p <= 3 for a, p in zip(s.accepted_per_pass, s.proposed_per_pass))
    out = speculative_generate(tiny, tokenizer, [1, 2, 3], PromptLookupDraft(), k=3,
                               max_new_tokens=1)
    assert out.stats.proposed_per_pass == [0]  # no earlier match, and no room to use a draft

def test_rejected_drafts_are_rolled_back(tiny):
    """A draft that is nearly always wrong: the cache is cropped every round, and at the end it
    holds exactly what a fresh prefill of the sequence (all but its last token) holds."""
    tokenizer = Digits()
    prompt = tiny_prompts()[4]
    want = generate(tiny, tokenizer, prompt, max_new_tokens=20).token_ids
    for k in (1, 3, 8):
        decoder = SpeculativeDecoder(tiny, JunkDraft(), k=k)
        sequence = Sequence(prompt, tokenizer, [], 20)
        stats = decoder.run(prompt, sequence)
        assert sequence.token_ids == want
        assert stats.accepted < stats.proposed  # rejections did happen
        assert_holds_a_fresh_prefill(tiny, decoder.cache, prompt + sequence.token_ids)


def assert_holds_a_fresh_prefill(model, cache, ids):
    """`cache` holds exactly what a fresh prefill of `ids` but the last token puts there."""
    assert cache.length == len(ids) - 1
    fresh = KVCache.for_model(model, 1, len(ids))
    with torch.inference_mode():
        model(torch.tensor([ids[:-1]]), cache=fresh)
    for layer in range(model.config.n_layers):
        for got, want in zip(cache.read(layer), fresh.read(layer)):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


def test_model_draft_rolls_its_own_cache_back(tiny):
    draft = ModelDraft(first_layers(tiny, 2))
    draft.reset(64)
    ids = [4, 5, 6, 7]
    first, _ = draft.propose(ids, 4)
    assert draft.cached == ids + first[:3]  # the last proposal is never fed
    # the target accepted one drafted token and replaced the second by 9
    ids2 = ids + first[:1] + [9]
    again, _ = draft.propose(ids2, 3)
    fresh = ModelDraft(first_layers(tiny, 2))
    assert again == fresh.propose(ids2, 3)[0]
    assert draft.cached == ids2 + again[:2]


def test_stops_at_eos_inside_an_accepted_run(tiny):
    """When the target's own token is EOS in the middle of accepted drafts, nothing after it is
    kept: the same tokens and finish reason as plain generation."""
    tokenizer = Digits()
    prompt = tiny_prompts()[1]
    plain = generate(tiny, tokenizer, prompt, max_new_tokens=12).token_ids
    eos = plain[5]
    want = generate(tiny, tokenizer, prompt, max_new_tokens=12, eos_token_id=eos)
    out = speculative_generate(tiny, tokenizer, prompt, k=8, max_new_tokens=12, eos_token_id=eos)
    assert out.token_ids == want.token_ids and out.finish_reason == want.finish_reason == "eos"


def test_sampling_is_seeded_and_uses_the_rule(tiny):
    tokenizer = Digits()
    prompt = tiny_prompts()[1]
    runs = [speculative_generate(tiny, tokenizer, prompt, ModelDraft(first_layers(tiny, 1)), k=4,
                                 max_new_tokens=12, do_sample=True, seed=5, temperature=0.8)
            for _ in range(2)]
    assert runs[0].token_ids == runs[1].token_ids
    other = speculative_generate(tiny, tokenizer, prompt, ModelDraft(first_layers(tiny, 1)), k=4,
                                 max_new_tokens=12, do_sample=True, seed=6, temperature=0.8)
    assert len(other.token_ids) == 12


def test_sampled_first_token_follows_the_target(tiny):
    """End to end, sampling at temperature 0.5: the first generated token of many seeded runs
    follows the target's next-token distribution (chi-square), not the draft's (another small
    model, of the same vocabulary, whose distribution is far from the target's)."""
    tokenizer = Digits()
    prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    other = tiny_llama(seed=5, n_layers=1)
    with torch.inference_mode():
        p = torch.softmax(tiny(torch.tensor([prompt]))[0, -1] / 0.5, -1)
        q = torch.softmax(other(torch.tensor([prompt]))[0, -1] / 0.5, -1)
    draft = ModelDraft(other)
    counts = torch.zeros_like(p)
    for seed in range(800):
        out = speculative_generate(tiny, tokenizer, prompt, draft, k=1, max_new_tokens=2,
                                   do_sample=True, temperature=0.5, seed=seed)
        counts[out.token_ids[0]] += 1
    cells = torch.cat([p.argsort(descending=True)[:4], q.argsort(descending=True)[:4]]).unique()
    pool = lambda t: torch.cat([t[cells], t.sum()[None] - t[cells].sum()])  # noqa: E731
    assert chi_square_p_value(pool(counts), pool(p)) > 1e-3
    assert chi_square_p_value(pool(counts), pool(q)) < 1e-6


# --- the real model -------------------------------------------------------------------------------

SMOLLM2_PROMPTS = [
    "The capital of France is",
    "Once upon a time",
    "def fibonacci(n):",
    "Copy this list: apples, pears, plums, apples, pears,",
    "Water boils at",
    "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown",
    "1, 2, 3, 4,",
    "The largest planet in the solar system",
    "Monday, Tuesday, Wednesday,",
    "In 1969, Neil Armstrong became the first person to",
]


@pytest.fixture(scope="module")
def smollm2():
    return minillm.load("smollm2-135m", dtype=torch.float32, device="cpu")


@pytest.mark.slow
def test_greedy_equals_plain_on_smollm2(smollm2):
    """10 prompts, both drafts, k cycling through 1..8 (each k used by several prompts)."""
    model, tokenizer = smollm2
    layers = ModelDraft(first_layers(model, 6))
    accepted = 0
    for i, prompt in enumerate(SMOLLM2_PROMPTS):
        want = generate(model, tokenizer, prompt, max_new_tokens=10).token_ids
        for draft, k in ((PromptLookupDraft(), 1 + i % 8), (layers, 1 + (i + 4) % 8)):
            out = speculative_generate(model, tokenizer, prompt, draft, k=k, max_new_tokens=10)
            assert out.token_ids == want, f"{prompt!r} with {draft}, k={k}"
            accepted += out.stats.accepted
    assert accepted > 0


# --- the drafts -----------------------------------------------------------------------------------

def test_prompt_lookup_proposals():
    draft = PromptLookupDraft(max_ngram=3)
    #            0  1  2  3  4  5  6  7  8
    ids = [1, 2, 3, 4, 5, 9, 1, 2, 3]
    assert draft.lookup(ids, 3) == [4, 5, 9]          # "1 2 3" seen at 0: propose what followed
    assert draft.lookup(ids, 10) == [4, 5, 9, 1, 2, 3]  # runs to the end of the context
    assert draft.lookup([1, 2, 3, 4], 3) == []          # no earlier occurrence: nothing
    # the most recent earlier match wins: "7" was followed by 1 and later by 2
    assert draft.lookup([7, 1, 7, 2, 7], 1) == [2]
    # the longest n-gram is tried first: "5 6" occurred at 2 (then 8); "6" alone last at 6 (then 5)
    assert PromptLookupDraft(max_ngram=2).lookup([6, 9, 5, 6, 8, 0, 6, 5, 6], 1) == [8]
    assert PromptLookupDraft(max_ngram=1).lookup([6, 9, 5, 6, 8, 0, 6, 5, 6], 1) == [5]
    assert draft.propose(ids, 2) == ([4, 5], None)
    assert draft.lookup(ids, 0) == []


def test_first_layers_shares_weights_and_matches_a_shorter_model(tiny):
    short = first_layers(tiny, 2)
    assert type(short) is type(tiny) and short.config.n_layers == 2
    assert tiny.config.n_layers == 3 and len(tiny.layers) == 3  # the original is untouched
    assert short.embed.weight.data_ptr() == tiny.embed.weight.data_ptr()
    assert short.layers[1].mlp.up_proj.weight.data_ptr() == \
        tiny.layers[1].mlp.up_proj.weight.data_ptr()
    # a real two-layer model with the same weights gives the same logits
    config = dataclasses.replace(tiny.config, n_layers=2)
    copy = LlamaModel(config).to(torch.float64).eval()
    copy.load_state_dict({k: v for k, v in tiny.state_dict().items()
                          if not k.startswith("layers.") or int(k.split(".")[1]) < 2})
    ids = torch.tensor([[1, 5, 9, 2]])
    torch.testing.assert_close(short(ids), copy(ids))
    torch.testing.assert_close(first_layers(tiny, 3)(ids), tiny(ids))
    cache = KVCache.for_model(short, 1, 8)
    assert cache.n_layers == 2


@pytest.mark.parametrize("call, error, words", [
    (lambda m: first_layers(m, 0), ValueError, "from 1 to 3"),
    (lambda m: first_layers(m, 4), ValueError, "from 1 to 3"),
    (lambda m: first_layers(torch.nn.Linear(2, 2), 1), TypeError, "minillm model"),
    (lambda m: PromptLookupDraft(max_ngram=0), ValueError, "max_ngram"),
    (lambda m: PromptLookupDraft(max_ngram=1, min_ngram=2), ValueError, "<= max_ngram"),
    (lambda m: speculative_generate(m, Digits(), [1, 2], k=0), ValueError, "k (tokens"),
    (lambda m: speculative_generate(m, Digits(), [1, 2], k=2.0), TypeError, "k (tokens"),
    (lambda m: speculative_generate(m, Digits(), [1, 2], draft="medusa"), ValueError,
     "'prompt_lookup'"),
    (lambda m: speculative_generate(m, Digits(), [[1, 2], [3]]), ValueError, "one prompt"),
    (lambda m: speculative_generate(m, Digits(), [1, 2], num_beams=2), ValueError,
     "not beam search"),
    (lambda m: SpeculativeDecoder(m, "lookup"), TypeError, "Draft"),
])
def test_bad_input(tiny, call, error, words):
    with pytest.raises(error) as info:
        call(tiny)
    assert words in str(info.value)
