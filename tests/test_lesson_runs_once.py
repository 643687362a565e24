"""Which run of an English lesson checks that every cell runs: nbval, or the browser test when it
is collected (it runs the lesson whole in JupyterLab, then uses its widgets; conftest.py leaves
nbval's run of that lesson out). Never neither, never both."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSON = "notebooks/04_decoding.ipynb"  # has widgets
PLAIN = "notebooks/03_kv_cache.ipynb"  # has none


def collected(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "--collect-only", "-q",
                          "-p", "no:cacheprovider", "tests/test_browser.py", LESSON, PLAIN, *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 5), out.stdout + out.stderr
    return out.stdout.splitlines()


def cells_of(lines: list[str], notebook: str) -> int:
    return sum(line.startswith(f"{notebook}::Cell ") for line in lines)


@pytest.mark.parametrize("selection", [(), ("-k", "not test_widgets")],
                         ids=["everything", "without the widget tests"])
def test_a_lesson_with_widgets_runs_in_the_browser_or_under_nbval(selection):
    lines = collected(*selection)
    in_browser = any(line.endswith(f"test_widgets_respond_in_jupyterlab[{LESSON}]")
                     for line in lines)
    if selection:
        assert not in_browser
    assert (cells_of(lines, LESSON) == 0) == in_browser, lines
    assert cells_of(lines, PLAIN) > 0  # a lesson without widgets: nbval's, always
