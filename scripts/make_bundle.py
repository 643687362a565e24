"""Write an offline bundle for a workshop: every wheel the course needs on this platform, the model
file with its licence, and the course itself, so a learner installs with no network at all.
bundle.json and README.txt record what it holds: which build of torch (CPU or CUDA), for which
platform and Python.

    python scripts/make_bundle.py --out dist/minillm-bundle [--torch-index URL]
    # then, on the learner's machine (no network needed):
    cd dist/minillm-bundle/course && make course OFFLINE=..

`--book build/book/html` (as `make bundle` passes it, after `make book`) adds the built book, which a
learner reads offline by opening book/index.html.

pip's default index gives Linux torch's CUDA build (several GB); `--torch-index` (make bundle
TORCH_INDEX=...) names an extra index to take torch from, such as PyTorch's CPU wheel index.

`--only-build-tools` writes a small bundle whose wheelhouse holds only what building minillm itself
needs; the tests use it, with the other packages taken from an existing environment, to prove the
offline path quickly.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_TOOLS = ["setuptools>=77"]
DISTRIBUTION = "minillm_course"  # minillm's own wheel, as pip names its file


def run(command: list[str]) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def copy_course(target: Path) -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    count = 0
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
            count += 1
    return count


def torch_build(wheels: Path) -> dict:
    """Which torch the wheelhouse holds: its file, version and build ("CPU", "CUDA 12.8", or
    "none" in a bundle without torch). A build is named by the version's local label (+cpu,
    +cu128) where there is one, else by its requirements: the CUDA build needs nvidia-*
    packages."""
    import zipfile

    found = sorted(wheels.glob("torch-*.whl"))
    if not found:
        return {"wheel": None, "version": None, "build": "none"}
    wheel = found[0]
    version = wheel.name.split("-")[1]
    local = version.partition("+")[2]
    if local == "cpu":
        build = "CPU"
    elif local.startswith("cu"):
        build = f"CUDA {local[2:-1]}.{local[-1]}"
    else:
        with zipfile.ZipFile(wheel) as archive:
            meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            text = archive.read(meta).decode()
        needs = [line for line in text.splitlines() if line.startswith("Requires-Dist: nvidia-")]
        build = "CUDA" if needs else "CPU"
    return {"wheel": wheel.name, "version": version, "build": build}


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="dist/minillm-bundle")
    parser.add_argument("--torch", default="torch==2.13.0", help="the torch requirement to bundle")
    parser.add_argument("--torch-index", metavar="URL",
                        help="an extra package index to take torch from (its CPU build: "
                             "PyTorch's CPU wheel index)")
    parser.add_argument("--only-build-tools", action="store_true",
                        help="bundle only the build tools' wheels (for tests)")
    parser.add_argument("--book", type=Path, default=None,
                        help="the built book (make book writes build/book/html) to include")
    args = parser.parse_args(argv)
    if args.book is not None and not (args.book / "index.html").is_file():
        parser.error(f"--book {args.book}: no index.html there; build the book first (make book)")

    sys.path.insert(0, str(ROOT))
    from minillm.files import DEFAULT_MODEL, MODELS, fetch, licence_file, licence_text

    out = Path(args.out).resolve()
    if out.exists():
        shutil.rmtree(out)
    wheels, model, course = out / "wheels", out / "model", out / "course"
    for folder in (wheels, model, course):
        folder.mkdir(parents=True)
    start = time.perf_counter()

    requirements = list(BUILD_TOOLS)
    if not args.only_build_tools:
        requirements += [args.torch, f"{ROOT}[dev,eval]"]
    index = ["--extra-index-url", args.torch_index] if args.torch_index else []
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), *index,
         *requirements])
    for built in wheels.glob(f"{DISTRIBUTION}-*.whl"):
        built.unlink()  # the course is installed editable from course/, not from a wheel
    model_file = fetch()
    shutil.copy2(model_file, model / model_file.name)
    (model / licence_file(model_file).name).write_text(licence_text(MODELS[DEFAULT_MODEL]),
                                                      encoding="utf-8")
    files = copy_course(course)
    if args.book is not None:
        shutil.copytree(args.book, out / "book")
    read = "Read the course without installing anything: open book/index.html in a browser.\n\n" \
        if args.book is not None else ""
    torch = torch_build(wheels)
    held = {"torch": torch, "platform": f"{sys.platform} {platform.machine()}",
            "python": sys.version.split()[0], "model": model_file.name}
    (out / "bundle.json").write_text(json.dumps(held, indent=2) + "\n")
    torch_line = (f"torch {torch['version']}, the {torch['build']} build ({torch['wheel']})"
                  if torch["wheel"] else "no torch (a bundle of the build tools only)")
    (out / "README.txt").write_text(
        "minillm offline bundle\n\n" + read +
        "Install with no network:\n"
        "    cd course && make course OFFLINE=..\n"
        "(or `make test OFFLINE=..` to run the tests). The wheels are for the platform and Python\n"
        f"version that built the bundle: {held['platform']}, Python {held['python']}.\n"
        f"It holds {torch_line}.\n"
        f"The model, {model_file.name}, comes with its licence beside it in model/.\n")
    print(f"bundle: {out}")
    print(f"  wheels: {len(list(wheels.glob('*.whl')))} files, {size_mb(wheels):.0f} MB; "
          f"{torch_line}")
    print(f"  model:  {size_mb(model):.0f} MB")
    print(f"  course: {files} files, {size_mb(course):.1f} MB")
    if args.book is not None:
        print(f"  book:   {size_mb(out / 'book'):.1f} MB (book/index.html)")
    print(f"  total:  {size_mb(out):.0f} MB, written in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
