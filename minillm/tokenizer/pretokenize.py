"""Pre-tokenization (预分词): cutting text into words before BPE sees it.

BPE never merges across the pieces this step produces, so " the" and "the" become separate
vocabulary entries, and digits, punctuation and whitespace stay apart from letters. Every
byte-level tokenizer of the GPT-2 family uses a regular expression for this; the model's pattern
must be used exactly, or the ids differ from the ones the model was trained on.

`\\p{L}` (any letter) and `\\p{N}` (any number) need the `regex` module; Python's `re` has no
Unicode property classes.
"""

from __future__ import annotations

import unicodedata

import regex

# GPT-2's pattern, used by SmolLM2: contractions, an optional space then letters, an optional
# space then digits, an optional space then other symbols, and whitespace (a run of spaces gives
# its last space to the next word, so " the" keeps its space).
GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"
                r"|\s+(?!\S)|\s+")
# The same splits, found faster: letters are tried first (an alternative that starts with a
# letter or a space can never compete with one that starts with an apostrophe). A test checks
# that both give the same pieces.
_GPT2_FAST = (r" ?\p{L}+|'(?:[stmd]|re|ve|ll)| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
_EQUIVALENT = {GPT2_PATTERN: _GPT2_FAST}
# Llama 3: case-insensitive contractions, at most three digits a piece, newlines kept together.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2: like Llama 3, but every digit is a piece of its own.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# The `tokenizer.ggml.pre` names a GGUF file may carry, as transformers reads them; any other name
# means GPT-2's pattern.
GGUF_PRE_PATTERNS = {
    **dict.fromkeys(["llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe"],
                    LLAMA3_PATTERN),
    **dict.fromkeys(["qwen2", "deepseek-r1-qwen"], QWEN2_PATTERN),
}


class PreTokenizer:
    """Cuts text into the pieces BPE encodes one by one.

    `steps` is a list of dicts, applied in order, each cutting every piece further:
      {"type": "split", "pattern": P}   the matches of regex P become pieces (text between two
                                        matches, if any, is a piece too)
      {"type": "digits", "individual": B} digits apart from the rest; one piece per digit if B
    `normalizer` is None or "NFC" (Unicode composition, applied to the text first)."""

    def __init__(self, steps: list[dict] | None = None, normalizer: str | None = None):
        self.steps = [dict(step) for step in (steps or [{"type": "split", "pattern": GPT2_PATTERN}])]
        if normalizer not in (None, "NFC"):
            raise ValueError(f"unsupported normalizer {normalizer!r}; minillm knows None and 'NFC'")
        self.normalizer = normalizer
        self._compiled = [self._compile(step) for step in self.steps]

    @staticmethod
    def _compile(step: dict):
        kind = step.get("type")
        if kind == "split":
            return regex.compile(_EQUIVALENT.get(step["pattern"], step["pattern"]))
        if kind == "digits":
            return regex.compile(r"\p{N}" if step.get("individual") else r"\p{N}+")
        raise ValueError(f"unknown pre-tokenizer step {step!r}; minillm knows 'split' and 'digits'")

    def __call__(self, text: str) -> list[str]:
        if self.normalizer == "NFC":
            text = unicodedata.normalize("NFC", text)
        if len(self._compiled) == 1 and self.steps[0]["type"] == "split":
            return split_isolated(self._compiled[0], text)
        pieces = [text]
        for compiled in self._compiled:
            pieces = [part for piece in pieces for part in split_isolated(compiled, piece)]
        return pieces

    def to_dict(self) -> dict:
        return {"steps": self.steps, "normalizer": self.normalizer}

    def __repr__(self) -> str:
        return f"PreTokenizer(steps={self.steps!r}, normalizer={self.normalizer!r})"


def split_isolated(pattern, text: str) -> list[str]:
    """Every match of `pattern` is a piece, and so is any text between matches."""
    if pattern.groups == 0:  # the fast path, when the matches cover the whole text
        pieces = pattern.findall(text)
        if sum(map(len, pieces)) == len(text) and "" not in pieces:
            return pieces
    pieces, end = [], 0
    for match in pattern.finditer(text):
        start = match.start()
        if start > end:
            pieces.append(text[end:start])
        if match.end() > start:
            pieces.append(match.group())
        end = match.end()
    if end < len(text):
        pieces.append(text[end:])
    return pieces


def from_hf_pre_tokenizer(config: dict | None, normalizer: dict | None = None) -> PreTokenizer:
    """The PreTokenizer for the `pre_tokenizer` (and `normalizer`) sections of a tokenizer.json."""
    norm = None
    if normalizer is not None:
        if normalizer.get("type") == "NFC":
            norm = "NFC"
        elif normalizer.get("type") == "Sequence" and not normalizer.get("normalizers"):
            norm = None
        else:
            raise ValueError(f"unsupported normalizer in tokenizer.json: {normalizer}; "
                             "minillm supports none or NFC")
    steps: list[dict] = []

    def add(cfg):
        kind = cfg.get("type")
        if kind == "Sequence":
            for sub in cfg.get("pretokenizers", []):
                add(sub)
        elif kind == "ByteLevel":
            if cfg.get("add_prefix_space"):
                raise ValueError("ByteLevel with add_prefix_space=True is not supported")
            if cfg.get("use_regex", True):
                steps.append({"type": "split", "pattern": GPT2_PATTERN})
        elif kind == "Split":
            pattern = cfg.get("pattern", {})
            if cfg.get("behavior", "Isolated") != "Isolated" or cfg.get("invert"):
                raise ValueError(f"unsupported Split pre-tokenizer {cfg}; minillm supports "
                                 "behavior 'Isolated' without invert")
            if "Regex" in pattern:
                steps.append({"type": "split", "pattern": pattern["Regex"]})
            else:
                steps.append({"type": "split", "pattern": regex.escape(pattern["String"])})
        elif kind == "Digits":
            steps.append({"type": "digits", "individual": bool(cfg.get("individual_digits"))})
        else:
            raise ValueError(f"unsupported pre-tokenizer {kind!r} in tokenizer.json; minillm "
                             "supports ByteLevel, Split, Digits and Sequence of them")

    if config is None:
        raise ValueError("tokenizer.json has no pre_tokenizer: not a byte-level BPE")
    add(config)
    if not steps:
        raise ValueError(f"the pre-tokenizer {config} splits nothing; minillm needs a split rule")
    return PreTokenizer(steps, norm)
