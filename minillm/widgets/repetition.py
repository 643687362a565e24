"""Repetition explorer: one prompt generated with and without repetition_penalty /
no_repeat_ngram_size, repeated n-grams highlighted and counted."""

from __future__ import annotations

import html
from dataclasses import dataclass

from ..decoding.quality import distinct_n, repeated_ngrams, repeated_token_mask


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


def highlight_html(tokenizer, report: RepetitionReport) -> str:
    """The text, token by token, with tokens inside repeated n-grams on a red background."""
    parts = []
    for token, repeated in zip(report.token_ids, report.mask):
        piece = html.escape(tokenizer.decode([token])).replace("\n", "↵<br>")
        parts.append(f'<span style="background:#f8b4b4">{piece}</span>' if repeated else piece)
    return (f"<b>{html.escape(report.label)}</b>: {report.repeated} of {report.total} "
            f"n-grams repeat ({report.rate:.0%}), distinct-2 {report.distinct_2:.2f}"
            f"<div style='font-family:monospace;white-space:pre-wrap;border:1px solid #ccc;"
            f"padding:4px'>{''.join(parts)}</div>")


SETTINGS = {
    "greedy": {},
    "repetition_penalty=1.8": {"repetition_penalty": 1.8},
    "no_repeat_ngram_size=3": {"no_repeat_ngram_size": 3},
}


def repetition_explorer(model, tokenizer, prompt: str = "I like cats. I like dogs. I like",
                        max_new_tokens: int = 40, n: int = 3):
    """Generate greedily with each setting of SETTINGS (the penalty and n-gram size adjustable)
    and show the texts with repeated n-grams highlighted."""
    import ipywidgets as w

    from ..generation import generate

    text = w.Text(value=prompt, description="prompt", layout=w.Layout(width="480px"))
    penalty = w.FloatSlider(value=1.8, min=1.0, max=3.0, step=0.1,
                            description="rep. penalty", continuous_update=False)
    ngram = w.IntSlider(value=3, min=1, max=8, description="no-repeat n",
                        continuous_update=False)
    button = w.Button(description="Generate")
    out = w.HTML()

    def run(_=None):
        settings = {"greedy": {}, f"repetition_penalty={penalty.value:.1f}":
                    {"repetition_penalty": penalty.value},
                    f"no_repeat_ngram_size={ngram.value}": {"no_repeat_ngram_size": ngram.value}}
        blocks = []
        for label, fields in settings.items():
            result = generate(model, tokenizer, text.value, max_new_tokens=max_new_tokens,
                              **fields)
            blocks.append(highlight_html(tokenizer,
                                         repetition_report(label, result.token_ids, n)))
        out.value = "<br>".join(blocks)

    button.on_click(run)
    run()
    box = w.VBox([text, w.HBox([penalty, ngram, button]), out])
    box.run, box.output = run, out
    return box
