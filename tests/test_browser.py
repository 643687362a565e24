"""The course as a learner meets it: JupyterLab in a real browser (the machine's Chromium or
Chrome, driven by playwright; tests/browser/chromium.py finds it, CHROMIUM=path chooses it). A
widget that computes correctly can still show nothing; only a browser tells. Without a browser
these tests are skipped with one line saying how to enable them (CI requires them). A lesson
whose widgets are tested here runs whole here, at the same sizes, and not again under nbval
(conftest.py).

Screenshots go to test-artifacts/browser/ (printed in the output)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from browser.chromium import CJK_FONT, chromium_or_skip, cjk_font_found, required
from browser.fonts import cjk_glyphs, drawn_fonts
from browser.jupyter import (CHROMIUM_FLAGS, KERNEL_ANSWERED, KERNEL_IDLE, ROOT, api,
                             current_notebook, element_screenshot, error_outputs, jupyterlab,
                             open_notebook, plain_lab, run_all, run_new_cell, screenshot, settle,
                             shutdown_kernels)
from browser.lessons import LESSON_CHECKS
from browser.widgets import output_area, slider

pytestmark = pytest.mark.slow

CHROMIUM = chromium_or_skip()

# Lessons whose controls the test moves; any lesson that builds ipywidgets must be listed here.
WIDGET_NOTEBOOKS = sorted(
    p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb")
    if "minillm.course.widgets" in p.read_text(encoding="utf-8")
    or "ipywidgets" in p.read_text(encoding="utf-8"))

# What a control can show: widget output areas, HTML widgets (charts, text), text boxes.
OUTPUT_DIGEST = """() => Array.from(document.querySelectorAll(
    '.widget-output, .jupyter-widgets-output-area, .widget-html-content, .widget-textarea textarea'))
  .map(e => (e.value !== undefined ? e.value : '') + e.innerHTML.length + ':' +
            e.innerHTML.slice(-4000)).join('|')"""

CONTROLS = {
    "slider": ".jp-Notebook .widget-slider .noUi-handle, .jp-Notebook .widget-hslider .noUi-handle",
    "dropdown": ".jp-Notebook .widget-dropdown select",
    "checkbox": ".jp-Notebook .widget-checkbox input[type=checkbox]",
    "text": ".jp-Notebook .widget-text input, .jp-Notebook .widget-textarea textarea:not([disabled])",
    "button": ".jp-Notebook button.jupyter-button",
}
# A control with no observer of its own takes effect when its widget's button is pressed.
PRESS_OWN_BUTTON = """e => {
  const area = e.closest('.jp-OutputArea-output');
  const button = area && area.querySelector('button.jupyter-button');
  if (button) button.click();
  return !!button;
}"""
# The longest a control may keep the kernel busy (a generation on a loaded 2-core machine).
BUSY_LIMIT_S = 180
IGNORED_CONSOLE = ("favicon", "Failed to load resource: the server responded with a status of 404")


@pytest.fixture(scope="module")
def browser():
    if required() and not cjk_font_found():
        pytest.fail(f"no CJK font ({CJK_FONT}): `make browser` installs Debian's fonts-noto-cjk, "
                    "without which the lessons' Chinese terms show as boxes")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield instance
        instance.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    home = tmp_path_factory.mktemp("learner-home")
    with jupyterlab(home) as server:
        yield server


def _watched_page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" and not any(s in m.text for s in IGNORED_CONSOLE) else None)
    return page, problems


def _changes_output(page, act, timeout_s: float) -> bool:
    before = page.evaluate(OUTPUT_DIGEST)
    act()
    settle(page, timeout_s)
    return page.evaluate(OUTPUT_DIGEST) != before


def _state(kind, element):
    if kind == "slider":
        return element.get_attribute("aria-valuenow")
    if kind == "checkbox":
        return element.is_checked()
    if kind in ("dropdown", "text"):
        return element.input_value()
    return None


def _act(kind, element):
    if kind == "slider":  # one step: each step runs the widget's observer once more
        element.focus()
        element.press("ArrowRight")
    elif kind == "dropdown":
        options = element.eval_on_selector_all("option", "os => os.map(o => o.value)")
        current = element.input_value()
        element.select_option(next(v for v in options if v != current))
    elif kind == "text":
        element.fill("7" if element.get_attribute("type") == "number" else "Once upon a time")
        _commit_text(element)
    else:
        element.click(timeout=10_000)


def _commit_text(element):
    element.press("Enter" if element.evaluate("e => e.tagName") == "INPUT" else "Tab")


def _restore(kind, element, state):
    """Put a control back as the lesson left it, so each control is tried from the same start
    (the playground's beam-only sliders mean nothing while num_beams=4 meets do_sample)."""
    if kind == "slider":
        for _ in range(3):
            if element.get_attribute("aria-valuenow") == state:
                break
            element.focus()
            element.press("ArrowLeft")
    elif kind == "checkbox" and element.is_checked() != state:
        element.click(timeout=10_000)
    elif kind == "dropdown":
        element.select_option(state)
    elif kind == "text":
        element.fill(state)
        _commit_text(element)


def _exercise_controls(page) -> tuple[list[str], list[str]]:
    """Change every control, one at a time from the lesson's starting state; each must change
    what the page shows, by itself (an observer) or when its widget's button is pressed.
    Returns (controls used, controls that changed nothing)."""
    used, dead = [], []
    for kind, selector in CONTROLS.items():
        for i, element in enumerate(page.query_selector_all(selector)):
            name = f"{kind} {i + 1}"
            try:  # a control its widget hides for now (display: none) is not one a learner sees
                element.scroll_into_view_if_needed(timeout=3000)
            except PlaywrightTimeout:
                continue
            if not element.is_visible():
                continue
            used.append(name)
            state = _state(kind, element)
            if not _changes_output(page, lambda: _act(kind, element), timeout_s=BUSY_LIMIT_S):
                if kind == "button" or not _changes_output(
                        page, lambda: element.evaluate(PRESS_OWN_BUTTON), timeout_s=BUSY_LIMIT_S):
                    dead.append(name)
            _restore(kind, element, state)
            settle(page, BUSY_LIMIT_S)
    return used, dead


def test_every_widget_lesson_is_covered():
    assert WIDGET_NOTEBOOKS, "no lesson with widgets found: the browser test would cover nothing"


@pytest.mark.parametrize("notebook", WIDGET_NOTEBOOKS)
def test_widgets_respond_in_jupyterlab(browser, lab, notebook, capsys):
    base, token = lab
    page, problems = _watched_page(browser)
    original = (ROOT / notebook).read_bytes()
    try:
        start = time.monotonic()
        open_notebook(page, base, token, notebook)
        run_all(page)
        ran = time.monotonic()
        assert error_outputs(page) == [], f"{notebook} has error outputs"
        heading = element_screenshot(current_notebook(page).locator(".jp-MarkdownOutput").first,
                                     f"{Path(notebook).stem}-heading")
        # What the widgets show on the first run and at the settings a learner tries.
        check = LESSON_CHECKS.get(notebook)
        shown = check(page) if check else []
        checked = time.monotonic()
        used, dead = _exercise_controls(page)
        timing = (f"run all {ran - start:.0f} s, checks {checked - ran:.0f} s, controls "
                  f"{time.monotonic() - checked:.0f} s")
        assert used, f"{notebook} shows no controls in the browser"
        shot = screenshot(page, Path(notebook).stem)
        with capsys.disabled():
            print(f"\n{notebook}: changed {len(used)} controls ({', '.join(used)}); {timing}; "
                  f"screenshots {heading}, {shot}")
            for line in shown:
                print(f"  {line}")
        assert not dead, f"{notebook}: these controls changed nothing visible: {dead}"
        assert error_outputs(page) == [], f"{notebook} has error outputs after using its controls"
        assert problems == [], f"{notebook}: JavaScript errors: {problems}"
    finally:
        page.close()
        shutdown_kernels(base, token)
    assert (ROOT / notebook).read_bytes() == original, f"the browser run saved into {notebook}"


def _lab_serving(tmp_path, cells: list[str]):
    """A JupyterLab of its own that serves one notebook, served.ipynb, of these code cells."""
    notebook = {"nbformat": 4, "nbformat_minor": 5, "cells": [
        {"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": source, "outputs": [],
         "execution_count": None} for i, source in enumerate(cells)],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}}}
    served = tmp_path / "served"
    served.mkdir()
    (served / "served.ipynb").write_text(json.dumps(notebook))
    return jupyterlab(tmp_path, lambda args: plain_lab([*args, f"--ServerApp.root_dir={served}"]))


