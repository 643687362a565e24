"""The book as a reader meets it: built by `python -m book` from lessons 04 (widgets) and 05
(charts and the live latency chart), both editions: from the repository's executed copies, the
ones the published book shows, when all four are current, else from CI-size executions of them
(a lesson changed and not yet executed again); opened in Debian's
Chromium from the file system, with no network: every figure loads, no page shows an error, the
Chinese edition is drawn with the CJK font, the search finds a glossary term in both editions,
every link between pages resolves, the language switch joins each page to its twin.

When no Chinese lessons exist yet (notebooks/zh/), the Chinese edition is built from a small
fixture notebook written here. Screenshots go to test-artifacts/book/."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

from browser.chromium import CJK_FONT, chromium_or_skip, cjk_font_found
from browser.jupyter import CHROMIUM_FLAGS, free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from book import execute, figures  # noqa: E402

pytestmark = pytest.mark.slow

CHROMIUM = chromium_or_skip()

LESSONS = ["04_decoding", "05_metrics"]
ARTIFACTS = ROOT / "test-artifacts" / "book"
REAL_ZH = any((ROOT / "notebooks" / "zh").glob("[0-9][0-9]_*.ipynb"))
ZH_TERM = "预填充"  # the glossary's prefill


def _zh_fixture(folder: Path) -> Path:
    """A Chinese edition of one lesson: a title, prose with a glossary term, a chart."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(f"# 04 · 解码策略\n\n模型先做{ZH_TERM}，再逐个解码词元。"),
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\n"
                                  "plt.plot([1, 2, 3], [3, 1, 2])\nplt.show()"),
        nbformat.v4.new_markdown_cell("温度越高，分布越平。"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    (folder / "notebooks" / "zh").mkdir(parents=True)
    nbformat.write(nb, folder / "notebooks" / "zh" / "04_decoding.ipynb")
    (folder / "README.zh-CN.md").write_text(
        "# minillm\n\n## 课程\n\n| # | 课程 | 内容 |\n|---|---|---|\n"
        "| 04 | `notebooks/zh/04_decoding.ipynb` | 解码策略 |\n", encoding="utf-8")
    return folder


def _copy_current_executions(folder: Path) -> bool:
    """Copy the repository's full-size executed copies of LESSONS (both editions) into `folder`
    if every one is current; the book then builds from them without executing anything."""
    names = [Path(sub, lesson.name) for sub in ("", "zh") for name in LESSONS  # 05 is 05b too
             for lesson in sorted((ROOT / "notebooks" / sub).glob(f"{name[:2]}*_*.ipynb"))]
    pairs = [(ROOT / "notebooks" / n, ROOT / "executed" / n, folder / n) for n in names]
    if not all(execute.is_current(lesson, copy, "full") for lesson, copy, _ in pairs):
        return False
    for _, copy, target in pairs:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(copy, target)
    return True


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    """The built book's html folder (and how long building it took)."""
    work = tmp_path_factory.mktemp("book")
    zh_root = ROOT if REAL_ZH else _zh_fixture(work / "zh")
    sizes = "full" if REAL_ZH and _copy_current_executions(work / "out" / "executed") else "ci"
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "book", "--sizes", sizes, "--lessons", ",".join(
            name[:2] for name in LESSONS), "--out", str(work / "out"), "--zh-root", str(zh_root),
         "--executed", str(work / "out" / "executed")],
        cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, \
        f"python -m book failed:\n{result.stdout}\n{result.stderr[-5000:]}"
    print(f"\nbook built in {time.monotonic() - start:.0f} s:\n{result.stdout}")
    return work / "out" / "html"


@pytest.fixture(scope="module")
def browser():
    if not cjk_font_found():
        pytest.fail(f"{CJK_FONT} is missing: `make browser` installs Debian's fonts-noto-cjk")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield instance
        instance.close()


