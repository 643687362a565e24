"""Where a kernel promises the same numbers at every instruction-set level, each level this
machine runs is built (MINILLM_KERNEL_LEVEL, in a process of its own) and their results compared
bit for bit. Not an every_level file: this one runs the levels itself."""

import os
import subprocess
import sys

import pytest
import torch

from kernel_machine import needs_kernels

pytestmark = needs_kernels

PRODUCTS = """
import sys, torch
sys.path.insert(0, {tests!r})
from minillm import kernels
from minillm.kernels import build
from test_kernel_row_passes import _q4_1_blocks
out = []
for n, blocks, rows in ((70, 18, 17), (33, 3, 45), (5, 2, 16)):
    gen = torch.Generator().manual_seed(n + blocks + rows)
    w = _q4_1_blocks(n, 32 * blocks, gen)
    x, b = torch.randn(rows, 32 * blocks, generator=gen) * 3, torch.randn(n, generator=gen)
    out.append(kernels.gemm_q4_1(x, w, b))
for n, k, rows in ((70, 576, 17), (20, 75, 33), (40, 200, 3)):
    gen = torch.Generator().manual_seed(n + k + rows)
    q = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=gen)
    scale, b = torch.rand(n, generator=gen) * 0.01, torch.randn(n, generator=gen)
    out.append(kernels.gemm_int8(torch.randn(rows, k, generator=gen) * 3, q, scale, b))
torch.save(out, sys.argv[1])
print(build.status().isa)
"""


def test_q4_1_prompts_and_int8_rows_get_the_same_numbers_at_every_level(tmp_path):
    """The tiles where the CPU has them, the vector units in the tiles' order where it does not
    (AVX-512 with and without VNNI, AVX2): a prompt's Q4_1 products are the same bits at every
    level this machine runs, so its tokens do not depend on the level; int8's sums are integers,
    its rows the same bits at every level and row count (an odd K, a decode step's 3 rows)."""
    from minillm.kernels import build

    levels = build.levels_here()
    if len(levels) < 2:
        pytest.skip(f"this machine runs one kernel level: {levels}")
    results = {}
    for level in levels:
        env = {**os.environ, "MINILLM_KERNEL_LEVEL": level}
        path = tmp_path / f"{level}.pt"
        done = subprocess.run([sys.executable, "-c", PRODUCTS.format(tests=str(
            os.path.dirname(__file__))), str(path)], capture_output=True, text=True, env=env,
            timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split()[-1] == level
        results[level] = torch.load(path)
    first, *rest = results
    for level in rest:
        for got, want in zip(results[level], results[first]):
            assert torch.equal(got, want), f"{level} and {first} differ"
