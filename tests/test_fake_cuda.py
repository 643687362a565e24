"""The fake CUDA harness (tests/fake_cuda.py) itself: it makes tensors on cuda:0 that compute on
the CPU, raises on every device mix a GPU raises on, lets correct code through with the CPU's
values, and leaves torch as it found it."""

import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import minillm
from minillm.utils.devices import Timer, describe, model_device, pick_device, synchronize
from fake_cuda import (CUDA, DEVICE_NAME, MPS, FakeCuda, FakeCudaGenerator, FakeMps, cuda_ops,
                       is_fake_cuda, mps_synchronizations, tree_map)

MIXED = "Expected all tensors to be on the same device"


@pytest.fixture
def fake_cuda():
    with FakeCuda() as harness:
        yield harness


def test_every_way_onto_cuda_gives_a_fake_cuda_tensor(fake_cuda):
    made = [torch.zeros(2, device="cuda"), torch.arange(3, device=torch.device("cuda")),
            torch.tensor([1, 2], device="cuda"), torch.ones(2).to("cuda"), torch.ones(2).cuda(),
            torch.ones(2).to(device="cuda:0"), torch.empty(2, device="cuda").new_zeros(3),
            torch.full_like(torch.ones(2), 7, device="cuda"), torch.randn(2, device="cuda")]
    for t in made:
        assert is_fake_cuda(t) and t.device == CUDA and t.is_cuda, t
    assert torch.tensor([1, 2], device="cuda").tolist() == [1, 2]


def test_operations_compute_the_cpu_values():
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    w = torch.randn(6, 5, generator=torch.Generator().manual_seed(1))

    def work(x, w, device):
        y = torch.softmax(x @ w, dim=-1)
        y[:, :2] = 0  # a slice assignment
        y = y + torch.arange(5, device=device) * 0.1
        return torch.cat([y, y.cumsum(-1)], dim=0).topk(2, dim=-1).values

    want = work(x, w, "cpu")
    with FakeCuda():
        got = work(x.cuda(), w.cuda(), "cuda")
        assert is_fake_cuda(got)
        got = got.cpu()
    assert type(got) is torch.Tensor and got.device.type == "cpu"
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("mix", [
    lambda c, h: c + h,
    lambda c, h: h * c,
    lambda c, h: torch.cat([c, h]),
    lambda c, h: torch.where(c > 0, c, h),
    lambda c, h: c @ h.reshape(3, 1),
    lambda c, h: F.embedding(torch.tensor([0, 1]), c.reshape(3, 1)),
    lambda c, h: F.scaled_dot_product_attention(c.view(1, 1, 3, 1), c.view(1, 1, 3, 1),
                                                h.view(1, 1, 3, 1)),
    lambda c, h: c.index_select(0, torch.tensor([0])),
    lambda c, h: h.add_(c),  # a CPU tensor written with cuda values
    lambda c, h: c.masked_fill(h > 0, 0.0),
], ids=["add", "mul", "cat", "where", "matmul", "embedding", "sdpa", "index_select", "add_",
        "masked_fill"])
def test_every_mix_of_cuda_and_cpu_raises_as_on_a_gpu(fake_cuda, mix):
    on_cuda, on_cpu = torch.ones(3, device="cuda"), torch.ones(3)
    with pytest.raises(RuntimeError, match=MIXED):
        mix(on_cuda, on_cpu)


def test_what_cuda_allows_across_devices_passes(fake_cuda):
    x = torch.arange(6.0, device="cuda")
    assert (x + torch.tensor(2.0)).tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]  # a 0-dim CPU tensor
    assert x[torch.tensor([1, 4])].tolist() == [1.0, 4.0]  # CPU indices
    x[:2] = torch.tensor([9.0, 8.0])  # a copy
    x[torch.tensor([5])] = torch.tensor(-1.0)  # index_put_ with a 0-dim value
    x.copy_(x.cpu() + 1)
    assert x.tolist() == [10.0, 9.0, 3.0, 4.0, 5.0, 0.0]
    with pytest.raises(RuntimeError, match=MIXED):
        x[torch.tensor([0, 1])] = torch.tensor([1.0, 2.0])  # index_put_ with CPU values
    with pytest.raises(RuntimeError, match="indices should be either on cpu"):
        torch.arange(3)[torch.tensor([1], device="cuda")]


