"""The tests of minillm's kernels, their exactness and the engine on them (the `every_level`
marker, tests/conftest.py), run again at each kernel level this machine runs below the one the
main run used: an AVX-512 machine also tests the AVX2 code most laptops get, an AMX machine the
AVX-512 code without AMX. `make test` runs it after the main run; the arguments go to pytest.

    python scripts/test_levels.py -n 2 --dist loadscope

Nothing to run (one line says why) where the kernels cannot be built here, or MINILLM_NO_KERNEL
switches them off."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def levels_to_test() -> tuple[list[str], str]:
    """(the levels to run the tests at, a sentence saying which and why)."""
    from minillm.kernels import build, dispatch

    if dispatch.switched_off():
        return [], f"kernel levels: none tested again ({dispatch.SWITCH} is set)"
    reason = build.cannot_build()
    if reason:
        return [], f"kernel levels: none tested again (the kernels cannot be built here: {reason})"
    here = build.levels_here()
    main = build.target().isa
    below = [level for level in here if level != main]
    return below, (f"kernel levels: this machine runs {', '.join(here)}; the main run tested "
                   f"{main}" + (f"; now {', '.join(below)}" if below else ""))


def every_level_files() -> list[str]:
    """The test files tests/conftest.py marks every_level (its EVERY_LEVEL). Naming them, not
    tests/, spares each run the import of every other test module (about 10 s a worker)."""
    spec = importlib.util.spec_from_file_location("minillm_tests_conftest",
                                                  ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    return [f"tests/{name}" for name in sorted(conftest.EVERY_LEVEL)]


def main(pytest_args: list[str]) -> int:
    levels, said = levels_to_test()
    print(said, flush=True)
    files = every_level_files()
    for level in levels:
        print(f"\n--- the every_level tests at MINILLM_KERNEL_LEVEL={level} ---", flush=True)
        env = {**os.environ, "MINILLM_KERNEL_LEVEL": level}
        done = subprocess.run([sys.executable, "-m", "pytest", "-m", "every_level",
                               *files, *pytest_args], cwd=ROOT, env=env)
        if done.returncode != 0:
            print(f"the every_level tests failed at MINILLM_KERNEL_LEVEL={level}", flush=True)
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
