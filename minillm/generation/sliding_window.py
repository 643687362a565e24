"""Sliding-window attention (滑动窗口注意力) and the ring-buffer KV cache it allows.

With a window of W, each token attends only to itself and the W − 1 tokens before it (Mistral 7B,
Gemma 2 and 3 in alternate layers). Then no step ever reads a key older than W positions, so the
cache needs only W slots per layer: token n goes to slot n mod W, overwriting token n − W, which
no later query may see. The cache stops growing at W tokens, whatever the length of the text.

- `sliding_window_mask` is the (queries, keys) mask: causal, and at most `window` back.
- `RingKVCache` is a KV cache of `window` slots that keeps the KV-cache contract
  (minillm.generation.kv_cache), so the model runs on it unchanged: `model(ids, cache=ring)`.
  It is not contiguous (its slots are not positions) and cannot crop (a token past the window
  has overwritten one that an earlier length would need).
- `window_forward` runs a Llama-family model over a whole sequence with the window mask in every
  layer and no cache: the reference the ring cache is checked against.

A forward pass of several tokens (a prompt) fits the ring only while nothing has been
overwritten (at most `window` tokens in all); after that it takes one token per pass, as decode
does. A chunked prefill past the window needs the window mask inside the chunk, which the
model's plain causal attention does not apply.
"""

from __future__ import annotations

import torch

from .kv_cache import LayerSlots
from ..layers.attention import causal_mask


def sliding_window_mask(queries: int, keys: int, window: int, device=None) -> torch.Tensor:
    """(queries, keys) booleans: query i, at position keys − queries + i, sees key j when
    j <= its position and its position − j < window."""
    _check_window(window)
    position = keys - queries + torch.arange(queries, device=device)[:, None]
    key = torch.arange(keys, device=device)[None, :]
    return causal_mask(queries, keys, device) & (position - key < window)


class RingKVCache(LayerSlots):
    """Keys and values of the last `window` tokens, in `window` slots per layer; token n lives in
    slot n mod window. `length` counts every token seen (it sets the next token's position)."""

    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, head_dim: int,
                 window: int, dtype: torch.dtype = torch.float32, device="cpu"):
        _check_window(window)
        super().__init__(n_layers, batch_size, n_kv_heads, head_dim, window, dtype, device)
        self.window = window

    @classmethod
    def for_model(cls, model, batch_size: int, window: int) -> "RingKVCache":
        return super().for_model(model, batch_size, window)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Store this pass's keys and values (batch, kv_heads, new, head_dim) and return the
        ones its queries attend to. Before the ring is full they come in position order; once
        it is full (one new token a pass) they come in slot order, which attention does not
        mind: a single query with no mask weighs its keys the same in any order."""
        new, end = k.shape[2], self.length + k.shape[2]
        if new > 1 and end > self.window:
            raise ValueError(f"a pass of {new} tokens after {self.length} would wrap the ring of "
                             f"{self.window} slots; feed tokens past the window one at a time")
        slots = torch.arange(self.length, end, device=k.device) % self.window
        self.keys[layer][:, :, slots] = k
        self.values[layer][:, :, slots] = v
        held = min(end, self.window)
        return self.keys[layer][:, :, :held], self.values[layer][:, :, :held]

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values of the tokens in the window."""
        return self._bytes_per_token() * min(self.length, self.window)


@torch.inference_mode()
def window_forward(model, input_ids: torch.Tensor, window: int) -> torch.Tensor:
    """Logits (batch, seq, vocab) of a minillm model with every layer's attention limited to
    `window` keys back, no cache: the full-attention reference for `RingKVCache`. It runs the
    model's own steps (embed_tokens, run_layers, logits) with a window mask."""
    from ..utils.devices import model_device

    input_ids = input_ids.to(model_device(model))
    seq = input_ids.shape[1]
    mask = sliding_window_mask(seq, seq, window, input_ids.device)[None, None]
    positions = torch.arange(seq, device=input_ids.device).expand(input_ids.shape[0], seq)
    x = model.run_layers(model.embed_tokens(input_ids, positions), positions, mask)
    return model.logits(x)


def _check_window(window) -> None:
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"window must be an int >= 1 (the tokens a query may see, itself "
                         f"included), got {window!r}")
