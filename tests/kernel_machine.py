"""Whether this machine should build minillm's C kernels, for the tests that use them.

Where it cannot (not x86-64, no AVX2, no C compiler) those tests skip and say why. Where it can
(CI: x86-64 with `cc`) they run, and a build that fails fails them (the wrappers raise, naming
the compiler's first error line) instead of skipping them. Tests that check which path the layers
take also skip while MINILLM_NO_KERNEL switches the kernels off for the layers."""

import pytest

from minillm import kernels
from minillm.kernels import dispatch

CANNOT_BUILD = kernels.cannot_build()

needs_kernels = pytest.mark.skipif(
    CANNOT_BUILD is not None, reason=f"minillm's kernels cannot be built here: {CANNOT_BUILD}")

layers_use_kernels = pytest.mark.skipif(
    CANNOT_BUILD is not None or dispatch.switched_off(),
    reason=(f"minillm's kernels cannot be built here: {CANNOT_BUILD}" if CANNOT_BUILD
            else f"{dispatch.SWITCH} is set: the layers run PyTorch's kernels"))
