"""A tiny random Llama and a letter tokenizer, for tests, exercise checkers and quick demos of the
engine: the scheduling and the block accounting are the same as on the real model, only faster."""

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
