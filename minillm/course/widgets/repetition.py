"""Repetition explorer: one prompt generated greedily with and without repetition_penalty /
no_repeat_ngram_size, repeated n-grams highlighted and counted.

Each text is generated once per (prompt, setting) and kept: moving the penalty slider
regenerates only the penalty's text, never the unchanged greedy one. While a text is being
generated the controls are disabled and a progress bar counts its tokens. A row whose setting
changed nothing says it has the same text as the row above it."""

from __future__ import annotations

import html
from dataclasses import dataclass

from ..language import say
from ..text_quality import distinct_n, repeated_ngrams, repeated_token_mask
from .readable import finish_reason_text, number
from .tokens import text_pieces


@dataclass
class RepetitionReport:
    label: str
    token_ids: list[int]
    repeated: int          # n-gram positions that repeat an earlier n-gram
    total: int             # n-gram positions
    distinct_2: float
    mask: list[bool]       # per token: inside a repeated n-gram

    @property
    def rate(self) -> float:
        return self.repeated / self.total if self.total else 0.0


def repetition_report(label: str, token_ids, n: int = 3) -> RepetitionReport:
    token_ids = list(token_ids)
    return RepetitionReport(label, token_ids, len(repeated_ngrams(token_ids, n)),
                            max(len(token_ids) - n + 1, 0), distinct_n(token_ids, 2),
                            repeated_token_mask(token_ids, n))


def highlight_html(tokenizer, report: RepetitionReport, note: str = "") -> str:
    """The text, token by token, with tokens inside repeated n-grams on a red background (the
    tokens of one character cut across tokens together; special tokens such as <|im_end|> left
    out); `note` (e.g. why the generation ended) follows the counts."""
    parts = []
    for text, positions in text_pieces(tokenizer, report.token_ids):
        piece = html.escape(text).replace("\n", "↵<br>")
        repeated = any(report.mask[i] for i in positions)
        parts.append(f'<span style="background:#f8b4b4">{piece}</span>' if repeated else piece)
    note = f" · {html.escape(note)}" if note else ""
    counts = say("{repeated} of {total} n-grams repeat ({rate:.0%}), distinct-2 {d2:.2f}",
                 "{total} 个 n-gram 中有 {repeated} 个重复（{rate:.0%}），distinct-2 {d2:.2f}",
                 repeated=report.repeated, total=report.total, rate=report.rate,
                 d2=report.distinct_2)
    return (f"<b>{html.escape(report.label)}</b>: {counts}{note}"
            f"<div style='font-family:monospace;white-space:pre-wrap;border:1px solid #ccc;"
            f"padding:4px'>{''.join(parts)}</div>")


def settings(penalty: float, ngram: int) -> dict[str, dict]:
    """The three rows: label -> generation fields (labels rounded for people)."""
    return {"greedy": {},
            f"repetition_penalty={number(round(float(penalty), 2))}":
                {"repetition_penalty": round(float(penalty), 2)},
            f"no_repeat_ngram_size={ngram}": {"no_repeat_ngram_size": ngram}}


def repetition_explorer(model, tokenizer, prompt: str = "I like cats. I like dogs. I like",
                        max_new_tokens: int = 40, n: int = 3):
    """Generate greedily with each of `settings` (the penalty and n-gram size adjustable) and
    show the texts with repeated n-grams highlighted. The returned box has `.run()` (generate
    what is not generated yet), `.rows` (the three HTML rows), `.controls` and `.generated`
    (how many texts it has generated so far)."""
    import ipywidgets as w

    from ...generation.loop import timed_stream

    wide = {"style": {"description_width": "initial"}, "continuous_update": False}
    text = w.Text(value=prompt, description=say("prompt", "提示词"),
                  layout=w.Layout(width="480px"), continuous_update=False)
    penalty = w.FloatSlider(value=1.3, min=1.0, max=3.0, step=0.1,
                            description="repetition_penalty", **wide)
    ngram = w.IntSlider(value=3, min=1, max=8, description="no_repeat_ngram_size", **wide)
    progress = w.IntProgress(value=0, min=0, max=max_new_tokens,
                             layout=w.Layout(width="160px", visibility="hidden"))
    status = w.HTML(layout=w.Layout(width="420px"))
    rows = [w.HTML() for _ in range(3)]
    done: dict[tuple, object] = {}  # (prompt, label) -> Generation
    box = w.VBox([text, w.HBox([penalty, ngram]), w.HBox([progress, status]), *rows])

    def show(row, label, result, same_as=None):
        report = repetition_report(label, result.token_ids, n)
        note = finish_reason_text(result.finish_reason, len(result.token_ids), result.text)
        if same_as is not None:
            note += say(" · the same text as {row}", " · 与 {row} 的文本相同", row=same_as)
        row.value = highlight_html(tokenizer, report, note)

    def same_text(rows_now, label):
        """The first row above `label` that generated exactly its tokens, if any."""
        mine = done[(text.value, label)].token_ids
        for other in list(rows_now)[:list(rows_now).index(label)]:
            if done[(text.value, other)].token_ids == mine:
                return other
        return None

    def run(_=None):
        rows_now = settings(penalty.value, ngram.value)
        todo = [label for label in rows_now if (text.value, label) not in done]
        controls = (text, penalty, ngram)
        for control in controls:
            control.disabled = True
        progress.layout.visibility = "visible"
        try:
            for row, (label, fields) in zip(rows, rows_now.items()):
                key = (text.value, label)
                if key not in done:
                    waiting = say("waiting…", "等待中…")
                    row.value = f"<b>{html.escape(label)}</b>: <i>{waiting}</i>"
            for row, (label, fields) in zip(rows, rows_now.items()):
                key = (text.value, label)
                if key not in done:
                    status.value = say("generating {i} of {n}: {label}…",
                                       "正在生成第 {i} 个（共 {n} 个）：{label}…",
                                       i=todo.index(label) + 1, n=len(todo),
                                       label=html.escape(label))
                    progress.value = 0
                    stream = timed_stream(model, tokenizer, text.value,
                                          max_new_tokens=max_new_tokens,
                                          on_token=lambda e: setattr(progress, "value",
                                                                     e.index + 1), **fields)
                    for _ in stream:
                        pass
                    done[key] = stream.result
                    box.generated += 1
                show(row, label, done[key], same_text(rows_now, label))
            kept = len(rows_now) - len(todo)
            status.value = (say("generated {n}, kept {kept} unchanged",
                                "生成了 {n} 个，{kept} 个没变、保留原样", n=len(todo), kept=kept)
                            if todo else say("nothing changed", "没有变化"))
        except (ValueError, TypeError) as error:  # a bad prompt: say so where the learner looks
            status.value = f"<span style='color:#b00'>{html.escape(str(error))}</span>"
        finally:
            progress.layout.visibility = "hidden"
            for control in controls:
                control.disabled = False

    box.generated = 0
    for control in (text, penalty, ngram):
        control.observe(run, names="value")
    run()
    box.run, box.rows = run, rows
    box.controls = {"prompt": text, "repetition_penalty": penalty, "no_repeat_ngram_size": ngram}
    box.status, box.progress = status, progress
    return box
