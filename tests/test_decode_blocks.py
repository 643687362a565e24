"""The fast decode step's blocks in one C call (minillm/fast/blocks.py, c/decode_blocks.c):
the Python step's logits and cache, bit for bit, in every weight format the C takes; the
steps it cannot take stay in Python."""

import pytest
import torch

from minillm.fast import blocks, optimize
from minillm.generation.kv_cache import KVCache
from minillm.kernels import without_kernels
from minillm.quant.linear import Q41Linear
from kernel_machine import layers_use_kernels
from test_fast import _tiny as tiny_model
from test_kernel_row_passes import _q4_1_blocks

pytestmark = layers_use_kernels


def _tiny(arch="llama", bias=False):
    """Widths that are multiples of 32, so that Q4_1 blocks fit every projection."""
    return tiny_model(arch, bias=bias, hidden_size=64, n_heads=4, head_dim=16,
                      intermediate_size=96)


def _fast(weights, bias=False, arch="llama"):
    """weights "q4_1": every projection from Q4_1 blocks; "q4_1 mlp": the MLP's, the
    attention's int8 (as a GGUF file that stores some tensors in another format)."""
    model = _tiny(arch, bias)
    if not weights.startswith("q4_1"):
        return optimize(model, weights)
    gen = torch.Generator().manual_seed(5)
    for block in model.layers:  # the layers a GGUF file's Q4_1 tensors become
        for owner in (block.mlp,) if weights == "q4_1 mlp" else (block.attn, block.mlp):
            for name, linear in list(owner.named_children()):
                if isinstance(linear, torch.nn.Linear):
                    out, k = linear.weight.shape
                    setattr(owner, name, Q41Linear(_q4_1_blocks(out, k, gen), linear.bias))
    return optimize(model, "q4_1")


class _Counting:
    """blocks.run, counted."""

    def __init__(self, monkeypatch):
        self.calls, self._run = 0, blocks.run
        monkeypatch.setattr(blocks, "run", self)

    def __call__(self, *args):
        self.calls += 1
        return self._run(*args)


def _steps(fast, c_blocks: bool, rows: int, cache=None):
    """Logits of 5 decode steps after a 6-token prompt, and the cache."""
    fast.fused_decode.c_blocks = c_blocks
    cache = KVCache.for_model(fast, rows, 16) if cache is None else cache
    gen = torch.Generator().manual_seed(rows)
    prompt = torch.randint(0, 80, (rows, 6), generator=gen)
    with torch.inference_mode():
        fast(prompt, cache=cache)
        logits = [fast(torch.randint(0, 80, (rows, 1), generator=gen), cache=cache)
                  for _ in range(5)]
    return torch.cat(logits, dim=1), cache


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("weights,bias", [("fp32", False), ("fp32", True), ("bf16", False),
                                          ("bf16", True), ("int8", False), ("int8", True),
                                          ("q4_1", False), ("q4_1 mlp", False)])
def test_one_c_call_gives_the_python_steps_logits_and_cache_bit_for_bit(weights, bias, rows,
                                                                         monkeypatch):
    fast = _fast(weights, bias)
    counted = _Counting(monkeypatch)
    got, got_cache = _steps(fast, True, rows)
    # every row count the kernels take here (bf16's one-row kernel only, on AVX2)
    assert counted.calls == (5 if fast.fused_decode.block_table().takes(rows) else 0)
    assert rows > 1 or counted.calls == 5
    want, want_cache = _steps(fast, False, rows)
    assert counted.calls in (0, 5)
    assert torch.equal(got, want)
    assert torch.equal(got_cache.keys[2], want_cache.keys[2])
    assert torch.equal(got_cache.values[0], want_cache.values[0])


