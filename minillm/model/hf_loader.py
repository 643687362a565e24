"""Read a local Hugging Face model folder (config.json + safetensors) into minillm's config and
weights: the Llama, Qwen2 and GPT-2 families. Weights are read with safetensors only, never with
pickle (a `pytorch_model.bin` is refused: loading one can run arbitrary code)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .config import ModelConfig

HF_ARCHITECTURES = ("llama", "qwen2", "gpt2")
# Tensors a checkpoint may carry that minillm rebuilds or does not need.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")


def _read_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _eos_ids(folder: Path, cfg: dict) -> tuple:
    eos = None
    if (folder / "generation_config.json").is_file():
        eos = _read_json(folder / "generation_config.json").get("eos_token_id")
    if eos is None:
        eos = cfg.get("eos_token_id")
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, (list, tuple)) else (eos,)


def _rope_theta(cfg: dict, folder: Path) -> float:
    params = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling") or {}
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise ValueError(f"{folder}: rope scaling {kind!r} is not supported by minillm "
                         "(only plain RoPE)")
    return float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))


def config_from_hf(cfg: dict, folder: Path) -> ModelConfig:
    """minillm's config from the dict of a Hugging Face config.json."""
    arch = cfg.get("model_type")
    if arch not in HF_ARCHITECTURES:
        raise ValueError(f"{folder}: unsupported architecture {arch!r} "
                         f"(config.json model_type); minillm loads {', '.join(HF_ARCHITECTURES)}")
    eos = _eos_ids(folder, cfg)
    if arch == "gpt2":
        if cfg.get("scale_attn_by_inverse_layer_idx") or not cfg.get("scale_attn_weights", True):
            raise ValueError(f"{folder}: this GPT-2 config scales attention in a way minillm "
                             "does not support")
        act = cfg.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"{folder}: GPT-2 activation {act!r} is not supported "
                             "(gelu_new only)")
        hidden, heads = cfg["n_embd"], cfg["n_head"]
        return ModelConfig(
            arch="gpt2", vocab_size=cfg["vocab_size"], hidden_size=hidden,
            n_layers=cfg["n_layer"], n_heads=heads, n_kv_heads=heads, head_dim=hidden // heads,
            intermediate_size=cfg.get("n_inner") or 4 * hidden,
            norm_eps=cfg.get("layer_norm_epsilon", 1e-5), max_seq_len=cfg["n_positions"],
            tie_embeddings=cfg.get("tie_word_embeddings", True), eos_token_ids=eos,
            bos_token_id=cfg.get("bos_token_id"))
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{folder}: activation {cfg['hidden_act']!r} is not supported (silu only)")
    if arch == "qwen2" and cfg.get("use_sliding_window"):
        raise ValueError(f"{folder}: Qwen2 sliding-window attention is not supported")
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    return ModelConfig(
        arch=arch, vocab_size=cfg["vocab_size"], hidden_size=hidden,
        n_layers=cfg["num_hidden_layers"], n_heads=heads,
        n_kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or hidden // heads,
        intermediate_size=cfg["intermediate_size"], rope_theta=_rope_theta(cfg, folder),
        norm_eps=cfg.get("rms_norm_eps", 1e-6), max_seq_len=cfg["max_position_embeddings"],
        tie_embeddings=cfg.get("tie_word_embeddings", False), eos_token_ids=eos,
        bos_token_id=cfg.get("bos_token_id"),
        attention_bias=arch == "qwen2" or bool(cfg.get("attention_bias", False)),
        mlp_bias=bool(cfg.get("mlp_bias", False)))


def _names(config: ModelConfig, prefix: str) -> dict[str, str]:
    """minillm's parameter name -> the Hugging Face tensor name."""
    p = prefix
    if config.arch == "gpt2":
        names = {"embed.weight": p + "wte.weight", "pos_embed.weight": p + "wpe.weight",
                 "norm.weight": p + "ln_f.weight", "norm.bias": p + "ln_f.bias"}
        parts = {"attn_norm": "ln_1", "attn.qkv_proj": "attn.c_attn", "attn.o_proj": "attn.c_proj",
                 "mlp_norm": "ln_2", "mlp.up_proj": "mlp.c_fc", "mlp.down_proj": "mlp.c_proj"}
        for i in range(config.n_layers):
            for a, b in parts.items():
                for kind in ("weight", "bias"):
                    names[f"layers.{i}.{a}.{kind}"] = f"{p}h.{i}.{b}.{kind}"
    else:
        names = {"embed.weight": p + "embed_tokens.weight", "norm.weight": p + "norm.weight"}
        parts = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
                 "attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
                 "attn.v_proj": "self_attn.v_proj", "attn.o_proj": "self_attn.o_proj",
                 "mlp.gate_proj": "mlp.gate_proj", "mlp.up_proj": "mlp.up_proj",
                 "mlp.down_proj": "mlp.down_proj"}
        biased = set()
        if config.attention_bias:
            biased |= {"attn.q_proj", "attn.k_proj", "attn.v_proj"}
            if config.arch == "llama":
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


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(_read_json(index)["weight_map"].values()))
        return [folder / s for s in shards]
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return files
    if any(folder.glob("*.bin")) or any(folder.glob("*.pt")):
        raise ValueError(f"{folder}: has only pickle weights (.bin/.pt); minillm reads "
                         "safetensors only. Re-save with transformers: "
                         "model.save_pretrained(folder, safe_serialization=True)")
    raise ValueError(f"{folder}: no .safetensors weight files")


def read_hf_folder(folder) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The config and weights (minillm's names, the file's dtype) of a Hugging Face folder."""
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder}: not a Hugging Face model folder (no config.json)")
    config = config_from_hf(_read_json(folder / "config.json"), folder)
    found = {}
    for file in _weight_files(folder):
        found.update(load_file(file))
    # GPT-2 saved as the bare GPT2Model has no "transformer." prefix; the others have "model.".
    prefix = "" if config.arch == "gpt2" and "wte.weight" in found else \
        ("transformer." if config.arch == "gpt2" else "model.")
    names = _names(config, prefix)
    weights = {}
    for ours, theirs in names.items():
        if theirs not in found:
            raise ValueError(f"{folder}: tensor {theirs!r} is missing (needed for {ours})")
        w = found[theirs]
        if config.arch == "gpt2" and w.dim() == 2 and ours.startswith("layers."):
            w = w.t().contiguous()  # GPT-2's Conv1D stores (in, out); nn.Linear wants (out, in)
        weights[ours] = w
    used = set(names.values()) | {"lm_head.weight"}
    extra = [n for n in found if n not in used and not n.endswith(_IGNORED_SUFFIXES)]
    if extra:
        raise ValueError(f"{folder}: unexpected tensors {extra[:5]} for a {config.arch} model "
                         "(a different architecture?)")
    return config, weights
