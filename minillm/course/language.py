"""The language the course speaks to the learner: its checkers' messages, its widgets' labels and
the sentences it prints. English unless a notebook says otherwise.

    from minillm.course import set_language
    set_language("zh")        # the first code cell of every notebook in notebooks/zh/ and the like

The environment variable MINILLM_LANGUAGE sets the starting language for a whole session
(`MINILLM_LANGUAGE=zh jupyter lab`). Only the course wing reads it: the engine's own messages,
`minillm doctor` and the command line stay English.

A message is written once with both languages side by side and chosen when it is made:

    raise CheckFailed(say("{call} returned {got}", "{call} 返回了 {got}", call=what, got=got))

Numbers, token ids and the model's output are the same in both languages; only the words differ.
"""

from __future__ import annotations

import os
import warnings

LANGUAGES = {"en": "English", "zh": "中文"}
ENVIRONMENT_VARIABLE = "MINILLM_LANGUAGE"

# Fonts with the Chinese glyphs, in the order tried: Linux (fonts-noto-cjk, WenQuanYi), macOS,
# Windows.
CJK_FONTS = ["Noto Sans CJK SC", "Noto Sans CJK JP", "Source Han Sans SC", "WenQuanYi Zen Hei",
             "WenQuanYi Micro Hei", "PingFang SC", "Hiragino Sans GB", "Heiti SC",
             "Microsoft YaHei", "SimHei"]


def _checked(language: str) -> str:
    if language not in LANGUAGES:
        raise ValueError(f"unknown course language {language!r}: use one of "
                         f"{', '.join(repr(k) for k in LANGUAGES)} (English or Chinese)")
    return language


def _from_environment() -> str:
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if not value:
        return "en"
    try:
        return _checked(value)
    except ValueError as error:
        raise ValueError(f"{ENVIRONMENT_VARIABLE}={value!r}: {error}") from None


_current = _from_environment()


def current_language() -> str:
    """The course's language now: "en" or "zh"."""
    return _current


def set_language(language: str) -> None:
    """Speak `language` ("en" or "zh") from now on: checker messages, widget labels, printed
    sentences. Chinese also gives matplotlib a font with Chinese glyphs, so chart titles and
    axis labels show characters instead of boxes."""
    global _current
    _current = _checked(language)
    if _current == "zh":
        use_cjk_font()


def say(english: str, chinese: str, /, **fields) -> str:
    """The text in the course's language. With `fields`, `str.format` fills its placeholders,
    so both languages share one set of values: say("{n} tokens", "{n} 个词元", n=12)."""
    text = chinese if _current == "zh" else english
    return text.format(**fields) if fields else text


_font_warned = False


def use_cjk_font() -> str | None:
    """Put the first installed font with Chinese glyphs after matplotlib's font family, so each
    character the family lacks falls back to it while the Latin text keeps its font. Returns the
    font's name, or None (after saying so once) when no such font is installed."""
    global _font_warned
    try:
        import matplotlib
        from matplotlib import font_manager
    except ImportError:  # the course's extras are not installed: nothing draws charts
        return None
    installed = {font.name for font in font_manager.fontManager.ttflist}
    found = next((name for name in CJK_FONTS if name in installed), None)
    if found is None:
        if not _font_warned:
            _font_warned = True
            warnings.warn("no font with Chinese glyphs found for matplotlib, so charts show boxes "
                          "for Chinese text: install one (Debian and Ubuntu: fonts-noto-cjk) and "
                          f"restart the kernel; tried {', '.join(CJK_FONTS)}", stacklevel=3)
        return None
    families = [f for f in matplotlib.rcParams["font.family"] if f != found]
    matplotlib.rcParams["font.family"] = families + [found]
    return found
