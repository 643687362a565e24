"""Execute a lesson notebook and keep its outputs, once per version of its cells.

An executed copy records in its metadata (`minillm_book`) the key of the code it ran (a sha256 of
the code cells' sources, and the sizes: "full", or "ci" for the smaller runs the tests use) and
the machine it ran on. A copy whose key matches the lesson's is reused: a lesson whose code did
not change is not executed again, and a change to its prose alone is copied into it
(`refresh_prose`) without running anything. The copy's widgets become static HTML (book/widgets.py), and a
note under its title says where and when its numbers were measured."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from . import claims, quiet
from .widgets import freeze_widgets

ROOT = Path(__file__).resolve().parents[1]
SIZES = ("full", "ci")
NOTE_TAG = "book-measured"
# Printed by the kernel after the lesson's last cell: what the lesson's numbers ran on.
PROBE = """import json as _json, torch as _torch
_gpu = _torch.cuda.get_device_name(0) if _torch.cuda.is_available() else None
print(_json.dumps({"torch": _torch.__version__, "threads": _torch.get_num_threads(),
                   "gpu": _gpu}))"""


def lesson_cells(nb) -> list:
    """The cells that came from the lesson's source (not the book's note)."""
    return [c for c in nb.cells if NOTE_TAG not in c.get("metadata", {}).get("tags", [])]


def source_key(nb, sizes: str) -> str:
    if sizes not in SIZES:
        raise ValueError(f"sizes must be one of {SIZES}, got {sizes!r}")
    cells = [c.source for c in lesson_cells(nb) if c.cell_type == "code"]
    digest = hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode("utf-8")).hexdigest()
    return f"{sizes}:{digest}"


def record(path: Path) -> dict:
    """The book's record of an executed copy (its key and machine), or {} for none."""
    if not path.is_file():
        return {}
    return nbformat.read(path, as_version=4).metadata.get("minillm_book", {})


def is_current(lesson: Path, copy: Path, sizes: str) -> bool:
    key = source_key(nbformat.read(lesson, as_version=4), sizes)
    return record(copy).get("source_key") == key


def prose_is_current(lesson: Path, copy: Path) -> bool:
    """The copy's markdown cells are the lesson's (its own note under the title aside)."""
    def prose(nb):
        return [(c.cell_type, c.source) for c in lesson_cells(nb)]
    ran = nbformat.read(copy, as_version=4)
    return [cell for cell in prose(ran) if cell[0] != "code"] == \
        [cell for cell in prose(nbformat.read(lesson, as_version=4)) if cell[0] != "code"]


