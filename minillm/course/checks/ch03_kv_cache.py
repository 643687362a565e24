"""Checkers for exercises/03_kv_cache.ipynb: the cache's size, the cache update, the decode loop,
attention over blocks of keys with the online softmax, and (lesson 03b) two partial attentions
merged as Flash-Decoding does and a sliding window that keeps its attention sinks.

Every message says both languages side by side (`say`), chosen by the notebook's set_language.
"""

from __future__ import annotations

import math
import weakref

import torch

from ...generation.kv_cache import KVCache
from ..language import say
from ._base import (CheckFailed, as_int, call, checker, end_check, end_variant_check, expect,
                    expect_raises, first_failure, matching_mistake, passed, short, with_hint)

SIZE_CASES = [  # (n_layers, n_kv_heads, head_dim, tokens, bytes_per_value)
    (30, 3, 64, 1, 4),
    (30, 3, 64, 4096, 2),
    (32, 32, 128, 4096, 2),  # Llama-2-7B in fp16
    (2, 1, 8, 10, 1),
    (80, 8, 128, 32768, 2),  # a 70B model with grouped-query attention
    (1, 2, 4, 3, 4),
    (61, 1, 576, 8192, 1),  # a latent-cache-sized head in int8
]
HIDDEN_SIZE_CASES = [
    (24, 2, 64, 3, 4),
    (28, 8, 128, 8192, 2),  # an 8B model with grouped-query attention, fp16
    (3, 5, 16, 7, 1),
    (40, 40, 128, 2048, 2),  # a 13B model without grouped-query attention
    (1, 1, 2, 9, 2),
]


def _size_mistakes(cases):
    def model(f):
        return [f(*case) for case in cases]

    return [
        (say("half the answer: the cache holds keys AND values, so count both (the factor 2)",
             "只算了一半：缓存里既有键也有值，两份都要算（因子 2）"),
         model(lambda l, h, d, t, b: l * h * d * t * b)),
        (say("every layer keeps its own keys and values: multiply by n_layers",
             "每一层都存着自己的键和值：要乘以 n_layers"),
         model(lambda l, h, d, t, b: 2 * h * d * t * b)),
        (say("that counts values, not bytes: multiply by bytes_per_value",
             "这数的是值的个数，不是字节数：要乘以 bytes_per_value"),
         model(lambda l, h, d, t, b: 2 * l * h * d * t)),
        (say("bytes_per_value is already in bytes: do not multiply by 8",
             "bytes_per_value 的单位已经是字节：不要再乘以 8"),
         model(lambda l, h, d, t, b: 16 * l * h * d * t * b)),
    ]


@checker
def check_kv_cache_bytes(kv_cache_bytes, *, hidden=False) -> None:
    """`kv_cache_bytes(n_layers, n_kv_heads, head_dim, tokens, bytes_per_value)` must give the
    bytes a KV cache holds: 2 x layers x kv_heads x head_dim x tokens x bytes."""
    cases = HIDDEN_SIZE_CASES if hidden else SIZE_CASES
    dtypes = {4: torch.float32, 2: torch.float16, 1: torch.int8}
    answers, wants = [], []
    for layers, heads, dim, tokens, nbytes in cases:
        args = (layers, heads, dim, tokens, nbytes)
        what = f"kv_cache_bytes{args}"
        got = call(kv_cache_bytes, *args, what=what)
        if isinstance(got, float) and not got.is_integer():
            raise CheckFailed(say("{what} returned {got!r}; a number of bytes is a whole number",
                                  "{what} 返回了 {got!r}；字节数应该是整数", what=what, got=got))
        answers.append(as_int(got, what))
        want = 2 * layers * heads * dim * tokens * nbytes
        if tokens <= 16:  # small enough to build: the formula must match a real cache
            cache = KVCache(layers, 1, heads, dim, tokens, dtype=dtypes[nbytes])
            cache.advance(tokens)
            want = cache.nbytes
        wants.append(want)
    end_check("kv_cache_bytes", answers, wants, cases, _size_failure,
              mistakes=lambda: _size_mistakes(cases))


