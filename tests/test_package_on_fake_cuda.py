"""minillm on a (fake) GPU, CUDA's and Apple's (MPS): every runner, loaded with
`device="cuda"` (or "mps"), runs without a device mix and gives what it gives on the CPU. The
fake device (tests/fake_cuda.py) computes on the CPU and raises on every operation a GPU would
refuse, so a tensor made on the CPU for a model on the GPU fails here as it would there; the fake
MPS also refuses float64, as Apple's GPUs do. Each test runs its work twice, on the CPU and under
the harness on the fake device, and compares: the same tokens, logits within 1e-5 (a prompt's
attention takes another path off the CPU: one SDPA call instead of minillm's blocks of
queries)."""

import threading

import pytest
import torch

import minillm
from minillm.utils.devices import model_device
from minillm.engine import Engine
from minillm.model.toy import LetterTokenizer
from minillm.generation.kv_cache import KVCache
from fake_cuda import MPS, FakeCuda, FakeMps, is_fake_cuda

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = [5, 17, 3, 40, 22, 9, 31, 5, 17, 3]
OTHER = [8, 1, 60]
TOK = LetterTokenizer(eos_token_ids=[2])


@pytest.fixture(params=[FakeCuda, FakeMps], ids=["cuda", "mps"])
def fake(request):
    """The harness a test runs its GPU half under (its `.device`: cuda:0 or mps:0)."""
    return request.param


@pytest.fixture(scope="module", params=["llama", "qwen2-biased"])
def folder(request, tmp_path_factory):
    """A tiny random model saved as a Hugging Face folder, with weights large enough that
    greedy choices are clear (no near ties for another attention path to flip)."""
    import transformers as tf

    torch.manual_seed(0)
    common = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  eos_token_id=[2], initializer_range=0.3)
    if request.param == "llama":
        hf = tf.LlamaForCausalLM(tf.LlamaConfig(tie_word_embeddings=False, **common))
    else:
        hf = tf.Qwen2ForCausalLM(tf.Qwen2Config(tie_word_embeddings=True, **common))
    path = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(path)
    return path


# The readable model, and the fast path in each weight layout (which one `minillm.load` picks
# depends on a timing, so both are named here).
RUNNERS = ["readable", "fast-in_out", "fast-out_in"]


def load(folder, device, runner="fast-out_in"):
    from minillm.fast import optimize

    model = minillm.load_model(folder, device=device, fast=False)
    return model if runner == "readable" else optimize(model, layout=runner.split("-")[1])


def on_cpu_and_gpu(work, folder, fake, runner="fast-out_in"):
    """`work(model)` on the model loaded on the CPU, then under the harness `fake` on its
    device (results moved back to the CPU by `work` itself, as a GPU user would)."""
    want = work(load(folder, "cpu", runner))
    with fake():
        model = load(folder, "auto", runner)
        assert model_device(model) == fake.device
        got = work(model)
    return want, got


@pytest.mark.parametrize("fast", [False, True], ids=["readable", "fast"])
def test_load_puts_every_tensor_on_the_gpu(folder, fast, fake):
    with fake():
        model, tokenizer = minillm.load(folder, device=fake.device.type, fast=fast)
        assert tokenizer is None  # the folder has no tokenizer files
        assert all(is_fake_cuda(t) for t in model.state_dict().values())
        with torch.inference_mode():
            logits = model(torch.tensor([PROMPT]))
        assert is_fake_cuda(logits)
        logits = logits.cpu()
    want = minillm.load_model(folder, device="cpu", fast=fast)
    with torch.inference_mode():
        torch.testing.assert_close(logits, want(torch.tensor([PROMPT])), atol=1e-5, rtol=0)


@pytest.mark.parametrize("runner", RUNNERS)
def test_forward_gives_the_cpu_logits(folder, runner, fake):
    ids = torch.tensor([PROMPT, PROMPT[::-1]])  # on the CPU: forward moves ids (the rule)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0

    def work(model):
        with torch.inference_mode():
            plain = model(ids)
            padded = model(ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(0))
            assert plain.device == model_device(model)
            return plain.cpu(), padded.cpu()
    want, got = on_cpu_and_gpu(work, folder, fake, runner)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=0)


