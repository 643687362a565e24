"""The reference the course checks itself against: the same GGUF file loaded by transformers.

transformers dequantizes the GGUF file into a Hugging Face model, which takes a while. The first
load saves that model and its tokenizer as a plain Hugging Face folder (safetensors) in the cache,
so later loads only read it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

from .files import (DEFAULT_MODEL, cache_entry, model_file, model_source,  # noqa: E402
                    writable_cache_dir, written_aside)

_COMPLETE = "minillm-complete"


def _transformers():
    """transformers' Auto classes, or an ImportError saying which extra brings them."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as error:
        raise ImportError("the reference model needs transformers, which the engine alone does "
                          "not install: pip install 'minillm-course[course]'") from error
    return AutoModelForCausalLM, AutoTokenizer


def reference_dir(name: str = DEFAULT_MODEL) -> Path:
    """The cache folder holding transformers' dequantized copy of the model (in a read-only
    shared cache when it is there, else in the user's writable one)."""
    return cache_entry(Path("hf") / model_source(name).name, marker=_COMPLETE)


def _convert(name: str, folder: Path) -> None:
    import torch

    AutoModelForCausalLM, AutoTokenizer = _transformers()
    gguf = model_file(name)
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 dtype=torch.float32)
    # The weights are now plain floats; drop the GGUF marker that stops transformers saving them.
    model.hf_quantizer = None
    model.config.quantization_config = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with written_aside(folder, _COMPLETE) as partial:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        (partial / _COMPLETE).write_text(f"converted from {gguf.name} in "
                                         f"{time.perf_counter() - start:.1f} s\n")


def load_reference(name: str = DEFAULT_MODEL, dtype=None, device: str = "cpu"):
    """Load the model and tokenizer with transformers, as a reference for minillm.

    Returns `(model, tokenizer)`: a transformers `LlamaForCausalLM` in eval mode and its fast
    tokenizer. The first call converts the GGUF file; later calls read the cache."""
    import torch

    AutoModelForCausalLM, AutoTokenizer = _transformers()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder = reference_dir(name)
    if not (folder / _COMPLETE).is_file():
        folder = writable_cache_dir() / "hf" / model_source(name).name
        _convert(name, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype or torch.float32)
    return model.to(device).eval(), tokenizer
