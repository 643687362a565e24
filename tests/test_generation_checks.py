"""The chapter 03 exercise checkers: a right answer passes, and typical wrong answers fail with a
message that says what is wrong (and only they get it). The decode-loop checker runs on the small
stand-in model."""

import math

import numpy as np
import pytest
import torch

from minillm.course.checks import ch03_kv_cache as checks
from minillm.course.checks._base import CheckFailed
from minillm.generation.kv_cache import KVCache

from test_generation import TinyLM
from memorizing import assert_hidden_cases_catch_memorizing
from test_tokenizer_checks import assert_hints_are_specific


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


def check_decode(fn):
    checks.check_greedy_decode(fn, TinyLM(), Chars())


def test_right_answers_pass(capsys):
    checks.check_kv_cache_bytes(right_bytes)
    checks.check_append_kv(right_append)
    check_decode(right_decode)
    assert capsys.readouterr().out.count("✅") == 3


@pytest.mark.parametrize("check", [checks.check_kv_cache_bytes, checks.check_append_kv,
                                   check_decode])
def test_stubs_fail_with_a_plain_message(check, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(unwritten)


@pytest.mark.parametrize("kind", [np.int64, float, lambda n: torch.tensor(n)])
def test_any_whole_number_type_is_accepted(kind, capsys):
    checks.check_kv_cache_bytes(lambda *a: kind(right_bytes(*a)))
    assert "✅" in capsys.readouterr().out


def test_kv_cache_bytes_hints_are_specific():
    assert_hints_are_specific(checks.check_kv_cache_bytes, {
        "no factor 2": (lambda l, h, d, t, b: l * h * d * t * b, "keys AND values"),
        "no layers": (lambda l, h, d, t, b: 2 * h * d * t * b, "multiply by n_layers"),
        "values not bytes": (lambda l, h, d, t, b: 2 * l * h * d * t, "counts values, not bytes"),
        "bits": (lambda l, h, d, t, b: 16 * l * h * d * t * b, "do not multiply by 8"),
    })


def test_a_fraction_of_a_byte_is_named():
    with pytest.raises(CheckFailed, match="whole number"):
        checks.check_kv_cache_bytes(lambda *a: right_bytes(*a) / 3)


def test_a_copy_instead_of_an_in_place_write_is_named():
    def copies(keys, values, k, v, length):
        keys = torch.cat([keys[:, :, :length], k], 2)
        values = torch.cat([values[:, :, :length], v], 2)
        return keys, values

    with pytest.raises(CheckFailed, match="in place"):
        checks.check_append_kv(copies)


def test_append_kv_returning_lists_gets_a_message_not_a_crash():
    def lists(keys, values, k, v, length):
        keys_so_far, values_so_far = right_append(keys, values, k, v, length)
        return keys_so_far.tolist(), values_so_far.tolist()

    with pytest.raises(CheckFailed, match="not lists"):
        checks.check_append_kv(lists)
    with pytest.raises(CheckFailed, match="return a tuple"):
        checks.check_append_kv(lambda *a: list(right_append(*a)))


def test_append_kv_shape_mistakes_are_named():
    def whole_buffer(keys, values, k, v, length):
        right_append(keys, values, k, v, length)
        return keys, values

    def only_new(keys, values, k, v, length):
        right_append(keys, values, k, v, length)
        return k, v

    with pytest.raises(CheckFailed, match="the whole buffer"):
        checks.check_append_kv(whole_buffer)
    with pytest.raises(CheckFailed, match="only the new tokens"):
        checks.check_append_kv(only_new)


def test_append_kv_at_the_wrong_position_is_named():
    def at_zero(keys, values, k, v, length):
        right_append(keys, values, k, v, 0)
        return keys[:, :, :length + k.shape[2]], values[:, :, :length + k.shape[2]]

    with pytest.raises(CheckFailed, match="belong to earlier tokens"):
        checks.check_append_kv(at_zero)


def test_append_kv_that_changes_the_new_keys_is_named():
    def scales_k(keys, values, k, v, length):
        k.mul_(2.0)
        return right_append(keys, values, k, v, length)

    with pytest.raises(CheckFailed, match="changed its argument `k`"):
        checks.check_append_kv(scales_k)


def test_no_error_when_full_is_named():
    def never_full(keys, values, k, v, length):
        end = length + k.shape[2]
        keys[:, :, length:end] = k[:, :, :keys.shape[2] - length]
        values[:, :, length:end] = v[:, :, :keys.shape[2] - length]
        return keys[:, :, :end], values[:, :, :end]

    with pytest.raises(CheckFailed, match="the cache is full: raise ValueError"):
        checks.check_append_kv(never_full)


def test_the_wrong_error_when_full_is_named():
    def index_error(keys, values, k, v, length):
        if length + k.shape[2] > keys.shape[2]:
            raise IndexError("out of range")
        return right_append(keys, values, k, v, length)

    with pytest.raises(CheckFailed, match="raised IndexError.*raise ValueError"):
        checks.check_append_kv(index_error)


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
        check_decode(no_cache)


def test_returning_the_prompt_too_is_named():
    def with_prompt(model, prompt_ids, max_new_tokens, eos_token_ids):
        return list(prompt_ids) + right_decode(model, prompt_ids, max_new_tokens, eos_token_ids)

    with pytest.raises(CheckFailed, match="return only the new tokens"):
        check_decode(with_prompt)


def test_a_fixed_number_of_steps_is_caught():
    def always_12(model, prompt_ids, max_new_tokens, eos_token_ids):
        return right_decode(model, prompt_ids, 12, eos_token_ids)

    with pytest.raises(CheckFailed, match="exactly max_new_tokens = 5"):
        check_decode(always_12)


def test_not_stopping_at_eos_is_named():
    def ignores_eos(model, prompt_ids, max_new_tokens, eos_token_ids):
        return right_decode(model, prompt_ids, max_new_tokens, [])

    with pytest.raises(CheckFailed, match="stop right after the first EOS"):
        check_decode(ignores_eos)


def test_tensor_token_ids_are_accepted(capsys):
    check_decode(lambda *a: [torch.tensor(t) for t in right_decode(*a)])
    assert "✅" in capsys.readouterr().out


def test_a_loop_that_appends_to_the_prompt_is_named():
    def appends(model, prompt_ids, max_new_tokens, eos_token_ids):
        new = right_decode(model, prompt_ids, max_new_tokens, eos_token_ids)
        prompt_ids.extend(new)
        return new

    with pytest.raises(CheckFailed, match="changed its argument `prompt_ids`"):
        check_decode(appends)


def test_a_loop_without_the_cache_is_named():
    def uncached(model, prompt_ids, max_new_tokens, eos_token_ids):
        ids = list(prompt_ids)
        with torch.inference_mode():
            for _ in range(max_new_tokens):
                ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
        return ids[len(prompt_ids):]

    with pytest.raises(CheckFailed, match="ran without the cache"):
        check_decode(uncached)


def test_one_pass_too_many_is_named():
    def extra_pass(model, prompt_ids, max_new_tokens, eos_token_ids):
        cache = KVCache.for_model(model, 1, len(prompt_ids) + max_new_tokens + 1)
        new = []
        with torch.inference_mode():
            logits = model(torch.tensor([prompt_ids]), cache=cache)
            while len(new) < max_new_tokens:
                new.append(int(logits[0, -1].argmax()))
                logits = model(torch.tensor([[new[-1]]]), cache=cache)
        return new

    with pytest.raises(CheckFailed, match="the last token needs no pass after it"):
        check_decode(extra_pass)


def test_a_prefill_in_pieces_is_named():
    def token_by_token(model, prompt_ids, max_new_tokens, eos_token_ids):
        cache = KVCache.for_model(model, 1, len(prompt_ids) + max_new_tokens)
        with torch.inference_mode():
            for token in prompt_ids:
                logits = model(torch.tensor([[token]]), cache=cache)
            new = []
            while True:
                new.append(int(logits[0, -1].argmax()))
                if new[-1] in eos_token_ids or len(new) == max_new_tokens:
                    return new
                logits = model(torch.tensor([[new[-1]]]), cache=cache)

    with pytest.raises(CheckFailed, match="the first pass \\(prefill\\) should see the whole"):
        check_decode(token_by_token)


def right_blocks(q, blocks):
    m, l, o = float("-inf"), 0.0, 0.0
    for k, v in blocks:
        s = k @ q / q.shape[0] ** 0.5
        m_new = max(m, s.max().item())
        rescale = float(np.exp(m - m_new))
        p = torch.exp(s - m_new)
        l, o, m = l * rescale + p.sum(), o * rescale + p @ v, m_new
    return o / l


def _blocks_with(scaled=True, rescale_l=True, rescale_o=True, divide=True, subtract_max=True,
                 sign=1):
    def wrong(q, blocks):
        m, l, o = float("-inf"), 0.0, 0.0
        for k, v in blocks:
            s = k @ q / (q.shape[0] ** 0.5 if scaled else 1.0)
            m_new = max(m, s.max().item()) if subtract_max else 0.0
            rescale = float(np.exp(sign * (m - m_new))) if m != float("-inf") else 0.0
            p = torch.exp(s - m_new)
            l = l * (rescale if rescale_l else 1.0) + p.sum()
            o = o * (rescale if rescale_o else 1.0) + p @ v
            m = m_new
        return o / l if divide else o
    return wrong


def test_attend_in_blocks_passes_the_right_answer_in_float64_too(capsys):
    checks.check_attend_in_blocks(right_blocks)
    checks.check_attend_in_blocks(lambda q, blocks: right_blocks(
        q.double(), ((k.double(), v.double()) for k, v in blocks)))
    checks.check_attend_in_blocks(lambda q, blocks: right_blocks(q, blocks).numpy())
    assert capsys.readouterr().out.count("✅") == 3


def test_attend_in_blocks_stub_fails_with_a_plain_message(unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_attend_in_blocks(unwritten)


def test_attend_in_blocks_hints_are_specific():
    assert_hints_are_specific(checks.check_attend_in_blocks, {
        "no rescale": (_blocks_with(rescale_l=False, rescale_o=False), "multiply both l and o"),
        "l only": (_blocks_with(rescale_o=False), "rescaled l but not o"),
        "o only": (_blocks_with(rescale_l=False), "rescaled o but not l"),
        "inverted factor": (_blocks_with(sign=-1), "not e^(m_new - m)"),
        "no sqrt(d)": (_blocks_with(scaled=False), "s = k @ q / sqrt(d)"),
        "no division": (_blocks_with(divide=False), "return o / l"),
        "no max": (_blocks_with(subtract_max=False), "e^score overflowed"),
    })


def test_attend_in_blocks_that_keeps_the_blocks_is_named():
    def joins(q, blocks):
        blocks = list(blocks)
        keys = torch.cat([k for k, _ in blocks])
        values = torch.cat([v for _, v in blocks])
        return torch.softmax(keys @ q / q.shape[0] ** 0.5, 0) @ values

    with pytest.raises(CheckFailed, match="the blocks were kept"):
        checks.check_attend_in_blocks(joins)


def test_attend_in_blocks_reading_twice_or_a_wrong_shape_is_named():
    def twice(q, blocks):
        sum(1 for _ in blocks)
        return right_blocks(q, blocks)

    with pytest.raises(CheckFailed, match="read a second time"):
        checks.check_attend_in_blocks(twice)
    with pytest.raises(CheckFailed, match=r"shape \(1, 8\).*shape \(d_v,\)"):
        checks.check_attend_in_blocks(lambda q, blocks: right_blocks(q, blocks)[None])


# --- the same hints in Chinese (set_language("zh"), as the notebooks in zh/ do) ----------------


def _copies(keys, values, k, v, length):
    return torch.cat([keys[:, :, :length], k], 2), torch.cat([values[:, :, :length], v], 2)


def _whole_buffer(keys, values, k, v, length):
    right_append(keys, values, k, v, length)
    return keys, values


def _at_zero(keys, values, k, v, length):
    right_append(keys, values, k, v, 0)
    return keys[:, :, :length + k.shape[2]], values[:, :, :length + k.shape[2]]


def _never_full(keys, values, k, v, length):
    end = length + k.shape[2]
    keys[:, :, length:end] = k[:, :, :keys.shape[2] - length]
    values[:, :, length:end] = v[:, :, :keys.shape[2] - length]
    return keys[:, :, :end], values[:, :, :end]


def _uncached(model, prompt_ids, max_new_tokens, eos_token_ids):
    ids = list(prompt_ids)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt_ids):]


