"""The Qwen3 family: the Llama network plus one change, RMSNorm on every query and key head
before the rotation (q_norm, k_norm: one weight of head_dim each, shared by all heads), which
keeps attention scores from growing without bound. Qwen3 also sets head_dim on its own (not
hidden / heads). Everything else is the Llama family's code; this file only overrides the one
step of the attention layer that differs and names the two new tensors in checkpoints.
"""

from __future__ import annotations

from dataclasses import replace

from ..layers import Attention, RMSNorm
from . import llama
from .config import ModelConfig


class Qwen3Attention(Attention):
    def __init__(self, config: ModelConfig, layer_idx: int, **kwargs):
        super().__init__(config, layer_idx, **kwargs)
        self.q_norm = RMSNorm(config.head_dim, config.norm_eps)
        self.k_norm = RMSNorm(config.head_dim, config.norm_eps)

    def qk_norm(self, q, k):
        return self.q_norm(q), self.k_norm(k)


class Qwen3Block(llama.LlamaBlock):
    attention_class = Qwen3Attention


class Qwen3Model(llama.LlamaModel):
    block_class = Qwen3Block


MODEL = Qwen3Model


def config_from_hf(cfg: dict, arch: str, folder, eos: tuple = ()) -> ModelConfig:
    config = llama.config_from_hf(cfg, arch, folder, eos)
    return replace(config, attention_out_bias=config.attention_bias)  # Qwen3 biases o_proj too


HF_PARTS = {**llama.HF_PARTS, "attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm"}


def hf_weight_names(config: ModelConfig, found=None) -> dict[str, str]:
    return llama.hf_weight_names(config, found, HF_PARTS)


hf_weight = llama.hf_weight
