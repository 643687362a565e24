"""Read a GGUF file (llama.cpp's format) into minillm's config and float32 weights.

The `gguf` package parses the file; `gguf.quants.dequantize` turns each quantized tensor (Q4_1,
Q8_0, ...) back into floats. What each family's tensors are called, and how a tensor must be
turned to fit minillm's layers (Llama's q/k rows: `minillm.model.llama.unpermute`), lives in the
family's own file, found through minillm.model.registry.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from . import registry
from .config import ModelConfig


def read_gguf(path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The config and the dequantized float32 weights (minillm's names) of a GGUF file."""
    import gguf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    reader = gguf.GGUFReader(path)

    def field(key, default=None, required=False):
        f = reader.get_field(key)
        if f is None:
            if required:
                raise ValueError(f"{path.name}: GGUF metadata has no {key!r}")
            return default
        return f.contents()

    arch = registry.from_gguf_name(field("general.architecture"), path.name)
    family = arch.module()
    tensors = {t.name: t for t in reader.tensors}
    config = family.config_from_gguf(field, arch.name, tensors, path)
    weights = {}
    for ours, theirs in family.gguf_weight_names(config).items():
        if theirs not in tensors:
            raise ValueError(f"{path.name}: tensor {theirs!r} is missing (needed for {ours})")
        t = tensors[theirs]
        shape = tuple(int(n) for n in reversed(t.shape))  # GGUF lists the fastest axis first
        w = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape)
        w = family.gguf_weight(ours, w, config)
        weights[ours] = torch.from_numpy(np.array(w, dtype=np.float32))  # a writable copy
    return config, weights
