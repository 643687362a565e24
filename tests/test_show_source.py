"""show_source: the package's code shown in a lesson, its header naming the file as a reader finds
it in the repository or in the package that holds it, not where the machine that ran the lesson
keeps it."""

import builtins
from pathlib import Path

import pytest
import torch

from minillm.course import show
from minillm.decoding import beam_search
from minillm.quant import gptq


@pytest.fixture
def plain_text(monkeypatch):
    """show_source prints, as outside Jupyter."""
    real_import = builtins.__import__

    def no_ipython(name, *args, **kwargs):
        if name.startswith("IPython"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ipython)


def header(capsys, obj) -> str:
    show.show_source(obj)
    return capsys.readouterr().out.splitlines()[0]


def test_the_header_names_the_file_from_the_package_folder_on(capsys, plain_text):
    assert header(capsys, gptq) == "# minillm.quant.gptq — minillm/quant/gptq.py"
    assert show.shown_path("/elsewhere/notebook.py") == "notebook.py"
    home = Path.home().resolve()
    assert show.shown_path(home / ".cache" / "minillm" / "m.gguf") == "~/.cache/minillm/m.gguf"
    assert show.shown_path(None) == "?"


def test_a_file_of_another_package_is_named_from_that_package_on(capsys, plain_text):
    """torch lives in a virtual environment, in site-packages, wherever the machine keeps it:
    the reader sees torch/..., never the folders above it."""
    where = header(capsys, torch.nn.functional.softmax).split(" — ")[1]
    assert where == "torch/nn/functional.py"
    torch_file = Path(torch.__file__).resolve().parent / "utils" / "_contextlib.py"
    assert show.shown_path(torch_file) == "torch/utils/_contextlib.py"
    assert show.shown_path(str(torch_file)) == "torch/utils/_contextlib.py"


def test_a_decorated_function_is_shown_as_written_and_named_by_its_own_file(capsys, plain_text):
    """beam_search runs under torch.inference_mode: the header names its own file, not the
    decorator's (torch/utils/_contextlib.py), and the source is beam_search's."""
    assert hasattr(beam_search, "__wrapped__")
    show.show_source(beam_search)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# beam_search — minillm/decoding/beam_search.py"
    assert any(line.lstrip().startswith("def beam_search(") for line in lines[1:])


def test_a_part_of_a_function_from_its_start_line_to_its_stop_line(capsys, monkeypatch):
    import builtins

    from minillm.course import show
    from minillm.decoding import beam_search

    real_import = builtins.__import__

    def no_ipython(name, *args, **kwargs):  # the plain-text path prints what Jupyter shows
        if name.startswith("IPython"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ipython)
    show.show_source(beam_search, start="while True:", stop="# 3. Ended")
    out = capsys.readouterr().out
    assert out.startswith("# beam_search (part) — minillm/decoding/beam_search.py\n")
    body = out.splitlines()[1:]
    assert body[0].strip() == "while True:" and "# 3. Ended" not in out
    with pytest.raises(ValueError, match="no line of beam_search begins with 'never here'"):
        show.show_source(beam_search, start="while True:", stop="never here")
    with pytest.raises(ValueError, match="begins with 'nowhere'"):
        show.show_source(beam_search, start="nowhere")
