"""What the Chinese edition adds to `make test`: a chapter's lesson and solution under nbval, and
its exercise run unsolved, in both editions, timed in one run (interleaved English, Chinese,
Chinese, English, so a change in the machine's load falls on both), at CI size unless --full.

    python scripts/edition_times.py 00            # chapter 00
    python scripts/edition_times.py 00 03 --full  # learner size

Prints each notebook's time in seconds (the sum of its test items' times, as pytest measured
them; a kernel's start-up included) and Chinese over English. The unsolved exercises run once in
each edition (in the first two rounds).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def paths(chapter: str, edition: str) -> list[str]:
    folder = "" if edition == "en" else "zh/"
    lesson = next((ROOT / "notebooks").glob(f"{chapter}_*.ipynb")).name
    return [f"notebooks/{folder}{lesson}", f"solutions/{folder}{lesson}"]


def run(arguments: list[str], env: dict) -> dict[str, float]:
    """pytest on `arguments`; seconds per notebook (or per exercise test) from its junit report."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--nbval-lax", f"--junitxml={report}", "-o", "junit_family=xunit1",
                        *arguments], cwd=ROOT, env=env, check=False)
        times = defaultdict(float)
        for case in ET.parse(report).iter("testcase"):
            name = case.get("file") or case.get("classname", "")
            if "test_exercises" in name:
                name = "exercise unsolved: " + case.get("name").split("[", 1)[1].rstrip("]")
            times[name] += float(case.get("time", 0))
        return dict(times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="+")
    parser.add_argument("--full", action="store_true", help="learner size (CI unset)")
    args = parser.parse_args(argv)
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    if args.full:
        env.pop("CI", None)
    else:
        env["CI"] = "1"
    for chapter in args.chapters:
        order = ["en", "zh", "zh", "en"]
        times = defaultdict(list)
        for i, edition in enumerate(order):
            notebooks = paths(chapter, edition)
            selected = run(notebooks, env)
            if i < 2:  # the unsolved exercise once in each edition
                stem = Path(notebooks[0]).stem
                which = f"unsolved and {stem} and {'' if edition == 'zh' else 'not '}zh"
                selected.update(run(["tests/test_exercises.py", "-k", which], env))
            for name, seconds in selected.items():
                times[name].append(seconds)
        print(f"\nchapter {chapter}, {'learner' if args.full else 'CI'} size, seconds "
              f"(each run, in the order {', '.join(order)}):")
        for name, runs in sorted(times.items()):
            print(f"  {name:<44} {'  '.join(f'{s:7.1f}' for s in runs)}")
        for kind in ("notebooks", "solutions"):
            en = [s for n, r in times.items() if n.startswith(kind + "/") and "/zh/" not in n
                  for s in r]
            zh = [s for n, r in times.items() if n.startswith(kind + "/zh/") for s in r]
            if en and zh:
                print(f"  {kind}: Chinese / English = {sum(zh) / len(zh) / (sum(en) / len(en)):.2f}"
                      f" (means of {len(zh)} and {len(en)} runs)")


if __name__ == "__main__":
    main()
