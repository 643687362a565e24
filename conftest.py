"""Test-wide settings: Jupyter, IPython and matplotlib write into a temporary folder, not $HOME,
removed when the test process ends, and transformers never reaches for a model hub; a lesson
the browser test runs whole is not run a second time by nbval."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

_home = tempfile.mkdtemp(prefix="minillm-test-home-")
atexit.register(shutil.rmtree, _home, ignore_errors=True)  # each test process its own, gone after
for variable, sub in [("JUPYTER_CONFIG_DIR", "jupyter-config"), ("JUPYTER_DATA_DIR", "jupyter-data"),
                      ("JUPYTER_RUNTIME_DIR", "jupyter-runtime"), ("IPYTHONDIR", "ipython"),
                      ("MPLCONFIGDIR", "matplotlib")]:
    os.environ[variable] = os.path.join(_home, sub)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


@pytest.hookimpl(trylast=True)  # after -k and -m have chosen the items
def pytest_collection_modifyitems(config, items):
    """A lesson that tests/test_browser.py runs whole in JupyterLab is not run again by nbval:
    the browser test runs every cell at the same sizes and fails on any cell that raises (what
    `--nbval-lax` checks), then uses the lesson's widgets. Where the browser tests are not
    collected (no Chromium, or another selection), nbval runs every lesson."""
    in_browser = {Path(item.callspec.params["notebook"]).name for item in items
                  if item.path.name == "test_browser.py"
                  and getattr(item, "originalname", "") == "test_widgets_respond_in_jupyterlab"}
    left = {item for item in items if item.path.suffix == ".ipynb"
            and item.path.parent.name == "notebooks" and item.path.name in in_browser}
    if left:
        config.hook.pytest_deselected(items=sorted(left, key=lambda item: item.nodeid))
        items[:] = [item for item in items if item not in left]
