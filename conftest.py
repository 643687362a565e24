"""Test-wide settings: Jupyter, IPython and matplotlib write into a temporary folder, not $HOME,
and transformers never reaches for a model hub."""

import os
import tempfile

_home = tempfile.mkdtemp(prefix="minillm-test-home-")
for variable, sub in [("JUPYTER_CONFIG_DIR", "jupyter-config"), ("JUPYTER_DATA_DIR", "jupyter-data"),
                      ("JUPYTER_RUNTIME_DIR", "jupyter-runtime"), ("IPYTHONDIR", "ipython"),
                      ("MPLCONFIGDIR", "matplotlib")]:
    os.environ[variable] = os.path.join(_home, sub)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
