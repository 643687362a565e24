"""Checkers for exercises/03_kv_cache.ipynb: the cache's size, the cache update, the decode loop,
and attention over blocks of keys with the online softmax (lesson 03b)."""

from __future__ import annotations

import math
import weakref

import torch

from ...generation.kv_cache import KVCache
from ._base import (CheckFailed, as_int, call, checker, expect, expect_raises, matching_mistake,
                    passed, short)

SIZE_CASES = [  # (n_layers, n_kv_heads, head_dim, tokens, bytes_per_value)
    (30, 3, 64, 1, 4),
    (30, 3, 64, 4096, 2),
    (32, 32, 128, 4096, 2),  # Llama-2-7B in fp16
    (2, 1, 8, 10, 1),
    (80, 8, 128, 32768, 2),  # a 70B model with grouped-query attention
    (1, 2, 4, 3, 4),
    (61, 1, 576, 8192, 1),  # a latent-cache-sized head in int8
]


def _size_mistakes():
    def model(f):
        return [f(*case) for case in SIZE_CASES]

    return [
        ("half the answer: the cache holds keys AND values, so count both (the factor 2)",
         model(lambda l, h, d, t, b: l * h * d * t * b)),
        ("every layer keeps its own keys and values: multiply by n_layers",
         model(lambda l, h, d, t, b: 2 * h * d * t * b)),
        ("that counts values, not bytes: multiply by bytes_per_value",
         model(lambda l, h, d, t, b: 2 * l * h * d * t)),
        ("bytes_per_value is already in bytes: do not multiply by 8",
         model(lambda l, h, d, t, b: 16 * l * h * d * t * b)),
    ]


@checker
def check_kv_cache_bytes(kv_cache_bytes) -> None:
    """`kv_cache_bytes(n_layers, n_kv_heads, head_dim, tokens, bytes_per_value)` must give the
    bytes a KV cache holds: 2 x layers x kv_heads x head_dim x tokens x bytes."""
    dtypes = {4: torch.float32, 2: torch.float16, 1: torch.int8}
    answers, wants = [], []
    for layers, heads, dim, tokens, nbytes in SIZE_CASES:
        args = (layers, heads, dim, tokens, nbytes)
        what = f"kv_cache_bytes{args}"
        got = call(kv_cache_bytes, *args, what=what)
        if isinstance(got, float) and not got.is_integer():
            raise CheckFailed(f"{what} returned {got!r}; a number of bytes is a whole number")
        answers.append(as_int(got, what))
        want = 2 * layers * heads * dim * tokens * nbytes
        if tokens <= 16:  # small enough to build: the formula must match a real cache
            cache = KVCache(layers, 1, heads, dim, tokens, dtype=dtypes[nbytes])
            cache.advance(tokens)
            want = cache.nbytes
        wants.append(want)
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if g != w]
    if not wrong:
        passed("kv_cache_bytes", len(SIZE_CASES))
        return
    i = wrong[0]
    layers, heads, dim, tokens, nbytes = SIZE_CASES[i]
    hint = matching_mistake(answers, _size_mistakes(), int.__eq__)
    raise CheckFailed(f"kv_cache_bytes{SIZE_CASES[i]} returned {answers[i]}, expected {wants[i]}"
                      + (f": {hint}" if hint else
                         f" = 2 x {layers} layers x {heads} kv heads x {dim} head_dim x "
                         f"{tokens} tokens x {nbytes} bytes"))


APPEND_CASES = [  # (batch, kv_heads, max_tokens, head_dim, tokens already held, new tokens)
    (1, 3, 16, 8, 0, 5),
    (1, 3, 16, 8, 5, 1),
    (2, 2, 10, 4, 9, 1),
    (3, 1, 12, 6, 4, 8),
    (1, 2, 40, 4, 31, 9),
    (2, 4, 7, 2, 0, 7),
]


def _returned_pair(got, what):
    if not (isinstance(got, tuple) and len(got) == 2):
        raise CheckFailed(f"{what} returned {type(got).__name__} {short(got)}; return a tuple "
                          "(keys so far, values so far)")
    for name, t in zip(("keys", "values"), got):
        expect(isinstance(t, torch.Tensor),
               f"{what} returned {name} as {type(t).__name__}; return the tensors themselves "
               "(slices of the preallocated keys and values), not lists")
    return got


