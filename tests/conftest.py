"""Fixtures shared by the test files: the real model's file and its transformers reference."""

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
