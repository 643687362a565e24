"""The table language model: its probabilities, its logits, and lesson 04's worked example where
greedy decoding loses to beam search."""

import math
from itertools import product

import pytest
import torch

from minillm.decoding import GenerationConfig, beam_search
from minillm.course.table_model import TableModel

PAPER = {
    (): {"A": 0.5, "B": 0.4, "C": 0.1},
    ("A",): {"A": 0.3, "B": 0.4, "C": 0.3},
    ("B",): {"A": 0.9, "B": 0.05, "C": 0.05},
    ("A", "B"): {"A": 0.3, "B": 0.3, "C": 0.4},
    ("B", "A"): {"A": 0.2, "B": 0.2, "C": 0.6},
}


def test_probabilities_and_logits_follow_the_table():
    model = TableModel(["A", "B", "C"], PAPER)
    assert model.probability(["B", "A", "C"]) == pytest.approx(0.4 * 0.9 * 0.6)
    assert model.probability(["C", "C"]) == pytest.approx(0.1 / 3)  # unlisted: uniform
    logits = model(torch.tensor([[7, 1, 0], [7, 0, 1]]))  # prompt token 7, then B A / A B
    assert logits.shape == (2, 3, 3)
    assert torch.allclose(logits[0, -1].exp(), torch.tensor([0.2, 0.2, 0.6]))
    assert torch.allclose(logits[1, -1].exp(), torch.tensor([0.3, 0.3, 0.4]))


def test_beam_search_finds_the_sequence_greedy_misses():
    model = TableModel(["A", "B", "C"], PAPER)
    found = {}
    for beams in (1, 2):
        config = GenerationConfig(num_beams=beams, max_new_tokens=3)
        found[beams] = beam_search(model, [0], config, eos_token_ids=[])[0].token_ids
    assert found[1] == [0, 1, 2] and found[2] == [1, 0, 2]  # A B C, then B A C
    best = max(product("ABC", repeat=3), key=model.probability)
    assert list(best) == ["B", "A", "C"]
    assert math.isclose(model.probability(best), 0.216)


@pytest.mark.parametrize("vocab, table, words", [
    (["A", "A"], {}, "distinct"),
    (["A", "B"], {(): {"A": 0.5, "B": 0.4}}, "sum to 1"),
    (["A", "B"], {(): {"A": 1.5, "B": -0.5}}, ">= 0"),
    (["A", "B"], {("Z",): {"A": 1.0}}, "not in the vocabulary"),
])
def test_bad_tables_are_refused(vocab, table, words):
    with pytest.raises(ValueError, match=words):
        TableModel(vocab, table)
