"""Checks that need a real CUDA GPU: marked `cuda`, skipped without one; scripts/gpu_check.sh
runs them on a GPU machine. Each check is also run here on the fake CUDA device
(tests/fake_cuda.py), so a GPU run never meets a check that has never run at all.

Tolerances: float32 on a GPU against float32 on the CPU, 1e-4 on the tiny model's logits (of
size ~1-5; other kernels sum in another order; PyTorch keeps TF32 off for float32 matmuls by
default) and 2e-3 on SmolLM2's (30 layers; test_fast allows the same between two CPU paths);
bf16 against float32, 0.3 (bf16 keeps 8 bits of mantissa, activations included on a GPU)."""

import pytest
import torch

import minillm
from minillm.utils.devices import model_device
from minillm.model.toy import LetterTokenizer
from minillm.fast import optimize
from minillm.generation.kv_cache import KVCache

PROMPT = [5, 17, 3, 40, 22, 9, 31, 5, 17, 3]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    import transformers as tf

    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=128, initializer_range=0.3)
    path = tmp_path_factory.mktemp("tiny-llama")
    tf.LlamaForCausalLM(config).save_pretrained(path)
    return path


def check_forward_matches_cpu(folder, device, atol=1e-4):
    """The readable and the fast model on `device`: the CPU's logits, through a KV cache too."""
    ids = torch.tensor([PROMPT])
    for fast in (False, True):
        cpu = minillm.load_model(folder, device="cpu", fast=fast)
        gpu = minillm.load_model(folder, device=device, fast=fast)
        assert model_device(gpu).type == "cuda"
        cache = KVCache.for_model(gpu, 1, 16)
        with torch.inference_mode():
            want = cpu(ids)
            torch.testing.assert_close(gpu(ids).cpu(), want, atol=atol, rtol=0)
            gpu(ids[:, :-1], cache=cache)
            last = gpu(ids[:, -1:], cache=cache)
            torch.testing.assert_close(last.cpu(), want[:, -1:], atol=atol, rtol=0)


def check_bf16_fast_path(folder, device):
    """optimize(model, "bf16") on a GPU casts the whole model; it generates, close to float32."""
    model = minillm.load_model(folder, device=device, fast=False)
    fast16 = optimize(model, "bf16")
    assert fast16.dtype == torch.bfloat16 and fast16.weight_format == "bf16"
    cache = KVCache.for_model(fast16, 1, 16)
    with torch.inference_mode():
        want = model(torch.tensor([PROMPT]))
        got = fast16(torch.tensor([PROMPT]), cache=cache)
    assert cache.keys[0].dtype == torch.bfloat16
    torch.testing.assert_close(got, want, atol=0.3, rtol=0)
    out = minillm.generate(fast16, LetterTokenizer(), PROMPT, max_new_tokens=8, ignore_eos=True)
    assert len(out.token_ids) == 8 and out.metrics.decode_tokens_per_second > 0


@pytest.mark.cuda
def test_forward_on_cuda_equals_the_cpu_logits(folder):
    check_forward_matches_cpu(folder, "cuda")


@pytest.mark.cuda
def test_bf16_fast_path_runs_on_cuda(folder):
    check_bf16_fast_path(folder, "cuda")


@pytest.mark.cuda
def test_smollm2_on_cuda_equals_the_cpu_logits(gguf_path):
    cpu, tokenizer = minillm.load("smollm2-135m", device="cpu")
    gpu, _ = minillm.load("smollm2-135m", device="cuda")
    ids = torch.tensor([tokenizer.encode("The capital of France is Paris, and the capital of")])
    with torch.inference_mode():
        torch.testing.assert_close(gpu(ids).cpu(), cpu(ids), atol=2e-3, rtol=0)


def test_the_cuda_checks_run_on_the_fake_device(folder):
    from fake_cuda import FakeCuda

    with FakeCuda():
        check_forward_matches_cpu(folder, "cuda", atol=1e-5)
        check_bf16_fast_path(folder, "cuda")


def test_cuda_tests_are_skipped_without_a_gpu(request):
    """The `cuda` marker is registered, and its tests are skipped (by tests/conftest.py) exactly
    where torch sees no GPU."""
    assert any(m.startswith("cuda:") for m in request.config.getini("markers"))
    for item in request.session.items:
        if item.get_closest_marker("cuda"):
            skipped = item.get_closest_marker("skip") is not None
            assert skipped == (not torch.cuda.is_available()), item.name
