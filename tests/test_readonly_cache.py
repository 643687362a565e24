"""A read-only shared cache (a JupyterHub whose users share one copy of the model): minillm reads
the model, the converted weights and the built kernels from it and writes nothing there; what
it makes (a converted copy, a kernel build) goes to the user's writable folder
(MINILLM_USER_CACHE here).

Root ignores file modes, so `chmod a-w` proves nothing on a root test machine. Two ways instead:
a read-only bind mount (`unshare -m`, then `mount --bind -o ro`) around a real process, where
the machine permits it; and a simulation that runs everywhere, in which every write below the
shared folder raises PermissionError (os.access says so too). Both then check that the shared
folder is exactly as it was."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

import minillm
from minillm import files, kernels
from minillm.kernels import build

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "The capital of France is"
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def can_build_kernels() -> bool:
    return build.cannot_build() is None


def snapshot(folder: Path) -> dict:
    """Every file and folder below `folder`, with its size and modification time."""
    return {p.relative_to(folder).as_posix(): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


def files_in(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def shared(tmp_path, gguf_path) -> Path:
    """A shared cache as an instructor leaves it after `python -m minillm fetch`: the model file
    (a hard link to the developer's copy where the disk allows), its check stamp and licence."""
    folder = tmp_path / "shared"
    folder.mkdir()
    try:
        os.link(gguf_path, folder / MODEL)
    except OSError:
        shutil.copy2(gguf_path, folder / MODEL)
    stat = (folder / MODEL).stat()
    (folder / f"{MODEL}.verified").write_text(f"{stat.st_size} {stat.st_mtime_ns}")
    files.licence_file(folder / MODEL).write_text(files.licence_text(files.MODELS["smollm2-135m"]))
    return folder


def copy_made_files(user: Path, shared: Path) -> None:
    """What the instructor does before class (here: takes what a learner's run made)."""
    for name in ("converted", "kernels", "gguf-metadata"):
        if (user / name).is_dir():
            shutil.copytree(user / name, shared / name)


# ---- the simulation: every write below a folder raises, everywhere -------------------------

def _below(path, folder: Path) -> bool:
    if isinstance(path, int):
        return False
    try:
        return Path(os.path.abspath(os.fsdecode(path))).is_relative_to(folder)
    except (TypeError, ValueError):
        return False


def _refused(path):
    return PermissionError(errno.EROFS, "Read-only file system (simulated)", os.fsdecode(path))


@contextmanager
def read_only(folder: Path):
    """Until the block ends, `folder` behaves as a read-only mount for this process: os.access
    says it is not writable and every way of writing below it raises PermissionError."""
    folder = Path(os.path.abspath(folder))
    real = {name: getattr(os, name) for name in
            ("access", "open", "mkdir", "rmdir", "unlink", "remove", "rename", "replace",
             "utime", "chmod")}
    real_open = builtins.open

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and _below(path, folder):
            return False
        return real["access"](path, mode, *args, **kwargs)

    def os_open(path, flags, *args, **kwargs):
        if flags & WRITE_FLAGS and _below(path, folder):
            raise _refused(path)
        return real["open"](path, flags, *args, **kwargs)

    def opener(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+") and _below(file, folder):
            raise _refused(file)
        return real_open(file, mode, *args, **kwargs)

    def refuse(name, places=1):
        def call(*args, **kwargs):
            for path in args[:places]:
                if _below(path, folder):
                    raise _refused(path)
            return real[name](*args, **kwargs)
        return call

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "access", access)
        patch.setattr(os, "open", os_open)
        patch.setattr(builtins, "open", opener)
        patch.setattr(io, "open", opener)
        for name in ("mkdir", "rmdir", "unlink", "remove", "utime", "chmod"):
            patch.setattr(os, name, refuse(name))
        for name in ("rename", "replace"):
            patch.setattr(os, name, refuse(name, places=2))
        yield


def learner_run(capsys) -> dict:
    """What a learner's first cells do: load, generate, build the kernels (as a fresh process
    would: the library is looked up again)."""
    model, tokenizer = minillm.load("smollm2-135m")
    text = minillm.generate(model, tokenizer, PROMPT, max_new_tokens=6).text
    build.forget()
    built = kernels.available()
    return {"text": text, "kernels": built, "stderr": capsys.readouterr().err}


@pytest.fixture
def fresh_process_state(monkeypatch):
    """Once-per-process state a learner's new process starts without: the notices said, and
    the kernel library already loaded."""
    from minillm.utils import notices

    monkeypatch.setattr(notices, "_SAID", set())
    build.forget()
    yield
    build.forget()


def test_the_simulation_refuses_writes_below_the_folder_only(tmp_path):
    inside, outside = tmp_path / "ro", tmp_path / "rw"
    inside.mkdir()
    outside.mkdir()
    (inside / "kept").write_text("x")
    with read_only(inside):
        for write in (lambda: (inside / "new").write_text("x"),
                      lambda: open(inside / "kept", "a"),
                      lambda: (inside / "dir").mkdir(),
                      lambda: os.replace(outside, inside / "moved"),
                      lambda: (inside / "kept").unlink()):
            with pytest.raises(PermissionError):
                write()
        assert (inside / "kept").read_text() == "x"
        assert not files.can_write(inside) and files.can_write(outside)
        (outside / "new").write_text("fine")
    assert files.can_write(inside)  # undone


def test_a_learner_reads_a_read_only_cache_and_writes_to_their_own(shared, tmp_path,
                                                                  monkeypatch, capsys,
                                                                  fresh_process_state):
    user = tmp_path / "user"
    monkeypatch.setenv("MINILLM_CACHE", str(shared))
    monkeypatch.setenv("MINILLM_USER_CACHE", str(user))
    before = snapshot(shared)
    with read_only(shared):
        assert files.writable_cache_dir() == user
        assert minillm.model_file() == shared / MODEL
        first = learner_run(capsys)
    assert snapshot(shared) == before, "the shared cache was written to"
    made = files_in(user)
    assert any(p.startswith("converted/") for p in made), made
    assert first["kernels"] == can_build_kernels()
    if first["kernels"]:
        assert any(p.startswith("kernels/") for p in made), made
    assert f"the cache {shared} is read-only here" in first["stderr"]
    assert first["stderr"].count("is read-only here") == 1

    # The instructor puts what a run makes into the shared cache: the next learner writes nothing.
    copy_made_files(user, shared)
    other = tmp_path / "other-user"
    monkeypatch.setenv("MINILLM_USER_CACHE", str(other))
    build.forget()
    before = snapshot(shared)
    with read_only(shared):
        second = learner_run(capsys)
    assert snapshot(shared) == before
    assert second["text"] == first["text"] and second["kernels"] == first["kernels"]
    assert files_in(other) == [], "everything was in the shared cache: nothing to write"


def test_a_writable_cache_is_its_own_writable_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MINILLM_USER_CACHE", str(tmp_path / "unused"))
    assert files.writable_cache_dir() == files.cache_dir() == tmp_path / "cache"
    assert not (tmp_path / "unused").exists()


def test_with_no_writable_folder_anywhere_the_error_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path / "shared"))
    monkeypatch.setenv("MINILLM_USER_CACHE", str(tmp_path / "user"))
    monkeypatch.setattr(files, "can_write", lambda folder: False)
    with pytest.raises(PermissionError, match="set MINILLM_USER_CACHE"):
        files.writable_cache_dir()


