"""Fixtures shared by the test files: the real model's file and its transformers reference; and
the `cuda` marker's rule: a test that needs a CUDA GPU is skipped where there is none."""

import pytest


@pytest.fixture(scope="session")
def gguf_path():
    import minillm

    return minillm.model_file("smollm2-135m")


@pytest.fixture(scope="session")
def reference(gguf_path):
    """(model, tokenizer) loaded by transformers from the same GGUF file, in fp32."""
    import minillm

    return minillm.load_reference("smollm2-135m")


@pytest.fixture
def one_torch_thread():
    """Run a test on one torch thread: tiny matrices run fastest so, and on a busy 2-core
    machine two threads wait on each other."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if item.get_closest_marker("cuda")]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (scripts/gpu_check.sh runs it on one)")
    for item in marked:
        item.add_marker(skip)