def test_settle_waits_for_a_request_the_kernel_has_not_yet_received(browser, tmp_path):
    """A request the page has sent but the kernel has not yet received (a widget's change on a
    slow connection) leaves the kernel idle: settle must wait for its answer, not for idle. The
    page's socket holds this request back 1.5 s; idle alone would count as settled at once."""
    with _lab_serving(tmp_path, ["x = 1"]) as (base, token):
        page, problems = _watched_page(browser)
        try:
            open_notebook(page, base, token, "served.ipynb")
            settle(page, 60)  # what JupyterLab sends the kernel on opening has its answer
            send_late_then_look = """() => {
              const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
              const socket = k._ws, send = socket.send.bind(socket);
              socket.send = data => { socket.send = send; setTimeout(() => send(data), 1500); };
              k.requestExecute({code: 'import time; time.sleep(0.5)'});
              return (%s)();
            }""" % KERNEL_ANSWERED
            start = time.monotonic()
            assert page.evaluate(send_late_then_look).endswith("1 unanswered (execute_request)")
            settle(page, 60)
            assert time.monotonic() - start >= 2.0
            assert problems == []
        finally:
            page.close()


@pytest.mark.parametrize("cell, said", [
    ("raise ValueError('the third cell')", "ValueError: the third cell"),
    ("import os; os._exit(1)", "the kernel was"),
])
def test_a_run_all_that_stops_early_fails_at_once_saying_why(browser, tmp_path, cell, said):
    """A cell that raises stops run-all and a dead kernel never runs the rest: the wait for
    every cell must end there, not at its 20-minute limit."""
    with _lab_serving(tmp_path, ["x = 1", "y = 2", cell, "z = 3"]) as (base, token):
        page, _ = _watched_page(browser)
        try:
            open_notebook(page, base, token, "served.ipynb")
            start = time.monotonic()
            with pytest.raises(AssertionError, match=said):
                run_all(page)
            assert time.monotonic() - start < 60
        finally:
            page.close()