@pytest.mark.parametrize("runner", RUNNERS)
def test_prefill_and_decode_through_the_kv_cache(folder, runner, fake):
    def work(model):
        cache = KVCache.for_model(model, 1, 32)
        assert all(t.device == model_device(model) for t in cache.keys + cache.values)
        with torch.inference_mode():
            rows = [model(torch.tensor([PROMPT]), cache=cache)[0, -1]]
            for token in (7, 30, 2, 11):
                rows.append(model(torch.tensor([[token]]), cache=cache)[0, -1])
        assert cache.length == len(PROMPT) + 4
        return torch.stack(rows).cpu()
    want, got = on_cpu_and_gpu(work, folder, fake, runner)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_processors_and_sampling_on_gpu_tensors(fake):
    from minillm.decoding import GenerationConfig, build_processors, choose_next_token, \
        make_generator

    config = GenerationConfig(do_sample=True, temperature=0.7, top_k=20, top_p=0.9, min_p=0.01,
                              repetition_penalty=1.3, no_repeat_ngram_size=2,
                              bad_words_ids=[[4], [9, 10]], seed=3, max_new_tokens=4)
    scores = torch.randn(3, 64, generator=torch.Generator().manual_seed(0)) * 3
    ids = torch.randint(0, 64, (3, 12), generator=torch.Generator().manual_seed(1))

    def work(device):
        process = build_processors(config, [2])
        generator = make_generator(config, device)
        out = process(ids.to(device), scores.to(device))
        tokens = [choose_next_token(out, config, generator).tolist() for _ in range(5)]
        return out.cpu(), tokens
    want = work("cpu")
    with fake():
        got = work(fake.device.type)
    torch.testing.assert_close(got[0], want[0], atol=0, rtol=0)
    assert got[1] == want[1]


GENERATIONS = {
    "greedy": dict(max_new_tokens=8),
    "sampling": dict(max_new_tokens=8, do_sample=True, temperature=0.8, top_k=10, top_p=0.95,
                     repetition_penalty=1.2, seed=7),
    "beam": dict(max_new_tokens=6, num_beams=3),
    "no-cache": dict(max_new_tokens=5, use_cache=False),
}


@pytest.mark.parametrize("kind", GENERATIONS)
def test_generate(folder, kind, fake):
    def work(model):
        return minillm.generate(model, TOK, PROMPT, ignore_eos=True, **GENERATIONS[kind]).token_ids
    want, got = on_cpu_and_gpu(work, folder, fake)
    assert got == want


def test_generate_a_padded_batch_and_stream(folder, fake):
    def work(model):
        batch = minillm.generate(model, TOK, [PROMPT, OTHER], max_new_tokens=6, ignore_eos=True)
        stream = minillm.stream(model, TOK, PROMPT, max_new_tokens=6, ignore_eos=True)
        pieces = list(stream)
        assert stream.metrics.n_tokens == 6
        return [g.token_ids for g in batch], pieces, stream.result.token_ids
    want, got = on_cpu_and_gpu(work, folder, fake)
    assert got == want


@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_engine_steps(folder, scheduler, fake):
    def work(model):
        engine = Engine(model, TOK, scheduler=scheduler, num_blocks=32, block_size=4,
                        max_num_seqs=4, max_num_batched_tokens=16)
        assert all(t.device == model_device(model) for t in engine.pool.keys + engine.pool.values)
        engine.add_request(PROMPT, max_new_tokens=5, ignore_eos=True)
        first = engine.step()  # one step by hand: a chunk of the prefill
        outs = engine.generate([PROMPT[:4], OTHER, PROMPT],
                               [{"max_new_tokens": 5}, {"max_new_tokens": 3, "do_sample": True,
                                                        "seed": 1}, {"max_new_tokens": 4}],
                               ignore_eos=True)
        return len(first), [o.token_ids for o in outs]
    want, got = on_cpu_and_gpu(work, folder, fake)
    assert got == want


@pytest.mark.parametrize("draft", ["prompt-lookup", "model", "model-sampled"])
def test_speculative_decoding(folder, draft, fake):
    from minillm.speculative import ModelDraft, PromptLookupDraft, first_layers, \
        speculative_generate

    def work(model):
        proposer = PromptLookupDraft() if draft == "prompt-lookup" \
            else ModelDraft(first_layers(model, 1))
        sampled = dict(do_sample=True, seed=4) if draft == "model-sampled" else {}
        out = speculative_generate(model, TOK, PROMPT * 2, proposer, k=3, max_new_tokens=10,
                                   ignore_eos=True, **sampled)
        return out.token_ids, out.stats.accepted
    want, got = on_cpu_and_gpu(work, folder, fake)
    assert got == want


