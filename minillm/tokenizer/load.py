"""`load_tokenizer(name_or_path)`: one entry point for every place a tokenizer comes from."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .gguf_vocab import tokenizer_from_gguf
from .hf_json import tokenizer_from_hf_folder
from .tokenizer import FORMAT, Tokenizer

SAVED_NAME = "minillm-tokenizer.json"


def load_tokenizer(name_or_path="smollm2-135m") -> Tokenizer:
    """Load a tokenizer from
      - a model name minillm knows, such as "smollm2-135m" (read from the model's GGUF file),
      - a .gguf file (its tokenizer metadata),
      - a tokenizer saved by `Tokenizer.save` (the .json file or the folder holding it),
      - a Hugging Face model folder with a byte-level BPE `tokenizer.json`."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError("load_tokenizer takes a model name or a path, not "
                        f"{type(name_or_path).__name__}")
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if (path / SAVED_NAME).is_file():
            return _load_saved(path / SAVED_NAME)
        if (path / "tokenizer.json").is_file():
            return tokenizer_from_hf_folder(path)
        raise ValueError(f"{path} is a folder with neither {SAVED_NAME} (a saved minillm "
                         "tokenizer) nor tokenizer.json (a Hugging Face tokenizer)")
    if path.is_file():
        if path.suffix == ".gguf":
            return tokenizer_from_gguf(path)
        if path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") == FORMAT:
                return Tokenizer.from_dict(data)
            if "model" in data:
                if path.name != "tokenizer.json":
                    raise ValueError(f"{path} looks like a Hugging Face tokenizer.json: pass the "
                                     "folder that holds it (named tokenizer.json)")
                return tokenizer_from_hf_folder(path.parent)
            raise ValueError(f"{path} is neither a saved minillm tokenizer nor a tokenizer.json")
        raise ValueError(f"cannot read a tokenizer from {path}: expected a .gguf file, a saved "
                         "minillm tokenizer (.json) or a model folder")
    if isinstance(name_or_path, str) and not any(sep in name_or_path for sep in "/\\"):
        from ..files import model_file, model_source

        try:
            model_source(name_or_path)
        except ValueError as error:
            raise ValueError(f"{error}; or pass a .gguf file, a saved tokenizer or a model "
                             "folder") from None
        tokenizer = tokenizer_from_gguf(model_file(name_or_path))
        tokenizer.name = model_source(name_or_path).name
        return tokenizer
    raise FileNotFoundError(f"no tokenizer at {path}: nothing exists there")


def _load_saved(path: Path) -> Tokenizer:
    return Tokenizer.from_dict(json.loads(path.read_text(encoding="utf-8")))