class Reader:
    """A page that records every request it makes and every script error."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport={"width": 1300, "height": 900})
        self.requests, self.errors = [], []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, url: str):
        self.page.goto(url, wait_until="load")
        return self.page

    def remote(self, allowed: tuple[str, ...] = ("file://", "data:", "blob:")) -> list[str]:
        return [u for u in self.requests if not u.startswith(allowed)]


PAGE_FACTS = """() => ({
  images: Array.from(document.images).map(i => ({src: i.currentSrc.slice(0, 80),
                                                  ok: i.complete && i.naturalWidth > 0})),
  errors: document.querySelectorAll('.output.traceback, .output.error').length,
  text: document.body.innerText,
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')),
})"""

FIGURES = """() => {
  const outputs = Array.from(document.querySelectorAll('.cell_output'));
  const imgs = outputs.flatMap(o => Array.from(o.querySelectorAll('img')));
  const svgs = outputs.flatMap(o => Array.from(o.querySelectorAll('svg')))
                      .filter(s => !s.parentElement.closest('svg'));
  const drawn = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  return {imgs: imgs.length, loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
          svgs: svgs.length, drawn: svgs.filter(drawn).length};
}"""


def _pages(html: Path) -> list[Path]:
    return sorted(p for p in html.rglob("*.html")
                  if "_static" not in p.parts and p.name not in ("genindex.html", "search.html"))


def _broken_link(html: Path, page: Path, href: str) -> str | None:
    parts = urlsplit(href)
    if href.startswith("#") and len(href) > 1:  # a place on the same page
        if f'id="{unquote(href[1:])}"' not in page.read_text(encoding="utf-8"):
            return f"{page.relative_to(html)}: {href} -> no such place on the page"
        return None
    if parts.scheme or href.startswith(("#", "mailto:", "javascript:")):
        return None
    target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return f"{page.relative_to(html)}: {href} -> no such file"
    if parts.fragment and target.suffix == ".html":
        if f'id="{parts.fragment}"' not in target.read_text(encoding="utf-8"):
            return f"{page.relative_to(html)}: {href} -> no #{parts.fragment} there"
    return None


def test_every_page_loads_offline_with_its_figures_and_no_error(book, browser):
    reader = Reader(browser)
    pages = _pages(book)
    assert len(pages) >= 15 and (book / "zh" / "index.html").is_file()
    problems = []
    for page in pages:
        reader.open(page.as_uri())
        facts = reader.page.evaluate(PAGE_FACTS)
        name = page.relative_to(book).as_posix()
        problems += [f"{name}: image not loaded {i['src']}" for i in facts["images"] if not i["ok"]]
        if facts["errors"] or "Traceback (most recent call last)" in facts["text"]:
            problems.append(f"{name}: an error output")
        problems += filter(None, (_broken_link(book, page, h) for h in facts["links"]))
    reader.page.close()
    assert problems == []
    assert reader.remote() == [], "the book fetched something from outside its folder"
    unfilled = [p for p in book.rglob("*.html") if "{{" in p.read_text(encoding="utf-8")]
    assert unfilled == [], "template files with unfilled {{ pathto() }} links ship in the book"
    assert reader.errors == [], reader.errors


@pytest.mark.parametrize("lesson", LESSONS)
def test_each_lesson_page_shows_every_figure_of_its_source(book, browser, lesson):
    source = nbformat.read(ROOT / "notebooks" / f"{lesson}.ipynb", as_version=4)
    plotting = figures.plotting_cells(source)
    assert plotting, f"{lesson} has no plotting cell: the count would prove nothing"
    reader = Reader(browser)
    page = reader.open((book / "notebooks" / f"{lesson}.html").as_uri())
    shown = page.evaluate(FIGURES)
    assert shown["loaded"] == shown["imgs"] and shown["drawn"] == shown["svgs"], shown
    assert shown["imgs"] + shown["svgs"] >= len(plotting), \
        f"{lesson}: {shown} on the page, {len(plotting)} plotting cells in the source"
    assert figures.missing_figures(book.parent / "executed" / f"{lesson}.ipynb",
                                   book / "notebooks" / f"{lesson}.html") == []
    measured = page.locator(".book-measured").inner_text()
    sizes = execute.record(book.parent / "executed" / f"{lesson}.ipynb")["sizes"]
    assert "torch" in measured and "threads" in measured
    assert ("full size" if sizes == "full" else "smaller sizes") in measured
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{lesson}.png"))
    first = page.locator(".cell_output svg, .cell_output img").first
    first.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"{lesson}-first-figure.png"))
    print(f"\n{lesson}: {shown['imgs']} images, {shown['svgs']} charts for {len(plotting)} "
          f"plotting cells; {ARTIFACTS / (lesson + '.png')}")
    page.close()


def test_widgets_show_their_last_view_and_say_how_to_move_them(book, browser):
    reader = Reader(browser)
    page = reader.open((book / "notebooks" / "04_decoding.html").as_uri())
    notes = page.locator(".book-widget-note")
    assert notes.count() >= 3 and "run the notebook to move it" in notes.first.inner_text()
    assert page.locator(".book-widget input[disabled], .book-widget select[disabled]").count() > 0
    page = reader.open((book / "notebooks" / "05_metrics.html").as_uri())
    latency = page.locator('.book-widget [data-chart="latency"] svg')
    assert latency.count() == 1, "the live latency chart is on the page"
    widget = page.locator(".book-widget", has=page.locator('[data-chart="latency"]'))
    stats = widget.inner_text()
    assert "TTFT" in stats and "TPOT" in stats and "generating" not in stats, \
        f"the live chart should show its finished run: {stats[-300:]}"
    page.close()


def test_the_front_page_is_the_chapter_table(book, browser):
    reader = Reader(browser)
    page = reader.open((book / "index.html").as_uri())
    table = page.locator("article table").first.inner_text()
    for n in range(11):
        assert f"{n:02d}" in table
    links = page.locator("article table a").evaluate_all(
        "as => as.map(a => a.getAttribute('href'))")
    assert "notebooks/04_decoding.html" in links and "exercises/04_decoding.html" in links
    nav = page.locator(".bd-sidebar-primary").inner_text()
    assert "04 · Decoding strategies" in nav and "Glossary" in nav
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "front-page.png"))
    page = reader.open((book / "exercises" / "04_decoding.html").as_uri())
    text = page.locator("article").inner_text()
    assert "NotImplementedError" in text, "the exercise page shows the stubs, not the solutions"
    page.close()


def test_the_language_switch_joins_each_page_to_its_twin(book, browser):
    reader = Reader(browser)
    page = reader.open((book / "notebooks" / "04_decoding.html").as_uri())
    page.locator("a.language-switch").click()
    assert page.url == (book / "zh" / "notebooks" / "04_decoding.html").as_uri()
    assert "解码" in page.locator("h1").first.inner_text()
    page.locator("a.language-switch").click()
    assert page.url == (book / "notebooks" / "04_decoding.html").as_uri()
    page = reader.open((book / "docs" / "glossary.html").as_uri())
    page.locator("a.language-switch").click()
    assert page.url == (book / "zh" / "docs" / "glossary.html").as_uri()
    page.close()


def test_chinese_is_drawn_with_the_cjk_font(book, browser):
    reader = Reader(browser)
    page = reader.open((book / "zh" / "notebooks" / "04_decoding.html").as_uri())
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": "article h1"})["nodeId"]
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    assert any("CJK" in f["familyName"] and f["glyphCount"] > 0 for f in fonts), fonts
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "zh-04_decoding.png"))
    page.close()


def test_search_finds_a_glossary_term_from_the_file_system(book, browser):
    reader = Reader(browser)
    page = reader.open((book / "search.html").as_uri() + "?q=prefill")
    page.wait_for_selector("#search-results ul.search li a[href*='docs/glossary']",
                           timeout=60_000)
    page.close()
    assert reader.remote() == []


def test_chinese_search_finds_a_glossary_term_over_http(book, browser):
    """The same book served by `python -m http.server`: the Chinese edition's search finds the
    glossary's 预填充 as one word."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                               "127.0.0.1", "--directory", str(book)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        reader = Reader(browser)
        for _ in range(50):
            try:
                reader.open(f"{base}/zh/index.html")
                break
            except Exception:  # the server is still starting
                time.sleep(0.2)
        page = reader.open(f"{base}/zh/search.html?q={ZH_TERM}")
        page.wait_for_selector("#search-results ul.search li a[href*='docs/glossary']",
                               timeout=60_000)
        found = page.locator("#search-results ul.search li a").evaluate_all(
            "as => as.map(a => a.getAttribute('href'))")
        if not REAL_ZH:  # the fixture's lesson uses the term
            assert any("notebooks/04_decoding" in h for h in found), found
        page.close()
        assert reader.remote(allowed=(base, "data:", "blob:")) == []
    finally:
        server.terminate()
        server.wait(timeout=10)


