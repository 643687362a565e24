"""show_source: the package's code shown in a lesson, its header naming the file as a reader finds
it in the repository, not where the machine that ran the lesson keeps it."""

from pathlib import Path

from minillm.course import show
from minillm.quant import gptq


def test_the_header_names_the_file_from_the_package_folder_on(capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ipython(name, *args, **kwargs):  # plain text, as outside Jupyter
        if name.startswith("IPython"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ipython)
    show.show_source(gptq)
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "# minillm.quant.gptq — minillm/quant/gptq.py"
    assert show.shown_path("/elsewhere/notebook.py") == "notebook.py"
    home = Path.home().resolve()
    assert show.shown_path(home / ".cache" / "minillm" / "m.gguf") == "~/.cache/minillm/m.gguf"
    assert show.shown_path(None) == "?"