# ---- a real read-only mount ------------------------------------------------------------------

LEARNER = f"""
import json, minillm
from minillm import kernels
model, tokenizer = minillm.load("smollm2-135m")
text = minillm.generate(model, tokenizer, {PROMPT!r}, max_new_tokens=6).text
print(json.dumps({{"text": text, "kernels": kernels.available()}}))
"""


def _unshare_refusal() -> str | None:
    """Why a read-only bind mount cannot be made here, or None when it can."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return "needs Linux's unshare"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount --bind / / 2>&1"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return f"unshare -m / mount --bind is not permitted here: {probe.stderr.strip()}"
    return None


def run_on_read_only_mount(shared: Path, user: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MINILLM_CACHE=str(shared), MINILLM_USER_CACHE=str(user),
               HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    script = (f'mount --bind -o ro "{shared}" "{shared}" && '
              f'! touch "{shared}/write-test" 2>/dev/null && '
              f'exec "{sys.executable}" -c "$LEARNER"')
    env["LEARNER"] = LEARNER
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                          env=env, timeout=900, cwd=ROOT)


def test_a_learner_on_a_read_only_mount(shared, tmp_path):
    refusal = _unshare_refusal()
    if refusal:
        pytest.skip(refusal)
    user = tmp_path / "user"
    before = snapshot(shared)
    first = run_on_read_only_mount(shared, user)
    assert first.returncode == 0, first.stdout + first.stderr
    assert snapshot(shared) == before, "the shared cache was written to"
    result = json.loads(first.stdout.strip().splitlines()[-1])
    assert result["kernels"] == can_build_kernels()
    made = files_in(user)
    assert any(p.startswith("converted/") for p in made), made
    assert "is read-only here" in first.stderr

    copy_made_files(user, shared)
    other = tmp_path / "other-user"
    before = snapshot(shared)
    second = run_on_read_only_mount(shared, other)
    assert second.returncode == 0, second.stdout + second.stderr
    assert snapshot(shared) == before
    assert json.loads(second.stdout.strip().splitlines()[-1]) == result
    assert files_in(other) == [], "everything was in the shared cache: nothing to write"
