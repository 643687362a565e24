"""EleutherAI's lm-evaluation-harness scores the served model as it scores the model itself.

lm_eval's own commands run small local tasks twice: against `minillm serve` (`local-completions`,
with the server's tokenizer through /tokenize, and `local-chat-completions` with the chat
template) and with lm_eval's `hf` backend on the reference model (transformers, the same GGUF
file). The tasks hold what broke before: multiple choice whose answers end where the model would
end its turn (the end of sequence is the token generated after them), rolling perplexity over
text with Chinese and emoji, and a generation with 4 stop strings of its own (lm_eval adds the EOS
string as a 5th). Per request, the log-likelihoods agree within 1e-4 nats and the greedy flags
and generated texts are equal; the metrics are equal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is installed by `make test`")

from minillm.reference import reference_dir  # noqa: E402
from minillm.tools.server.launch import ServerProcess  # noqa: E402

# per request: the log-likelihoods agree within 1e-4 nats, or within a millionth of a long text's
# sum (lm_eval's hf backend sums in float32, whose rounding near 250 nats is 1.5e-5 a term)
NATS, RELATIVE = 1e-4, 1e-6
CHAT = "<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
MC = [  # chat turns whose answers end the turn: the end of sequence comes after each choice
    {"context": CHAT.format(question="What is 2+2?"),
     "choices": ["The answer to this classic math problem is 4.",
                 "The answer to this classic math problem is 5."], "answer": 0},
    {"context": CHAT.format(question="What is the capital of France?"),
     "choices": ["The capital of France is Paris.", "The capital of France is Rome."],
     "answer": 0},
    {"context": CHAT.format(question="用一句话介绍北京。"),
     "choices": ["北京是中国的首都。", "北京是日本的首都。"], "answer": 0},
    {"context": "The weather today is lovely ", "choices": ["☀️🌈", "❄️🥶"], "answer": 0},
]
TEXTS = [
    {"text": "The lighthouse stood at the edge of the cliff for more than two hundred years."},
    {"text": "推理引擎把提示词切成词元，然后一次预填充，再逐个解码。🚀 Then it streams the answer."},
    {"text": "Emoji and accents: café, naïve, 😀👍🏽, and a line\nbreak."},
]
QUESTIONS = [
    {"question": "Q: What is the capital of Italy?\nA:", "answer": " The capital of Italy is Rome"},
    {"question": "Q: Name a primary colour.\nA:", "answer": " Red"},
    {"question": "Q: 天空是什么颜色？\nA:", "answer": " 蓝色"},
]
GENERATE = {"until": ["\n", ".", "Q:", "</s>"], "max_gen_toks": 24, "do_sample": False}


def _task(folder: Path, name: str, rows: list[dict], config: dict) -> None:
    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    lines = [f"task: {name}", "dataset_path: json",
             f"dataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data))}",
             "test_split: test"]
    lines += [f"{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in config.items()]
    (folder / f"{name}.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lm_eval_tasks")
    _task(folder, "minillm_choice", MC, {
        "output_type": "multiple_choice", "doc_to_text": "{{context}}",
        "doc_to_choice": "{{choices}}", "doc_to_target": "{{answer}}", "target_delimiter": "",
        "metric_list": [{"metric": "acc"}]})
    _task(folder, "minillm_rolling", TEXTS, {
        "output_type": "loglikelihood_rolling", "doc_to_text": "", "doc_to_target": "{{text}}",
        "metric_list": [{"metric": "word_perplexity"}, {"metric": "byte_perplexity"},
                        {"metric": "bits_per_byte"}]})
    _task(folder, "minillm_until", QUESTIONS, {
        "output_type": "generate_until", "doc_to_text": "{{question}}",
        "doc_to_target": "{{answer}}", "target_delimiter": "", "generation_kwargs": GENERATE,
        "metric_list": [{"metric": "exact_match"}]})
    return folder


def _run(tasks: Path, out: Path, model: str, model_args: str, *names, chat=False) -> dict:
    """lm_eval's command; {task: (its metrics, its logged samples by doc id)}."""
    command = [sys.executable, "-m", "lm_eval", "run", "--model", model, "--model_args",
               model_args, "--tasks", *names, "--include_path", str(tasks), "--device", "cpu",
               "--batch_size", "1", "--log_samples", "--output_path", str(out)]
    if chat:
        command.append("--apply_chat_template")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_DATASETS_CACHE": str(out / "datasets")}
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, f"lm_eval failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    results = json.loads(next(out.rglob("results_*.json")).read_text(encoding="utf-8"))
    found = {}
    for name in names:
        samples = [json.loads(line) for path in out.rglob(f"samples_{name}_*.jsonl")
                   for line in path.read_text(encoding="utf-8").splitlines()]
        found[name] = (results["results"][name], {s["doc_id"]: s for s in samples})
    return found


