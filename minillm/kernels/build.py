"""Building minillm's C kernels (c/*.c), once, on first use, for the CPU this process runs on.

Why on first use and not at install: minillm installs as plain Python (`pip install -e .`, the
workshop bundle's wheels), so there is no build step of its own to hook into; and the right
flags are a fact of the machine that runs the code, not of the one that installed it: PyTorch's
CPU capability (which ATEN_CPU_CAPABILITY can lower, as a test does to build the AVX2 half of
the sources on an AVX-512 machine) and the instruction sets the CPU reports (/proc/cpuinfo's
flags, or sysctl's on macOS). The compiler runs once per source, flag set and compiler, and the
library is kept: later processes load it in milliseconds.

Which level: the highest this CPU runs (AVX2; AVX-512; AVX-512 with VNNI; AMX), or a lower one
named by MINILLM_KERNEL_LEVEL (avx2, avx512, avx512-vnni, amx): one machine then runs, and tests,
the code a CPU of that level gets. A level the CPU does not run, or a name that is not a level,
is a ValueError that says which are.

Where it is kept: `kernels/` in minillm's cache, read from a read-only shared cache where it is
there already, else built into the user's writable one (`files.cache_entry`,
`files.writable_cache_dir`).

A build that fails is loud: one KernelBuildWarning per process, naming the compiler's first
error line. A machine that cannot build the kernels at all (not x86-64, no AVX2, no compiler)
gets no warning from here; `status()` says why, and so do `minillm.load` and `minillm doctor`.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from .limits import DEFINES
from .signatures import SIGNATURES

SOURCE_DIR = Path(__file__).parent / "c"
# -Wall -Wextra: the sources build without a warning (a test holds them to it).
WARNINGS = ["-Wall", "-Wextra"]
BASE_FLAGS = ["-O3", "-shared", "-fPIC", "-std=gnu11"]
OPENMP = "-fopenmp"
BUILD_SECONDS = 300


class KernelBuildWarning(RuntimeWarning):
    """minillm's C kernels should have built on this machine and did not."""


# The instruction-set levels the kernels build for, lowest first. MINILLM_KERNEL_LEVEL=<level>
# builds for that level on a CPU that runs it (a lower one than the CPU's own, to run on one
# machine the code a learner's CPU gets); unset, or "native", the highest the CPU runs.
LEVEL_VARIABLE = "MINILLM_KERNEL_LEVEL"
LEVELS = ("avx2", "avx512", "avx512-vnni", "amx")
NATIVE = "native"


@dataclass(frozen=True)
class Target:
    """What to build for: the vector level, its compiler flags, and a name for people."""

    level: str  # the vector width: "AVX-512" or "AVX2"
    flags: tuple[str, ...]
    label: str  # e.g. "AVX-512 (VNNI)"
    isa: str = "avx2"  # the instruction-set level, one of LEVELS


@dataclass(frozen=True)
class Status:
    built: bool
    label: str  # what was built ("AVX-512 (VNNI)"), or "" when nothing was
    level: str  # its vector level, "AVX-512" or "AVX2" (or "")
    reason: str  # why nothing was built, or "" when it was
    isa: str = ""  # its instruction-set level (one of LEVELS), or "" when nothing was built
    failed: bool = False  # a compile was tried (the machine should build them) and failed
    path: Path | None = None
    compile_output: str = ""  # the compiler's messages (a clean build prints nothing)

    def line(self) -> str:
        return f"built, {self.label}" if self.built else f"not built: {self.reason}"


