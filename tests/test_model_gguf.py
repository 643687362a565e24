"""The GGUF loader on tiny files written here with `gguf.GGUFWriter` from tiny transformers models,
the way llama.cpp's converter writes them (Llama's q/k rows permuted, GPT-2's Conv1D weights
transposed): config from the metadata, weights back in place, logits within 1e-5."""

import numpy as np
import pytest
import torch

from minillm.loading import load_model

from test_model_tiny import VOCAB, _hf_model, _ids, _llama_cpp_permute

LLAMA_PARTS = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
GPT2_PARTS = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output",
              "ln_2": "ffn_norm", "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}


def _gguf_name(arch, name):
    """A transformers tensor name -> llama.cpp's GGUF name."""
    name = name.removeprefix("model.").removeprefix("transformer.")
    fixed = {"embed_tokens.weight": "token_embd.weight", "wte.weight": "token_embd.weight",
             "wpe.weight": "position_embd.weight", "norm.weight": "output_norm.weight",
             "ln_f.weight": "output_norm.weight", "ln_f.bias": "output_norm.bias",
             "lm_head.weight": "output.weight"}
    if name in fixed:
        return fixed[name]
    _, i, rest = name.split(".", 2)
    part, kind = rest.rsplit(".", 1)
    parts = GPT2_PARTS if arch == "gpt2" else LLAMA_PARTS
    return f"blk.{i}.{parts[part]}.{kind}"


def _write_gguf(hf, arch, path):
    import gguf

    c = hf.config
    writer = gguf.GGUFWriter(str(path), arch)
    if arch == "gpt2":
        writer.add_block_count(c.n_layer)
        writer.add_context_length(c.n_positions)
        writer.add_embedding_length(c.n_embd)
        writer.add_feed_forward_length(4 * c.n_embd)
        writer.add_head_count(c.n_head)
        writer.add_layer_norm_eps(c.layer_norm_epsilon)
    else:
        writer.add_block_count(c.num_hidden_layers)
        writer.add_context_length(c.max_position_embeddings)
        writer.add_embedding_length(c.hidden_size)
        writer.add_feed_forward_length(c.intermediate_size)
        writer.add_head_count(c.num_attention_heads)
        writer.add_head_count_kv(c.num_key_value_heads)
        writer.add_rope_freq_base(c.rope_parameters["rope_theta"])
        writer.add_layer_norm_rms_eps(c.rms_norm_eps)
        writer.add_key_length(c.head_dim if arch == "llama" else
                              c.hidden_size // c.num_attention_heads)
        writer.add_eos_token_id(3)
        writer.add_bos_token_id(1)
    tied = c.tie_word_embeddings
    for name, t in hf.state_dict().items():
        if (tied and name == "lm_head.weight") or name.endswith((".attn.bias",
                                                                 ".attn.masked_bias")):
            continue
        w = t.detach().numpy().astype(np.float32)
        if arch == "gpt2" and w.ndim == 2 and ".h." in name:
            w = w.T.copy()  # the converter stores GPT-2's Conv1D weights as (out, in)
        if arch == "llama" and "q_proj" in name:
            w = _llama_cpp_permute(w, c.num_attention_heads)
        if arch == "llama" and "k_proj" in name:
            w = _llama_cpp_permute(w, c.num_key_value_heads)
        writer.add_tensor(_gguf_name(arch, name), np.ascontiguousarray(w))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("arch,tied", [("llama", False), ("llama", True), ("qwen2", False),
                                       ("gpt2", True)])
def test_tiny_gguf_matches_transformers(arch, tied, tmp_path, monkeypatch):
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path / "cache"))
    hf = _hf_model(arch, tied)
    path = tmp_path / f"tiny-{arch}.gguf"
    _write_gguf(hf, arch, path)
    model = load_model(path, device="cpu")
    assert model.config.arch == arch and model.config.tie_embeddings == tied
    if arch != "gpt2":
        assert model.config.n_kv_heads == 2 and model.config.eos_token_ids == (3,)
    ids = _ids(2, 17)
    with torch.inference_mode():
        assert (model(ids) - hf(ids).logits).abs().max().item() <= 1e-5
    converted = list((tmp_path / "cache" / "converted").glob("tiny-*/model.safetensors"))
    assert len(converted) == 1
    again = load_model(path, device="cpu")  # from the converted copy
    assert torch.equal(again.embed.weight, model.embed.weight)


def test_gguf_of_an_unsupported_architecture(tmp_path):
    import gguf

    path = tmp_path / "falcon.gguf"
    writer = gguf.GGUFWriter(str(path), "falcon")
    writer.add_tensor("token_embd.weight", np.zeros((VOCAB, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="unsupported architecture 'falcon'"):
        load_model(path, device="cpu")


def test_missing_gguf_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model file"):
        load_model(tmp_path / "absent.gguf", device="cpu")
