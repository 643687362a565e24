"""The generation loop on small stand-in models that follow minillm's forward contract:
`model(input_ids, cache=None, position_ids=None, attention_mask=None) -> logits`, each layer
calling `cache.append(layer, k, v)` and the model `cache.advance(seq)` once.

- `TinyLM`: a two-layer attention model with random weights, to check that the cache, the
  padding and the positions give the same tokens as recomputing everything.
- `NextLetter`: a model whose logits are known (the next token is always `last + 1`), to pin the
  stop rules: EOS, max_new_tokens and stop strings.
"""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from minillm.generation.loop import Generation, generate, left_pad, positions, stream
from minillm.generation.kv_cache import KVCache
from minillm.generation.stopping import DiffDecoder, Sequence, TextTracker


class TinyLM(nn.Module):
    def __init__(self, vocab=40, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=96,
                 eos=(), seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.n_heads, self.n_kv, self.hd = n_heads, n_kv_heads, dim // n_heads
        self.config = SimpleNamespace(n_layers=n_layers, n_kv_heads=n_kv_heads, head_dim=self.hd,
                                      vocab_size=vocab, max_seq_len=max_seq_len,
                                      eos_token_ids=tuple(eos))
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_seq_len, dim)
        self.qkv = nn.ModuleList(nn.Linear(dim, (n_heads + 2 * n_kv_heads) * self.hd)
                                 for _ in range(n_layers))
        self.out = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_layers))
        self.head = nn.Linear(dim, vocab)
        self.calls = []  # (batch, seq) of every forward pass

    def forward(self, input_ids, cache=None, position_ids=None, attention_mask=None,
                logits_to_keep=0):
        b, t = input_ids.shape
        self.calls.append((b, t))
        past = cache.length if cache is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + t).expand(b, t)
        x = self.emb(input_ids) + self.pos(position_ids)
        keys = past + t
        allowed = torch.arange(keys)[None, :] <= past + torch.arange(t)[:, None]
        allowed = allowed[None, None].expand(b, 1, t, keys).clone()
        if attention_mask is not None:
            allowed &= attention_mask.bool()[:, None, None, :]
            allowed[:, :, torch.arange(t), past + torch.arange(t)] = True
        for layer in range(len(self.qkv)):
            q, k, v = self.qkv[layer](x).split([self.n_heads * self.hd, self.n_kv * self.hd,
                                                self.n_kv * self.hd], dim=-1)
            q = q.view(b, t, self.n_heads, self.hd).transpose(1, 2)
            k = k.view(b, t, self.n_kv, self.hd).transpose(1, 2)
            v = v.view(b, t, self.n_kv, self.hd).transpose(1, 2)
            if cache is not None:
                k, v = cache.append(layer, k, v)
            rep = self.n_heads // self.n_kv
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            att = (q @ k.transpose(-1, -2)) / self.hd ** 0.5
            att = att.masked_fill(~allowed, float("-inf")).softmax(-1)
            x = x + self.out[layer]((att @ v).transpose(1, 2).reshape(b, t, -1))
        if cache is not None:
            cache.advance(t)
        return self.head(x[:, -logits_to_keep:]) * 3  # -0: keeps every position


class Letters:
    """A tokenizer for the stand-ins: id n is the letter chr(ord('a') + n - 2); 0 is pad, 1 EOS."""

    eos_token_ids = [1]
    pad_token_id = 0

    def encode(self, text):
        return [ord(c) - ord("a") + 2 for c in text]

    def decode(self, ids):
        return "".join(chr(ord("a") + i - 2) for i in ids if i >= 2)


class NextLetter(nn.Module):
    """Known logits: after letter n comes letter n + 1; after 'z' comes EOS."""

    def __init__(self, max_seq_len=64):
        super().__init__()
        self.config = SimpleNamespace(n_layers=1, n_kv_heads=1, head_dim=1, vocab_size=28,
                                      max_seq_len=max_seq_len, eos_token_ids=(1,))
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, input_ids, cache=None, position_ids=None, attention_mask=None,
                logits_to_keep=0):
        following = torch.where(input_ids >= 27, 1, input_ids + 1)[:, -logits_to_keep:]
        if cache is not None:
            b, t = input_ids.shape
            cache.append(0, torch.zeros(b, 1, t, 1), torch.zeros(b, 1, t, 1))
            cache.advance(t)
        return nn.functional.one_hot(following, 28).float() * self.scale


PROMPTS = [[5, 9, 2], [7], [3, 3, 8, 1, 12, 30, 4], [11, 22], [6, 6, 6, 6, 6]]


@pytest.fixture
def tiny():
    return TinyLM()


# --- cache, padding, positions ---------------------------------------------------------------------

def test_cache_equals_recompute_on_a_random_model(tiny):
    for prompt in PROMPTS:
        with_cache = generate(tiny, Letters(), prompt, max_new_tokens=20, ignore_eos=True)
        without = generate(tiny, Letters(), prompt, max_new_tokens=20, use_cache=False,
                           ignore_eos=True)
        assert with_cache.token_ids == without.token_ids
        assert len(with_cache.token_ids) == 20


