"""The fused decode step on a GPU as one CUDA graph: captured once, replayed every token.

At batch 1 a decode step on a GPU is a few hundred small kernels (about 30 per layer), each a
few microseconds of work behind a few microseconds of launching: the GPU waits on Python. A CUDA
graph records the step's kernels once and replays them with one launch (vLLM and gpt-fast
decode so). A replay runs exactly what was recorded, on the same memory, so the step it records
may not depend on anything the host decides per token:

- the new token and its position live in device tensors the step reads (`ids`, `position`),
  filled before each replay; the rotary angles are looked up by that position tensor;
- the new key and value are written with `index_copy_` at that position, not at a Python index;
- attention reads the cache's full length (`max_tokens` slots) with the slots after the position
  masked out, instead of a slice whose length grows each token;
- every tensor keeps its address: the graph reads and writes key and value buffers of its own,
  and the logits land in its own output, copied out after each replay.

The graphs belong to the model, not to a cache, so that a capture (a synchronize, two eager
warm-up steps and the recording: milliseconds, against steps of about a millisecond) happens once
per shape and never in the middle of a later generation's timings. Shapes come in buckets of
slots, powers of two from 256 (vLLM captures so, per batch size): a cache of up to B slots
decodes through the graph of bucket B, attending over B slots with the unused ones masked. When
a new cache (each generation makes one) first decodes, its keys and values are copied into the
graph's buffers and the cache's tensors become views of them (`adopt`); the cache that used them
before, if it is still alive, gets a copy of its own first, so two caches can take turns.

`StaticDecodeStep` is that step, written to run eagerly too (on a CPU the tests compare it with
the fused step's logits); `GraphedDecode` captures it and replays it. The fused step
(minillm/fast/decode.py) hands it batch-1 steps on CUDA unless its `cuda_graph` switch is off
(`model.fused_decode.cuda_graph = False`, or MINILLM_CUDA_GRAPH=0 in the environment before the
model is made). A capture that fails says so once (per reason), and that cache decodes without
the graph; a later cache tries again.
"""

from __future__ import annotations

import copy
import os
import warnings
import weakref

import torch
import torch.nn.functional as F

from .decode import _block, _head, _norm, _plan, _rotated, checked_ids

SWITCH = "MINILLM_CUDA_GRAPH"
WARM_UPS = 2  # eager runs before the capture: lazy initialisations must not happen inside it


