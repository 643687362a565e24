"""gemm_q4_1 at many rows (a prompt, from 16) on AMX's int8 tiles, where the CPU and Linux allow
them, else on the vector units in the tiles' order: each (row of x, weight row, block) an exact
integer dot product, turned into floats block after block. The integers are the decode kernel's,
the floats are added in another order: a row's result is the decode kernel's within float32
rounding, the same bits for any thread count and at every kernel level, and PyTorch's form of
the kernel's arithmetic (Q41Linear.forward_rounded) rounds x exactly as the kernel does.
tests/test_kernel_levels_agree.py holds the levels to the same bits."""

import numpy as np
import pytest
import torch

from minillm import kernels
from minillm.kernels import build
from minillm.quant.gguf_q4_1 import dequantize_q4_1, q4_1_minimums, round_x_per_block
from minillm.quant.linear import Q41Linear
from kernel_machine import needs_kernels
from test_kernel_row_passes import _q4_1_blocks

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), needs_kernels]


def _exact(x, w):
    """The kernel's arithmetic in float64: x rounded per block of 32 (as the kernel rounds it)
    times the dequantized weight, plus each minimum times the block's exact sum of x."""
    rounded = round_x_per_block(x)
    sums = (x - rounded).reshape(x.shape[0], -1, 32).sum(-1)
    return (rounded.double() @ dequantize_q4_1(w).double().t()
            + sums.double() @ q4_1_minimums(w).double().t())


@pytest.mark.parametrize("n, blocks, rows", [
    (64, 18, 512),  # SmolLM2's width, a prompt
    (96, 48, 16),  # the down projection's K, exactly one tile of rows
    (70, 18, 17),  # weight rows past the 32s, one row past the 16s
    (33, 3, 45),  # odd everything
    (32, 1, 16),  # one block
    (5, 2, 100),  # fewer weight rows than a tile of 32: the vector units alone
    (40, 5, 16),  # a group of 16 weight rows and half of one past the tiles' 32
])
@pytest.mark.parametrize("bias", [False, True])
def test_many_rows_give_each_rows_numbers_within_float_rounding(n, blocks, rows, bias):
    gen = torch.Generator().manual_seed(n * blocks + rows)
    k = 32 * blocks
    w = _q4_1_blocks(n, k, gen)
    x = torch.randn(rows, k, generator=gen) * 3
    b = torch.randn(n, generator=gen) if bias else None
    got = kernels.gemm_q4_1(x, w, b)
    alone = torch.cat([kernels.gemm_q4_1(x[i:i + 1], w, b) for i in range(rows)])
    scale = alone.abs().max().item()
    torch.testing.assert_close(got, alone, rtol=1e-5, atol=1e-6 * scale * blocks ** 0.5)
    want = _exact(x, w) + (b.double() if bias else 0)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6 * scale * blocks ** 0.5)
    for threads in (2, 3):
        assert torch.equal(kernels.gemm_q4_1(x, w, b, threads=threads), got)


def test_a_cpu_with_amx_multiplies_a_q4_1_prompt_on_its_tiles():
    """Built with AMX where the CPU reports it; then the kernel must get the tiles from Linux
    (a machine that should use them fails here instead of quietly taking the vector tiles)."""
    assert build.function("gemm_q4_1_amx")() == ("-mamx-int8" in build.target().flags)


def test_pytorch_rounds_x_as_the_kernel_does_next_to_a_half():
    """127 / max|x| divided as C divides: PyTorch's `127.0 / big` is 127 times big's reciprocal,
    an ulp above here, which puts x * inv at 1.5 instead of 1.4999999 and rounds it to 2 where
    the kernel rounds to 1 (found by a test that compared the two on random prompts)."""
    big, x = np.float32(2.910885), np.float32(0.03438053)
    assert np.rint(x * (np.float32(127) / big)) == 1
    row = torch.zeros(1, 32)
    row[0, 0], row[0, 1] = float(big), float(x)
    assert round_x_per_block(row)[0, 1] == torch.tensor(1.0) * (torch.tensor(float(big)) / 127.0)
    gen = torch.Generator().manual_seed(0)
    layer = Q41Linear(_q4_1_blocks(8, 32, gen))
    torch.testing.assert_close(layer.forward_rounded(row), kernels.gemm_q4_1(row, layer.blocks),
                               rtol=1e-6, atol=1e-6)

