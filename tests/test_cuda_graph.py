"""The batch-1 decode step replayed from a CUDA graph (minillm/fast/graph.py).

Without a GPU: `StaticDecodeStep`, the step the graph records, runs eagerly on the CPU against
the fused step; under the fake CUDA device (tests/fake_cuda.py, whose FakeCudaGraph replays the
recorded operations on the same tensors, refuses host syncs inside a capture and leaves a
capture's outputs empty until a replay), generation through the graph against generation
without it. What a real GPU adds (the time saved, what its capture refuses beyond syncs) is
measured by scripts/gpu_smoke.py's decode part."""

import warnings

import pytest
import torch

import minillm
from minillm.fast import optimize
from minillm.fast.graph import SWITCH, StaticDecodeStep
from minillm.generation.kv_cache import KVCache
from fake_cuda import FakeCuda, FakeCudaGraph, Tally
from test_fast import _Tok, _tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = [5, 17, 3, 40, 22]
TOK = _Tok()


def _tokens(model, n=10, **options):
    return minillm.generate(model, TOK, PROMPT, max_new_tokens=n, ignore_eos=True,
                            **options).token_ids


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("weights,atol", [("fp32", 1e-5), ("bf16", 2e-2), ("int8", 2e-2)])
def test_the_static_step_gives_the_fused_steps_logits(arch, weights, atol):
    """Attention over every slot with the later ones masked, the position a tensor, the cache
    written with index_copy_: the fused step's logits and cache, step after step."""
    fast = optimize(_tiny(arch), weights)
    c1, c2 = KVCache.for_model(fast, 1, 20), KVCache.for_model(fast, 1, 20)
    with torch.inference_mode():
        fast(torch.tensor([PROMPT]), cache=c1)
        fast(torch.tensor([PROMPT]), cache=c2)
        step = StaticDecodeStep(fast.fused_decode, c2)
        for t in [3, 17, 42, 0, 79]:
            want = fast(torch.tensor([[t]]), cache=c1)[:, 0]
            step.ids.fill_(t)
            step.position.fill_(c2.length)
            got = step()
            c2.advance(1)
            torch.testing.assert_close(got, want, atol=atol, rtol=0)
            torch.testing.assert_close(c2.keys[2][:, :, :c2.length], c1.keys[2][:, :, :c1.length],
                                       atol=atol, rtol=0)


@pytest.mark.parametrize("weights", ["fp32", "bf16", "int8"])
def test_batch_1_decode_replays_one_graph_and_gives_the_eager_tokens(weights):
    with FakeCuda():
        model = optimize(_tiny().to("cuda"), weights)
        graph = model.fused_decode.graph
        with_graph = _tokens(model)
        assert graph.captures == 1 and graph.failed is None
        (only,) = graph._graphs.values()
        assert only.graph.replays == 9  # the first new token comes from the prompt's pass
        model.fused_decode.cuda_graph = False
        assert _tokens(model) == with_graph
        assert graph.captures == 1


def test_a_replay_is_one_launch_and_the_syncs_stay_two_per_token():
    """Launches per token (ATen operations under the fake, a replay counting one): the graph's
    step against the eager one; 12 tokens against 4, so prefill and the capture cancel out."""
    per_token = {}
    with FakeCuda():
        model = optimize(_tiny().to("cuda"))
        for graph in (True, False):
            model.fused_decode.cuda_graph = graph
            counts = {}
            for n in (4, 12):
                with Tally() as t:
                    _tokens(model, n)
                counts[n] = t
            per_token[graph] = ((counts[12].ops - counts[4].ops) / 8,
                                (counts[12].total - counts[4].total) / 8)
    (graph_ops, graph_syncs), (eager_ops, eager_syncs) = per_token[True], per_token[False]
    assert graph_syncs <= 2 and eager_syncs <= 2, per_token
    assert eager_ops >= 3 * 20 and graph_ops <= 12, per_token  # 3 layers of ~20+ operations


def test_one_capture_serves_every_generation_of_a_bucket():
    """The graphs belong to the model: N generations (each with its own new cache) capture once;
    a cache too big for the bucket captures the next one; a cropped cache keeps its graph."""
    with FakeCuda():
        model = optimize(_tiny().to("cuda"))
        graph = model.fused_decode.graph
        first = _tokens(model)
        assert all(_tokens(model) == first for _ in range(4)) and graph.captures == 1
        assert _tokens(model, n=40)[:10] == first and graph.captures == 1
        cache = KVCache.for_model(model, 1, 300)  # past 256 slots: the 512 bucket
        with torch.inference_mode():
            model(torch.tensor([PROMPT], device="cuda"), cache=cache)
            steps = [model(torch.tensor([[t]], device="cuda"), cache=cache) for t in first[:4]]
            assert graph.captures == 2 and sorted(k for k, _ in graph._graphs) == [256, 512]
            cache.crop(len(PROMPT) + 2)  # speculative decoding rolls back so: same tensors
            again = [model(torch.tensor([[t]], device="cuda"), cache=cache) for t in first[2:4]]
        assert graph.captures == 2 and cache.keys[0].shape[2] == 300
        for a, b in zip(steps[2:], again):
            torch.testing.assert_close(a.cpu(), b.cpu(), atol=0, rtol=0)


