"""One place decides a decode step's path (minillm/kernels/decode_plan.py): the rule on its own,
the path a real fast model's step takes, and the step running by it."""

import pytest
import torch

from minillm.fast import optimize
from minillm.generation.kv_cache import KVCache
from minillm.kernels import dispatch
from minillm.kernels.decode_plan import PATHS, StepFacts, choose, plan_of
from minillm.model.toy import tiny_model

ALL = dispatch.DecodeKernels(True, True, True, True, 1)
SOME = dispatch.DecodeKernels(True, False, True, True, 1)


def facts(**changes) -> StepFacts:
    base = dict(device="cpu", graph_ready=False, graph_on=True, kernels=ALL, c_blocks_on=True,
                blocks_alike=True, rows_fit=True, cache_fits=True)
    return StepFacts(**{**base, **changes})


def test_the_rule_takes_the_fastest_path_the_step_allows_and_says_why_not_the_others():
    assert choose(facts()).path == "one C call"
    assert choose(facts(device="cuda", graph_ready=True)).path == "cuda graph"
    plan = choose(facts(device="cuda", graph_on=False), explain=True)
    assert plan.path == "python" and "switched off" in plan.why[0]
    plan = choose(facts(c_blocks_on=False), explain=True)
    assert plan.path == "python + kernels" and "c_blocks = False" in plan.why[-1]
    plan = choose(facts(kernels=SOME), explain=True)
    assert plan.path == "python + kernels" and "not every small operation" in plan.why[-1]
    assert "row limits" in choose(facts(rows_fit=False), explain=True).why[-1]
    assert "cache does not lie" in choose(facts(cache_fits=False), explain=True).why[-1]
    plan = choose(facts(kernels=dispatch.NO_DECODE_KERNELS), explain=True)
    assert plan.path == "python" and "C kernels cannot run" in plan.why[-1]
    assert choose(facts(device="mps")).path == "python"
    assert choose(facts(c_blocks_on=False)).why == ()  # a step asks without the reasons
    assert {choose(f).path for f in (facts(), facts(c_blocks_on=False),
                                     facts(kernels=dispatch.NO_DECODE_KERNELS))} <= set(PATHS)


@pytest.fixture(scope="module")
def fast():
    model, _ = tiny_model()
    return model, optimize(model)


def test_a_model_minillm_did_not_optimize_runs_its_module_path(fast):
    plan = plan_of(fast[0])
    assert plan.path == "module" and "not optimized" in plan.why[0]


def test_a_fast_model_on_the_cpu_runs_its_step_in_one_c_call_where_the_kernels_run(fast):
    model = fast[1]
    plan = plan_of(model)
    if not dispatch.cpu_kernels("cpu"):
        assert plan.path == "python" and "C kernels cannot run" in str(plan)
        return
    assert plan.path == "one C call" and plan.why == ("no CUDA graph on cpu",)
    assert str(plan) == "one C call (no CUDA graph on cpu)"
    model.fused_decode.c_blocks = False
    try:
        assert plan_of(model).path == "python + kernels"
        assert "c_blocks = False" in str(plan_of(model))
    finally:
        model.fused_decode.c_blocks = True


def test_the_step_runs_by_the_plan_and_each_path_gives_the_same_logits(fast, monkeypatch):
    model = fast[1]
    if not dispatch.cpu_kernels("cpu"):
        pytest.skip("minillm's C kernels do not run here")
    from minillm.fast import blocks

    ran = []
    real = blocks.run
    monkeypatch.setattr(blocks, "run", lambda *a: ran.append(1) or real(*a))
    prompt = torch.tensor([[1, 2, 3, 4]])
    logits = {}
    for c_blocks in (True, False):
        model.fused_decode.c_blocks = c_blocks
        cache = KVCache.for_model(model, 1, 8)
        with torch.inference_mode():
            model(prompt, cache=cache)
            logits[c_blocks] = model(torch.tensor([[5]]), cache=cache)
    model.fused_decode.c_blocks = True
    assert ran == [1]  # the one C call ran for the step planned so, not for the other
    torch.testing.assert_close(logits[True], logits[False], atol=1e-5, rtol=1e-5)