def _size_failure(case, got, want, hint) -> str:
    layers, heads, dim, tokens, nbytes = case
    return with_hint(say("kv_cache_bytes{case} returned {got}, expected {want}",
                         "kv_cache_bytes{case} 返回了 {got}，应为 {want}", case=case, got=got,
                         want=want),
                     hint, say(" = 2 x {layers} layers x {heads} kv heads x {dim} head_dim x "
                               "{tokens} tokens x {nbytes} bytes",
                               " = 2 x {layers} 层 x {heads} 个 kv 头 x {dim}（head_dim）x "
                               "{tokens} 个词元 x {nbytes} 字节", layers=layers, heads=heads,
                               dim=dim, tokens=tokens, nbytes=nbytes))


APPEND_CASES = [  # (batch, kv_heads, max_tokens, head_dim, tokens already held, new tokens)
    (1, 3, 16, 8, 0, 5),
    (1, 3, 16, 8, 5, 1),
    (2, 2, 10, 4, 9, 1),
    (3, 1, 12, 6, 4, 8),
    (1, 2, 40, 4, 31, 9),
    (2, 4, 7, 2, 0, 7),
]
HIDDEN_APPEND_CASES = [
    (2, 1, 9, 3, 0, 2),
    (1, 4, 20, 5, 12, 8),
    (3, 2, 6, 4, 5, 1),
    (1, 1, 33, 16, 1, 30),
]


def _returned_pair(got, what):
    if not (isinstance(got, tuple) and len(got) == 2):
        raise CheckFailed(say("{what} returned {kind} {got}; return a tuple "
                              "(keys so far, values so far)",
                              "{what} 返回了 {kind} {got}；请返回一个元组"
                              "（目前为止的 keys，目前为止的 values）",
                              what=what, kind=type(got).__name__, got=short(got)))
    for name, t in zip(("keys", "values"), got):
        expect(isinstance(t, torch.Tensor),
               say("{what} returned {name} as {kind}; return the tensors themselves "
                   "(slices of the preallocated keys and values), not lists",
                   "{what} 返回的 {name} 是 {kind}；请返回张量本身"
                   "（预分配的 keys 和 values 的切片），不要返回列表",
                   what=what, name=name, kind=type(t).__name__))
    return got


