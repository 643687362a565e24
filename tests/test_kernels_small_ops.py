"""minillm.kernels' small operations: RoPE with the cache write (rope_write_cache) and SiLU·mul
(silu_mul) against the PyTorch operations the fused step runs without them, to the bit (greedy
tokens must not depend on whether the kernels are built: test_kernel_dispatch.py), their
refusals, the rows of a fast model's prompt split between threads (SiLU·mul), and the fused
decode step's once-per-step check of the norms' weights. The logits of the whole step
against the readable model are in test_fast.py."""

import pytest
import torch
import torch.nn.functional as F

from kernel_machine import layers_use_kernels, needs_kernels
from minillm import kernels
from minillm.layers.rope import RotaryEmbedding, apply_rope

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]


def _angles(head_dim, pos):
    rotary = RotaryEmbedding(head_dim, 10000.0, 64)
    return rotary(torch.full((1, 1), pos))  # (1, 1, head_dim) each


@needs_kernels
@pytest.mark.parametrize("rows,heads,kv_heads,head_dim,pos", [
    (1, 9, 3, 64, 0), (1, 9, 3, 64, 40), (3, 4, 2, 8, 7), (2, 2, 1, 6, 63)])
def test_rope_write_cache_rotates_q_and_k_and_writes_k_and_v(rows, heads, kv_heads, head_dim,
                                                              pos):
    gen = torch.Generator().manual_seed(rows * heads + pos)
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * head_dim, generator=gen)
    keys = torch.randn(rows, kv_heads, 64, head_dim, generator=gen)
    values = torch.randn(rows, kv_heads, 64, head_dim, generator=gen)
    want_keys, want_values = keys.clone(), values.clone()
    cos, sin = _angles(head_dim, pos)
    split = qkv.view(rows, 1, heads + 2 * kv_heads, head_dim)
    want_q = apply_rope(split[:, :, :heads], cos, sin)[:, 0]
    want_keys[:, :, pos] = apply_rope(split[:, :, heads:heads + kv_heads], cos, sin)[:, 0]
    want_values[:, :, pos] = split[:, 0, heads + kv_heads:]

    q = kernels.rope_write_cache(qkv, cos[0, 0], sin[0, 0], keys, values, pos, heads)
    assert torch.equal(q, want_q)  # rounded as PyTorch rounds apply_rope
    assert torch.equal(keys, want_keys)  # every other position kept
    assert torch.equal(values, want_values)


@needs_kernels
def test_rope_write_cache_refuses_what_it_cannot_read():
    keys = torch.zeros(1, 2, 10, 8)
    qkv, cos = torch.zeros(1, (4 + 4) * 8), torch.ones(8)
    with pytest.raises(ValueError, match="pos must be an int 0..9"):
        kernels.rope_write_cache(qkv, cos, cos, keys, keys.clone(), 10, 4)
    with pytest.raises(ValueError, match="qkv must be 1 or more rows of 72 float32 values"):
        kernels.rope_write_cache(qkv, cos, cos, keys, keys.clone(), 0, 5)
    with pytest.raises(ValueError, match="qkv must be \\(1, 64\\): one row per cache row"):
        kernels.rope_write_cache(torch.zeros(2, 64), cos, cos, keys, keys.clone(), 0, 4)
    with pytest.raises(ValueError, match="sin must be 8 float32 values"):
        kernels.rope_write_cache(qkv, cos, torch.ones(4), keys, keys.clone(), 0, 4)
    with pytest.raises(ValueError, match="head_dim must be even"):
        odd = torch.zeros(1, 2, 10, 7)
        kernels.rope_write_cache(torch.zeros(1, 56), torch.ones(7), torch.ones(7), odd,
                                 odd.clone(), 0, 4)
    with pytest.raises(ValueError, match="values must be contiguous"):
        kernels.rope_write_cache(qkv, cos, cos, keys,
                                 keys.transpose(2, 3).contiguous().transpose(2, 3), 0, 4)
    with pytest.raises(ValueError, match="n_heads must be a positive int"):
        kernels.rope_write_cache(qkv, cos, cos, keys, keys.clone(), 0, 0)


