"""The engine's log-probabilities on a tiny random Llama: each generated token's and each prompt
token's log-probability (and the top alternatives) equal log_softmax of the model's own logits on
the whole sequence, whatever the sampling settings (the raw distribution), through chunked
prefill, prefix caching, preemption and n samples."""

import pytest
import torch

from minillm.engine import Engine
from minillm.engine.logprobs import token_logprobs
from minillm.model.toy import tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny():
    return tiny_model()


def model_logprobs(model, ids) -> torch.Tensor:
    """log_softmax of the model's logits at every position of `ids`, run whole (no cache)."""
    with torch.inference_mode():
        return torch.log_softmax(model(torch.tensor([ids]))[0].float(), dim=-1)


def assert_entry(entry, want_row, token, top):
    assert entry.token_id == token
    assert entry.logprob == pytest.approx(want_row[token].item(), abs=1e-4)
    values, ids = want_row.topk(top)
    assert [t for t, _ in entry.top] == ids.tolist()
    assert [lp for _, lp in entry.top] == pytest.approx(values.tolist(), abs=1e-4)


def test_token_logprobs_is_log_softmax_and_topk():
    logits = torch.tensor([[2.0, 0.0, 1.0, -1.0], [0.0, 0.0, 3.0, 1.0]])
    got = token_logprobs(logits, [1, 3], top=2)
    want = torch.log_softmax(logits, dim=-1)
    assert [e.logprob for e in got] == pytest.approx([want[0, 1].item(), want[1, 3].item()])
    assert [t for t, _ in got[0].top] == [0, 2] and [t for t, _ in got[1].top] == [2, 3]
    assert token_logprobs(logits, [0, 0])[0].top == ()


@pytest.mark.parametrize("settings", [
    {},
    {"do_sample": True, "temperature": 0.5, "top_k": 3, "seed": 1},
    {"do_sample": True, "presence_penalty": 1.5, "frequency_penalty": 0.5,
     "repetition_penalty": 1.3, "seed": 2},
], ids=["greedy", "temperature-top_k", "penalties"])
def test_generated_logprobs_are_the_raw_distribution(tiny, settings):
    model, tok = tiny
    prompt = [5, 9, 2, 33, 17]
    engine = Engine(model, tok, num_blocks=32, block_size=4)
    out = engine.generate([prompt], max_new_tokens=10, ignore_eos=True, logprobs=3,
                          **settings)[0]
    assert len(out.logprobs) == len(out.token_ids) == 10 and out.prompt_logprobs is None
    want = model_logprobs(model, prompt + out.token_ids)
    for i, (entry, token) in enumerate(zip(out.logprobs, out.token_ids)):
        assert_entry(entry, want[len(prompt) - 1 + i], token, 3)


def test_prompt_logprobs_through_chunked_prefill_and_a_warm_prefix_cache(tiny):
    model, tok = tiny
    prompt = [(7 * i + 3) % 64 for i in range(30)]
    want = model_logprobs(model, prompt)
    engine = Engine(model, tok, num_blocks=32, block_size=4, max_num_batched_tokens=8)
    engine.generate([prompt], max_new_tokens=2)  # fills the prefix cache with the prompt
    out = engine.generate([prompt], max_new_tokens=2, prompt_logprobs=2)[0]
    assert out.num_cached_tokens == 0  # scoring every position means computing every position
    assert len(out.prompt_logprobs) == len(prompt) and out.prompt_logprobs[0] is None
    for position in range(1, len(prompt)):
        assert_entry(out.prompt_logprobs[position], want[position - 1], prompt[position], 2)
    again = engine.generate([prompt], max_new_tokens=2)[0]  # without: the cache serves again
    assert again.num_cached_tokens > 0


def test_logprobs_survive_preemption_and_come_with_every_sample(tiny):
    model, tok = tiny
    prompts = [[(3 * i + k) % 64 for i in range(14)] for k in range(3)]
    engine = Engine(model, tok, num_blocks=9, block_size=4, max_num_batched_tokens=16)
    outs = engine.generate(prompts, n=2, max_new_tokens=12, do_sample=True, seed=3,
                           ignore_eos=True, logprobs=1, prompt_logprobs=0)
    assert engine.scheduler.num_preemptions > 0
    for prompt, out in zip(prompts, outs):
        want_prompt = model_logprobs(model, prompt)
        for sample in out.samples:
            assert [e.token_id for e in sample.prompt_logprobs[1:]] == prompt[1:]
            assert [e.logprob for e in sample.prompt_logprobs[1:]] == pytest.approx(
                [want_prompt[p - 1, prompt[p]].item() for p in range(1, len(prompt))],
                abs=1e-4)
            want = model_logprobs(model, prompt + sample.token_ids)
            for i, entry in enumerate(sample.logprobs):
                assert_entry(entry, want[len(prompt) - 1 + i], sample.token_ids[i], 1)
    assert engine.blocks.num_free == engine.blocks.num_blocks


def test_logprob_settings_are_checked(tiny):
    engine = Engine(*tiny, num_blocks=8)
    with pytest.raises(ValueError, match="logprobs must be an int from 0 to 64, got -1"):
        engine.add_request([1, 2], logprobs=-1)
    with pytest.raises(TypeError, match="prompt_logprobs must be"):
        engine.add_request([1, 2], prompt_logprobs=True)