def _joins(q, blocks):
    blocks = list(blocks)
    keys, values = torch.cat([k for k, _ in blocks]), torch.cat([v for _, v in blocks])
    return torch.softmax(keys @ q / q.shape[0] ** 0.5, 0) @ values


ZH_CASES = {  # name: (check, wrong answer, Chinese words of its message, English words of it)
    "no factor 2": (checks.check_kv_cache_bytes, lambda l, h, d, t, b: l * h * d * t * b,
                    "既有键也有值", "keys AND values"),
    "no layers": (checks.check_kv_cache_bytes, lambda l, h, d, t, b: 2 * h * d * t * b,
                  "每一层都存着自己的键和值", "multiply by n_layers"),
    "values not bytes": (checks.check_kv_cache_bytes, lambda l, h, d, t, b: 2 * l * h * d * t,
                         "不是字节数", "counts values, not bytes"),
    "bits": (checks.check_kv_cache_bytes, lambda l, h, d, t, b: 16 * l * h * d * t * b,
             "不要再乘以 8", "do not multiply by 8"),
    "unnamed mistake": (checks.check_kv_cache_bytes, lambda *a: right_bytes(*a) + 1,
                        "层 x", "layers x"),
    "fraction": (checks.check_kv_cache_bytes, lambda *a: right_bytes(*a) / 3,
                 "字节数应该是整数", "whole number"),
    "copy": (checks.check_append_kv, _copies, "要原地写进去", "in place"),
    "whole buffer": (checks.check_append_kv, _whole_buffer, "你返回了整个缓冲区",
                     "the whole buffer"),
    "wrong position": (checks.check_append_kv, _at_zero, "它们属于之前的词元",
                       "belong to earlier tokens"),
    "lists": (checks.check_append_kv, lambda *a: tuple(t.tolist() for t in right_append(*a)),
              "不要返回列表", "not lists"),
    "never full": (checks.check_append_kv, _never_full, "放不下：缓存已满",
                   "the cache is full"),
    "prompt too": (lambda fn: check_decode(fn),
                   lambda m, p, n, e: list(p) + right_decode(m, p, n, e), "只返回新词元",
                   "return only the new tokens"),
    "no cache": (lambda fn: check_decode(fn), _uncached, "每次调用模型都要传 cache=cache",
                 "ran without the cache"),
    "ignores eos": (lambda fn: check_decode(fn), lambda m, p, n, e: right_decode(m, p, n, []),
                    "在第一个 EOS id 之后立即停止", "stop right after the first EOS"),
    "no rescale": (checks.check_attend_in_blocks,
                   _blocks_with(rescale_l=False, rescale_o=False), "先把 l 和 o 都乘以",
                   "multiply both l and o"),
    "inverted factor": (checks.check_attend_in_blocks, _blocks_with(sign=-1),
                        "旧最大值减新最大值", "the old maximum minus"),
    "no max": (checks.check_attend_in_blocks, _blocks_with(subtract_max=False),
               "e^score 溢出了", "e^score overflowed"),
    "kept blocks": (checks.check_attend_in_blocks, _joins, "说明这些块被存了下来",
                    "the blocks were kept"),
}


