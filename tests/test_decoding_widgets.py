"""Chapter 04's widgets: each compute function on hand-made logits, each chart's figure checked
for what it shows (bar heights, kept bars, the cut, labels, ticks), and each widget built, moved
and redrawn without a browser, the generating ones on the real model."""

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from minillm.decoding import GenerationConfig, IgnoredSamplingOptionsWarning  # noqa: E402
from minillm.course.text_quality import (distinct_n, mean_logprob, repeated_ngram_rate,  # noqa: E402
                                      repeated_ngrams, repeated_token_mask)
from minillm.course.widgets import (config_from_values, filter_figure, filter_view,  # noqa: E402
                             highlight_html, repetition_report, temperature_figure,
                             temperature_table)
from minillm.course.widgets.temperature import FLOOR  # noqa: E402


def _gid_patches(ax, prefix):
    return [p for p in ax.patches if (p.get_gid() or "").startswith(prefix)]


def _texts(fig):
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text)]


# --- temperature ----------------------------------------------------------------------------------

def test_temperature_table_sharpens_and_flattens():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    cold, base, hot = (temperature_table(logits, t, top_n=4) for t in (0.01, 1.0, 3.0))
    assert base["ids"] == [0, 1, 2, 3]
    assert base["probs"] == pytest.approx(torch.softmax(logits, 0).tolist())
    assert cold["probs"][0] == pytest.approx(1.0) and cold["entropy_bits"] < 1e-6
    assert cold["entropy_bits"] < base["entropy_bits"] < hot["entropy_bits"] <= 2.0
    assert hot["tokens_for_90pct"] >= base["tokens_for_90pct"] >= cold["tokens_for_90pct"] == 1
    with pytest.raises(ValueError, match="temperature"):
        temperature_table(logits, 0.0)


def test_temperature_table_counts_the_rest_of_the_vocabulary_and_the_coverage():
    logits = torch.linspace(3, -3, 1000)
    table = temperature_table(logits, 2.0, top_n=5)
    probs = torch.softmax(logits.double() / 2.0, 0)
    assert table["rest"] == pytest.approx(float(probs[5:].sum()))
    assert sum(table["probs"]) + table["rest"] == pytest.approx(1.0)
    ks, cover = table["coverage_k"], table["coverage"]
    assert ks[0] == 1 and ks[-1] == 1000 and ks == sorted(set(ks))
    assert cover == sorted(cover) and cover[-1] == pytest.approx(1.0)
    n = table["tokens_for_90pct"]
    assert float(probs[:n - 1].sum()) < 0.9 <= float(probs[:n].sum())
    assert table["covered_90"] == pytest.approx(float(probs[:n].sum()))


@pytest.mark.parametrize("temperature", [0.01, 0.2, 1.0, 2.0, 3.0])
def test_temperature_figure_stays_readable_at_every_setting(temperature):
    logits = torch.linspace(8, -8, 2000)
    table = temperature_table(logits, temperature, top_n=6)
    labels = [f"t{i}" for i in table["ids"]]
    fig = temperature_figure(table, labels, temperature, "a prompt")
    bars_ax, cover_ax = fig.axes
    bars = _gid_patches(bars_ax, "temperature-")
    heights = [b.get_height() for b in bars]
    assert heights == pytest.approx([max(p, FLOOR) for p in table["probs"] + [table["rest"]]])
    assert bars[-1].get_gid() == "temperature-rest"
    # a log axis: any probability above the floor is a visible bar, even each top token at T = 3
    assert bars_ax.get_yscale() == "log" and bars_ax.get_ylim()[0] == FLOOR
    if temperature >= 2.0:
        assert all(h >= 100 * FLOOR for h in heights)
    ticks = [t.get_text() for t in bars_ax.get_xticklabels()]
    assert ticks[:-1] == labels and ticks[-1] == "the other\n1,994"
    assert bars_ax.get_xlabel() and bars_ax.get_ylabel() and cover_ax.get_xlabel() \
        and cover_ax.get_ylabel()
    n90 = table["tokens_for_90pct"]
    verb = "covers" if n90 == 1 else "cover"
    assert cover_ax.get_title() == f"{n90:,} token{'s' if n90 > 1 else ''} {verb} 90%"
    texts = _texts(fig)
    shown_t = {0.01: "0.01", 0.2: "0.2", 1.0: "1.0", 2.0: "2.0", 3.0: "3.0"}[temperature]
    assert any(f"at T = {shown_t}: entropy" in t for t in texts)
    # every bar carries its value, rounded for people
    values = [t.get_text() for t in bars_ax.texts]
    assert len(values) == len(bars) and all("e-" not in v and len(v) <= 8 for v in values)


