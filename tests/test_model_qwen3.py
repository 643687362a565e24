"""Qwen3, the family added through the registry alone (minillm/model/qwen3.py + one entry):
transformers' logits to 1e-5 on a tiny random config, and the same greedy tokens through
generate, the fast path, the engine, speculative decoding and tensor parallelism."""

import pytest
import torch

import minillm
from minillm.engine import Engine
from minillm.model.toy import LetterTokenizer
from minillm.fast import optimize
from minillm.loading import load_model
from minillm.model import Qwen3Model
from minillm.speculative import ModelDraft, first_layers, speculative_generate

PROMPT = [5, 17, 3, 40, 22, 9, 31]


@pytest.fixture(scope="module", params=["tied", "untied-biased"])
def qwen3(request, tmp_path_factory):
    """A tiny random Qwen3: 3 key/value heads (two ranks split them unevenly), head_dim set on
    its own (16, not hidden 48 / 6 heads), and non-trivial q/k norm weights."""
    import transformers as tf

    torch.manual_seed(0)
    config = tf.Qwen3Config(vocab_size=64, hidden_size=48, intermediate_size=40,
                            num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=3,
                            head_dim=16, max_position_embeddings=128,
                            tie_word_embeddings=request.param == "tied",
                            attention_bias=request.param.endswith("biased"),
                            initializer_range=0.3, eos_token_id=[2])
    hf = tf.Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight", "bias")):
                p.normal_(1.0 if "norm" in name else 0.0, 0.3)
    folder = tmp_path_factory.mktemp(f"qwen3-{request.param}")
    hf.save_pretrained(folder)
    return hf, folder


def test_logits_match_transformers(qwen3):
    hf, folder = qwen3
    readable = load_model(folder, device="cpu", fast=False)
    assert type(readable) is Qwen3Model and readable.config.head_dim == 16
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        want = hf(ids).logits
        torch.testing.assert_close(readable(ids), want, atol=1e-5, rtol=0)
        torch.testing.assert_close(optimize(readable)(ids), want, atol=1e-4, rtol=0)


def test_greedy_tokens_agree_on_every_runner(qwen3):
    hf, folder = qwen3
    model = load_model(folder, device="cpu")  # the fast path
    tok = LetterTokenizer()
    with torch.inference_mode():
        out = hf.generate(torch.tensor([PROMPT]), max_new_tokens=12, min_new_tokens=12,
                          do_sample=False, top_k=None, top_p=None, temperature=None)
    want = out[0, len(PROMPT):].tolist()
    assert minillm.generate(model, tok, PROMPT, max_new_tokens=12, ignore_eos=True).token_ids \
        == want
    engine_out = Engine(model, tok, num_blocks=16, block_size=4).generate(
        [PROMPT, PROMPT[:3]], max_new_tokens=12, ignore_eos=True)
    assert engine_out[0].token_ids == want
    spec = speculative_generate(model, tok, PROMPT, ModelDraft(first_layers(model, 1)), k=3,
                                max_new_tokens=12, ignore_eos=True)
    assert spec.token_ids == want


@pytest.mark.slow
def test_tensor_parallel_on_two_processes(qwen3):
    from minillm.distributed import compare_tensor_parallel

    _, folder = qwen3
    report = compare_tensor_parallel(str(folder), PROMPT, world_size=2, new_tokens=6)
    assert report.max_abs_diff < 1e-4 and report.top1_agree and report.tokens_equal, report
