"""Read a GGUF file (llama.cpp's format) into minillm's config and float32 weights.

The `gguf` package parses the file; `gguf.quants.dequantize` turns each quantized tensor (Q4_1,
Q8_0, ...) back into floats. One more step matters for Llama: when llama.cpp converts a Hugging Face
checkpoint it reorders the rows of the query and key projections so that each head's rotary pairs
sit side by side (interleaved), where Hugging Face's RoPE pairs dimension i with i + head_dim/2.
`unpermute` puts the rows back, so the Hugging Face-style RoPE in `llama.py` works unchanged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .config import ModelConfig

GGUF_ARCHITECTURES = ("llama", "qwen2", "gpt2")


def unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's `permute` of q/k rows: per head, rows (0, 2, 4, ..., 1, 3, 5, ...) of the
    interleaved layout go back to the (first half, second half) layout. Works on weights
    (rows, cols) and biases (rows,)."""
    head_dim = w.shape[0] // n_heads
    rest = w.shape[1:]
    return (w.reshape(n_heads, head_dim // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape))


def _names(arch: str, n_layers: int, tied: bool) -> dict[str, str]:
    """minillm's parameter name -> the GGUF tensor name."""
    names = {"embed.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
    if not tied:
        names["lm_head.weight"] = "output.weight"
    for i in range(n_layers):
        ours, theirs = f"layers.{i}.", f"blk.{i}."
        if arch == "gpt2":
            parts = {"attn_norm": "attn_norm", "attn.qkv_proj": "attn_qkv",
                     "attn.o_proj": "attn_output", "mlp_norm": "ffn_norm",
                     "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
            for a, b in parts.items():
                for kind in ("weight", "bias"):
                    names[f"{ours}{a}.{kind}"] = f"{theirs}{b}.{kind}"
        else:
            parts = {"attn_norm": "attn_norm", "attn.q_proj": "attn_q", "attn.k_proj": "attn_k",
                     "attn.v_proj": "attn_v", "attn.o_proj": "attn_output",
                     "mlp_norm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
                     "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
            for a, b in parts.items():
                names[f"{ours}{a}.weight"] = f"{theirs}{b}.weight"
            if arch == "qwen2":
                for a, b in [("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v")]:
                    names[f"{ours}attn.{a}.bias"] = f"{theirs}{b}.bias"
    if arch == "gpt2":
        names["norm.bias"] = "output_norm.bias"
        names["pos_embed.weight"] = "position_embd.weight"
    return names


def _config(reader, arch: str, tensors: dict, path: Path) -> ModelConfig:
    def field(key, default=None, required=False):
        f = reader.get_field(key)
        if f is None:
            if required:
                raise ValueError(f"{path.name}: GGUF metadata has no {key!r}")
            return default
        return f.contents()

    p = arch + "."
    scaling = field(p + "rope.scaling.type", "none")
    if scaling not in ("none", None):
        raise ValueError(f"{path.name}: rope scaling {scaling!r} is not supported by minillm")
    hidden = int(field(p + "embedding_length", required=True))
    n_heads = int(field(p + "attention.head_count", required=True))
    eos = [field(k) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id")]
    eos = tuple(dict.fromkeys(int(e) for e in eos if e is not None))
    norm_key = "attention.layer_norm_epsilon" if arch == "gpt2" else \
        "attention.layer_norm_rms_epsilon"
    vocab = field(p + "vocab_size") or tensors["token_embd.weight"].shape[-1]
    head_dim = field(p + "attention.key_length") or field(p + "rope.dimension_count") \
        or hidden // n_heads
    bos = field("tokenizer.ggml.bos_token_id")
    return ModelConfig(
        arch=arch,
        vocab_size=int(vocab),
        hidden_size=hidden,
        n_layers=int(field(p + "block_count", required=True)),
        n_heads=n_heads,
        n_kv_heads=int(field(p + "attention.head_count_kv", n_heads)),
        head_dim=int(head_dim),
        intermediate_size=int(field(p + "feed_forward_length", required=True)),
        rope_theta=float(field(p + "rope.freq_base", 10000.0)),
        norm_eps=float(field(p + norm_key, 1e-5)),
        max_seq_len=int(field(p + "context_length", required=True)),
        tie_embeddings="output.weight" not in tensors,
        eos_token_ids=eos,
        bos_token_id=None if bos is None else int(bos),
        attention_bias=arch == "qwen2",
    )


def read_gguf(path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The config and the dequantized float32 weights (minillm's names) of a GGUF file."""
    import gguf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    reader = gguf.GGUFReader(path)
    arch_field = reader.get_field("general.architecture")
    arch = arch_field.contents() if arch_field is not None else None
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(f"{path.name}: unsupported architecture {arch!r}; minillm reads GGUF "
                         f"files of {', '.join(GGUF_ARCHITECTURES)}")
    tensors = {t.name: t for t in reader.tensors}
    config = _config(reader, arch, tensors, path)
    weights = {}
    for ours, theirs in _names(arch, config.n_layers, config.tie_embeddings).items():
        if theirs not in tensors:
            raise ValueError(f"{path.name}: tensor {theirs!r} is missing (needed for {ours})")
        t = tensors[theirs]
        shape = tuple(int(n) for n in reversed(t.shape))  # GGUF lists the fastest axis first
        w = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape)
        if arch == "llama" and ".attn.q_proj." in ours:
            w = unpermute(w, config.n_heads)
        elif arch == "llama" and ".attn.k_proj." in ours:
            w = unpermute(w, config.n_kv_heads)
        weights[ours] = torch.from_numpy(np.array(w, dtype=np.float32))  # a writable copy
    return config, weights
