"""How many bytes each token leaves in the KV cache under each attention design.

- MHA, multi-head attention (多头注意力): every query head has its own key and value head.
- GQA, grouped-query attention (分组查询注意力): groups of query heads share a key/value head.
- MQA, multi-query attention (多查询注意力): all query heads share one key/value head.
- MLA, multi-head latent attention (多头潜在注意力, DeepSeek-V2/V3): each token stores one
  compressed latent vector per layer, plus a small key part that carries RoPE; the heads'
  keys and values are rebuilt from the latent by up-projections.
- A sliding window (滑动窗口) changes how many tokens are held, not the bytes per token: at most
  `window` of them (`minillm.generation.sliding_window` builds the ring buffer that does it).

The shapes in `PUBLISHED` are the models' published configurations (config.json on their model
pages): SmolLM2-135M, Llama-3-8B and DeepSeek-V3.
"""

from __future__ import annotations

from dataclasses import dataclass

DESIGNS = ("MHA", "GQA", "MQA", "MLA")


@dataclass(frozen=True)
class AttentionShape:
    """What sets a model's KV cache: layers, query heads, the key/value heads it was trained
    with, the width of one key and of one value, and for MLA the width of the cached latent
    (the compressed keys and values plus the RoPE key part)."""

    name: str
    layers: int
    heads: int
    kv_heads: int | None  # None: the model does not use GQA (DeepSeek-V3 uses MLA)
    key_dim: int
    value_dim: int
    latent_dim: int | None = None  # MLA only


PUBLISHED = {
    "SmolLM2-135M": AttentionShape("SmolLM2-135M", layers=30, heads=9, kv_heads=3, key_dim=64,
                                   value_dim=64),
    "Llama-3-8B": AttentionShape("Llama-3-8B", layers=32, heads=32, kv_heads=8, key_dim=128,
                                 value_dim=128),
    # 128 heads; keys of 128 + 64 (RoPE) dimensions, values of 128; kv_lora_rank 512 + the
    # shared 64-dimension RoPE key = a 576-wide latent per token and layer
    "DeepSeek-V3": AttentionShape("DeepSeek-V3", layers=61, heads=128, kv_heads=None,
                                  key_dim=192, value_dim=128, latent_dim=512 + 64),
}


def bytes_per_token(shape: AttentionShape, design: str, bytes_per_value: int = 2) -> int | None:
    """KV-cache bytes one token adds, over all layers, under `design` (MHA, GQA, MQA or MLA);
    None when the model's published shape does not define it (GQA without kv_heads, MLA
    without a latent)."""
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {', '.join(DESIGNS)}, got {design!r}")
    if not isinstance(bytes_per_value, int) or bytes_per_value < 1:
        raise ValueError(f"bytes_per_value must be a positive int, got {bytes_per_value!r}")
    if design == "MLA":
        values = shape.latent_dim
    else:
        heads = {"MHA": shape.heads, "GQA": shape.kv_heads, "MQA": 1}[design]
        values = None if heads is None else heads * (shape.key_dim + shape.value_dim)
    return None if values is None else shape.layers * values * bytes_per_value


def cache_bytes(shape: AttentionShape, design: str, tokens: int, window: int | None = None,
                bytes_per_value: int = 2) -> int | None:
    """Bytes of one sequence's cache after `tokens` tokens; with a sliding `window`, only the
    last `window` tokens are held."""
    for name, value in [("tokens", tokens), ("window", window)]:
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    per_token = bytes_per_token(shape, design, bytes_per_value)
    held = tokens if window is None else min(tokens, window)
    return None if per_token is None else per_token * held
