"""Measuring speculative decoding: three tasks, plain decoding against each draft, the same run.

    TASKS            the three chat requests: "edit" (write a given text out again, corrected;
                     the answer repeats the prompt), "summarise" (shorter, partly copied) and
                     "chat" (an open question: nothing to copy)
    task_prompt      a task's token ids, in the model's chat format
    compare          plain greedy decoding, then speculative decoding with each (draft, k):
                     wall-clock and CPU seconds, the speed-up, the acceptance rate, tokens per
                     target pass, the drafted and accepted tokens of each round, and whether the tokens agree with plain decoding's
                     (`minillm.generation.agreement.agree`: exactly on a CPU, up to the first
                     near tie on a GPU, where the two kernel shapes may sum in other orders)

`scripts/bench_speculative.py` and the chapter 08 lesson both run `compare`.
"""

from __future__ import annotations

import time

from ...utils.devices import Timer

PARAGRAPH = (
    "The lighthouse stood at the edge of the cliff for more than two hundred years. Every night "
    "its keeper climbed the hundred and twelve steps, cleaned the great glass lens, and lit the "
    "lamp that warned ships away from the rocks below. When the electric light arrived, the "
    "keeper was no longer needed, but the town kept the tower as a museum, and children still "
    "race each other up the stairs to see the sea."
)
TYPOS = (
    "The lighthouse stood at the egde of the clif for more then two hundred years. Every nigth "
    "its keeper climbed the hundred and twelve steps, cleened the great glass lens, and lit the "
    "lamp that warned ships away from the roks below. When the electric light arived, the "
    "keeper was no longer neded, but the town kept the tower as a musuem, and children still "
    "race each other up the stairs to see the sea."
)

TASKS = {
    "edit": "Correct the spelling mistakes in this text and write out the whole corrected "
            "text:\n\n" + TYPOS,
    "summarise": "Summarise this text in two sentences:\n\n" + PARAGRAPH,
    "chat": "What are three good habits for staying healthy? Explain each one.",
}


def task_prompt(tokenizer, task: str) -> list[int]:
    """The token ids of TASKS[task] as one user message in the chat format."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; the tasks are: {', '.join(TASKS)}")
    text = tokenizer.apply_chat_template([{"role": "user", "content": TASKS[task]}])
    return list(tokenizer.encode(text))


def _timed(fn, device=None):
    cpu = time.process_time()
    with Timer(device) as wall:
        result = fn()
    return result, wall.seconds, time.process_time() - cpu


def compare(model, tokenizer, prompt_ids: list[int], drafts: dict, ks, max_new_tokens: int,
            repeats: int = 1, progress=None) -> list[dict]:
    """Rows of measurements for one prompt: first plain greedy decoding ("plain", k = 0), then
    speculative greedy decoding with every draft in `drafts` ({name: Draft}) and every k in `ks`.
    Each is run `repeats` times and its fastest run kept. Speed-ups are against the plain row."""
    from ...generation.agreement import agree
    from ...generation.loop import generate
    from ...speculative.loop import speculative_generate

    def best(fn):
        runs = [_timed(fn, model) for _ in range(repeats)]
        return min(runs, key=lambda r: r[1])

    plain, wall, cpu = best(lambda: generate(model, tokenizer, prompt_ids,
                                             max_new_tokens=max_new_tokens))
    rows = [dict(draft="plain", k=0, tokens=len(plain.token_ids), seconds=wall,
                 cpu_seconds=cpu, speedup=1.0, cpu_speedup=1.0, acceptance=float("nan"),
                 tokens_per_pass=1.0, same_tokens=True,
                 accepted_per_pass=[], proposed_per_pass=[], text=plain.text)]
    jobs = [(name, k) for name in drafts for k in ks]
    for name, k in (progress(jobs) if progress else jobs):
        out, wall_s, cpu_s = best(lambda: speculative_generate(
            model, tokenizer, prompt_ids, drafts[name], k=k, max_new_tokens=max_new_tokens))
        rows.append(dict(draft=name, k=k, tokens=len(out.token_ids), seconds=wall_s,
                         cpu_seconds=cpu_s, speedup=wall / wall_s, cpu_speedup=cpu / cpu_s,
                         acceptance=out.stats.acceptance_rate,
                         tokens_per_pass=out.stats.tokens_per_pass,
                         accepted_per_pass=list(out.stats.accepted_per_pass),
                         proposed_per_pass=list(out.stats.proposed_per_pass),
                         same_tokens=agree(model, prompt_ids, out.token_ids, plain.token_ids),
                         text=out.text))
    return rows