def test_decode_feeds_one_token_per_step(tiny):
    generate(tiny, Letters(), [5, 9, 2], max_new_tokens=6, ignore_eos=True)
    assert tiny.calls == [(1, 3)] + [(1, 1)] * 5  # prefill, then 5 decode steps
    tiny.calls.clear()
    generate(tiny, Letters(), [5, 9, 2], max_new_tokens=6, ignore_eos=True, use_cache=False)
    assert tiny.calls == [(1, n) for n in range(3, 9)]  # the whole sequence, every step


def test_batch_of_different_lengths_equals_each_alone(tiny):
    alone = [generate(tiny, Letters(), p, max_new_tokens=16, ignore_eos=True).token_ids
             for p in PROMPTS]
    for use_cache in (True, False):
        batch = generate(tiny, Letters(), PROMPTS, max_new_tokens=16, ignore_eos=True,
                         use_cache=use_cache)
        assert [r.token_ids for r in batch] == alone
        assert [r.prompt_token_ids for r in batch] == PROMPTS


def test_left_padding_and_positions():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions(mask).tolist() == [[0, 1, 2], [0, 0, 0]]
    grown = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1)
    assert positions(grown)[:, -1].tolist() == [3, 1]


def test_a_finished_row_does_not_change_the_others():
    # "y" ends after one letter (z, then EOS); "b" runs to the length limit.
    out = generate(NextLetter(), Letters(), ["y", "b"], max_new_tokens=5)
    assert [r.finish_reason for r in out] == ["eos", "length"]
    assert [r.text for r in out] == ["z", "cdefg"]
    assert out[0].token_ids == [27, 1]


# --- stop rules (known logits) ---------------------------------------------------------------------

def test_stops_at_eos_and_keeps_it_in_token_ids_only():
    out = generate(NextLetter(), Letters(), "w", max_new_tokens=10)
    assert (out.text, out.token_ids, out.finish_reason) == ("xyz", [25, 26, 27, 1], "eos")
    assert isinstance(out, Generation) and out.prompt_token_ids == [24]


def test_stops_at_max_new_tokens():
    out = generate(NextLetter(), Letters(), "a", max_new_tokens=4)
    assert (out.text, out.finish_reason, len(out.token_ids)) == ("bcde", "length", 4)


def test_eos_on_the_last_allowed_token_counts_as_eos():
    out = generate(NextLetter(), Letters(), "x", max_new_tokens=3)
    assert (out.text, out.finish_reason) == ("yz", "eos")


def test_any_of_several_eos_ids_stops():
    out = generate(NextLetter(), Letters(), "a", max_new_tokens=10, eos_token_id=[30, 5])
    assert (out.text, out.token_ids[-1], out.finish_reason) == ("bc", 5, "eos")


def test_stop_string_cuts_the_text_before_it():
    out = generate(NextLetter(), Letters(), "a", max_new_tokens=10, stop=["ef"])
    assert (out.text, out.finish_reason) == ("bcd", "stop")
    assert out.token_ids == [3, 4, 5, 6, 7]  # generated up to the token that completed "ef"


def test_the_first_stop_string_in_the_text_wins():
    out = generate(NextLetter(), Letters(), "a", max_new_tokens=10, stop=["fgh", "de"])
    assert (out.text, out.finish_reason) == ("bc", "stop")


def test_stop_string_on_the_last_token_is_stop_not_length():
    out = generate(NextLetter(), Letters(), "a", max_new_tokens=3, stop="cd")
    assert (out.text, out.finish_reason) == ("b", "stop")


def test_stop_string_in_the_prompt_does_not_stop():
    out = generate(NextLetter(), Letters(), "ab", max_new_tokens=3, stop="ab")
    assert (out.text, out.finish_reason) == ("cde", "length")


# --- streaming ------------------------------------------------------------------------------------

def test_stream_pieces_join_to_the_generated_text():
    for kwargs in [dict(max_new_tokens=5), dict(max_new_tokens=30), dict(max_new_tokens=20, stop=["fg", "x"])]:
        pieces = list(stream(NextLetter(), Letters(), "a", **kwargs))
        assert "".join(pieces) == generate(NextLetter(), Letters(), "a", **kwargs).text
        assert all(pieces)


def test_stream_holds_back_only_a_possible_stop_string_start():
    pieces = list(stream(NextLetter(), Letters(), "a", max_new_tokens=8, stop=["dex", "g"]))
    assert pieces == ["b", "c", "def"]  # "d" and "de" waited: they might have become "dex"


def test_stream_uses_the_tokenizers_stream_decoder():
    class Counting(Letters):
        made = 0

        def stream_decoder(self):
            Counting.made += 1
            return DiffDecoder(self)

    assert "".join(stream(NextLetter(), Counting(), "a", max_new_tokens=3)) == "bcd"
    assert Counting.made == 1


