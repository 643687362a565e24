"""Test-wide settings: Jupyter, IPython and matplotlib write into a temporary folder, not $HOME,
removed when the test process ends, and transformers never reaches for a model hub."""

import atexit
import os
import shutil
import tempfile

_home = tempfile.mkdtemp(prefix="minillm-test-home-")
atexit.register(shutil.rmtree, _home, ignore_errors=True)  # each test process its own, gone after
for variable, sub in [("JUPYTER_CONFIG_DIR", "jupyter-config"), ("JUPYTER_DATA_DIR", "jupyter-data"),
                      ("JUPYTER_RUNTIME_DIR", "jupyter-runtime"), ("IPYTHONDIR", "ipython"),
                      ("MPLCONFIGDIR", "matplotlib")]:
    os.environ[variable] = os.path.join(_home, sub)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