@checker
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
        case = (f"append_kv(keys/values of shape {shape}, k/v of {new} new tokens, "
                f"length={length})")
        got_k, got_v = _returned_pair(call(append_kv, keys, values, k, v, length, what=case,
                                           may_change=(0, 1)), case)
        if tuple(got_k.shape) != tuple(want_k.shape) or tuple(got_v.shape) != tuple(want_v.shape):
            hint = ""
            if tuple(got_k.shape) == shape:
                hint = ": you returned the whole buffer; slice it to the first length + new"
            elif tuple(got_k.shape) == tuple(k.shape):
                hint = (": you returned only the new tokens; attention needs all the keys and "
                        "values so far, the first length + new positions")
            raise CheckFailed(f"{case}: the returned keys have shape {tuple(got_k.shape)} and "
                              f"values {tuple(got_v.shape)}, expected {tuple(want_k.shape)}{hint}")
        if not (torch.equal(keys, reference.keys[0]) and torch.equal(values, reference.values[0])):
            if torch.equal(keys, before_k) and torch.equal(values, before_v):
                raise CheckFailed(f"{case}: the preallocated keys and values were not written; "
                                  "write into them in place (keys[:, :, start:end] = k) instead "
                                  "of building new tensors, or the cache is lost after this call")
            expect(torch.equal(keys[:, :, :length], before_k[:, :, :length])
                   and torch.equal(values[:, :, :length], before_v[:, :, :length]),
                   f"{case}: the first {length} positions changed; they belong to earlier "
                   f"tokens: write the new ones at positions {length} to {length + new - 1}")
            raise CheckFailed(f"{case}: the keys and values at positions {length} to "
                              f"{length + new - 1} are not the new k and v (keys[:, :, "
                              "length:length + new] = k), or positions after them changed")
        expect(torch.equal(got_k, want_k) and torch.equal(got_v, want_v),
               f"{case}: the returned keys or values differ from the stored ones: return "
               "keys[:, :, :length + new] and values[:, :, :length + new]")
    keys = torch.zeros(1, 1, 4, 2)
    for length, new in ((3, 2), (4, 1), (0, 5)):
        expect_raises(append_kv, keys, keys.clone(), torch.ones(1, 1, new, 2),
                      torch.ones(1, 1, new, 2), length, error=ValueError,
                      what=f"appending {new} tokens to a cache of 4 holding {length}",
                      why="they do not fit: the cache is full")
    passed("append_kv", len(APPEND_CASES) + 3)


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


DECODE_PROMPTS = [("The capital of France is", 12), ("Once upon a time, in a land", 5),
                  ("1, 2, 3, 4,", 1), ("Water boils at", 17)]


@checker
def check_greedy_decode(greedy_decode, model, tokenizer) -> None:
    """`greedy_decode(model, prompt_ids, max_new_tokens, eos_token_ids)` must return the new token
    ids that greedy decoding with a KV cache gives: one prefill pass over the prompt, then one
    pass per new token fed only that token; it stops after an EOS id (keeping it) or at
    max_new_tokens."""
    from ...generation.loop import generate

    cases = 0
    for text, k in DECODE_PROMPTS:
        ids = list(tokenizer.encode(text))
        want = generate(model, tokenizer, ids, max_new_tokens=k, do_sample=False,
                        ignore_eos=True).token_ids
        spy = _Spy(model)
        what = f"greedy_decode(model, <{len(ids)} ids of {text!r}>, {k}, [])"
        got = call(greedy_decode, spy, ids, k, [], what=what)
        expect(isinstance(got, list), f"{what} returned {type(got).__name__}; return a list of "
                                      "int token ids (use .item() or .tolist())")
        got = [as_int(t, f"a token id {what} returned") for t in got]
        if len(got) == len(ids) + k and got[:len(ids)] == ids:
            raise CheckFailed(f"{what} returned {len(got)} ids that start with the prompt: "
                              "return only the new tokens")
        expect(len(got) == k, f"{what} returned {len(got)} tokens; with no EOS it must return "
                              f"exactly max_new_tokens = {k}")
        expect(all(used for _, used in spy.calls),
               f"{what}: a forward pass ran without the cache: pass cache=cache to every model "
               "call")
        shapes = [shape for shape, _ in spy.calls]
        expect(shapes and shapes[0] == (1, len(ids)),
               f"{what}: the first pass (prefill) should see the whole prompt, shape "
               f"{(1, len(ids))}, got {shapes[0] if shapes else 'no pass at all'}")
        long_steps = [n for n, shape in enumerate(shapes[1:], 1) if shape != (1, 1)]
        if long_steps:
            raise CheckFailed(f"{what}: decode pass {long_steps[0]} had shape "
                              f"{shapes[long_steps[0]]}: with a KV cache feed only the newest "
                              "token, shape (1, 1)")
        expect(len(shapes) == k, f"{what}: {len(shapes)} forward passes for {k} new tokens; "
                                 f"expected {k}: one prefill, then {k - 1} decode steps (the last "
                                 "token needs no pass after it)")
        expect(got == want, f"for {text!r} you generated {got}, greedy decoding gives {want}: "
                            "take the argmax of the logits at the last position")
        cases += 1
        if k >= 5:
            eos = want[3]
            stop_at = want.index(eos) + 1
            got = call(greedy_decode, _Spy(model), ids, k, [eos],
                       what=f"greedy_decode(model, <{len(ids)} ids>, {k}, [{eos}])")
            expect(isinstance(got, list), f"greedy_decode returned {type(got).__name__}; return a "
                                          "list of int token ids")
            got = [as_int(t, "a token id greedy_decode returned") for t in got]
            expect(got == want[:stop_at],
                   f"with eos_token_ids=[{eos}] you returned {short(got)}; expected "
                   f"{want[:stop_at]}: stop right after the first EOS id, and keep it")
            cases += 1
    passed("greedy_decode", cases)


