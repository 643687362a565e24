"""GenerationConfig: defaults, merge, and the bad-input errors (field, value, allowed range)."""

import pytest

import minillm
from minillm.decoding import GenerationConfig


def test_defaults_are_greedy_with_every_filter_off():
    c = GenerationConfig()
    assert (c.max_new_tokens, c.do_sample, c.temperature, c.top_k, c.top_p, c.min_p) == (
        64, False, 1.0, 0, 1.0, None)
    assert (c.repetition_penalty, c.no_repeat_ngram_size, c.num_beams, c.length_penalty) == (
        1.0, 0, 1, 1.0)
    assert (c.early_stopping, c.num_return_sequences, c.bad_words_ids, c.eos_token_id,
            c.seed, c.stop) == (False, 1, None, None, None, None)
    assert minillm.GenerationConfig is GenerationConfig


def test_field_names_are_transformers_names():
    from transformers import GenerationConfig as HFConfig

    hf_fields = set(vars(HFConfig()))
    # minillm's: ignore_eos is vLLM's name, the two penalties OpenAI's (transformers has none)
    additions = {"stop", "seed", "ignore_eos", "presence_penalty", "frequency_penalty"}
    ours = set(GenerationConfig.field_names()) - additions
    assert ours <= hf_fields, ours - hf_fields


def test_ignore_eos_runs_to_max_new_tokens_and_is_checked():
    from minillm.generation.request import eos_ids

    class Model:
        class config:
            eos_token_ids = (2,)

    assert eos_ids(Model, None, GenerationConfig()) == [2]
    assert eos_ids(Model, None, GenerationConfig(eos_token_id=[5], ignore_eos=True)) == []
    with pytest.raises(TypeError, match="ignore_eos must be True or False"):
        GenerationConfig(ignore_eos="yes")


def test_merge_returns_a_new_validated_config():
    base = GenerationConfig(max_new_tokens=10)
    merged = GenerationConfig.merge(base, do_sample=True, top_p=0.9)
    assert (merged.max_new_tokens, merged.do_sample, merged.top_p) == (10, True, 0.9)
    assert base.do_sample is False and base.top_p == 1.0
    assert GenerationConfig.merge(None) == GenerationConfig()
    with pytest.raises(ValueError, match="top_p"):
        GenerationConfig.merge(base, top_p=0.0)


def test_merge_unknown_field_lists_the_allowed_ones():
    with pytest.raises(TypeError, match="topp.*the options are: max_new_tokens.*top_p"):
        GenerationConfig.merge(None, topp=0.9)
    with pytest.raises(TypeError, match="GenerationConfig or None"):
        GenerationConfig.merge({"top_p": 0.9})


def test_a_config_is_a_value():
    c = GenerationConfig()
    with pytest.raises(AttributeError):
        c.top_p = 0.5


def test_normalises_single_stop_string_and_eos_lists():
    c = GenerationConfig(stop="\n\n", eos_token_id=(2, 0), bad_words_ids=((5,), (6, 7)))
    assert c.stop == ["\n\n"] and c.eos_token_id == [2, 0] and c.bad_words_ids == [[5], [6, 7]]


def test_greedy_accepts_temperature_zero():
    assert GenerationConfig(temperature=0).temperature == 0


