"""minillm's tokenizer against the real one (transformers, from the same GGUF file)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minillm
from minillm.tokenizer.samples import parity_strings


@pytest.fixture(scope="module")
def tok():
    return minillm.load_tokenizer("smollm2-135m")


@pytest.fixture(scope="module")
def ref(reference):
    return reference[1]


def test_parity_on_test_corpus(tok, ref):
    strings = parity_strings(chat_template=tok.apply_chat_template)
    assert len(strings) >= 300
    wrong = [(s, tok.encode(s), ref.encode(s)) for s in strings if tok.encode(s) != ref.encode(s)]
    assert not wrong, f"{len(wrong)} of {len(strings)} differ; first: {wrong[0]}"


def test_decode_parity_on_test_corpus(tok, ref):
    for s in parity_strings(seed=1):
        ids = ref.encode(s)
        assert tok.decode(ids) == ref.decode(ids)
        assert tok.decode(ids, skip_special_tokens=True) == ref.decode(ids, skip_special_tokens=True)


def test_special_ids_match_transformers(tok, ref):
    assert tok.vocab_size == len(ref) == 49152
    assert tok.bos_token_id == ref.bos_token_id == 1
    assert tok.eos_token_id == ref.eos_token_id == tok.special_tokens["<|im_end|>"] == 2
    assert tok.pad_token_id == ref.pad_token_id
    assert tok.eos_token_ids == (2, 0)
    added = {t.content: i for i, t in ref.added_tokens_decoder.items() if t.special}
    assert tok.special_tokens == added


def test_chat_template_matches_transformers(tok, ref):
    from minillm.tokenizer.samples import CONVERSATIONS

    for messages in CONVERSATIONS:
        for gen in (True, False):
            ours = tok.apply_chat_template(messages, add_generation_prompt=gen)
            assert ours == ref.apply_chat_template(messages, tokenize=False,
                                                   add_generation_prompt=gen)


def test_bytes_without_a_token_are_dropped_like_transformers(tok, ref):
    # SmolLM2's vocabulary has no token for 21 byte values, e.g. 0x04; both tokenizers drop them.
    assert len(tok.missing_bytes) == 21 and 0x04 in tok.missing_bytes
    for s in ["a\x04b", "\x04", "!\x04!", "x\x13\x14y", "\U00050000z"]:
        assert tok.encode(s) == ref.encode(s)
    assert tok.decode(tok.encode("a\x04b")) == "ab"


# SmolLM2's vocabulary lacks six control bytes, 0xc0/0xc1 and 0xf5-0xff (never in UTF-8), and
# 0xf1/0xf2, the lead bytes of U+40000-U+BFFFF: text without those characters survives a round trip.
LACKING = "\x04\x06\x13\x14\x16\x1d"
REPRESENTABLE = st.text(st.one_of(
    st.characters(codec="utf-8", max_codepoint=0x3FFFF, exclude_characters=LACKING),
    st.characters(codec="utf-8", min_codepoint=0xC0000)), max_size=40)


def test_the_bytes_smollm2_lacks(tok):
    assert tok.missing_bytes == bytes([0x04, 0x06, 0x13, 0x14, 0x16, 0x1d, 0xc0, 0xc1, 0xf1, 0xf2,
                                       *range(0xf5, 0x100)])


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(s=REPRESENTABLE)
def test_round_trip_any_representable_text(tok, s):
    assert tok.decode(tok.encode(s)) == s


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(s=st.text(st.characters(codec="utf-8"), max_size=30))
def test_parity_on_random_text(tok, ref, s):
    assert tok.encode(s) == ref.encode(s)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(ids=st.lists(st.integers(0, 49151), max_size=12))
def test_stream_decoder_matches_decode_on_random_ids(tok, ref, ids):
    stream = tok.stream_decoder()
    pieces = [stream.push(i) for i in ids]
    text = "".join(pieces) + stream.flush()
    assert text == tok.decode(ids) == ref.decode(ids)


def test_hf_folder_of_the_reference_gives_the_same_ids(tok, reference):
    """The reference's own folder (tokenizer.json, tokenizer_config.json) read by minillm."""
    from minillm.reference import reference_dir

    folder_tok = minillm.load_tokenizer(reference_dir())
    assert folder_tok.eos_token_id == 2 and folder_tok.eos_token_ids == (2, 0)
    assert folder_tok.bos_token_id == 1 and folder_tok.pad_token_id == 2
    assert folder_tok.chat_template == tok.chat_template
    for s in parity_strings(seed=2):
        assert folder_tok.encode(s) == tok.encode(s)


def test_parity_on_long_words(tok, ref):
    """Words longer than 64 bytes take the heap path; the ids must not change."""
    import random

    rng = random.Random(5)
    zh = "".join(ch for ch in "春眠不觉晓处处闻啼鸟夜来风雨声花落知多少你好世界")
    for alphabet, n in [("abcdefghijklmnopqrstuvwxyz", 3000), (zh, 800), ("ab", 500),
                        ("0123456789", 400), ("!?*-=", 300)]:
        s = "".join(rng.choice(alphabet) for _ in range(n))
        assert tok.encode(s) == ref.encode(s)