@checker
def check_append_kv(append_kv, *, hidden=False) -> None:
    """`append_kv(keys, values, k, v, length)` must write `k`, `v` (batch, heads, new, dim) into
    the preallocated `keys`, `values` (batch, heads, max_tokens, dim) at positions
    length .. length+new, in place, and return the keys and values of the first length+new
    positions. A write past max_tokens must raise ValueError."""
    cases = HIDDEN_APPEND_CASES if hidden else APPEND_CASES
    gen = torch.Generator().manual_seed(4 if hidden else 3)
    for batch, heads, max_tokens, dim, length, new in cases:
        shape = (batch, heads, max_tokens, dim)
        keys, values = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
        before_k, before_v = keys.clone(), values.clone()
        k, v = (torch.randn(batch, heads, new, dim, generator=gen) for _ in range(2))
        reference = KVCache(1, batch, heads, dim, max_tokens)
        reference.keys[0].copy_(keys)
        reference.values[0].copy_(values)
        reference.length = length
        want_k, want_v = reference.append(0, k, v)
        case = say("append_kv(keys/values of shape {shape}, k/v of {new} new tokens, "
                   "length={length})",
                   "append_kv(形状为 {shape} 的 keys/values，{new} 个新词元的 k/v，"
                   "length={length})", shape=shape, new=new, length=length)
        got_k, got_v = _returned_pair(call(append_kv, keys, values, k, v, length, what=case,
                                           may_change=(0, 1)), case)
        if tuple(got_k.shape) != tuple(want_k.shape) or tuple(got_v.shape) != tuple(want_v.shape):
            hint = ""
            if tuple(got_k.shape) == shape:
                hint = say(": you returned the whole buffer; slice it to the first length + new",
                           "：你返回了整个缓冲区；要切出前 length + new 个位置")
            elif tuple(got_k.shape) == tuple(k.shape):
                hint = say(": you returned only the new tokens; attention needs all the keys and "
                           "values so far, the first length + new positions",
                           "：你只返回了新词元；注意力需要目前为止所有的键和值，"
                           "即前 length + new 个位置")
            raise CheckFailed(say("{case}: the returned keys have shape {got_k} and values "
                                  "{got_v}, expected {want}{hint}",
                                  "{case}：返回的 keys 形状为 {got_k}，values 为 {got_v}，"
                                  "应为 {want}{hint}", case=case, got_k=tuple(got_k.shape),
                                  got_v=tuple(got_v.shape), want=tuple(want_k.shape), hint=hint))
        if not (torch.equal(keys, reference.keys[0]) and torch.equal(values, reference.values[0])):
            if torch.equal(keys, before_k) and torch.equal(values, before_v):
                raise CheckFailed(say(
                    "{case}: the preallocated keys and values were not written; write into them "
                    "in place (keys[:, :, start:end] = k) instead of building new tensors, or "
                    "the cache is lost after this call",
                    "{case}：预分配的 keys 和 values 没有被写入；要原地写进去"
                    "（keys[:, :, start:end] = k），而不是新建张量，否则这次调用一结束缓存就丢了",
                    case=case))
            expect(torch.equal(keys[:, :, :length], before_k[:, :, :length])
                   and torch.equal(values[:, :, :length], before_v[:, :, :length]),
                   say("{case}: the first {length} positions changed; they belong to earlier "
                       "tokens: write the new ones at positions {length} to {last}",
                       "{case}：前 {length} 个位置被改动了；它们属于之前的词元："
                       "新词元要写在位置 {length} 到 {last}", case=case, length=length,
                       last=length + new - 1))
            raise CheckFailed(say("{case}: the keys and values at positions {length} to "
                                  "{last} are not the new k and v (keys[:, :, "
                                  "length:length + new] = k), or positions after them changed",
                                  "{case}：位置 {length} 到 {last} 上的键和值不是新的 k 和 v"
                                  "（keys[:, :, length:length + new] = k），"
                                  "或者它们之后的位置被改动了", case=case, length=length,
                                  last=length + new - 1))
        expect(torch.equal(got_k, want_k) and torch.equal(got_v, want_v),
               say("{case}: the returned keys or values differ from the stored ones: return "
                   "keys[:, :, :length + new] and values[:, :, :length + new]",
                   "{case}：返回的键或值和存进去的不一样：请返回 "
                   "keys[:, :, :length + new] 和 values[:, :, :length + new]", case=case))
    keys = torch.zeros(1, 1, 4, 2)
    for length, new in ((2, 3), (4, 2), (1, 4)) if hidden else ((3, 2), (4, 1), (0, 5)):
        expect_raises(append_kv, keys, keys.clone(), torch.ones(1, 1, new, 2),
                      torch.ones(1, 1, new, 2), length, error=ValueError,
                      what=say("appending {new} tokens to a cache of 4 holding {length}",
                               "往容量为 4、已存 {length} 个的缓存里追加 {new} 个词元",
                               new=new, length=length),
                      why=say("they do not fit: the cache is full", "放不下：缓存已满"))
    passed("append_kv", len(cases) + 3)


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
HIDDEN_DECODE_PROMPTS = [("The largest planet is", 9), ("def add(a, b):", 6), ("Hi", 2)]


