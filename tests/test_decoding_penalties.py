"""OpenAI's presence and frequency penalties: checked against a hand computation of
z_j - c_j * frequency - (c_j > 0) * presence (c_j: how often token j was *generated*; the prompt
does not count), through build_processors and `generate`, and their range checks."""

import pytest
import torch

import minillm
from minillm.decoding import (FrequencyPenaltyProcessor, GenerationConfig,
                              PresencePenaltyProcessor, build_processors)
from minillm.model.toy import tiny_model

PROMPT = [3, 3, 0]             # token 3 is only in the prompt: never penalised
GENERATED = [1, 2, 1, 1, 4]    # c_1 = 3, c_2 = 1, c_4 = 1
SCORES = [0.5, 1.0, 2.0, -1.0, 0.0, 0.25]


def hand(presence: float, frequency: float) -> list[float]:
    counts = {t: GENERATED.count(t) for t in set(GENERATED)}
    return [z - counts.get(j, 0) * frequency - (counts.get(j, 0) > 0) * presence
            for j, z in enumerate(SCORES)]


def run(processors) -> list[float]:
    ids = torch.tensor([PROMPT])
    for processor in processors:  # the first call sees the prompt alone: where generation starts
        processor(ids, torch.zeros(1, len(SCORES)))
    ids = torch.tensor([PROMPT + GENERATED])
    scores = torch.tensor([SCORES])
    for processor in processors:
        scores = processor(ids, scores)
    return scores[0].tolist()


@pytest.mark.parametrize("presence,frequency", [(0.5, 0.25), (2.0, 0.0), (0.0, -1.5),
                                                (-2.0, 2.0)])
def test_penalties_equal_the_hand_computation(presence, frequency):
    got = run([PresencePenaltyProcessor(presence), FrequencyPenaltyProcessor(frequency)])
    assert got == pytest.approx(hand(presence, frequency))
    config = GenerationConfig(presence_penalty=presence, frequency_penalty=frequency)
    assert run(build_processors(config)) == pytest.approx(hand(presence, frequency))


def test_the_worked_example():
    # token 1: 1.0 - 3 x 0.25 - 0.5 = -0.25;  token 2: 2.0 - 0.25 - 0.5 = 1.25;  token 3 as is
    assert run([PresencePenaltyProcessor(0.5), FrequencyPenaltyProcessor(0.25)]) == \
        pytest.approx([0.5, -0.25, 1.25, -1.0, -0.75, 0.25])


def test_each_row_counts_its_own_tokens_and_an_explicit_prompt_length():
    ids = torch.tensor([[9, 1, 1, 2], [9, 2, 0, 0]])
    scores = torch.zeros(2, 4)
    got = FrequencyPenaltyProcessor(1.0, prompt_length=1)(ids, scores)
    assert got.tolist() == [[0.0, -2.0, -1.0, 0.0], [-2.0, 0.0, -1.0, 0.0]]
    got = PresencePenaltyProcessor(1.0, prompt_length=1)(ids, scores)
    assert got.tolist() == [[0.0, -1.0, -1.0, 0.0], [-1.0, 0.0, -1.0, 0.0]]


def test_generate_with_penalties_equals_a_greedy_loop_written_out():
    model, tok = tiny_model()
    prompt, presence, frequency = [4, 8, 15, 16], 0.7, 0.9
    got = minillm.generate(model, tok, prompt, max_new_tokens=12, ignore_eos=True,
                           presence_penalty=presence, frequency_penalty=frequency).token_ids
    ids, new = list(prompt), []
    with torch.inference_mode():
        for _ in range(12):
            z = model(torch.tensor([ids]))[0, -1].float()
            for token in set(new):
                z[token] -= new.count(token) * frequency + presence
            new.append(int(z.argmax()))
            ids.append(new[-1])
    assert got == new
    plain = minillm.generate(model, tok, prompt, max_new_tokens=12, ignore_eos=True).token_ids
    assert plain != got  # the penalties changed the answer


@pytest.mark.parametrize("name", ["presence_penalty", "frequency_penalty"])
def test_penalties_outside_minus_two_to_two_are_refused(name):
    with pytest.raises(ValueError, match=rf"{name} must be a number from -2.0 to 2.0.*got 2.5"):
        GenerationConfig(**{name: 2.5})
    with pytest.raises(TypeError, match=name):
        GenerationConfig(**{name: "1"})
    assert getattr(GenerationConfig(**{name: -2.0}), name) == -2.0
