"""RoPE scaling: position interpolation and YaRN give transformers' frequencies and logits, NTK-
aware keeps the fastest pair and divides the slowest by the factor; a scaled model reads factor
times its trained context, on the readable and the fast path alike; bad settings are refused."""

import json

import pytest
import torch

from minillm.generation.kv_cache import KVCache
from minillm.loading import load_model
from minillm.layers.rope import RopeScaling, rope_frequencies
from minillm.model import ModelConfig
from test_model_tiny import VOCAB, _hf_model, _ids

TRAINED = 64  # the tiny models' max_position_embeddings
HF_TYPES = {"pi": "linear", "yarn": "yarn"}


@pytest.mark.parametrize("kind", ["pi", "yarn"])
@pytest.mark.parametrize("factor", [2.0, 4.0, 8.0])
@pytest.mark.parametrize("head_dim, theta, trained", [(64, 100000.0, 8192), (16, 10000.0, 64),
                                                      (128, 500000.0, 4096)])
def test_frequencies_are_transformers(kind, factor, head_dim, theta, trained):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                     max_position_embeddings=int(trained * factor), rope_theta=theta,
                     rope_scaling={"rope_type": HF_TYPES[kind], "factor": factor,
                                   **({"original_max_position_embeddings": trained}
                                      if kind == "yarn" else {})})
    want, want_magnitude = ROPE_INIT_FUNCTIONS[HF_TYPES[kind]](hf, "cpu")
    got, magnitude = rope_frequencies(head_dim, theta, RopeScaling(kind, factor, trained))
    torch.testing.assert_close(got, want.float(), rtol=1e-6, atol=0)
    assert magnitude == pytest.approx(want_magnitude)


@pytest.mark.parametrize("factor", [2.0, 4.0])
def test_ntk_aware_keeps_the_fastest_pair_and_divides_the_slowest(factor):
    plain, _ = rope_frequencies(64, 100000.0)
    ntk, magnitude = rope_frequencies(64, 100000.0, RopeScaling("ntk", factor, 8192))
    assert ntk[0] == plain[0] and magnitude == 1.0
    torch.testing.assert_close(ntk[-1], plain[-1] / factor)
    assert ((ntk < plain) | (ntk == plain)).all()


def test_none_reads_further_with_the_trained_angles():
    plain = rope_frequencies(64, 100000.0)
    assert all(torch.equal(torch.as_tensor(a), torch.as_tensor(b)) for a, b in
               zip(plain, rope_frequencies(64, 100000.0, RopeScaling("none", 4.0, 8192))))


def test_yarn_keeps_the_fast_pairs_and_interpolates_the_slow_ones():
    plain, _ = rope_frequencies(64, 100000.0)
    yarn, magnitude = rope_frequencies(64, 100000.0, RopeScaling("yarn", 4.0, 8192))
    turns = 8192 * plain / (2 * torch.pi)  # full turns of each pair within the trained length
    assert torch.equal(yarn[turns > 32 * 1.5], plain[turns > 32 * 1.5])
    torch.testing.assert_close(yarn[turns < 1 / 1.5], plain[turns < 1 / 1.5] / 4)
    assert magnitude == pytest.approx(0.1 * torch.log(torch.tensor(4.0)).item() + 1)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def plain_folder(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"rope-{request.param}")
    _hf_model(request.param, False).save_pretrained(folder)
    return request.param, folder


def _scaled_reference(kind, folder, rope_kind, factor):
    """transformers' model of the same weights, its config told to scale RoPE."""
    import transformers as tf

    config = tf.AutoConfig.from_pretrained(folder)
    config.rope_parameters = {"rope_type": HF_TYPES[rope_kind], "factor": factor,
                              "rope_theta": config.rope_parameters["rope_theta"],
                              **({"original_max_position_embeddings": TRAINED}
                                 if rope_kind == "yarn" else {})}
    config.max_position_embeddings = int(TRAINED * factor)
    return tf.AutoModelForCausalLM.from_pretrained(folder, config=config).eval()


@pytest.mark.parametrize("rope_kind, factor", [("pi", 2.0), ("yarn", 2.0), ("yarn", 4.0)])
def test_a_scaled_model_reads_a_longer_context_as_transformers_does(plain_folder, rope_kind,
                                                                    factor):
    kind, folder = plain_folder
    model = load_model(folder, device="cpu", fast=False, rope_scaling=(rope_kind, factor))
    assert model.config.max_seq_len == TRAINED * factor
    assert model.config.rope_scaling == RopeScaling(rope_kind, factor, TRAINED)
    ids = _ids(1, int(TRAINED * factor))  # the whole stretched window
    with torch.inference_mode():
        want = _scaled_reference(kind, folder, rope_kind, factor)(ids).logits
        got = model(ids)
    assert (got - want).abs().max().item() <= 2e-5


