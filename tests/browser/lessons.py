"""What each lesson's widgets must show in the browser, checked right after Run All in a fresh
kernel, then at the settings a learner tries; each setting photographed (test-artifacts/browser/).
Each check returns lines for the test's report."""

from __future__ import annotations

import re

from .jupyter import current_notebook, element_screenshot, settle
from .widgets import BUSY_LIMIT_S, box, boxes, chart, count, output_area, set_slider, svg_text


def _first_int(text: str) -> int:
    return int(re.search(r"[\d,]+", text).group().replace(",", ""))


# --- 04 · decoding --------------------------------------------------------------------------------

def _temperature(page) -> list[str]:
    area = output_area(page, '[data-chart="temperature"]')
    lines = []
    for t, shown in [(0.2, "0.2"), (1, "1.0"), (2, "2.0")]:
        set_slider(page, area, "temperature T", t)
        svg = chart(page, "temperature")
        assert svg.locator("svg").count() == 1
        title = svg.evaluate("e => e.textContent")
        assert f"at T = {shown}: entropy" in title, title
        bars = boxes(svg, "temperature-bar-") + boxes(svg, "temperature-rest")
        assert len(bars) == 13  # the top 12 and the rest of the vocabulary
        # readable at every setting: every bar shows above the axis, also at T = 2 (a bar on a
        # log axis starts far below it: what shows is what the plot area does not clip)
        plot = box(svg, "temperature-axes")
        heights = [min(b["bottom"], plot["bottom"]) - max(b["top"], plot["top"]) for b in bars]
        if t >= 1:
            assert all(h >= 20 for h in heights), [round(h) for h in heights]
        cover = re.search(r"([\d,]+) tokens? covers? 90%", title)
        assert cover, title
        n = _first_int(cover.group(1))
        assert ("1 token covers" in title) == (n == 1)
        shot = element_screenshot(area, f"04_decoding-temperature-T{t}")
        lines.append(f"temperature T = {shown}: {cover.group(0)}, bars {min(heights):.0f}-"
                     f"{max(heights):.0f} px tall; {shot.name}")
    set_slider(page, area, "temperature T", 1)
    return lines


def _check_cut(svg) -> tuple[int, int, str]:
    """The title's kept count against the bars marked kept and the cut's position."""
    title = svg_text(svg, "filters-title")
    n_kept = _first_int(title)
    kept = boxes(svg, "filters-bar-kept-")
    shown = count(svg, "filters-bar-")
    if n_kept <= shown:
        assert len(kept) == n_kept, (title, len(kept))
        cut = box(svg, "filters-cut")
        x = (cut["x"] + cut["right"]) / 2
        assert kept[-1]["right"] - 1 <= x, (kept[-1], cut)
        if n_kept < shown:
            after = boxes(svg, "filters-bar-")[n_kept]
            assert x <= after["x"] + 1, (after, cut)
        where = f"the dashed line after bar {n_kept}"
    else:
        assert len(kept) == shown, (title, len(kept))
        beyond = svg_text(svg, "filters-cut-beyond")
        assert f"cut after token {n_kept:,}" in beyond, beyond
        where = f"an arrow: {beyond!r}"
    assert count(svg, "filters-cut-vocab") == 1  # and over the whole vocabulary
    return n_kept, len(kept), where


def _top_p(page) -> list[str]:
    area = output_area(page, '[data-chart="filters"]')
    lines = []
    for k, p in [(0, 0.5), (0, 0.9), (5, 0.5)]:
        set_slider(page, area, "top_k (0: off)", k)
        set_slider(page, area, "top_p (1: off)", p)
        svg = chart(page, "filters")
        n_kept, marked, where = _check_cut(svg)
        name = f"04_decoding-top_p-{p}" if not k else f"04_decoding-top_k{k}-top_p{p}"
        shot = element_screenshot(area, name)
        lines.append(f"top_k={k} top_p={p}: title says {n_kept} kept, {marked} bars marked "
                     f"kept, cut shown by {where}; {shot.name}")
    set_slider(page, area, "top_k (0: off)", 0)
    set_slider(page, area, "top_p (1: off)", 0.9)
    return lines


def _repetition(page) -> list[str]:
    area = output_area(page, '.widget-label:text-is("repetition_penalty")')
    rows = area.locator(".widget-html-content")
    greedy = rows.nth(1).inner_html()
    assert "greedy" in greedy and "ended:" in greedy
    set_slider(page, area, "repetition_penalty", 2.0)
    assert rows.nth(1).inner_html() == greedy  # the unchanged greedy text stays
    assert "repetition_penalty=2.0" in rows.nth(2).inner_text()
    status = rows.nth(0).inner_text()
    assert status == "generated 1, kept 2 unchanged", status
    shot = element_screenshot(area, "04_decoding-repetition")
    set_slider(page, area, "repetition_penalty", 1.3)
    assert rows.nth(0).inner_text() == "nothing changed"  # generated before: kept
    return [f"repetition: penalty 2.0 regenerated one text, greedy kept; {shot.name}"]


