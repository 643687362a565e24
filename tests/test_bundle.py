"""The offline path: a bundle made by scripts/make_bundle.py installs with pip's network off
(--no-index, no pip config), its model file goes into a fresh cache, and chapter 00 runs.

To stay quick, the bundle here holds only the build tools' wheels; the heavy packages (torch,
transformers, JupyterLab) come from the test's own environment through a .pth file. `make bundle`
builds the full wheelhouse the same way."""

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, gguf_path):
    out = tmp_path_factory.mktemp("bundle") / "minillm-bundle"
    book = tmp_path_factory.mktemp("book")  # stands in for build/book/html (test_book_browser.py)
    (book / "index.html").write_text("<title>minillm</title>")
    _run([sys.executable, str(ROOT / "scripts" / "make_bundle.py"), "--out", str(out),
          "--only-build-tools", "--book", str(book)], timeout=600)
    return out


def test_bundle_layout(bundle):
    assert (bundle / "model" / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
    licence = (bundle / "model" / "SmolLM2-135M-Instruct.Q4_1.LICENSE.txt").read_text()
    assert "a model by Hugging Face" in licence and "Apache License" in licence
    assert list((bundle / "wheels").glob("setuptools-*.whl"))
    assert (bundle / "course" / "Makefile").is_file()
    assert (bundle / "course" / "LICENSE").is_file()
    assert (bundle / "course" / "notebooks" / "00_welcome.ipynb").is_file()
    readme = (bundle / "README.txt").read_text()
    assert "make course OFFLINE=.." in readme
    assert (bundle / "book" / "index.html").is_file(), "the built book is in the bundle"
    assert "open book/index.html" in readme
    held = json.loads((bundle / "bundle.json").read_text())
    assert held["torch"]["build"] == "none" and "no torch" in readme  # build tools only here
    assert held["python"] == sys.version.split()[0]


@pytest.mark.parametrize("wheel,requires,build", [
    ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", [], "CPU"),
    ("torch-2.13.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl", ["nvidia-cublas-cu12"],
     "CUDA 12.8"),
    ("torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", ["nvidia-cublas-cu12", "sympy"],
     "CUDA"),
    ("torch-2.13.0-cp311-none-macosx_11_0_arm64.whl", ["sympy"], "CPU"),
])
def test_the_bundle_says_which_torch_build_it_holds(tmp_path, wheel, requires, build):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from make_bundle import torch_build
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    with zipfile.ZipFile(tmp_path / wheel, "w") as archive:
        archive.writestr("torch-2.13.0.dist-info/METADATA", "Name: torch\n" + "".join(
            f"Requires-Dist: {r}\n" for r in requires))
    assert torch_build(tmp_path) == {"wheel": wheel, "version": wheel.split("-")[1],
                                     "build": build}


def test_offline_install_runs_chapter_00(bundle, tmp_path, gguf_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    python = venv / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
                ).stdout.strip()
    Path(site, "shared-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    offline = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
                   PIP_DISABLE_PIP_VERSION_CHECK="1", HF_HUB_OFFLINE="1")
    course = bundle / "course"
    _run([str(python), "-m", "pip", "install", "--no-index", "--find-links",
          str(bundle / "wheels"), "-e", f"{course}[dev]"], env=offline, timeout=600)
    where = _run([str(python), "-c", "import minillm; print(minillm.__file__)"], env=offline,
                 cwd=tmp_path)
    assert where.stdout.strip().startswith(str(course)), where.stdout

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "hf").symlink_to(gguf_path.parent / "hf")  # transformers' converted copy: not the point
    offline["MINILLM_CACHE"] = str(cache)
    fetched = _run([str(python), "-m", "minillm", "fetch", "--from",
                    str(bundle / "model" / "SmolLM2-135M-Instruct.Q4_1.gguf")], env=offline,
                   cwd=tmp_path)
    assert fetched.stdout.strip() == str(cache / "SmolLM2-135M-Instruct.Q4_1.gguf")

    for variable in ["JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "IPYTHONDIR", "MPLCONFIGDIR"]:
        offline[variable] = str(tmp_path / variable.lower())
    _run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
          str(course / "notebooks" / "00_welcome.ipynb")], env=offline, cwd=course, timeout=900)


def test_fetch_from_a_wrong_file_is_refused(tmp_path):
    bad = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    bad.write_bytes(b"GGUF")
    env = dict(os.environ, MINILLM_CACHE=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-m", "minillm", "fetch", "--from", str(bad)],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 1
    assert "cannot use" in result.stderr and "truncated or wrong file" in result.stderr