# --- top-k / top-p --------------------------------------------------------------------------------

def test_filter_view_top_k_top_p_and_renormalising():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    view = filter_view(probs.log(), top_k=0, top_p=0.7)
    assert view.kept == [True, True, False, False] and view.n_kept == view.cut == 2
    assert view.removed_by == ["", "", "top-p", "top-p"]
    assert view.kept_mass == pytest.approx(0.8)
    assert view.renormalised == pytest.approx([0.625, 0.375, 0.0, 0.0])
    assert view.cumulative == pytest.approx([0.5, 0.8, 0.95, 1.0])
    both = filter_view(probs.log(), top_k=1, top_p=0.99)
    assert both.kept == [True, False, False, False]
    assert both.removed_by == ["", "top-k", "top-k", "top-k"]
    everything = filter_view(probs.log())
    assert all(everything.kept) and everything.renormalised == pytest.approx(probs.tolist())


def test_the_line_is_what_top_p_adds_up_after_top_k_and_temperature():
    """top_k=2 leaves 0.5 and 0.3, renormalised 0.625 and 0.375: top_p=0.6 stops at the first
    token. The running sum of the raw distribution (0.5, 0.8) would put the cut after two."""
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    view = filter_view(probs.log(), top_k=2, top_p=0.6)
    assert view.cumulative == pytest.approx([0.625, 1.0, 1.0, 1.0])
    assert view.n_kept == 1 and view.removed_by == ["", "top-p", "top-k", "top-k"]
    assert view.n_after_top_k == 2
    first_over = next(i for i, c in enumerate(view.cumulative) if c >= 0.6)
    assert view.cut == first_over + 1
    hot = filter_view(probs.log(), top_p=0.6, temperature=2.0)
    flat = torch.softmax(probs.log() / 2.0, 0)
    assert hot.probs == pytest.approx(flat.tolist())
    assert hot.cumulative == pytest.approx(flat.cumsum(0).tolist())


@pytest.mark.parametrize("seed", range(6))
def test_filter_view_keeps_what_transformers_keeps(seed):
    from transformers.generation.logits_process import (LogitsProcessorList,
                                                        TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)

    torch.manual_seed(seed)
    logits = torch.randn(500) * 3
    k, p, t = [(0, 0.9, 1.0), (5, 0.5, 1.0), (50, 0.9, 2.0), (10, 0.3, 0.5), (0, 0.5, 0.2),
               (200, 0.95, 3.0)][seed]
    chain = LogitsProcessorList([TemperatureLogitsWarper(t)] + ([TopKLogitsWarper(k)] if k else [])
                                + [TopPLogitsWarper(p)])
    theirs = torch.isfinite(chain(None, logits[None].clone()))[0]
    view = filter_view(logits, k, p, t, show=500)
    assert view.n_kept == int(theirs.sum())
    assert view.kept == theirs[view.ids].tolist()
    # the cut sits where the line crosses top_p
    assert view.cumulative[view.cut - 1] >= p - 1e-9
    assert view.cut == 1 or view.cumulative[view.cut - 2] < p


