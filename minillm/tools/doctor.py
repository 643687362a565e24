"""`python -m minillm doctor`: is this machine ready for the course?

One line per item, with the fix when it fails. Exit status 0 only when everything a learner needs
is there. Workshops run it first on every machine.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from importlib import metadata

MIN_PYTHON = (3, 10)
MIN_FREE_MEMORY_GB = 2.0
MIN_FREE_DISK_GB = 2.0
SETUP_FIX = "run `make course` (or `pip install -e '.[dev]'` inside your environment)"
CPU_TORCH_FIX = ("install torch's CPU build in a fresh environment: `rm -rf .venv && make course "
                 "TORCH_INDEX=<PyTorch's CPU wheel index>` (the README's \"torch: the CPU "
                 "build\" gives the address), or check the GPU driver with `nvidia-smi`")
PACKAGES = ["torch", "transformers", "gguf", "accelerate", "tokenizers", "safetensors", "numpy",
            "matplotlib", "ipywidgets", "jupyterlab", "ipykernel", "tqdm", "nbval"]


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        text = f"[{mark}] {self.name}: {self.detail}"
        if not self.ok and self.fix:
            text += f"\n       fix: {self.fix}"
        return text


def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    ok = sys.version_info[:2] >= MIN_PYTHON
    return Check("python", ok, version, "install Python 3.11 and run `make course` again")


def check_package(name: str) -> Check:
    try:
        return Check(f"package {name}", True, metadata.version(name))
    except metadata.PackageNotFoundError:
        return Check(f"package {name}", False, "not installed", SETUP_FIX)


def check_torch_build() -> Check:
    try:
        import torch
    except ImportError:
        return Check("torch build", False, "torch does not import", SETUP_FIX)
    from ..utils.devices import pick_device

    cuda_build = torch.version.cuda is not None
    build = f"CUDA {torch.version.cuda} build" if cuda_build else "CPU build"
    device = pick_device()
    detail = f"{build}, running on {device}"
    if device.type == "cuda":
        detail += f" ({torch.cuda.get_device_name(device)})"
    if cuda_build and device.type != "cuda":
        return Check("torch build", False,
                     f"{detail}: a CUDA build of torch but no usable NVIDIA GPU, so several GB "
                     "are installed for nothing and the course runs on the CPU anyway",
                     CPU_TORCH_FIX)
    return Check("torch build", True, detail)


def check_model_file() -> Check:
    from ..files import DEFAULT_MODEL, cache_dir, cache_entry, model_source, verify

    source = model_source(DEFAULT_MODEL)
    try:
        path = cache_entry(source.filename)
    except PermissionError:  # not in the cache, and nowhere to fetch it to (the cache item says)
        path = cache_dir() / source.filename
    problem = verify(path, source)
    if problem is not None:
        return Check("model file", False, problem,
                     "run `python -m minillm fetch` (it downloads and checks the file)")
    return Check("model file", True, f"{path} (sha256 {source.sha256[:12]}…)")


def _free_memory_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1e6
    except OSError:
        pass
    try:
        import psutil

        return psutil.virtual_memory().available / 1e9
    except ImportError:
        return None


def check_memory() -> Check:
    free = _free_memory_gb()
    if free is None:
        return Check("free memory", True, "unknown on this system")
    return Check("free memory", free >= MIN_FREE_MEMORY_GB, f"{free:.1f} GB available",
                 f"close programs: the course needs about {MIN_FREE_MEMORY_GB:.0f} GB")


def check_cache() -> Check:
    """Where minillm reads its cache from and writes to (a shared cache may be read-only)."""
    from ..files import cache_dir, writable_cache_dir

    shared = cache_dir()
    try:
        writable = writable_cache_dir()
    except PermissionError as error:
        return Check("cache", False, str(error),
                     "set MINILLM_USER_CACHE to a folder you can write to")
    if writable == shared:
        return Check("cache", True, f"{shared} (writable)")
    return Check("cache", True, f"{shared} is read-only here (shared): minillm reads it, and "
                 f"writes converted weights and kernels to {writable}")


def check_disk() -> Check:
    from ..files import writable_cache_dir

    try:
        folder = writable_cache_dir()
    except PermissionError:
        return Check("free disk", False, "no writable cache folder (see the cache item)")
    free = shutil.disk_usage(folder).free / 1e9
    return Check("free disk", free >= MIN_FREE_DISK_GB, f"{free:.1f} GB free at {folder}",
                 f"free at least {MIN_FREE_DISK_GB:.0f} GB, or point MINILLM_CACHE elsewhere")


def check_jupyter() -> Check:
    missing = []
    for name in ["jupyterlab", "jupyterlab_widgets"]:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        return Check("JupyterLab + widgets", False, f"missing {', '.join(missing)}", SETUP_FIX)
    return Check("JupyterLab + widgets", True,
                 f"jupyterlab {metadata.version('jupyterlab')}, widget extension "
                 f"{metadata.version('jupyterlab_widgets')}")


def check_generation(new_tokens: int = 10) -> Check:
    """Load the real model with minillm and time a short greedy generation."""
    try:
        import minillm

        from ..utils.devices import Timer

        with Timer() as loading:
            model, tokenizer = minillm.load("smollm2-135m")
        loaded = loading.seconds
        with Timer(model) as generating:
            result = minillm.generate(model, tokenizer, "The capital of France is",
                                      max_new_tokens=new_tokens)
        seconds = generating.seconds
    except Exception as error:  # the doctor reports, it does not crash
        return Check("generation", False, f"{type(error).__name__}: {error}",
                     "fix the items above first; then run `python -m minillm doctor` again")
    from ..kernels.decode_plan import plan_of

    return Check("generation", True,
                 f"{len(result.token_ids)} tokens in {seconds:.2f} s after a {loaded:.1f} s load: "
                 f"{result.text!r}; each decode step: {plan_of(model)}")


def check_kernels(measure: bool = True) -> Check:
    """minillm's C kernels: built (and for what), or why not; with `measure`, what they change
    in a decode step here (minillm.tools.doctor_kernels)."""
    from .doctor_kernels import kernels_line

    try:
        ok, detail, fix = kernels_line(measure)
    except Exception as error:  # the doctor reports, it does not crash
        return Check("kernels", False, f"{type(error).__name__}: {error}",
                     "fix the items above first; then run `python -m minillm doctor` again")
    return Check("kernels", ok, detail, fix)


def run_checks(generate: bool = True) -> list[Check]:
    checks = [check_python()]
    checks += [check_package(name) for name in PACKAGES]
    checks += [check_torch_build(), check_model_file(), check_cache(), check_memory(),
               check_disk(), check_jupyter()]
    ready = all(c.ok for c in checks)
    checks.append(check_kernels(measure=generate and ready))
    if generate and ready:
        checks.append(check_generation())
    elif generate:
        checks.append(Check("generation", False, "skipped: fix the items above first"))
    return checks


def main(generate: bool = True) -> int:
    checks = run_checks(generate)
    for check in checks:
        print(check.line())
    failed = [c.name for c in checks if not c.ok]
    print()
    if failed:
        print(f"{len(failed)} item(s) need attention: {', '.join(failed)}")
        return 1
    print("Everything the course needs is here.")
    return 0
