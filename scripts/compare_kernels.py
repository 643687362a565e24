"""Time the int8 and Q4_1 weight kernels of another commit against this checkout's, interleaved in
one process, on SmolLM2-135M's shapes at batch 1.

    .venv/bin/python scripts/compare_kernels.py [--base main] [--threads 1,2] [--layers 40]

Both versions of minillm/kernels/c/ are compiled with the flags minillm.kernels.build picks for
this CPU and loaded side by side (minillm's own build is not touched); the two are called in
turn, which one first alternating, each call on the next of `--layers` weight copies, as a
decode step goes through its 30 layers: the weights come from the last-level cache, not from L2
(--layers 1 keeps them in L2). Prints, per shape and thread count, the median time of each, the median of the pairwise
ratios base/new with their interquartile range, and the largest difference between the two
outputs relative to the largest output (0 when the new kernel adds in the same order). Nothing is
asserted: tests/test_kernels.py and tests/test_kernel_row_passes.py hold the results.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from minillm.kernels import build  # noqa: E402
from minillm.kernels.limits import DEFINES  # noqa: E402
from minillm.kernels.signatures import SIGNATURES  # noqa: E402

# o_proj, down_proj, fused q/k/v, fused gate/up; the LM head (tied to the embedding) is int8 in
# both quantized formats
SHAPES = {"q4_1": [(576, 576), (576, 1536), (960, 576), (3072, 576)],
          "int8": [(576, 576), (576, 1536), (960, 576), (3072, 576), (49152, 576)]}
MOST_BYTES = 1 << 28  # weight copies of one shape take at most this much memory


def compile_library(sources: Path, out: Path) -> ctypes.CDLL:
    found = build.target()
    if isinstance(found, str):
        sys.exit(f"the kernels cannot be built here: {found}")
    command = [build.compiler(), *build.BASE_FLAGS, *found.flags, build.OPENMP,
               *(f"-D{k}={v}" for k, v in DEFINES.items()), *map(str, sorted(sources.glob("*.c"))),
               "-o", str(out)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"compiling {sources} failed:\n{result.stderr}")
    lib = ctypes.CDLL(str(out))
    for name in ("gemm_int8", "gemm_q4_1"):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = SIGNATURES[name].argtypes, SIGNATURES[name].restype
    return lib


def checkout_sources(ref: str, folder: Path) -> Path:
    """minillm/kernels/c/ at git commit `ref`, written into `folder`."""
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", ref,
                            "minillm/kernels/c/"], capture_output=True, text=True, check=True)
    for path in names.stdout.split():
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"],
                              capture_output=True, check=True).stdout
        (folder / Path(path).name).write_bytes(text)
    return folder


def q4_1_blocks(n: int, k: int, gen: torch.Generator) -> torch.Tensor:
    blocks = torch.randint(0, 256, (n, k // 32, 20), dtype=torch.uint8, generator=gen)
    blocks[..., 0:2] = (torch.rand(n, k // 32, generator=gen) * 0.02).half() \
        .view(torch.uint8).view(n, k // 32, 2)
    blocks[..., 2:4] = (torch.rand(n, k // 32, generator=gen) * -0.1).half() \
        .view(torch.uint8).view(n, k // 32, 2)
    return blocks.reshape(n, -1).contiguous()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main", help="git commit to compare against (main)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (1,2)")
    parser.add_argument("--layers", type=int, default=40, help="weight copies cycled through (40)")
    parser.add_argument("--calls", type=int, default=1000,
                        help="calls of each at 576 x 576, fewer for larger shapes (1000)")
    parser.add_argument("--formats", default="q4_1,int8", help="q4_1, int8 or both")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    gen = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "base").mkdir()
        base = compile_library(checkout_sources(args.base, tmp / "base"), tmp / "base.so")
        new = compile_library(build.SOURCE_DIR, tmp / "new.so")
        print(f"base {args.base} against this checkout, {build.target().label}, batch 1")
        for fmt in args.formats.split(","):
            for n, k in SHAPES[fmt]:
                x = torch.randn(1, k, generator=gen)
                copies = max(1, min(args.layers, MOST_BYTES // (n * k)))
                if fmt == "q4_1":
                    weights = [q4_1_blocks(n, k, gen) for _ in range(copies)]

                    def call(lib, w, y, t):
                        return lib.gemm_q4_1(w.data_ptr(), None, x.data_ptr(), y.data_ptr(),
                                             1, n, k, t)
                else:
                    weights = [torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=gen)
                               for _ in range(copies)]
                    scale = torch.rand(n, generator=gen) * 0.01

                    def call(lib, w, y, t):
                        return lib.gemm_int8(w.data_ptr(), scale.data_ptr(), None, x.data_ptr(),
                                             y.data_ptr(), 1, n, k, t)
                y_base, y_new = torch.empty(1, n), torch.empty(1, n)
                calls = max(20, args.calls * 576 * 576 // (n * k))
                for t in threads:
                    assert call(base, weights[0], y_base, t) == 0
                    assert call(new, weights[0], y_new, t) == 0
                    diff = ((y_base - y_new).abs().max() / y_base.abs().max()).item()
                    times_base, times_new = [], []
                    for i in range(calls):  # each call its own copy; who goes first alternates
                        pair = [(base, y_base, times_base), (new, y_new, times_new)]
                        for j, (lib, y, times) in enumerate(pair if i % 2 else pair[::-1]):
                            w = weights[(2 * i + j) % len(weights)]
                            start = time.perf_counter_ns()
                            call(lib, w, y, t)
                            times.append(time.perf_counter_ns() - start)
                    ratios = sorted(p / q for p, q in zip(times_base, times_new))
                    quartile = lambda f: ratios[int(f * (len(ratios) - 1))]  # noqa: E731
                    print(f"{fmt:5} {n:6} x {k:<5} {t} thread(s): base "
                          f"{statistics.median(times_base) / 1e3:8.1f} us  new "
                          f"{statistics.median(times_new) / 1e3:8.1f} us  base/new "
                          f"{statistics.median(ratios):.2f}x (p25-p75 {quartile(.25):.2f}-"
                          f"{quartile(.75):.2f})  max difference {diff:.1e}  {calls} calls, "
                          f"{len(weights)} copies")


if __name__ == "__main__":
    main()
