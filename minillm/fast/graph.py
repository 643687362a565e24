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
- every tensor keeps its address: the graph belongs to one cache (a new generation's new cache
  is captured again, a few milliseconds), and the logits land in the graph's own output, copied
  out after each replay.

`StaticDecodeStep` is that step, written to run eagerly too (on a CPU the tests compare it with
the fused step's logits); `GraphedDecode` captures it and replays it. The fused step
(minillm/fast/decode.py) hands it batch-1 steps on CUDA unless its `cuda_graph` switch is off
(`model.fused_decode.cuda_graph = False`, or MINILLM_CUDA_GRAPH=0 in the environment before the
model is made). A capture that fails says so once and the model decodes without the graph.
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


class GraphedDecode:
    """`fused`'s batch-1 decode steps on CUDA, replayed from a CUDA graph of StaticDecodeStep."""

    def __init__(self, fused):
        self.fused = fused
        self.captures = 0  # how many graphs were recorded (one per cache)
        self.failed: str | None = None  # why a capture failed; the graph is then off
        self._cache = None  # a weak reference to the cache the graph writes
        self._keys = None  # that cache's tensors when captured (a reorder replaces them)
        self._graph = self._step = self._logits = None

    def __deepcopy__(self, memo) -> "GraphedDecode":
        """A copy of the model gets its own graph, captured when it first decodes (a CUDA graph
        cannot be copied, and this one writes the original's cache)."""
        return GraphedDecode(copy.deepcopy(self.fused, memo))

    def applies(self, cache) -> bool:
        """Whether this step can run from the graph: a CUDA model, one row, a KVCache (contiguous
        key and value tensors of `max_tokens` slots), no failed capture."""
        return (self.failed is None and self.fused.model.device.type == "cuda"
                and cache.batch_size == 1 and hasattr(cache, "max_tokens")
                and isinstance(cache.keys, list))

    def __call__(self, input_ids: torch.Tensor, cache) -> torch.Tensor | None:
        """Logits (1, 1, vocab) in float32 for the new token, or None when the capture failed
        (said once; the caller then runs the step eagerly)."""
        ids = checked_ids(self.fused.model, input_ids)
        if not self._holds(cache):
            try:
                self._capture(cache, ids)
            except Exception as error:  # noqa: BLE001 - any capture failure: decode without it
                self._drop()
                self.failed = f"{type(error).__name__}: {error}"
                warnings.warn(f"capturing the decode step in a CUDA graph failed ({self.failed}); "
                              "this model decodes without the graph from now on (slower: one "
                              "launch per kernel)", RuntimeWarning, stacklevel=4)
                return None
        self._step.ids.copy_(ids.view(-1, 1))
        self._step.position.fill_(cache.length)
        self._graph.replay()
        cache.advance(1)
        return self._logits.clone()[:, None, :]

    def _holds(self, cache) -> bool:
        return (self._graph is not None and self._cache() is cache
                and all(a is b for a, b in zip(self._keys, cache.keys + cache.values)))

    def _capture(self, cache, ids: torch.Tensor) -> None:
        self._drop()
        step = StaticDecodeStep(self.fused, cache)
        step.ids.copy_(ids.view(-1, 1))
        step.position.fill_(cache.length)
        # Warm up (and capture) on a side stream, as PyTorch's CUDA-graph recipe does. Each run
        # writes this step's key and value at its position: the same values every time.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARM_UPS):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = step()
        self._graph, self._step, self._logits = graph, step, logits
        self._cache = weakref.ref(cache)
        self._keys = list(cache.keys + cache.values)
        self.captures += 1

    def _drop(self) -> None:
        """Let go of the graph (and the memory it holds) and of the cache it writes."""
        self._graph = self._step = self._logits = self._cache = self._keys = None
