"""scripts/gpu_check.sh, checked on a CPU: it runs every lesson and every solution notebook (so a
new chapter cannot be left out), the benchmarks on cuda, and the tests marked `cuda`; without a
GPU it stops at once with a clear message."""

import re
import subprocess
import sys
from pathlib import Path

from browser.chromium import find_chromium, required

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def test_the_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_it_runs_every_lesson_and_every_solution():
    listed = subprocess.run(["bash", str(SCRIPT), "--list"], capture_output=True, text=True,
                            check=True).stdout.split()
    every = sorted(str(p.relative_to(ROOT)) for folder in ("notebooks", "solutions")
                   for p in (ROOT / folder).glob("*.ipynb"))
    assert sorted(listed) == every
    chapters = list((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))  # one solution each
    assert len(every) == len(list((ROOT / "notebooks").glob("*.ipynb"))) + len(chapters)


def test_it_runs_the_benchmarks_on_cuda_and_the_cuda_tests():
    text = SCRIPT.read_text()
    assert '"${BENCH[@]}" --device cuda' in text
    assert "scripts/bench_batching.py --device cuda" in text
    assert "-m pytest -m cuda tests" in text
    help_text = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_batching.py"),
                                "--help"], capture_output=True, text=True, check=True).stdout
    assert "--device" in help_text and "--json" in help_text


def test_without_a_gpu_it_stops_with_a_clear_message(tmp_path):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable,
                                          "HOME": str(tmp_path)})
    assert done.returncode == 1
    assert "no CUDA GPU visible to torch" in done.stdout + done.stderr
    assert "no CUDA GPU" in (tmp_path / "out" / "summary.md").read_text()


def test_a_dry_run_on_the_fake_gpu_records_each_step(tmp_path):
    """The script end to end on the fake CUDA device (tests/fake_cuda_site starts it in every
    Python process): the GPU is found, each step is recorded in summary.md, the `cuda` tests run
    there, and the exit status is 0. (A lesson run is left out here: tests/
    test_lessons_on_fake_cuda.py runs the lessons under the harness.)"""
    import os

    env = {**os.environ, "PYTHON": sys.executable,
           "PYTHONPATH": str(ROOT / "tests" / "fake_cuda_site")}
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "--ci", "--steps", "pytest"],
                          capture_output=True, text=True, env=env, timeout=600)
    summary = (tmp_path / "summary.md").read_text()
    assert done.returncode == 0, summary + done.stdout[-2000:]
    assert "gpu fake CUDA (computes on the CPU)" in summary
    assert "| model | passed |" in summary and "| pytest_cuda | passed |" in summary
    report = (tmp_path / "pytest_cuda.txt").read_text()
    assert " passed" in report and "failed" not in report
    skipped = re.search(r"(\d+) skipped", report)
    if skipped:  # only the browser tests, where there is no browser: they say why in one line
        chromium, why = find_chromium()
        assert chromium is None and not required(), report
        assert f"SKIPPED [{skipped.group(1)}] tests/browser/chromium.py:" in report, report
        assert report.count("SKIPPED") == 1 and why in report, report