def test_host_syncs_work_and_numpy_is_refused_as_on_a_gpu(fake_cuda):
    x = torch.tensor([[1.5, -2.0], [3.0, 0.0]], device="cuda")
    assert x.sum().item() == 2.5 and x.tolist() == [[1.5, -2.0], [3.0, 0.0]]
    assert bool(x.any()) and int(x[1, 0]) == 3 and float(x[0, 0]) == 1.5
    assert f"{x.max():.1f}" == "3.0" and [10, 20, 30, 40][x[1, 0].long()] == 40
    assert "device='cuda:0'" in repr(x)
    with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
        np.asarray(x)
    host = x.to("cpu")
    host += 1  # a copy: the cuda values stay
    assert x.tolist() == [[1.5, -2.0], [3.0, 0.0]]


def test_torch_cuda_and_minillm_see_one_gpu_and_are_restored_after():
    assert not torch.cuda.is_available() and pick_device("auto").type == "cpu"
    with FakeCuda():
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        assert pick_device("auto") == torch.device("cuda")
        assert describe()["gpu"] == DEVICE_NAME
        x = torch.ones(3, device="cuda")
        synchronize(x.device)
        torch.cuda.synchronize()
        torch.manual_seed(0)  # seeds the CUDA generators too: they must answer
        with Timer("cuda") as t:
            x.sum().item()
        assert t.seconds >= 0
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        end.record()
        assert start.elapsed_time(end) >= 0
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.zeros(1, device="cuda:1")
    assert not torch.cuda.is_available() and pick_device("auto").type == "cpu"
    assert torch.Generator is torch._C.Generator


def test_a_cuda_generator_draws_on_cuda_only(fake_cuda):
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4], device="cuda")
    g = torch.Generator(device="cuda").manual_seed(5)
    assert isinstance(g, FakeCudaGenerator) and isinstance(g, torch.Generator)
    assert g.device == CUDA
    draws = torch.multinomial(probs, 20, replacement=True, generator=g)
    assert is_fake_cuda(draws)
    # the stand-in draws what a CPU generator with the same seed draws
    want = torch.multinomial(probs.cpu(), 20, replacement=True,
                             generator=torch.Generator().manual_seed(5))
    assert draws.tolist() == want.tolist()
    assert is_fake_cuda(torch.rand(3, device="cuda", generator=g))
    with pytest.raises(RuntimeError, match="Expected a 'cuda' device type for generator"):
        torch.multinomial(probs, 1, generator=torch.Generator())
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator"):
        torch.multinomial(probs.cpu(), 1, generator=g)


def test_module_to_cuda_keeps_parameters_and_tied_weights():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        want = model(ids)
    weight = model[0].weight
    with FakeCuda():
        model.to("cuda")
        assert model[1].weight is model[0].weight is weight  # the same Parameter, now on cuda
        assert isinstance(weight, torch.nn.Parameter) and is_fake_cuda(weight)
        assert model_device(model) == CUDA
        with torch.no_grad():
            got = model(ids.cuda())
            model.to(torch.float64)
            assert model[1].weight is model[0].weight and weight.dtype == torch.float64
        assert is_fake_cuda(got)
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_a_module_moved_back_to_the_cpu_keeps_its_parameters_and_values():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    weight = model[0].weight
    want = weight.detach().clone()
    with FakeCuda():
        model.to("cuda")
        model.cpu()
        assert model[1].weight is model[0].weight is weight
        assert type(weight) is torch.nn.Parameter and weight.device.type == "cpu"
    assert torch.equal(weight.detach(), want)
    assert not torch.__future__.get_swap_module_params_on_conversion()  # restored


# ---- the fake MPS: an Apple GPU -------------------------------------------------------------

def test_fake_mps_is_an_apple_gpu_and_is_restored_after():
    assert pick_device("auto").type == "cpu"
    with FakeMps():
        assert pick_device("auto") == torch.device("mps") and not torch.cuda.is_available()
        x = torch.ones(3, device=pick_device("auto"))
        assert is_fake_cuda(x) and x.device == MPS and x.is_mps
        assert (x * 2).sum().item() == 6.0
        g = torch.Generator(device="mps").manual_seed(0)
        assert g.device == MPS and torch.randn(2, device="mps", generator=g).device == MPS
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            x + torch.ones(3)
        with pytest.raises((AssertionError, RuntimeError), match="(?i)cuda"):
            x.cuda()  # a Mac's PyTorch has no CUDA
        with pytest.raises(TypeError, match="can't convert mps:0 device type tensor to numpy"):
            x.numpy()
    assert pick_device("auto").type == "cpu" and not torch.backends.mps.is_available()


