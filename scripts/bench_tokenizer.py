"""Benchmark minillm's tokenizer against the Rust tokenizer (Hugging Face `tokenizers`).

    .venv/bin/python scripts/bench_tokenizer.py [--json results.json] [--repeat 3]

Encodes the same text with both, in the same run, on the same machine:
  - English prose (the Shakespeare part of data/, about 0.5 MB), and
  - 1 MB of mixed text (English, traditional and simplified Chinese, and the parity strings:
    code, emoji, Japanese, Korean, Arabic, numbers, whitespace runs),
once with an empty word cache ("cold") and once more ("warm"), and times training 1,000 merges on
1 MB of the corpus. Prints MB/s (wall clock and CPU time: on a shared machine CPU time is the
steadier figure), the ratios, and a JSON summary with the machine and versions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def clocked(fn, repeat: int):
    """(best wall seconds, best CPU seconds, result) over `repeat` runs."""
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus), result


def rust_tokenizer():
    from tokenizers import Tokenizer

    import minillm
    from minillm.reference import reference_dir

    folder = reference_dir()
    if not (folder / "tokenizer.json").is_file():
        minillm.load_reference()  # converts the GGUF once and caches it
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--repeat", type=int, default=3, help="warm runs; the best is kept")
    parser.add_argument("--merges", type=int, default=1000)
    args = parser.parse_args(argv)

    import minillm
    from minillm.tokenizer import train
    from minillm.tokenizer.samples import corpus, parity_strings

    english = corpus("english")
    parts = [english, corpus("traditional Chinese"), corpus("simplified Chinese"),
             "\n".join(parity_strings())]
    mixed = "\n".join(parts)
    mixed = mixed.encode("utf-8")[:1_000_000].decode("utf-8", errors="ignore")
    rust = rust_tokenizer()
    results = {"machine": {"platform": platform.platform(), "python": sys.version.split()[0],
                           "cpus": os.cpu_count(), "processor": platform.processor()},
               "versions": {}, "texts": {}}
    import tokenizers
    results["versions"] = {"minillm": minillm.__version__, "tokenizers": tokenizers.__version__}

    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}, tokenizers {tokenizers.__version__}")
    header = (f"{'text':<16}{'MB':>6}{'minillm cold':>14}{'minillm warm':>14}{'Rust':>8}"
              f"{'cold/Rust':>11}{'warm/Rust':>11}")
    rows = []
    for name, text in [("English prose", english), ("mixed (1 MB)", mixed)]:
        size = len(text.encode("utf-8")) / 1e6
        tok = minillm.load_tokenizer("smollm2-135m")  # a fresh, empty word cache
        cold_wall, cold_cpu, ours = clocked(lambda: tok.encode(text), 1)
        warm_wall, warm_cpu, _ = clocked(lambda: tok.encode(text), args.repeat)
        rust_wall, rust_cpu, theirs = clocked(lambda: rust.encode(text).ids, args.repeat)
        same = ours == theirs
        entry = {"megabytes": size, "tokens": len(ours), "same_ids_as_rust": same}
        for clock, cold, warm, ref in [("cpu", cold_cpu, warm_cpu, rust_cpu),
                                       ("wall", cold_wall, warm_wall, rust_wall)]:
            entry[clock] = {"minillm_cold_MBps": size / cold, "minillm_warm_MBps": size / warm,
                            "rust_MBps": size / ref, "minillm_cold_over_rust": ref / cold,
                            "minillm_warm_over_rust": ref / warm}
        results["texts"][name] = entry
        rows.append((name, size, entry))

    print("\nencoding throughput in MB/s; cold/Rust and warm/Rust are minillm's speed over Rust's")
    print(header)
    for clock in ("cpu", "wall"):
        print(f"-- {clock} time")
        for name, size, entry in rows:
            e = entry[clock]
            print(f"{name:<16}{size:>6.2f}{e['minillm_cold_MBps']:>14.2f}"
                  f"{e['minillm_warm_MBps']:>14.2f}{e['rust_MBps']:>8.2f}"
                  f"{e['minillm_cold_over_rust']:>10.2f}x{e['minillm_warm_over_rust']:>10.2f}x")
    for name, _, entry in rows:
        print(f"{name}: {entry['tokens']:,} tokens, same ids as Rust: {entry['same_ids_as_rust']}")

    train_text = corpus().encode("utf-8")[:1_000_000].decode("utf-8", errors="ignore")
    wall, cpu, trained = clocked(lambda: train(train_text, 256 + args.merges + 3), 1)
    results["training"] = {"megabytes": len(train_text.encode()) / 1e6, "merges": args.merges,
                           "wall_s": wall, "cpu_s": cpu, "vocab_size": trained.vocab_size}
    print(f"\ntraining {args.merges} merges on {len(train_text.encode()) / 1e6:.2f} MB: "
          f"{wall:.1f} s wall, {cpu:.1f} s CPU")
    print("\n" + json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
