"""Show the package's own code inside a lesson, instead of pasting a copy that could drift."""

from __future__ import annotations

import inspect


def show_source(obj) -> None:
    """Display the source of a function, class or module from minillm, with syntax colours in
    Jupyter and as plain text elsewhere."""
    try:
        source = inspect.getsource(obj)
    except (TypeError, OSError) as error:
        raise TypeError(f"show_source needs a function, class or module, got {obj!r}") from error
    where = inspect.getsourcefile(obj) or "?"
    header = f"# {getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))} — {where}\n"
    try:
        from IPython.display import Markdown, display
    except ImportError:
        print(header + source)
        return
    display(Markdown(f"```python\n{header}{source}```"))
