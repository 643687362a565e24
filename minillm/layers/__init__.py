"""The layers every model family is built from, each written once (as nano-vllm's `layers/`).

    norm.py        RMSNorm
    rope.py        rotary position embedding: the formula and the per-position table
    attention.py   the attention math (explicit and fused) and the grouped-query Attention layer
    mlp.py         the gated (SwiGLU) and GELU feed-forward layers
    linear.py      nn.Linear from tensors; the LM head, tied to the embedding or not
    kv_contract.py what attention and the models ask of a KV cache (the caches are chapter 03's)

A model family (minillm/model/llama.py, qwen3.py, gpt2.py) stacks them into its block; the fast
path (minillm.fast) swaps their linear layers for faster ones; tensor parallelism
(minillm.distributed) gives each rank a share of their heads and rows.
"""

from .attention import (Attention, attention, attention_explicit, causal_attention, causal_mask,
                        repeat_kv)
from .linear import LMHead, plain_linear, replace_module
from .mlp import GatedMLP, GeluMLP
from .norm import RMSNorm, rms_norm
from .rope import RotaryEmbedding, apply_rope, rope_cos_sin, rotate_half

__all__ = ["Attention", "attention", "attention_explicit", "causal_attention", "causal_mask",
           "repeat_kv", "LMHead", "plain_linear", "replace_module", "GatedMLP", "GeluMLP", "RMSNorm", "rms_norm",
           "RotaryEmbedding", "apply_rope", "rope_cos_sin", "rotate_half"]
