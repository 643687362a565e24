"""The numbers that describe a model: one small dataclass for every architecture minillm runs."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace

from ..layers.rope import RopeScaling
from .registry import architecture, require


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a transformer, read from a GGUF file's metadata or a Hugging Face config.json.

    arch                a name in minillm.model.registry: "llama", "qwen2", "qwen3", "gpt2"
    vocab_size          rows of the embedding table
    hidden_size         width of the residual stream (d_model)
    n_layers            transformer blocks
    n_heads, n_kv_heads query heads and key/value heads (fewer key/value heads: grouped-query attention)
    head_dim            width of one head
    intermediate_size   width of the feed-forward layer's hidden part
    rope_theta          base of the rotary position embedding (unused by gpt2)
    norm_eps            epsilon of RMSNorm / LayerNorm
    max_seq_len         the context window: the most positions the model was trained for (or,
                        with rope_scaling, reads)
    rope_scaling        None (plain RoPE) or a minillm.layers.rope.RopeScaling
    tie_embeddings      the LM head reuses the token embedding matrix
    eos_token_ids       the ids that end generation (may be empty)
    bos_token_id        the beginning-of-sequence id, or None
    attention_bias      biases on the q, k and v projections (Qwen2 has them)
    attention_out_bias  a bias on the attention's output projection
    mlp_bias            biases on the feed-forward layer's projections
    """

    arch: str
    vocab_size: int
    hidden_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 2048
    tie_embeddings: bool = False
    eos_token_ids: tuple = ()
    bos_token_id: int | None = None
    attention_bias: bool = False
    attention_out_bias: bool = False
    mlp_bias: bool = False
    rope_scaling: RopeScaling | None = None

    def __post_init__(self):
        architecture(self.arch)  # ValueError naming the architectures minillm runs
        for name in ("vocab_size", "hidden_size", "n_layers", "n_heads", "n_kv_heads",
                     "head_dim", "intermediate_size", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"config field {name} must be a positive int, got {value!r}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads "
                             f"({self.n_kv_heads}) for grouped-query attention")
        if self.arch != "gpt2" and self.head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head_dim, got {self.head_dim}")
        if self.arch == "gpt2" and self.n_kv_heads != self.n_heads:
            raise ValueError("gpt2 has as many key/value heads as query heads, got "
                             f"n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}")
        object.__setattr__(self, "eos_token_ids", tuple(int(i) for i in self.eos_token_ids))
        if isinstance(self.rope_scaling, dict):  # from JSON
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
        if self.rope_scaling is not None:
            if not isinstance(self.rope_scaling, RopeScaling):
                raise TypeError(f"rope_scaling must be None or a RopeScaling, got "
                                f"{type(self.rope_scaling).__name__}")
            require(self, "rope_scaling")

    def with_rope_scaling(self, kind: str, factor: float) -> "ModelConfig":
        """This config reading `factor` times its trained context with RoPE scaling `kind`
        ("none", "pi", "ntk" or "yarn"): max_seq_len grows by the factor."""
        if self.rope_scaling is not None:
            raise ValueError(f"this model already scales RoPE ({self.rope_scaling.kind} x"
                             f"{self.rope_scaling.factor:g}); scale the original instead")
        scaling = RopeScaling(kind, factor, self.max_seq_len)
        return replace(self, rope_scaling=scaling, max_seq_len=int(self.max_seq_len * factor))

    @property
    def n_groups(self) -> int:
        """Query heads that share one key/value head."""
        return self.n_heads // self.n_kv_heads

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "ModelConfig":
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown config fields {sorted(unknown)}")
        return cls(**data)