def _playground(page) -> list[str]:
    area = output_area(page, '.widget-checkbox:has-text("chat template")')
    button = area.locator("button.jupyter-button", has_text="Generate")
    status = area.locator(".widget-html-content").first

    def button_place():  # relative to the widget: the page itself may scroll
        b, a = button.bounding_box(), area.bounding_box()
        return round(b["x"] - a["x"]), round(b["y"] - a["y"]), round(b["width"])

    where = button_place()
    lines = []
    for t in (0.2, 1.0):
        set_slider(page, area, "temperature", t)
        button.click()
        disabled = False
        for _ in range(40):  # the button is disabled while the model works
            disabled = disabled or button.is_disabled()
            if disabled:
                break
            page.wait_for_timeout(25)
        settle(page, BUSY_LIMIT_S)
        assert disabled, "the Generate button stayed enabled while generating"
        assert button_place() == where, "the Generate button moved"
        text = status.inner_text()
        assert "done in" in text and "\n" not in text, text
        assert status.bounding_box()["height"] < 30, "the status wraps"
    cards = area.locator(".minillm-run")
    assert cards.count() == 2
    latest, before = cards.nth(0).bounding_box(), cards.nth(1).bounding_box()
    assert abs(latest["y"] - before["y"]) < 2 and latest["x"] < before["x"]  # side by side
    older = cards.nth(1).inner_html()
    assert "<b>temperature=0.2</b>" in older and "0.2000" not in older, older
    assert "ended:" in cards.nth(0).inner_text() and "ended:" in cards.nth(1).inner_text()
    shot = element_screenshot(area, "04_decoding-playground-two-runs")
    lines.append(f"playground: two runs side by side, status {status.inner_text()!r}; "
                 f"{shot.name}")
    set_slider(page, area, "temperature", 1.0)
    return lines


def check_04(page) -> list[str]:
    return _temperature(page) + _top_p(page) + _repetition(page) + _playground(page)


# --- 05 · metrics ---------------------------------------------------------------------------------

# Each frame replaces the HTML widget's content: watch the widget, count the bars of each frame.
COUNT_FRAMES = """e => {
  const widget = e.parentElement;
  const bars = () => widget.querySelectorAll("[id^='latency-bar-'], #latency-ttft").length;
  window.__frames = [];
  window.__observer = new MutationObserver(
    () => window.__frames.push([performance.now(), bars()]));
  window.__observer.observe(widget, {childList: true});
}"""


def check_05(page) -> list[str]:
    area = output_area(page, '[data-chart="latency"]')
    svg = chart(page, "latency")
    # the first run, in a fresh kernel: a drawn chart, not a figure's repr, and no stale line
    assert "<Figure" not in area.inner_text()
    assert svg.locator("svg").count() == 1
    title = svg_text(svg, "latency-title")
    n = _first_int(title)
    assert count(svg, "latency-ttft") == 1 and count(svg, "latency-bar-") == n - 1, title
    assert "nan" not in svg.inner_text().lower()
    stats = area.locator(".widget-html-content").last.inner_text()
    assert stats.startswith("done") and "ended:" in stats, stats
    outputs = current_notebook(page).locator(".jp-Cell", has=area).locator(".jp-OutputArea-output")
    # no line printed under the widget, left over from Run All
    assert not any("TTFT" in t and "tokens:" in t for t in outputs.all_inner_texts())
    first = element_screenshot(area, "05_metrics-latency-first-run")
    # live: the chart redraws while the tokens come, at least 4 times a second
    svg.evaluate(COUNT_FRAMES)
    area.locator("button.jupyter-button", has_text="Generate").click()
    settle(page, BUSY_LIMIT_S)
    frames = page.evaluate("() => { window.__observer.disconnect(); return window.__frames; }")
    counts = [c for _, c in frames]
    growing = [t for t, c in frames if 0 < c < n]
    assert len(set(counts)) >= 3, counts  # frames between the first token and the last
    span = (max(growing) - min(growing)) / 1000 if len(growing) > 1 else 0.0
    rate = (len(growing) - 1) / span if span else float("nan")
    after = element_screenshot(area, "05_metrics-latency-after-generate")
    return [f"latency chart: an SVG on the first run ({n} bars, {title!r}); {first.name}",
            f"latency chart while generating: {len(frames)} frames, bar counts {counts}; "
            f"{rate:.1f} redraws a second while tokens came; {after.name}"]


# --- 06 · batching --------------------------------------------------------------------------------

def check_06(page) -> list[str]:
    area = output_area(page, '[data-chart="blockmap"]')
    svg = chart(page, "blockmap")
    pool = svg_text(svg, "blockmap-pool-title")
    blocks = _first_int(pool.split(":")[1])
    assert count(svg, "blockmap-block-") == blocks, pool
    step = svg_text(svg, "blockmap-title")
    handle = area.locator(".noUi-handle")
    handle.scroll_into_view_if_needed()
    before = handle.get_attribute("aria-valuenow")
    box = handle.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2 + 60, box["y"] + box["height"] / 2, steps=6)
    page.mouse.up()
    settle(page, BUSY_LIMIT_S)
    moved = svg_text(svg, "blockmap-title")
    assert handle.get_attribute("aria-valuenow") != before, "the drag did not move the slider"
    assert moved != step, "the drag did not move the map"
    assert svg_text(svg, "blockmap-pool-title") == pool  # its own engine, not a later one
    assert count(svg, "blockmap-block-") == blocks
    assert "request" in svg.inner_text()  # the colour key
    shot = element_screenshot(area, "06_batching-block-map-after-drag")
    timeline = current_notebook(page).locator(
        ".jp-Cell", has=page.locator(".jp-InputArea", has_text="plot_timeline(")).first
    timeline_shot = element_screenshot(timeline.locator(".jp-OutputArea").first,
                                       "06_batching-timeline")
    return [f"block map: {pool!r} before and after a drag ({step.split(':')[0]} -> "
            f"{moved.split(':')[0]}), {blocks} blocks drawn; {shot.name}",
            f"timeline: {timeline_shot.name}"]


LESSON_CHECKS = {"notebooks/04_decoding.ipynb": check_04, "notebooks/05_metrics.ipynb": check_05,
                 "notebooks/06_batching.ipynb": check_06}