@needs_kernels
@pytest.mark.parametrize("rows,f,scale", [(1, 1536, 3.0), (3, 40, 0.5), (2, 7, 30.0),
                                          (2, 1000, 8.0), (64, 8192, 120.0)])
def test_silu_mul_matches_torch_to_the_bit(rows, f, scale):
    """PyTorch takes SLEEF's exp over whole chunks of two vectors and the C library's after
    them: 40, 7 and 1000 leave such a tail at both vector widths)."""
    gen = torch.Generator().manual_seed(rows * f)
    gate_up = scale * torch.randn(rows, 2 * f, generator=gen)  # 120: past exp's range
    want = F.silu(gate_up[:, :f]) * gate_up[:, f:]
    assert torch.equal(kernels.silu_mul(gate_up), want)


@needs_kernels
@pytest.mark.parametrize("threads", [2, 3])
def test_a_prompts_rows_split_between_threads_give_the_same_bits(threads):
    """A fast model's prompt runs SiLU·mul on all its rows at once, the rows split between
    PyTorch's threads: each row's result is the one a single thread gives, PyTorch's."""
    gen = torch.Generator().manual_seed(threads)
    gate_up = 8 * torch.randn(300, 2 * 1536, generator=gen)
    alone = kernels.silu_mul(gate_up)
    torch.set_num_threads(threads)  # the fixture sets one thread back after the test
    assert torch.equal(kernels.silu_mul(gate_up), alone)
    assert torch.equal(alone, F.silu(gate_up[:, :1536]) * gate_up[:, 1536:])


@needs_kernels
def test_silu_mul_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="gate and up side by side"):
        kernels.silu_mul(torch.zeros(2, 7))
    with pytest.raises(ValueError, match="gate_up must be float32"):
        kernels.silu_mul(torch.zeros(2, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="gate_up must be contiguous"):
        kernels.silu_mul(torch.zeros(8, 2).t())


def test_the_small_kernels_refuse_a_tensor_on_another_device_before_reaching_c(monkeypatch):
    from fake_cuda import FakeCuda
    from minillm.kernels import build

    monkeypatch.setattr(build, "function", lambda name: pytest.fail(f"{name} reached"))
    with FakeCuda():
        g = torch.zeros(1, 2, 4, 8, device="cuda")
        with pytest.raises(ValueError, match="is on cuda:0: minillm's kernels run on the CPU"):
            kernels.rope_write_cache(torch.zeros(1, 48), torch.ones(8), torch.ones(8), g,
                                     torch.zeros(1, 2, 4, 8), 0, 2)
        with pytest.raises(ValueError, match="is on cuda:0: minillm's kernels run on the CPU"):
            kernels.silu_mul(torch.zeros(1, 8, device="cuda"))


@layers_use_kernels
def test_a_norm_weight_the_kernel_cannot_read_sends_the_norms_to_pytorch_and_says_so_once():
    from test_fast import _tiny  # the tiny Llama test_fast.py checks the step against

    from minillm.fast import optimize
    from minillm.generation.kv_cache import KVCache

    ids = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.inference_mode():
        want = _tiny()(ids)[:, -1]  # the readable model
        model = optimize(_tiny(), "fp32")
        norm = model.layers[1].mlp_norm
        norm.weight.data = torch.empty(2 * 48)[::2].copy_(norm.weight.data)  # strided
        assert not norm.weight.is_contiguous()
        cache = KVCache.for_model(model, 1, 8)
        model(ids[:, :4], cache=cache)
        with pytest.warns(RuntimeWarning, match="norm with PyTorch's kernel") as said:
            first = model(ids[:, 4:], cache=cache)
            cache.crop(4)
            again = model(ids[:, 4:], cache=cache)
    assert len(said) == 1
    torch.testing.assert_close(first[:, -1], want, atol=1e-4, rtol=0)
    assert torch.equal(first, again)
