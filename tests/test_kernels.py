"""minillm.kernels: the float32 kernels (one row and several), the int8 and Q4_1 kernels, RMSNorm,
the decode attention over a contiguous cache and the paged attention kernel against torch's math,
their refusals, and every kernel built for AVX2 as well as for this CPU's own vector width (a CPU
without AVX-512 compiles the other half of the sources). The build itself (warnings, a failed
compile, where it goes) is in test_kernel_build.py; the layers that call the weight kernels are
tested in test_fast.py and test_kernel_dispatch.py.

On a machine that can build the kernels (x86-64 with AVX2 and a C compiler) these tests run and
a failed build fails them; elsewhere they skip, saying why (tests/kernel_machine.py)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from minillm import kernels
from minillm.kernels import build
from minillm.layers.attention import attention_explicit
from kernel_machine import needs_kernels

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), needs_kernels]


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


@pytest.mark.parametrize("rows,kv_heads,group,head_dim", SHAPES)
def test_paged_attention_matches_the_attention_math(rows, kv_heads, group, head_dim):
    args = _paged(rows, kv_heads, group, head_dim)
    torch.testing.assert_close(kernels.paged_decode_attention(*args), _reference(*args),
                               atol=1e-5, rtol=1e-5)


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


def test_paged_attention_refuses_what_it_cannot_read():
    q, keys, values, slots, lengths = _paged(2, 2, 2, 16)
    with pytest.raises(ValueError, match="q must be float32"):
        kernels.paged_decode_attention(q.double(), keys, values, slots, lengths)
    with pytest.raises(ValueError, match="same head_dim"):
        kernels.paged_decode_attention(q[..., :8], keys, values, slots, lengths)
    with pytest.raises(ValueError, match="heads a multiple of kv_heads"):
        kernels.paged_decode_attention(q[:, :3], keys, values, slots, lengths)
    with pytest.raises(ValueError, match="of one shape"):
        kernels.paged_decode_attention(q, keys, values[:10], slots, lengths)
    with pytest.raises(ValueError, match="every slot 0..299"):
        kernels.paged_decode_attention(q, keys, values, slots + 300, lengths)
    with pytest.raises(ValueError, match="every length must be 1.."):
        kernels.paged_decode_attention(q, keys, values, slots, lengths * 0)
    with pytest.raises(ValueError, match="slots must be int64"):
        kernels.paged_decode_attention(q, keys, values, slots.int(), lengths)


@pytest.mark.parametrize("k,n", [(576, 960), (1536, 576), (16, 16), (17, 5), (33, 1000),
                                 (40, 513)])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gemv_f32_matches_torch_for_any_shape_bias_and_threads(k, n, threads):
    """Sixteen weight rows at a time, a tail of rows and of columns, columns split in strips."""
    gen = torch.Generator().manual_seed(k * n)
    w, x, b = torch.randn(k, n, generator=gen), torch.randn(1, k, generator=gen), \
        torch.randn(n, generator=gen)
    # the result's shape follows x's: (1, N) for a (1, K) row, (N,) for a vector
    torch.testing.assert_close(kernels.gemv_f32(x, w, threads=threads), x @ w,
                               atol=1e-4, rtol=1e-5)
    out = torch.full((n,), float("nan"))
    got = kernels.gemv_f32(x[0], w, b, out=out, threads=threads)
    assert got is out
    torch.testing.assert_close(got, (x @ w)[0] + b, atol=1e-4, rtol=1e-5)


def test_gemv_f32_refuses_what_it_cannot_read():
    w, x = torch.randn(8, 4), torch.randn(8)
    with pytest.raises(ValueError, match="weight must be contiguous"):
        kernels.gemv_f32(x, w.t())
    with pytest.raises(ValueError, match="weight must be float32"):
        kernels.gemv_f32(x, w.double())
    with pytest.raises(ValueError, match="x must be 8 float32 values"):
        kernels.gemv_f32(torch.randn(7), w)
    with pytest.raises(ValueError, match="bias must be 4"):
        kernels.gemv_f32(x, w, torch.randn(5))


@pytest.mark.parametrize("k,n", [(576, 960), (1536, 576), (17, 5), (33, 1000), (40, 513),
                                 (40, 47)])
@pytest.mark.parametrize("rows", [1, 2, 7, 8, 9, 16, 17, 64, 300])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gemm_f32_matches_torch_for_any_rows_shape_bias_and_threads(k, n, rows, threads):
    """Tiles of rows and of columns, a tail of each (columns fewer than a vector too), the
    weight taken a span of rows at a time (few rows) or whole (more), columns split between
    threads."""
    gen = torch.Generator().manual_seed(k * n + rows)
    w, x, b = torch.randn(k, n, generator=gen), torch.randn(rows, k, generator=gen), \
        torch.randn(n, generator=gen)
    torch.testing.assert_close(kernels.gemm_f32(x, w, threads=threads), x @ w, atol=5e-4,
                               rtol=1e-5)  # sums of up to 1536 products, in another order
    out = torch.full((rows, n), float("nan"))
    got = kernels.gemm_f32(x, w, b, out=out, threads=threads)
    assert got is out
    torch.testing.assert_close(got, torch.addmm(b, x, w), atol=5e-4, rtol=1e-5)


def test_gemm_f32_refuses_what_it_cannot_read():
    w, x = torch.randn(8, 4), torch.randn(3, 8)
    with pytest.raises(ValueError, match="weight must be contiguous"):
        kernels.gemm_f32(x, w.t().contiguous().t())
    with pytest.raises(ValueError, match="x must be 1 or more rows of 8 float32 values"):
        kernels.gemm_f32(torch.randn(0, 8), w)
    with pytest.raises(ValueError, match="rows of 8"):
        kernels.gemm_f32(torch.randn(3, 7), w)
    with pytest.raises(ValueError, match="x must be contiguous"):
        kernels.gemm_f32(torch.randn(8, 3).t(), w)
    with pytest.raises(ValueError, match="bias must be 4"):
        kernels.gemm_f32(x, w, torch.randn(5))
    with pytest.raises(ValueError, match=r"out must have shape \(3, 4\)"):
        kernels.gemm_f32(x, w, out=torch.empty(4, 3))


def _bf16_tiles_take(rows: int, n: int, k: int) -> bool:
    """Whether gemm_bf16 multiplies these rows on AMX's bf16 tiles here (x rounded to bf16)."""
    return bool(build.function("gemm_bf16_amx")()) and rows >= 2 and k % 32 == 0 and n >= 32