@pytest.mark.parametrize("scheme", ["int8", "int4", "bf16", "optimize-int8"])
def test_quantized_models(folder, scheme, fake):
    from minillm.fast import optimize
    from minillm.quant import set_int8_path

    def work(model):
        if scheme == "optimize-int8":
            quantized = optimize(model, "int8")
        else:
            quantized = minillm.quantize(model, scheme,
                                         **({"group_size": 16} if scheme == "int4" else {}))
        assert all(t.device == model_device(model) for t in quantized.state_dict().values())
        if "int8" in scheme and model_device(model).type == "cpu":
            # "auto" runs fbgemm's kernel (8-bit activations) on a CPU; a GPU dequantizes
            set_int8_path(quantized, "dequantize")
        with torch.inference_mode():
            logits = quantized(torch.tensor([PROMPT])).float().cpu()
        tokens = minillm.generate(quantized, TOK, PROMPT, max_new_tokens=4,
                                  ignore_eos=True).token_ids
        return logits, tokens
    want, got = on_cpu_and_gpu(work, folder, fake, "readable")
    torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=0)
    assert got[1] == want[1]


def test_bf16_fast_path_computes_in_bf16_on_a_gpu(folder, fake):
    """On a GPU optimize(model, "bf16") casts the whole model (a CPU keeps float32
    activations): a different computation, so it is compared with float32 at bf16's tolerance,
    wider than test_fast's weight-only 0.15 (the activations round to 8 bits too: a dozen
    roundings of 2^-8 of values up to about 5 on the tiny models)."""
    from minillm.fast import optimize

    want = load(folder, "cpu", "readable")
    with torch.inference_mode():
        want = want(torch.tensor([PROMPT]))
    with fake():
        model = optimize(minillm.load_model(folder, device=fake.device.type, fast=False), "bf16")
        assert model.dtype == torch.bfloat16 and model_device(model) == fake.device
        cache = KVCache.for_model(model, 1, 16)
        with torch.inference_mode():
            got = model(torch.tensor([PROMPT]), cache=cache)  # logits come back in float32
        assert cache.keys[0].dtype == torch.bfloat16 and is_fake_cuda(cache.keys[0])
        tokens = minillm.generate(model, TOK, PROMPT, max_new_tokens=4, ignore_eos=True)
    assert len(tokens.token_ids) == 4
    torch.testing.assert_close(got.cpu(), want, atol=0.3, rtol=0)


def _logits(model) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([PROMPT])).float().cpu()


def _off_the_bf16_tiles(folder, weights, fast):
    """`fast` itself, or, where its bf16 layers round a prompt's x to bf16 on the CPU's bf16
    tiles (`products_dtype`), the same weights multiplied as a device without those tiles does:
    minillm's kernels off, PyTorch widens the bf16 weights for a prompt's rows."""
    from minillm.fast import optimize
    from minillm.kernels import dispatch

    if not any(getattr(m, "products_dtype", None) for m in fast.modules()):
        return fast
    with dispatch.without_kernels():
        return optimize(load(folder, "cpu", "readable"), weights)


@pytest.mark.parametrize("weights", ["fp32", "bf16", "int8"])
def test_a_fast_model_moved_to_mps_and_back_keeps_its_logits(folder, weights):
    """A fast model built on the CPU (where minillm's kernels may be chosen for its layers),
    moved onto an Apple GPU and back, gives its CPU logits on both devices. (int8 off the CPU
    multiplies by the dequantized weights where the CPU's kernel rounds x to 16 bits: the
    same within 0.01. bf16 on a CPU with bf16 tiles rounds a prompt's x to bf16, and the GPU
    does not: there the logits of float32 products.)"""
    from minillm.fast import optimize

    fast = optimize(load(folder, "cpu", "readable"), weights)
    off_the_tiles = _off_the_bf16_tiles(folder, weights, fast)
    before, want = _logits(fast), _logits(off_the_tiles)

    def tokens(model):
        return minillm.generate(model, TOK, PROMPT, max_new_tokens=4, ignore_eos=True).token_ids

    on_cpu, off_tiles = tokens(fast), tokens(off_the_tiles)
    with FakeMps():
        fast.to("mps")
        assert model_device(fast) == MPS
        torch.testing.assert_close(_logits(fast), want,
                                   atol=0.01 if weights == "int8" else 1e-5, rtol=0)
        assert tokens(fast) == off_tiles
        fast.cpu()
    assert model_device(fast).type == "cpu"
    torch.testing.assert_close(_logits(fast), before, atol=1e-5, rtol=0)
    assert tokens(fast) == on_cpu


