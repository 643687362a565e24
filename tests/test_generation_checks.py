"""The chapter 03 exercise checkers: a right answer passes, and typical wrong answers fail with a
message that says what is wrong. The decode-loop checker runs on the small stand-in model."""

import pytest
import torch

from minillm.checks import ch03_kv_cache as checks
from minillm.checks._base import CheckFailed
from minillm.kv_cache import KVCache

from test_generation import TinyLM


def right_bytes(n_layers, n_kv_heads, head_dim, tokens, bytes_per_value):
    return 2 * n_layers * n_kv_heads * head_dim * tokens * bytes_per_value


def right_append(keys, values, k, v, length):
    end = length + k.shape[2]
    if end > keys.shape[2]:
        raise ValueError("full")
    keys[:, :, length:end] = k
    values[:, :, length:end] = v
    return keys[:, :, :end], values[:, :, :end]


def right_decode(model, prompt_ids, max_new_tokens, eos_token_ids):
    cache = KVCache.for_model(model, 1, len(prompt_ids) + max_new_tokens)
    new = []
    with torch.inference_mode():
        logits = model(torch.tensor([prompt_ids]), cache=cache)
        while True:
            new.append(int(logits[0, -1].argmax()))
            if new[-1] in eos_token_ids or len(new) == max_new_tokens:
                return new
            logits = model(torch.tensor([[new[-1]]]), cache=cache)


class Chars:
    """Tokenizer stand-in for TinyLM: one id per character, modulo its vocabulary."""

    eos_token_ids, pad_token_id = [], 0

    def encode(self, text):
        return [ord(ch) % 40 for ch in text]

    def decode(self, ids):
        return "".join(chr(65 + i) for i in ids)


def stub(*args):
    raise NotImplementedError


def test_right_answers_pass(capsys):
    checks.check_kv_cache_bytes(right_bytes)
    checks.check_append_kv(right_append)
    checks.check_greedy_decode(right_decode, TinyLM(), Chars())
    assert capsys.readouterr().out.count("✅") == 3


@pytest.mark.parametrize("check", [checks.check_kv_cache_bytes, checks.check_append_kv,
                                   lambda fn: checks.check_greedy_decode(fn, TinyLM(), Chars())])
def test_stubs_fail_with_a_plain_message(check):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(stub)


def test_forgetting_the_values_is_named():
    with pytest.raises(CheckFailed, match="keys AND values"):
        checks.check_kv_cache_bytes(lambda l, h, d, t, b: l * h * d * t * b)


def test_a_copy_instead_of_an_in_place_write_is_named():
    def copies(keys, values, k, v, length):
        keys = torch.cat([keys[:, :, :length], k], 2)
        values = torch.cat([values[:, :, :length], v], 2)
        return keys, values

    with pytest.raises(CheckFailed, match="in place"):
        checks.check_append_kv(copies)


def test_no_error_when_full_is_named():
    def never_full(keys, values, k, v, length):
        end = length + k.shape[2]
        keys[:, :, length:end] = k[:, :, :keys.shape[2] - length]
        values[:, :, length:end] = v[:, :, :keys.shape[2] - length]
        return keys[:, :, :end], values[:, :, :end]

    with pytest.raises(CheckFailed, match="cache is full"):
        checks.check_append_kv(never_full)


def test_recomputing_the_whole_sequence_is_named():
    def no_cache(model, prompt_ids, max_new_tokens, eos_token_ids):
        ids = list(prompt_ids)
        cache = KVCache.for_model(model, 1, 4 * (len(prompt_ids) + max_new_tokens))
        with torch.inference_mode():
            for _ in range(max_new_tokens):
                cache.reset()
                ids.append(int(model(torch.tensor([ids]), cache=cache)[0, -1].argmax()))
        return ids[len(prompt_ids):]

    with pytest.raises(CheckFailed, match="feed only the newest token"):
        checks.check_greedy_decode(no_cache, TinyLM(), Chars())


def test_returning_the_prompt_too_is_named():
    def with_prompt(model, prompt_ids, max_new_tokens, eos_token_ids):
        return list(prompt_ids) + right_decode(model, prompt_ids, max_new_tokens, eos_token_ids)

    with pytest.raises(CheckFailed, match="only the new tokens|returned .* tokens"):
        checks.check_greedy_decode(with_prompt, TinyLM(), Chars())


def test_not_stopping_at_eos_is_named():
    def ignores_eos(model, prompt_ids, max_new_tokens, eos_token_ids):
        return right_decode(model, prompt_ids, max_new_tokens, [])

    with pytest.raises(CheckFailed, match="stop right after the first EOS"):
        checks.check_greedy_decode(ignores_eos, TinyLM(), Chars())
