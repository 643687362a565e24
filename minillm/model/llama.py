"""The Llama family (SmolLM2, Llama 2/3 without rope scaling, Qwen2): a decoder-only transformer.

    token ids -> embedding -> n_layers x [RMSNorm -> attention (RoPE, grouped-query heads) -> add,
                                          RMSNorm -> SwiGLU feed-forward -> add]
              -> RMSNorm -> LM head -> logits

Every piece is a shared layer from minillm.layers; this file stacks them and says how Llama and
Qwen2 checkpoints (Hugging Face folders and GGUF files) map onto them. Qwen2 is the same network
with biases on the q, k and v projections: a config flag, not a special case.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from ..layers.kv_contract import KVCacheProtocol
from ..layers import Attention, GatedMLP, LMHead, RMSNorm, RotaryEmbedding
from ..layers.rope import RopeScaling
from .base import DecoderModel
from .config import ModelConfig


class LlamaBlock(nn.Module):
    """One transformer layer: attention then feed-forward, each on a normalised copy of the
    residual stream, each adding its result back (pre-norm residual)."""

    attention_class = Attention

    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.attn = self.attention_class(config, layer_idx)
        self.mlp_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.mlp = GatedMLP(config)

    def forward(self, x, cos, sin, mask=None, cache: KVCacheProtocol | None = None):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask, cache)
        return x + self.mlp(self.mlp_norm(x))


class LlamaModel(DecoderModel):
    """The whole network; its forward pass is DecoderModel's (minillm/model/base.py)."""

    block_class = LlamaBlock

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, config.max_seq_len,
                                      config.rope_scaling)
        self.layers = nn.ModuleList(self.block_class(config, i) for i in range(config.n_layers))
        self.norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.lm_head = LMHead(config, self.embed)

    def run_layers(self, x, position_ids, mask=None, cache: KVCacheProtocol | None = None,
                   layers=None):
        """x through `layers` (default: all), with the rotary angles of `position_ids`."""
        cos, sin = self.rotary(position_ids, x.dtype)
        for layer in self.layers if layers is None else layers:
            x = layer(x, cos, sin, mask, cache)
        return x


MODEL = LlamaModel


# --- checkpoints: Hugging Face folders ------------------------------------------------------------

HF_ROPE_TYPES = {"linear": "pi", "yarn": "yarn"}  # transformers' rope_type -> RopeScaling.kind


def rope_from_hf(cfg: dict, folder) -> tuple[float, RopeScaling | None]:
    """(rope_theta, RopeScaling or None) from a config.json's rope_parameters or rope_scaling."""
    params = cfg.get("rope_parameters") or {}
    scaling = {**(cfg.get("rope_scaling") or {}), **params}
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    if kind == "default":
        return theta, None
    if kind not in HF_ROPE_TYPES:
        raise ValueError(f"{folder}: rope scaling {kind!r} is not supported by minillm "
                         f"(plain RoPE, {', '.join(map(repr, HF_ROPE_TYPES))})")
    trained = scaling.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
    return theta, RopeScaling(HF_ROPE_TYPES[kind], float(scaling["factor"]), int(trained),
                              float(scaling.get("beta_fast") or 32),
                              float(scaling.get("beta_slow") or 1))


def config_from_hf(cfg: dict, arch: str, folder, eos: tuple = ()) -> ModelConfig:
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{folder}: activation {cfg['hidden_act']!r} is not supported (silu only)")
    if cfg.get("use_sliding_window"):
        raise ValueError(f"{folder}: sliding-window attention is not supported")
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    qkv_bias = arch == "qwen2" or bool(cfg.get("attention_bias", False))
    theta, scaling = rope_from_hf(cfg, folder)
    return ModelConfig(
        arch=arch, vocab_size=cfg["vocab_size"], hidden_size=hidden,
        n_layers=cfg["num_hidden_layers"], n_heads=heads,
        n_kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or hidden // heads,
        intermediate_size=cfg["intermediate_size"], rope_theta=theta, rope_scaling=scaling,
        norm_eps=cfg.get("rms_norm_eps", 1e-6), max_seq_len=cfg["max_position_embeddings"],
        tie_embeddings=cfg.get("tie_word_embeddings", False), eos_token_ids=eos,
        bos_token_id=cfg.get("bos_token_id"), attention_bias=qkv_bias,
        attention_out_bias=arch == "llama" and qkv_bias, mlp_bias=bool(cfg.get("mlp_bias", False)))


HF_PARTS = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
            "attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
            "attn.v_proj": "self_attn.v_proj", "attn.o_proj": "self_attn.o_proj",
            "mlp.gate_proj": "mlp.gate_proj", "mlp.up_proj": "mlp.up_proj",
            "mlp.down_proj": "mlp.down_proj"}