@pytest.mark.parametrize("name", ZH_CASES)
def test_each_hint_comes_in_chinese(chinese, name):
    check, wrong, words, english = ZH_CASES[name]
    with pytest.raises(CheckFailed) as failure:
        check(wrong)
    message = str(failure.value)
    assert words in message, message
    assert english not in message, message
    assert "returned" not in message and "expected" not in message, message


def test_the_passes_and_the_stub_come_in_chinese(chinese, capsys, unwritten):
    with pytest.raises(CheckFailed, match="还没有写"):
        check_decode(unwritten)
    checks.check_attend_in_blocks(right_blocks)
    assert "✅ attend_in_blocks：全部 6 个用例通过" in capsys.readouterr().out


@pytest.mark.parametrize("check, right, args", [
    (checks.check_kv_cache_bytes, right_bytes, ()),
])
def test_the_hidden_cases_catch_an_answer_that_memorized_the_visible_ones(check, right, args):
    assert_hidden_cases_catch_memorizing(check, right, *args)


def test_the_hidden_cases_pass_every_right_answer():
    checks.check_append_kv(right_append, hidden=True)
    checks.check_greedy_decode(right_decode, TinyLM(), Chars(), hidden=True)
    checks.check_attend_in_blocks(right_blocks, hidden=True)


