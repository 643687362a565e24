"""Mixture of experts (混合专家, chapter 09b): a dense MLP cut into experts, a router fitted to it,
top-k routing with a capacity.

A gated MLP is a sum over its intermediate neurons, so the neurons cut into E equal groups give
E "experts" whose outputs add up to the dense MLP exactly. A router (a linear map, fitted by least
squares to predict how much each group adds for a token) picks k groups a token; with k = E the
layer is the dense one again. Shared experts run for every token, outside the routing.
A trained MoE (Mixtral, DeepSeek-V3) learns its experts and router together; this one is cut
from a model trained dense, which is what the lesson measures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.devices import model_device
from ..utils.validate import check_int


@dataclass
class Routing:
    """Where each token goes: `experts[t, j]` is token t's j-th choice (best first), `kept[t, j]`
    False where that expert was already full; `load[e]` counts the tokens that chose expert e."""

    experts: torch.Tensor
    kept: torch.Tensor
    load: torch.Tensor

    @property
    def dropped(self) -> float:
        """The share of (token, expert) assignments that capacity turned away."""
        return 1.0 - self.kept.float().mean().item()


def capacity_of(tokens: int, k: int, n_experts: int, factor: float) -> int:
    """Tokens one expert may take: `factor` times its share under perfect balance, tokens x k / E
    (GShard's and Switch Transformer's capacity factor)."""
    if not factor > 0:
        raise ValueError(f"capacity factor must be > 0, got {factor!r}")
    return math.ceil(factor * tokens * k / n_experts)


def route(scores: torch.Tensor, k: int, capacity: int | None = None) -> Routing:
    """Top-k routing of `scores` (tokens x experts). With a `capacity`, an expert takes first
    choices before second ones and, among equal choices, earlier tokens first; the rest are
    dropped (the token keeps its other experts and its residual)."""
    tokens, n_experts = scores.shape
    check_int("k", k, 1, n_experts, allowed=f"1 to the number of experts ({n_experts})")
    experts = scores.topk(k, dim=-1).indices
    load = torch.bincount(experts.flatten(), minlength=n_experts)
    if capacity is None:
        return Routing(experts, torch.ones_like(experts, dtype=torch.bool), load)
    queue = F.one_hot(experts.T.flatten(), n_experts)  # choice-major: all first choices first
    place = (queue.cumsum(0) * queue).sum(-1) - 1  # each assignment's place in its expert's queue
    kept = (place < capacity).reshape(k, tokens).T
    return Routing(experts, kept, load)


class MoEMLP(nn.Module):
    """A gated MLP as `n_experts` experts of equal size; each token runs its router's top `k`
    (routed experts only) and every shared expert. `router` is (hidden + 1) x n_experts, a linear
    map whose last row is its bias. `capacity_factor` None: no limit. After each call, `routing`
    holds the last `Routing` (of the routed experts: expert e of it is expert shared + e)."""

    def __init__(self, mlp, router: torch.Tensor, k: int, shared: int = 0,
                 capacity_factor: float | None = None):
        super().__init__()
        n_experts = router.shape[1]
        check_int("shared", shared, 0, n_experts - 1, allowed=f"0 to {n_experts - 1}")
        check_int("k", k, 1, n_experts - shared,
                  allowed=f"1 to the routed experts ({n_experts - shared})")
        gate, up, down = (p.weight.detach() for p in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
        if gate.shape[0] % n_experts:
            raise ValueError(f"{gate.shape[0]} neurons do not cut into {n_experts} equal experts")
        self.gate = gate.unflatten(0, (n_experts, -1))                  # (E, f, hidden)
        self.up = up.unflatten(0, (n_experts, -1))                      # (E, f, hidden)
        self.down = down.unflatten(1, (n_experts, -1)).transpose(0, 1)  # (E, hidden, f)
        self.router = router.to(gate)
        self.n_experts, self.k, self.shared = n_experts, k, shared
        self.capacity_factor = capacity_factor
        self.routing: Routing | None = None

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        return (F.silu(x @ self.gate[e].T) * (x @ self.up[e].T)) @ self.down[e].T

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """The router's score of each routed expert for each row of `x`."""
        return (F.pad(x, (0, 1), value=1.0) @ self.router)[:, self.shared:]

    def route(self, x: torch.Tensor) -> Routing:
        tokens = x.shape[0]
        capacity = (None if self.capacity_factor is None else
                    capacity_of(tokens, self.k, self.n_experts - self.shared,
                                self.capacity_factor))
        return route(self.scores(x), self.k, capacity)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        self.routing = routing = self.route(flat)
        out = torch.zeros_like(flat)
        for e in range(self.shared):
            out += self.expert(e, flat)
        token = torch.arange(flat.shape[0], device=flat.device)[:, None].expand_as(routing.experts)
        for e in range(self.n_experts - self.shared):
            rows = token[(routing.experts == e) & routing.kept]
            if len(rows):
                out.index_add_(0, rows, self.expert(self.shared + e, flat[rows]))
        return out.reshape(x.shape)


