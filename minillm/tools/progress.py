"""`python -m minillm progress`: which exercises pass so far.

An exercise notebook counts as worked on once one of its task cells no longer raises
NotImplementedError. Those notebooks are run top to bottom (errors allowed) and each check cell is
counted as passed or left; untouched notebooks count every check as left without running them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STUB = "raise NotImplementedError"


@dataclass
class ChapterProgress:
    chapter: str
    passed: int
    total: int
    worked_on: bool
    failures: list[str]

    @property
    def left(self) -> int:
        return self.total - self.passed


def _tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def worked_on(nb) -> bool:
    return any("task" in _tags(c) and STUB not in c.source for c in nb.cells)


def chapter_progress(path: Path, timeout: int = 600) -> ChapterProgress:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    checks = [c for c in nb.cells if "check" in _tags(c)]
    if not worked_on(nb):
        return ChapterProgress(path.stem, 0, len(checks), False, [])
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    failures = []
    for cell in nb.cells:
        if "check" not in _tags(cell):
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            failures.append(f"{errors[0]['ename']}: {errors[0]['evalue']}")
    return ChapterProgress(path.stem, len(checks) - len(failures), len(checks), True, failures)


def progress(folder: Path) -> list[ChapterProgress]:
    notebooks = sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"no exercise notebooks (NN_name.ipynb) in {folder}")
    return [chapter_progress(path) for path in notebooks]


def format_table(rows: list[ChapterProgress]) -> str:
    width = max(len("chapter"), *(len(r.chapter) for r in rows))
    lines = [f"{'chapter':<{width}}  passed  left  status",
             f"{'-' * width}  ------  ----  ------"]
    for r in rows:
        status = ("done" if r.left == 0 else "in progress") if r.worked_on else "not started"
        lines.append(f"{r.chapter:<{width}}  {r.passed:>6}  {r.left:>4}  {status}")
    passed, total = sum(r.passed for r in rows), sum(r.total for r in rows)
    lines.append(f"{'all':<{width}}  {passed:>6}  {total - passed:>4}")
    return "\n".join(lines)


def main(folder: str = "exercises", verbose: bool = False) -> int:
    try:
        rows = progress(Path(folder))
    except FileNotFoundError as error:
        print(f"minillm progress: {error}")
        return 2
    print(format_table(rows))
    if verbose:
        for r in rows:
            for failure in r.failures:
                print(f"  {r.chapter}: {failure.splitlines()[0]}")
    return 0