def test_min_p_keeps_the_tokens_at_least_min_p_times_as_likely_as_the_top_one():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    view = filter_view(probs.log(), min_p=0.4)  # the line: 0.4 * 0.5 = 0.2
    assert view.removed_by == ["", "", "min-p", "min-p"] and view.n_kept == 2
    assert view.n_after_top_p == 4 and view.renormalised == pytest.approx([0.625, 0.375, 0, 0])
    hot = filter_view(probs.log(), min_p=0.4, temperature=2.0)  # flatter: the line moves down
    assert hot.n_kept == 3
    both = filter_view(probs.log(), top_p=0.5, min_p=0.1)  # top-p removes first
    assert both.removed_by == ["", "top-p", "top-p", "top-p"]


@pytest.mark.parametrize("seed", range(4))
def test_filter_view_with_min_p_keeps_what_transformers_keeps(seed):
    from transformers.generation.logits_process import (LogitsProcessorList, MinPLogitsWarper,
                                                        TemperatureLogitsWarper,
                                                        TopPLogitsWarper)

    torch.manual_seed(seed)
    logits = torch.randn(500) * 3
    p, m, t = [(1.0, 0.1, 1.0), (0.9, 0.05, 2.0), (0.95, 0.3, 0.7), (1.0, 0.02, 3.0)][seed]
    chain = LogitsProcessorList([TemperatureLogitsWarper(t)]
                                + ([TopPLogitsWarper(p)] if p < 1.0 else [])
                                + [MinPLogitsWarper(m)])
    theirs = torch.isfinite(chain(None, logits[None].clone()))[0]
    view = filter_view(logits, 0, p, t, show=500, min_p=m)
    assert view.n_kept == int(theirs.sum()) and view.kept == theirs[view.ids].tolist()


def test_filter_figure_names_min_p_and_notes_byte_labels():
    view = filter_view(torch.linspace(40, -40, 300), 0, 0.9, 1.0, 10, min_p=0.5)
    fig = filter_figure(view, [f"t{i}" for i in view.ids], 0, 0.9, 1.0, 0.5, note="a note")
    by_min_p = len(_gid_patches(fig.axes[0], "filters-bar-minp-"))
    assert by_min_p == min(view.n_after_top_p, 10) - view.n_kept > 0
    assert fig._suptitle.get_text().endswith(
        f"then min-p 0.5 keeps {view.n_kept}), holding "
        f"{fig._suptitle.get_text().split('holding ')[1]}")
    assert "removed by min-p" in _texts(fig) and fig.axes[0].get_xlabel().endswith("\na note")


def _filter_fig(logits, k, p, t=1.0, show=10):
    view = filter_view(logits, k, p, t, show)
    return view, filter_figure(view, [f"t{i}" for i in view.ids], k, p, t)


def test_filter_figure_marks_kept_bars_and_the_cut_between_them():
    logits = torch.linspace(4, -4, 300)
    view, fig = _filter_fig(logits, 5, 0.5)
    bars_ax, sums_ax, vocab_ax = fig.axes[0], fig.axes[2], fig.axes[1]
    kept = _gid_patches(bars_ax, "filters-bar-kept-")
    assert len(kept) == view.n_kept == sum(view.kept)
    assert len(_gid_patches(bars_ax, "filters-bar-topk-")) == 10 - 5
    assert len(_gid_patches(bars_ax, "filters-bar-topp-")) == 5 - view.n_kept
    cut = next(line for line in bars_ax.lines if line.get_gid() == "filters-cut")
    x = cut.get_xdata()[0]
    assert max(b.get_x() + b.get_width() for b in kept) < x < view.n_kept + 0.5 - 0.1
    assert list(sums_ax.lines[0].get_ydata()) == pytest.approx(view.cumulative)
    assert [line.get_ydata()[0] for line in sums_ax.lines[1:]] == [0.5]  # the top_p line
    vocab_cut = next(line for line in vocab_ax.lines if line.get_gid() == "filters-cut-vocab")
    assert vocab_cut.get_xdata()[0] == view.n_kept
    assert bars_ax.get_ylabel() and sums_ax.get_ylabel() and vocab_ax.get_xlabel()
    assert not any(ax.get_legend() for ax in fig.axes) and fig.legends  # the key is outside
    assert fig._suptitle.get_text().startswith(f"{view.n_kept} tokens kept (T = 1.0, then "
                                               "top-k 5 keeps 5, then top-p 0.5 keeps")