# --- 4 · attention one block at a time (the online softmax) -------------------------------------

BLOCK_CASES = [  # (d, d_v, block sizes, how large each block's keys are)
    (8, 8, [4, 4, 4], [1, 2, 3]),  # the largest score moves to a later block
    (8, 3, [5, 1, 7], [3, 1, 2]),  # values narrower than keys; a block of one key
    (16, 16, [1] * 6, [1, 1.5, 2, 2.5, 3, 3.5]),
    (4, 6, [8], [1]),  # one block: the plain softmax
    (64, 64, [32, 32, 32, 17], [1, 1, 4, 1]),  # SmolLM2's head width, a short last block
    (4, 4, [3, 3, 3], [300, 600, 1000]),  # scores near a thousand: e^score overflows
]


def _block_case(index):
    d, d_v, sizes, scales = BLOCK_CASES[index]
    gen = torch.Generator().manual_seed(40 + index)
    q = torch.randn(d, generator=gen)
    keys = torch.cat([s * torch.randn(b, d, generator=gen) for b, s in zip(sizes, scales)])
    values = torch.randn(sum(sizes), d_v, generator=gen)
    return q, keys, values, sizes


class _OnePass:
    """A case's keys and values, handed out block by block, once. It notes when the function
    still holds a block two blocks later (it kept the blocks instead of its running values)."""

    def __init__(self, keys, values, sizes):
        self.keys, self.values, self.sizes = keys, values, sizes
        self.handed: list = []  # a weak reference to each block's keys
        self.kept: int | None = None  # the first block still held two blocks later
        self.started = False

    def __iter__(self):
        if self.started:
            raise CheckFailed("the blocks were read a second time; they arrive once, as from a "
                              "stream: loop over them once, keeping m, l and o")
        self.started = True
        return self._blocks()

    def _blocks(self):
        start = 0
        for i, size in enumerate(self.sizes):
            if i >= 2 and self.kept is None and self.handed[i - 2]() is not None:
                self.kept = i - 2
            k = self.keys[start:start + size].clone()
            v = self.values[start:start + size].clone()
            self.handed.append(weakref.ref(k))
            start += size
            yield k, v
            del k, v  # the generator holds nothing it handed out


def _blockwise(q, keys, values, sizes, *, scaled=True, rescale_l=True, rescale_o=True,
               divide=True, subtract_max=True, factor_sign=1):
    """The online softmax over the blocks, with each step optionally done wrong (the mistakes)."""
    m, l, o, start = float("-inf"), 0.0, 0.0, 0
    for size in sizes:
        k, v = keys[start:start + size], values[start:start + size]
        start += size
        s = k @ q / (math.sqrt(q.shape[0]) if scaled else 1.0)
        m_new = max(m, s.max().item()) if subtract_max else 0.0
        factor = math.exp(factor_sign * (m - m_new)) if m != float("-inf") else 0.0
        p = torch.exp(s - m_new)
        l = l * (factor if rescale_l else 1.0) + p.sum()
        o = o * (factor if rescale_o else 1.0) + p @ v
        m = m_new
    return o / l if divide else o


