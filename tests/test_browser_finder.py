"""How the browser tests find a browser: the one CHROMIUM names, else one on PATH; none found
means one line that says how to enable them (never an install). Run without a browser, the
browser tests are skipped with that line, unless MINILLM_BROWSER_TESTS=required (CI)."""

import os
import subprocess
import sys
from pathlib import Path

from browser.chromium import find_chromium

ROOT = Path(__file__).resolve().parents[1]


def fake_browser(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_chromium_names_the_browser(tmp_path, monkeypatch):
    chosen = fake_browser(tmp_path, "my-chromium")
    monkeypatch.setenv("CHROMIUM", str(chosen))
    assert find_chromium() == (str(chosen), f"CHROMIUM={chosen}")


def test_a_browser_on_path_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv("CHROMIUM", raising=False)
    found = fake_browser(tmp_path, "google-chrome")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_chromium()[0] == str(found)


def test_no_browser_says_how_to_enable_the_tests(tmp_path, monkeypatch):
    monkeypatch.delenv("CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    path, why = find_chromium()
    if Path("/Applications").is_dir():  # a Mac may have Chrome installed as an application
        return
    assert path is None
    assert why.startswith("browser tests skipped: no Chromium or Chrome on PATH")
    assert "set CHROMIUM=/path/to/chromium" in why and "make browser" in why


def test_a_missing_chromium_path_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "nothing"))
    path, why = find_chromium()
    assert path is None and f"CHROMIUM={tmp_path / 'nothing'} is not an executable file" in why


def _collect_browser_tests(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/test_browser.py"], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)


def test_without_a_browser_the_browser_tests_skip_with_one_line(tmp_path):
    env = dict(os.environ, CHROMIUM=str(tmp_path / "no-such-browser"))
    env.pop("MINILLM_BROWSER_TESTS", None)
    result = _collect_browser_tests(env)
    assert result.returncode in (0, 5), result.stdout + result.stderr  # 5: nothing else to run
    skipped = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1 and "browser tests skipped" in skipped[0], result.stdout


def test_ci_fails_without_a_browser(tmp_path):
    env = dict(os.environ, CHROMIUM=str(tmp_path / "no-such-browser"),
               MINILLM_BROWSER_TESTS="required")
    result = _collect_browser_tests(env)
    assert result.returncode != 0
    assert "MINILLM_BROWSER_TESTS=required" in result.stdout + result.stderr
