"""environment.yml (for conda users) must parse and name every package pyproject.toml needs."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"pytorch": "torch", "pyyaml": "pyyaml"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _environment():
    with open(ROOT / "environment.yml") as f:
        return yaml.safe_load(f)


def _pyproject():
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _listed_names(env):
    names, pip = set(), []
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            pip.extend(entry.get("pip", []))
        else:
            conda = _name(entry)
            names.add(CONDA_NAMES.get(conda, conda))
    names.update(_name(p) for p in pip if not p.startswith("-"))
    return names, pip


def test_environment_yml_parses_and_installs_the_course_package():
    env = _environment()
    assert env["name"] == "minillm"
    _, pip = _listed_names(env)
    assert "-e ." in pip, "the conda environment must install minillm itself"
    assert any(str(d).startswith("python=3.11") for d in env["dependencies"])


def _requirements() -> list[str]:
    """Every requirement of the engine and of its extras (the course, the server, the tests),
    less the extras' references to minillm's own other extras."""
    project = _pyproject()
    found = list(project["dependencies"])
    for group in project["optional-dependencies"].values():
        found += [r for r in group if _name(r) != project["name"]]
    return found


def test_environment_yml_names_every_dependency_of_pyproject():
    wanted = {_name(r) for r in _requirements()}
    listed, _ = _listed_names(_environment())
    missing = wanted - listed
    assert not missing, f"environment.yml lacks {sorted(missing)} that pyproject.toml needs"


def test_design_packages_are_listed():
    listed, _ = _listed_names(_environment())
    for package in ["jupyterlab", "torch", "transformers", "matplotlib", "ipywidgets", "numpy",
                    "nbval", "gguf"]:
        assert package in listed


def test_exact_pins_agree():
    """Where both files pin an exact version, they pin the same one."""
    pins = {}
    for r in _requirements():
        if "==" in r:
            pins[_name(r)] = r.split("==")[1]
    env_text = (ROOT / "environment.yml").read_text()
    for name, version in pins.items():
        assert re.search(rf"{name}(\[[^]]*\])?(==|=){re.escape(version)}\b", env_text), \
            f"environment.yml must pin {name} to {version} as pyproject.toml does"