def test_filter_figure_says_where_the_cut_is_when_it_lies_beyond_the_bars():
    logits = torch.linspace(1, -1, 300)  # flat: top_p=0.9 keeps most of the 300
    view, fig = _filter_fig(logits, 0, 0.9)
    bars_ax = fig.axes[0]
    assert view.n_kept > 10 and len(_gid_patches(bars_ax, "filters-bar-kept-")) == 10
    assert not [line for line in bars_ax.lines if line.get_gid() == "filters-cut"]
    beyond = [t for t in bars_ax.texts if t.get_gid() == "filters-cut-beyond"]
    assert len(beyond) == 1 and f"cut after token {view.n_kept}" in beyond[0].get_text()


# --- quality measures and the repetition view -----------------------------------------------------

def test_quality_measures_on_hand_made_sequences():
    tokens = [1, 2, 3, 1, 2, 3, 1, 2]
    assert repeated_ngrams(tokens, 3) == [3, 4, 5]
    assert repeated_ngram_rate(tokens, 3) == pytest.approx(3 / 6)
    assert distinct_n(tokens, 2) == pytest.approx(3 / 7)
    assert distinct_n([1, 2, 3, 4], 2) == 1.0 and repeated_ngram_rate([1, 2], 3) == 0.0
    assert repeated_token_mask(tokens, 3) == [False] * 3 + [True] * 5
    with pytest.raises(ValueError, match="n must be"):
        distinct_n(tokens, 0)


def test_mean_logprob_is_the_average_of_each_token_logprob():
    torch.manual_seed(0)
    table = torch.randn(10, 10)
    model = lambda ids: table[ids]  # noqa: E731 (logits depend on the last token only)
    got = mean_logprob(model, [1, 2], [3, 4])
    want = (torch.log_softmax(table[2], 0)[3] + torch.log_softmax(table[3], 0)[4]) / 2
    assert got == pytest.approx(float(want))


class BytesTokenizer:
    """Four tokens: 你 cut in two (b"\\xe4\\xbd" + b"\\xa0"), " hi", and <|im_end|> (special)."""
    pieces = [b"\xe4\xbd", b"\xa0", b" hi\n", b"<|im_end|>"]
    special_tokens = {"<|im_end|>": 3}

    def token_bytes(self, i):
        return self.pieces[i]

    def decode(self, ids, skip_special_tokens=False):
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")


def test_a_token_holding_part_of_a_character_shows_its_bytes():
    from minillm.course.widgets.tokens import has_byte_labels, text_pieces, token_label

    tok = BytesTokenizer()
    assert [token_label(tok, i) for i in range(4)] == ["\\xe4\\xbd", "\\xa0", " hi\\n",
                                                       "<|im_end|>"]
    assert has_byte_labels(tok, [0, 2]) and not has_byte_labels(tok, [2, 3])
    assert text_pieces(tok, [2, 0, 1, 3, 0]) == [(" hi\n", [0]), ("你", [1, 2]), ("\ufffd", [4])]


def test_the_repetition_view_joins_a_characters_bytes_and_leaves_out_special_tokens():
    report = repetition_report("greedy", [0, 1, 2, 0, 1, 2, 3], n=3)
    page = highlight_html(BytesTokenizer(), report)
    assert "<|im_end|>" not in page and "&lt;|im_end|&gt;" not in page
    assert page.count("你") == 2 and "\ufffd" not in page
    assert '<span style="background:#f8b4b4">你</span>' in page  # the repeated one