def cpu_field(name: str) -> str | None:
    """The first CPU's `name` line of /proc/cpuinfo ("flags", "vendor_id", "model name"), or
    None where the system has no such file or line."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _sysctl(*names: str) -> str:
    """macOS's answer for `names` (an Intel Mac's CPU), "" where there is none."""
    if platform.system() != "Darwin":
        return ""
    try:
        return subprocess.run(["sysctl", "-n", *names], capture_output=True, text=True,
                              timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_flags() -> frozenset[str]:
    """The instruction sets this CPU reports, lower case without underscores ("avx2",
    "avx512f", "avx512vnni"); empty where the system does not say."""
    flags = cpu_field("flags")
    if flags is not None:
        return frozenset(w.replace("_", "") for w in flags.split())
    out = _sysctl("machdep.cpu.features", "machdep.cpu.leaf7_features")
    return frozenset(w.lower().replace("_", "").replace(".", "") for w in out.split())


def cpu_vendor() -> str:
    """The CPU's maker as the system names it ("GenuineIntel", "AuthenticAMD"), or "" where it
    does not say."""
    vendor = cpu_field("vendor_id")
    return vendor if vendor is not None else _sysctl("machdep.cpu.vendor").strip()


def _levels_of(flags: frozenset[str]) -> list[Target]:
    """The targets a CPU with `flags` (and PyTorch's capability here) runs, lowest first."""
    avx2 = ("-mavx2", "-mfma", "-mf16c")
    found = [Target("AVX2", avx2, "AVX2", "avx2")]
    # ATEN_CPU_CAPABILITY can lower PyTorch's capability, and with it the kernels' width
    if torch.backends.cpu.get_cpu_capability() != "AVX512" \
            or not {"avx512f", "avx512bw"} <= flags:
        return found
    # VBMI's byte permutes (with VL) let the Q4_1 kernel take 4 blocks a step
    vbmi = ("-mavx512vl", "-mavx512vbmi") if {"avx512vl", "avx512vbmi"} <= flags else ()
    avx512 = (*avx2, "-mavx512f", "-mavx512bw", *vbmi)
    found.append(Target("AVX-512", avx512, "AVX-512", "avx512"))
    if "avx512vnni" not in flags:
        return found
    vnni = (*avx512[:5], "-mavx512vnni", *vbmi)
    found.append(Target("AVX-512", vnni, "AVX-512 (VNNI)", "avx512-vnni"))
    if {"amxtile", "amxint8"} <= flags:
        # AMX's int8 tiles multiply a prompt's many rows by int8 weights, and its bf16 tiles
        # a prompt's rows by bf16 weights
        amx = ("-mamx-tile", "-mamx-int8", *(("-mamx-bf16",) if "amxbf16" in flags else ()))
        found.append(Target("AVX-512", (*vnni, *amx), "AVX-512 (VNNI, AMX)", "amx"))
    return found


def requested_level() -> str:
    """The level MINILLM_KERNEL_LEVEL asks for ("native" when unset); ValueError naming the
    allowed values when it is something else."""
    chosen = os.environ.get(LEVEL_VARIABLE, "").strip().lower() or NATIVE
    if chosen not in (NATIVE, *LEVELS):
        raise ValueError(f"{LEVEL_VARIABLE}={os.environ[LEVEL_VARIABLE]!r} is not a kernel "
                         f"level: use one of {', '.join(LEVELS)}, or {NATIVE} (the default: "
                         f"the highest this CPU runs)")
    return chosen


def _cpu_problem(flags: frozenset[str] | None) -> tuple[str | None, frozenset[str]]:
    machine = platform.machine()
    if machine.lower() not in ("x86_64", "amd64"):
        return (f"this CPU is {machine}, and minillm's kernels are written for x86-64's AVX2 "
                f"and AVX-512"), frozenset()
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return "this system does not say which vector instructions its CPU has", flags
    missing = [f for f in ("avx2", "fma", "f16c") if f not in flags]
    if missing:
        return (f"this CPU lacks {', '.join(missing)} (the kernels need AVX2 with FMA and "
                f"F16C)"), flags
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in ("AVX2", "AVX512"):
        return f"PyTorch runs this CPU at capability {capability}, below AVX2", flags
    return None, flags


def levels_here(flags: frozenset[str] | None = None) -> list[str]:
    """The levels this machine runs, lowest first (none where it cannot build the kernels)."""
    problem, flags = _cpu_problem(flags)
    return [] if problem else [t.isa for t in _levels_of(flags)]


def target(flags: frozenset[str] | None = None, level: str | None = None) -> Target | str:
    """What this machine builds (at `level`, by default MINILLM_KERNEL_LEVEL's), or a sentence
    saying why it cannot. A level this CPU does not run is a ValueError that names the levels it
    does run."""
    level = requested_level() if level is None else level
    problem, flags = _cpu_problem(flags)
    if problem:
        return problem
    found = _levels_of(flags)
    if level == NATIVE:
        return found[-1]
    for each in found:
        if each.isa == level:
            return each
    if level not in LEVELS:
        raise ValueError(f"no kernel level {level!r}: use one of {', '.join(LEVELS)}, or "
                         f"{NATIVE}")
    raise ValueError(f"{LEVEL_VARIABLE}={level} asks for a level this machine does not run: it "
                     f"runs {', '.join(t.isa for t in found)} (the CPU's flags and PyTorch's "
                     f"capability {torch.backends.cpu.get_cpu_capability()})")


def compiler() -> str | None:
    """The C compiler: $CC, else cc, gcc or clang on PATH; None where there is none."""
    chosen = os.environ.get("CC")
    if chosen:
        return shutil.which(chosen)
    return next(filter(None, map(shutil.which, ("cc", "gcc", "clang"))), None)


def cannot_build() -> str | None:
    """Why this machine cannot build the kernels (not x86-64, no AVX2, no compiler), or None:
    then it should, and a failed build is an error."""
    found = target()
    if isinstance(found, str):
        return found
    if compiler() is None:
        cc = os.environ.get("CC")
        return (f"CC={cc} names no program here" if cc
                else "there is no C compiler (cc, gcc or clang) on PATH")
    return None


def _sources() -> list[Path]:
    return sorted(SOURCE_DIR.glob("*.c"))


def _digest(cc: str, flags: list[str]) -> str:
    h = hashlib.sha256(" ".join([cc, *flags]).encode())
    for path in sorted(SOURCE_DIR.glob("*.[ch]")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


class BuildError(RuntimeError):
    def __init__(self, first_line: str, output: str):
        super().__init__(first_line)
        self.first_line, self.output = first_line, output


class NoFolder(RuntimeError):
    """Neither the cache nor any per-user folder can be written."""


def _first_error(output: str, returncode: int) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    if errors or lines:
        return (errors or lines)[0]
    return f"it exited with status {returncode} and printed nothing"


def _compile(cc: str, flags: list[str], library: Path) -> str:
    """Compile every source into `library` (atomically: a parallel build never sees half a
    file); returns the compiler's messages, raises BuildError with its first error line."""
    command = [cc, *BASE_FLAGS, *WARNINGS, *flags,
               *(f"-D{name}={value}" for name, value in DEFINES.items()),
               *map(str, _sources())]
    with tempfile.TemporaryDirectory(dir=library.parent, prefix=".build-") as tmp:
        built = Path(tmp) / library.name
        try:
            result = subprocess.run([*command, "-o", str(built)], capture_output=True, text=True,
                                    timeout=BUILD_SECONDS)
        except subprocess.TimeoutExpired:
            raise BuildError(f"it took more than {BUILD_SECONDS} s", "") from None
        except OSError as error:
            raise BuildError(f"{cc} could not run: {error}", "") from None
        output = (result.stdout + result.stderr).strip()
        if result.returncode != 0 or not built.is_file():
            raise BuildError(_first_error(output, result.returncode), output)
        os.replace(built, library)
    return output


def _build(found: Target, cc: str) -> tuple[Path, str, str]:
    """(library, label, compiler messages), built now or found from an earlier build in the
    cache. Without OpenMP (Apple's clang) the kernels build single-threaded."""
    from ..files import cache_entry, writable_cache_dir

    attempts = [([*found.flags, OPENMP], found.label),
                ([*found.flags, "-Wno-unknown-pragmas"], f"{found.label}, one thread (no OpenMP)")]
    for i, (flags, label) in enumerate(attempts):
        name = f"minillm_kernels_{found.isa}_{_digest(cc, flags)}.so"
        relative = Path("kernels") / name
        try:
            library = cache_entry(relative)  # a shared read-only cache's build is used as it is
            if library.is_file():
                return library, label, ""
            library = writable_cache_dir() / relative
            library.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise NoFolder(f"no folder to build them in could be written: {error}") from None
        try:
            return library, label, _compile(cc, flags, library)
        except BuildError as error:
            if i or "openmp" not in error.output.lower():
                raise
    raise AssertionError("unreachable")


_STATE: dict[str, object] = {}


def _load() -> tuple[ctypes.CDLL | None, Status]:
    found = target()
    if isinstance(found, str):
        return None, Status(False, "", "", found)
    cc = compiler()
    if cc is None:
        return None, Status(False, "", "", cannot_build())
    try:
        path, label, output = _build(found, cc)
        if requested_level() != NATIVE:
            label += f", forced by {LEVEL_VARIABLE}={found.isa}"
        lib = ctypes.CDLL(str(path))
        for name, signature in SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = signature.argtypes, signature.restype
    except BuildError as error:
        reason = f"the compiler ({os.path.basename(cc)}) failed: {error.first_line}"
        return None, Status(False, "", "", reason, failed=True, compile_output=error.output)
    except NoFolder as error:
        return None, Status(False, "", "", str(error), failed=True)
    except (OSError, AttributeError) as error:
        return None, Status(False, "", "", f"the built library would not load: {error}",
                            failed=True)
    return lib, Status(True, label, found.level, "", isa=found.isa, path=path,
                       compile_output=output)


def library() -> ctypes.CDLL | None:
    """The kernels' library, built on first use; None where this machine cannot build it (see
    `status`). A failed build warns once per process."""
    if "status" not in _STATE:
        started = time.perf_counter()
        _STATE["lib"], status = _load()
        _STATE["status"] = status
        _STATE["seconds"] = time.perf_counter() - started
        if status.failed:
            warnings.warn(
                f"minillm's C kernels did not build: {status.reason}. Decoding runs on "
                f"PyTorch's kernels instead, slower (`python -m minillm doctor` measures how "
                f"much here). Set CC to another compiler, or MINILLM_NO_KERNEL=1 to use "
                f"PyTorch's kernels without trying.", KernelBuildWarning, stacklevel=3)
    return _STATE["lib"]


def status() -> Status:
    """Whether the kernels are built here (building them on first ask), what for, or why not."""
    library()
    return _STATE["status"]


_FUNCTIONS: dict[str, object] = {}


def function(name: str):
    """The C function `name` (a ctypes function), or a RuntimeError saying why there is none."""
    fn = _FUNCTIONS.get(name)
    if fn is not None:
        return fn
    if name not in SIGNATURES:
        raise ValueError(f"no kernel {name!r}; minillm has {', '.join(SIGNATURES)}")
    lib = library()
    if lib is None:
        raise RuntimeError(f"minillm's C kernels are not available here: {status().reason}")
    fn = _FUNCTIONS[name] = getattr(lib, name)
    return fn


def forget() -> None:
    """Forget this process's build (tests: build again under other settings)."""
    _STATE.clear()
    _FUNCTIONS.clear()