def hf_weight_names(config: ModelConfig, found=None, parts=HF_PARTS) -> dict[str, str]:
    """minillm's parameter name -> the Hugging Face tensor name (biases where the config has
    them; any `parts` without a bias are norms or unbiased)."""
    p = "model."
    names = {"embed.weight": p + "embed_tokens.weight", "norm.weight": p + "norm.weight"}
    biased = set()
    if config.attention_bias:
        biased |= {"attn.q_proj", "attn.k_proj", "attn.v_proj"}
    if config.attention_out_bias:
        biased.add("attn.o_proj")
    if config.mlp_bias:
        biased |= {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}
    for i in range(config.n_layers):
        for a, b in parts.items():
            names[f"layers.{i}.{a}.weight"] = f"{p}layers.{i}.{b}.weight"
            if a in biased:
                names[f"layers.{i}.{a}.bias"] = f"{p}layers.{i}.{b}.bias"
    if not config.tie_embeddings:
        names["lm_head.weight"] = "lm_head.weight"
    return names


def hf_weight(name: str, tensor: torch.Tensor) -> torch.Tensor:
    return tensor


# --- checkpoints: GGUF files ----------------------------------------------------------------------

def unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's `permute` of q/k rows: per head, rows (0, 2, 4, ..., 1, 3, 5, ...) of the
    interleaved layout go back to the (first half, second half) layout. When llama.cpp converts a
    Hugging Face Llama it reorders the rows of the query and key projections so that each head's
    rotary pairs sit side by side, where Hugging Face's RoPE pairs dimension i with
    i + head_dim/2. Works on weights (rows, cols) and biases (rows,)."""
    head_dim = w.shape[0] // n_heads
    rest = w.shape[1:]
    return (w.reshape(n_heads, head_dim // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape))


def config_from_gguf(field, arch: str, tensors: dict, path) -> ModelConfig:
    """`field(key, default, required)` reads one GGUF metadata value."""
    p = arch + "."
    scaling = field(p + "rope.scaling.type", "none")
    if scaling not in ("none", None):
        raise ValueError(f"{path.name}: rope scaling {scaling!r} is not supported by minillm")
    hidden = int(field(p + "embedding_length", required=True))
    n_heads = int(field(p + "attention.head_count", required=True))
    head_dim = field(p + "attention.key_length") or field(p + "rope.dimension_count") \
        or hidden // n_heads
    return ModelConfig(
        arch=arch, n_heads=n_heads, hidden_size=hidden, head_dim=int(head_dim),
        n_kv_heads=int(field(p + "attention.head_count_kv", n_heads)),
        rope_theta=float(field(p + "rope.freq_base", 10000.0)),
        norm_eps=float(field(p + "attention.layer_norm_rms_epsilon", 1e-5)),
        attention_bias=arch == "qwen2", **gguf_common(field, arch, tensors))


def gguf_common(field, arch: str, tensors: dict) -> dict:
    """The config fields every family reads the same way from a GGUF file."""
    p = arch + "."
    eos = [field(k) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id")]
    bos = field("tokenizer.ggml.bos_token_id")
    vocab = field(p + "vocab_size") or tensors["token_embd.weight"].shape[-1]
    return dict(vocab_size=int(vocab), n_layers=int(field(p + "block_count", required=True)),
                intermediate_size=int(field(p + "feed_forward_length", required=True)),
                max_seq_len=int(field(p + "context_length", required=True)),
                tie_embeddings="output.weight" not in tensors,
                eos_token_ids=tuple(dict.fromkeys(int(e) for e in eos if e is not None)),
                bos_token_id=None if bos is None else int(bos))


GGUF_PARTS = {"attn_norm": "attn_norm", "attn.q_proj": "attn_q", "attn.k_proj": "attn_k",
              "attn.v_proj": "attn_v", "attn.o_proj": "attn_output", "mlp_norm": "ffn_norm",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def gguf_weight_names(config: ModelConfig) -> dict[str, str]:
    names = {"embed.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
    if not config.tie_embeddings:
        names["lm_head.weight"] = "output.weight"
    for i in range(config.n_layers):
        ours, theirs = f"layers.{i}.", f"blk.{i}."
        for a, b in GGUF_PARTS.items():
            names[f"{ours}{a}.weight"] = f"{theirs}{b}.weight"
        if config.attention_bias:
            for a, b in [("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v")]:
                names[f"{ours}attn.{a}.bias"] = f"{theirs}{b}.bias"
    return names


def gguf_weight(name: str, w: np.ndarray, config: ModelConfig) -> np.ndarray:
    if config.arch == "llama" and ".attn.q_proj." in name:
        return unpermute(w, config.n_heads)
    if config.arch == "llama" and ".attn.k_proj." in name:
        return unpermute(w, config.n_kv_heads)
    return w
