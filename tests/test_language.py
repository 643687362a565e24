"""One language setting for the course's own messages (minillm.course.language): English by
default, Chinese after set_language("zh") or with MINILLM_LANGUAGE=zh; checkers, widgets and
charts follow it; the command line never speaks it."""

import os
import subprocess
import sys
import warnings

import matplotlib
import pytest

import minillm.course.language as language_module
from browser.chromium import cjk_font_found, required
from minillm.course import current_language, say, set_language



def test_english_by_default_and_one_call_switches():
    assert current_language() == "en"
    assert say("{n} tokens", "{n} 个词元", n=3) == "3 tokens"
    set_language("zh")
    try:
        assert say("{n} tokens", "{n} 个词元", n=3) == "3 个词元"
        assert say("no {fields}", "没有{fields}") == "没有{fields}"  # no fields: no formatting
    finally:
        set_language("en")
    assert say("a", "甲") == "a"


@pytest.mark.parametrize("bad", ["fr", "zh-CN", "", None, "ZH"])
def test_an_unknown_language_is_refused_naming_the_choices(bad):
    with pytest.raises(ValueError, match="use one of 'en', 'zh'"):
        set_language(bad)
    assert current_language() == "en"


def _language_in_a_fresh_process(value):
    env = dict(os.environ, MINILLM_LANGUAGE=value)
    return subprocess.run([sys.executable, "-c", "from minillm.course import current_language; "
                           "print(current_language())"], env=env, capture_output=True, text=True)


def test_the_environment_variable_sets_the_starting_language():
    assert _language_in_a_fresh_process("zh").stdout.strip() == "zh"
    bad = _language_in_a_fresh_process("klingon")
    assert bad.returncode != 0 and "MINILLM_LANGUAGE='klingon'" in bad.stderr


def test_the_engine_and_the_command_line_do_not_read_it():
    code = ("import sys, minillm, minillm.tools.cli; "
            "print('minillm.course.language' in sys.modules)")
    env = dict(os.environ, MINILLM_LANGUAGE="zh")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
    help_text = subprocess.run([sys.executable, "-m", "minillm", "--help"], env=env,
                               capture_output=True, text=True).stdout
    assert "usage" in help_text and not any("\u4e00" <= c <= "\u9fff" for c in help_text)


def test_chinese_gives_matplotlib_a_font_with_chinese_glyphs(chinese):
    from matplotlib.figure import Figure

    font = language_module.use_cjk_font()
    if font is None:
        missing = "no CJK font installed: `make browser` installs fonts-noto-cjk"
        if required():
            pytest.fail(f"MINILLM_BROWSER_TESTS=required, but {missing}", pytrace=False)
        pytest.skip(missing)
    assert matplotlib.rcParams["font.family"][-1] == font
    fig = Figure()
    fig.suptitle("一次回答：预填充 prefill")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph ... missing from font" would be raised
        fig.canvas.draw()


def test_a_font_installed_after_matplotlib_listed_its_fonts_is_found(monkeypatch):
    """matplotlib keeps its font list in a cache: a CJK font installed later (make browser) is
    looked for on the system before the course says there is none."""
    from matplotlib import font_manager

    if not cjk_font_found():
        pytest.skip("no CJK font installed: `make browser` installs fonts-noto-cjk")
    cjk_files = {f.fname for f in font_manager.fontManager.ttflist
                 if f.name in language_module.CJK_FONTS}
    cached = [f for f in font_manager.fontManager.ttflist if f.fname not in cjk_files]
    monkeypatch.setattr(font_manager.fontManager, "ttflist", cached)  # as before the install
    monkeypatch.setattr(language_module, "_font_warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert language_module.use_cjk_font() in language_module.CJK_FONTS


def test_no_chinese_font_is_said_once(monkeypatch):
    monkeypatch.setattr(language_module, "CJK_FONTS", ["No Such Font"])
    monkeypatch.setattr(language_module, "_font_warned", False)
    with pytest.warns(UserWarning, match="no font with Chinese glyphs"):
        assert language_module.use_cjk_font() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert language_module.use_cjk_font() is None


def test_set_language_zh_says_a_missing_font_in_chinese(monkeypatch):
    """The warning comes from set_language("zh") itself, so it is the Chinese reader who reads
    it; with a CJK font installed it does not come at all (the tests above)."""
    from matplotlib import font_manager

    monkeypatch.setattr(language_module, "CJK_FONTS", ["No Such Font"])
    monkeypatch.setattr(language_module, "_font_warned", False)
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *args, **kwargs: [])
    try:
        with pytest.warns(UserWarning) as caught:
            set_language("zh")
    finally:
        set_language("en")
    message = str(caught[0].message)
    assert message.startswith("matplotlib 找不到带中文字形的字体") and "fonts-noto-cjk" in message
    assert "No Such Font" in message and "install" not in message


def test_the_kernel_line_follows_the_language(monkeypatch, capsys):
    """minillm.load's one line on which kernels decode (minillm.kernels.dispatch), in the
    notebook's language: a Chinese notebook loads its model after set_language("zh")."""
    from minillm.kernels import build, dispatch

    monkeypatch.setattr(dispatch, "_ANNOUNCED", [])
    monkeypatch.setattr(build, "status", lambda: build.Status(True, "AVX2", "AVX2", ""))
    monkeypatch.setattr(build, "library", lambda: object())
    monkeypatch.delenv(dispatch.SWITCH, raising=False)
    assert dispatch.describe("cpu") == "minillm's C kernels (AVX2) decode on the CPU"
    assert dispatch.describe("cuda").startswith(
        "minillm's C kernels are not used (they are CPU code, and this model is on cuda)")
    set_language("zh")
    try:
        dispatch.announce("cpu")
        assert capsys.readouterr().err == "minillm：minillm 的 C 算子（AVX2）在 CPU 上负责解码\n"
        assert dispatch.describe("cuda").startswith(
            "没有用上 minillm 的 C 算子（它们是 CPU 代码，而这个模型在 cuda 上）：解码改用 PyTorch 的算子")
        monkeypatch.setenv(dispatch.SWITCH, "1")
        assert "已被 MINILLM_NO_KERNEL 关闭" in dispatch.describe("cpu")
        assert dispatch.why_not("cpu") == "switched off by MINILLM_NO_KERNEL"  # errors: English
    finally:
        set_language("en")


def test_a_widget_speaks_the_language(chinese):
    """The temperature explorer's slider, axes and title, on a tiny random model."""
    from minillm.model.toy import tiny_model
    from minillm.course.widgets import temperature_explorer

    model, tokenizer = tiny_model()
    box = temperature_explorer(model, tokenizer, "abc", top_n=5)
    texts = [t.get_text() for t in box.figure.findobj(matplotlib.text.Text)]
    assert box.slider.description == "温度 T"
    assert "下一个词元（按 T = 1 时的概率从高到低）" in texts and "概率（对数坐标）" in texts
    title = box.figure._suptitle.get_text()
    assert title.startswith("'abc' 之后的下一个词元，T = 1.0：熵为") and "比特" in title
    assert any(t.endswith("个词元覆盖 90%") for t in texts)
    set_language("en")
    box = temperature_explorer(model, tokenizer, "abc", top_n=5)
    assert box.slider.description == "temperature T"
    assert box.figure._suptitle.get_text().startswith("next token after 'abc' at T = 1.0")
