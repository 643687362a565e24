"""The language the course speaks to the learner: its checkers' messages, its widgets' labels and
the sentences it prints. English unless a notebook says otherwise.

    from minillm.course import set_language
    set_language("zh")        # the first code cell of every notebook in notebooks/zh/ and the like

The environment variable MINILLM_LANGUAGE sets the starting language for a whole session
(`MINILLM_LANGUAGE=zh jupyter lab`). The setting itself lives in the engine
(`minillm.utils.wording`), so the sentences the engine prints for a lesson follow it too; its
errors, `minillm doctor` and the command line stay English.

A message is written once with both languages side by side and chosen when it is made:

    raise CheckFailed(say("{call} returned {got}", "{call} 返回了 {got}", call=what, got=got))

Numbers, token ids and the model's output are the same in both languages; only the words differ.
"""

from __future__ import annotations

import warnings

from ..utils.wording import ENVIRONMENT_VARIABLE, LANGUAGES, use_language
from ..utils.wording import language as current_language
from ..utils.wording import text as say

__all__ = ["LANGUAGES", "ENVIRONMENT_VARIABLE", "current_language", "set_language", "say",
           "use_cjk_font"]

# Fonts with the Chinese glyphs, in the order tried: Linux (fonts-noto-cjk, WenQuanYi), macOS,
# Windows.
CJK_FONTS = ["Noto Sans CJK SC", "Noto Sans CJK JP", "Source Han Sans SC", "WenQuanYi Zen Hei",
             "WenQuanYi Micro Hei", "PingFang SC", "Hiragino Sans GB", "Heiti SC",
             "Microsoft YaHei", "SimHei"]


def set_language(language: str) -> None:
    """Speak `language` ("en" or "zh") from now on: checker messages, widget labels, printed
    sentences, the engine's own printed sentences too (minillm.utils.wording). Chinese also
    gives matplotlib a font with Chinese glyphs, so chart titles and axis labels show characters
    instead of boxes."""
    use_language(language)
    if language == "zh":
        use_cjk_font()


_font_warned = False


def _cjk_font_known(font_manager) -> str | None:
    installed = {font.name for font in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in installed), None)


def _fonts_added_since_the_cache(font_manager) -> int:
    """Add to matplotlib's font list the system's fonts it does not know: matplotlib lists the
    fonts once and keeps the list in its cache, so a font installed after that (fonts-noto-cjk,
    after a first chart) stays unknown, however often the kernel restarts. Returns how many."""
    known = {font.fname for font in font_manager.fontManager.ttflist}
    added = 0
    for path in font_manager.findSystemFonts():
        if path in known:
            continue
        try:
            font_manager.fontManager.addfont(path)
            added += 1
        except (OSError, RuntimeError, ValueError):  # a file FreeType cannot read
            continue
    return added


def use_cjk_font() -> str | None:
    """Put the first installed font with Chinese glyphs after matplotlib's font family, so each
    character the family lacks falls back to it while the Latin text keeps its font. Returns the
    font's name, or None (after saying so once, in the reader's language: set_language("zh")
    says it in Chinese) when no such font is installed."""
    global _font_warned
    try:
        import matplotlib
        from matplotlib import font_manager
    except ImportError:  # the course's extras are not installed: nothing draws charts
        return None
    found = _cjk_font_known(font_manager)
    if found is None and _fonts_added_since_the_cache(font_manager):
        found = _cjk_font_known(font_manager)
    if found is None:
        if not _font_warned:
            _font_warned = True
            warnings.warn(say("no font with Chinese glyphs found for matplotlib, so charts show "
                              "boxes for Chinese text: install one (Debian and Ubuntu: "
                              "fonts-noto-cjk) and restart the kernel; tried {fonts}",
                              "matplotlib 找不到带中文字形的字体，图表里的中文会显示成方框：请安装一种"
                              "（Debian 和 Ubuntu 上是 fonts-noto-cjk），再重启内核；试过的字体："
                              "{fonts}", fonts=", ".join(CJK_FONTS)), stacklevel=3)
        return None
    families = [f for f in matplotlib.rcParams["font.family"] if f != found]
    matplotlib.rcParams["font.family"] = families + [found]
    return found
