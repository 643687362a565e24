"""What every model family's network shares: the forward contract, written once.

    model(input_ids, cache=None, position_ids=None, attention_mask=None, logits_to_keep=0)
        -> logits (batch, seq or logits_to_keep, vocab), float32

runs in three steps a family fills in, and pipeline stages (minillm.distributed) run apart:

    embed_tokens(input_ids, position_ids) -> x          the residual stream's start
    run_layers(x, position_ids, mask, cache, layers)    the blocks (all, or a stage's share)
    logits(x, logits_to_keep)                           the final norm and the LM head
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..layers.kv_contract import KVCacheProtocol
from .inputs import keep_last, prepare


class DecoderModel(nn.Module):
    """A decoder-only transformer. A family sets `config`, `embed`, `layers`, `norm` and
    `lm_head` in its __init__ and implements `run_layers`.

    `fused_decode` is the decode step a fast model is given (minillm.fast.optimize sets a
    FusedDecode; None runs every step through the layers): it takes the steps it `applies` to
    and runs each by the path kernels/decode_plan.py chooses."""

    fused_decode = None

    def forward(self, input_ids, cache: KVCacheProtocol | None = None, position_ids=None,
                attention_mask=None, logits_to_keep: int = 0):
        """Logits (batch, seq, vocab) in float32 for token ids (batch, seq), on any device (they
        are moved to the model's).

        With `cache` (anything that keeps minillm.layers.kv_contract.KVCacheProtocol: a
        KVCache, a RingKVCache, the engine's PagedBatch) each layer appends its new keys and
        values and attends over all of them; the cache advances by seq at the end. `position_ids` default to cache.length + arange(seq); for a left-padded batch
        pass them (e.g. counted from each row's first real token) together with `attention_mask`
        (batch, cached + seq), 1 = real. `logits_to_keep=n` returns only the last n positions'
        logits (0: all), as transformers' does.

        A fast model (minillm.fast) runs a step of one new token per row through its fused
        decode step (minillm/fast/decode.py) instead: the same numbers, less overhead."""
        fused = self.fused_decode
        if fused is not None and fused.applies(input_ids, cache, position_ids, attention_mask):
            return fused(input_ids, cache)
        input_ids, position_ids, mask = prepare(self.config, input_ids, cache, position_ids,
                                                attention_mask, self.device)
        x = self.run_layers(self.embed_tokens(input_ids, position_ids), position_ids, mask, cache)
        if cache is not None:
            cache.advance(input_ids.shape[1])
        return self.logits(x, logits_to_keep)

    def embed_tokens(self, input_ids, position_ids=None):
        return self.embed(input_ids)

    def run_layers(self, x, position_ids, mask=None, cache: KVCacheProtocol | None = None,
                   layers=None):
        """x through `layers` (default: all of them)."""
        raise NotImplementedError

    def logits(self, x, logits_to_keep: int = 0):
        """The final norm and the LM head, in float32, for the last `logits_to_keep` positions."""
        return self.lm_head(self.norm(keep_last(x, logits_to_keep))).float()

    @property
    def dtype(self) -> torch.dtype:
        """The dtype activations and the KV cache use (the embedding table's)."""
        return self.embed.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device