@checker
def check_greedy_decode(greedy_decode, model, tokenizer, *, hidden=False) -> None:
    """`greedy_decode(model, prompt_ids, max_new_tokens, eos_token_ids)` must return the new token
    ids that greedy decoding with a KV cache gives: one prefill pass over the prompt, then one
    pass per new token fed only that token; it stops after an EOS id (keeping it) or at
    max_new_tokens."""
    from ...generation.loop import generate

    cases = 0
    for text, k in HIDDEN_DECODE_PROMPTS if hidden else DECODE_PROMPTS:
        ids = list(tokenizer.encode(text))
        want = generate(model, tokenizer, ids, max_new_tokens=k, do_sample=False,
                        ignore_eos=True).token_ids
        spy = _Spy(model)
        what = say("greedy_decode(model, <{n} ids of {text!r}>, {k}, [])",
                   "greedy_decode(model, <{text!r} 的 {n} 个 id>, {k}, [])",
                   n=len(ids), text=text, k=k)
        got = call(greedy_decode, spy, ids, k, [], what=what)
        expect(isinstance(got, list), say("{what} returned {kind}; return a list of int token "
                                          "ids (use .item() or .tolist())",
                                          "{what} 返回了 {kind}；请返回由 int 词元 id 组成的列表"
                                          "（用 .item() 或 .tolist()）",
                                          what=what, kind=type(got).__name__))
        got = [as_int(t, say("a token id {what} returned", "{what} 返回的一个词元 id",
                             what=what)) for t in got]
        if len(got) == len(ids) + k and got[:len(ids)] == ids:
            raise CheckFailed(say("{what} returned {n} ids that start with the prompt: "
                                  "return only the new tokens",
                                  "{what} 返回了 {n} 个 id，开头是提示词：只返回新词元",
                                  what=what, n=len(got)))
        expect(len(got) == k, say("{what} returned {n} tokens; with no EOS it must return "
                                  "exactly max_new_tokens = {k}",
                                  "{what} 返回了 {n} 个词元；没有 EOS 时应当正好返回 "
                                  "max_new_tokens = {k} 个", what=what, n=len(got), k=k))
        expect(all(used for _, used in spy.calls),
               say("{what}: a forward pass ran without the cache: pass cache=cache to every "
                   "model call",
                   "{what}：有一次前向传播没有用缓存：每次调用模型都要传 cache=cache", what=what))
        shapes = [shape for shape, _ in spy.calls]
        expect(shapes and shapes[0] == (1, len(ids)),
               say("{what}: the first pass (prefill) should see the whole prompt, shape "
                   "{want}, got {got}",
                   "{what}：第一次前向传播（预填充）应当看到整个提示词，形状为 {want}，"
                   "实际是 {got}", what=what, want=(1, len(ids)),
                   got=shapes[0] if shapes else say("no pass at all", "一次也没有运行")))
        long_steps = [n for n, shape in enumerate(shapes[1:], 1) if shape != (1, 1)]
        if long_steps:
            raise CheckFailed(say("{what}: decode pass {n} had shape {shape}: with a KV cache "
                                  "feed only the newest token, shape (1, 1)",
                                  "{what}：第 {n} 次解码的形状是 {shape}：有了 KV 缓存，"
                                  "只需喂入最新的词元，形状为 (1, 1)", what=what,
                                  n=long_steps[0], shape=shapes[long_steps[0]]))
        expect(len(shapes) == k, say("{what}: {n} forward passes for {k} new tokens; expected "
                                     "{k}: one prefill, then {steps} decode steps (the last "
                                     "token needs no pass after it)",
                                     "{what}：生成 {k} 个新词元用了 {n} 次前向传播；应为 {k} 次："
                                     "一次预填充，再加 {steps} 个解码步（最后一个词元之后"
                                     "不需要再跑）", what=what, n=len(shapes), k=k, steps=k - 1))
        expect(got == want, say("for {text!r} you generated {got}, greedy decoding gives "
                                "{want}: take the argmax of the logits at the last position",
                                "对 {text!r} 你生成的是 {got}，贪心解码给出的是 {want}："
                                "取最后一个位置 logits 的 argmax", text=text, got=got,
                                want=want))
        cases += 1
        if k >= 5:
            eos = want[3]
            stop_at = want.index(eos) + 1
            got = call(greedy_decode, _Spy(model), ids, k, [eos],
                       what=say("greedy_decode(model, <{n} ids>, {k}, [{eos}])",
                                "greedy_decode(model, <{n} 个 id>, {k}, [{eos}])",
                                n=len(ids), k=k, eos=eos))
            expect(isinstance(got, list), say("greedy_decode returned {kind}; return a list of "
                                              "int token ids",
                                              "greedy_decode 返回了 {kind}；请返回由 int 词元 id "
                                              "组成的列表", kind=type(got).__name__))
            got = [as_int(t, say("a token id greedy_decode returned",
                                 "greedy_decode 返回的一个词元 id")) for t in got]
            expect(got == want[:stop_at],
                   say("with eos_token_ids=[{eos}] you returned {got}; expected {want}: stop "
                       "right after the first EOS id, and keep it",
                       "eos_token_ids=[{eos}] 时你返回了 {got}；应为 {want}：在第一个 EOS id "
                       "之后立即停止，并保留它", eos=eos, got=short(got), want=want[:stop_at]))
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
HIDDEN_BLOCK_CASES = [
    (6, 6, [2, 5, 3], [3, 1, 2]),  # the largest score in the first block
    (12, 5, [4, 4], [1, 3]),
    (8, 8, [1, 9, 1, 9], [1, 2, 3, 4]),
    (4, 2, [2, 2, 2, 2], [500, 100, 900, 200]),  # overflow, the maximum rising and falling
]


