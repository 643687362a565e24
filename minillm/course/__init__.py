"""The course wing: what the lessons need that is not part of the engine.

    checks/             one checker module per chapter: the exercises' check cells call them
    widgets/            the lessons' interactive controls and live charts (ipywidgets)
    show.py             show_source: a package object's code, shown inside a lesson; shown_path
    language.py         set_language("zh"): checkers, widgets and printed sentences in Chinese
    table_model.py      a language model written as a table, small enough to decode by hand
    text_quality.py     repetition and diversity measures chapter 04 compares strategies with

The lessons' own text is not in the package: their sources are lessons/ at the top of the
repository (scripts/notebook.py builds the notebooks from them). The engine (everything in
minillm/ outside course/ and tools/) never imports this wing, and the tools wing never imports
it either.
"""

from .language import current_language, say, set_language
from .show import show_source

__all__ = ["show_source", "set_language", "current_language", "say"]