@pytest.fixture(scope="module")
def server():
    running = ServerProcess(["--max-num-seqs", "4"]).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def reference_folder(reference) -> str:
    return str(reference_dir("smollm2-135m"))


NAMES = ("minillm_choice", "minillm_rolling", "minillm_until")


@pytest.fixture(scope="module")
def scored(tasks, server, reference_folder, tmp_path_factory):
    served = _run(tasks, tmp_path_factory.mktemp("served"), "local-completions",
                  f"base_url={server.url}/v1/completions,model=smollm2-135m,"
                  "tokenizer_backend=remote,tokenized_requests=True,num_concurrent=1,"
                  "max_retries=1", *NAMES)
    alone = _run(tasks, tmp_path_factory.mktemp("hf"), "hf",
                 f"pretrained={reference_folder},dtype=float32", *NAMES)
    return served, alone


def _scored(response) -> tuple[float, str | None]:
    """A logged log-likelihood response: (log-likelihood, is_greedy), which the samples file
    holds as strings; a rolling one has no greedy flag."""
    if isinstance(response, list):
        return float(response[0]), str(response[1])
    return float(response), None


def _metrics(result: dict) -> dict:
    return {k: v for k, v in result.items() if "stderr" not in k and "," in k}


@pytest.mark.parametrize("name", ["minillm_choice", "minillm_rolling"])
def test_each_log_likelihood_is_the_reference_models(scored, name):
    (served, served_docs), (alone, alone_docs) = scored[0][name], scored[1][name]
    assert served_docs.keys() == alone_docs.keys() and served_docs
    for doc_id, sample in served_docs.items():
        for ours, theirs in zip(sample["resps"], alone_docs[doc_id]["resps"]):
            ours, theirs = _scored(ours[0]), _scored(theirs[0])
            assert ours[0] == pytest.approx(theirs[0], abs=NATS, rel=RELATIVE), \
                (doc_id, ours, theirs)
            assert ours[1] == theirs[1], f"is_greedy differs for doc {doc_id}"
    for metric, value in _metrics(alone).items():
        assert served[metric] == pytest.approx(value, rel=1e-4), metric


def test_an_answer_that_ends_the_turn_is_scored_whole(scored):
    """After "The capital of France is Paris." the model ends its turn: the end of sequence is
    the token the server generates. Before the fix the server left it out of the
    log-probabilities, lm_eval's slice dropped the answer's last token, and Paris scored -0.65
    nats where the reference gives -0.84. Now both answers score as the reference scores them."""
    served, alone = scored[0]["minillm_choice"][1], scored[1]["minillm_choice"][1]
    paris, rome = (_scored(served[1]["resps"][i][0])[0] for i in (0, 1))
    assert paris > rome
    for i, ours in enumerate((paris, rome)):
        assert ours == pytest.approx(_scored(alone[1]["resps"][i][0])[0], abs=NATS)
    assert scored[0]["minillm_choice"][0]["acc,none"] == scored[1]["minillm_choice"][0]["acc,none"]


def test_a_generation_with_four_stop_strings_gives_the_reference_text(scored):
    (served, served_docs), (alone, alone_docs) = scored[0]["minillm_until"], \
        scored[1]["minillm_until"]
    for doc_id, sample in served_docs.items():
        assert sample["resps"] == alone_docs[doc_id]["resps"], doc_id
    assert _metrics(served) == _metrics(alone)


def test_the_chat_completions_generate_the_reference_text_with_the_chat_template(
        tasks, server, reference_folder, tmp_path):
    served = _run(tasks, tmp_path / "chat", "local-chat-completions",
                  f"base_url={server.url}/v1/chat/completions,model=smollm2-135m,"
                  "tokenizer_backend=remote,num_concurrent=1,max_retries=1",
                  "minillm_until", chat=True)
    alone = _run(tasks, tmp_path / "hf", "hf", f"pretrained={reference_folder},dtype=float32",
                 "minillm_until", chat=True)
    (served_result, served_docs), (alone_result, alone_docs) = \
        served["minillm_until"], alone["minillm_until"]
    for doc_id, sample in served_docs.items():
        assert sample["resps"] == alone_docs[doc_id]["resps"], doc_id
    assert _metrics(served_result) == _metrics(alone_result)