def test_make_course_serves_the_welcome_notebook_and_its_first_cells_run(browser, tmp_path, capsys):
    """`make course` as a new user runs it, minus the browser window it would open."""
    def make_course(args):
        return ["make", "--no-print-directory", "course", "JUPYTER_ARGS=" + " ".join(args)]

    with jupyterlab(tmp_path, make_course) as (base, token):
        listing = api(base, token, "/api/contents/notebooks/00_welcome.ipynb")
        assert listing["type"] == "notebook"
        page, problems = _watched_page(browser)
        try:
            open_notebook(page, base, token, "notebooks/00_welcome.ipynb")
            for _ in range(6):  # the first markdown and code cells, one by one
                page.evaluate("() => window.jupyterapp.commands.execute("
                              "'notebook:run-cell-and-select-next')")
                page.wait_for_timeout(300)
            page.wait_for_function(
                "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
                " === 'idle'", timeout=120_000)
            outputs = page.evaluate("""() => window.jupyterapp.shell.currentWidget.content.widgets
                .filter(c => c.model.type === 'code' && c.model.executionCount !== null)
                .map(c => JSON.stringify(c.model.outputs.toJSON()))""")
            assert len(outputs) >= 2, f"only {len(outputs)} code cells ran"
            assert "torch" in outputs[0], "the first cell should report the versions"
            assert error_outputs(page) == []
            assert problems == [], f"JavaScript errors: {problems}"
            shot = screenshot(page, "make-course-00_welcome")
            with capsys.disabled():
                print(f"\nmake course: welcome notebook served, {len(outputs)} cells ran; "
                      f"screenshot {shot}")
        finally:
            page.close()