class FakeTokenizer:
    def encode(self, text):
        return [ord(c) % 50 for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(97 + i % 26) for i in ids)


def test_repetition_report_and_highlighting():
    report = repetition_report("greedy", [1, 2, 3, 1, 2, 3], n=3)
    assert (report.repeated, report.total, report.rate) == (1, 4, 0.25)
    page = highlight_html(FakeTokenizer(), report, "6 tokens, ended: max_new_tokens reached")
    assert "1 of 4 n-grams repeat (25%)" in page and page.count("background") == 3
    assert "· 6 tokens, ended: max_new_tokens reached" in page


def test_repetition_rows_are_labelled_with_rounded_settings():
    from minillm.course.widgets.repetition import settings

    assert list(settings(1.7000000000000002, 4)) == ["greedy", "repetition_penalty=1.7",
                                                     "no_repeat_ngram_size=4"]
    assert settings(2.0, 3)["repetition_penalty=2.0"] == {"repetition_penalty": 2.0}


# --- the playground's logic -----------------------------------------------------------------------

def test_config_from_values_turns_widget_conventions_into_a_config():
    config = config_from_values({"do_sample": True, "top_k": 0, "min_p": 0.0, "seed": -1,
                                 "stop": r"\n\n,END", "bad_words": " cat, dog",
                                 "temperature": 0.20000000000000004},
                                FakeTokenizer())
    assert isinstance(config, GenerationConfig)
    assert (config.top_k, config.min_p, config.seed) == (0, None, None)
    assert config.temperature == 0.2
    assert config.stop == ["\n\n", "END"]
    assert config.bad_words_ids == [[99 % 50, 97 % 50, 116 % 50], [32, 49, 47, 16],
                                    [100 % 50, 111 % 50, 103 % 50], [32, 0, 11, 3]]
    with pytest.raises(ValueError, match="top_p"):
        config_from_values({"top_p": 0.0})


def test_playground_describe_names_the_mode_rounds_and_flags_options_it_ignores():
    from minillm.course.widgets.playground import describe

    assert describe(GenerationConfig()) == "greedy"
    with pytest.warns(IgnoredSamplingOptionsWarning):  # and says it once
        ignored = GenerationConfig(temperature=0.7, length_penalty=2.0)
    assert describe(ignored) == (
        "greedy · temperature=0.7 (sampling only) · length_penalty=2.0 (beam search only)")
    assert describe(GenerationConfig(num_beams=3, early_stopping="never")) == (
        "beam search, 3 beams · early_stopping='never'")
    assert describe(GenerationConfig(do_sample=True, temperature=0.20000000000000004,
                                     top_p=0.9000000000000001)) == (
        "sampling · temperature=0.2 · top_p=0.9")


def test_runs_stand_side_by_side_latest_first_with_their_differences_in_bold():
    from minillm.course.widgets.playground import Run, describe_parts, runs_html, setting_values

    def run(i, config, texts=(), notes=(), seconds=None):
        return Run(i, describe_parts(config), setting_values(config), list(texts), list(notes),
                   seconds)

    cold = GenerationConfig(do_sample=True, temperature=0.20000000000000004, seed=0)
    runs = [run(1, cold, ["cold text"], ["6 tokens, ended: x"], 0.4),
            run(2, GenerationConfig(do_sample=True, seed=0), [""],
                ["no text: the first token was end-of-text"], 0.1)]
    page = runs_html(runs)
    assert page.index("data-run='2'") < page.index("data-run='1'")
    # the latest run left temperature at its default: its card names it, so both can be read
    assert "<b>temperature=0.2</b>" in page and "<b>temperature=1.0</b>" in page
    assert "<b>sampling</b>" not in page and "seed=0" in page and "<b>seed" not in page
    assert "<i>(no text)</i>" in page and "no text: the first token was end-of-text" in page
    runs.append(run(3, GenerationConfig()))
    page = runs_html(runs)
    assert page.count("class='minillm-run'") == 2 and "data-run='1'" not in page
    assert "<b>greedy</b>" in page and "<b>sampling</b>" in page
    assert "running…" in page and "generating…" in page
    # a setting the other run turned off reads as the controls say, never as Python's None
    stopped = run(4, GenerationConfig(stop=["\n"]), ["x"], ["1 token"], 0.1)
    page = runs_html([stopped, run(5, GenerationConfig(), ["x"], ["1 token"], 0.1)])
    assert "<b>stop=none</b>" in page and "None" not in page