def switched_on() -> bool:
    """The default of a new model's `cuda_graph` switch: on unless MINILLM_CUDA_GRAPH is 0."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "off", "no")


def _attention_at(plan, layer, qkv: torch.Tensor, cos, sin, keys, values,
                  position: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
    """The new key and value rotated into the cache at `position` (a tensor), and the query
    (rows, nq, hd) over every slot of the cache, the slots `seen` marks False left out:
    (rows, nq * hd)."""
    q, k, v = _rotated(layer, qkv, cos, sin)
    keys.index_copy_(2, position, k[:, :, None])
    values.index_copy_(2, position, v[:, :, None])
    rows, nq, hd = q.shape
    nkv = keys.shape[1]
    return F.scaled_dot_product_attention(q.reshape(rows, nkv, nq // nkv, hd), keys, values,
                                          attn_mask=seen).reshape(rows, nq * hd)


class StaticDecodeStep:
    """One decode step of `fused` (a FusedDecode) on `cache` (a KVCache) whose inputs are device
    tensors: `ids` (rows, 1), the new tokens, and `position` (1,), where they go. Call it to run
    the step; it writes the new keys and values into the cache and returns the logits
    (rows, vocab) in float32. It does not advance the cache."""

    def __init__(self, fused, cache):
        model = fused.model
        device = model.device
        self.fused, self.cache = fused, cache
        self.ids = torch.zeros((cache.batch_size, 1), dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.slots = torch.arange(cache.max_tokens, device=device)[None]  # (1, slots)

    def __call__(self) -> torch.Tensor:
        fused, cache, position = self.fused, self.cache, self.position
        model = fused.model
        x = model.embed(self.ids[:, 0])
        cos, sin = model.rotary(position.view(1, 1), x.dtype)
        seen = self.slots <= position  # the cached tokens and the new one
        plan = _plan(fused, x, cache.keys[0])
        for i, layer in enumerate(fused.layers):
            x = _block(plan, layer, x, _attention_at, cos, sin, cache.keys[i], cache.values[i],
                       position, seen)
        return _head(model, _norm(model.norm, x, plan.norm))[:, 0]


SMALLEST_BUCKET = 256


def bucket(slots: int) -> int:
    """The slots of the graph that serves a cache of `slots`: a power of two, at least 256."""
    size = SMALLEST_BUCKET
    while size < slots:
        size *= 2
    return size


class _Graph:
    """One captured step: its graph, its static step (on a cache of the graph's own buffers),
    its logits, and the cache whose keys and values live in those buffers now."""

    def __init__(self, graph, step, logits):
        self.graph, self.step, self.logits = graph, step, logits
        self.buffers = step.cache.keys + step.cache.values
        self.owner = None  # a weak reference to the cache using the buffers

    def holds(self, cache) -> bool:
        return (self.owner is not None and self.owner() is cache
                and all(t.data_ptr() == b.data_ptr() for t, b in
                        zip(cache.keys + cache.values, self.buffers)))

    def adopt(self, cache) -> None:
        """Make `cache`'s keys and values views of the buffers, its contents copied in; the
        cache that had them before gets a copy of its own, if it is still alive."""
        before = self.owner() if self.owner is not None else None
        if before is not None and before is not cache and self._uses_buffers(before):
            before.keys = [t.clone() for t in before.keys]
            before.values = [t.clone() for t in before.values]
        slots = cache.keys[0].shape[2]
        views = [b[:, :, :slots] for b in self.buffers]
        for view, t in zip(views, cache.keys + cache.values):
            view.copy_(t)
        n = len(cache.keys)
        cache.keys, cache.values = views[:n], views[n:]
        self.owner = weakref.ref(cache)

    def _uses_buffers(self, cache) -> bool:
        return all(t.data_ptr() == b.data_ptr() for t, b in
                   zip(cache.keys + cache.values, self.buffers))


class GraphedDecode:
    """`fused`'s batch-1 decode steps on CUDA, replayed from CUDA graphs of StaticDecodeStep,
    one per bucket of slots, kept for the model's life."""

    def __init__(self, fused):
        self.fused = fused
        self.captures = 0  # how many graphs were recorded (one per bucket, unless one failed)
        self.failed: str | None = None  # why the last failed capture failed
        self._said: set[str] = set()  # the failures already warned about
        self._graphs: dict = {}  # (slots, dtype) -> _Graph
        self._eager = weakref.WeakSet()  # caches whose capture failed: they decode eagerly

    def __deepcopy__(self, memo) -> "GraphedDecode":
        """A copy of the model gets its own graphs, captured when it first decodes (a CUDA
        graph cannot be copied, and these write the original's buffers)."""
        return GraphedDecode(copy.deepcopy(self.fused, memo))

    def applies(self, cache) -> bool:
        """Whether this step can run from a graph: a CUDA model, one row, a KVCache (contiguous
        key and value tensors of `max_tokens` slots) whose capture has not failed."""
        return (self.fused.model.device.type == "cuda"
                and cache.batch_size == 1 and hasattr(cache, "max_tokens")
                and isinstance(cache.keys, list) and cache not in self._eager)

    def __call__(self, input_ids: torch.Tensor, cache) -> torch.Tensor | None:
        """Logits (1, 1, vocab) in float32 for the new token, or None when the capture failed
        (said once; the caller then runs the step eagerly)."""
        ids = checked_ids(self.fused.model, input_ids)
        key = (bucket(cache.keys[0].shape[2]), cache.keys[0].dtype)
        graph = self._graphs.get(key)
        if graph is None:
            try:
                graph = self._graphs[key] = self._capture(key, cache, ids)
            except Exception as error:  # noqa: BLE001 - any capture failure: decode without it
                self._eager.add(cache)
                self.failed = f"{type(error).__name__}: {error}"
                if self.failed not in self._said:
                    self._said.add(self.failed)
                    warnings.warn(f"capturing the decode step in a CUDA graph failed "
                                  f"({self.failed}); this generation decodes without the graph "
                                  "(slower: one launch per kernel), a later one tries again",
                                  RuntimeWarning, stacklevel=4)
                return None
        if not graph.holds(cache):
            graph.adopt(cache)
        graph.step.ids.copy_(ids.view(-1, 1))
        graph.step.position.fill_(cache.length)
        graph.graph.replay()
        cache.advance(1)
        return graph.logits.clone()[:, None, :]

    def _capture(self, key, cache, ids: torch.Tensor) -> _Graph:
        from ..generation.kv_cache import KVCache

        slots, dtype = key
        own = KVCache(len(cache.keys), 1, cache.keys[0].shape[1], cache.keys[0].shape[3], slots,
                      dtype=dtype, device=cache.keys[0].device)
        step = StaticDecodeStep(self.fused, own)
        step.ids.copy_(ids.view(-1, 1))
        step.position.fill_(cache.length)
        # Warm up (and capture) on a side stream, as PyTorch's CUDA-graph recipe does. The runs
        # write into the graph's own buffers, which the cache's contents then replace.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARM_UPS):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = step()
        self.captures += 1
        return _Graph(graph, step, logits)