@pytest.mark.parametrize("weights", ["fp32", "bf16"])
def test_a_fast_model_cast_on_mps_keeps_its_logits(folder, weights):
    """.float() on an Apple GPU widens what the layers store (bf16 weights: the same values,
    so the same logits as float32 products of them); .half() rounds weights and activations to fp16 (the readable model's
    logits within fp16's tolerance, as bf16's on a GPU in the test above)."""
    from minillm.fast import optimize

    want = _logits(load(folder, "cpu", "readable"))
    fast = optimize(load(folder, "cpu", "readable"), weights)
    before = _logits(_off_the_bf16_tiles(folder, weights, fast))
    with FakeMps():
        fast.to("mps").float()
        assert model_device(fast) == MPS and fast.dtype == torch.float32
        torch.testing.assert_close(_logits(fast), before, atol=1e-4, rtol=0)
        fast.half()
        assert model_device(fast) == MPS and fast.dtype == torch.float16
        torch.testing.assert_close(_logits(fast), want, atol=0.3, rtol=0)
        assert len(minillm.generate(fast, TOK, PROMPT, max_new_tokens=4,
                                    ignore_eos=True).token_ids) == 4


def test_step_timers(folder, fake):
    from minillm.generation.step_timing import decode_step_times, prefill_time, recompute_step_time

    with fake():
        model = load(folder, fake.device.type)
        times, tokens = decode_step_times(model, TOK, PROMPT, 4)
        assert len(times) == len(tokens) == 4 and all(t > 0 for t in times)
        times, _ = decode_step_times(model, TOK, PROMPT, 3, use_cache=False)
        assert len(times) == 3
        assert recompute_step_time(model, 12) > 0 and prefill_time(model, 12) > 0


def test_results_leave_the_device_only_when_asked(folder, fake):
    """What the runners hand back to the user is plain Python (token ids, text), never a cuda
    tensor the user would have to move."""
    with fake():
        model = load(folder, fake.device.type)
        out = minillm.generate(model, TOK, PROMPT, max_new_tokens=3, ignore_eos=True)
        assert all(type(t) is int for t in out.token_ids)
        with torch.inference_mode():
            assert is_fake_cuda(model(torch.tensor([PROMPT])))


def test_the_server_serves_from_the_gpu(folder, fake):
    """The OpenAI-compatible server: its engine steps in a thread of its own and each request is
    added from a worker thread, all started under the harness, so every one of them runs on the
    fake device; concurrent requests give what each gives alone on the CPU."""
    import httpx

    from minillm.tools.server import ServerThread

    prompts = ["hello", "abcabcab", "zebra"]
    cpu = load(folder, "cpu")
    want = [minillm.generate(cpu, TOK, p, max_new_tokens=6, ignore_eos=True).text
            for p in prompts]
    with fake():
        engine = Engine(load(folder, fake.device.type), TOK, num_blocks=32, block_size=4,
                        max_num_seqs=4)
        with ServerThread(engine, "tiny") as server, \
                httpx.Client(base_url=server.url, timeout=60) as client:
            got = [None] * len(prompts)

            def ask(i):
                got[i] = client.post("/v1/completions", json={
                    "model": "tiny", "prompt": prompts[i], "max_tokens": 6, "temperature": 0,
                    "ignore_eos": True}).json()["choices"][0]["text"]
            askers = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
            for t in askers:
                t.start()
            for t in askers:
                t.join()
    assert got == want


