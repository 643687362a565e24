"""minillm's tokenizer on its own: BPE rules, training, saving, streaming, chat, bad input."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minillm
from minillm.tokenizer import (CHATML_TEMPLATE, GPT2_PATTERN, PreTokenizer,
                               chatml, encode_with_merges, learn_merges, merge_pair, pair_counts,
                               train, train_simple)
from minillm.tokenizer.bytes_unicode import bytes_to_token, bytes_to_unicode, token_to_bytes
from minillm.tokenizer.samples import corpus, parity_strings


@pytest.fixture(scope="module")
def small():
    """A tokenizer trained on 60 KB of the corpus (300 merges)."""
    text = corpus("english")[:40_000] + corpus("simplified Chinese")[:20_000]
    return train(text, 256 + 300 + 3)


@pytest.fixture(scope="module")
def smol():
    return minillm.load_tokenizer("smollm2-135m")


# --- the three BPE operations ---------------------------------------------------------------

def test_pair_counts():
    assert pair_counts([1, 2, 3, 1, 2]) == {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    assert pair_counts([7]) == {} and pair_counts([]) == {}
    assert pair_counts([1, 1, 1]) == {(1, 1): 2}  # overlapping occurrences all count


def test_merge_pair_is_left_to_right_without_overlap():
    assert merge_pair([1, 2, 3, 1, 2], (1, 2), 9) == [9, 3, 9]
    assert merge_pair([5, 5, 5], (5, 5), 9) == [9, 5]
    assert merge_pair([5, 5, 5, 5], (5, 5), 9) == [9, 9]
    assert merge_pair([1, 2], (2, 1), 9) == [1, 2]


def test_encode_with_merges_applies_earliest_merge_first():
    # merges[0] = (a, a) -> 256; merges[1] = (256, b) -> 257
    assert encode_with_merges("aaab", [(97, 97), (256, 98)]) == [256, 97, 98]
    assert encode_with_merges("aab", [(97, 97), (256, 98)]) == [257]
    # with (a, b) learned first, "aab" becomes a + ab and (a, a) never applies
    assert encode_with_merges("aab", [(97, 98), (97, 97)]) == [97, 256]
    assert encode_with_merges("", [(97, 98)]) == []


# --- training -------------------------------------------------------------------------------

def test_tie_breaking_rule_smallest_pair_wins():
    # "ab" and " cd" occur once each: (a,b), ( ,c), (c,d) all count 1; ( ,c) = (32, 99) is smallest.
    assert learn_merges("ab cd", 257, special_tokens=()) == [(32, 99)]
    assert train_simple("ab cd", 257, special_tokens=()) == [(32, 99)]
    # a count beats any tie-break: (b, c) occurs twice
    assert learn_merges("abc bc", 257, special_tokens=())[0] == (98, 99)


def test_fast_training_gives_the_same_merges_as_the_plain_rule():
    text = corpus("english")[:5000] + corpus("traditional Chinese")[:2000]
    assert learn_merges(text, 256 + 80) == train_simple(text, 256 + 80)


def test_trained_ids_follow_the_documented_layout(small):
    assert small.vocab_size == 256 + 300 + 3
    assert [small.token_bytes(i) for i in range(256)] == [bytes([b]) for b in range(256)]
    for k, (a, b) in enumerate(small.merges[:50]):
        assert small.token_bytes(256 + k) == small.token_bytes(a) + small.token_bytes(b)
    assert small.special_tokens == {"<|endoftext|>": 556, "<|im_start|>": 557, "<|im_end|>": 558}
    assert small.eos_token_id == 558 and small.eos_token_ids == (558, 556)


def test_trained_tokenizer_encodes_word_by_word_with_its_merges(small):
    pre = PreTokenizer()
    for text in ["the king is dead", "Hamlet, thou art", "你好，世界！", "  spaced  out\n"]:
        want = [i for word in pre(text) for i in encode_with_merges(word, small.merges)]
        assert small.encode(text) == want


def test_training_never_learns_across_special_tokens():
    tok = train("ab<|endoftext|>ab<|endoftext|>ab", 256 + 1 + 3)
    assert tok.merges == [(97, 98)]
    with pytest.raises(ValueError, match="too small"):
        train("abc", 100)
    with pytest.raises(TypeError, match="str"):
        train(b"abc", 300)
    with pytest.raises(ValueError, match="repeat"):
        train("abc", 300, special_tokens=["<a>", "<a>"])


@settings(max_examples=1000, deadline=None)
@given(s=st.text(st.characters(codec="utf-8"), max_size=40))
def test_round_trip_any_unicode_text_with_a_full_byte_vocabulary(small, s):
    assert small.decode(small.encode(s)) == s


# --- the pre-tokenizer and the byte alphabet ------------------------------------------------

def test_byte_alphabet():
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table["a".encode()[0]] == "a"
    assert token_to_bytes("Ġhello") == b" hello"
    assert bytes_to_token("你".encode()) == "ä½ł"
    with pytest.raises(ValueError, match="byte-level alphabet"):
        token_to_bytes("a b")


def test_gpt2_split_rules():
    pre = PreTokenizer()
    assert pre("Hello world") == ["Hello", " world"]
    assert pre("I'm here") == ["I", "'m", " here"]
    assert pre("a   b") == ["a", "  ", " b"]  # the last space of a run joins the next word
    assert pre("x\n\n") == ["x", "\n\n"]
    assert pre("abc123!?") == ["abc", "123", "!?"]
    assert pre("你好，世界！") == ["你好", "，", "世界", "！"]


def test_fast_pattern_splits_like_gpt2s_pattern():
    import regex

    plain = regex.compile(GPT2_PATTERN)
    pre = PreTokenizer()
    for s in parity_strings():
        assert pre(s) == plain.findall(s)


# --- decoding, streaming --------------------------------------------------------------------

def test_stream_decoder_holds_back_a_split_character(smol):
    ids = smol.encode("你好，世界！")
    assert len(ids) == 12  # six characters, twelve tokens: some characters take two tokens
    stream = smol.stream_decoder()
    pieces = [stream.push(i) for i in ids]
    assert "".join(pieces) + stream.flush() == "你好，世界！"
    assert "" in pieces  # a token that ends inside a character emits nothing ...
    assert all("\ufffd" not in p for p in pieces)  # ... and no broken character ever comes out
    # each character comes out once, whole, with the token that completes it
    assert pieces == ["", "你", "", "好", "，", "", "世", "", "", "界", "", "！"]


def test_stream_decoder_flushes_an_unfinished_character(smol):
    ids = smol.encode("你")
    stream = smol.stream_decoder()
    assert [stream.push(i) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert stream.flush() == smol.decode(ids[:-1]) == "\ufffd"


def test_stream_decoder_skips_special_tokens_when_asked(smol):
    stream = smol.stream_decoder(skip_special_tokens=True)
    ids = smol.encode("<|im_start|>Hi<|im_end|>")
    assert "".join(stream.push(i) for i in ids) + stream.flush() == "Hi"


def test_tokens_view(smol):
    assert smol.tokens("Hello world") == ["Hello", " world"]
    assert smol.id_to_token(smol.encode(" world")[0]) == "Ġworld"


# --- chat -----------------------------------------------------------------------------------

def test_chat_template_of_smollm2(smol):
    messages = [{"role": "user", "content": "Hi"}]
    want = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert smol.apply_chat_template(messages) == want
    from minillm.tokenizer.chat import SMOLLM_SYSTEM

    assert chatml(messages, default_system=SMOLLM_SYSTEM) == want
    assert smol.apply_chat_template(messages, add_generation_prompt=False) == want[:-len(
        "<|im_start|>assistant\n")]
    ids = smol.encode(want)
    assert ids[0] == smol.special_tokens["<|im_start|>"] and ids.count(smol.eos_token_id) == 2


def test_trained_tokenizer_has_chatml(small):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert small.chat_template == CHATML_TEMPLATE
    assert small.apply_chat_template(messages) == chatml(messages)


@pytest.mark.parametrize("messages, error, match", [
    ("hi", TypeError, "list of dicts"),
    ([("user", "hi")], TypeError, "dict"),
    ([{"role": "user"}], ValueError, "'content'"),
    ([{"role": "user", "content": 3}], TypeError, "must be a str"),
])
def test_chat_template_bad_messages(smol, messages, error, match):
    with pytest.raises(error, match=match):
        smol.apply_chat_template(messages)


# --- saving and loading ---------------------------------------------------------------------

def test_save_and_load_round_trip(small, tmp_path):
    path = small.save(tmp_path / "tok.json")
    again = minillm.load_tokenizer(path)
    assert again.to_dict() == small.to_dict()
    small.save(tmp_path)
    from_folder = minillm.load_tokenizer(tmp_path)
    for s in parity_strings()[:80]:
        assert again.encode(s) == small.encode(s) == from_folder.encode(s)


def test_load_hf_folder_byte_level_bpe(tmp_path):
    """A GPT-2 style tokenizer.json (trained with the Rust library) gives the same ids."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    rust = RustTokenizer(models.BPE())
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<|endoftext|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    rust.train_from_iterator([corpus("english")[:30_000], corpus("simplified Chinese")[:9_000]],
                             trainer)
    rust.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "chat_template": CHATML_TEMPLATE}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 0]}))
    ours = minillm.load_tokenizer(tmp_path)
    assert ours.vocab_size == rust.get_vocab_size()
    assert ours.eos_token_id == 1 and ours.eos_token_ids == (1, 0)
    for s in parity_strings():
        assert ours.encode(s) == rust.encode(s).ids, s
        assert ours.decode(rust.encode(s).ids) == rust.decode(rust.encode(s).ids,
                                                              skip_special_tokens=False)


