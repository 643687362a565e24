"""The feed-forward layers (前馈网络): SwiGLU for the Llama family, GELU for GPT-2."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .linear import fuse_linears


class GatedMLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)). `fuse()` stacks gate and up into one matrix."""

    def __init__(self, config):
        super().__init__()
        d, f, bias = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.intermediate_size = f
        self.gate_proj = nn.Linear(d, f, bias=bias)
        self.up_proj = nn.Linear(d, f, bias=bias)
        self.down_proj = nn.Linear(f, d, bias=bias)

    @property
    def is_fused(self) -> bool:
        return "gate_up_proj" in self._modules

    def fuse(self, make_linear=None) -> None:
        """Replace gate_proj and up_proj by one `gate_up_proj` (one multiplication, same numbers)."""
        if self.is_fused:
            return
        self.gate_up_proj = fuse_linears((self.gate_proj, self.up_proj), make_linear)
        del self.gate_proj, self.up_proj

    # SiLU(gate) * up of the fused projection's float32 rows on a CPU in one pass, the same bits:
    # minillm.fast sets a function here that gives (rows, F), or None where its kernel does not
    # run now; None here: PyTorch's operations
    silu_mul = None

    def forward(self, x):
        if "gate_up_proj" in self._modules:
            gate_up, f = self._modules["gate_up_proj"](x), self.intermediate_size
            if self.silu_mul is not None and gate_up.dtype is torch.float32 and gate_up.is_cpu \
                    and gate_up.is_contiguous():
                rows = self.silu_mul(gate_up.reshape(-1, 2 * f))
                if rows is not None:
                    return self.down_proj(rows.reshape(*gate_up.shape[:-1], f))
            return self.down_proj(F.silu(gate_up[..., :f]).mul_(gate_up[..., f:]))
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GeluMLP(nn.Module):
    """GPT-2's feed-forward layer: down(gelu(up(x))), with the tanh approximation."""

    def __init__(self, config):
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x):
        return self.down_proj(F.gelu(self.up_proj(x), approximate="tanh"))
