"""Write an offline bundle for a workshop: every wheel the course needs on this platform, the model
file, and the course itself, so a learner installs with no network at all.

    python scripts/make_bundle.py --out dist/minillm-bundle
    # then, on the learner's machine (no network needed):
    cd dist/minillm-bundle/course && make course OFFLINE=..

`--book build/book/html` (as `make bundle` passes it, after `make book`) adds the built book, which a
learner reads offline by opening book/index.html.

`--only-build-tools` writes a small bundle whose wheelhouse holds only what building minillm itself
needs; the tests use it, with the other packages taken from an existing environment, to prove the
offline path quickly.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_TOOLS = ["setuptools>=77"]


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


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="dist/minillm-bundle")
    parser.add_argument("--torch", default="torch==2.13.0", help="the torch requirement to bundle")
    parser.add_argument("--only-build-tools", action="store_true",
                        help="bundle only the build tools' wheels (for tests)")
    parser.add_argument("--book", type=Path, default=None,
                        help="the built book (make book writes build/book/html) to include")
    args = parser.parse_args(argv)
    if args.book is not None and not (args.book / "index.html").is_file():
        parser.error(f"--book {args.book}: no index.html there; build the book first (make book)")

    sys.path.insert(0, str(ROOT))
    from minillm.files import fetch

    out = Path(args.out).resolve()
    if out.exists():
        shutil.rmtree(out)
    wheels, model, course = out / "wheels", out / "model", out / "course"
    for folder in (wheels, model, course):
        folder.mkdir(parents=True)
    start = time.perf_counter()

    requirements = list(BUILD_TOOLS)
    if not args.only_build_tools:
        requirements += [args.torch, f"{ROOT}[dev]"]
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels),
         *requirements])
    for built in wheels.glob("minillm-*.whl"):
        built.unlink()  # the course is installed editable from course/, not from a wheel
    shutil.copy2(fetch(), model / fetch().name)
    files = copy_course(course)
    if args.book is not None:
        shutil.copytree(args.book, out / "book")
    read = "Read the course without installing anything: open book/index.html in a browser.\n\n" \
        if args.book is not None else ""
    (out / "README.txt").write_text(
        "minillm offline bundle\n\n" + read +
        "Install with no network:\n"
        "    cd course && make course OFFLINE=..\n"
        "(or `make test OFFLINE=..` to run the tests). The wheels are for the platform and Python\n"
        f"version that built the bundle: {sys.platform}, Python {sys.version.split()[0]}.\n")
    print(f"bundle: {out}")
    print(f"  wheels: {len(list(wheels.glob('*.whl')))} files, {size_mb(wheels):.0f} MB")
    print(f"  model:  {size_mb(model):.0f} MB")
    print(f"  course: {files} files, {size_mb(course):.1f} MB")
    if args.book is not None:
        print(f"  book:   {size_mb(out / 'book'):.1f} MB (book/index.html)")
    print(f"  total:  {size_mb(out):.0f} MB, written in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
