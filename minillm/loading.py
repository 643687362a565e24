"""`minillm.load`: a model name, a GGUF file or a Hugging Face folder -> minillm's model (the
fast path by default) and its tokenizer. It sits above minillm.model (the network), minillm.fast
(the faster copy of it) and minillm.tokenizer, and joins them."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch

from .layers.rope import SCALINGS
from .model import build_model, registry


def _gguf_weights(path: Path):
    from .model.converted import read_converted, write_converted
    from .model.gguf_loader import read_gguf

    cached = read_converted(path)
    if cached is not None:
        return cached
    config, weights = read_gguf(path)
    write_converted(path, config, weights)
    return config, weights


def _source(name_or_path) -> tuple[str, Path]:
    """("gguf", file) or ("hf", folder) for a model name or a path."""
    from .files import model_file

    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"load takes a model name, a .gguf file or a model folder, "
                        f"not {type(name_or_path).__name__}")
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return "hf", path
    if path.suffix == ".gguf" or path.exists():
        if not path.is_file():
            raise FileNotFoundError(f"no model file at {path}")
        if path.suffix != ".gguf":
            raise ValueError(f"{path} is not a .gguf file or a model folder")
        return "gguf", path
    try:
        return "gguf", model_file(str(name_or_path))
    except ValueError as error:
        raise ValueError(f"{name_or_path!r} is neither an existing path nor a known model "
                         f"name ({error})") from None


def load_model(name_or_path, dtype=torch.float32, device="auto", *, fast: bool = True,
               weights=None, rope_scaling=None) -> torch.nn.Module:
    """minillm's model alone (no tokenizer): see `load`."""
    kind, path = _source(name_or_path)
    if kind == "gguf":
        config, tensors = _gguf_weights(path)
    else:
        from .model.hf_loader import read_hf_folder
        config, tensors = read_hf_folder(path)
    if not isinstance(fast, bool):
        raise TypeError(f"fast must be True (the fast path) or False (the readable model), "
                        f"got {fast!r}")
    if weights is not None and not fast:
        raise ValueError("weights= chooses the fast path's weight format; it needs fast=True")
    if weights == "q4_1":
        device = _q4_1_device(device)
    if rope_scaling is not None:
        config = config.with_rope_scaling(*_rope_scaling(rope_scaling))
    model = build_model(config, tensors, dtype=dtype, device=device)
    if weights == "q4_1":
        _use_q4_1_blocks(model, kind, path)
    if fast and "fast" in registry.architecture(config.arch).features:
        from .fast import optimize_in_place
        from .kernels import dispatch

        model = optimize_in_place(model, weights)
        dispatch.announce(model.device, weights)  # which kernels decode, or why none: once
    elif weights is not None:
        registry.require(config, "fast")
    return model


def _rope_scaling(value) -> tuple:
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], str)):
        raise TypeError(f"rope_scaling must be (kind, factor), kind one of "
                        f"{', '.join(map(repr, SCALINGS))}: for example ('yarn', 4); "
                        f"got {value!r}")
    return tuple(value)


def _q4_1_device(device):
    """Where Q4_1 blocks run: minillm's CPU kernel, so "auto" means the CPU (said once when it
    would have picked a GPU); a device named outright is kept (and refused later if not the
    CPU)."""
    from .utils.devices import pick_device
    from .utils.notices import say_once

    if not (isinstance(device, str) and device == "auto"):
        return device
    auto = pick_device("auto")
    if auto.type != "cpu":
        say_once(f"weights='q4_1' runs the file's 4-bit blocks on the CPU (minillm's Q4_1 "
                 f"kernel), so this model is loaded on the CPU, not on {auto.type}; for the "
                 f"GPU use weights='int8', 'bf16' or 'fp16'")
    return "cpu"


def _use_q4_1_blocks(model, kind: str, path) -> None:
    """Swap every linear layer the GGUF file stores as Q4_1 for a Q41Linear holding its blocks."""
    from .layers.linear import replace_module
    from .quant.gguf_q4_1 import q4_1_linears
    from .quant.linear import Q41Linear

    if kind != "gguf":
        raise ValueError(f"weights='q4_1' runs a GGUF file's own Q4_1 blocks; {path} is a "
                         "Hugging Face folder: use 'int8' (or a float format) for it")
    if model.device.type != "cpu":
        raise ValueError("weights='q4_1' runs minillm's CPU kernel: load on device='cpu'")
    blocks = q4_1_linears(path, model.config)
    if not blocks:
        raise ValueError(f"{path.name} stores no linear layer as Q4_1")
    for name, raw in blocks.items():
        module = name.rsplit(".", 1)[0]
        replace_module(model, module, Q41Linear(raw, model.get_submodule(module).bias))


def load(name_or_path="smollm2-135m", dtype=torch.float32, device="auto", *, fast: bool = True,
         weights=None, rope_scaling=None):
    """Load a model with minillm's own code. Returns `(model, tokenizer)`.

    `name_or_path` is a known model name ("smollm2-135m"), a .gguf file, or a local Hugging Face
    folder (config.json + safetensors; the families of minillm.model.registry: Llama, Qwen2,
    Qwen3, GPT-2). A GGUF file is dequantized once and a float32 copy kept in the cache
    (safetensors), so later loads take about a second. `device="auto"` picks the GPU when there
    is one.

    `fast=True` (the default) gives the fast path (`minillm.fast.optimize`): the same network and
    the same tokens, its projections fused and its linear layers stored for speed, and `weights`
    ("fp32", "bf16", "fp16", "int8", or "q4_1": a GGUF file's own 4-bit blocks, on the CPU,
    which `device="auto"` then picks; default: `dtype`) chooses how those are stored. `fast=False`
    gives the readable model the lessons open up: q_proj, k_proj, v_proj, ... as chapter 02
    draws them.

    `rope_scaling=(kind, factor)` reads `factor` times the trained context: kind "pi" (position
    interpolation), "ntk" (NTK-aware), "yarn", or "none" (the trained angles, read further:
    minillm.layers.rope.RopeScaling).

    The tokenizer is minillm's own (`minillm.load_tokenizer`). A folder without tokenizer files
    gives `(model, None)`; so does a folder whose tokenizer minillm cannot read (with a warning)."""
    kind, path = _source(name_or_path)
    model = load_model(path, dtype=dtype, device=device, fast=fast, weights=weights,
                       rope_scaling=rope_scaling)
    from .tokenizer import load_tokenizer

    if kind == "gguf":
        is_name = not Path(name_or_path).expanduser().exists()
        return model, load_tokenizer(str(name_or_path) if is_name else str(path))
    try:
        return model, load_tokenizer(str(path))
    except (ValueError, TypeError, FileNotFoundError) as error:
        if (path / "tokenizer.json").is_file():  # there is one, but minillm cannot read it
            warnings.warn(f"{path}: model loaded without a tokenizer: {error}", stacklevel=2)
        return model, None