# --- 5 and 6 · partial attentions merged, a window with sinks (lesson 03b) ---------------------

def merge_partials(a, b):
    (m1, l1, o1), (m2, l2, o2) = a, b
    m = max(m1, m2)
    return m, l1 * math.exp(m1 - m) + l2 * math.exp(m2 - m), \
        o1 * math.exp(m1 - m) + o2 * math.exp(m2 - m)


def merge_partials_as_tensors(a, b):
    """The same merge with tensors and torch.maximum: 0-d tensors come back for m and l."""
    (m1, l1, o1), (m2, l2, o2) = [(torch.tensor(m), torch.as_tensor(l), o) for m, l, o in (a, b)]
    m = torch.maximum(m1, m2)
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m), \
        o1 * torch.exp(m1 - m) + o2 * torch.exp(m2 - m)


def sink_window_mask(n, window, sinks):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & ((j < sinks) | (i - j < window - sinks))


def sink_window_from_the_lesson(n, window, sinks):
    from minillm.generation.sliding_window import causal_mask, sliding_window_mask

    first = torch.arange(n)[None, :] < sinks
    return sliding_window_mask(n, n, window - sinks) | (causal_mask(n, n) & first)


@pytest.mark.parametrize("hidden", [False, True])
def test_the_03b_answers_pass_in_every_form(hidden, capsys):
    checks.check_merge_partials(merge_partials, hidden=hidden)
    checks.check_merge_partials(merge_partials_as_tensors, hidden=hidden)
    checks.check_sink_window_mask(sink_window_mask, hidden=hidden)
    checks.check_sink_window_mask(sink_window_from_the_lesson, hidden=hidden)
    checks.check_sink_window_mask(lambda *a: sink_window_mask(*a).int().tolist(), hidden=hidden)
    assert capsys.readouterr().out.count("✅") == 5


