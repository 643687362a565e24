"""The converted copy: a GGUF file's dequantized weights, kept in the cache as safetensors.

Dequantizing SmolLM2's GGUF file takes several seconds; reading the converted copy takes well under
one. The copy lives in the cache's `converted/<file>-<size>-<mtime>/` as `config.json`
(minillm's ModelConfig) and `model.safetensors` (float32, minillm's tensor names). Safetensors
only: a pickle file could run code when loaded. A changed source file gets a new folder. A copy
in a read-only shared cache is read; a new one is written to the user's writable cache folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from ..files import cache_entry, writable_cache_dir, written_aside
from .config import ModelConfig

FORMAT = "minillm-converted-v1"
_COMPLETE = "complete"


def _relative(source: Path) -> Path:
    st = source.stat()
    return Path("converted") / f"{source.stem}-{st.st_size}-{st.st_mtime_ns}"


def converted_dir(source: Path) -> Path:
    """The converted copy of `source` in the cache folders, or where a new one is written."""
    return cache_entry(_relative(source), marker=_COMPLETE)


def read_converted(source: Path):
    """(config, weights) from the converted copy of `source`, or None when there is none."""
    from safetensors.torch import load_file

    folder = converted_dir(source)
    if not (folder / _COMPLETE).is_file() or (folder / _COMPLETE).read_text() != FORMAT:
        return None
    config = ModelConfig.from_json((folder / "config.json").read_text())
    return config, load_file(folder / "model.safetensors")


def write_converted(source: Path, config: ModelConfig, weights: dict[str, torch.Tensor]) -> Path:
    """Save a converted copy of `source` (written aside, then renamed into place) in the user's
    writable cache folder."""
    from safetensors.torch import save_file

    folder = writable_cache_dir() / _relative(source)
    with written_aside(folder, _COMPLETE) as partial:
        (partial / "config.json").write_text(config.to_json())
        save_file({k: v.contiguous() for k, v in weights.items()}, partial / "model.safetensors",
                  metadata={"format": FORMAT, "source": source.name})
        (partial / _COMPLETE).write_text(FORMAT)
        for old in folder.parent.glob(f"{source.stem}-*"):  # copies of an older version
            if old != folder and not old.name.startswith("."):
                shutil.rmtree(old, ignore_errors=True)
    return folder
