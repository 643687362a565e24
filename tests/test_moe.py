"""Mixture of experts (minillm.distributed.moe) and expert parallelism on two gloo processes: the
routing rules, a dense MLP cut into experts that is the dense MLP with every expert on, and the
split over processes that gives one process's logits."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from minillm.distributed.expert_parallel import compare_expert_parallel
from minillm.distributed.moe import (MoEMLP, capacity_of, fit_router, mlp_inputs,
                                     reorder_neurons, replicate_hot_experts, route, shared_first)
from minillm.layers.mlp import GatedMLP
from minillm.loading import load_model


def test_route_takes_the_top_k_and_counts_each_experts_tokens():
    scores = torch.tensor([[0.1, 0.9, 0.5], [0.8, 0.2, 0.3], [0.0, 0.7, 0.6]])
    routing = route(scores, k=2)
    assert routing.experts.tolist() == [[1, 2], [0, 2], [1, 2]]
    assert routing.kept.all() and routing.dropped == 0.0
    assert routing.load.tolist() == [1, 2, 3]


def test_capacity_serves_first_choices_before_second_ones_and_earlier_tokens_first():
    # every token's first choice is expert 0, its second expert 1; expert 2 is nobody's
    scores = torch.tensor([[3.0, 2.0, 0.0]] * 4)
    routing = route(scores, k=2, capacity=3)
    assert routing.kept[:, 0].tolist() == [True, True, True, False]  # the fourth is too late
    assert routing.kept[:, 1].tolist() == [True, True, True, False]
    # a first choice beats an earlier token's second choice
    scores = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    routing = route(scores, k=2, capacity=1)
    assert routing.experts.tolist() == [[1, 0], [0, 1], [1, 0]]
    assert routing.kept.tolist() == [[True, False], [True, False], [False, False]]
    assert routing.dropped == pytest.approx(4 / 6)


def test_capacity_is_the_factor_times_the_fair_share():
    assert capacity_of(tokens=512, k=4, n_experts=16, factor=1.0) == 128
    assert capacity_of(tokens=10, k=1, n_experts=4, factor=1.25) == 4  # rounded up
    with pytest.raises(ValueError, match="capacity factor must be > 0"):
        capacity_of(10, 1, 4, 0)


def test_route_refuses_a_k_it_cannot_take():
    with pytest.raises(ValueError, match="k must be 1 to the number of experts"):
        route(torch.zeros(2, 4), k=5)


def _mlp(hidden=12, neurons=16, seed=0):
    torch.manual_seed(seed)
    mlp = GatedMLP(SimpleNamespace(hidden_size=hidden, intermediate_size=neurons,
                                   mlp_bias=False))
    return mlp.eval()


def _expert(mlp, e, n_experts, x):
    size = mlp.gate_proj.weight.shape[0] // n_experts
    part = slice(e * size, (e + 1) * size)
    h = F.silu(x @ mlp.gate_proj.weight[part].T) * (x @ mlp.up_proj.weight[part].T)
    return h @ mlp.down_proj.weight[:, part].T


def test_every_expert_on_is_the_dense_mlp():
    mlp, x = _mlp(), torch.randn(2, 5, 12)
    moe = MoEMLP(mlp, torch.randn(13, 4), k=4)
    with torch.no_grad():
        torch.testing.assert_close(moe(x), mlp(x), rtol=1e-5, atol=1e-6)


def test_a_token_gets_the_sum_of_its_kept_experts_and_the_shared_ones():
    mlp, x = _mlp(), torch.randn(6, 12)
    router = torch.randn(13, 4)
    moe = MoEMLP(mlp, router, k=1, shared=1, capacity_factor=1.0)
    with torch.no_grad():
        out = moe(x)
        routing = moe.routing
        assert routing.experts.shape == (6, 1) and routing.load.sum() == 6
        for t in range(6):
            want = _expert(mlp, 0, 4, x[t])  # the shared expert, for every token
            if routing.kept[t, 0]:
                want = want + _expert(mlp, 1 + routing.experts[t, 0].item(), 4, x[t])
            torch.testing.assert_close(out[t], want, rtol=1e-5, atol=1e-6)
    # capacity 1.0 of 6 tokens over 3 routed experts: 2 each; the router's shares decide drops
    assert routing.kept.sum() == sum(min(n, 2) for n in routing.load.tolist())


def test_moe_mlp_refuses_what_it_cannot_cut():
    with pytest.raises(ValueError, match="do not cut into 3 equal experts"):
        MoEMLP(_mlp(), torch.randn(13, 3), k=1)
    with pytest.raises(ValueError, match="shared must be 0 to 3"):
        MoEMLP(_mlp(), torch.randn(13, 4), k=1, shared=4)
    with pytest.raises(ValueError, match=r"k must be 1 to the routed experts \(3\)"):
        MoEMLP(_mlp(), torch.randn(13, 4), k=4, shared=1)


def test_the_shared_expert_holds_the_neurons_that_add_most_and_the_function_is_kept():
    mlp, x = _mlp(), torch.randn(64, 12)
    with torch.no_grad():
        before = mlp(x)
        order = shared_first(mlp, x, n_experts=4)
        torch.testing.assert_close(mlp(x), before, rtol=1e-5, atol=1e-6)
        h = F.silu(x @ mlp.gate_proj.weight.T) * (x @ mlp.up_proj.weight.T)
        adds = h.abs().mean(0) * mlp.down_proj.weight.norm(dim=0)
    assert sorted(order.tolist()) == list(range(16))
    assert adds[:4].min() >= adds[4:].max()
    other = _mlp()
    reorder_neurons(other, order)
    torch.testing.assert_close(other.gate_proj.weight, mlp.gate_proj.weight)


def test_the_fitted_router_ranks_the_expert_that_adds_most_first():
    mlp, x = _mlp(), torch.randn(256, 12)
    with torch.no_grad():
        mlp.down_proj.weight[:, 12:] *= 50  # expert 3 adds far more than the others for anyone
    router = fit_router(mlp, x, n_experts=4)
    assert router.shape == (13, 4)
    assert (route(F.pad(x, (0, 1), value=1.0) @ router, k=1).experts == 3).all()
    torch.testing.assert_close(fit_router(mlp, x, 4), router)  # the same on every run


def test_replicas_go_to_hot_experts_and_even_the_gpus():
    load = [90, 10, 10, 10, 40, 10, 10, 10]
    plan = replicate_hot_experts(load, gpus=2, spare_slots=2)
    assert plan["before"] == [120.0, 70.0]
    assert plan["replicas"] == [3, 1, 1, 1, 1, 1, 1, 1]
    assert sum(len(p) for p in plan["placed"]) == 10
    assert max(plan["after"]) < max(plan["before"]) and sum(plan["after"]) == sum(load)
    with pytest.raises(ValueError, match="must fill 3 GPUs evenly"):
        replicate_hot_experts(load, gpus=3, spare_slots=1)


@pytest.mark.slow
def test_experts_on_two_processes_give_one_processs_logits(tiny_folder):
    model = load_model(tiny_folder, device="cpu", fast=False)
    ids = [[5, 17, 3, 40, 22, 9, 31], [8, 1, 30, 12, 12, 4, 60]]
    layers = range(model.config.n_layers)
    inputs = mlp_inputs(model, ids[0] + ids[1], layers)
    orders = {i: shared_first(model.layers[i].mlp, inputs[i], 4) for i in layers}
    routers = {i: fit_router(model.layers[i].mlp, inputs[i], 4) for i in layers}
    for i in layers:
        model.layers[i].mlp = MoEMLP(model.layers[i].mlp, routers[i], k=2, shared=1)
    with torch.inference_mode():
        reference = [model(torch.tensor([row]))[0] for row in ids]
    report = compare_expert_parallel(str(tiny_folder), routers, 2, ids, reference, shared=1,
                                     orders=orders)
    assert report.max_abs_diff < 1e-5 and report.top1_agree, report
    assert [r["experts"] for r in report.ranks] == [[1, 2], [3]]
    hidden = model.config.hidden_size
    for rank in report.ranks:  # 7 tokens, 2 routed experts each, in every layer
        assert rank["dispatched_rows"] == 7 * 2 * model.config.n_layers
        assert rank["combine_bytes"] == rank["dispatched_rows"] * hidden * 4
        assert rank["dispatch_bytes"] == rank["dispatched_rows"] * (hidden * 4 + 8)
    computed = sum(sum(r["tokens_per_expert"].values()) for r in report.ranks)
    assert computed == 2 * 7 * 2 * model.config.n_layers


def test_a_reference_per_sequence_is_required():
    with pytest.raises(ValueError, match="one reference per sequence"):
        compare_expert_parallel("unused", {}, 1, [[1], [2]], [torch.zeros(1)])
