"""What pip and a user see of minillm as a package: the distribution's name (free on the package
index; the import name stays minillm), its licence file, one version everywhere, and
`python -m minillm --version`."""

import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import minillm
from minillm.tools.cli import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_the_distribution_is_minillm_course_and_its_extras_name_it():
    project = _project()["project"]
    assert project["name"] == DISTRIBUTION == "minillm-course"
    assert "minillm-course[course,serve,book,grammar]" in project["optional-dependencies"]["dev"]
    assert not any(r.startswith("minillm[") for group in project["optional-dependencies"].values()
                   for r in group), "an extra still names the old distribution"


def test_one_version_everywhere():
    project = _project()
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "minillm.__version__"}
    assert metadata.version(DISTRIBUTION) == minillm.__version__


def test_python_m_minillm_version():
    result = subprocess.run([sys.executable, "-m", "minillm", "--version"], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith(f"minillm {minillm.__version__} (distribution minillm-course)")
    assert f"torch {metadata.version('torch')}" in line


def test_the_licence_is_apache_2_and_ships_with_the_package():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX" in text  # the whole text
    assert _project()["project"]["license"] == "Apache-2.0"
    assert (ROOT / "minillm" / "licences" / "Apache-2.0.txt").read_text() == text
