"""Checkers for exercises/03_kv_cache.ipynb: the cache's size, the cache update, the decode loop."""

from __future__ import annotations

import torch

from ..kv_cache import KVCache
from ._base import CheckFailed, call, expect, passed

SIZE_CASES = [  # (n_layers, n_kv_heads, head_dim, tokens, bytes_per_value)
    (30, 3, 64, 1, 4),
    (30, 3, 64, 4096, 2),
    (32, 32, 128, 4096, 2),  # Llama-2-7B in fp16
    (2, 1, 8, 10, 1),
    (80, 8, 128, 32768, 2),  # a 70B model with grouped-query attention
]


def check_kv_cache_bytes(kv_cache_bytes) -> None:
    """`kv_cache_bytes(n_layers, n_kv_heads, head_dim, tokens, bytes_per_value)` must give the
    bytes a KV cache holds: 2 x layers x kv_heads x head_dim x tokens x bytes."""
    dtypes = {4: torch.float32, 2: torch.float16, 1: torch.int8}
    for layers, heads, dim, tokens, nbytes in SIZE_CASES:
        args = (layers, heads, dim, tokens, nbytes)
        got = call(kv_cache_bytes, *args)
        want = 2 * layers * heads * dim * tokens * nbytes
        if tokens <= 16:  # small enough to build: the formula must match a real cache
            cache = KVCache(layers, 1, heads, dim, tokens, dtype=dtypes[nbytes])
            cache.advance(tokens)
            want = cache.nbytes
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"kv_cache_bytes{args} returned {type(got).__name__} {got!r}; return an int "
               f"number of bytes")
        if got * 2 == want:
            raise CheckFailed(f"kv_cache_bytes{args} returned {got}, half of {want}: the cache "
                              "holds keys AND values, so count both (the factor 2)")
        expect(got == want, f"kv_cache_bytes{args} returned {got}, expected {want} = 2 x "
                            f"{layers} layers x {heads} kv heads x {dim} head_dim x {tokens} "
                            f"tokens x {nbytes} bytes")
    passed("kv_cache_bytes", len(SIZE_CASES))


APPEND_CASES = [  # (batch, kv_heads, max_tokens, head_dim, tokens already held, new tokens)
    (1, 3, 16, 8, 0, 5),
    (1, 3, 16, 8, 5, 1),
    (2, 2, 10, 4, 9, 1),
    (3, 1, 12, 6, 4, 8),
]


def check_append_kv(append_kv) -> None:
    """`append_kv(keys, values, k, v, length)` must write `k`, `v` (batch, heads, new, dim) into
    the preallocated `keys`, `values` (batch, heads, max_tokens, dim) at positions
    length .. length+new, in place, and return the keys and values of the first length+new
    positions. A write past max_tokens must raise ValueError."""
    gen = torch.Generator().manual_seed(3)
    for batch, heads, max_tokens, dim, length, new in APPEND_CASES:
        shape = (batch, heads, max_tokens, dim)
        keys, values = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
        before_k, before_v = keys.clone(), values.clone()
        k, v = (torch.randn(batch, heads, new, dim, generator=gen) for _ in range(2))
        reference = KVCache(1, batch, heads, dim, max_tokens)
        reference.keys[0].copy_(keys)
        reference.values[0].copy_(values)
        reference.length = length
        want_k, want_v = reference.append(0, k, v)
        case = f"append_kv with {length} tokens held and {new} new (max_tokens={max_tokens})"
        got = call(append_kv, keys, values, k, v, length)
        expect(isinstance(got, tuple) and len(got) == 2,
               f"{case} returned {type(got).__name__}; return a pair (keys so far, values so far)")
        got_k, got_v = got
        expect(tuple(got_k.shape) == tuple(want_k.shape),
               f"{case}: the returned keys have shape {tuple(got_k.shape)}, expected "
               f"{tuple(want_k.shape)}: return only the first length + new positions")
        expect(torch.equal(keys, reference.keys[0]) and torch.equal(values, reference.values[0]),
               f"{case}: the preallocated tensors do not hold the new keys and values at "
               f"positions {length} to {length + new - 1}; write into them in place "
               "(keys[:, :, start:end] = k) instead of building new tensors")
        expect(torch.equal(keys[:, :, :length], before_k[:, :, :length])
               and torch.equal(values[:, :, :length], before_v[:, :, :length]),
               f"{case}: the first {length} positions changed; they belong to earlier tokens")
        expect(torch.equal(got_k, want_k) and torch.equal(got_v, want_v),
               f"{case}: the returned keys or values differ from the stored ones")
    keys = torch.zeros(1, 1, 4, 2)
    try:
        append_kv(keys, keys.clone(), torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2), 3)
    except ValueError:
        pass
    except NotImplementedError:
        raise CheckFailed("`append_kv` is not written yet") from None
    except Exception as error:
        raise CheckFailed(f"appending 2 tokens to a cache holding 3 of 4 raised "
                          f"{type(error).__name__}: {error}; raise ValueError saying the cache "
                          "is full") from None
    else:
        raise CheckFailed("appending 2 tokens to a cache holding 3 of 4 did not raise: raise "
                          "ValueError saying the cache is full")
    passed("append_kv", len(APPEND_CASES) + 1)


