"""Expert parallelism (专家并行): each process holds some of every MoE layer's experts.

Attention runs data-parallel (each rank its own sequences, the weights replicated: DP attention).
At every MoE layer a rank routes its own tokens, then two all-to-alls:
- dispatch: each (token, expert) pair goes to the rank that holds the expert: first the counts
  (so every rank knows how many rows it receives), then the rows and their expert ids;
- combine: each rank sends the experts' outputs back, in the order it received the rows, and the
  token's owner adds them up.
Shared experts are replicated, so they need no communication. DeepEP implements these two
all-to-alls as GPU kernels (NVLink inside a node, RDMA between nodes)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

from .launch import run_distributed
from .moe import MoEMLP, reorder_neurons
from .tensor_parallel import split_evenly
from ..utils.wording import text


@dataclass
class ExchangeStats:
    """What one rank sent in its all-to-alls, and what its experts computed."""

    dispatched_rows: int = 0       # (token, expert) rows sent to other ranks (and to itself)
    dispatch_bytes: int = 0        # their hidden states, plus their expert ids
    combine_bytes: int = 0         # the experts' outputs sent back
    tokens_per_expert: dict = field(default_factory=dict)  # its experts' rows, summed over layers


class ExpertParallelMLP(nn.Module):
    """`moe`'s routed experts split over the ranks (contiguous ranges); the router and the
    shared experts are replicated. `stats` accumulates the exchanges."""

    def __init__(self, moe: MoEMLP, rank: int, world_size: int, stats: ExchangeStats):
        super().__init__()
        routed = moe.n_experts - moe.shared
        self.owned = [range(r.start + moe.shared, r.stop + moe.shared)
                      for r in split_evenly(routed, world_size)]
        self.moe, self.rank, self.stats = moe, rank, stats
        mine = self.owned[rank]
        keep = list(range(moe.shared)) + list(mine)  # its routed experts and the shared ones
        self.weights = {e: (moe.gate[e].clone(), moe.up[e].clone(), moe.down[e].clone())
                        for e in keep}
        moe.gate = moe.up = moe.down = None  # the rest is held by the other ranks

    def _owner(self, experts: torch.Tensor) -> torch.Tensor:
        starts = torch.tensor([r.start for r in self.owned[1:]])
        return torch.bucketize(experts, starts, right=True)

    def _run(self, e: int, x: torch.Tensor) -> torch.Tensor:
        gate, up, down = self.weights[e]
        return (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        moe, world = self.moe, len(self.owned)
        flat = x.reshape(-1, x.shape[-1])
        routing = moe.route(flat)
        moe.routing = routing
        token = torch.arange(flat.shape[0])[:, None].expand_as(routing.experts)[routing.kept]
        expert = (routing.experts + moe.shared)[routing.kept]
        order = torch.argsort(expert, stable=True)  # by expert, so by owner: the ranges are
        token, expert = token[order], expert[order]   # contiguous, and a token's outputs add up
        owner = self._owner(expert)                   # in the order one process adds them
        send_counts = torch.bincount(owner, minlength=world)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts)  # how many rows each rank will send me
        send, recv = send_counts.tolist(), recv_counts.tolist()
        rows = flat.new_empty(sum(recv), flat.shape[-1])
        dist.all_to_all_single(rows, flat[token].contiguous(), recv, send)         # dispatch
        ids = expert.new_empty(sum(recv))
        dist.all_to_all_single(ids, expert.contiguous(), recv, send)
        computed = torch.empty_like(rows)
        for e in ids.unique().tolist():
            here = ids == e
            computed[here] = self._run(e, rows[here])
            self.stats.tokens_per_expert[e] = (self.stats.tokens_per_expert.get(e, 0)
                                               + int(here.sum()))
        back = flat.new_empty(len(token), flat.shape[-1])
        dist.all_to_all_single(back, computed, send, recv)                         # combine
        out = torch.zeros_like(flat)
        for e in range(moe.shared):
            out += self._run(e, flat)
        out.index_add_(0, token, back)
        self.stats.dispatched_rows += len(token)
        self.stats.dispatch_bytes += (len(token) * flat.shape[-1] * flat.element_size()
                                      + len(token) * expert.element_size())
        self.stats.combine_bytes += back.numel() * back.element_size()
        return out.reshape(x.shape)


def expert_parallel_rank(rank, world_size, source, routers, orders, k, shared, token_ids):
    """One rank: the model with every routed layer's MLP as an MoE (routers and neuron orders:
    layer -> numpy array), split by experts; it runs its own row of `token_ids` and returns the
    logits."""
    from .demos import _load

    model, _ = _load(source, fast=False)
    stats = ExchangeStats()
    for layer, router in routers.items():
        mlp = model.layers[layer].mlp
        if orders.get(layer) is not None:
            reorder_neurons(mlp, torch.from_numpy(np.asarray(orders[layer])))
        moe = MoEMLP(mlp, torch.from_numpy(np.asarray(router)), k, shared)
        model.layers[layer].mlp = ExpertParallelMLP(moe, rank, world_size, stats)
    with torch.inference_mode():
        logits = model(torch.tensor([token_ids[rank]]))[0]
    return {"logits": logits, "experts": list(model.layers[min(routers)].mlp.owned[rank]),
            "dispatched_rows": stats.dispatched_rows, "dispatch_bytes": stats.dispatch_bytes,
            "combine_bytes": stats.combine_bytes,
            "tokens_per_expert": dict(sorted(stats.tokens_per_expert.items()))}


@dataclass
class ExpertParallelReport:
    max_abs_diff: float
    top1_agree: bool
    ranks: list

    def __str__(self) -> str:
        lines = [text("max |logit difference| against one process = {diff:.2e}; top-1 agrees at "
                      "every position: {top1}",
                      "与单进程相比，最大 |logit 差| = {diff:.2e}；每个位置的第一名都一致：{top1}",
                      diff=self.max_abs_diff, top1=self.top1_agree)]
        for r, info in enumerate(self.ranks):
            lines.append(text(
                "rank {r}: experts {first}..{last}, sent {rows} (token, expert) rows: dispatch "
                "{dispatch:,} bytes, combine {combine:,} bytes",
                "rank {r}：专家 {first}..{last}，发出 {rows} 行（词元，专家）：分发 {dispatch:,} "
                "字节，合并 {combine:,} 字节",
                r=r, first=info["experts"][0], last=info["experts"][-1],
                rows=info["dispatched_rows"], dispatch=info["dispatch_bytes"],
                combine=info["combine_bytes"]))
        return "\n".join(lines)


def compare_expert_parallel(source, routers: dict, k: int, token_ids: list, reference: list,
                            shared: int = 0, orders: dict | None = None) -> ExpertParallelReport:
    """Run the MoE model split by experts on len(token_ids) gloo processes, rank r on sequence r,
    and compare each rank's logits with `reference[r]` (the same MoE model in one process).
    `orders`: the neuron order each routed layer was given (`shared_first`), if any."""
    if len(token_ids) != len(reference):
        raise ValueError(f"one reference per sequence: {len(token_ids)} sequences, "
                         f"{len(reference)} references")
    routers = {layer: r.detach().cpu().numpy() for layer, r in routers.items()}
    orders = {layer: torch.as_tensor(o).cpu().numpy() for layer, o in (orders or {}).items()}
    ranks = run_distributed(expert_parallel_rank, world_size=len(token_ids),
                            args=(source, routers, orders, k, shared,
                                  [list(t) for t in token_ids]))
    diffs, agree = [], True
    for info, want in zip(ranks, reference):
        got, want = info["logits"].float(), want.detach().float().cpu()
        diffs.append((got - want).abs().max().item())
        agree = agree and bool((got.argmax(-1) == want.argmax(-1)).all())
    return ExpertParallelReport(max(diffs), agree, ranks)
