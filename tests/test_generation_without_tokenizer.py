"""A model folder without a tokenizer still generates from token ids (text stays empty); text
prompts and stop strings, which need a tokenizer, are clear errors."""

import pytest
import torch

import minillm
from minillm.model import LlamaModel, ModelConfig, build_model


@pytest.fixture(scope="module")
def model():
    config = ModelConfig(arch="llama", vocab_size=50, hidden_size=16, n_layers=2, n_heads=4,
                         n_kv_heads=2, head_dim=4, intermediate_size=24, max_seq_len=64,
                         eos_token_ids=())
    torch.manual_seed(0)
    with torch.device("meta"):
        shapes = LlamaModel(config).state_dict()
    weights = {name: torch.randn(t.shape) * 0.5 for name, t in shapes.items()}
    return build_model(config, weights)


def test_ids_in_ids_out(model):
    result = minillm.generate(model, None, [5, 6, 7], max_new_tokens=5)
    assert len(result.token_ids) == 5 and result.finish_reason == "length"
    assert result.text == ""
    ids = torch.tensor([[5, 6, 7]])
    with torch.inference_mode():
        for _ in range(5):
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert result.token_ids == ids[0, 3:].tolist(), "greedy from ids equals the plain argmax loop"


def test_text_prompt_without_tokenizer_is_a_clear_error(model):
    with pytest.raises(TypeError, match="there is no tokenizer"):
        minillm.generate(model, None, "hello", max_new_tokens=2)


def test_stop_strings_without_tokenizer_are_a_clear_error(model):
    with pytest.raises(ValueError, match="stop strings need a tokenizer"):
        minillm.generate(model, None, [5, 6], max_new_tokens=2, stop=["x"])
