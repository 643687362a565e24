"""Fixtures shared by the test files: the real model's file and its transformers reference;
`tiny_folder`, a tiny random Llama or Qwen2 checkpoint for the parallel runs; `chinese`, the
course's messages in Chinese for one test; `unwritten`, an exercise's stub; the
`cuda` marker's rule: a test that needs a CUDA GPU is skipped where there is none; and the
`every_level` marker on the test files of minillm's kernels, their exactness and the engine on
them, which `make test` runs again at each lower kernel level the machine runs
(scripts/test_levels.py)."""

import pytest
import torch


@pytest.fixture(scope="session")
def gguf_path():
    import minillm

    return minillm.model_file("smollm2-135m")


@pytest.fixture(scope="session")
def reference(gguf_path):
    """(model, tokenizer) loaded by transformers from the same GGUF file, in fp32."""
    import minillm

    return minillm.load_reference("smollm2-135m")


@pytest.fixture(scope="module", params=["llama-tied", "qwen2-untied"])
def tiny_folder(request, tmp_path_factory):
    """A tiny random model with 3 key/value heads, so two ranks split the heads unevenly."""
    import transformers as tf

    torch.manual_seed(0)
    kind = request.param.split("-")[0]
    common = dict(vocab_size=64, hidden_size=48, intermediate_size=40, num_hidden_layers=3,
                  num_attention_heads=6, num_key_value_heads=3, max_position_embeddings=64,
                  tie_word_embeddings=request.param.endswith("-tied"), initializer_range=0.3,
                  eos_token_id=[2])
    model = (tf.LlamaForCausalLM(tf.LlamaConfig(**common)) if kind == "llama"
             else tf.Qwen2ForCausalLM(tf.Qwen2Config(**common)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(std=0.3)
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    return folder


@pytest.fixture
def chinese():
    """The course's messages in Chinese for one test (a checker's hint, a widget's label), English
    again after it."""
    from minillm.course import set_language

    set_language("zh")
    yield
    set_language("en")


@pytest.fixture
def unwritten():
    """An exercise's function as the learner finds it: a stub that raises NotImplementedError."""
    def stub(*args, **kwargs):
        raise NotImplementedError

    return stub


@pytest.fixture
def one_torch_thread():
    """Run a test on one torch thread: tiny matrices run fastest so, and on a busy 2-core
    machine two threads wait on each other."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


EVERY_LEVEL = {"test_kernels.py", "test_kernels_small_ops.py", "test_kernel_dispatch.py",
               "test_kernel_int8_tiles.py", "test_kernel_q4_1_tiles.py",
               "test_kernel_row_passes.py", "test_decode_blocks.py", "test_fast.py",
               "test_server_weights.py", "test_engine.py", "test_paged_cache.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in EVERY_LEVEL:
            item.add_marker("every_level")
    marked = [item for item in items if item.get_closest_marker("cuda")]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (scripts/gpu_check.sh runs it on one)")
    for item in marked:
        item.add_marker(skip)