def _block_case(cases, index):
    d, d_v, sizes, scales = cases[index]
    gen = torch.Generator().manual_seed((80 if cases is HIDDEN_BLOCK_CASES else 40) + index)
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
            raise CheckFailed(say("the blocks were read a second time; they arrive once, as "
                                  "from a stream: loop over them once, keeping m, l and o",
                                  "这些块被读了第二遍；它们像数据流一样只来一次："
                                  "只遍历一遍，保留 m、l 和 o"))
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


def _block_mistakes():
    return [
        (say("when a block raises the maximum from m to m_new, the sums kept so far were "
             "computed against the old m: multiply both l and o by e^(m - m_new) before adding "
             "the block's terms",
             "某一块把最大值从 m 抬到 m_new 时，之前累加的和都是相对旧的 m 算的："
             "在加上这一块的项之前，先把 l 和 o 都乘以 e^(m - m_new)"),
         dict(rescale_l=False, rescale_o=False)),
        (say("you rescaled l but not o: o was summed against the old maximum too, so multiply "
             "it by e^(m - m_new) as well",
             "你缩放了 l 却没缩放 o：o 也是相对旧的最大值累加的，同样要乘以 e^(m - m_new)"),
         dict(rescale_o=False)),
        (say("you rescaled o but not l: l was summed against the old maximum too, so multiply "
             "it by e^(m - m_new) as well",
             "你缩放了 o 却没缩放 l：l 也是相对旧的最大值累加的，同样要乘以 e^(m - m_new)"),
         dict(rescale_l=False)),
        (say("the factor is e^(m - m_new), the old maximum minus the new one (at most 1), not "
             "e^(m_new - m)",
             "缩放因子是 e^(m - m_new)，即旧最大值减新最大值（不超过 1），而不是 e^(m_new - m)"),
         dict(factor_sign=-1)),
        (say("scale the scores as attention does: s = k @ q / sqrt(d)",
             "像注意力那样缩放分数：s = k @ q / sqrt(d)"), dict(scaled=False)),
        (say("return o / l: o alone is the weighted sum before the softmax's division",
             "返回 o / l：单独的 o 只是 softmax 做除法之前的加权和"), dict(divide=False)),
    ]


def _as_vector(got, what):
    if isinstance(got, torch.Tensor):
        return got.detach().cpu().double()
    try:
        return torch.as_tensor(got, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailed(say("{what} returned {kind} {got}; return a tensor of d_v numbers, "
                              "o / l", "{what} 返回了 {kind} {got}；请返回含 d_v 个数的张量，"
                              "即 o / l", what=what, kind=type(got).__name__,
                              got=short(got))) from None


def _close(a, b) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b.double(), rtol=1e-3, atol=1e-3,
                                                      equal_nan=True))


