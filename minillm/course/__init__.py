"""The course wing: what the lessons need that is not part of the engine.

    lessons/            the lesson and exercise sources (percent format): scripts/notebook.py
                        builds notebooks/, exercises/ and solutions/ from them; lessons/zh/
                        holds the Chinese edition's (docs/translating.md)
    checks/             one checker module per chapter: the exercises' check cells call them
    widgets/            the lessons' interactive controls and live charts (ipywidgets)
    show.py             show_source: a package object's code, shown inside a lesson; shown_path
    language.py         set_language("zh"): checkers, widgets and printed sentences in Chinese
    progress.py         `python -m minillm progress`: which exercises pass so far
    toy.py              a tiny random Llama and toy tokenizers, for checkers, tests and demos
    table_model.py      a language model written as a table, small enough to decode by hand
    text_quality.py     repetition and diversity measures chapter 04 compares strategies with
    tokenizer_samples.py
                        strings that break tokenizers, for chapter 01's parity checks

The engine (everything in minillm/ outside course/ and tools/) never imports this wing.
"""

from .language import current_language, say, set_language
from .show import show_source

__all__ = ["show_source", "set_language", "current_language", "say"]