def test_diff_decoder_never_splits_a_utf8_character():
    class Bytes:
        def decode(self, ids):
            return bytes(ids).decode("utf-8", errors="replace")

    decoder = DiffDecoder(Bytes())
    pieces = [decoder.push(b) for b in "a你b".encode()] + [decoder.flush()]
    assert pieces == ["a", "", "", "你", "b", ""]


def test_text_tracker_finds_a_stop_string_split_across_pieces():
    tracker = TextTracker(("<end>",))
    shown = [tracker.push(p) for p in ["Hello <", "en", "d> more"]]
    assert shown == ["Hello ", "", ""] and tracker.stopped and tracker.text == "Hello "


def test_sequence_refuses_tokens_after_it_finished():
    s = Sequence([2], Letters(), [1], max_new_tokens=1)
    s.add(3)
    with pytest.raises(RuntimeError):
        s.add(4)


# --- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, error", [(-1, ValueError), (0, ValueError), (2.5, TypeError),
                                          ("8", TypeError), (True, TypeError)])
def test_bad_max_new_tokens(value, error):
    with pytest.raises(error, match="max_new_tokens"):
        generate(NextLetter(), Letters(), "a", max_new_tokens=value)


def test_prompt_longer_than_the_context_window():
    with pytest.raises(ValueError, match=r"10 tokens.*max_new_tokens=60.*context window of 64"):
        generate(NextLetter(max_seq_len=64), Letters(), "abcdefghij", max_new_tokens=60)
    with pytest.raises(ValueError, match="prompt 1 .* in the batch has 10 tokens"):
        generate(NextLetter(max_seq_len=64), Letters(), ["a", "abcdefghij"], max_new_tokens=60)
    exactly_full = generate(TinyLM(max_seq_len=64), Letters(), [3, 4, 5, 6], max_new_tokens=60,
                            ignore_eos=True)
    assert len(exactly_full.token_ids) == 60


@pytest.mark.parametrize("prompt, where", [("", "the prompt is empty"), ([], "prompt is empty"),
                                           (["ab", ""], "prompt 1 .* is empty"),
                                           ([[4], [5], []], "prompt 2 .* is empty")])
def test_empty_prompt(prompt, where):
    with pytest.raises(ValueError, match=where):
        generate(NextLetter(), Letters(), prompt, max_new_tokens=3)


def test_bad_prompt_types_and_ids():
    with pytest.raises(TypeError, match="prompt must be"):
        generate(NextLetter(), Letters(), 42, max_new_tokens=3)
    with pytest.raises(TypeError, match="prompt 1 .* must be a string or a list of int"):
        generate(NextLetter(), Letters(), ["ab", [2.0]], max_new_tokens=3)
    with pytest.raises(ValueError, match="token id 28, outside the vocabulary"):
        generate(NextLetter(), Letters(), [3, 28], max_new_tokens=3)


def test_unknown_option_is_refused():
    with pytest.raises(TypeError, match="max_tokens"):
        generate(NextLetter(), Letters(), "a", max_tokens=3)


def test_stream_refuses_a_batch():
    with pytest.raises(ValueError, match="one prompt"):
        stream(NextLetter(), Letters(), ["a", "b"], max_new_tokens=3)


# --- the cache itself -----------------------------------------------------------------------------

def test_cache_bytes_match_the_formula(tiny):
    cache = KVCache.for_model(tiny, batch_size=1, max_tokens=50)
    tiny(torch.tensor([[1, 2, 3, 4, 5]]), cache=cache)
    c = tiny.config
    assert cache.length == 5
    assert cache.nbytes == 2 * c.n_layers * c.n_kv_heads * c.head_dim * 5 * 4


# --- the chapter 04 seam --------------------------------------------------------------------------

def test_sampling_goes_through_the_decoding_seam_and_is_seeded(tiny):
    runs = [generate(tiny, Letters(), [5, 9, 2], max_new_tokens=12, ignore_eos=True,
                     do_sample=True, temperature=1.5, seed=seed).token_ids for seed in (3, 3, 4)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    greedy = generate(tiny, Letters(), [5, 9, 2], max_new_tokens=12, ignore_eos=True)
    assert greedy.token_ids != runs[0]


def test_processors_apply_to_each_step(tiny):
    plain = generate(tiny, Letters(), [5, 9, 2], max_new_tokens=1, ignore_eos=True)
    banned = generate(tiny, Letters(), [5, 9, 2], max_new_tokens=1, ignore_eos=True,
                      bad_words_ids=[[plain.token_ids[0]]])
    assert banned.token_ids != plain.token_ids


def test_beam_search_returns_scored_sequences(tiny):
    out = generate(tiny, Letters(), [5, 9, 2], max_new_tokens=6, ignore_eos=True,
                   num_beams=3, num_return_sequences=2)
    assert len(out.sequences) == 2 and out.sequences[0] is out
    assert out.sequences[0].score >= out.sequences[1].score
    assert all(len(s.token_ids) == 6 and s.finish_reason == "length" for s in out.sequences)