@pytest.mark.parametrize("n,k", [(576, 576), (1536, 576), (576, 1536), (49, 33), (5, 17),
                                 (100, 8)])
@pytest.mark.parametrize("rows", [1, 2, 7, 8, 9, 17, 64])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gemm_bf16_is_the_widened_weight_times_x(n, k, rows, threads):
    """The float64 product of the widened weight and x, within float32's rounding of sums of k
    products: x as it is on the float32 strips (every row then as gemv_bf16 gives it alone),
    x rounded to bf16 on AMX's tiles (where this CPU has them); strips and rows that do not fill
    a tile, columns fewer than a vector, columns split between threads."""
    gen = torch.Generator().manual_seed(n * k + rows)
    w = torch.randn(n, k, generator=gen).to(torch.bfloat16)
    x, b = torch.randn(rows, k, generator=gen), torch.randn(n, generator=gen)
    tiles = _bf16_tiles_take(rows, n, k)
    want = (x.to(torch.bfloat16) if tiles else x).double() @ w.double().t()
    got = kernels.gemm_bf16(x, w, threads=threads)
    torch.testing.assert_close(got.double(), want, atol=2e-5 * k ** 0.5, rtol=1e-5)
    torch.testing.assert_close(kernels.gemm_bf16(x, w, b, threads=threads).double(),
                               want + b.double(), atol=2e-5 * k ** 0.5, rtol=1e-5)
    if not tiles:
        for r in range(rows):
            torch.testing.assert_close(got[r], kernels.gemv_bf16(x[r], w),
                                       atol=1e-5 * k ** 0.5, rtol=1e-5)  # another order of sums
    assert torch.equal(kernels.gemm_bf16(x, w, threads=1), got)  # threads split columns only


@pytest.mark.parametrize("n, k, rows", [(70, 576, 40), (32, 64, 2), (32, 64, 16), (64, 96, 31),
                                        (96, 64, 15), (96, 64, 33), (40, 64, 48)])
