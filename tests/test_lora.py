"""Several LoRA adapters served in one batch (minillm/engine/lora.py): each row gets its own
adapter, a batch of mixed adapters gives each request what its adapter merged into the weights
gives alone, and cached blocks are never shared across adapters."""

import copy

import pytest
import torch
from torch import nn

import minillm
from minillm.engine import Engine
from minillm.engine.lora import LoRALinear, MultiLoRA, random_adapter
from minillm.fast import optimize
from minillm.model.toy import tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TARGETS = ("q_proj", "v_proj", "o_proj", "down_proj")


def merged(model, adapter, scale=1.0):
    """A copy of `model` with `adapter` added into its weights: W + scale * B A."""
    copy_ = copy.deepcopy(model)
    modules = dict(copy_.named_modules())
    with torch.no_grad():
        for name, (A, B) in adapter.items():
            modules[name].weight += scale * B @ A
    return copy_


@pytest.fixture
def served():
    model, tokenizer = tiny_model(seed=3)
    adapters = {"a": random_adapter(model, TARGETS, rank=4, seed=1, size=0.5),
                "b": random_adapter(model, TARGETS[2:], rank=4, seed=2, size=0.5)}
    plain = copy.deepcopy(model)
    lora = MultiLoRA(model, adapters, scale=2.0)
    return model, tokenizer, adapters, plain, lora


def test_each_row_adds_its_own_adapter_and_minus_one_adds_none():
    torch.manual_seed(0)
    base = nn.Linear(6, 5, bias=False)
    A, B = torch.randn(2, 3, 6), torch.randn(2, 5, 3)
    layer = LoRALinear(base, A, B, scale=0.5)
    x = torch.randn(3, 4, 6)
    assert torch.equal(layer(x), base(x))  # no rows set: the base layer
    layer.row_adapters = torch.tensor([1, -1, 0])
    out = layer(x)
    for row, adapter in enumerate([1, -1, 0]):
        w = base.weight + (0.5 * B[adapter] @ A[adapter] if adapter >= 0 else 0)
        torch.testing.assert_close(out[row], x[row] @ w.T)
    layer.row_adapters = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="2 adapter ids for a batch of 3 rows"):
        layer(x)


def test_a_mixed_batch_gives_each_request_its_merged_model_alone(served):
    model, tokenizer, adapters, plain, lora = served
    prompts = ["abcab", "bca", "cabbage", "aaab", "bacca", "cab"]
    names = ["a", "b", None, "b", "a", None]
    engine = Engine(model, tokenizer, num_blocks=64, block_size=4, max_num_seqs=6, lora=lora)
    ids = [engine.add_request(p, adapter=n, max_new_tokens=12, ignore_eos=True)
           for p, n in zip(prompts, names)]
    finals = engine.run()
    reference = {None: plain, "a": merged(plain, adapters["a"], 2.0),
                 "b": merged(plain, adapters["b"], 2.0)}
    for rid, prompt, name in zip(ids, prompts, names):
        want = minillm.generate(reference[name], tokenizer, prompt, max_new_tokens=12,
                                ignore_eos=True)
        assert finals[rid].token_ids == want.token_ids, (prompt, name)
    assert len({tuple(finals[r].token_ids) for r in ids[:2]}) == 2


def test_cached_blocks_belong_to_their_adapter(served):
    model, tokenizer, adapters, plain, lora = served
    engine = Engine(model, tokenizer, num_blocks=64, block_size=4, max_num_seqs=2, lora=lora)
    prompt = "abcabcabcabcab"  # 14 letters: three full blocks of 4
    first = engine.generate([prompt], max_new_tokens=4, ignore_eos=True, adapter="a")[0]
    again = engine.generate([prompt], max_new_tokens=4, ignore_eos=True, adapter="a")[0]
    other = engine.generate([prompt], max_new_tokens=4, ignore_eos=True, adapter="b")[0]
    assert first.num_cached_tokens == 0 and again.num_cached_tokens == 12
    assert other.num_cached_tokens == 0  # the same tokens, computed under another adapter
    want = minillm.generate(merged(plain, adapters["b"], 2.0), tokenizer, prompt,
                            max_new_tokens=4, ignore_eos=True)
    assert other.token_ids == want.token_ids


def test_installing_on_a_fast_model_says_its_fused_step_is_off_and_remove_restores_it():
    model, _ = tiny_model()
    fast = optimize(model)
    step = fast.fused_decode
    if step is None:
        pytest.skip("this model got no fused decode step here")
    with pytest.warns(RuntimeWarning, match="fused decode step skips the adapters"):
        lora = MultiLoRA(fast, {"a": random_adapter(fast, ("o_proj",), rank=2, seed=0)})
    assert fast.fused_decode is None
    lora.remove()
    assert fast.fused_decode is step


def test_remove_puts_the_model_back(served):
    model, tokenizer, _, plain, lora = served
    lora.remove()
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    x = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(model(x), plain(x))


def test_bad_adapters_say_what_is_wrong(served):
    model, tokenizer, adapters, _, lora = served
    with pytest.raises(ValueError, match="unknown adapter 'c'; this engine serves"):
        Engine(model, tokenizer, lora=lora).add_request("abc", adapter="c")
    with pytest.raises(ValueError, match="this engine serves no LoRA adapters"):
        Engine(*tiny_model()).add_request("abc", adapter="a")
    fresh, _ = tiny_model()
    with pytest.raises(ValueError, match="ranks \\[2, 4\\]"):
        MultiLoRA(fresh, {"a": random_adapter(fresh, ("o_proj",), 2, 0),
                          "b": random_adapter(fresh, ("o_proj",), 4, 0)})
    A, B = random_adapter(fresh, ("o_proj",), 2, 0)["layers.0.attn.o_proj"]
    with pytest.raises(ValueError, match="B has shape"):
        MultiLoRA(fresh, {"a": {"layers.0.attn.o_proj": (A, B.T)}})
    with pytest.raises(ValueError, match="the model has no layer 'nope'"):
        MultiLoRA(fresh, {"a": {"nope": (A, B)}})
    with pytest.raises(ValueError, match="no layer of the model is named"):
        random_adapter(fresh, ("lm_nope",), 2, 0)
