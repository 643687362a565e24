"""Magnitude pruning (剪枝), in brief: set the smallest weights of each linear layer to zero.

Unstructured pruning like this keeps the shapes, so it saves memory or time only with a sparse
format or kernel; the lesson uses it to show how quickly quality falls when weights go away.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn


def magnitude_prune(model: nn.Module, fraction: float, skip=("lm_head",)) -> nn.Module:
    """A copy of `model` in which, in every nn.Linear (except `skip`), the `fraction` of weights
    with the smallest |w| in each row are zero."""
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) \
            or not 0.0 <= fraction < 1.0:
        raise ValueError(f"fraction must be a number in [0, 1), got {fraction!r}")
    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, m in out.named_modules():
            if isinstance(m, nn.Linear) and name.split(".")[-1] not in skip:
                k = int(fraction * m.in_features)
                if k:
                    idx = m.weight.abs().topk(k, dim=1, largest=False).indices
                    m.weight.scatter_(1, idx, 0.0)
    return out
