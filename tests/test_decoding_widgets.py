"""Chapter 04's widgets: each compute function on hand-made logits, and each widget built, moved
and redrawn without a browser (matplotlib's Agg backend), the generating ones on the real model."""

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from minillm.decoding import GenerationConfig  # noqa: E402
from minillm.decoding.quality import (distinct_n, mean_logprob, repeated_ngram_rate,  # noqa: E402
                                      repeated_ngrams, repeated_token_mask)
from minillm.widgets import (config_from_values, filter_view, highlight_html,  # noqa: E402
                             repetition_report, temperature_table)


# --- compute functions ----------------------------------------------------------------------------

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


def test_filter_view_top_k_top_p_and_renormalising():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    view = filter_view(probs.log(), top_k=0, top_p=0.7)
    assert view.kept == [True, True, False, False] and view.n_kept == 2
    assert view.kept_mass == pytest.approx(0.8)
    assert view.renormalised == pytest.approx([0.625, 0.375, 0.0, 0.0])
    assert view.cumulative == pytest.approx([0.5, 0.8, 0.95, 1.0])
    both = filter_view(probs.log(), top_k=1, top_p=0.99)
    assert both.kept == [True, False, False, False]
    everything = filter_view(probs.log())
    assert all(everything.kept) and everything.renormalised == pytest.approx(probs.tolist())


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


class FakeTokenizer:
    def encode(self, text):
        return [ord(c) % 50 for c in text]

    def decode(self, ids):
        return "".join(chr(97 + i % 26) for i in ids)


def test_repetition_report_and_highlighting():
    report = repetition_report("greedy", [1, 2, 3, 1, 2, 3], n=3)
    assert (report.repeated, report.total, report.rate) == (1, 4, 0.25)
    page = highlight_html(FakeTokenizer(), report)
    assert "1 of 4 n-grams repeat (25%)" in page and page.count("background") == 3


def test_config_from_values_turns_widget_conventions_into_a_config():
    config = config_from_values({"do_sample": True, "top_k": 0, "min_p": 0.0, "seed": -1,
                                 "stop": r"\n\n,END", "bad_words": " cat, dog"},
                                FakeTokenizer())
    assert isinstance(config, GenerationConfig)
    assert (config.top_k, config.min_p, config.seed) == (0, None, None)
    assert config.stop == ["\n\n", "END"]
    assert config.bad_words_ids == [[99 % 50, 97 % 50, 116 % 50], [32, 49, 47, 16],
                                    [100 % 50, 111 % 50, 103 % 50], [32, 0, 11, 3]]
    with pytest.raises(ValueError, match="top_p"):
        config_from_values({"top_p": 0.0})


# --- the widgets themselves, on the real model ----------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    import minillm

    return minillm.load("smollm2-135m", dtype=torch.float32, device="cpu")


def test_temperature_and_filter_explorers_redraw(smollm2, monkeypatch):
    import matplotlib.pyplot as plt

    from minillm.widgets import temperature_explorer, top_k_top_p_explorer

    titles = []
    monkeypatch.setattr(plt, "show", lambda: titles.append(plt.gcf().axes[0].get_title()))
    model, tokenizer = smollm2
    box = temperature_explorer(model, tokenizer, "The capital of France is")
    box.slider.value = 2.5  # redraws through the observer
    assert len(titles) == 2 and "T = 1.00" in titles[0] and "T = 2.50" in titles[1]
    box = top_k_top_p_explorer(model, tokenizer, "The capital of France is")
    assert int(titles[-1].split()[0]) > 5  # top_p=0.9 alone keeps more than five
    box.controls["top_p"].value = 1.0
    box.controls["top_k"].value = 5
    assert titles[-1].startswith("5 tokens kept")
    box.controls["top_p"].value = 0.01  # the top token alone crosses any p this small
    assert len(titles) == 6 and titles[-1].startswith("1 tokens kept")


def test_playground_streams_and_runs_beams(smollm2):
    from minillm.widgets import playground

    model, tokenizer = smollm2
    box = playground(model, tokenizer, "Name a colour.", max_new_tokens=6)
    assert box.controls["max_new_tokens"].value == 6
    box.run()
    assert box.output.value and box.status.value.startswith("done")
    assert "sampling · max_new_tokens=6 · top_p=0.9 · seed=0" in box.status.value
    box.controls["do_sample"].value = False
    box.controls["num_beams"].value = 2
    box.controls["num_return_sequences"].value = 2
    box.run()
    assert box.output.value.count("score") == 2
    assert "beam search, 2 beams" in box.status.value
    box.controls["num_return_sequences"].value = 3  # more than num_beams: an error, shown
    box.run()
    assert "num_return_sequences" in box.status.value


def test_repetition_explorer_counts_repeats(smollm2):
    from minillm.widgets import repetition_explorer

    model, tokenizer = smollm2
    box = repetition_explorer(model, tokenizer, max_new_tokens=16)
    assert box.output.value.count("n-grams repeat") == 3


def test_playground_describe_names_the_mode_and_flags_options_it_ignores():
    from minillm.decoding import GenerationConfig
    from minillm.widgets.playground import describe

    assert describe(GenerationConfig()) == "greedy"
    assert describe(GenerationConfig(temperature=0.7, length_penalty=2.0)) == (
        "greedy · temperature=0.7 (sampling only) · length_penalty=2.0 (beam search only)")
    assert describe(GenerationConfig(num_beams=3, early_stopping="never")) == (
        "beam search, 3 beams · early_stopping='never'")


@pytest.mark.parametrize("bad", [0, 301, 2.5, True, "60"])
def test_playground_rejects_a_starting_length_outside_its_slider(bad):
    from minillm.widgets import playground

    with pytest.raises(ValueError, match="max_new_tokens must be an int from 1 to 300"):
        playground(None, None, max_new_tokens=bad)
