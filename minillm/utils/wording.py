"""The language of the sentences the engine writes for a reader: a timing verdict, a metrics
line, a report's printout. English unless a notebook asks for Chinese:

    text("{n} tokens", "{n} 个词元", n=3)    # "3 tokens"; "3 个词元" after use_language("zh")

The course's `set_language("zh")` (the first cell of every Chinese notebook) calls `use_language`;
the environment variable MINILLM_LANGUAGE sets the starting language for a whole session. Errors,
warnings, logs, `minillm doctor` and the command line stay English and never call `text`.

Call `text` when the sentence is made, never at import: a module-level constant would keep the
language of the moment it was imported.
"""

from __future__ import annotations

import os

LANGUAGES = {"en": "English", "zh": "中文"}
ENVIRONMENT_VARIABLE = "MINILLM_LANGUAGE"


def check_language(language) -> str:
    """`language` when it is one of LANGUAGES' keys; a ValueError naming them otherwise."""
    if language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}: use one of "
                         f"{', '.join(repr(k) for k in LANGUAGES)} (English or Chinese)")
    return language


def _from_environment() -> str:
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if not value:
        return "en"
    try:
        return check_language(value)
    except ValueError as error:
        raise ValueError(f"{ENVIRONMENT_VARIABLE}={value!r}: {error}") from None


_current = _from_environment()


def language() -> str:
    """The language sentences are written in now: "en" or "zh"."""
    return _current


def use_language(language: str) -> None:
    """Write sentences in `language` ("en" or "zh") from now on."""
    global _current
    _current = check_language(language)


def text(english: str, chinese: str, /, **fields) -> str:
    """The sentence in the current language. With `fields`, `str.format` fills its placeholders,
    so both languages share one set of values; without, both are plain strings."""
    chosen = chinese if _current == "zh" else english
    return chosen.format(**fields) if fields else chosen