def test_the_status_line_never_wraps():
    from minillm.course.widgets.playground import status_html

    line = status_html("x" * 500)
    assert "white-space:nowrap" in line and "text-overflow:ellipsis" in line
    assert f"title='{'x' * 500}'" in line


@pytest.mark.parametrize("bad", [0, 301, 2.5, True, "60"])
def test_playground_rejects_a_starting_length_outside_its_slider(bad):
    from minillm.course.widgets import playground

    with pytest.raises(ValueError, match="max_new_tokens must be an int from 1 to 300"):
        playground(None, None, max_new_tokens=bad)


def test_playground_says_why_an_empty_answer_is_empty():
    """A model whose first greedy token is end-of-text gives no text: the card says so."""
    from minillm.generation.loop import generate
    from minillm.course.widgets import playground
    from tests.test_fast import _Tok, _tiny

    model, tokenizer = _tiny(), _Tok()
    tokenizer.eos_token_ids = (generate(model, tokenizer, "abc", max_new_tokens=1).token_ids[0],)
    box = playground(model, tokenizer, "abc", max_new_tokens=5)
    box.chat.value = False
    box.controls["do_sample"].value = False
    box.run()
    assert "<i>(no text)</i>" in box.output.value
    assert "no text: the first token was end-of-text" in box.output.value
    assert "no text: the first token was end-of-text" in box.status.value
    assert not box.button.disabled


def test_chapter_04s_widgets_speak_chinese():
    """With the zh setting the filter chart, the repetition view and the playground's card and
    controls are labelled in Chinese; the numbers are the same."""
    from minillm.course import set_language
    from minillm.course.widgets import playground
    from minillm.generation.loop import generate
    from tests.test_fast import _Tok, _tiny

    set_language("zh")
    try:
        view = filter_view(torch.linspace(4, -4, 300), 5, 0.5, 1.0, 10)
        fig = filter_figure(view, [f"t{i}" for i in view.ids], 5, 0.5, 1.0)
        assert fig._suptitle.get_text().startswith(f"保留 {view.n_kept} 个词元（T = 1.0，然后 "
                                                   "top-k 5 保留 5 个，然后 top-p 0.5 保留")
        assert "被 top-k 去掉" in _texts(fig) and fig.axes[0].get_ylabel() == "词元的概率"
        report = repetition_report("greedy", [1, 2, 3, 1, 2, 3], 3)
        assert "个 n-gram 中有 1 个重复" in highlight_html(_Tok(), report)

        model, tokenizer = _tiny(), _Tok()
        tokenizer.eos_token_ids = (generate(model, tokenizer, "abc",
                                            max_new_tokens=1).token_ids[0],)
        box = playground(model, tokenizer, "abc", max_new_tokens=5)
        assert box.button.description == "生成" and box.chat.description == "对话模板"
        box.chat.value = False
        box.controls["do_sample"].value = False
        box.run()
        assert "<i>（没有文本）</i>" in box.output.value and "第 1 次运行 · 最新" in box.output.value
        assert "没有文本：第一个词元就是文本结束词元" in box.status.value
        assert "贪心解码" in box.output.value
    finally:
        set_language("en")


# --- the widgets themselves, on the real model ----------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    import minillm

    return minillm.load("smollm2-135m", dtype=torch.float32, device="cpu")


