"""The front door for a request (minillm.generation.request): what `make_request` makes of a prompt
and its options, and that every runner (generate, stream, Engine.add_request,
speculative_generate) refuses the same bad input with the same message, because they all start
there."""

import pytest
import torch

import minillm
from minillm.model.toy import LetterTokenizer, tiny_model
from minillm.decoding import (GenerationConfig, RepetitionPenaltyProcessor, TemperatureProcessor,
                              TopPProcessor)
from minillm.engine import Engine
from minillm.generation.loop import stream
from minillm.generation.request import checked_options, make_request
from minillm.speculative import speculative_generate

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny():
    model, _ = tiny_model(max_seq_len=80, eos_token_ids=(3,))
    return model, LetterTokenizer(eos_token_ids=[4])


def test_a_request_holds_ids_config_eos_processors_and_a_seeded_sampler(tiny):
    model, tok = tiny
    rule = lambda ids, scores: scores  # noqa: E731
    request = make_request(model, tok, "bcd", GenerationConfig(max_new_tokens=5),
                           logits_processor=rule, do_sample=True, temperature=0.7, top_p=0.9,
                           repetition_penalty=1.2, seed=4, stop=["x"])
    assert request.prompts == [[1, 2, 3]] and request.prompt_ids == [1, 2, 3]
    assert not request.batch
    assert (request.config.max_new_tokens, request.config.temperature) == (5, 0.7)
    assert request.eos_ids == [3, 4]  # the model's, then the tokenizer's
    assert request.stop == ("x",)
    assert [type(p) for p in request.processors[1:]] == [
        RepetitionPenaltyProcessor, TemperatureProcessor, TopPProcessor]
    assert request.processors[0] is rule  # the caller's rule runs first
    draws = [torch.multinomial(torch.ones(50), 3, generator=request.generator("cpu")).tolist()
             for _ in range(2)]
    assert draws[0] == draws[1]  # seeded: each generator draws the same
    (sequence,) = request.sequences()
    assert sequence.prompt_ids == [1, 2, 3] and sequence.max_new_tokens == 5
    assert make_request(model, tok, "b").generator("cpu") is None  # greedy: no sampler


def test_a_batch_pads_with_the_first_eos_id_when_the_tokenizer_has_no_pad(tiny):
    model, tok = tiny
    request = make_request(model, tok, ["bc", [5, 6, 7]], ignore_eos=True, max_new_tokens=2)
    assert request.batch and request.prompts == [[1, 2], [5, 6, 7]]
    assert request.eos_ids == [] and request.pad_id == 0
    assert make_request(model, tok, ["b", "c"]).pad_id == 3


def test_the_options_alone_for_a_runner_handed_its_prompt_later(tiny):
    model, _ = tiny
    options = checked_options(model, GenerationConfig(do_sample=True), runner="x")
    assert options.prompts == [] and options.config.do_sample
    with pytest.raises(ValueError, match=r"x runs greedy decoding or sampling, not beam search "
                                         r"\(num_beams=2\)"):
        checked_options(model, num_beams=2, runner="x")


def _runners(model, tok):
    return {
        "generate": lambda prompt, **f: minillm.generate(model, tok, prompt, **f),
        "stream": lambda prompt, **f: stream(model, tok, prompt, **f),
        "Engine.add_request": lambda prompt, **f: Engine(model, tok, num_blocks=64,
                                                         block_size=4).add_request(prompt, **f),
        "speculative decoding": lambda prompt, **f: speculative_generate(model, tok, prompt,
                                                                         **f),
    }


SHARED = [  # (prompt, options, error): refused alike by every runner
    ("", {}, ValueError),
    ([1, 99], {}, ValueError),
    (42, {}, TypeError),
    ("bc", {"top_p": 0.0}, ValueError),
    ("bc", {"do_sample": True, "temperature": 0}, ValueError),
    ("bc", {"max_new_tokens": 0}, ValueError),
    ("bc", {"topp": 0.9}, TypeError),
    ("bc", {"max_new_tokens": 79}, ValueError),  # 2 + 79 > the context window of 80
    ("bc", {"max_new_tokens": 80}, ValueError),  # no room left for any prompt
    ("bc", {"logits_processor": 5}, TypeError),
]


@pytest.mark.parametrize("prompt, options, error", SHARED,
                         ids=[f"{p!r}-{o}" for p, o, _ in SHARED])
def test_every_runner_refuses_bad_input_with_the_same_message(tiny, prompt, options, error):
    messages = {}
    for name, run in _runners(*tiny).items():
        with pytest.raises(error) as info:
            run(prompt, **options)
        messages[name] = str(info.value)
    assert len(set(messages.values())) == 1, messages


@pytest.mark.parametrize("name", ["stream", "Engine.add_request", "speculative decoding"])
def test_runners_of_one_prompt_refuse_a_batch_and_beam_search_naming_themselves(tiny, name):
    run = _runners(*tiny)[name]
    runner = {"stream": "a stream"}.get(name, name)
    with pytest.raises(ValueError, match=f"{runner} takes one prompt, got a batch of 2"):
        run(["bc", "de"], max_new_tokens=2)
    with pytest.raises(ValueError, match=f"{runner} runs greedy decoding or sampling, not beam "
                                         "search"):
        run("bc", num_beams=2, max_new_tokens=2)
