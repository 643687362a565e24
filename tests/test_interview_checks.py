"""The chapter 10 exercise checkers: the right answers pass; each usual mistake gets its own hint
(and no other mistake gets it); the quiz's formulas are the lesson's."""

import math

import pytest
import torch

from minillm.course.checks import ch10_interview as checks
from minillm.course.checks._base import CheckFailed
from minillm.decoding.processors import TopKProcessor, TopPProcessor

from test_tokenizer_checks import assert_hints_are_specific


def sampling_filter(logits, temperature, top_k, top_p):
    logits = logits / temperature
    if top_k:
        logits = TopKProcessor(top_k)(None, logits)
    if top_p < 1.0:
        logits = TopPProcessor(top_p)(None, logits)
    return logits


def count_parameters(c):
    per_layer = (c.hidden_size * c.head_dim * (2 * c.n_heads + 2 * c.n_kv_heads)
                 + 3 * c.hidden_size * c.intermediate_size + 2 * c.hidden_size)
    head = 0 if c.tie_embeddings else c.vocab_size * c.hidden_size
    return c.vocab_size * c.hidden_size + c.n_layers * per_layer + c.hidden_size + head


def kv_cache_bytes(c, tokens, batch, dtype):
    size = torch.tensor([], dtype=dtype).element_size()
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim * tokens * batch * size


def test_right_answers_pass(capsys):
    checks.check_sampling_filter(sampling_filter)
    checks.check_count_parameters(count_parameters)
    checks.check_kv_cache_bytes(kv_cache_bytes)
    assert capsys.readouterr().out.count("✅") == 3


def test_the_worked_numbers():
    assert checks.parameter_count_reference(checks.PARAM_CONFIGS["SmolLM2-135M"]) == 134_515_008
    assert checks.weight_memory_gb_reference(70e9, 4) == 35
    assert math.isclose(checks.kv_cache_gb_reference(32, 32, 128, 4096, 1, 2), 2.147483648)
    assert math.isclose(checks.decode_bound_reference(14e9, 3350), 239.2857142857, rel_tol=1e-9)


@pytest.mark.parametrize("check", [checks.check_sampling_filter, checks.check_count_parameters,
                                   checks.check_kv_cache_bytes])
def test_stubs_say_not_written_yet(check):
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(CheckFailed, match="not written yet"):
        check(stub)


def chain(order):
    return lambda *args: checks._chain(*args, order)


def test_sampling_filter_hints_are_specific():
    assert_hints_are_specific(checks.check_sampling_filter, {
        "top-p first": (chain("tpk"), "top-p before top-k"),
        "temperature last": (chain("kpt"), "BEFORE the filters"),
        "no temperature": (chain("kp"), "temperature is missing"),
        "probabilities": (lambda *a: torch.softmax(sampling_filter(*a), -1), "not probabilities"),
    })


def test_top_k_zero_taken_literally_is_explained():
    def literal(logits, temperature, top_k, top_p):
        logits = logits / temperature
        logits = logits.masked_fill(logits < torch.topk(logits, top_k).values[..., -1:],
                                    float("-inf"))
        return TopPProcessor(top_p)(None, logits) if top_p < 1 else logits

    with pytest.raises(CheckFailed, match="top_k = 0 means no top-k filter"):
        checks.check_sampling_filter(literal)


def test_count_parameters_hints_are_specific():
    def variant(**kind):
        return lambda c: checks._param_variant(c, **kind)

    assert_hints_are_specific(checks.check_count_parameters, {
        "tied head counted": (variant(head=True), "count it once"),
        "untied head missing": (variant(head=False), "a matrix of its own"),
        "no norms": (variant(norms=False), "RMSNorm weights count too"),
        "no GQA": (variant(gqa=False), "not n_heads x head_dim"),
        "two MLP matrices": (variant(mlp_matrices=2), "three matrices"),
    })


def test_count_parameters_as_a_float_is_accepted_when_whole(capsys):
    checks.check_count_parameters(lambda c: float(count_parameters(c)))
    assert "✅" in capsys.readouterr().out


def test_kv_cache_bytes_hints_are_specific():
    def variant(**kind):
        return lambda *a: checks._kv_variant(*a, **kind)

    assert_hints_are_specific(checks.check_kv_cache_bytes, {
        "query heads": (variant(heads="q"), "not n_heads"),
        "no factor 2": (variant(factor=1), "keys AND values"),
        "no batch": (variant(with_batch=False), "multiply by batch"),
        "always 4 bytes": (variant(size=4), "depend on dtype"),
        "bits": (lambda *a: 8 * kv_cache_bytes(*a), "do not multiply by 8"),
    })


def test_a_crash_on_the_dtype_gets_a_plain_message():
    with pytest.raises(CheckFailed, match="raised AttributeError"):
        checks.check_kv_cache_bytes(lambda c, t, b, dtype: dtype.nbytes)
