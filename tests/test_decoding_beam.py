"""beam_search against transformers' beam search on a tiny random Llama model, and the cached
path (KVCache.reorder) against the uncached one on a stand-in model.

The real-model parity (SmolLM2 through minillm.generate) is in tests/test_decoding_smollm2.py."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from minillm.decoding import GenerationConfig, Hypothesis, beam_search
from minillm.generation.kv_cache import KVCache

VOCAB, PROMPT_LEN, NEW = 64, 5, 8


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def hf_beams(hf, prompt, config, eos):
    out = hf.generate(torch.tensor([prompt]), max_new_tokens=config.max_new_tokens,
                      do_sample=False, num_beams=config.num_beams,
                      length_penalty=config.length_penalty, early_stopping=config.early_stopping,
                      num_return_sequences=config.num_return_sequences, eos_token_id=eos,
                      pad_token_id=VOCAB - 1, top_k=None,
                      repetition_penalty=config.repetition_penalty,
                      no_repeat_ngram_size=config.no_repeat_ngram_size,
                      output_scores=True, return_dict_in_generate=True)
    rows = []
    for i in range(config.num_return_sequences):
        tokens = out.sequences[i, len(prompt):].tolist()
        if eos in tokens:  # transformers pads a sequence that ended early
            tokens = tokens[:tokens.index(eos) + 1]
        score = out.sequences_scores[i].item() if config.num_beams > 1 else None
        rows.append((tokens, score))
    return rows


def cases():
    """Prompts whose EOS is a token greedy decoding reaches early, so beams do end on EOS."""
    out = []
    for seed, eos_step in [(0, 2), (1, 3), (2, 5)]:
        g = torch.Generator().manual_seed(seed)
        out.append((torch.randint(3, VOCAB - 1, (PROMPT_LEN,), generator=g).tolist(), eos_step))
    return out


@pytest.mark.parametrize("num_beams", [2, 3, 4])
def test_beam_search_matches_transformers_on_a_tiny_model(tiny, num_beams):
    wrapped = lambda ids, cache=None, **kw: tiny(ids).logits  # noqa: E731 (no cache: recompute)
    checked = 0
    for index, (prompt, eos_step) in enumerate(cases()):
        greedy = tiny.generate(torch.tensor([prompt]), max_new_tokens=eos_step + 1,
                               do_sample=False, pad_token_id=0)
        eos = greedy[0, PROMPT_LEN + eos_step].item()
        for length_penalty, early_stopping in [(0.5, False), (1.0, True), (2.0, "never"),
                                               (-1.0, False)]:
            config = GenerationConfig(max_new_tokens=NEW, num_beams=num_beams,
                                      length_penalty=length_penalty,
                                      early_stopping=early_stopping,
                                      num_return_sequences=num_beams,
                                      repetition_penalty=[1.0, 1.3, 1.0][index],
                                      no_repeat_ngram_size=[0, 0, 2][index])
            ours = beam_search(wrapped, prompt, config, eos)
            theirs = hf_beams(tiny, prompt, config, eos)
            assert [h.token_ids for h in ours] == [t for t, _ in theirs], (prompt, config)
            for h, (_, score) in zip(ours, theirs):
                assert h.score == pytest.approx(score, abs=1e-4)
                assert h.finish_reason == ("eos" if h.token_ids[-1] == eos else "length")
            checked += 1
    assert checked == 12


class CachedToy(nn.Module):
    """A stand-in with minillm's model contract: logits depend on the whole history, read from
    the KV cache when there is one (keys = token embeddings), recomputed when there is none."""

    def __init__(self, vocab=40, dim=8):
        super().__init__()
        torch.manual_seed(1)
        self.config = SimpleNamespace(n_layers=1, n_kv_heads=1, head_dim=dim, vocab_size=vocab)
        self.embed = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, input_ids, cache=None, position_ids=None, attention_mask=None):
        x = self.embed(input_ids)
        keys = x[:, None]
        if cache is not None:
            keys, _ = cache.append(0, keys, keys)
            cache.advance(input_ids.shape[1])
        keys = keys[:, 0]
        total, new = keys.shape[1], x.shape[1]
        counts = torch.arange(total - new + 1, total + 1, dtype=x.dtype)[None, :, None]
        history = keys.cumsum(1)[:, total - new:] / counts
        return self.out(torch.tanh(3 * history + x)) * 4


def test_cached_beam_search_equals_recomputed():
    toy = CachedToy()
    recompute = lambda ids, cache=None, **kw: toy(ids)  # noqa: E731
    for num_beams in (2, 4):
        for eos in (None, [7, 11]):
            config = GenerationConfig(max_new_tokens=12, num_beams=num_beams,
                                      num_return_sequences=num_beams)
            cache = KVCache.for_model(toy, batch_size=1, max_tokens=3 + 12)
            with_cache = beam_search(toy, [1, 2, 3], config, eos, cache=cache)
            without = beam_search(recompute, [1, 2, 3], config, eos)
            assert [h.token_ids for h in with_cache] == [h.token_ids for h in without]
            assert [h.score for h in with_cache] == pytest.approx([h.score for h in without],
                                                                  abs=1e-5)


def test_beam_search_refuses_a_cache_that_is_not_empty_and_names_what_it_holds():
    toy = CachedToy()
    cache = KVCache.for_model(toy, batch_size=1, max_tokens=20)
    toy(torch.tensor([[1, 2]]), cache=cache)
    with pytest.raises(ValueError, match="an empty cache of one row; this one holds 2 tokens"):
        beam_search(toy, [1, 2, 3], GenerationConfig(num_beams=2, max_new_tokens=4), None,
                    cache=cache)


def test_beam_search_without_a_cache_says_once_that_it_recomputes(capsys, monkeypatch):
    from minillm.utils import notices
    monkeypatch.setattr(notices, "_SAID", set())
    toy = CachedToy()
    config = GenerationConfig(num_beams=2, max_new_tokens=3)
    for _ in range(2):
        beam_search(toy, [1, 2, 3], config, None)
    assert capsys.readouterr().err.count("no cache given") == 1


def test_hypotheses_are_sorted_and_counted():
    toy = CachedToy()
    config = GenerationConfig(max_new_tokens=6, num_beams=4, num_return_sequences=3,
                              length_penalty=0.0)
    hyps = beam_search(toy, [5, 6], config, None)
    assert len(hyps) == 3 and all(isinstance(h, Hypothesis) for h in hyps)
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    # length_penalty 0: the score is the plain sum of log-probabilities; recompute the best one
    tokens, total = [5, 6], 0.0
    for t in hyps[0].token_ids:
        total += torch.log_softmax(toy(torch.tensor([tokens]))[0, -1], -1)[t].item()
        tokens.append(t)
    assert hyps[0].score == pytest.approx(total, abs=1e-4)
    assert all(h.finish_reason == "length" and len(h.token_ids) == 6 for h in hyps)


def test_one_beam_is_greedy():
    toy = CachedToy()
    config = GenerationConfig(max_new_tokens=5, num_beams=1)
    tokens = [3]
    for _ in range(5):
        tokens.append(int(toy(torch.tensor([tokens]))[0, -1].argmax()))
    assert beam_search(toy, [3], config)[0].token_ids == tokens[1:]


def test_beam_search_refuses_bad_input():
    toy = CachedToy()
    with pytest.raises(ValueError, match="prompt"):
        beam_search(toy, [], GenerationConfig(num_beams=2), None)