@checker
def check_attend_in_blocks(attend_in_blocks, *, hidden=False) -> None:
    """`attend_in_blocks(q, blocks)` must return softmax(K q / sqrt(d)) V for one query q, reading
    `blocks` ((k, v) pairs) once and keeping only its running maximum, sum and output between
    blocks: the online softmax of FlashAttention."""
    cases = HIDDEN_BLOCK_CASES if hidden else BLOCK_CASES
    answers, wants = [], []
    for index in range(len(cases)):
        q, keys, values, sizes = _block_case(cases, index)
        d, d_v = q.shape[0], values.shape[1]
        what = say("attend_in_blocks(q of {d} numbers, {n} blocks of {sizes} keys, values "
                   "of {d_v})",
                   "attend_in_blocks(含 {d} 个数的 q，{n} 块各 {sizes} 个键，值宽 {d_v})",
                   d=d, n=len(sizes), sizes="/".join(map(str, sizes)), d_v=d_v)
        blocks = _OnePass(keys, values, sizes)
        got = call(attend_in_blocks, q, blocks, what=what,
                   if_raises=say("`blocks` hands out (k, v) pairs once: loop over it with "
                                 "`for k, v in blocks:`",
                                 "`blocks` 只给出一遍 (k, v) 对：用 `for k, v in blocks:` "
                                 "遍历它"))
        if blocks.kept is not None:
            raise CheckFailed(say("{what}: block {first} was still held when block {later} was "
                                  "asked for, so the blocks were kept (in a list, or joined): "
                                  "keep only m, l and o between blocks. Holding one block at a "
                                  "time is what lets FlashAttention skip the n x n scores",
                                  "{what}：取第 {later} 块时，第 {first} 块还被拿着，说明这些块"
                                  "被存了下来（放进列表，或拼接起来）：块与块之间只保留 m、l 和 o。"
                                  "一次只拿一块，正是 FlashAttention 能省掉 n x n 分数矩阵的原因",
                                  what=what, first=blocks.kept + 1, later=blocks.kept + 3))
        got = _as_vector(got, what)
        if got.shape != (d_v,):
            hint = (say(": one query gives one vector; return o / l with shape (d_v,)",
                        "：一个查询得到一个向量；返回形状为 (d_v,) 的 o / l")
                    if got.numel() == d_v else
                    say(": the output has one number per value dimension, d_v",
                        "：输出在值的每个维度上各有一个数，共 d_v 个") if got.dim() == 1
                    else "")
            raise CheckFailed(say("{what} returned shape {shape}, expected ({d_v},)",
                                  "{what} 返回的形状是 {shape}，应为 ({d_v},)", what=what,
                                  shape=tuple(got.shape), d_v=d_v) + hint)
        weights = torch.softmax(keys.double() @ q.double() / math.sqrt(d), dim=0)
        answers.append(got)
        wants.append(weights @ values.double())
    failure = first_failure("attend_in_blocks", answers, wants, _close)
    if failure is None:
        return
    i = failure[0]
    d, d_v, sizes, _ = cases[i]
    q, keys, values, _ = _block_case(cases, i)
    scores = keys @ q / math.sqrt(d)
    if not torch.isfinite(answers[i]).all():
        hint = say("the output holds inf or nan: e^score overflowed (the scores here reach "
                   "{top:.0f}). Subtract the running maximum before exp: e^(s - m_new) is at "
                   "most 1",
                   "输出里有 inf 或 nan：e^score 溢出了（这里的分数高达 {top:.0f}）。"
                   "做 exp 之前先减去当前的最大值：e^(s - m_new) 不会超过 1",
                   top=scores.max().item())
    else:
        models = [(text, [_blockwise(*_block_case(cases, j), **how)
                          for j in range(len(cases))]) for text, how in _block_mistakes()]
        hint = matching_mistake(answers, models, _close)
    shown = ", ".join(f"{x:.4f}" for x in answers[i][:4].tolist())
    expected = ", ".join(f"{x:.4f}" for x in wants[i][:4].tolist())
    more = ", ..." if d_v > 4 else ""
    raise CheckFailed(with_hint(
        say("attend_in_blocks on blocks of {sizes} keys (d={d}, d_v={d_v}) returned "
            "[{shown}{more}], expected [{expected}{more}]",
            "attend_in_blocks 在各含 {sizes} 个键的块上（d={d}，d_v={d_v}）"
            "返回了 [{shown}{more}]，应为 [{expected}{more}]",
            sizes="/".join(map(str, sizes)), d=d, d_v=d_v, shown=shown, expected=expected,
            more=more),
        hint))


# --- 5 · two partial attentions merged: split-KV, as Flash-Decoding does (lesson 03b) ---------

MERGE_CASES = [  # (d, d_v, keys in the first part, in the second, score scale)
    (8, 8, 5, 7, 1.0), (16, 4, 9, 3, 1.0), (4, 6, 1, 1, 1.0), (8, 8, 6, 6, 40.0),
    (32, 16, 20, 2, 1.0)]
HIDDEN_MERGE_CASES = [(6, 6, 4, 8, 1.0), (12, 3, 2, 10, 1.0), (8, 8, 7, 7, 60.0),
                      (16, 16, 1, 15, 1.0), (4, 4, 3, 3, 1.0)]


def _partial(q, keys, values):
    """(m, l, o) of one part of the keys: its largest score, the sum of e^(s - m), and the sum
    of e^(s - m) times the values."""
    s = keys @ q / math.sqrt(q.shape[0])
    m = s.max().item()
    p = torch.exp(s - m)
    return m, p.sum().item(), p @ values