BAD = [
    (dict(do_sample=True, temperature=0.0), "temperature", "> 0"),
    (dict(do_sample=True, temperature=-1), "temperature", "> 0"),
    (dict(temperature=-0.5), "temperature", ">= 0"),
    (dict(top_p=0.0), "top_p", r"\(0, 1\]"),
    (dict(top_p=1.01), "top_p", r"\(0, 1\]"),
    (dict(top_k=-1), "top_k", ">= 0"),
    (dict(min_p=-0.1), "min_p", r"\[0, 1\]"),
    (dict(min_p=1.5), "min_p", r"\[0, 1\]"),
    (dict(repetition_penalty=0.0), "repetition_penalty", "> 0"),
    (dict(repetition_penalty=-1.2), "repetition_penalty", "> 0"),
    (dict(num_beams=0), "num_beams", ">= 1"),
    (dict(num_beams=2, num_return_sequences=3), "num_return_sequences", "<= num_beams"),
    (dict(num_return_sequences=0), "num_return_sequences", ">= 1"),
    (dict(max_new_tokens=0), "max_new_tokens", ">= 1"),
    (dict(max_new_tokens=-5), "max_new_tokens", ">= 1"),
    (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size", ">= 0"),
    (dict(num_beams=3, do_sample=True), "num_beams=3", "not supported"),
    (dict(early_stopping="sometimes"), "early_stopping", "'never'"),
    (dict(length_penalty=float("inf")), "length_penalty", "finite"),
    (dict(bad_words_ids=[]), "bad_words_ids", "non-empty"),
    (dict(bad_words_ids=[[1], []]), "bad_words_ids", "non-empty"),
    (dict(bad_words_ids=[[1, -3]]), "bad_words_ids", ">= 0"),
    (dict(eos_token_id=-1), "eos_token_id", ">= 0"),
    (dict(seed=-1), "seed", ">= 0"),
    (dict(stop=[""]), "stop", "non-empty string"),
]


@pytest.mark.parametrize("fields, name, allowed", BAD, ids=[b[1] for b in BAD])
def test_bad_values_raise_value_error_naming_field_value_and_range(fields, name, allowed):
    with pytest.raises(ValueError) as error:
        GenerationConfig(**fields)
    message = str(error.value)
    assert name in message
    assert __import__("re").search(allowed, message), message
    value = fields.get(name, None)
    if value is not None and name != "num_beams=3":
        assert repr(value) in message or str(value) in message, message


@pytest.mark.parametrize("fields", [dict(top_k="5"), dict(do_sample=1), dict(temperature="hot"),
                                    dict(num_beams=2.0), dict(seed=1.5), dict(top_k=True)])
def test_wrong_types_raise_type_error(fields):
    with pytest.raises(TypeError, match=next(iter(fields))):
        GenerationConfig(**fields)


# --- sampling options without do_sample: ignored, and said once --------------------------------

def _ignored_warnings(build) -> list[str]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own rule: once per line of code
        build()
    return [str(w.message) for w in caught
            if issubclass(w.category, minillm.decoding.IgnoredSamplingOptionsWarning)]


def test_sampling_options_without_do_sample_warn_naming_them_and_the_fix():
    import warnings

    with pytest.warns(minillm.decoding.IgnoredSamplingOptionsWarning) as caught:
        config = GenerationConfig(temperature=0.8, top_p=0.9)
    assert config.do_sample is False and config.temperature == 0.8  # still greedy, as asked
    message = str(caught[0].message)
    assert message == ("temperature and top_p are set but do_sample=False, so greedy decoding "
                       "ignores them: pass do_sample=True to sample with them, or leave them out "
                       "for greedy decoding")
    assert caught[0].filename == __file__  # it points at the line that built the config
    with pytest.warns(minillm.decoding.IgnoredSamplingOptionsWarning, match="num_beams=1 and "
                      "do_sample=True to sample with it, or leave it out for beam search"):
        GenerationConfig(num_beams=2, min_p=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GenerationConfig(do_sample=True, temperature=0.8, top_k=5, top_p=0.9, min_p=0.1)
        GenerationConfig(temperature=0)  # OpenAI's spelling of greedy
        GenerationConfig(temperature=1.0, top_k=None, top_p=1.0)  # each at its "off" value


def test_the_warning_is_shown_once_however_often_a_loop_builds_such_configs():
    def loop():
        for t in (0.5, 0.6, 0.7):
            GenerationConfig(temperature=t)
        for k in (5, 10):
            minillm.decoding.GenerationConfig.merge(None, top_k=k)

    assert _ignored_warnings(loop) == [
        "temperature is set but do_sample=False, so greedy decoding ignores it: pass "
        "do_sample=True to sample with it, or leave it out for greedy decoding",
        "top_k is set but do_sample=False, so greedy decoding ignores it: pass do_sample=True to "
        "sample with it, or leave it out for greedy decoding"]


def test_generate_warns_at_the_callers_line_and_a_built_config_does_not_warn_again():
    from minillm.model.toy import LetterTokenizer, tiny_model

    model, tok = tiny_model()
    config = GenerationConfig(max_new_tokens=2, do_sample=True)
    assert GenerationConfig.merge(config) is config  # nothing changed: the same value

    def run():
        for _ in range(3):
            minillm.generate(model, tok, "abc", config, temperature=0.3)

    assert len(_ignored_warnings(run)) == 0  # sampling: nothing is ignored
    greedy = GenerationConfig(max_new_tokens=2)
    assert len(_ignored_warnings(
        lambda: [minillm.generate(model, LetterTokenizer(), "abc", greedy, top_p=p)
                 for p in (0.5, 0.9)])) == 1