SIDEBAR = """() => ({
  shown: getComputedStyle(document.querySelector('#pst-primary-sidebar')).visibility === 'visible'
         && document.querySelector('#pst-primary-sidebar').getBoundingClientRect().right > 0,
  dialog: document.querySelector('#pst-primary-sidebar-modal').open,
  chapters: document.querySelector('#pst-primary-sidebar-modal').innerText,
  contents: document.querySelector('#pst-secondary-sidebar-modal').open,
})"""


def test_the_sidebar_buttons_hide_and_open_the_chapter_list(book, browser):
    """The button a reader sees beside the title hides and shows the chapter list on a wide
    window and opens it on a narrow one; on a phone the page-contents button opens the page's
    contents (the themes listen on a hidden header button: book.js passes the click on)."""
    reader = Reader(browser)
    page = reader.open((book / "notebooks" / "04_decoding.html").as_uri())
    assert page.evaluate(SIDEBAR)["shown"]
    page.locator("button.primary-toggle:visible").click()
    page.wait_for_function("() => getComputedStyle(document.querySelector("
                           "'#pst-primary-sidebar')).visibility === 'hidden'")
    page.locator("button.primary-toggle:visible").click()
    page.wait_for_function("() => getComputedStyle(document.querySelector("
                           "'#pst-primary-sidebar')).visibility === 'visible'")
    page.set_viewport_size({"width": 600, "height": 900})
    page.reload(wait_until="load")
    assert not page.evaluate(SIDEBAR)["shown"], "a phone's window starts with the list closed"
    page.locator("button.primary-toggle:visible").click()
    facts = page.evaluate(SIDEBAR)
    assert facts["dialog"] and "04 · Decoding strategies" in facts["chapters"], facts
    page.keyboard.press("Escape")
    page.locator("button.secondary-toggle:visible").click()
    assert page.evaluate(SIDEBAR)["contents"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "narrow-page-contents.png"))
    page.close()
    assert reader.errors == [], reader.errors