def _merge_case(cases, index):
    d, d_v, first, second, loud = cases[index]
    gen = torch.Generator().manual_seed(300 + index + (50 if cases is HIDDEN_MERGE_CASES else 0))
    q = torch.randn(d, generator=gen, dtype=torch.float64) * loud
    keys = torch.randn(first + second, d, generator=gen, dtype=torch.float64)
    values = torch.randn(first + second, d_v, generator=gen, dtype=torch.float64)
    if index % 2:  # the second part holds the largest score in half the cases
        keys = keys.flip(0)
    parts = _partial(q, keys[:first], values[:first]), _partial(q, keys[first:], values[first:])
    weights = torch.softmax(keys @ q / math.sqrt(d), dim=0)
    return parts, weights @ values


def _merge_variant(a, b, kind):
    (m1, l1, o1), (m2, l2, o2) = a, b
    m = min(m1, m2) if kind == "min" else max(m1, m2)
    r1, r2 = math.exp(m1 - m), math.exp(m2 - m)
    if kind == "no rescale":
        r1 = r2 = 1.0
    l = l1 * r1 + l2 * r2 if kind != "l unscaled" else l1 + l2
    o = o1 * r1 + o2 * r2 if kind != "o unscaled" else o1 + o2
    if kind == "normalized":
        return m, 1.0, o / l
    return m, l, o


MERGE_MISTAKES = [
    ("no rescale", ("each part's l and o were summed against its own maximum: multiply them by "
                    "e^(m_part - m) before adding, with m = max(m1, m2)",
                    "每一部分的 l 和 o 都是相对它自己的最大值求和的：相加之前先乘以 "
                    "e^(m_part - m)，其中 m = max(m1, m2)")),
    ("l unscaled", ("o was rescaled but l was not: both sums need e^(m_part - m)",
                    "o 重新缩放了，l 却没有：两个和都要乘以 e^(m_part - m)")),
    ("o unscaled", ("l was rescaled but o was not: both sums need e^(m_part - m)",
                    "l 重新缩放了，o 却没有：两个和都要乘以 e^(m_part - m)")),
    ("min", ("the merged m is the larger of the two maxima, so that every e^(m_part - m) is at "
             "most 1", "合并后的 m 取两个最大值中较大的那个，这样每个 e^(m_part - m) 都不超过 1")),
    ("normalized", ("return the merged sums (m, l, o), not o / l: a third part may still come, "
                    "and dividing is done once, at the end",
                    "返回合并后的 (m, l, o)，而不是 o / l：后面可能还有第三部分要合并，"
                    "除法只在最后做一次")),
]


def _as_partial(got, what):
    expect(isinstance(got, (tuple, list)) and len(got) == 3,
           say("{what} returned {got}; return three things: (m, l, o)",
               "{what} 返回了 {got}；要返回三样东西：(m, l, o)", what=what, got=short(got)))
    m, l, o = got
    as_float = [float(v.item() if isinstance(v, torch.Tensor) else v) for v in (m, l)]
    return as_float[0], as_float[1], _as_vector(o, what)


def _same_partial(a, b) -> bool:
    return (math.isclose(a[0], b[0], rel_tol=1e-6, abs_tol=1e-9)
            and math.isclose(a[1], b[1], rel_tol=1e-5, abs_tol=1e-9) and _close(a[2], b[2]))


@checker
def check_merge_partials(merge_partials, *, hidden=False) -> None:
    """`merge_partials(a, b)`: two partial attentions (m, l, o), each over one part of the keys,
    merged into the (m, l, o) of all of them; o / l is then the attention over every key."""
    cases = HIDDEN_MERGE_CASES if hidden else MERGE_CASES
    answers, wants = [], []
    for index, (d, d_v, first, second, _) in enumerate(cases):
        (a, b), whole = _merge_case(cases, index)
        what = say("merge_partials(a over {first} keys, b over {second} keys)",
                   "merge_partials(a 覆盖 {first} 个键，b 覆盖 {second} 个键)",
                   first=first, second=second)
        answers.append(_as_partial(call(merge_partials, a, b, what=what), what))
        wants.append(_merge_variant(a, b, "reference"))
        torch.testing.assert_close(wants[-1][2] / wants[-1][1], whole)  # the rule itself
    failure = first_failure("merge_partials", answers, wants, _same_partial, mistakes=lambda: [
        (say(*words), [_merge_variant(*_merge_case(cases, j)[0], kind)
                       for j in range(len(cases))]) for kind, words in MERGE_MISTAKES])
    if failure is None:
        return
    i, hint = failure
    got, want = answers[i], wants[i]
    raise CheckFailed(with_hint(
        say("merge_partials, case {n}: got m = {gm:.4g}, l = {gl:.4g}; expected m = {wm:.4g}, "
            "l = {wl:.4g}",
            "merge_partials 第 {n} 个用例：得到 m = {gm:.4g}，l = {gl:.4g}；应为 m = {wm:.4g}，"
            "l = {wl:.4g}", n=i + 1, gm=got[0], gl=got[1], wm=want[0], wl=want[1]),
        hint, say("; m = max(m1, m2), l = l1 e^(m1 - m) + l2 e^(m2 - m), o likewise",
                  "；m = max(m1, m2)，l = l1 e^(m1 - m) + l2 e^(m2 - m)，o 同理")))


