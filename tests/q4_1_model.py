"""A small model's linear layers held as GGUF Q4_1 blocks, as `minillm.load(..., weights="q4_1")`
holds the course file's: for tests of the Q4_1 path without the 98 MB file."""

import torch
import torch.nn as nn

from minillm.layers.linear import replace_module
from minillm.quant.int4 import quantize_int4
from minillm.quant.linear import Q41Linear


def q4_1_blocks(weight):
    """The GGUF Q4_1 blocks of a weight (out, in): per 32 weights d, m (float16), 16 bytes."""
    packed, d, m = quantize_int4(weight, 32)
    rows, groups = d.shape
    fields = [d.contiguous().view(torch.uint8).view(rows, groups, 2),
              m.contiguous().view(torch.uint8).view(rows, groups, 2),
              packed.view(rows, groups, 16)]
    return torch.cat(fields, dim=-1).reshape(rows, groups * 20).contiguous()


def with_q4_1(model):
    """`model` with each linear layer of its blocks held as Q4_1 blocks, as load(weights="q4_1")
    gives them (the LM head stays, as in the course file)."""
    for name, module in list(model.layers.named_modules()):
        if isinstance(module, nn.Linear):
            replace_module(model.layers, name, Q41Linear(q4_1_blocks(module.weight),
                                                        module.bias))
    return model
