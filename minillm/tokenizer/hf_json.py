"""Reading a Hugging Face model folder's `tokenizer.json` (byte-level BPE: GPT-2, Llama 3, Qwen2).

tokenizer.json holds the vocabulary (`model.vocab`), the merges (`model.merges`, as "a b" strings
or [a, b] lists), the tokens added on top (`added_tokens`) and the normalizer and pre-tokenizer.
The special tokens' roles (which one is EOS) come from tokenizer_config.json and
generation_config.json beside it; the chat template from tokenizer_config.json or
chat_template.jinja.
"""

from __future__ import annotations

import json
from pathlib import Path

from .pretokenize import from_hf_pre_tokenizer


def _token_text(value):
    if isinstance(value, dict):
        return value.get("content")
    return value


def tokenizer_from_hf_folder(folder):
    from .tokenizer import Tokenizer

    folder = Path(folder)
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise ValueError(f"{path} describes a {model.get('type')!r} model; minillm reads "
                         "byte-level BPE tokenizers only")
    if (data.get("decoder") or {}).get("type") not in ("ByteLevel", None):
        raise ValueError(f"{path} has a {data['decoder'].get('type')!r} decoder; minillm reads "
                         "byte-level BPE tokenizers only (decoder ByteLevel)")
    vocab: dict[str, int] = model["vocab"]
    added = data.get("added_tokens") or []
    size = max(list(vocab.values()) + [t["id"] for t in added]) + 1
    tokens: list[str | None] = [None] * size
    for spelling, i in vocab.items():
        tokens[i] = spelling
    special = {t["content"]: t["id"] for t in added if t.get("special")}
    plain = {t["content"]: t["id"] for t in added if not t.get("special")}
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    pre = from_hf_pre_tokenizer(data.get("pre_tokenizer"), data.get("normalizer"))

    config = {}
    if (folder / "tokenizer_config.json").is_file():
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    generation = {}
    if (folder / "generation_config.json").is_file():
        generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    every = {**vocab, **{t["content"]: t["id"] for t in added}}

    def role(name):
        text = _token_text(config.get(name))
        return every.get(text) if text is not None else None

    eos = role("eos_token")
    extra = generation.get("eos_token_id")
    extra = [extra] if isinstance(extra, int) else list(extra or [])
    if eos is None and extra:
        eos = extra[0]
    template = config.get("chat_template")
    if template is None and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    if isinstance(template, list):  # a list of named templates: take "default"
        template = {t["name"]: t["template"] for t in template}.get("default")
    bos = role("bos_token")
    if bos is None:
        bos = generation.get("bos_token_id")
    pad = role("pad_token")
    return Tokenizer(tokens, merges, special, added_tokens=plain, pre_tokenizer=pre,
                     bos_token_id=bos, eos_token_id=eos, pad_token_id=pad, eos_token_ids=extra,
                     chat_template=template, ignore_merges=bool(model.get("ignore_merges")),
                     name=folder.name)
