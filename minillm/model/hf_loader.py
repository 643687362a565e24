"""Read a local Hugging Face model folder (config.json + safetensors) into minillm's config and
weights, for every family in minillm.model.registry with Hugging Face model types. Weights are
read with safetensors only, never with pickle (a `pytorch_model.bin` is refused: loading one can
run arbitrary code)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from . import registry
from .config import ModelConfig

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


def config_from_hf(cfg: dict, folder: Path) -> ModelConfig:
    """minillm's config from the dict of a Hugging Face config.json."""
    arch = registry.from_hf_type(cfg.get("model_type"), folder)
    return arch.module().config_from_hf(cfg, arch.name, folder, _eos_ids(folder, cfg))


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
    family = registry.architecture(config.arch).module()
    found = {}
    for file in _weight_files(folder):
        found.update(load_file(file))
    names = family.hf_weight_names(config, found)
    weights = {}
    for ours, theirs in names.items():
        if theirs not in found:
            raise ValueError(f"{folder}: tensor {theirs!r} is missing (needed for {ours})")
        weights[ours] = family.hf_weight(ours, found[theirs])
    used = set(names.values()) | {"lm_head.weight"}
    extra = [n for n in found if n not in used and not n.endswith(_IGNORED_SUFFIXES)]
    if extra:
        raise ValueError(f"{folder}: unexpected tensors {extra[:5]} for a {config.arch} model "
                         "(a different architecture?)")
    return config, weights
