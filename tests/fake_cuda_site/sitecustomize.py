"""Start the fake CUDA device (tests/fake_cuda.py) in every Python process that has this folder
on its PYTHONPATH: a dry run of a GPU script on a CPU, notebook kernels included.

    PYTHONPATH=tests/fake_cuda_site bash scripts/gpu_check.sh --ci --only notebooks/04
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fake_cuda import FakeCuda  # noqa: E402

FakeCuda().start()