@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_bf16_on_amx_tiles_rounds_x_to_bf16(n, k, rows, threads):
    """From 2 rows the bf16 tiles (where the CPU has them) multiply x rounded to bf16 to nearest,
    ties to even, as PyTorch rounds it: an identity weight gives x.to(bfloat16) back bit for bit,
    tiny, huge and halfway values included; so do the weight rows past the last 32 (float32
    strips, fed the same rounded x), with a bias where it belongs; tiles of x split between 16
    and 32 rows and cut short; a NaN stays in its row."""
    if not build.function("gemm_bf16_amx")():
        pytest.skip("this CPU has no AMX bf16 tiles (or Linux does not let the process use them)")
    gen = torch.Generator().manual_seed(n + k + rows)
    x = torch.randn(rows, k, generator=gen) * torch.logspace(-20, 20, k)
    x[0, :4] = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1 + 2 ** -8 + 2 ** -20])
    rounded = x.to(torch.bfloat16).float()
    assert rounded[0, :4].tolist() == [1.0, 1 + 2 ** -6, -1.0, 1 + 2 ** -7]  # ties to even
    eye = torch.eye(n, k, dtype=torch.bfloat16)
    cols = min(n, k)
    got = kernels.gemm_bf16(x, eye, threads=threads)
    assert torch.equal(got[:, :cols], rounded[:, :cols]) and not got[:, cols:].any()
    b = torch.randn(n, generator=gen)
    got = kernels.gemm_bf16(x, eye, b, threads=threads)
    assert torch.equal(got[:, :cols], rounded[:, :cols] + b[:cols])
    x[-1, 1] = float("nan")
    got = kernels.gemm_bf16(x, eye, threads=threads)
    assert got[-1, :cols].isnan().all() and not got[:-1].isnan().any()


@pytest.mark.parametrize("bits", [0x7F800001, 0x7FFFFFFF, 0xFFC00001])
def test_gemm_bf16_on_amx_tiles_keeps_every_nan_a_nan(bits):
    """Rounding a float's bits to bf16 by adding half a step would turn a NaN whose payload is in
    the low bits into an infinity (0x7F800001) or carry it into the sign (0x7FFFFFFF: -0.0); the
    tiles' x keeps each a NaN, as x.to(torch.bfloat16) does (a weight of ones tells a NaN from an
    infinity, and from a zero)."""
    if not build.function("gemm_bf16_amx")():
        pytest.skip("this CPU has no AMX bf16 tiles (or Linux does not let the process use them)")
    x = torch.zeros(4, 64)
    x[1, 3] = torch.tensor([bits], dtype=torch.int64).to(torch.int32).view(torch.float32)[0]
    assert x[1, 3].isnan() and x.to(torch.bfloat16)[1, 3].isnan()
    got = kernels.gemm_bf16(x, torch.ones(32, 64, dtype=torch.bfloat16))
    assert got[1].isnan().all() and torch.equal(got[[0, 2, 3]], torch.zeros(3, 32))


def test_a_cpu_with_amx_bf16_multiplies_several_rows_on_its_tiles():
    """Built with AMX's bf16 tiles where the CPU reports them; then the kernel must get the tiles
    from Linux (a machine that should use them fails here instead of quietly taking the
    float32 strips)."""
    uses = build.function("gemm_bf16_amx")()
    assert uses == ("-mamx-bf16" in build.target().flags)


def test_gemm_bf16_refuses_what_it_cannot_read():
    w, x = torch.randn(4, 8).to(torch.bfloat16), torch.randn(3, 8)
    with pytest.raises(ValueError, match="weight must be bfloat16"):
        kernels.gemm_bf16(x, w.float())
    with pytest.raises(ValueError, match="weight must be contiguous"):
        kernels.gemm_bf16(x, w.t().contiguous().t())
    with pytest.raises(ValueError, match="rows of 8"):
        kernels.gemm_bf16(torch.randn(3, 7), w)
    with pytest.raises(ValueError, match="x must be float32"):
        kernels.gemm_bf16(x.to(torch.bfloat16), w)
    with pytest.raises(ValueError, match="bias must be 4"):
        kernels.gemm_bf16(x, w, torch.randn(5))


