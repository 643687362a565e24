"""minillm.kernels beyond the linear layers (those are in test_fast.py): the paged attention
kernel against the attention math, its refusals, and every kernel built for AVX2 as well as for
this CPU's own vector width (a CPU without AVX-512 compiles the other half of the source)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from minillm import kernels
from minillm.layers.attention import attention_explicit

pytestmark = pytest.mark.usefixtures("one_torch_thread")

needs_kernel = pytest.mark.skipif(
    kernels.load("paged_scores") is None,
    reason="no C compiler or no x86-64 AVX2 CPU here: the engine gathers keys instead")


def _paged(rows, kv_heads, group, head_dim, seed=0, pool_slots=300, longest=70):
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(pool_slots, kv_heads, head_dim, generator=gen)
    values = torch.randn(pool_slots, kv_heads, head_dim, generator=gen)
    lengths = torch.randint(1, longest, (rows,), generator=gen)
    slots = torch.randint(0, pool_slots, (rows, int(lengths.max())), generator=gen)
    q = torch.randn(rows, kv_heads * group, head_dim, generator=gen)
    return q, keys, values, slots, lengths


def _reference(q, keys, values, slots, lengths):
    out = []
    for i, n in enumerate(lengths.tolist()):
        k = keys[slots[i, :n]].transpose(0, 1)[None]  # (1, kv_heads, n, head_dim)
        v = values[slots[i, :n]].transpose(0, 1)[None]
        seen = torch.ones(1, 1, 1, n, dtype=torch.bool)
        out.append(attention_explicit(q[i][None, :, None], k, v, seen)[0, :, 0])
    return torch.stack(out)


# head sizes the vectors divide (64, 128) and ones they do not (8, 24, 72, 200); one to eight
# query heads per key/value head; one row and more rows than a block of keys
SHAPES = [(16, 3, 3, 64), (3, 2, 4, 128), (5, 4, 1, 32), (4, 2, 2, 8), (3, 1, 3, 24),
          (2, 2, 1, 72), (2, 1, 8, 200), (1, 1, 1, 16)]


@needs_kernel
@pytest.mark.parametrize("rows,kv_heads,group,head_dim", SHAPES)
def test_paged_attention_matches_the_attention_math(rows, kv_heads, group, head_dim):
    args = _paged(rows, kv_heads, group, head_dim)
    torch.testing.assert_close(kernels.paged_decode_attention(*args), _reference(*args),
                               atol=1e-5, rtol=1e-5)


@needs_kernel
def test_paged_attention_reads_only_each_rows_own_slots():
    """Entries past a row's length are never read: pointing them at a slot full of NaN changes
    nothing."""
    q, keys, values, slots, lengths = _paged(4, 2, 3, 64)
    keys[0], values[0] = float("nan"), float("nan")
    slots = torch.where(slots == 0, torch.ones_like(slots), slots)
    want = kernels.paged_decode_attention(q, keys, values, slots, lengths)
    for i, n in enumerate(lengths.tolist()):
        slots[i, n:] = 0
    torch.testing.assert_close(kernels.paged_decode_attention(q, keys, values, slots, lengths),
                               want, atol=0, rtol=0)
    assert not want.isnan().any()


@needs_kernel
def test_paged_attention_refuses_what_it_cannot_read():
    q, keys, values, slots, lengths = _paged(2, 2, 2, 16)
    with pytest.raises(ValueError, match="float32 on the CPU"):
        kernels.paged_decode_attention(q.double(), keys, values, slots, lengths)
    with pytest.raises(ValueError, match="same head_dim"):
        kernels.paged_decode_attention(q[..., :8], keys, values, slots, lengths)
    with pytest.raises(ValueError, match="heads a multiple of kv_heads"):
        kernels.paged_decode_attention(q[:, :3], keys, values, slots, lengths)
    with pytest.raises(ValueError, match="contiguous and of the same shape"):
        kernels.paged_decode_attention(q, keys, values[:10], slots, lengths)
    with pytest.raises(ValueError, match="every slot 0..299"):
        kernels.paged_decode_attention(q, keys, values, slots + 300, lengths)
    with pytest.raises(ValueError, match="every length must be 1.."):
        kernels.paged_decode_attention(q, keys, values, slots, lengths * 0)
    with pytest.raises(ValueError, match="int64"):
        kernels.paged_decode_attention(q, keys, values, slots.int(), lengths)


AVX2_CHECK = textwrap.dedent("""
    import torch
    from minillm import kernels
    from minillm.quant import quantize_int8
    assert torch.backends.cpu.get_cpu_capability() == "AVX2"
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(40, 72, generator=gen)
    x = torch.randn(3, 72, generator=gen)
    bf = w.to(torch.bfloat16)
    torch.testing.assert_close(kernels.gemv_bf16(x[0], bf), bf.float() @ x[0], atol=1e-4,
                               rtol=1e-5)
    q, scale = quantize_int8(w)
    want = x @ (q.float() * scale[:, None]).t()
    torch.testing.assert_close(kernels.gemm_int8(x, q, scale), want, atol=1e-3, rtol=1e-3)
    for head_dim in (8, 20, 64):
        keys = torch.randn(50, 2, head_dim, generator=gen)
        values = torch.randn(50, 2, head_dim, generator=gen)
        slots = torch.randint(0, 50, (3, 30), generator=gen)
        lengths = torch.tensor([30, 1, 17])
        q = torch.randn(3, 6, head_dim, generator=gen)
        got = kernels.paged_decode_attention(q, keys, values, slots, lengths)
        for i, n in enumerate(lengths.tolist()):
            k = keys[slots[i, :n]].repeat_interleave(3, dim=1)  # (n, 6, head_dim)
            v = values[slots[i, :n]].repeat_interleave(3, dim=1)
            p = torch.softmax(torch.einsum("hd,nhd->hn", q[i], k) / head_dim ** 0.5, -1)
            torch.testing.assert_close(got[i], torch.einsum("hn,nhd->hd", p, v), atol=1e-5,
                                       rtol=1e-5)
    print("AVX2 kernels agree")
""")


@needs_kernel
def test_the_avx2_build_of_every_kernel_agrees_with_torch():
    """torch reads ATEN_CPU_CAPABILITY; minillm builds its kernels for the capability torch
    reports, so this runs the AVX2 half of the source on an AVX-512 machine."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    result = subprocess.run([sys.executable, "-c", AVX2_CHECK], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "AVX2 kernels agree" in result.stdout
