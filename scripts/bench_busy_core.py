"""What one busy core does to torch's threads: a prompt and decode steps of the course model,
timed with every core's thread and with one thread fewer, on the machine as it is and then with a
second process keeping one core busy (a loop in a child process, the way a video call or an
indexer would).

    .venv/bin/python scripts/bench_busy_core.py [--prompt-tokens 128] [--new-tokens 16]
                                                [--reference]

--reference times transformers' model (lesson 00's) instead of minillm's fast path.

Prints one row per (machine, threads): prompt ms per token, decode ms per step, the cores
others kept busy (minillm.utils.cores.others_busy_cores) and the load average, and what
`use_free_cores` would choose. Run it alone: its quiet rows are only as quiet as the machine."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

import torch

import minillm
from minillm.utils.cores import free_core_threads, others_busy_cores


def _spin():
    while True:
        pass


def timed(model, tokenizer, prompt_ids, new_tokens: int) -> tuple[float, float]:
    """(ms per prompt token, ms per decode step), the best of 3 runs."""
    best_prefill = best_decode = float("inf")
    for _ in range(3):
        out = minillm.generate(model, tokenizer, prompt_ids, max_new_tokens=new_tokens,
                               ignore_eos=True)
        metrics = out.metrics
        best_prefill = min(best_prefill, 1000 * metrics.ttft / len(prompt_ids))
        best_decode = min(best_decode, 1000 * metrics.tpot)
    return best_prefill, best_decode


def timed_reference(model, prompt_ids, new_tokens: int) -> tuple[float, float]:
    """transformers' generate: (ms per prompt token, ms per decode step), the best of 3 runs;
    a decode step is the time beyond a one-token generation, per further token."""
    ids = torch.tensor([prompt_ids])
    best_prefill = best_decode = float("inf")
    for _ in range(3):
        with torch.inference_mode():
            start = time.perf_counter()
            model.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False)
            first = time.perf_counter() - start
            start = time.perf_counter()
            model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           do_sample=False)
            whole = time.perf_counter() - start
        best_prefill = min(best_prefill, 1000 * first / len(prompt_ids))
        best_decode = min(best_decode, 1000 * (whole - first) / (new_tokens - 1))
    return best_prefill, best_decode


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--reference", action="store_true",
                        help="time transformers' model (lesson 00's) instead of minillm's")
    args = parser.parse_args(argv)
    if args.reference:
        model, tokenizer = minillm.load_reference("smollm2-135m")
        run = lambda ids, n: timed_reference(model, ids, n)  # noqa: E731
    else:
        model, tokenizer = minillm.load("smollm2-135m", device="cpu")
        run = lambda ids, n: timed(model, tokenizer, ids, n)  # noqa: E731
    prompt_ids = torch.randint(100, 40000, (args.prompt_tokens,),
                               generator=torch.Generator().manual_seed(0)).tolist()
    cores = torch.get_num_threads()
    print(f"{os.cpu_count()} cores, torch {torch.__version__}, {cores} threads by default; "
          f"prompt {args.prompt_tokens} tokens, {args.new_tokens} new tokens; "
          f"{'transformers' if args.reference else 'minillm'}")
    print(f"{'machine':<22}{'threads':>8}{'prompt ms/token':>17}{'decode ms/step':>16}"
          f"{'others busy':>13}{'load avg':>10}{'chosen':>8}")
    for busy in (False, True):
        spinner = None
        if busy:
            spinner = multiprocessing.Process(target=_spin, daemon=True)
            spinner.start()
            time.sleep(1.0)
        try:
            others = others_busy_cores()
            for threads in dict.fromkeys((cores, max(1, cores - 1))):
                torch.set_num_threads(threads)
                run(prompt_ids, 2)  # warm
                prefill, decode = run(prompt_ids, args.new_tokens)
                print(f"{'one core kept busy' if busy else 'as it is':<22}{threads:>8}"
                      f"{prefill:>17.2f}{decode:>16.1f}{others:>13.2f}"
                      f"{os.getloadavg()[0]:>10.2f}{free_core_threads(cores, others):>8}",
                      flush=True)
        finally:
            if spinner is not None:
                spinner.terminate()
                spinner.join()
    torch.set_num_threads(cores)


if __name__ == "__main__":
    main()
