"""Greedy and beam search through `minillm.generate` give transformers' `generate()` tokens on the
real model, SmolLM2-135M-Instruct (both loaded from the same GGUF file, fp32).

Cases: 5 prompts x num_beams 1..4, then repetition_penalty and no_repeat_ngram_size with greedy and
with 3 beams, and a seeded sampling run twice. Two prompts use the chat template, so that some
beams end on EOS within the 12 new tokens; with 2 to 4 beams these two run at length_penalty 0.5,
1.0 and 2.0 (the penalty weighs hypotheses of different lengths, which they give), the plain
prompts at 1.0."""

import pytest
import torch

import minillm
from minillm.decoding import GenerationConfig
from minillm.generation.request import eos_ids

NEW = 12
PLAIN = ["The capital of France is", "Once upon a time, there was a little",
         "def fibonacci(n):"]
CHAT = ["What is 2 + 2? Answer with one number.", "Say hello."]


@pytest.fixture(scope="module")
def smollm2():
    return minillm.load("smollm2-135m", dtype=torch.float32, device="cpu")


@pytest.fixture(scope="module")
def prompts(smollm2):
    _, tokenizer = smollm2
    ids = [tokenizer.encode(p) for p in PLAIN]
    for question in CHAT:
        text = tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                             add_generation_prompt=True)
        ids.append(tokenizer.encode(text))
    return ids


def transformers_generate(reference, prompt, eos, **fields):
    model, _ = reference
    out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW, do_sample=False, top_k=None,
                         eos_token_id=eos, pad_token_id=eos[0],
                         output_scores=True, return_dict_in_generate=True, **fields)
    rows = []
    for i in range(out.sequences.shape[0]):
        tokens = out.sequences[i, len(prompt):].tolist()
        ends = [j for j, t in enumerate(tokens) if t in eos]
        if ends:  # transformers pads a sequence that ended early
            tokens = tokens[:ends[0] + 1]
        score = (out.sequences_scores[i].item() if getattr(out, "sequences_scores", None)
                 is not None else None)
        rows.append((tokens, score))
    return rows


def check(smollm2, reference, prompt, **fields):
    model, tokenizer = smollm2
    ours = minillm.generate(model, tokenizer, prompt, max_new_tokens=NEW, **fields)
    # the same EOS ids for both (minillm's: <|im_end|> and <|endoftext|>)
    eos = eos_ids(model, tokenizer, GenerationConfig())
    theirs = transformers_generate(reference, prompt, eos, **fields)
    returned = ours.sequences or [ours]
    assert [r.token_ids for r in returned] == [t for t, _ in theirs], (
        tokenizer.decode(prompt), fields)
    for r, (_, score) in zip(returned, theirs):
        if score is not None:
            assert r.score == pytest.approx(score, abs=1e-3)
    return ours


@pytest.mark.parametrize("num_beams", [1, 2, 3, 4])
def test_greedy_and_beam_search_match_transformers(smollm2, reference, prompts, num_beams):
    reasons, uneven = set(), set()
    for k, prompt in enumerate(prompts):
        # The length penalty weighs hypotheses of different lengths: the chat prompts give them
        # (beams that end on EOS beside beams that run to the limit).
        chat = k >= len(PLAIN)
        for length_penalty in [0.5, 1.0, 2.0] if num_beams > 1 and chat else [1.0]:
            fields = dict(num_beams=num_beams, num_return_sequences=min(2, num_beams))
            if num_beams > 1:
                fields["length_penalty"] = length_penalty
            out = check(smollm2, reference, prompt, **fields)
            reasons.add(out.finish_reason)
            if len({len(r.token_ids) for r in out.sequences or [out]}) > 1:
                uneven.add(length_penalty)
    assert reasons == {"eos", "length"}, "the cases should include beams ending both ways"
    if num_beams > 1:  # returned side by side, hypotheses of different lengths, penalty not 1
        assert uneven - {1.0}, "no length penalty returned hypotheses of different lengths"


@pytest.mark.parametrize("fields", [dict(repetition_penalty=1.8),
                                    dict(no_repeat_ngram_size=2),
                                    dict(num_beams=3, repetition_penalty=1.3),
                                    dict(num_beams=3, no_repeat_ngram_size=3,
                                         length_penalty=2.0)])
def test_repeat_rules_match_transformers(smollm2, reference, prompts, fields):
    for prompt in prompts[:3]:
        check(smollm2, reference, prompt, **fields)


def test_same_seed_gives_the_same_text(smollm2):
    model, tokenizer = smollm2
    settings = dict(do_sample=True, temperature=1.0, top_p=0.9, max_new_tokens=NEW, seed=42)
    first = minillm.generate(model, tokenizer, "Once upon a time", **settings)
    second = minillm.generate(model, tokenizer, "Once upon a time", **settings)
    other = minillm.generate(model, tokenizer, "Once upon a time", **{**settings, "seed": 43})
    assert first.text == second.text and first.token_ids == second.token_ids
    assert other.token_ids != first.token_ids
