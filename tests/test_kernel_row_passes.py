"""The int8 and Q4_1 kernels take several weight rows a pass (x's vectors loaded once for them:
four, or two for AVX2's Q4_1) and the rest one at a time; Q4_1 takes four blocks a step, then a
last pair (a masked load) and an odd block alone, or with AVX2 eight blocks a step and a masked
last step: a row's result must not depend on the rows computed beside it, on which rows of x
come with it, on how its blocks end, or on the thread count. The formulas themselves are checked
in test_kernels.py."""

import subprocess
import sys

import pytest
import torch

from minillm import kernels
from kernel_machine import needs_kernels

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), needs_kernels]


def _q4_1_blocks(rows, k, gen):
    blocks = torch.randint(0, 256, (rows, k // 32, 20), dtype=torch.uint8, generator=gen)
    blocks[..., 0:2] = (torch.rand(rows, k // 32, generator=gen) * 0.02).half() \
        .view(torch.uint8).view(rows, k // 32, 2)
    blocks[..., 2:4] = (torch.rand(rows, k // 32, generator=gen) * -0.1).half() \
        .view(torch.uint8).view(rows, k // 32, 2)
    return blocks.reshape(rows, -1).contiguous()


def _int8_reference(x, q, scale):
    """What gemm_int8 computes, step for step: x rounded to int16 per row (the largest value to
    q_max), the integer sums exact, then one float32 product."""
    k = x.shape[1]
    qmax = min(32767, (2 ** 31 - 1) // (128 * k))
    big = x.abs().amax(1, keepdim=True)
    sx = torch.where(big > 0, big / qmax, torch.ones_like(big))
    xq = torch.round(x * (1.0 / sx)).long()
    dots = xq @ q.long().t()
    return dots.float() * (sx * scale)


@pytest.mark.parametrize("n", [8, 9, 10, 11, 1])
@pytest.mark.parametrize("k", [576, 1536, 40])
def test_int8_rows_are_the_same_alone_or_in_a_pass(n, k):
    gen = torch.Generator().manual_seed(n * k)
    q = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=gen)
    scale = torch.rand(n, generator=gen) * 0.01
    x = torch.randn(3, k, generator=gen)
    got = kernels.gemm_int8(x, q, scale)
    assert torch.equal(got, _int8_reference(x, q, scale))
    for i in range(n):
        assert torch.equal(kernels.gemm_int8(x, q[i:i + 1], scale[i:i + 1])[:, 0], got[:, i])
    for threads in (2, 3):
        assert torch.equal(kernels.gemm_int8(x, q, scale, threads=threads), got)


@pytest.mark.parametrize("n", [8, 9, 10, 11, 1])
@pytest.mark.parametrize("blocks", [1, 2, 3, 4, 7, 8, 9, 16, 18, 48])
def test_q4_1_rows_are_the_same_alone_or_in_a_pass(n, blocks):
    gen = torch.Generator().manual_seed(n * blocks)
    k = 32 * blocks
    w = _q4_1_blocks(n, k, gen)
    x = torch.randn(3, k, generator=gen)
    got = kernels.gemm_q4_1(x, w)
    assert got.isfinite().all()
    for i in range(n):
        assert torch.equal(kernels.gemm_q4_1(x, w[i:i + 1])[:, 0], got[:, i])
    for r in range(3):
        assert torch.equal(kernels.gemm_q4_1(x[r:r + 1], w)[0], got[r])
    for threads in (2, 3):
        assert torch.equal(kernels.gemm_q4_1(x, w, threads=threads), got)


@pytest.mark.parametrize("n", [4, 5, 9, 1])
@pytest.mark.parametrize("blocks", [1, 2, 3, 7, 18, 48])
@pytest.mark.parametrize("rows", [4, 5, 9, 15])
def test_q4_1_few_rows_are_the_numbers_the_one_row_code_gives(n, blocks, rows):
    """From 4 rows of x to 15 (a speculative decode's verification, a small batch) the Q4_1
    kernel runs register tiles (4 weight rows by up to 4 rows of x, the m * sx terms 16 rows of
    x a vector): every number is the one the one-row code gives that row of x alone, bit for
    bit, whatever the rows' count, the weight rows left past the last four, an odd last block,
    or the threads. From 16 rows a prompt takes the tiles' arithmetic
    (test_kernel_q4_1_tiles.py)."""
    gen = torch.Generator().manual_seed(n * blocks + rows)
    k = 32 * blocks
    w = _q4_1_blocks(n, k, gen)
    x, b = torch.randn(rows, k, generator=gen), torch.randn(n, generator=gen)
    got = kernels.gemm_q4_1(x, w, b)
    for r in range(rows):
        assert torch.equal(kernels.gemm_q4_1(x[r:r + 1], w, b)[0], got[r])
    for threads in (2, 3):
        assert torch.equal(kernels.gemm_q4_1(x, w, b, threads=threads), got)


GUARD_PAGE_CHECK = """
import ctypes, mmap, torch
from minillm import kernels
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
page = mmap.PAGESIZE
area = mmap.mmap(-1, 2 * page)
start = ctypes.addressof(ctypes.c_char.from_buffer(area))
assert libc.mprotect(start + page, page, 0) == 0  # the page after the weights: no access
for blocks in (1, 2, 3, 5, 7, 18):
    size = 3 * blocks * 20
    w = torch.frombuffer(area, dtype=torch.uint8, count=size, offset=page - size).view(3, -1)
    w.copy_(torch.randint(0, 256, w.shape, dtype=torch.uint8))
    w.view(3, blocks, 20)[..., 0:4] = torch.tensor([0, 0x20, 0, 0xA0], dtype=torch.uint8)
    kernels.gemm_q4_1(torch.randn(2, 32 * blocks), w)
print("no read past the weights")
"""


def test_q4_1_reads_no_weight_past_the_last_block():
    """A row's last blocks (fewer than a whole step) load only their bytes: weights that end
    right before a page the process may not read are multiplied without a fault."""
    result = subprocess.run([sys.executable, "-c", GUARD_PAGE_CHECK], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "no read past the weights" in result.stdout