def test_two_caches_taking_turns_each_keep_their_own_tokens():
    """Lesson 03b times two caches of one model in turns: each decodes on from its own keys and
    values (the cache that gives the buffers up gets a copy first), as the eager step does."""
    with FakeCuda():
        model = optimize(_tiny().to("cuda"))

        def turns():
            caches = [KVCache.for_model(model, 1, 32) for _ in range(2)]
            prompts = [PROMPT, [9, 8, 7]]
            logits = [[], []]
            with torch.inference_mode():
                for cache, prompt in zip(caches, prompts):
                    model(torch.tensor([prompt], device="cuda"), cache=cache)
                for t in [3, 17, 42, 0]:
                    for i, cache in enumerate(caches):
                        logits[i].append(model(torch.tensor([[t]], device="cuda"),
                                               cache=cache).cpu())
            return logits

        graphed = turns()
        assert model.fused_decode.graph.captures == 1
        model.fused_decode.cuda_graph = False
        eager = turns()
    for ours, theirs in zip(graphed, eager):
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_what_does_not_take_the_graph():
    """A CPU model, more than one row (beam search reorders the cache's tensors each step), a
    cache without fixed slots, and the switch off: the eager step, and no capture."""
    cpu = optimize(_tiny())
    assert not cpu.fused_decode.graph.applies(KVCache.for_model(cpu, 1, 8))
    with FakeCuda():
        model = optimize(_tiny().to("cuda"))
        graph = model.fused_decode.graph
        assert not graph.applies(KVCache.for_model(model, 2, 8))
        assert graph.applies(KVCache.for_model(model, 1, 8))
        minillm.generate(model, TOK, PROMPT, max_new_tokens=6, num_beams=2)
        assert graph.captures == 0


def test_the_environment_switch_sets_a_new_models_default(monkeypatch):
    monkeypatch.setenv(SWITCH, "0")
    assert optimize(_tiny()).fused_decode.cuda_graph is False
    monkeypatch.setenv(SWITCH, "1")
    assert optimize(_tiny()).fused_decode.cuda_graph is True


def test_a_failed_capture_says_so_once_and_a_later_generation_tries_again(monkeypatch):
    """A capture that fails (under the profiler, say) leaves that generation eager and warns
    once per reason; a later generation captures again, so the graph is not lost for good."""
    with FakeCuda():
        model = optimize(_tiny().to("cuda"))
        model.fused_decode.cuda_graph = False
        eager = _tokens(model)
        model.fused_decode.cuda_graph = True
        real_begin = FakeCudaGraph.capture_begin

        def refuse(self, *args, **kwargs):
            raise RuntimeError("operation not permitted when stream is capturing")

        monkeypatch.setattr(FakeCudaGraph, "capture_begin", refuse)
        with pytest.warns(RuntimeWarning, match="CUDA graph failed .*a later one tries again"):
            assert _tokens(model) == eager
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the same reason again: not said twice
            assert _tokens(model) == eager
        graph = model.fused_decode.graph
        assert "not permitted" in graph.failed and graph.captures == 0
        monkeypatch.setattr(FakeCudaGraph, "capture_begin", real_begin)
        assert _tokens(model) == eager and graph.captures == 1


def test_a_step_that_keeps_a_python_position_is_caught_by_the_fake_graph(monkeypatch):
    """What the fake graph is for: a step that wrote the cache at a Python index (fixed when
    captured) gives other tokens than the eager step, and one that reads a value inside the
    capture is refused."""
    from minillm.fast import graph as graph_module

    with FakeCuda():
        model = optimize(_tiny().to("cuda"))
        model.fused_decode.cuda_graph = False
        eager = _tokens(model)
        model.fused_decode.cuda_graph = True
        real_call = StaticDecodeStep.__call__

        def python_position(step):
            step.position = torch.full((1,), step.cache.length, device="cuda")  # a new tensor
            return real_call(step)

        monkeypatch.setattr(graph_module.StaticDecodeStep, "__call__", python_position)
        assert _tokens(model) != eager

        def reads_a_value(step):
            int(step.position)
            return real_call(step)

        model = optimize(_tiny().to("cuda"))
        monkeypatch.setattr(graph_module.StaticDecodeStep, "__call__", reads_a_value)
        with pytest.warns(RuntimeWarning, match="host synchronization"):
            assert _tokens(model) == eager


def test_a_copy_of_the_model_captures_its_own_graph():
    import copy

    with FakeCuda():
        model = optimize(_tiny().to("cuda"))
        first = _tokens(model)
        twin = copy.deepcopy(model)
        assert twin.fused_decode.graph is not model.fused_decode.graph
        assert twin.fused_decode.graph.fused is twin.fused_decode
        assert twin.fused_decode.graph.captures == 0
        assert _tokens(twin) == first and twin.fused_decode.graph.captures == 1
