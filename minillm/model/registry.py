"""The model families minillm runs, and what each can do: the one list every loader and guard
reads. Adding a family is its own file in minillm/model/ plus one entry here.

A family's file defines its model class and how its checkpoints map onto it:

    MODEL                                    the nn.Module class (built from minillm.layers)
    config_from_hf(cfg, arch, folder)        a Hugging Face config.json dict -> ModelConfig
    hf_weight_names(config, found)           minillm's tensor name -> the checkpoint's name
    hf_weight(name, tensor)                  a checkpoint tensor as minillm stores it
    config_from_gguf(field, arch, tensors, path)   GGUF metadata -> ModelConfig (GGUF families)
    gguf_weight_names(config)                minillm's tensor name -> the GGUF tensor name
    gguf_weight(name, array, config)         a dequantized GGUF tensor as minillm stores it
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

FEATURES = {
    "fast": "the fast path (minillm.fast.optimize)",
    "tensor_parallel": "tensor parallelism (minillm.distributed)",
    "pipeline_parallel": "pipeline parallelism (minillm.distributed)",
    "rope_scaling": "RoPE scaling (load(rope_scaling=))",
}


@dataclass(frozen=True)
class Architecture:
    name: str                      # ModelConfig.arch
    family: str                    # the module in minillm/model/ with its code
    hf_model_types: tuple = ()     # config.json "model_type" values it loads
    gguf_name: str | None = None   # GGUF "general.architecture", when minillm reads its files
    features: frozenset = frozenset()

    def module(self):
        return importlib.import_module(f"minillm.model.{self.family}")

    @property
    def model_class(self):
        return self.module().MODEL


_EVERYTHING = frozenset(FEATURES)
ARCHITECTURES = {a.name: a for a in [
    Architecture("llama", "llama", ("llama",), "llama", _EVERYTHING),
    Architecture("qwen2", "llama", ("qwen2",), "qwen2", _EVERYTHING),
    Architecture("qwen3", "qwen3", ("qwen3",), None, _EVERYTHING),
    Architecture("gpt2", "gpt2", ("gpt2",), "gpt2", frozenset({"fast", "pipeline_parallel"})),
]}


def names(feature: str | None = None) -> list[str]:
    """The architectures minillm runs (those with `feature`, when given)."""
    return [a.name for a in ARCHITECTURES.values() if feature is None or feature in a.features]


def architecture(name: str) -> Architecture:
    """The registry's entry for `name` (a ModelConfig.arch); ValueError naming the known ones."""
    if name not in ARCHITECTURES:
        raise ValueError(f"unsupported architecture {name!r}; minillm runs {', '.join(names())}")
    return ARCHITECTURES[name]


def require(config, feature: str) -> None:
    """ValueError unless the model `config` describes can use `feature` (a key of FEATURES)."""
    arch = architecture(config.arch)
    if feature not in arch.features:
        raise ValueError(f"{FEATURES[feature]} runs {', '.join(names(feature))}, not "
                         f"{config.arch!r}")


def from_hf_type(model_type, where) -> Architecture:
    for a in ARCHITECTURES.values():
        if model_type in a.hf_model_types:
            return a
    known = [t for a in ARCHITECTURES.values() for t in a.hf_model_types]
    raise ValueError(f"{where}: unsupported architecture {model_type!r} (config.json "
                     f"model_type); minillm loads {', '.join(known)}")


def from_gguf_name(name, where) -> Architecture:
    for a in ARCHITECTURES.values():
        if a.gguf_name is not None and a.gguf_name == name:
            return a
    known = [a.gguf_name for a in ARCHITECTURES.values() if a.gguf_name]
    raise ValueError(f"{where}: unsupported architecture {name!r}; minillm reads GGUF files of "
                     f"{', '.join(known)}")
