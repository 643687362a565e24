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

from ...measure.comparison import load_average
from ...utils.devices import Timer
from ...utils.wording import text

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


# A round of t tokens per target pass cannot beat plain decoding by more than t: the pass costs at
# least a decode step. A speed-up above SPEEDUP_SLACK times its tokens per pass was disturbed.
SPEEDUP_SLACK = 1.15
BOUND_RETRIES = 2


def within_bound(row: dict) -> bool:
    """Whether a row's speed-up is one its tokens per target pass allow."""
    return row["speedup"] <= SPEEDUP_SLACK * row["tokens_per_pass"]


def speedup_text(row: dict) -> str:
    """'1.29x', or for a row whose speed-up broke its bound after every retry, what it measured
    and why it is not a finding."""
    if not row.get("disturbed"):
        return f"{row['speedup']:4.2f}x"
    return text("disturbed ({speedup:.2f}x measured, above what {t:.2f} tokens/pass allow; {load})",
                "受干扰（测得 {speedup:.2f}x，超过每次传播 {t:.2f} 个词元所允许的；{load}）",
                speedup=row["speedup"], t=row["tokens_per_pass"], load=load_average())


def compare(model, tokenizer, prompt_ids: list[int], drafts: dict, ks, max_new_tokens: int,
            repeats: int = 1, progress=None) -> list[dict]:
    """Rows of measurements for one prompt: first plain greedy decoding ("plain", k = 0), then
    speculative greedy decoding with every draft in `drafts` ({name: Draft}) and every k in `ks`.
    Each is run `repeats` times and its fastest run kept. Speed-ups are against the plain row.
    A row whose speed-up its tokens per pass cannot allow (`within_bound`) is timed again with
    the plain row, BOUND_RETRIES times at most, the fastest of each kept; if it still breaks the
    bound it is marked `disturbed`, to be shown as such and not as a finding (`speedup_text`)."""
    from ...generation.agreement import agree
    from ...generation.loop import generate
    from ...speculative.loop import speculative_generate

    def best(fn):
        runs = [_timed(fn, model) for _ in range(repeats)]
        return min(runs, key=lambda r: r[1])

    def plain_run():
        return best(lambda: generate(model, tokenizer, prompt_ids,
                                     max_new_tokens=max_new_tokens))

    def draft_run(name, k):
        return best(lambda: speculative_generate(
            model, tokenizer, prompt_ids, drafts[name], k=k, max_new_tokens=max_new_tokens))

    plain, wall, cpu = plain_run()
    rows = [dict(draft="plain", k=0, tokens=len(plain.token_ids), seconds=wall,
                 cpu_seconds=cpu, speedup=1.0, cpu_speedup=1.0, acceptance=float("nan"),
                 tokens_per_pass=1.0, same_tokens=True, disturbed=False,
                 accepted_per_pass=[], proposed_per_pass=[], text=plain.text)]
    jobs = [(name, k) for name in drafts for k in ks]
    for name, k in (progress(jobs) if progress else jobs):
        out, wall_s, cpu_s = draft_run(name, k)
        row = dict(draft=name, k=k, tokens=len(out.token_ids), seconds=wall_s,
                   cpu_seconds=cpu_s, speedup=wall / wall_s, cpu_speedup=cpu / cpu_s,
                   acceptance=out.stats.acceptance_rate,
                   tokens_per_pass=out.stats.tokens_per_pass,
                   accepted_per_pass=list(out.stats.accepted_per_pass),
                   proposed_per_pass=list(out.stats.proposed_per_pass),
                   same_tokens=agree(model, prompt_ids, out.token_ids, plain.token_ids),
                   text=out.text)
        for _ in range(BOUND_RETRIES):
            if within_bound(row):
                break
            _, again, again_cpu = plain_run()
            _, again_s, again_cpu_s = draft_run(name, k)
            wall, cpu = min(wall, again), min(cpu, again_cpu)  # the plain row's, from now on
            rows[0].update(seconds=wall, cpu_seconds=cpu)
            row.update(seconds=min(row["seconds"], again_s),
                       cpu_seconds=min(row["cpu_seconds"], again_cpu_s))
            row.update(speedup=wall / row["seconds"], cpu_speedup=cpu / row["cpu_seconds"])
        row["disturbed"] = not within_bound(row)
        rows.append(row)
    return rows
