"""The project's scripts (scripts/notebook.py, scripts/translate.py) as modules for the tests,
each imported once under the name the scripts themselves use."""

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def chinese_source(english: Path) -> str:
    """The Chinese edition of an English source (lessons/NN_name.py), built from its catalog, as
    one text in the source's percent format."""
    builder = script("notebook")
    return builder.percent(builder.cells_of(english, "zh"))


def script(name: str):
    module_name = f"minillm_script_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]
