"""What a decode step asks of a GPU, counted under the fake CUDA device (tests/fake_cuda.py):
how often the host waits for it (host synchronizations) and how many ATen operations it runs
(a proxy for kernel launches). A real GPU is needed for the time these cost; the counts are the
same there, so the budgets are pinned here:

- the fast path's batch-1 step: at most 2 host synchronizations per token (the loop reads the
  chosen token; the step checks the ids are in the vocabulary);
- the engine's decode step of B rows: at most B + 3 (one token read per request, one packed
  index copy, the clock's synchronize, the ids check), whatever the number of layers;
- bf16 at most 1.1x float32's ATen operations per step (one RMSNorm in every float dtype).

The batch-1 budget holds with the step replayed from a CUDA graph and without
(tests/test_cuda_graph.py counts the graph's launches)."""

import pytest
import torch
import torch.nn.functional as F

import minillm
from minillm.model.toy import LetterTokenizer
from minillm.engine import Engine
from minillm.layers.norm import RMSNorm, rms_norm
from fake_cuda import FakeCuda, Tally

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = [5, 17, 3, 40, 22, 9, 31, 5, 17, 3]
TOK = LetterTokenizer(eos_token_ids=[2])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny random Llama saved as a Hugging Face folder, with three layers (a per-layer sync
    shows as a multiple of three)."""
    import transformers as tf

    torch.manual_seed(0)
    hf = tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        eos_token_id=[2], initializer_range=0.3, tie_word_embeddings=False))
    path = tmp_path_factory.mktemp("llama")
    hf.save_pretrained(path)
    return path


def test_the_harness_counts_each_kind_of_host_synchronization():
    with FakeCuda():
        x = torch.arange(4.0, device="cuda")
        cases = {
            "scalar read": [lambda: x[0].item(), lambda: bool(x[1]), lambda: int(x[2])],
            "tolist": [x.tolist],
            "boolean mask": [lambda: x[x > 1], lambda: x.__setitem__(x > 2, 0.0)],
            "nonzero": [x.nonzero],
            "pageable host-to-device copy": [lambda: torch.ones(3).to("cuda"),
                                             lambda: torch.tensor([1, 2], device="cuda"),
                                             lambda: x.copy_(torch.ones(4))],
            "device-to-host copy": [x.cpu],
            "synchronize": [torch.cuda.synchronize],
        }
        for kind, calls in cases.items():
            for call in calls:
                with Tally() as t:
                    call()
                assert dict(t.syncs) == {kind: 1}, (kind, dict(t.syncs))
        with Tally() as t:  # none: arithmetic, integer indexing, a copy from pinned memory
            (x * 2 + 1).sum()
            x.index_select(0, torch.zeros(2, dtype=torch.long, device="cuda"))
            torch.ones(3).pin_memory().to("cuda", non_blocking=True)
        assert t.total == 0, dict(t.syncs)
        with Tally() as t:  # pinned but blocking: the host waits
            torch.ones(3).pin_memory().to("cuda")
        assert t.total == 1


def per_token(model, field):
    """`field` ("total" or "ops") per generated token: 12 tokens against 4, so prefill, the
    front door and the first token cancel out."""
    counts = {}
    for n in (4, 12):
        with Tally() as t:
            minillm.generate(model, TOK, PROMPT, max_new_tokens=n, ignore_eos=True)
        counts[n] = getattr(t, field), t.syncs
    return (counts[12][0] - counts[4][0]) / 8, counts[12][1] - counts[4][1]


@pytest.mark.parametrize("graph", [True, False], ids=["cuda graph", "eager"])
@pytest.mark.parametrize("weights", ["fp32", "bf16", "int8"])
def test_the_fused_batch_1_step_syncs_at_most_twice_per_token(folder, weights, graph):
    with FakeCuda():
        model, _ = minillm.load(folder, device="cuda", weights=weights)
        model.fused_decode.cuda_graph = graph
        assert model.fused_decode.applies(torch.zeros((1, 1), dtype=torch.long, device="cuda"),
                                          _contiguous_cache(model), None, None)
        syncs, kinds = per_token(model, "total")
    assert syncs <= 2, dict(kinds)


def _contiguous_cache(model):
    from minillm.generation.kv_cache import KVCache

    return KVCache.for_model(model, 1, 8)


def test_bf16_runs_as_few_aten_operations_per_step_as_float32(folder):
    """The eager step's launches (a CUDA graph replays whatever the step launches as one)."""
    ops = {}
    with FakeCuda():
        for weights in ("fp32", "bf16"):
            model, _ = minillm.load(folder, device="cuda", weights=weights)
            model.fused_decode.cuda_graph = False
            ops[weights] = per_token(model, "ops")[0]
    assert ops["bf16"] <= 1.1 * ops["fp32"], ops


@pytest.mark.parametrize("rows", [1, 4])
def test_an_engine_decode_step_of_b_rows_syncs_at_most_b_plus_3_times(folder, rows):
    with FakeCuda():
        model, _ = minillm.load(folder, device="cuda")
        engine = Engine(model, TOK, num_blocks=64, block_size=4)
        for i in range(rows):
            engine.add_request(PROMPT[:5 + i], max_new_tokens=10, ignore_eos=True)
        engine.step()  # the prefills
        engine.step()
        with Tally() as t:
            outputs = engine.step()
    assert len(outputs) == rows
    assert t.total <= rows + 3, dict(t.syncs)
    assert t.syncs["boolean mask"] == 0 and t.syncs["pageable host-to-device copy"] == 0, \
        dict(t.syncs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rmsnorm_is_one_operation_in_every_float_dtype(dtype):
    torch.manual_seed(0)
    norm = RMSNorm(96, 1e-5)
    norm.weight.data = torch.rand(96) + 0.5
    norm.to(dtype)
    x = torch.randn(5, 96).to(dtype)
    exact = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-5) \
        * norm.weight.double()
    got = norm(x)
    # PyTorch's fused kernel keeps float32 to the end: no further from the exact value than the
    # formula, which rounds to x's dtype before the weight
    assert (got.double() - exact).abs().max() <= (rms_norm(x, norm.weight, 1e-5).double()
                                                   - exact).abs().max()
    torch.testing.assert_close(got, F.rms_norm(x, (96,), norm.weight, 1e-5), rtol=0, atol=0)
    with FakeCuda():
        on_gpu, x_gpu = norm.to("cuda"), x.to("cuda")
        with Tally() as t:
            on_gpu(x_gpu)
    assert t.ops == 1
