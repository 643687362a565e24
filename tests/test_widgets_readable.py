"""What the widgets write for people (rounded numbers, words for why a text ended) and how they
turn a figure into the inline SVG the browser shows."""

import warnings

import matplotlib
import pytest

matplotlib.use("Agg")

from minillm.course.widgets.readable import finish_reason_text, number, percent, plural  # noqa: E402
from minillm.course.widgets.render import chart_html, new_figure, to_svg  # noqa: E402


@pytest.mark.parametrize("value,shown", [
    (0.20000000000000004, "0.2"), (0.9000000000000001, "0.9"), (1.0, "1.0"), (2.0, "2.0"),
    (1.05, "1.05"), (0.01, "0.01"), (1e-7, "1e-07"), (3, "3"), ("never", "'never'"),
    (False, "False"), ([[1, 2]], "[[1, 2]]")])
def test_number_rounds_floats_as_a_person_types_them(value, shown):
    assert number(value) == shown


@pytest.mark.parametrize("p,shown", [
    (0.4123, "41%"), (0.0412, "4.1%"), (0.00412, "0.41%"), (0.000412, "0.041%"),
    (1.0, "100%"), (0.999, ">99.5%"), (0.0, "0%"), (3e-9, "<0.0001%")])
def test_percent_keeps_two_significant_digits_and_no_exponent(p, shown):
    assert percent(p) == shown


def test_plural_and_the_reasons_a_text_ended():
    assert plural(1, "token") == "1 token" and plural(12288, "token") == "12,288 tokens"
    assert finish_reason_text("eos", 1, "") == "no text: the first token was end-of-text"
    assert finish_reason_text("length", 6, "abc") == "6 tokens, ended: max_new_tokens reached"
    assert finish_reason_text("stop", 2, " ") == ("no text · 2 tokens, ended: a stop string "
                                                   "appeared")
    assert finish_reason_text("eos", 5) == "5 tokens, ended: the model ended it (end-of-text)"


def test_svg_keeps_text_as_text_and_artist_ids():
    fig = new_figure(3, 2)
    ax = fig.subplots()
    ax.bar([0], [1])[0].set_gid("demo-bar-0")
    ax.set_title("词元 tokens")  # matplotlib's font has no CJK glyph: no warning, text kept
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        svg = to_svg(fig)
    assert not caught, [str(w.message) for w in caught]
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert 'id="demo-bar-0"' in svg and "词元 tokens" in svg
    html = chart_html(fig, "demo")
    assert html.startswith('<div class="minillm-chart" data-chart="demo"><svg')