def test_the_measuring_helpers_the_lessons_call_on_a_gpu(folder, fake):
    """What chapters 04-08 measure with, run on cuda: bandwidth, perplexity and logit error,
    quantized speed, the engine's offline and online benchmarks, plain against speculative
    decoding, and the decoding widgets' logits."""
    from minillm import quant
    from minillm.measure.bandwidth import read_bandwidth
    from minillm.tools.bench.batching import Work, run_engine, run_online
    from minillm.speculative import PromptLookupDraft
    from minillm.tools.bench.speculative import compare
    from minillm.course.widgets.filters import filter_view
    from minillm.course.widgets.temperature import next_token_logits

    text = PROMPT * 4
    work = [Work(PROMPT, 4), Work(OTHER, 3), Work(PROMPT[:5], 5)]

    def work_on(model):
        fp32 = quant.evaluate(model, text, window=16, keep_logits=True)
        int8 = quant.quantize(model, "int8")
        if model_device(model).type == "cpu":
            quant.set_int8_path(int8, "dequantize")  # what a GPU runs
        errors = quant.evaluate(int8, text, window=16, reference=fp32.logits)
        engine = Engine(model, TOK, num_blocks=32, block_size=4, max_num_seqs=4)
        offline = run_engine(engine, work)
        online = run_online(Engine(model, TOK, num_blocks=32, block_size=4), work, rate=1000.0)
        rows = compare(model, TOK, PROMPT * 2, {"lookup": PromptLookupDraft()}, [2],
                       max_new_tokens=6)
        logits = next_token_logits(model, TOK, PROMPT)
        assert quant.speed(int8, TOK, PROMPT, new_tokens=3)["decode_tokens_per_s"] > 0
        assert logits.device.type == "cpu"
        return (round(fp32.perplexity, 4), round(errors.max_logit_error, 4),
                [o.token_ids for o in offline["outputs"]], online["requests"],
                [(r["draft"], r["tokens"], r["same_tokens"]) for r in rows],
                filter_view(logits, top_k=5).ids)
    want, got = on_cpu_and_gpu(work_on, folder, fake, "readable")
    assert got == want
    with fake():
        assert read_bandwidth(fake.device.type, megabytes=1, repeats=1) > 0


def test_what_keeps_float64_computes_it_on_the_cpu_for_mps():
    """Apple GPUs have no float64: the helpers that sum in float64 (the online softmax,
    LLM.int8()'s exact integer product, the decoding widgets) move to the CPU for it and give
    back their results where they belong."""
    from minillm.course.widgets import filter_view, temperature_table
    from minillm.model.flash_attention import online_softmax
    from minillm.quant.llm_int8 import LLMInt8Linear, int8_matmul

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 40, generator=g) * 4
    h = torch.randn(3, 64, generator=g)
    a = torch.randint(-127, 128, (5, 64), generator=g, dtype=torch.int8)
    b = torch.randint(-127, 128, (64, 7), generator=g, dtype=torch.int8)
    w = torch.randn(7, 64, generator=g)
    w[:, 3] *= 20  # an outlier column
    logits = torch.randn(64, generator=g) * 3
    want = (online_softmax(x, 16), int8_matmul(a, b), LLMInt8Linear(w)(h),
            filter_view(logits, top_k=5, top_p=0.9), temperature_table(logits, 0.7))
    with FakeMps():
        got = online_softmax(x.to("mps"), 16)
        assert got.device == MPS and got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), want[0], rtol=0, atol=0)
        product = int8_matmul(a.to("mps"), b.to("mps"))
        assert product.device == MPS and torch.equal(product.cpu(), want[1])
        layer = LLMInt8Linear(w.to("mps"))
        y = layer(h.to("mps"))
        torch.testing.assert_close(y.cpu(), want[2], rtol=0, atol=1e-5)
        assert filter_view(logits.to("mps"), top_k=5, top_p=0.9) == want[3]
        assert temperature_table(logits.to("mps"), 0.7) == want[4]


@pytest.mark.slow
@pytest.mark.parametrize("harness", [FakeCuda, FakeMps], ids=["cuda", "mps"])
def test_q4_1_with_device_auto_runs_on_the_cpu_and_says_so(gguf_path, harness, capsys,
                                                          monkeypatch):
    """The README's `minillm.load(..., weights="q4_1")` on a machine with a GPU: the file's
    4-bit blocks run on the CPU (minillm's kernel), so "auto" picks the CPU, said once."""
    from minillm.utils import notices

    monkeypatch.setattr(notices, "_SAID", set())
    monkeypatch.delenv("MINILLM_NO_KERNEL", raising=False)  # kernels off would add a sentence
    with harness():
        model, tokenizer = minillm.load(gguf_path, weights="q4_1")
        assert model_device(model).type == "cpu"
        again, _ = minillm.load(gguf_path, weights="q4_1", device="auto")
        text = minillm.generate(model, tokenizer, "The capital of France is",
                                max_new_tokens=4).text
        with pytest.raises(ValueError, match="load on device='cpu'"):
            minillm.load(gguf_path, weights="q4_1", device=harness.device.type)
    said = [line for line in capsys.readouterr().err.splitlines() if "weights='q4_1'" in line]
    assert len(said) == 1 and f"not on {harness.device.type}" in said[0], said
    assert text.strip()