class _Spy:
    """Wraps a model and records the shape of every forward pass and whether it used a cache."""

    def __init__(self, model):
        self.model, self.config, self.calls = model, model.config, []

    def parameters(self):
        return self.model.parameters()

    def __call__(self, input_ids, cache=None, **kwargs):
        self.calls.append((tuple(input_ids.shape), cache is not None))
        return self.model(input_ids, cache=cache, **kwargs)

    forward = __call__


def check_greedy_decode(greedy_decode, model, tokenizer) -> None:
    """`greedy_decode(model, prompt_ids, max_new_tokens, eos_token_ids)` must return the new token
    ids that greedy decoding with a KV cache gives: one prefill pass over the prompt, then one
    pass per new token fed only that token; it stops after an EOS id (keeping it) or at
    max_new_tokens."""
    from ..generation import generate

    prompts = ["The capital of France is", "Once upon a time, in a land"]
    cases = 0
    for text in prompts:
        ids = tokenizer.encode(text)
        want = generate(model, tokenizer, ids, max_new_tokens=12, do_sample=False,
                        ignore_eos=True).token_ids
        spy = _Spy(model)
        got = call(greedy_decode, spy, list(ids), 12, [])
        expect(isinstance(got, list) and all(isinstance(t, int) for t in got),
               f"greedy_decode(model, {text!r}, 12, []) returned {type(got).__name__}; return "
               "a list of int token ids (use .item() or .tolist())")
        expect(len(got) == 12, f"greedy_decode(model, {text!r} ids, 12, []) returned "
                               f"{len(got)} tokens; with no EOS it must return exactly 12")
        expect(got[:len(ids)] != ids or got == want,
               "the result starts with the prompt: return only the new tokens")
        expect(all(used for _, used in spy.calls),
               "a forward pass ran without the cache: pass cache=cache to every model call")
        shapes = [shape for shape, _ in spy.calls]
        expect(shapes and shapes[0] == (1, len(ids)),
               f"the first pass (prefill) should see the whole prompt, shape {(1, len(ids))}, "
               f"got {shapes[0] if shapes else 'no pass at all'}")
        long_steps = [n for n, shape in enumerate(shapes[1:], 1) if shape != (1, 1)]
        expect(not long_steps, f"decode pass {long_steps[0] if long_steps else 0} had shape "
                               f"{shapes[long_steps[0]] if long_steps else ''}: with a KV cache "
                               "feed only the newest token, shape (1, 1)")
        expect(len(shapes) == 12, f"{len(shapes)} forward passes for 12 new tokens; expected "
                                  "12: one prefill, then 11 decode steps (the last token needs "
                                  "no pass after it)")
        expect(got == want, f"for {text!r} you generated {got}, greedy decoding gives {want}: "
                            "take the argmax of the logits at the last position")
        cases += 1
        eos = want[4]
        stop_at = want.index(eos) + 1
        got = call(greedy_decode, _Spy(model), list(ids), 12, [eos])
        expect(got == want[:stop_at], f"with eos_token_ids=[{eos}] you returned {got}; expected "
                                      f"{want[:stop_at]}: stop right after the first EOS id, "
                                      "and keep it")
        cases += 1
    passed("greedy_decode", cases)