def test_a_config_json_with_yarn_loads_scaled(tmp_path):
    hf = _hf_model("llama", True)
    hf.config.rope_parameters = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                 "original_max_position_embeddings": TRAINED}
    hf.config.max_position_embeddings = 4 * TRAINED
    hf.save_pretrained(tmp_path)
    config = load_model(tmp_path, device="cpu", fast=False).config
    assert config.rope_scaling == RopeScaling("yarn", 4.0, TRAINED)
    assert config.max_seq_len == 4 * TRAINED
    assert ModelConfig.from_json(config.to_json()) == config


def test_the_fast_path_decodes_with_the_scaled_angles(plain_folder):
    _, folder = plain_folder
    readable = load_model(folder, device="cpu", fast=False, rope_scaling=("ntk", 2.0))
    fast = load_model(folder, device="cpu", fast=True, rope_scaling=("ntk", 2.0))
    ids = _ids(1, 100)
    with torch.inference_mode():
        want = readable(ids)[0, -30:]
        cache = KVCache.for_model(fast, 1, 100)
        fast(ids[:, :70], cache=cache)
        got = torch.cat([fast(ids[:, i:i + 1], cache=cache)[0] for i in range(70, 100)])
    assert (got - want).abs().max().item() <= 1e-4


def test_past_the_window_is_refused_without_scaling_and_read_as_trained_with_none(plain_folder):
    _, folder = plain_folder
    model = load_model(folder, device="cpu", fast=False)
    ids = _ids(1, 2 * TRAINED)
    with pytest.raises(ValueError, match=f"context window of {TRAINED}"):
        model(ids[:, :TRAINED + 1])
    further = load_model(folder, device="cpu", fast=False, rope_scaling=("none", 2.0))
    with torch.inference_mode():
        torch.testing.assert_close(further(ids)[:, :TRAINED], model(ids[:, :TRAINED]))


@pytest.mark.parametrize("args, error, words", [
    (("rope", 2.0, 64), ValueError, "must be one of ('none', 'pi', 'ntk', 'yarn')"),
    (("yarn", 0.5, 64), ValueError, "a number >= 1"),
    (("yarn", "2", 64), ValueError, "a number >= 1"),
    (("yarn", 2.0, 0), ValueError, "positive int"),
    (("yarn", 2.0, 64, 1.0, 2.0), ValueError, "fast > slow > 0"),
])
def test_bad_scalings_are_refused(args, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        RopeScaling(*args)


@pytest.mark.parametrize("value", ["yarn", ("yarn",), (4, "yarn"), {"kind": "yarn"}])
def test_load_names_the_form_rope_scaling_takes(plain_folder, value):
    with pytest.raises(TypeError, match=r"rope_scaling must be \(kind, factor\)"):
        load_model(plain_folder[1], device="cpu", rope_scaling=value)


def test_scaling_twice_and_models_without_rope_are_refused(tmp_path):
    config = ModelConfig("llama", VOCAB, 32, 2, 4, 2, 8, 48, max_seq_len=64)
    twice = config.with_rope_scaling("pi", 2.0)
    with pytest.raises(ValueError, match="already scales RoPE"):
        twice.with_rope_scaling("pi", 2.0)
    with pytest.raises(ValueError, match="RoPE scaling .* runs llama, qwen2, qwen3, not 'gpt2'"):
        ModelConfig("gpt2", VOCAB, 32, 2, 4, 4, 8, 48).with_rope_scaling("yarn", 2.0)


@pytest.mark.parametrize("key", ["rope_parameters", "rope_scaling"])  # transformers 5, 4
def test_transformers_rope_types_minillm_does_not_run_are_named(tmp_path, key):
    hf = _hf_model("llama", True)
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("rope_parameters", None)
    config[key] = {"rope_type": "llama3", "factor": 8.0, "rope_theta": 10000.0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="'llama3' is not supported.*'linear', 'yarn'"):
        load_model(tmp_path, device="cpu")


# --- scripts/rope_scaling.py ------------------------------------------------------------------

def test_the_scripts_losses_are_each_next_tokens_cross_entropy(plain_folder):
    from script_modules import script

    model = load_model(plain_folder[1], device="cpu", fast=False)
    ids = _ids(1, 40)[0].tolist()
    with torch.inference_mode():
        want = torch.nn.functional.cross_entropy(model(torch.tensor([ids]))[0, :-1],
                                                 torch.tensor(ids[1:]), reduction="none")
    got = script("rope_scaling").next_token_nll(model, ids, chunk=7)  # 39 = 5 chunks of 7 + 4
    assert got.shape == (39,)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("argv", [["--kinds", "none,rope"], ["--factors", "1"],
                                  ["--factors", "2,0"]])
def test_the_script_names_what_it_takes(argv, capsys):
    from script_modules import script

    with pytest.raises(SystemExit):
        script("rope_scaling").main(argv)
    assert "--kinds takes none, pi, ntk, yarn" in capsys.readouterr().err
