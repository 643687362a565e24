"""Pipeline parallelism (流水线并行): the layers split into consecutive stages, one per process.

Stage 0 embeds the tokens and runs the first layers, then sends the hidden state to stage 1, and so
on; the last stage applies the final norm and the LM head. One forward pass moves through the stages
in turn, so with a single request only one stage works at a time; real systems keep every stage busy
by feeding micro-batches one after another.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..model.inputs import prepare
from .tensor_parallel import split_evenly


class PipelineStage:
    """Layers `layers` of a minillm model, run as stage `rank` of `world_size`. The stage runs
    the model's own three steps (`embed_tokens`, `run_layers`, `logits`), each on its share."""

    def __init__(self, model, rank: int, world_size: int):
        from ..model import registry

        config = model.config
        registry.require(config, "pipeline_parallel")
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
        input_ids, position_ids, mask = prepare(c, input_ids, device=m.device)
        batch, seq = input_ids.shape
        if self.rank == 0:
            x = m.embed_tokens(input_ids, position_ids)
        else:
            x = torch.empty(batch, seq, c.hidden_size, dtype=m.dtype, device=m.device)
            dist.recv(x, src=self.rank - 1)
        x = m.run_layers(x, position_ids, mask, layers=[m.layers[i] for i in self.layers])
        if not self.is_last:
            dist.send(x.contiguous(), dst=self.rank + 1)
            self.sent_bytes += x.numel() * x.element_size()
            return None
        return m.logits(x)
