"""The contract between a model and any KV cache (KV 缓存), beneath the layers that call it: the
attention layer (chapter 02) appends to a cache and the models read its length, while the caches
themselves are chapter 03's (minillm/generation/kv_cache.py) and the engine's (chapter 06).

`KVCacheProtocol`, required: what the attention layer calls (`append`) and what the model's
forward pass reads and calls (`n_layers`, `batch_size`, `length`, `advance`).

`KVCacheBase`, optional, each with its default: whether the cache `attends` itself, whether
its tensors are `contiguous` (the fast path's fused decode step writes into them directly), and
`crop` and `reorder` (speculative decoding's rollback, beam search's surviving beams). A cache
inherits the defaults and overrides what it can do; a runner asks with `capability(cache, name)`,
which gives the default for a cache that declares nothing.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class KVCacheProtocol(Protocol):
    """What a model needs of every KV cache.

    n_layers, batch_size   must match the model and its input (the model checks)
    length                 tokens already stored per row before this pass; the default
                           positions of the new tokens start there
    append(layer, k, v)    store this pass's keys and values of one layer, each (batch,
                           kv_heads, new_tokens, head_dim) in the model's activation dtype; return
                           the keys and values to attend over, (batch, kv_heads, keys, head_dim)
                           each, in that same dtype, the new ones last
    advance(new_tokens)    called once per forward pass, after the last layer

    A cache that stores another format (an int8 cache, say) keeps it to itself: `append` takes
    and returns the activation dtype (dequantizing what it returns), and it leaves `contiguous`
    off, so every runner goes through `append` (or through `attend`, with `attends` on).
    """

    n_layers: int
    batch_size: int
    length: int

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def advance(self, new_tokens: int) -> None: ...


class KVCacheBase:
    """The contract's optional capabilities, each with its default (off). A cache inherits this
    class and overrides what it can do.

    attends          True: the attention layer calls `attend(layer, q, k, v)` instead of
                     `append` and the attention math, and takes its result (batch, heads,
                     new_tokens, head_dim). The engine's PagedBatch does so for a decode step on
                     the CPU, reading keys and values where they lie in its pool.
    contiguous       True: `keys[layer]` and `values[layer]` are tensors (batch, kv_heads,
                     max_tokens, head_dim) in the activation dtype, token p of every row at index
                     p, and `append` only writes there; so a runner may write the token at
                     `length` itself and read `keys[layer][:, :, :length + 1]` (the fast path's
                     fused decode step does). `KVCache` is contiguous.
    crop(length)     forget every token after the first `length` (speculative decoding rolls
                     back the drafts the target rejected)
    reorder(rows)    keep the batch rows in the order `rows` gives (beam search follows its
                     surviving beams)
    """

    attends: bool = False
    contiguous: bool = False

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
               ) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not attend itself (its "
                                  "`attends` is False): call append and run the attention")

    def crop(self, length: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot crop: it cannot forget the "
                                  "tokens after a given length (a KVCache can)")

    def reorder(self, rows: torch.Tensor) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot reorder its batch rows (a "
                                  "KVCache can)")


def capability(cache, name: str):
    """`cache`'s `attends` or `contiguous`: its own when it declares one, else the contract's
    default (off), so a cache that keeps only the required part runs everywhere."""
    return getattr(cache, name, getattr(KVCacheBase, name))
