"""The GPT-2 family: the older decoder-only design, kept for comparison with Llama.

    token ids -> token embedding + learned position embedding
              -> n_layers x [LayerNorm -> attention -> add, LayerNorm -> GELU MLP -> add]
              -> LayerNorm -> LM head (tied to the token embedding unless the config says not)

What differs from Llama: positions are a learned table added once at the input (no RoPE),
LayerNorm (with a mean and a bias) instead of RMSNorm, a two-matrix GELU MLP instead of SwiGLU,
and one fused projection for q, k and v, with biases everywhere. The attention layer itself is
the shared one (minillm.layers.Attention), given no rotary angles.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
import torch.nn as nn

from ..layers.kv_contract import KVCacheProtocol
from ..layers import Attention, GeluMLP, LMHead
from .base import DecoderModel
from .config import ModelConfig


class GPT2Block(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        biased = replace(config, attention_bias=True, attention_out_bias=True)
        self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
        self.attn = Attention(biased, layer_idx, fused=True)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
        self.mlp = GeluMLP(config)

    def forward(self, x, mask=None, cache: KVCacheProtocol | None = None):
        x = x + self.attn(self.attn_norm(x), mask=mask, cache=cache)
        return x + self.mlp(self.mlp_norm(x))


class GPT2Model(DecoderModel):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.pos_embed = nn.Embedding(config.max_seq_len, config.hidden_size)
        self.layers = nn.ModuleList(GPT2Block(config, i) for i in range(config.n_layers))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
        self.lm_head = LMHead(config, self.embed)

    def embed_tokens(self, input_ids, position_ids):
        return self.embed(input_ids) + self.pos_embed(position_ids)

    def run_layers(self, x, position_ids, mask=None, cache: KVCacheProtocol | None = None,
                   layers=None):
        for layer in self.layers if layers is None else layers:
            x = layer(x, mask, cache)
        return x


MODEL = GPT2Model


# --- checkpoints ----------------------------------------------------------------------------------

def config_from_hf(cfg: dict, arch: str, folder, eos: tuple = ()) -> ModelConfig:
    if cfg.get("scale_attn_by_inverse_layer_idx") or not cfg.get("scale_attn_weights", True):
        raise ValueError(f"{folder}: this GPT-2 config scales attention in a way minillm "
                         "does not support")
    act = cfg.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"{folder}: GPT-2 activation {act!r} is not supported (gelu_new only)")
    hidden, heads = cfg["n_embd"], cfg["n_head"]
    return ModelConfig(
        arch="gpt2", vocab_size=cfg["vocab_size"], hidden_size=hidden,
        n_layers=cfg["n_layer"], n_heads=heads, n_kv_heads=heads, head_dim=hidden // heads,
        intermediate_size=cfg.get("n_inner") or 4 * hidden,
        norm_eps=cfg.get("layer_norm_epsilon", 1e-5), max_seq_len=cfg["n_positions"],
        tie_embeddings=cfg.get("tie_word_embeddings", True), eos_token_ids=eos,
        bos_token_id=cfg.get("bos_token_id"), attention_bias=True, attention_out_bias=True,
        mlp_bias=True)


_HF_PARTS = {"attn_norm": "ln_1", "attn.qkv_proj": "attn.c_attn", "attn.o_proj": "attn.c_proj",
             "mlp_norm": "ln_2", "mlp.up_proj": "mlp.c_fc", "mlp.down_proj": "mlp.c_proj"}


def hf_weight_names(config: ModelConfig, found) -> dict[str, str]:
    # GPT-2 saved as the bare GPT2Model has no "transformer." prefix.
    p = "" if "wte.weight" in found else "transformer."
    names = {"embed.weight": p + "wte.weight", "pos_embed.weight": p + "wpe.weight",
             "norm.weight": p + "ln_f.weight", "norm.bias": p + "ln_f.bias"}
    for i in range(config.n_layers):
        for a, b in _HF_PARTS.items():
            for kind in ("weight", "bias"):
                names[f"layers.{i}.{a}.{kind}"] = f"{p}h.{i}.{b}.{kind}"
    if not config.tie_embeddings:
        names["lm_head.weight"] = "lm_head.weight"
    return names


def hf_weight(name: str, tensor: torch.Tensor) -> torch.Tensor:
    if tensor.dim() == 2 and name.startswith("layers."):
        return tensor.t().contiguous()  # GPT-2's Conv1D stores (in, out); nn.Linear wants (out, in)
    return tensor


def config_from_gguf(field, arch: str, tensors: dict, path) -> ModelConfig:
    from .llama import gguf_common

    hidden = int(field("gpt2.embedding_length", required=True))
    n_heads = int(field("gpt2.attention.head_count", required=True))
    return ModelConfig(arch="gpt2", hidden_size=hidden, n_heads=n_heads, n_kv_heads=n_heads,
                       head_dim=hidden // n_heads,
                       norm_eps=float(field("gpt2.attention.layer_norm_epsilon", 1e-5)),
                       attention_bias=True, attention_out_bias=True, mlp_bias=True,
                       **gguf_common(field, arch, tensors))


_GGUF_PARTS = {"attn_norm": "attn_norm", "attn.qkv_proj": "attn_qkv", "attn.o_proj": "attn_output",
               "mlp_norm": "ffn_norm", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def gguf_weight_names(config: ModelConfig) -> dict[str, str]:
    names = {"embed.weight": "token_embd.weight", "norm.weight": "output_norm.weight",
             "norm.bias": "output_norm.bias", "pos_embed.weight": "position_embd.weight"}
    if not config.tie_embeddings:
        names["lm_head.weight"] = "output.weight"
    for i in range(config.n_layers):
        for a, b in _GGUF_PARTS.items():
            for kind in ("weight", "bias"):
                names[f"layers.{i}.{a}.{kind}"] = f"blk.{i}.{b}.{kind}"
    return names


def gguf_weight(name: str, w: np.ndarray, config: ModelConfig) -> np.ndarray:
    return w
