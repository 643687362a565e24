"""What every model's forward pass does before its first layer: check the inputs, move them to
the model's device, choose the positions, and build the attention mask (only when padding needs
one).

The device rule, for every runner in minillm: a model's `forward` accepts token ids, position
ids and masks on any device and moves them to its own; everything else a runner creates for a
model (caches, buffers, masks) it creates on the model's device from the start."""

from __future__ import annotations

import torch

from ..layers.kv_contract import KVCacheProtocol
from ..layers.attention import causal_mask
from ..utils.validate import check_int


def prepare(config, input_ids, cache: KVCacheProtocol | None = None, position_ids=None,
            attention_mask=None, device=None):
    """Check a forward pass's arguments; return `(input_ids, position_ids, mask)`, all on
    `device` (default: where input_ids are).

    `position_ids` default to cache.length + arange(seq). `mask` is None for the plain causal case
    (the attention function applies it itself), else booleans (batch, 1, seq, keys) combining the
    causal mask with `attention_mask` (1 = real token, 0 = left padding). A 4-d boolean
    `attention_mask` (batch, 1, seq, keys) is taken as the whole mask (a draft tree's: each
    token sees the cache and its own ancestors)."""
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.LongTensor of shape (batch, seq), "
                        f"got {type(input_ids).__name__}")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"input_ids must hold integer token ids (torch.long), got {input_ids.dtype}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape (batch, seq), got {tuple(input_ids.shape)}")
    if device is not None:
        input_ids = input_ids.to(device)
    batch, seq = input_ids.shape
    if seq == 0 or batch == 0:
        raise ValueError(f"input_ids is empty (shape {tuple(input_ids.shape)}): the model needs "
                         "at least one token")
    if ((input_ids < 0) | (input_ids >= config.vocab_size)).any():
        bad = input_ids[(input_ids < 0) | (input_ids >= config.vocab_size)][0].item()
        raise ValueError(f"token id {bad} is out of range: the vocabulary has "
                         f"{config.vocab_size} ids (0 to {config.vocab_size - 1})")

    start = 0
    if cache is not None:
        if cache.n_layers != config.n_layers or cache.batch_size != batch:
            raise ValueError(f"the KV cache holds {cache.n_layers} layers x batch "
                             f"{cache.batch_size}; this model and input need {config.n_layers} "
                             f"layers x batch {batch}")
        start = cache.length
    if start + seq > config.max_seq_len:
        raise ValueError(f"the sequence is {start + seq} tokens ({start} cached + {seq} new), "
                         f"longer than the model's context window of {config.max_seq_len}")

    if position_ids is None:
        position_ids = torch.arange(start, start + seq, device=input_ids.device).expand(batch, seq)
    elif tuple(position_ids.shape) != (batch, seq):
        raise ValueError(f"position_ids must have shape {(batch, seq)} like input_ids, "
                         f"got {tuple(position_ids.shape)}")
    else:
        position_ids = position_ids.to(input_ids.device)

    mask = None
    keys = start + seq
    if attention_mask is not None and attention_mask.dim() == 4:
        if tuple(attention_mask.shape) != (batch, 1, seq, keys) or \
                attention_mask.dtype != torch.bool:
            raise ValueError(f"a 4-d attention_mask is the whole mask: booleans shaped (batch, 1, "
                             f"new tokens, cached + new tokens) = {(batch, 1, seq, keys)}, got "
                             f"{attention_mask.dtype} {tuple(attention_mask.shape)}")
        mask = attention_mask.to(input_ids.device)
    elif attention_mask is not None:
        if tuple(attention_mask.shape) != (batch, keys):
            raise ValueError(f"attention_mask must have shape (batch, cached + new tokens) = "
                             f"{(batch, keys)}, got {tuple(attention_mask.shape)}")
        causal = causal_mask(seq, keys, input_ids.device)
        mask = causal & attention_mask.to(input_ids.device).bool()[:, None, None, :]
        # A padding query sees no real key; let it see itself so its row is never all -inf (NaN).
        own = torch.arange(seq, device=input_ids.device)
        mask[:, :, own, start + own] = True
    return input_ids, position_ids, mask


def keep_last(x, logits_to_keep: int):
    """The hidden states (batch, seq, hidden) whose logits a forward pass returns: the last
    `logits_to_keep` positions, or all of them for 0. Generation needs only the last one; the
    LM head over a whole prompt is a fifth of a small model's prefill work, thrown away."""
    check_int("logits_to_keep", logits_to_keep, 0, allowed="an int >= 0 (0 keeps every position)")
    return x[:, -logits_to_keep:] if logits_to_keep else x