@pytest.mark.parametrize("hidden", [False, True])
def test_the_03b_hints_are_specific(hidden):
    assert_hints_are_specific(lambda f: checks.check_merge_partials(f, hidden=hidden), {
        kind: (lambda a, b, kind=kind: checks._merge_variant(a, b, kind), words[0][:30])
        for kind, words in checks.MERGE_MISTAKES})
    assert_hints_are_specific(lambda f: checks.check_sink_window_mask(f, hidden=hidden), {
        kind: (lambda *case, kind=kind: checks._sink_variant(*case, kind), words[0][:30])
        for kind, words in checks.SINK_MISTAKES})


def test_the_03b_answers_of_the_wrong_kind_are_named():
    with pytest.raises(CheckFailed, match=r"return three things: \(m, l, o\)"):
        checks.check_merge_partials(lambda a, b: merge_partials(a, b)[2])
    with pytest.raises(CheckFailed, match=r"l = l1 e\^\(m1 - m\)"):
        checks.check_merge_partials(lambda a, b: (lambda m, l, o: (m, 2 * l, o))(
            *merge_partials(a, b)))
    with pytest.raises(CheckFailed, match=r"return an \(10, 10\) mask of booleans"):
        checks.check_sink_window_mask(lambda n, w, s: sink_window_mask(n, w, s)[:-1])


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check", [checks.check_merge_partials, checks.check_sink_window_mask])
def test_the_03b_stubs_say_not_written_yet(check, hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(unwritten, hidden=hidden)


@pytest.mark.parametrize("check, right", [(checks.check_merge_partials, merge_partials),
                                          (checks.check_sink_window_mask, sink_window_mask)])
def test_the_03b_hidden_cases_catch_memorizing(check, right):
    assert_hidden_cases_catch_memorizing(check, right)


def test_the_03b_hints_come_in_chinese(chinese):
    with pytest.raises(CheckFailed, match="相加之前先乘以"):
        checks.check_merge_partials(lambda a, b: checks._merge_variant(a, b, "no rescale"))
    with pytest.raises(CheckFailed, match="对汇点同样要满足 j <= i"):
        checks.check_sink_window_mask(
            lambda *case: checks._sink_variant(*case, "sinks see the future"))