def refresh_prose(lesson: Path, copy: Path) -> None:
    """Rewrite `copy` with the lesson's cells in the lesson's order: its markdown as it is now,
    its code cells as they ran (the same code, in the same order: the caller checked the key)."""
    ran = nbformat.read(copy, as_version=4)
    nb = nbformat.read(lesson, as_version=4)
    executed = iter([c for c in lesson_cells(ran) if c.cell_type == "code"])
    nb.cells = [next(executed) if c.cell_type == "code" else c for c in nb.cells]
    note = next(c for c in ran.cells if NOTE_TAG in c.get("metadata", {}).get("tags", []))
    nb.cells.insert(_after_title(nb), note)
    nb.metadata = ran.metadata
    nbformat.write(nb, copy)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def engine_key() -> str:
    """A sha256 of the code a lesson's numbers come from: every source of the minillm package
    (its C kernels included); the lessons' own text lives outside it, in lessons/, and
    `source_key` covers it. Copies with one engine key were measured with the same engine,
    whatever commit each was made at."""
    package = ROOT / "minillm"
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.suffix in (".py", ".c", ".h")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def execute(lesson: Path, copy: Path, sizes: str, language: str = "en",
            timeout_s: int = 7200) -> dict:
    """Run `lesson` in a fresh kernel (in its own folder, with CI set for the "ci" sizes) and
    write the executed copy to `copy`. A cell that raises stops the book with that error.
    Returns the copy's record."""
    from nbclient import NotebookClient

    nb = nbformat.read(lesson, as_version=4)
    key = source_key(nb, sizes)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    publish = sizes == "full"  # the book's copies: measured on a quiet machine, or not written
    if publish:
        before = quiet.probe()
        if not before.quiet:
            raise Busy(lesson, f"the machine was busy before it started: {before.sentence()}")
    environment = {"CI": "1"} if sizes == "ci" else {"CI": None}
    saved = {name: os.environ.get(name) for name in environment}
    _set(environment)
    started, wall = datetime.now(timezone.utc), time.monotonic()
    try:
        with quiet.CpuWatch() as watch:
            NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                           resources={"metadata": {"path": str(lesson.parent)}}).execute()
    finally:
        _set(saved)
    if publish and not watch.result.quiet:
        raise Busy(lesson, f"the machine was busy while it ran: {watch.result.sentence()}")
    broken = claims.broken_claims(nb, lesson.name) if publish else []
    if broken:  # a quiet run whose measurement was disturbed all the same: measured again
        raise Busy(lesson, f"its numbers were disturbed ({'; '.join(broken)}), though "
                           f"{watch.result.sentence()}")
    probe = nb.cells.pop()
    kernel = json.loads("".join(o.get("text", "") for o in probe.outputs
                                if o.get("name") == "stdout"))
    machine = {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": kernel["threads"],
               "gpu": kernel["gpu"], "torch": kernel["torch"],
               "python": platform.python_version(), **watch.result.record()}
    book = {"source_key": key, "sizes": sizes, "machine": machine,
            "executed": started.strftime("%Y-%m-%d %H:%M UTC"),
            "seconds": round(time.monotonic() - wall), "commit": commit(),
            "engine": engine_key()}
    freeze_widgets(nb, language)
    nb.cells.insert(_after_title(nb), measured_note(book, language))
    nb.metadata["minillm_book"] = book
    copy.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, copy)
    return book


class Busy(RuntimeError):
    """A lesson whose copy was not written: other programs took too much of the machine, or its
    printed numbers broke a claim or a bound (book/claims.py), which a quiet run should not."""

    def __init__(self, lesson: Path, why: str):
        super().__init__(f"{lesson.name}: {why}")


def _set(environment: dict) -> None:
    for name, value in environment.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _after_title(nb) -> int:
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("# "):
            return i + 1
    return 0


def measured_note(book: dict, language: str):
    m = book["machine"]
    gpu = m["gpu"] or ("无 GPU" if language.startswith("zh") else "no GPU")
    sizes = {"full": "full size", "ci": "the tests' smaller sizes (CI set)"}[book["sizes"]]
    if language.startswith("zh"):
        sizes = {"full": "完整规模", "ci": "测试用的小规模（设置了 CI）"}[book["sizes"]]
        others = (f"运行期间其他程序占用了 {m['others_share']:.0%} 的 CPU（"
                  f"{'足够安静' if m['quiet'] else '不够安静'}），" if "others_share" in m else "")
        text = (f"本页的输出与数字在 {book['executed']} 测得：{m['cpu']}（{m['cores']} 核），"
                f"{gpu}，torch {m['torch']}（{m['threads']} 个线程），Python {m['python']}，"
                f"负载均值 {m['load_average']}，{others}{sizes}，整本笔记本运行 "
                f"{book['seconds']} 秒（minillm 提交 {book['commit']}）。在你的机器上运行这本"
                f"笔记本，得到你自己的数字。")
    else:
        others = (f", other programs taking {m['others_share']:.0%} of the CPU through the "
                  f"run ({'quiet' if m['quiet'] else 'not quiet'})" if "others_share" in m else "")
        text = (f"The outputs and numbers on this page were measured on {book['executed']}: "
                f"{m['cpu']} ({m['cores']} cores), {gpu}, torch {m['torch']} with "
                f"{m['threads']} threads, Python {m['python']}, load average "
                f"{m['load_average']} at the start{others}; at {sizes}, the whole notebook in "
                f"{book['seconds']} s (minillm commit {book['commit']}). Run the notebook to "
                f"measure your machine.")
    cell = nbformat.v4.new_markdown_cell(f'<div class="book-measured">\n\n{text}\n\n</div>')
    cell.metadata["tags"] = [NOTE_TAG]
    cell["id"] = NOTE_TAG
    return cell
