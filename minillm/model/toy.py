"""A tiny random Llama and two toy tokenizers, for tests, exercise checkers and quick demos of the
engine: the scheduling and the block accounting are the same as on the real model, only faster.

    LetterTokenizer   token n is a letter: text in, text out
    CharTokenizer     JSON's characters and a few longer pieces, with an EOS token: enough for a
                      random model to write JSON under a constraint (minillm.decoding)"""

from __future__ import annotations

import torch


class LetterTokenizer:
    """Token id n is the letter chr(ord('a') + n % 26); `eos_token_ids` as given."""

    def __init__(self, eos_token_ids=()):
        self.eos_token_ids = list(eos_token_ids)
        self.pad_token_id = None

    def encode(self, text: str) -> list[int]:
        return [ord(c) - ord("a") for c in text if "a" <= c <= "z"]

    def decode(self, ids) -> str:
        return "".join(chr(ord("a") + int(i) % 26) for i in ids)


class CharTokenizer:
    """One token per character of JSON's alphabet, some longer pieces ('{"', 'true', ...), and
    an end-of-sequence token, the last id. `apply_chat_template` joins the messages' text."""

    PIECES = (list('{}[]":, -.+0123456789abcdefghijklmnopqrstuvwxyzE\\\n') +
              ['{"', '":', '", "', ' "', '"}', '"]', 'true', 'false', 'null', 'name', 'age',
               'e-', '12', '", ', 'color'])

    def __init__(self):
        self.eos_token_ids = [len(self.PIECES)]
        self.special_tokens = {"<eos>": self.eos_token_ids[0]}
        self.vocab_size = len(self.PIECES) + 1
        self.pad_token_id = None

    def decode(self, ids) -> str:
        return "".join(self.PIECES[i] if i < len(self.PIECES) else "" for i in ids)

    def encode(self, text: str) -> list[int]:
        return [self.PIECES.index(c) for c in text if c in self.PIECES]

    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        return " ".join(m["content"] for m in messages) + ":"


def tiny_model(vocab_size: int = 64, hidden_size: int = 32, n_layers: int = 2,
               max_seq_len: int = 512, seed: int = 0, eos_token_ids=()):
    """A random-weight Llama (minillm.model.LlamaModel) small enough to run thousands of steps in
    seconds on a CPU, with a letter tokenizer. Returns (model, tokenizer)."""
    from ..model import LlamaModel, ModelConfig

    config = ModelConfig(arch="llama", vocab_size=vocab_size, hidden_size=hidden_size,
                         n_layers=n_layers, n_heads=4, n_kv_heads=2, head_dim=hidden_size // 4,
                         intermediate_size=2 * hidden_size, max_seq_len=max_seq_len,
                         eos_token_ids=tuple(eos_token_ids))
    torch.manual_seed(seed)
    model = LlamaModel(config)
    with torch.no_grad():  # larger logits than the default init, so greedy choices are clear
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    return model.eval(), LetterTokenizer(eos_token_ids)
