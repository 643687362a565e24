"""`bench step` (minillm/tools/bench/step.py): timing the fused decode step changes nothing it
computes (the same logits, the same cache, the same PyTorch operations in the same order),
every operation the step runs lies inside a named timer, the rows add up to the step, decode.py
is left as it was, and bad options are refused.

Nothing here compares a time against a threshold: the checks hold however busy the machine is."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from minillm import kernels
from minillm.fast import decode, optimize
from minillm.generation.kv_cache import KVCache
from minillm.tools.bench import step
from minillm.tools.cli import main
from tests.test_fast import _tiny

CONTEXT = 9


class _Record(TorchDispatchMode):
    """Every PyTorch operation run, with the row whose timer it ran inside (`inside[0]`)."""

    def __init__(self, inside):
        super().__init__()
        self.inside, self.ops = inside, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((str(func.overloadpacket), self.inside[0]))
        return func(*args, **(kwargs or {}))


def _primed(model):
    """A cache holding CONTEXT tokens, and the next token."""
    cache = KVCache.for_model(model, 1, CONTEXT + 4)
    prompt = torch.arange(CONTEXT)[None] % model.config.vocab_size
    with torch.inference_mode():
        model(prompt, cache=cache)
    return cache, prompt[:, -1:]


def _copy(cache):
    twin = KVCache(cache.n_layers, 1, cache.keys[0].shape[1], cache.keys[0].shape[-1],
                   cache.max_tokens, cache.keys[0].dtype)
    for a, b in zip(twin.keys + twin.values, cache.keys + cache.values):
        a.copy_(b)
    twin.length = cache.length
    return twin


MODELS = [("llama", True, "fp32"), ("llama", False, "int8"), ("qwen3", True, "fp32"),
          ("llama", False, "bf16")]


@pytest.mark.parametrize("arch,tied,weights", MODELS)
def test_timing_the_step_changes_nothing_it_computes(arch, tied, weights, one_torch_thread):
    model = optimize(_tiny(arch, tied=tied), weights)
    cache, token = _primed(model)
    twin = _copy(cache)
    spent = [0.0] * len(step.NAMES)
    functions = {name: getattr(decode, name) for name in step.TIMED}
    with torch.inference_mode():
        expected = model(token, cache=cache)
        with step.timers(model.fused_decode, spent):
            assert decode._rope_cache is not functions["_rope_cache"]
            got = model(token, cache=twin)
    assert {name: getattr(decode, name) for name in step.TIMED} == functions  # put back
    assert torch.equal(got, expected)
    assert twin.length == cache.length == CONTEXT + 1
    for a, b in zip(twin.keys + twin.values, cache.keys + cache.values):
        assert torch.equal(a, b)
    assert all(s > 0 for name, s in zip(step.NAMES, spent) if name != "residual adds")


@pytest.mark.parametrize("arch,tied,weights", MODELS)
def test_the_same_operations_run_and_each_inside_a_named_timer(arch, tied, weights,
                                                                 one_torch_thread, monkeypatch):
    model = optimize(_tiny(arch, tied=tied), weights)
    cache, token = _primed(model)
    twin = _copy(cache)
    inside = [None]
    timer = step._timer

    def naming(spent, i, f):
        timed = timer(spent, i, f)

        def run(*args):
            inside[0] = step.NAMES[i]
            try:
                return timed(*args)
            finally:
                inside[0] = None

        return run

    monkeypatch.setattr(step, "_timer", naming)
    model.fused_decode.c_blocks = False  # the Python step, which the timers time
    with torch.inference_mode():
        with _Record(inside) as plain:
            model.fused_decode(token, cache)
        with step.timers(model.fused_decode, [0.0] * len(step.NAMES)), _Record(inside) as timed:
            model.fused_decode(token, twin)
    assert [op for op, _ in timed.ops] == [op for op, _ in plain.ops]
    outside = [op for op, name in timed.ops if name is None]
    assert not outside, f"operations outside every timer: {outside}"
    named = {name for _, name in timed.ops}  # a C kernel runs no PyTorch operation
    assert {"embed", "rope angles", "rope+cache write", "silu*mul", "lm head"} <= named


def test_measure_adds_up_and_the_table_covers_every_row(one_torch_thread):
    model = optimize(_tiny(), "int8")
    figures = step.measure(model, steps=5, context=CONTEXT)
    for s in figures["per_step"]:
        assert sum(s["ops"]) <= s["wall"]  # the timers lie inside the step, one after another
    walls = sorted(s["wall"] for s in figures["per_step"])
    assert figures["step_timed"] == pytest.approx(sum(walls[1:4]) / 3)  # the middle 3 of 5
    assert sum(figures["ops"].values()) + figures["between"] == pytest.approx(
        figures["step_timed"], rel=1e-9)  # the rows add up to the step, whatever the load
    assert set(figures["matmul_bytes"]) == {"qkv proj", "o proj", "gate_up proj", "down proj",
                                            "lm head"}
    assert figures["matmul_bytes"]["lm head"] == 80 * 48 + 80 * 4  # int8 weights, fp32 scales
    text = step.table(figures, 10e9)
    rows = {line[:17].strip(): line for line in text.splitlines()}
    for name in (*step.NAMES, step.BETWEEN, "sum"):
        assert name in rows, name
    shares = [float(rows[n][26:33].rstrip("%")) for n in (*step.NAMES, step.BETWEEN)]
    assert sum(shares) == pytest.approx(100, abs=0.1 * len(shares))
    assert rows["sum"][17:26].strip() == f"{1e3 * figures['step_timed']:.3f}"
    assert "LM head alone" in text
    if kernels.dispatch.cpu_kernels("cpu"):  # the step generate runs: its blocks in one C call
        assert figures["step_one_call"] > 0 and "blocks in one C call" in text
        assert "untimed (in Python" in text
    else:
        assert figures["step_one_call"] is None and "one C call" not in text
    assert model.fused_decode.c_blocks  # put back


def test_the_middle_half_of_the_steps_by_wall_time():
    assert step._middle_half([5.0, 1.0, 9.0, 2.0, 3.0, 4.0, 100.0, 0.1]) == [3, 4, 5, 0]
    assert step._middle_half([2.0, 1.0, 3.0]) == [1, 0, 2]  # fewer than 4: all of them


def test_the_command_runs_on_a_tiny_model_folder(tmp_path, capsys, one_torch_thread):
    import transformers as tf

    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=64)
    tf.LlamaForCausalLM(config).save_pretrained(tmp_path)
    json_file = tmp_path / "step.json"
    assert main(["bench", "step", "--model", str(tmp_path), "--weights", "int8",
                 "--threads", "1", "--steps", "4", "--context", "8",
                 "--json", str(json_file)]) == 0
    out = capsys.readouterr().out
    assert "int8, batch 1, 1 thread(s)" in out and "lm head" in out and "between the ops" in out
    assert '"weights": "int8"' in json_file.read_text()
    assert torch.get_num_threads() == 1  # put back as it was
    with kernels.without_kernels():
        assert main(["bench", "step", "--model", str(tmp_path), "--steps", "3",
                     "--context", "8"]) == 0
    assert "minillm's kernels off" in capsys.readouterr().out
    assert main(["bench", "step", "--model", str(tmp_path), "--context", "64"]) == 2
    assert "context must be an int from 1 to 63" in capsys.readouterr().err
    assert main(["bench", "step", "--model", str(tmp_path), "--weights", "q4_1"]) == 2
    assert "GGUF" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--weights", "fp64"], "invalid choice: 'fp64'"),
    (["--steps", "2"], "steps must be an int >= 3, got '2'"),
    (["--threads", "0"], "threads must be an int >= 1, got '0'"),
    (["--context", "x"], "context must be an int >= 1, got 'x'"),
])
def test_bad_options_are_refused_with_what_is_allowed(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "step", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_model_without_the_fused_step_is_refused():
    with pytest.raises(ValueError, match="no fused decode step"):
        step.measure(_tiny(), steps=3, context=4)  # the readable model
    with pytest.raises(ValueError, match="unknown weight format 'int3'"):
        step.run(weights="int3")