def test_a_display_formula_is_centred_and_shows_no_escapes(book, browser):
    reader = Reader(browser)
    page = reader.open((book / "notebooks" / "04_decoding.html").as_uri())
    boxes = page.evaluate("""() => [...document.querySelectorAll('div.math')].map(d => {
        const column = d.getBoundingClientRect(), formula = d.querySelector('math > *')
                                                             .getBoundingClientRect();
        return [column.left + column.width / 2, formula.left + formula.width / 2,
                column.width]; })""")
    assert boxes, "04 has a display formula"
    for column_middle, formula_middle, width in boxes:
        assert abs(column_middle - formula_middle) < 0.05 * width, boxes
    texts = page.locator("mtext").evaluate_all("ms => ms.map(m => m.textContent)")
    assert "length_penalty" in texts and not any("\\" in t for t in texts), texts
    page.close()


@pytest.mark.parametrize("lesson", LESSONS)
def test_printed_output_fits_a_narrow_column_without_sideways_scrolling(book, browser, lesson):
    reader = Reader(browser)
    reader.page.set_viewport_size({"width": 720, "height": 900})  # a tablet, or half a screen
    page = reader.open((book / "notebooks" / f"{lesson}.html").as_uri())
    widths = page.evaluate("""() => [...document.querySelectorAll('div.cell_output pre')]
        .map(p => [p.clientWidth, p.scrollWidth])""")
    assert widths and max(w[0] for w in widths) <= 700, "the column is narrow for this check"
    assert [w for w in widths if w[1] > w[0] + 1] == []
    page.close()


@pytest.mark.skipif(not REAL_ZH, reason="the fixture's Chinese edition has none of these pages")
@pytest.mark.parametrize("phrase, page_name", [
    ("投机解码", "docs/glossary"),           # the glossary's other name for 推测解码
    ("分页注意力", "docs/instructor"),       # 06's title, in the instructor's timetable
    ("首词元生成时间", "notebooks/05_metrics"),  # TTFT said without 个: cut into 词元 生成 时间
])
def test_chinese_search_finds_the_phrases_the_course_uses(book, browser, phrase, page_name):
    reader = Reader(browser)
    page = reader.open((book / "zh" / "search.html").as_uri() + f"?q={phrase}")
    page.wait_for_selector(f"#search-results ul.search li a[href*='{page_name}']",
                           timeout=60_000)
    page.close()
