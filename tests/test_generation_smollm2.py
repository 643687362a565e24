"""The generation loop on the real model (SmolLM2-135M): the cache changes no token, batching
changes no token, and greedy decoding gives exactly transformers' greedy tokens.

Cost control (this runs in `make test` on a 2-core CPU):
- the ten prompts x 64 tokens run as one left-padded batch, with the cache;
- the no-cache side of "cache equals no cache" for all ten x 64 is computed by one forward pass
  over each full sequence (prompt + the 64 cached tokens): position i of that pass is exactly
  what the no-cache loop computes at step i (the model is causal), so its argmax at every
  position is the token the no-cache loop picks, given the tokens before it. By induction the
  loop picks the same 64 tokens if and only if every argmax matches. The real `use_cache=False`
  loop (O(n^2)) then runs on three of the prompts for 24 tokens;
- "batch equals alone" runs two prompts alone: the shortest (most padded) and a middle one.
"""

import pytest
import torch

import minillm
from minillm.generation.loop import generate, stream

pytestmark = pytest.mark.slow

NEW_TOKENS = 64
PROMPTS = [
    "The capital of France is",
    "Once upon a time",
    "def fibonacci(n):",
    "The three primary colors are red,",
    "Water boils at",
    "To make a cup of tea, first",
    "Photosynthesis is the process by which green plants",
    "1, 2, 3, 4,",
    "The largest planet in the solar system",
    "In 1969, Neil Armstrong became the first person to",
]


@pytest.fixture(scope="module")
def smollm2():
    torch.manual_seed(0)
    return minillm.load("smollm2-135m", dtype=torch.float32, device="cpu")


@pytest.fixture(scope="module")
def prompt_ids(smollm2):
    _, tokenizer = smollm2
    ids = [tokenizer.encode(p) for p in PROMPTS]
    assert len({len(i) for i in ids}) > 3, "the prompts should have different lengths"
    return ids


@pytest.fixture(scope="module")
def cached_batch(smollm2, prompt_ids):
    model, tokenizer = smollm2
    return generate(model, tokenizer, prompt_ids, max_new_tokens=NEW_TOKENS, do_sample=False)


def test_cache_gives_the_same_tokens_as_recomputing(smollm2, prompt_ids, cached_batch):
    model, _ = smollm2
    assert sum(len(r.token_ids) for r in cached_batch) > 5 * NEW_TOKENS
    with torch.inference_mode():
        for prompt, ids, result in zip(PROMPTS, prompt_ids, cached_batch):
            full = torch.tensor([ids + result.token_ids])
            logits = model(full)  # no cache: every position computed from scratch
            picks = logits[0, len(ids) - 1:-1].argmax(-1).tolist()
            assert picks == result.token_ids, prompt


def test_no_cache_loop_gives_the_same_tokens(smollm2, prompt_ids, cached_batch):
    model, tokenizer = smollm2
    rows = [0, 3, 7]
    recomputed = generate(model, tokenizer, [prompt_ids[n] for n in rows], max_new_tokens=24,
                          do_sample=False, use_cache=False)
    for n, r in zip(rows, recomputed):
        assert r.token_ids == cached_batch[n].token_ids[:len(r.token_ids)], PROMPTS[n]
        assert len(r.token_ids) == 24 or r.finish_reason == "eos"


def test_batch_gives_each_prompt_its_own_tokens(smollm2, prompt_ids, cached_batch):
    model, tokenizer = smollm2
    lengths = [len(i) for i in prompt_ids]
    middle = sorted(range(len(lengths)), key=lengths.__getitem__)[len(lengths) // 2]
    for n in (lengths.index(min(lengths)), middle):  # the most padded one, and one between
        alone = generate(model, tokenizer, prompt_ids[n], max_new_tokens=NEW_TOKENS,
                         do_sample=False)
        assert alone.token_ids == cached_batch[n].token_ids, PROMPTS[n]
        assert alone.text == cached_batch[n].text


def test_greedy_equals_transformers_generate(reference, prompt_ids, cached_batch):
    hf_model, _ = reference
    eos = [2, 0]  # minillm stops at the model's and the tokenizer's EOS ids: <|im_end|>, <|endoftext|>
    longest = max(len(p) for p in prompt_ids)
    input_ids = torch.tensor([[2] * (longest - len(p)) + p for p in prompt_ids])
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompt_ids])
    with torch.inference_mode():
        out = hf_model.generate(input_ids, attention_mask=mask, do_sample=False,
                                max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=2,
                                top_k=None, top_p=None, temperature=None)
    for n, ours in enumerate(cached_batch):
        theirs = out[n, longest:].tolist()
        if ours.finish_reason == "eos":
            theirs = theirs[:len(ours.token_ids)]  # transformers pads after EOS
        assert ours.token_ids == theirs, PROMPTS[n]


def test_text_is_the_decoded_tokens_and_stream_matches(smollm2, prompt_ids, cached_batch):
    model, tokenizer = smollm2
    for ours in cached_batch[:3]:
        shown = [t for t in ours.token_ids if t not in (0, 2)]
        assert ours.text == tokenizer.decode(shown)
    pieces = list(stream(model, tokenizer, prompt_ids[0], max_new_tokens=16, do_sample=False))
    assert "".join(pieces) == "".join(
        generate(model, tokenizer, prompt_ids[0], max_new_tokens=16, do_sample=False).text)
    assert len(pieces) > 4


def test_stop_string_on_the_real_model(smollm2, cached_batch):
    model, tokenizer = smollm2
    full = cached_batch[0].text
    word = full.split()[2]
    out = generate(model, tokenizer, PROMPTS[0], max_new_tokens=NEW_TOKENS, stop=[word])
    assert out.finish_reason == "stop"
    assert out.text == full[:full.index(word)]


def test_chat_prompt_ends_at_eos(smollm2):
    model, tokenizer = smollm2
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Say hi."}])
    out = generate(model, tokenizer, prompt, max_new_tokens=48)
    assert out.finish_reason == "eos" and out.token_ids[-1] == 2
    assert "<|im_end|>" not in out.text and out.text.strip()