# A widget a learner adds to the Chinese welcome notebook (chapter 00 itself has none).
ZH_WIDGET_CELL = """from minillm.course.widgets import temperature_explorer

fast, fast_tokenizer = minillm.load("smollm2-135m")
temperature_explorer(fast, fast_tokenizer, "The capital of France is")"""
CJK_CHARACTER = "[\u4e00-\u9fff]"


def _cjk_count(text: str) -> int:
    import re

    return len(re.findall(CJK_CHARACTER, text))


def test_make_course_lang_zh_opens_the_chinese_edition_drawn_with_a_cjk_font(browser, tmp_path,
                                                                             capsys):
    """`make course LANG=zh`: its start page is notebooks/zh/00_welcome.ipynb, which runs;
    its Chinese is drawn with the CJK font, and a widget's labels are Chinese, drawn so too."""
    notebook = "notebooks/zh/00_welcome.ipynb"
    original = (ROOT / notebook).read_bytes()

    def make_course(args):
        return ["make", "--no-print-directory", "course", "LANG=zh",
                "JUPYTER_ARGS=" + " ".join(args)]

    with jupyterlab(tmp_path, make_course) as (base, token):
        page, problems = _watched_page(browser)
        try:
            page.goto(f"{base}/?token={token}", timeout=120_000)  # where `make course` goes
            page.wait_for_function("() => !!window.jupyterapp", timeout=120_000)
            page.wait_for_function(KERNEL_IDLE, timeout=120_000)
            shown = page.evaluate("() => window.jupyterapp.shell.currentWidget.context.path")
            assert shown == notebook
            run_all(page)
            assert error_outputs(page) == []
            heading = current_notebook(page).locator(".jp-MarkdownOutput h1").first
            title = heading.inner_text()
            fonts = drawn_fonts(page, heading)
            assert "欢迎" in title and cjk_glyphs(fonts) >= _cjk_count(title), (title, fonts)
            printed = current_notebook(page).locator(".jp-OutputArea-output pre",
                                                     has_text="个词元").first
            assert cjk_glyphs(drawn_fonts(page, printed)) > 0, printed.inner_text()
            heading_shot = element_screenshot(heading, "zh-00_welcome-heading")

            run_new_cell(page, ZH_WIDGET_CELL)
            assert error_outputs(page) == []
            area = output_area(page, '[data-chart="temperature"]')
            label = area.locator("label.widget-label").first
            assert label.inner_text() == "温度 T"
            assert slider(area, "温度 T").count() == 1
            label_fonts = drawn_fonts(page, label)
            assert cjk_glyphs(label_fonts) >= 2, label_fonts
            chart_title = area.locator("svg text", has_text="下一个词元").first
            chart_fonts = drawn_fonts(page, chart_title)
            assert cjk_glyphs(chart_fonts) >= 5, (chart_title.text_content(), chart_fonts)
            widget_shot = element_screenshot(area, "zh-00_welcome-temperature-widget")
            assert problems == [], f"JavaScript errors: {problems}"
            with capsys.disabled():
                print(f"\nmake course LANG=zh: {shown} ran; heading {title!r} drawn with "
                      f"{fonts}; widget label drawn with {label_fonts}, chart title with "
                      f"{chart_fonts}; screenshots {heading_shot}, {widget_shot}")
        finally:
            page.close()
    assert (ROOT / notebook).read_bytes() == original, f"the browser run saved into {notebook}"