def mlp_inputs(model, token_ids, layers, window: int = 512) -> dict[int, torch.Tensor]:
    """What each of `layers`' MLPs receives for `token_ids` (one row per token, on the CPU, in
    float32), read by hooks while the model runs windows of `window` tokens."""
    seen = {i: [] for i in layers}
    hooks = [model.layers[i].mlp.register_forward_pre_hook(
        lambda module, args, i=i: seen[i].append(args[0].reshape(-1, args[0].shape[-1])
                                                 .float().cpu()))
        for i in layers]
    device = model_device(model)
    try:
        with torch.inference_mode():
            for start in range(0, len(token_ids), window):
                ids = torch.tensor([token_ids[start:start + window]], device=device)
                positions = torch.arange(ids.shape[1], device=device)[None]
                model.run_layers(model.embed_tokens(ids, positions), positions,
                                 layers=model.layers[:max(layers) + 1])
    finally:
        for hook in hooks:
            hook.remove()
    return {i: torch.cat(rows) for i, rows in seen.items()}


def expert_outputs(mlp, x: torch.Tensor, n_experts: int, order=None) -> torch.Tensor:
    """The norm of what each expert (a group of neurons, in `order`) adds for each row of `x`:
    tokens x n_experts."""
    gate, up, down = (p.weight.detach().float().cpu()
                      for p in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
    if order is not None:
        gate, up, down = gate[order], up[order], down[:, order]
    h = (F.silu(x @ gate.T) * (x @ up.T)).unflatten(-1, (n_experts, -1))
    return torch.einsum("ten,den->ted", h, down.unflatten(1, (n_experts, -1))).norm(dim=-1)


def fit_router(mlp, x: torch.Tensor, n_experts: int) -> torch.Tensor:
    """A linear router, (hidden + 1) x n_experts, fitted by least squares on the rows `x` to
    predict the log of each expert's contribution (SVD-based: the same answer on every run)."""
    target = expert_outputs(mlp, x, n_experts).clamp_min(1e-12).log()
    return torch.linalg.lstsq(F.pad(x, (0, 1), value=1.0), target, driver="gelsd").solution


def shared_first(mlp, x: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Reorder `mlp`'s neurons in place so that the first of `n_experts` equal groups holds the
    neurons that add the most on average over the rows `x` (a shared expert's candidates), and
    return the order (`reorder_neurons` applies it to another copy of the model)."""
    gate, up, down = (p.weight.detach() for p in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
    xs = x.to(gate)
    adds = (F.silu(xs @ gate.T) * (xs @ up.T)).abs().mean(0) * down.norm(dim=0)
    top = adds.argsort(descending=True)[: gate.shape[0] // n_experts]
    rest = torch.ones(gate.shape[0], dtype=torch.bool, device=gate.device)
    rest[top] = False
    order = torch.cat([top.sort().values, rest.nonzero().flatten()]).cpu()
    reorder_neurons(mlp, order)
    return order


def reorder_neurons(mlp, order: torch.Tensor) -> None:
    """Permute a gated MLP's intermediate neurons in place: the same function."""
    order = torch.as_tensor(order, device=mlp.gate_proj.weight.device)
    with torch.no_grad():
        for linear in (mlp.gate_proj, mlp.up_proj):
            linear.weight.copy_(linear.weight[order])
        mlp.down_proj.weight.copy_(mlp.down_proj.weight[:, order])


def replicate_hot_experts(load, gpus: int, spare_slots: int) -> dict:
    """EPLB's idea on measured `load` (tokens per expert): give the `spare_slots` extra replicas
    one at a time to the expert with the most tokens per replica, then place the replicas,
    heaviest first, each on the GPU with the least load and a free slot. Returns the GPUs' loads
    before (experts placed in order, E / gpus each) and after."""
    load = [float(v) for v in load]
    n = len(load)
    if n % gpus or (n + spare_slots) % gpus:
        raise ValueError(f"{n} experts and {spare_slots} spare slots must fill {gpus} GPUs "
                         "evenly")
    before = [sum(load[g * n // gpus:(g + 1) * n // gpus]) for g in range(gpus)]
    replicas = [1] * n
    for _ in range(spare_slots):
        hot = max(range(n), key=lambda e: load[e] / replicas[e])
        replicas[hot] += 1
    pieces = sorted(((load[e] / replicas[e], e) for e in range(n) for _ in range(replicas[e])),
                    reverse=True)
    slots, after, placed = (n + spare_slots) // gpus, [0.0] * gpus, [[] for _ in range(gpus)]
    for share, e in pieces:
        g = min((g for g in range(gpus) if len(placed[g]) < slots), key=lambda g: after[g])
        after[g] += share
        placed[g].append(e)
    return {"before": before, "after": after, "replicas": replicas, "placed": placed}