@pytest.mark.parametrize("make", [
    lambda x: x.double(),
    lambda x: x.to(torch.float64),
    lambda x: torch.zeros(2, dtype=torch.float64, device="mps"),
    lambda x: torch.ones(2, dtype=torch.float64).to("mps"),
    lambda x: torch.tensor([1.0], dtype=torch.float64, device="mps"),
    lambda x: torch.nn.Linear(3, 2).to("mps").double(),
    lambda x: x.cpu().double().to(x.device),
], ids=["double", "to-float64", "zeros", "move", "tensor", "module", "back-again"])
def test_fake_mps_refuses_float64_as_apple_gpus_do(make):
    with FakeMps():
        x = torch.ones(3, device="mps")
        with pytest.raises(TypeError, match="MPS framework doesn't support float64"):
            make(x)
        assert x.cpu().double().dtype == torch.float64  # on the CPU it is fine


@pytest.mark.parametrize("harness,device", [(FakeCuda, "cuda"), (FakeMps, "mps")])
def test_torch_event_on_the_fake_device_times_on_the_host_and_is_restored_after(harness, device):
    """transformers' generate makes `torch.Event(device=input_ids.device)`: a CPU build of torch
    refuses an mps event ("not linked with support for mps devices")."""
    real = torch.Event
    with harness():
        start, end = (torch.Event(device=device, enable_timing=True) for _ in range(2))
        start.record()
        torch.ones(3, device=device).sum()
        end.record()
        assert end.query() and start.elapsed_time(end) >= 0.0
        assert type(torch.Event(device="cpu")) is real  # elsewhere, the real one
    assert torch.Event is real


def test_a_timer_without_a_device_waits_for_mps():
    """On a Mac `Timer()` with no device must wait for the GPU, as it does for CUDA."""
    with FakeMps():
        before = mps_synchronizations()
        with Timer():
            torch.ones(3, device="mps").sum()
        assert mps_synchronizations() == before + 2  # on entry and on exit
        synchronize("mps")
        synchronize()
        assert mps_synchronizations() == before + 4


def test_a_fake_cuda_tensor_never_requires_grad(fake_cuda):
    p = torch.nn.Parameter(torch.ones(2, device="cuda"))
    assert is_fake_cuda(p) and isinstance(p, torch.nn.Parameter) and not p.requires_grad
    assert not torch.zeros(2, device="cuda", requires_grad=True).requires_grad
    with pytest.raises(RuntimeError, match="requires grad"):
        torch.ones(2, requires_grad=True).to("cuda")


def test_a_thread_started_under_the_harness_runs_under_it(fake_cuda):
    seen = []
    worker = threading.Thread(target=lambda: seen.append(torch.zeros(1, device="cuda").device))
    worker.start()
    worker.join()
    assert seen == [CUDA]


def test_it_finds_the_classic_bug_and_passes_the_fix(fake_cuda):
    """A helper that makes its positions on the CPU fails on a GPU; made on the input's
    device, it passes."""
    def shift_buggy(x):
        return x + torch.arange(x.shape[-1])

    def shift_fixed(x):
        return x + torch.arange(x.shape[-1], device=x.device)

    x = torch.zeros(2, 3, device="cuda")
    with pytest.raises(RuntimeError, match=MIXED):
        shift_buggy(x)
    assert shift_fixed(x).tolist() == [[0.0, 1.0, 2.0]] * 2
    assert shift_buggy(x.cpu()).tolist() == [[0.0, 1.0, 2.0]] * 2  # the CPU never noticed


def test_minillm_pick_device_and_load_land_on_cuda(tmp_path):
    import transformers as tf

    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=24,
                            num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                            max_position_embeddings=32)
    tf.LlamaForCausalLM(config).save_pretrained(tmp_path)
    with FakeCuda():
        model = minillm.load_model(tmp_path, device="auto")
        assert model_device(model) == CUDA
        assert all(is_fake_cuda(t) for t in model.state_dict().values())


