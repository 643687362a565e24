"""Several LoRA adapters served in one batch (minillm/engine/lora.py): each row gets its own
adapter, a batch of mixed adapters gives each request what its adapter merged into the weights
gives alone, and cached blocks are never shared across adapters. An adapter file reads back
what was saved, and fit_adapter moves an adapter of q/k/v and gate/up onto the fast path's fused
layers with the same outputs."""

import copy

import pytest
import torch
from torch import nn

import minillm
from minillm.engine import Engine
from minillm.engine.lora import (LoRALinear, MultiLoRA, fit_adapter, load_adapter, random_adapter,
                                 save_adapter)
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


def test_an_adapter_file_reads_back_what_was_saved(tmp_path):
    model, _ = tiny_model()
    adapter = random_adapter(model, TARGETS, rank=4, seed=1)
    back = load_adapter(save_adapter(tmp_path / "a.safetensors", adapter))
    assert sorted(back) == sorted(adapter)
    for layer, (A, B) in adapter.items():
        assert torch.equal(back[layer][0], A) and torch.equal(back[layer][1], B)
    assert fit_adapter(model, back).keys() == adapter.keys()  # the readable model: kept as is
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_adapter(tmp_path / "missing.safetensors")


def test_fit_adapter_moves_the_parts_into_the_fast_paths_fused_layers():
    """q, v (ranks 4 each) into qkv_proj (rank 8), gate into gate_up_proj; o and down kept; the
    other adapter (k, up: rank 2) padded to 8. Logits and greedy tokens equal the readable
    model's with the separate layers."""
    model, tokenizer = tiny_model(seed=3)
    fast = optimize(copy.deepcopy(model), "fp32")
    adapters = {"a": random_adapter(model, ("q_proj", "v_proj", "o_proj", "gate_proj",
                                            "down_proj"), rank=4, seed=1, size=0.5),
                "b": random_adapter(model, ("k_proj", "up_proj"), rank=2, seed=2, size=0.5)}
    fitted = {name: fit_adapter(fast, adapter, rank=8) for name, adapter in adapters.items()}
    A, B = fitted["a"]["layers.0.attn.qkv_proj"]
    assert A.shape == (8, 32) and B.shape == (64, 8)  # q 32 + k 16 + v 16 rows
    assert not B[32:48].any()  # k's rows: adapter a leaves k alone
    assert sorted(fitted["b"]) == sorted(f"layers.{i}.{part}" for i in range(2)
                                         for part in ("attn.qkv_proj", "mlp.gate_up_proj"))
    plain = MultiLoRA(model, {n: fit_adapter(model, a, rank=4) for n, a in adapters.items()})
    with pytest.warns(RuntimeWarning, match="fused decode step skips the adapters"):
        fused = MultiLoRA(fast, fitted)
    x = torch.tensor([[5, 9, 2, 7, 1]] * 3)
    with torch.no_grad(), plain.rows([0, 1, -1]):
        want = model(x)
    with torch.no_grad(), fused.rows([0, 1, -1]):
        torch.testing.assert_close(fast(x), want, rtol=1e-4, atol=1e-4)
    for name in ("a", "b", None):
        texts = [Engine(m, tokenizer, num_blocks=32, block_size=4, lora=lora).generate(
                     ["hello world"], max_new_tokens=8, ignore_eos=True, adapter=name)[0].text
                 for m, lora in ((model, plain), (fast, fused))]
        assert texts[0] == texts[1], name


def test_fit_adapter_says_what_does_not_fit():
    model, _ = tiny_model()
    fast = optimize(copy.deepcopy(model), "fp32")
    A, B = torch.zeros(4, 32), torch.zeros(32, 4)
    with pytest.raises(ValueError, match="not a LoRA pair"):
        fit_adapter(model, {"layers.0.attn.o_proj": (A, B.T)})
    with pytest.raises(ValueError, match="layers.0.attn.k_proj: A has shape .* the layer needs "
                                         "\\(rank, 32\\) and \\(16, rank\\)"):
        fit_adapter(fast, {"layers.0.attn.k_proj": (A, B)})  # k is 16 wide, not 32
    with pytest.raises(ValueError, match="rank 4 is above the rank 2 asked for"):
        fit_adapter(model, {"layers.0.attn.o_proj": (A, B)}, rank=2)
    with pytest.raises(ValueError, match="'layers.0' is a LlamaBlock, not a linear layer"):
        fit_adapter(model, {"layers.0": (A, B)})


def test_adapters_install_on_quantized_layers_that_hold_no_parameters():
    model, _ = tiny_model()
    fast = optimize(model, "int8")
    with pytest.warns(RuntimeWarning):
        lora = MultiLoRA(fast, {"a": random_adapter(fast, ("o_proj",), rank=2, seed=0)})
    layer = lora.layers[0]
    assert not list(layer.base.parameters())  # Int8Linear: buffers only
    x = torch.randn(2, 3, layer.base.in_features)
    layer.row_adapters = torch.tensor([0, -1])
    out = layer(x)
    torch.testing.assert_close(out[0], layer.base(x)[0] + x[0] @ layer.A[0].T @ layer.B[0].T)
    torch.testing.assert_close(out[1], layer.base(x)[1])