def test_temperature_and_filter_explorers_redraw(smollm2):
    from minillm.course.widgets import temperature_explorer, top_k_top_p_explorer

    model, tokenizer = smollm2
    box = temperature_explorer(model, tokenizer, "The capital of France is")
    assert "<svg" in box.chart.value and "at T = 1.0: entropy" in box.chart.value
    box.slider.value = 2.5  # redraws through the observer
    assert "at T = 2.5: entropy" in box.chart.value
    assert box.slider.style.description_width == "initial"  # "temperature T", not "temperat…"
    box = top_k_top_p_explorer(model, tokenizer, "The capital of France is")
    assert box.view.n_kept > 5  # top_p=0.9 alone keeps more than five
    box.controls["top_p"].value = 1.0
    box.controls["top_k"].value = 5
    assert box.view.n_kept == 5 and "5 tokens kept" in box.chart.value
    assert box.chart.value.count('id="filters-bar-kept-') == 5
    box.controls["top_p"].value = 0.01  # the top token alone crosses any p this small
    assert box.view.n_kept == 1 and "1 token kept" in box.chart.value
    assert 'id="filters-cut"' in box.chart.value


def test_playground_streams_keeps_two_runs_and_runs_beams(smollm2):
    from minillm.course.widgets import playground

    model, tokenizer = smollm2
    box = playground(model, tokenizer, "Name a colour.", max_new_tokens=6)
    assert box.controls["max_new_tokens"].value == 6
    states = []
    box.button.observe(lambda change: states.append(change.new), names="disabled")
    box.run()
    assert states == [True, False]  # disabled while it worked
    assert ">run 1 done in " in box.status.value
    assert "sampling · max_new_tokens=6 · top_p=0.9 · seed=0" in box.output.value
    assert "6 tokens, ended: max_new_tokens reached" in box.output.value
    box.controls["temperature"].value = 0.20000000000000004
    box.run()
    page = box.output.value
    assert page.count("class='minillm-run'") == 2  # both runs, side by side
    assert "<b>temperature=0.2</b>" in page and "0.2000" not in page
    box.controls["do_sample"].value = False
    box.controls["num_beams"].value = 2
    box.controls["num_return_sequences"].value = 2
    box.run()
    assert box.output.value.count("score ") == 2
    assert "beam search, 2 beams" in box.output.value
    box.controls["num_return_sequences"].value = 3  # more than num_beams: an error, shown
    box.run()
    assert "num_return_sequences" in box.status.value and len(box.runs) == 3


def test_repetition_explorer_regenerates_only_what_changed(smollm2):
    from minillm.course.widgets import repetition_explorer

    model, tokenizer = smollm2
    box = repetition_explorer(model, tokenizer, max_new_tokens=12)
    assert box.generated == 3
    assert all("n-grams repeat" in row.value and "ended:" in row.value for row in box.rows)
    greedy = box.rows[0].value
    seen, disabled = [], []
    box.status.observe(lambda change: seen.append(change.new), names="value")
    box.controls["repetition_penalty"].observe(lambda change: disabled.append(change.new),
                                               names="disabled")
    box.controls["repetition_penalty"].value = 2.5
    assert box.generated == 4  # the penalty's text only
    assert box.rows[0].value == greedy and "repetition_penalty=2.5" in box.rows[1].value
    assert "generating 1 of 1: repetition_penalty=2.5…" in seen
    assert seen[-1] == "generated 1, kept 2 unchanged" and disabled == [True, False]
    assert box.progress.layout.visibility == "hidden"
    box.controls["repetition_penalty"].value = 1.3  # generated before: nothing to do
    assert box.generated == 4 and box.status.value == "nothing changed"
    assert "the same text as" not in box.rows[1].value
    box.controls["repetition_penalty"].value = 1.0  # no penalty: greedy's text, and it says so
    assert "the same text as greedy" in box.rows[1].value
