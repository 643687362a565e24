"""Show the package's own code inside a lesson, instead of pasting a copy that could drift."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path


def _package_roots() -> list[tuple[Path, Path]]:
    """(package folder, the folder that holds it) for every top-level package imported now,
    deepest first, so that a package inside another's folder is found before it."""
    roots = []
    for name, module in list(sys.modules.items()):
        if "." in name or module is None:
            continue
        for folder in getattr(module, "__path__", None) or ():
            try:
                folder = Path(folder).resolve()
            except (OSError, TypeError):
                continue
            roots.append((folder, folder.parent))
    return sorted(set(roots), key=lambda root: len(root[0].parts), reverse=True)


def shown_path(path) -> str:
    """`path` as a reader of a lesson should see it, not where the machine that ran it keeps it:
    a file of an imported package from that package's folder on ("minillm/quant/gptq.py",
    "torch/nn/functional.py", wherever the package is installed), one in the user's home from
    "~" on ("~/.cache/minillm/..."), any other by its name alone."""
    if not path:
        return "?"
    path = Path(path).resolve()
    for folder, holder in _package_roots():
        if path.is_relative_to(folder):
            return path.relative_to(holder).as_posix()
    home = Path.home().resolve()
    if path.is_relative_to(home):
        return "~/" + path.relative_to(home).as_posix()
    return path.name


def show_source(obj, start: str | None = None, stop: str | None = None) -> None:
    """Display the source of a function, class or module from minillm, with syntax colours in
    Jupyter and as plain text elsewhere. A decorated function (torch.inference_mode, say) is
    shown, and named by its file, as written, not as its decorator's wrapper.

    `start` and `stop` show only a part: from the first line that begins with `start` (after
    its indentation) up to, not including, the next line that begins with `stop`. A line that
    is not there raises ValueError, so a lesson that shows a part learns when the code moved."""
    obj = inspect.unwrap(obj) if callable(obj) else obj
    try:
        source = inspect.getsource(obj)
    except (TypeError, OSError) as error:
        raise TypeError(f"show_source needs a function, class or module, got {obj!r}") from error
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", "?"))
    part = ""
    if start is not None or stop is not None:
        source, part = _part(source, start, stop, name), " (part)"
    where = shown_path(inspect.getsourcefile(obj))
    header = f"# {name}{part} — {where}\n"
    try:
        from IPython.display import Markdown, display
    except ImportError:
        print(header + source)
        return
    display(Markdown(f"```python\n{header}{source}```"))


def _part(source: str, start: str | None, stop: str | None, name: str) -> str:
    lines = source.splitlines(keepends=True)

    def first(prefix: str, after: int) -> int:
        for i in range(after, len(lines)):
            if lines[i].lstrip().startswith(prefix):
                return i
        raise ValueError(f"no line of {name} begins with {prefix!r}"
                         + (" after the start" if after else ""))

    begin = first(start, 0) if start is not None else 0
    end = first(stop, begin + 1) if stop is not None else len(lines)
    return "".join(lines[begin:end])