def test_load_hf_folder_qwen2_style(tmp_path):
    """A Qwen2 style pre-tokenizer (regex Split + ByteLevel without regex) and NFC."""
    from tokenizers import Regex
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    from minillm.tokenizer import QWEN2_PATTERN

    rust = RustTokenizer(models.BPE())
    rust.normalizer = normalizers.NFC()
    rust.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    rust.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    rust.train_from_iterator([corpus("english")[:20_000], corpus("traditional Chinese")[:6_000]],
                             trainer)
    rust.save(str(tmp_path / "tokenizer.json"))
    ours = minillm.load_tokenizer(tmp_path)
    assert ours.eos_token_id is None and ours.eos_token_ids == (0,)
    for s in parity_strings() + ["e\u0301 composed by NFC", "123456 digits one by one"]:
        assert ours.encode(s) == rust.encode(s).ids, s


# --- bad input ------------------------------------------------------------------------------

def test_bad_input_gets_clear_errors(smol, tmp_path):
    with pytest.raises(TypeError, match="takes a str"):
        smol.encode(b"bytes")
    with pytest.raises(TypeError, match="takes a str"):
        smol.encode(None)
    with pytest.raises(ValueError, match=r"token id 49152 is outside the vocabulary.*49152"):
        smol.decode([1, 49152])
    with pytest.raises(ValueError, match="token id -1"):
        smol.decode([-1])
    with pytest.raises(TypeError, match="integers"):
        smol.decode([1.5])
    with pytest.raises(TypeError, match="list of token ids"):
        smol.decode("abc")
    with pytest.raises(ValueError, match="token id 50000"):
        smol.stream_decoder().push(50000)
    with pytest.raises(ValueError, match=r"unknown special token '<\|nope\|>'.*<\|im_end\|>"):
        smol.special_token_id("<|nope|>")
    assert smol.special_token_id("<|im_end|>") == 2
    with pytest.raises(ValueError, match="lone surrogate"):
        smol.encode("a\ud800b")