def test_the_table_is_written_again_when_a_layer_or_a_norm_changes(monkeypatch):
    fast = _fast("int8")
    fused = fast.fused_decode
    _steps(fast, True, 1)
    first = fused._table
    _steps(fast, True, 1)
    assert fused._table is first  # unchanged layers: the same table
    changes = [
        lambda: fast.layers[2].attn.qkv_proj.replan(),  # a new route
        lambda: setattr(fast.layers[1], "mlp_norm", fast.layers[1].mlp_norm),  # nothing
        lambda: setattr(fast.layers[1].mlp_norm, "weight", torch.nn.Parameter(
            fast.layers[1].mlp_norm.weight * 0.5, requires_grad=False)),  # a new weight
        lambda: setattr(fast.layers[0].mlp.down_proj.qweight, "data",
                        fast.layers[0].mlp.down_proj.qweight.flip(1).clone()),  # new storage
    ]
    counted = _Counting(monkeypatch)
    for i, change in enumerate(changes):
        before = fused._table
        change()
        got, _ = _steps(fast, True, 1)
        assert (fused._table is before) == (i == 1), i
        assert counted.calls == 5 * (i + 1)
        want, _ = _steps(fast, False, 1)
        assert torch.equal(got, want), i


@pytest.mark.parametrize("case", ["qwen3's own qk_norm", "int8 on PyTorch's kernel",
                                  "kernels switched off"])
def test_steps_the_c_cannot_take_stay_in_python(case, monkeypatch):
    fast = _fast("int8", arch="qwen3" if case.startswith("qwen3") else "llama")
    if case == "int8 on PyTorch's kernel":
        down = fast.layers[1].mlp.down_proj
        down.path = "fused"
        down.replan()
    counted = _Counting(monkeypatch)
    if case == "kernels switched off":
        with without_kernels():
            _steps(fast, True, 1)
    else:
        _steps(fast, True, 1)
    assert counted.calls == 0


def test_more_rows_than_one_int8_call_rounds_go_in_calls_of_int8_max_rows(monkeypatch):
    from minillm.kernels import INT8_MAX_ROWS

    fast = _fast("int8")
    counted = _Counting(monkeypatch)
    rows = INT8_MAX_ROWS + 5
    got, _ = _steps(fast, True, rows)
    assert counted.calls == (5 if fast.fused_decode.block_table().takes(rows) else 0)
    want, _ = _steps(fast, False, rows)
    assert torch.equal(got, want)


def test_a_projection_that_takes_fewer_rows_keeps_those_steps_in_python(monkeypatch):
    fast = _fast("int8")
    fast.layers[1].mlp.down_proj.few_rows_max = 1  # as a route with a one-row kernel
    counted = _Counting(monkeypatch)
    _steps(fast, True, 1)
    assert counted.calls == 5
    got, _ = _steps(fast, True, 3)
    assert counted.calls == 5
    want, _ = _steps(fast, False, 3)
    assert torch.equal(got, want)


def test_a_weight_its_kernel_cannot_read_keeps_the_steps_in_python_and_their_error():
    fast = _fast("fp32")
    _, cache = _steps(fast, True, 1)
    assert fast.fused_decode._table.table is not None
    o = fast.layers[0].attn.o_proj
    o.weight.data = o.weight.data.t().contiguous().t()  # the same values, not contiguous
    with pytest.raises(ValueError, match="contiguous"), torch.inference_mode():
        fast(torch.tensor([[7]]), cache=cache)  # a decode step
    assert fast.fused_decode._table.table is None


def test_a_cache_whose_layers_differ_keeps_the_steps_in_python(monkeypatch):
    fast = _fast("int8")
    want, _ = _steps(fast, True, 1)
    cache = KVCache.for_model(fast, 1, 16)
    longer = torch.zeros(1, 2, 24, 16)  # layer 1's keys and values hold 24 positions, not 16
    cache.keys[1], cache.values[1] = longer, longer.clone()
    counted = _Counting(monkeypatch)
    got, _ = _steps(fast, True, 1, cache)
    assert counted.calls == 0
    assert torch.equal(got, want)


def test_a_family_with_its_own_qk_norm_never_builds_the_table():
    fast = _fast("int8", arch="qwen3")
    _steps(fast, True, 1)
    assert fast.fused_decode._table is None