def _q4_1_blocks(rows, k, gen):
    """Random GGUF Q4_1 blocks: d in [0, 0.02), m in (-0.1, 0] as float16, random nibbles."""
    blocks = torch.randint(0, 256, (rows, k // 32, 20), dtype=torch.uint8, generator=gen)
    d = (torch.rand(rows, k // 32, generator=gen) * 0.02).half()
    m = (torch.rand(rows, k // 32, generator=gen) * -0.1).half()
    blocks[..., 0:2] = d.view(torch.uint8).view(rows, k // 32, 2)
    blocks[..., 2:4] = m.view(torch.uint8).view(rows, k // 32, 2)
    return blocks.reshape(rows, -1).contiguous()


def _q4_1_reference(x, blocks):
    """What the Q4_1 kernel computes, in float64: each block of 32 values of x rounded to int8
    with its own scale (max|x| / 127), times the block's q * d, plus m times the block's exact
    sum of x."""
    from minillm.quant.gguf_q4_1 import dequantize_q4_1

    rows, k = x.shape
    n = blocks.shape[0]
    xb = x.view(rows, k // 32, 32)
    big = xb.abs().amax(-1, keepdim=True)
    inv = torch.where(big > 0, 127.0 / big, torch.zeros_like(big))
    xq = torch.round(xb * inv).double() * (big / 127.0).double()  # float32 product, as in C
    fields = blocks.view(n, k // 32, 20)
    m = fields[..., 2:4].contiguous().view(torch.float16).double().view(n, k // 32, 1)
    q_times_d = dequantize_q4_1(blocks).double().view(n, k // 32, 32) - m
    return (torch.einsum("rbj,nbj->rn", xq, q_times_d)
            + torch.einsum("rb,nb->rn", xb.double().sum(-1), m[..., 0]))


@pytest.mark.parametrize("n,k,rows", [(960, 576, 1), (576, 1536, 3), (40, 32, 2), (17, 96, 5),
                                      (7, 224, 1), (576, 576, 64), (1536, 576, 19),
                                      (576, 1536, 37), (9, 224, 6), (5, 256, 1), (3, 288, 2),
                                      (6, 480, 3)])
def test_gemm_q4_1_multiplies_the_blocks_by_x_rounded_to_int8_per_block(n, k, rows):
    """The kernel reads the blocks as the file stores them (weight = q * d + m) and, like
    llama.cpp, multiplies them by x rounded to int8 per block of 32: within 1% of the float
    product, equal to that rounding's own product."""
    from minillm.quant.gguf_q4_1 import dequantize_q4_1

    gen = torch.Generator().manual_seed(n + k)
    blocks = _q4_1_blocks(n, k, gen)
    x, b = torch.randn(rows, k, generator=gen), torch.randn(n, generator=gen)
    got = kernels.gemm_q4_1(x, blocks)
    torch.testing.assert_close(got.double(), _q4_1_reference(x, blocks), atol=1e-4, rtol=1e-4)
    exact = x @ dequantize_q4_1(blocks).float().t()
    assert (got - exact).norm() / exact.norm() < 0.01
    torch.testing.assert_close(kernels.gemm_q4_1(x, blocks, b), got + b, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="20 bytes per block"):
        kernels.gemm_q4_1(x, blocks[:, :-1].contiguous())
    with pytest.raises(ValueError, match=f"rows of {k} float32 values"):
        kernels.gemm_q4_1(x[:, :-1], blocks)


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
    torch.testing.assert_close(kernels.gemm_bf16(x, bf), x @ bf.float().t(), atol=1e-4,
                               rtol=1e-5)
    for k, n in ((72, 40), (33, 1000), (16, 8)):
        wt, xv, b = (torch.randn(k, n, generator=gen), torch.randn(k, generator=gen),
                     torch.randn(n, generator=gen))
        torch.testing.assert_close(kernels.gemv_f32(xv, wt, b), xv @ wt + b, atol=1e-4,
                                   rtol=1e-5)
    assert kernels.status().label == "AVX2"
    for rows, k, n in ((3, 72, 40), (8, 33, 1000), (5, 40, 47)):
        wt, xm, b = (torch.randn(k, n, generator=gen), torch.randn(rows, k, generator=gen),
                     torch.randn(n, generator=gen))
        torch.testing.assert_close(kernels.gemm_f32(xm, wt, b), torch.addmm(b, xm, wt),
                                   atol=1e-4, rtol=1e-5)
    q, scale = quantize_int8(w)
    want = x @ (q.float() * scale[:, None]).t()
    torch.testing.assert_close(kernels.gemm_int8(x, q, scale), want, atol=1e-3, rtol=1e-3)
    from minillm.quant.gguf_q4_1 import dequantize_q4_1
    blocks = torch.randint(0, 256, (40, 3, 20), dtype=torch.uint8, generator=gen)
    blocks[..., 0:4] = torch.tensor([0x00, 0x20, 0x00, 0xA0], dtype=torch.uint8)  # d, m: ±2**-7
    blocks = blocks.reshape(40, 60)
    x96 = torch.randn(3, 96, generator=gen)
    exact = x96 @ dequantize_q4_1(blocks).float().t()
    assert (kernels.gemm_q4_1(x96, blocks) - exact).norm() / exact.norm() < 0.01
    xr, wr = torch.randn(3, 20, generator=gen), torch.randn(20, generator=gen)
    torch.testing.assert_close(kernels.rms_norm(xr, wr, 1e-6),
                               torch.nn.functional.rms_norm(xr, (20,), wr, 1e-6))
    qd, kd, vd = (torch.randn(2, 6, 20, generator=gen), torch.randn(2, 2, 9, 20, generator=gen),
                  torch.randn(2, 2, 9, 20, generator=gen))
    torch.testing.assert_close(
        kernels.decode_attention(qd, kd, vd, 7),
        torch.nn.functional.scaled_dot_product_attention(
            qd.view(2, 2, 3, 20), kd[:, :, :7], vd[:, :, :7]).reshape(2, 6, 20),
        atol=1e-5, rtol=1e-5)
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
    gu = 8 * torch.randn(2, 2 * 40, generator=gen)  # 40: two vectors of 16 and a tail of 8
    assert torch.equal(kernels.silu_mul(gu), torch.nn.functional.silu(gu[:, :40]) * gu[:, 40:])
    from minillm.layers.rope import RotaryEmbedding, apply_rope
    cos, sin = RotaryEmbedding(8, 10000.0, 16)(torch.full((1, 1), 5))
    qkv, cache = torch.randn(2, 8 * 8, generator=gen), torch.zeros(2, 2, 16, 8)
    q = kernels.rope_write_cache(qkv, cos[0, 0], sin[0, 0], cache, cache.clone(), 5, 4)
    assert torch.equal(q, apply_rope(qkv.view(2, 1, 8, 8)[:, :, :4], cos, sin)[:, 0])
    print("AVX2 kernels agree")
""")


def test_the_avx2_build_of_every_kernel_agrees_with_torch():
    """torch reads ATEN_CPU_CAPABILITY; minillm builds its kernels for the capability torch
    reports, so this runs the AVX2 half of the source on an AVX-512 machine (with no level
    forced: the build follows torch's capability down)."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    env.pop("MINILLM_KERNEL_LEVEL", None)
    result = subprocess.run([sys.executable, "-c", AVX2_CHECK], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "AVX2 kernels agree" in result.stdout


@pytest.mark.parametrize("rows,d", [(1, 576), (3, 20), (2, 64), (5, 7)])
def test_rms_norm_matches_torch(rows, d):
    gen = torch.Generator().manual_seed(rows * d)
    x, w = torch.randn(rows, d, generator=gen), torch.randn(d, generator=gen)
    torch.testing.assert_close(kernels.rms_norm(x, w, 1e-6), F.rms_norm(x, (d,), w, 1e-6))
    with pytest.raises(ValueError, match="weight must be 20 float32 values"):
        kernels.rms_norm(torch.randn(2, 20), torch.randn(21), 1e-6)
    with pytest.raises(ValueError, match="x must be float32"):
        kernels.rms_norm(x.double(), w, 1e-6)


@pytest.mark.parametrize("rows,kv_heads,group,head_dim,length", [
    (1, 3, 3, 64, 1), (1, 3, 3, 64, 37), (2, 2, 4, 20, 9), (3, 1, 1, 128, 70), (1, 1, 2, 256, 5)])
def test_decode_attention_matches_torch(rows, kv_heads, group, head_dim, length):
    gen = torch.Generator().manual_seed(rows + head_dim + length)
    q = torch.randn(rows, kv_heads * group, head_dim, generator=gen)
    keys = torch.randn(rows, kv_heads, 80, head_dim, generator=gen)
    values = torch.randn(rows, kv_heads, 80, head_dim, generator=gen)
    want = F.scaled_dot_product_attention(
        q.view(rows, kv_heads, group, head_dim), keys[:, :, :length], values[:, :, :length])
    got = kernels.decode_attention(q, keys, values, length)
    torch.testing.assert_close(got, want.reshape(rows, kv_heads * group, head_dim), atol=1e-5,
                               rtol=1e-5)


def test_decode_attention_refuses_what_it_cannot_read():
    q, keys = torch.randn(1, 4, 8), torch.randn(1, 2, 10, 8)
    with pytest.raises(ValueError, match="length must be an int 1..10"):
        kernels.decode_attention(q, keys, keys.clone(), 11)
    with pytest.raises(ValueError, match="heads a multiple of kv_heads"):
        kernels.decode_attention(q[:, :3], keys, keys.clone(), 4)
    big = torch.randn(1, 1, 4, kernels.MAX_HEAD_DIM + 8)
    with pytest.raises(ValueError, match="at most 256, MAX_HEAD_DIM"):
        kernels.decode_attention(torch.randn(1, 1, kernels.MAX_HEAD_DIM + 8), big, big, 2)
    with pytest.raises(ValueError, match="keys must be contiguous"):
        kernels.decode_attention(q, keys.transpose(2, 3).contiguous().transpose(2, 3),
                                 keys.clone(), 4)


def test_the_int8_kernel_cannot_overflow_its_integer_sums():
    """The worst case for int32 sums: every weight 127 and every x at its largest. The kernel
    rounds x to fewer steps on long rows, so the sum stays exact instead of wrapping around."""
    for k in (576, 1536, 4096, kernels.INT8_MAX_K):
        q = torch.full((3, k), 127, dtype=torch.int8)
        q[1] = -128
        x, scale = torch.ones(2, k), torch.ones(3)
        want = x @ q.float().t()
        torch.testing.assert_close(kernels.gemm_int8(x, q, scale), want, rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="at most 32,768 values"):
        kernels.gemm_int8(torch.ones(1, kernels.INT8_MAX_K + 32), torch.ones(
            1, kernels.INT8_MAX_K + 32, dtype=torch.int8), torch.ones(1))


def test_every_wrapper_refuses_a_tensor_on_another_device_before_reaching_c(monkeypatch):
    """A CUDA tensor (here the fake device's) raises a ValueError naming it; the C library is
    not even asked for its function."""
    from fake_cuda import FakeCuda
    from minillm.kernels import build

    monkeypatch.setattr(build, "function", lambda name: pytest.fail(f"{name} reached"))
    with FakeCuda():
        g = lambda *shape, dtype=torch.float32: torch.ones(*shape, device="cuda").to(dtype)  # noqa: E731
        calls = [
            lambda: kernels.gemv_f32(g(8), torch.ones(8, 4)),
            lambda: kernels.gemv_f32(torch.ones(8), g(8, 4)),
            lambda: kernels.gemm_f32(g(2, 8), torch.ones(8, 4)),
            lambda: kernels.gemv_bf16(torch.ones(8), g(4, 8, dtype=torch.bfloat16)),
            lambda: kernels.gemm_int8(torch.ones(2, 8), g(4, 8, dtype=torch.int8),
                                      torch.ones(4)),
            lambda: kernels.gemm_int8(torch.ones(2, 8), torch.ones(4, 8, dtype=torch.int8),
                                      g(4)),
            lambda: kernels.gemm_q4_1(g(2, 32), torch.zeros(4, 20, dtype=torch.uint8)),
            lambda: kernels.rms_norm(g(2, 8), torch.ones(8), 1e-6),
            lambda: kernels.decode_attention(g(1, 2, 8), torch.ones(1, 1, 4, 8),
                                             torch.ones(1, 1, 4, 8), 2),
            lambda: kernels.paged_decode_attention(
                torch.ones(1, 2, 8), torch.ones(4, 1, 8), torch.ones(4, 1, 8),
                g(1, 2, dtype=torch.int64), torch.ones(1, dtype=torch.int64)),
        ]
        for call in calls:
            with pytest.raises(ValueError, match="is on cuda:0: minillm's kernels run on the CPU"):
                call()
