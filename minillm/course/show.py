"""Show the package's own code inside a lesson, instead of pasting a copy that could drift."""

from __future__ import annotations

import inspect
from pathlib import Path


def shown_path(path) -> str:
    """`path` as a reader of a lesson should see it, not where the machine that ran it keeps it:
    a file of the package from the package's folder on ("minillm/quant/gptq.py"), one in the
    user's home from "~" on ("~/.cache/minillm/..."), any other by its name alone."""
    if not path:
        return "?"
    path = Path(path).resolve()
    for root, shown in ((Path(__file__).resolve().parents[2], ""), (Path.home().resolve(), "~/")):
        try:
            return shown + path.relative_to(root).as_posix()
        except ValueError:
            continue
    return path.name


def show_source(obj) -> None:
    """Display the source of a function, class or module from minillm, with syntax colours in
    Jupyter and as plain text elsewhere."""
    try:
        source = inspect.getsource(obj)
    except (TypeError, OSError) as error:
        raise TypeError(f"show_source needs a function, class or module, got {obj!r}") from error
    where = shown_path(inspect.getsourcefile(obj))
    header = f"# {getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))} — {where}\n"
    try:
        from IPython.display import Markdown, display
    except ImportError:
        print(header + source)
        return
    display(Markdown(f"```python\n{header}{source}```"))
