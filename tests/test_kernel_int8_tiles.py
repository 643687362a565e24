"""gemm_int8 at many rows (a prompt): tiles of rows of x by weight rows, on AMX's tiles where the
CPU and Linux allow them, else (from 16 rows) groups of weight rows on the vector units. A row's result must be the bits the decode
kernel gives that row alone (the sums are integers; one float step turns each into its output),
whatever the shapes: K not a multiple of the vector width or of AMX's 64, rows of x not a
multiple of the tile's 16 (or 4), weight rows not a multiple of 32 (or 4), and any thread count."""

import pytest
import torch

from minillm import kernels
from minillm.kernels import build, dispatch
from minillm.quant.linear import Int8Linear
from kernel_machine import layers_use_kernels, needs_kernels
from test_kernel_row_passes import _int8_reference

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), needs_kernels]


def _weights(n, k, gen, bias):
    q = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=gen)
    scale = torch.rand(n, generator=gen) * 0.01
    return q, scale, (torch.randn(n, generator=gen) if bias else None)


@pytest.mark.parametrize("n, k, m", [
    (64, 576, 512),  # SmolLM2's width, a prompt
    (96, 128, 16),  # exactly one group of 16 rows
    (70, 576, 17),  # weight rows past the 32s, one row past the 16s
    (33, 1536, 45),  # the MLP's down projection, odd everything
    (40, 200, 20),  # K not a multiple of 64 (or 32): the vector tiles alone
    (32, 40, 7),  # fewer rows than AMX takes, K shorter than a vector
    (5, 64, 100),  # fewer weight rows than a tile of 32
    (20, 75, 33),  # an odd K: the last value of a row is packed beside a zero
    (70, 1536, 3),  # a decode step's few rows (VNNI's byte tiles), weight rows past the 4s
    (8, 64, 2),
])
@pytest.mark.parametrize("bias", [False, True])
def test_many_rows_give_the_bits_of_each_row_alone(n, k, m, bias):
    gen = torch.Generator().manual_seed(n * k + m)
    q, scale, b = _weights(n, k, gen, bias)
    x = torch.randn(m, k, generator=gen) * 3
    got = kernels.gemm_int8(x, q, scale, b)
    alone = torch.cat([kernels.gemm_int8(x[i:i + 1], q, scale, b) for i in range(m)])
    assert torch.equal(got, alone)
    if not bias:
        assert torch.equal(got, _int8_reference(x, q, scale))
    for threads in (2, 3):
        assert torch.equal(kernels.gemm_int8(x, q, scale, b, threads=threads), got)


def test_rows_of_extreme_values_keep_their_exact_sums():
    """x's largest values round to +-q_max, whose high bytes are the largest AMX multiplies, and
    weights of -128: each sum is still the exact integer."""
    k, m = 576, 32
    q = torch.full((64, k), -128, dtype=torch.int8)
    q[1::2] = 127
    scale = torch.full((64,), 1e-3)
    x = torch.ones(m, k)
    x[1::2] = -1
    x[:, ::3] *= -0.5
    got = kernels.gemm_int8(x, q, scale)
    assert torch.equal(got, _int8_reference(x, q, scale))
    assert torch.equal(got, torch.cat([kernels.gemm_int8(x[i:i + 1], q, scale)
                                       for i in range(m)]))


@layers_use_kernels
def test_a_prompt_through_an_int8_layer_gives_the_rows_of_its_decode_steps():
    gen = torch.Generator().manual_seed(3)
    layer = Int8Linear.from_weight(torch.randn(192, 576, generator=gen))
    prompt = torch.randn(1, 40, 576, generator=gen)
    whole = layer(prompt)
    steps = torch.cat([layer(prompt[:, t:t + 1]) for t in range(40)], dim=1)
    assert layer.few_rows_max == dispatch.int8_max_rows()
    if layer.few_rows_max >= 40:  # AMX: the kernel takes the prompt's rows, bit for bit
        assert torch.equal(whole, steps)
    else:  # PyTorch multiplies x as it is by the rebuilt weight; the kernel rounds x to int8
        torch.testing.assert_close(whole, steps, rtol=1e-3, atol=1e-2)
        assert not torch.equal(whole, steps)


def test_a_cpu_with_amx_multiplies_a_prompt_on_its_tiles():
    """Built with AMX where the CPU reports it; then the kernel must get the tiles from Linux
    (a machine that should use them fails here instead of quietly taking the vector units).
    Without them, groups of weight rows on the vector units take a prompt."""
    uses = build.function("gemm_int8_amx")()
    assert uses == ("-mamx-int8" in build.target().flags)
    assert dispatch.int8_max_rows() == dispatch.INT8_PROMPT_MAX_ROWS
