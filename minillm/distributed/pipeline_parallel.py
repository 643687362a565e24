"""Pipeline parallelism (流水线并行): the layers split into consecutive stages, one per process.

Stage 0 embeds the tokens and runs the first layers, then sends the hidden state to stage 1, and so
on; the last stage applies the final norm and the LM head. One forward pass moves through the stages
in turn, so with a single request only one stage works at a time; real systems keep every stage busy
by feeding micro-batches one after another.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..model.inputs import prepare
from ..model.llama import rms_norm, rope_cos_sin
from .tensor_parallel import split_evenly


class PipelineStage:
    """Layers `layers` of a Llama-family model, run as stage `rank` of `world_size`."""

    def __init__(self, model, rank: int, world_size: int):
        config = model.config
        if config.arch not in ("llama", "qwen2"):
            raise ValueError(f"pipeline stages here split llama and qwen2 models, not {config.arch!r}")
        self.model, self.config, self.rank, self.world_size = model, config, rank, world_size
        self.layers = split_evenly(config.n_layers, world_size)[rank]
        for i in range(config.n_layers):  # a stage keeps only its own layers' weights
            if i not in self.layers:
                model.layers[i] = torch.nn.Identity()
        self.sent_bytes = 0

    def held_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def is_last(self) -> bool:
        return self.rank == self.world_size - 1

    def forward(self, input_ids: torch.Tensor):
        """Run this stage on the prompt `input_ids` (batch, seq), which every stage knows.
        Returns the logits on the last stage, None elsewhere."""
        c, m = self.config, self.model
        position_ids, mask = prepare(c, input_ids)
        batch, seq = input_ids.shape
        if self.rank == 0:
            x = m.embed(input_ids)
        else:
            x = torch.empty(batch, seq, c.hidden_size, dtype=m.dtype)
            dist.recv(x, src=self.rank - 1)
        cos, sin = rope_cos_sin(position_ids, c.head_dim, c.rope_theta, x.dtype)
        for i in self.layers:
            x = m.layers[i](x, cos, sin, mask)
        if not self.is_last:
            dist.send(x.contiguous(), dst=self.rank + 1)
            self.sent_bytes += x.numel() * x.element_size()
            return None
        head = m.embed.weight if m.lm_head is None else m.lm_head.weight
        return F.linear(rms_norm(x, m.norm.weight, c.norm_eps), head).float()