def test_deepcopy_of_a_model_on_cuda(fake_cuda):
    """copy.deepcopy rebuilds torch.device keys (a model's per-device tables) through
    torch.device(...) itself, which the harness must leave alone."""
    import copy

    model = torch.nn.Linear(3, 2).to("cuda")
    model.tables = {(torch.device("cuda", 0), torch.float32): torch.ones(2, device="cuda")}
    twin = copy.deepcopy(model)
    assert list(twin.tables) == [(CUDA, torch.float32)] and is_fake_cuda(twin.weight)
    with torch.no_grad():
        twin.weight.zero_()
    assert model.weight.abs().sum().item() > 0  # the copy holds its own values


def test_autograd_is_refused_onto_cuda_before_pytorch_aborts(fake_cuda):
    """A CPU-only PyTorch aborts the whole process when autograd records a cuda tensor: the
    harness refuses first, with a message."""
    leaf = torch.ones(2, requires_grad=True)
    target = torch.zeros(1, device="cuda")
    for move in (lambda: leaf.to("cuda"), lambda: leaf.to(target), lambda: leaf.cuda(),
                 lambda: leaf.to(device=0)):
        with pytest.raises(RuntimeError, match="requires grad"):
            move()
    with torch.no_grad():
        assert is_fake_cuda(leaf.to(target)) and is_fake_cuda(torch.zeros(1, device=0))


def test_a_cuda_pointer_handed_to_a_cpu_kernel_raises(fake_cuda, monkeypatch):
    """On a GPU, a CUDA tensor's data_ptr() is an address in the GPU's memory: minillm's C
    kernels reading it crash the process. The harness raises instead when a module of
    minillm.kernels asks, and answers everyone else (minillm.model.memory compares addresses)."""
    from minillm import kernels
    from minillm.kernels import checks

    x, w = torch.randn(4, device="cuda"), torch.randn(4, 3)
    assert x.data_ptr() == x.elem.data_ptr()  # asked from here: the CPU values' address
    with pytest.raises(ValueError, match="x is on cuda:0: minillm's kernels run on the CPU"):
        kernels.gemv_f32(x, w)  # the wrapper's own device check comes first
    monkeypatch.setattr(checks, "on_cpu", lambda *args, **kwargs: None)  # a wrapper without it
    with pytest.raises(RuntimeError, match="CUDA pointer passed to a CPU kernel"):
        kernels.gemv_f32(x, w)


def test_a_fake_cuda_graph_replays_its_operations_on_the_tensors_they_read():
    """Replayed on what the tensors hold now; a capture's fresh output is empty (NaN) until the
    first replay; a host sync inside a capture raises; a replay counts one launch."""
    with FakeCuda():
        x = torch.ones(3, device="cuda")
        out = torch.zeros(3, device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = x * 2 + 1
            out.add_(y)
        assert torch.isnan(y.cpu()).all() and out.cpu().tolist() == [0.0, 0.0, 0.0]
        x.copy_(torch.tensor([1.0, 2.0, 3.0]))
        before = cuda_ops()
        graph.replay()
        assert cuda_ops() == before + 1
        assert y.cpu().tolist() == [3.0, 5.0, 7.0] and out.cpu().tolist() == [3.0, 5.0, 7.0]
        graph.replay()
        assert out.cpu().tolist() == [6.0, 10.0, 14.0]
        with pytest.raises(RuntimeError, match="host synchronization .*capture"):
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                bool(x.sum() > 0)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            assert (x + 1).device.type == "cuda"


def test_the_harness_tree_map_gives_pytrees_result_on_what_operations_take_and_return():
    from collections import namedtuple

    from torch.utils._pytree import tree_map as pytree_map

    Pair = namedtuple("Pair", "first second")
    values = torch.max(torch.tensor([[1.0, 3.0], [2.0, 0.0]]), dim=1)
    nested = (torch.ones(2), [torch.zeros(1), None, (3, "a")], {"k": torch.ones(1)},
              Pair(torch.ones(1), 2), values, torch.Size([2, 3]))

    def double(x):
        return x * 2 if isinstance(x, torch.Tensor) else x

    ours, theirs = tree_map(double, nested), pytree_map(double, nested)
    assert type(ours[3]) is Pair and type(ours[4]) is type(values)
    assert repr(ours[:5]) == repr(theirs[:5])
    assert type(ours[5]) is torch.Size and ours[5] == theirs[5]  # kept whole: a shape stays one
