"""Reading and moving the course's widgets in the page: find a widget's output area by what it
holds, set a slider to an exact value through its readout, read what a chart (inline SVG, see
minillm/course/widgets/render.py) shows: its texts, the elements with a given id, their positions."""

from __future__ import annotations

import re

from .jupyter import current_notebook, settle

BUSY_LIMIT_S = 180


def output_area(page, inner_selector: str):
    """The output area of the cell whose output holds `inner_selector`."""
    area = current_notebook(page).locator(".jp-OutputArea-output",
                                          has=page.locator(inner_selector))
    area.first.wait_for(state="attached", timeout=30_000)
    return area.first


def chart(page, name: str):
    """A widget's chart: `<div class="minillm-chart" data-chart=name>` around an `<svg>`."""
    return current_notebook(page).locator(f'.minillm-chart[data-chart="{name}"]').first


def slider(scope, label: str):
    """The slider described as `label` (its own description, or a Label beside it in an HBox)."""
    exact = re.compile(f"^{re.escape(label)}$")
    own = scope.locator(".widget-hslider", has=scope.page.locator("label.widget-label",
                                                                  has_text=exact))
    if own.count():
        return own.first
    beside = (f"xpath=.//div[contains(@class, 'widget-label') and normalize-space(.)="
              f"'{label}']/following-sibling::div[contains(@class, 'widget-hslider')][1]")
    return scope.locator(beside).first


def set_slider(page, scope, label: str, value) -> None:
    """Type `value` into the slider's readout, as a learner can, and wait for what it sets off."""
    readout = slider(scope, label).locator(".widget-readout")
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(value))
    page.keyboard.press("Enter")
    settle(page, BUSY_LIMIT_S)


def slider_value(scope, label: str) -> float:
    return float(slider(scope, label).locator(".noUi-handle").get_attribute("aria-valuenow"))


def svg_text(chart_locator, element_id: str) -> str:
    """The text of the SVG group or element with this id."""
    return chart_locator.evaluate(
        "(e, id) => { const t = e.querySelector(`[id='${id}']`); return t ? t.textContent : ''; }",
        element_id).strip()


def boxes(chart_locator, prefix: str) -> list[dict]:
    """id, x, right, top, bottom, width, height (px on the page) of every element whose id
    starts with `prefix`, in document order."""
    return chart_locator.evaluate("""(e, prefix) => Array.from(
        e.querySelectorAll(`[id^='${prefix}']`)).map(el => {
            const r = el.getBoundingClientRect();
            return {id: el.id, x: r.left, right: r.right, top: r.top, bottom: r.bottom,
                    width: r.width, height: r.height};
        })""", prefix)


def box(chart_locator, element_id: str) -> dict:
    """x, right, top, bottom, width, height of the element with exactly this id."""
    found = [b for b in boxes(chart_locator, element_id) if b["id"] == element_id]
    assert found, f"no element with id {element_id!r} in the chart"
    return found[0]


def count(chart_locator, prefix: str) -> int:
    return chart_locator.evaluate("(e, p) => e.querySelectorAll(`[id^='${p}']`).length", prefix)