def test_load_tokenizer_bad_sources(tmp_path):
    with pytest.raises(ValueError, match="unknown model name"):
        minillm.load_tokenizer("no-such-model")
    with pytest.raises(TypeError, match="model name or a path"):
        minillm.load_tokenizer(42)
    with pytest.raises(FileNotFoundError):
        minillm.load_tokenizer(str(tmp_path / "missing" / "x.gguf"))
    with pytest.raises(ValueError, match="neither"):
        minillm.load_tokenizer(tmp_path)
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(ValueError, match="cannot read a tokenizer"):
        minillm.load_tokenizer(tmp_path / "x.txt")


def _write_gguf(path, **tokenizer_keys):
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in tokenizer_keys.items():
        if isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    writer.add_tensor("w", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_gguf_without_tokenizer_metadata(tmp_path):
    path = tmp_path / "bare.gguf"
    _write_gguf(path)
    with pytest.raises(ValueError, match="no tokenizer metadata"):
        minillm.load_tokenizer(path)
    sentencepiece = tmp_path / "sp.gguf"
    _write_gguf(sentencepiece, **{"tokenizer.ggml.model": "llama",
                                  "tokenizer.ggml.tokens": ["<unk>", "a"]})
    with pytest.raises(ValueError, match="'llama' tokenizer"):
        minillm.load_tokenizer(sentencepiece)
    (tmp_path / "fake.gguf").write_bytes(b"NOPE" + bytes(20))
    with pytest.raises(ValueError, match="not a GGUF file"):
        minillm.load_tokenizer(tmp_path / "fake.gguf")


def test_gguf_metadata_reader_agrees_with_gguf_package(tmp_path):
    import gguf

    from minillm.tokenizer import read_gguf_metadata

    path = tmp_path / "t.gguf"
    tokens = [bytes_to_unicode()[b] for b in range(256)] + ["Ġt", "<|im_end|>"]
    _write_gguf(path, **{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens,
                         "tokenizer.ggml.merges": ["Ġ t"],
                         "tokenizer.ggml.token_type": [1] * 257 + [3]})
    ours = read_gguf_metadata(path)
    theirs = gguf.GGUFReader(str(path)).fields
    for key in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"]:
        assert ours[key] == list(theirs[key].contents())
    tok = minillm.load_tokenizer(path)
    assert tok.encode(" t<|im_end|>") == [256, 257] and tok.special_tokens == {"<|im_end|>": 257}


@settings(max_examples=60, deadline=None)
@given(text=st.text("aab b\nc", max_size=120), extra=st.integers(1, 30))
def test_fast_training_equals_the_plain_rule_on_tie_heavy_text(text, extra):
    """Small alphabets make many equal counts: the heap must break ties exactly as the rule."""
    assert learn_merges(text, 256 + extra, special_tokens=()) == \
        train_simple(text, 256 + extra, special_tokens=())


@settings(max_examples=200, deadline=None)
@given(s=st.text(st.sampled_from("aab  c你好世界!\n"), min_size=0, max_size=300))
def test_long_word_heap_bpe_equals_the_plain_loop(smol, small, s):
    """Long words use a heap; it must merge exactly like the loop (lowest rank, then leftmost)."""
    from minillm.tokenizer.bpe import bpe_word_heap

    for tok in (smol, small):
        ids = [tok._byte_ids[b] for b in s.encode("utf-8").translate(None, tok.missing_bytes)]
        if not ids:
            continue
        want = ids
        while len(want) > 1:  # the plain loop, without the switch to the heap
            ranked = [tok._ranks[p] for p in zip(want, want[1:]) if p in tok._ranks]
            if not ranked:
                break
            first, second, new_id = tok._table[min(ranked)]
            want = merge_pair(want, (first, second), new_id)
        assert bpe_word_heap(ids, tok._ranks, tok._table) == want


def test_a_very_long_word_round_trips(smol):
    import random

    rng = random.Random(0)
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(30_000))
    assert smol.decode(smol.encode(word)) == word