# --- 6 · a sliding window that keeps its sinks (lesson 03b) ------------------------------------

SINK_CASES = [(10, 4, 2), (8, 3, 1), (12, 6, 4), (6, 5, 2), (9, 4, 0)]  # (tokens, window, sinks)
HIDDEN_SINK_CASES = [(11, 5, 3), (7, 2, 1), (14, 8, 4), (5, 4, 1), (10, 3, 0)]


def _sink_variant(n, window, sinks, kind):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    recent = (i - j <= window - sinks) if kind == "off by one" else (i - j < window - sinks)
    if kind == "window plus sinks":
        recent = i - j < window
    first = j < sinks
    if kind == "no sinks":
        first = torch.zeros_like(first)
    causal = j <= i
    if kind == "sinks see the future":
        return (causal & recent) | first
    return causal & (recent | first)


SINK_MISTAKES = [
    ("sinks see the future", ("a query sees a sink only once the sink is in the past: "
                              "j <= i holds for the sinks too",
                              "查询只能看到已经出现过的汇点：对汇点同样要满足 j <= i")),
    ("window plus sinks", ("the window counts its sinks: keep the last window - sinks keys, "
                           "so that no query sees more than `window` keys",
                           "窗口要把汇点算在内：只保留最近的 window - sinks 个键，"
                           "这样每个查询看到的键都不超过 `window` 个")),
    ("off by one", ("the last window - sinks keys are i - j < window - sinks, not <=",
                    "最近的 window - sinks 个键是 i - j < window - sinks，而不是 <=")),
    ("no sinks", ("that is the plain window: the first `sinks` tokens stay visible to every "
                  "later query", "这就是普通的窗口：前 `sinks` 个词元要一直对后面的查询可见")),
]


def _as_mask(got, n, what):
    if isinstance(got, torch.Tensor):
        got = got.detach().cpu()
    else:
        try:
            got = torch.as_tensor(got)
        except (TypeError, ValueError, RuntimeError):
            got = None
    expect(got is not None and tuple(got.shape) == (n, n),
           say("{what} returned {got}; return an ({n}, {n}) mask of booleans",
               "{what} 返回了 {got}；请返回一个 ({n}, {n}) 的布尔掩码", what=what, n=n,
               got=short(got)))
    return got.bool()


@checker
def check_sink_window_mask(sink_window_mask, *, hidden=False) -> None:
    """`sink_window_mask(n, window, sinks)`: (n, n) booleans, query i sees key j when j <= i
    and (j < sinks or i - j < window - sinks): StreamingLLM's window, `window` keys at most."""
    cases = HIDDEN_SINK_CASES if hidden else SINK_CASES
    answers = []
    for n, window, sinks in cases:
        what = f"sink_window_mask({n}, {window}, {sinks})"
        answers.append(_as_mask(call(sink_window_mask, n, window, sinks, what=what), n, what))
    end_variant_check("sink_window_mask", answers, cases, _sink_variant, SINK_MISTAKES,
                      _sink_failure, torch.equal)


def _sink_failure(case, got, want, hint) -> str:
    n, window, sinks = case
    row, col = (got != want).nonzero()[0].tolist()
    return with_hint(say("sink_window_mask({n}, {window}, {sinks}): query {row} and key {col} "
                         "should be {want}",
                         "sink_window_mask({n}, {window}, {sinks})：查询 {row} 与键 {col} "
                         "应为 {want}", n=n, window=window, sinks=sinks, row=row, col=col,
                         want=bool(want[row, col])), hint)