_BLOCK_MISTAKES = [
    ("when a block raises the maximum from m to m_new, the sums kept so far were computed "
     "against the old m: multiply both l and o by e^(m - m_new) before adding the block's terms",
     dict(rescale_l=False, rescale_o=False)),
    ("you rescaled l but not o: o was summed against the old maximum too, so multiply it by "
     "e^(m - m_new) as well", dict(rescale_o=False)),
    ("you rescaled o but not l: l was summed against the old maximum too, so multiply it by "
     "e^(m - m_new) as well", dict(rescale_l=False)),
    ("the factor is e^(m - m_new), the old maximum minus the new one (at most 1), not "
     "e^(m_new - m)", dict(factor_sign=-1)),
    ("scale the scores as attention does: s = k @ q / sqrt(d)", dict(scaled=False)),
    ("return o / l: o alone is the weighted sum before the softmax's division",
     dict(divide=False)),
]


def _as_vector(got, what):
    if isinstance(got, torch.Tensor):
        return got.detach().cpu().double()
    try:
        return torch.as_tensor(got, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailed(f"{what} returned {type(got).__name__} {short(got)}; return a tensor "
                          "of d_v numbers, o / l") from None


def _close(a, b) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b.double(), rtol=1e-3, atol=1e-3,
                                                      equal_nan=True))


@checker
def check_attend_in_blocks(attend_in_blocks) -> None:
    """`attend_in_blocks(q, blocks)` must return softmax(K q / sqrt(d)) V for one query q, reading
    `blocks` ((k, v) pairs) once and keeping only its running maximum, sum and output between
    blocks: the online softmax of FlashAttention."""
    answers, wants = [], []
    for index in range(len(BLOCK_CASES)):
        q, keys, values, sizes = _block_case(index)
        d, d_v = q.shape[0], values.shape[1]
        what = (f"attend_in_blocks(q of {d} numbers, {len(sizes)} blocks of "
                f"{'/'.join(map(str, sizes))} keys, values of {d_v})")
        blocks = _OnePass(keys, values, sizes)
        got = call(attend_in_blocks, q, blocks, what=what,
                   if_raises="`blocks` hands out (k, v) pairs once: loop over it with "
                             "`for k, v in blocks:`")
        if blocks.kept is not None:
            raise CheckFailed(f"{what}: block {blocks.kept + 1} was still held when block "
                              f"{blocks.kept + 3} was asked for, so the blocks were kept (in a "
                              "list, or joined): keep only m, l and o between blocks. Holding "
                              "one block at a time is what lets FlashAttention skip the "
                              "n x n scores")
        got = _as_vector(got, what)
        if got.shape != (d_v,):
            hint = (": one query gives one vector; return o / l with shape (d_v,)"
                    if got.numel() == d_v else
                    ": the output has one number per value dimension, d_v" if got.dim() == 1
                    else "")
            raise CheckFailed(f"{what} returned shape {tuple(got.shape)}, expected ({d_v},)"
                              + hint)
        weights = torch.softmax(keys.double() @ q.double() / math.sqrt(d), dim=0)
        answers.append(got)
        wants.append(weights @ values.double())
    wrong = [i for i, (g, w) in enumerate(zip(answers, wants)) if not _close(g, w)]
    if not wrong:
        passed("attend_in_blocks", len(BLOCK_CASES))
        return
    i = wrong[0]
    d, d_v, sizes, _ = BLOCK_CASES[i]
    q, keys, values, _ = _block_case(i)
    scores = keys @ q / math.sqrt(d)
    if not torch.isfinite(answers[i]).all():
        hint = (f"the output holds inf or nan: e^score overflowed (the scores here reach "
                f"{scores.max().item():.0f}). Subtract the running maximum before exp: "
                "e^(s - m_new) is at most 1")
    else:
        models = [(text, [_blockwise(*_block_case(j), **how)
                          for j in range(len(BLOCK_CASES))]) for text, how in _BLOCK_MISTAKES]
        hint = matching_mistake(answers, models, _close)
    shown = ", ".join(f"{x:.4f}" for x in answers[i][:4].tolist())
    expected = ", ".join(f"{x:.4f}" for x in wants[i][:4].tolist())
    raise CheckFailed(f"attend_in_blocks on blocks of {'/'.join(map(str, sizes))} keys (d={d}, "
                      f"d_v={d_v}) returned [{shown}{', ...' if d_v > 4 else ''}], expected "
                      f"[{expected}{', ...' if d_v > 4 else ''}]" + (f": {hint}" if hint else ""))
