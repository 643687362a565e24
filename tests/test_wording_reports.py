"""The tools wing's reports that lessons print, in both languages (minillm.utils.wording): lesson
09's load-test table and its warnings, lesson 07's quantization table and machine line. English
by default and on the command line whatever MINILLM_LANGUAGE says; Chinese after the course's
set_language("zh"). The JSON reports keep their keys."""

import copy
import json
import os
import subprocess
import sys

import pytest

from minillm.course import set_language
from minillm.tools.bench.quantization import Machine, machine, table as quantization_table
from minillm.tools.loadtest.caveats import caveats
from minillm.tools.loadtest.report import table
from minillm.tools.server import free_port
from minillm.utils.wording import language



def full_report() -> dict:
    """Every branch of the table and the warnings: a rate, an error, full length sent and
    refused, each way of counting tokens, a tokenizer that disagrees with the server, answers
    that ended early (cut short and stopped)."""
    row = {"n": 3, "mean": 12.5, "p50": 12.0, "p90": 14.0, "p99": 14.8}
    report = {"url": "http://127.0.0.1:8000", "model": "tiny",
              "workload": {"endpoint": "completions", "stream": True, "concurrency": 2,
                           "rate": 4.0, "prompt_tokens": 16, "output_tokens": 8},
              "requests": 4, "ok": 3, "errors": 1, "error_examples": ["HTTP 500"],
              "seconds": 1.25, "prompt_tokens": 48, "output_tokens": 20,
              "output_length": {"asked": 8, "mean": 20 / 3, "min": 4, "max": 8,
                                "ended_early": 2, "finish_reasons": {"none": 1, "stop": 1}},
              "full_length": {"asked": True, "sent": ["ignore_eos"], "refused": ["min_tokens"]},
              "counted_by": {"prompt": {"server": 2, "tokenizer": 1},
                             "output": {"events": 1, "unknown": 2}},
              "tokenizer": {"name": "bpe", "error": "no such file",
                            "prompt_check": {"tokenizer": 7, "server": 5}},
              "client": {"python": "3.12.0", "cpu_count": 2, "load_average_1min": 1.5},
              "throughput_tok_s": 16.0, "requests_per_s": 2.4,
              "latency_ms": dict(row), "ttft_ms": dict(row), "tpot_ms": dict(row)}
    report["warnings"] = caveats(report)
    return report


def varied(**changes) -> dict:
    report = copy.deepcopy(full_report())
    for key, value in changes.items():
        report[key] = value
    report["warnings"] = caveats(report)
    return report


TABLE_EN = """\
http://127.0.0.1:8000  model tiny  completions, streaming
4 requests at concurrency 2, 4.0 req/s, ~16 prompt tokens, 8 output tokens: 3 ok, 1 failed in 1.2 s
  error: HTTP 500
full length asked with ignore_eos (refused: min_tokens)
               n      mean       p50       p90       p99
--------------------------------------------------------
TTFT ms        3      12.5      12.0      14.0      14.8
TPOT ms        3      12.5      12.0      14.0      14.8
latency ms     3      12.5      12.0      14.0      14.8
output tokens per answer: 8 asked, 6.7 received on average (min 4, max 8); 2 of 3 ended early \
(finish_reason none 1, stop 1)
throughput 16.0 output tok/s, 2.40 req/s; 20 output and 48 prompt tokens
tokens counted by (requests): prompt server 2, tokenizer bpe 1; output events 1, unknown 2 \
(the probe's prompt: 7 tokens by the tokenizer, 5 by the server)
client: 2 CPUs, load average 1.5
WARNING: 2 of 3 answers ended before the 8 tokens asked (finish_reason none 1, stop 1): TPOT, \
latency and throughput describe shorter answers than asked; no finish_reason: the server closed \
the stream before the answer was done (llama-cpp-python's server does this to a stream when \
another request arrives, unless started with --interrupt_requests False); finish_reason stop: \
the model reached its end of text (or a stop string): the server accepted ignore_eos but did not \
honour it
WARNING: percentiles resting on fewer than 5 requests (TTFT 3, TPOT 3, latency 3) are one or a \
few values, not a distribution (TPOT counts only answers of 2 tokens or more); send 5 requests \
or more
WARNING: the server sent no usage and the tokenizer 'bpe' could not be loaded (no such file): \
prompt tokens are unknown and output tokens are stream events; name one with --tokenizer
WARNING: the tokenizer 'bpe' counts 7 tokens in a prompt where the server counted 5: counts made \
with it may be off; name the server's model with --tokenizer"""

TABLE_ZH = """\
http://127.0.0.1:8000  模型 tiny  completions，流式
4 个请求，并发数 2，每秒 4.0 个请求，提示约 16 个词元，输出 8 个词元：3 个成功，1 个失败，用时 1.2 秒
  错误：HTTP 500
要求生成满长度的方式：ignore_eos（被拒绝：min_tokens）
               n      平均       p50       p90       p99
--------------------------------------------------------
TTFT ms        3      12.5      12.0      14.0      14.8
TPOT ms        3      12.5      12.0      14.0      14.8
延迟 ms        3      12.5      12.0      14.0      14.8
每个回答的输出词元：要求 8 个，平均收到 6.7 个（最少 4，最多 8）；3 个中有 2 个提前结束\
（finish_reason none 1、stop 1）
吞吐量：每秒 16.0 个输出词元，每秒 2.40 个请求；输出词元 20 个，提示词元 48 个
词元的计数方式（请求数）：提示：服务器 2、分词器 bpe 1；输出：流事件 1、未知 2\
（探测用的提示：分词器数出 7 个词元，服务器数出 5 个）
客户端：2 个 CPU，平均负载 1.5
警告：3 个回答中有 2 个在要求的 8 个词元之前就结束了（finish_reason none 1、stop 1）：TPOT、延迟和\
吞吐量描述的是比要求更短的回答；没有 finish_reason：服务器在回答完成之前关闭了流（llama-cpp-python \
的服务器在另一个请求到来时会这样切断一个流，除非启动时加上 --interrupt_requests False）；\
finish_reason stop：模型生成了文本结束符（或停止字符串）：服务器接受了 ignore_eos，却没有照做
警告：只基于不到 5 个请求的百分位数（TTFT 3、TPOT 3、延迟 3）只是一个或几个值，不是一个分布\
（TPOT 只统计 2 个词元及以上的回答）；请发送至少 5 个请求
警告：服务器没有发送 usage，分词器 'bpe' 也加载不了（no such file）：提示词元数未知，输出词元数是\
流事件的个数；请用 --tokenizer 指定一个分词器
警告：分词器 'bpe' 在一个提示里数出 7 个词元，服务器数出 5 个：用它数出的词元数可能有偏差；请用 \
--tokenizer 指定服务器的模型"""


def test_the_load_test_table_in_english_by_default():
    assert table(full_report()) == TABLE_EN


def test_the_load_test_table_in_chinese_after_set_language_zh(chinese):
    assert table(full_report()) == TABLE_ZH


WARNINGS = {
    "stop, full length not asked": (
        lambda: varied(full_length={"asked": False, "sent": [], "refused": []})["warnings"][0],
        "finish_reason stop: the model reached its end of text (or a stop string), as full "
        "length was not asked (--no-full-length)",
        "finish_reason stop：模型生成了文本结束符（或停止字符串），因为没有要求生成满长度"
        "（--no-full-length）"),
    "stop, every way refused": (
        lambda: varied(full_length={"asked": True, "sent": [],
                                    "refused": ["ignore_eos", "min_tokens"]})["warnings"][0],
        "the server refused every way of asking for full length (ignore_eos, min_tokens)",
        "服务器拒绝了每一种要求满长度的方式（ignore_eos、min_tokens）"),
    "few, enough requests": (
        lambda: varied(ok=5, requests=5)["warnings"][1],
        "percentiles resting on fewer than 5 requests (TTFT 3, TPOT 3, latency 3) are one or a "
        "few values, not a distribution (TPOT counts only answers of 2 tokens or more)",
        "只基于不到 5 个请求的百分位数（TTFT 3、TPOT 3、延迟 3）只是一个或几个值，不是一个分布"
        "（TPOT 只统计 2 个词元及以上的回答）"),
}


@pytest.mark.parametrize("name", WARNINGS)
def test_each_other_warning_in_both_languages(name):
    make, english, chinese_text = WARNINGS[name]
    assert make().endswith(english)
    set_language("zh")
    try:
        assert make().endswith(chinese_text)
    finally:
        set_language("en")


def test_the_other_table_lines_in_both_languages():
    report = varied(full_length={"asked": False, "sent": [], "refused": []},
                    workload={**full_report()["workload"], "stream": False, "rate": None},
                    ok=0)
    lines = {"url": "http://127.0.0.1:8000  model tiny  completions, not streaming",
             "counts": "4 requests at concurrency 2, ~16 prompt tokens, 8 output tokens: 0 ok, "
                       "1 failed in 1.2 s"}
    assert table(report).splitlines()[:2] == list(lines.values())
    assert "full length not asked (--no-full-length): answers may end at end of text" in \
        table(varied(full_length={"asked": False, "sent": [], "refused": []}))
    set_language("zh")
    try:
        assert table(report).splitlines()[:2] == [
            "http://127.0.0.1:8000  模型 tiny  completions，非流式",
            "4 个请求，并发数 2，提示约 16 个词元，输出 8 个词元：0 个成功，1 个失败，用时 1.2 秒"]
        assert "没有要求生成满长度（--no-full-length）：回答可能在文本结束处提前结束" in \
            table(varied(full_length={"asked": False, "sent": [], "refused": []}))
        assert "要求生成满长度的方式：服务器一种都不接受" in \
            table(varied(full_length={"asked": True, "sent": [], "refused": []}))
    finally:
        set_language("en")
    assert "full length asked with nothing the server accepts" in \
        table(varied(full_length={"asked": True, "sent": [], "refused": []}))


def test_the_chinese_table_lines_up_in_terminal_columns(chinese):
    lines = table(full_report()).splitlines()
    head, rule, *rows = lines[4:9]
    widths = [sum(2 if ord(c) > 0x2e80 else 1 for c in line) for line in (head, rule, *rows)]
    assert widths == [56] * 5, widths


QUANTIZED = [{"row": "int8", "weight_bytes": 2.5e6, "linear_bytes": 1.5e6, "perplexity": 12.3456,
              "max_logit_error": 0.5, "mean_logit_error": 0.01234, "top1_agreement": 0.95,
              "prefill_tokens_per_s": 100.0, "decode_tokens_per_s": 9.876}]
ROW = "| int8 | 2.5 | 1.5 | 12.346 | 0.500 | 0.0123 | 95.0% | 100.0 | 9.88 |"


def test_the_quantization_table_in_both_languages():
    assert quantization_table(QUANTIZED).splitlines() == [
        "| scheme | weights MB | linear MB | perplexity | max logit err | mean logit err "
        "| top-1 agree | prefill tok/s | decode tok/s |", "|" + "---|" * 9, ROW]
    set_language("zh")
    try:
        assert quantization_table(QUANTIZED).splitlines() == [
            "| 方案 | 权重 MB | 线性层 MB | 困惑度 | 最大 logit 误差 | 平均 logit 误差 "
            "| top-1 一致率 | 预填充词元/秒 | 解码词元/秒 |", "|" + "---|" * 9, ROW]
    finally:
        set_language("en")


MACHINE = Machine({"python": "3.12.1", "torch": "2.13.0", "cpu": "x86_64",
                   "cpu_capability": "AVX2", "threads": 1, "cores": 2, "load_average_1min": 1.5,
                   "time_utc": "2026-12-02 09:30:00"})


def test_the_machine_line_in_both_languages_and_its_keys_unchanged():
    assert str(MACHINE) == ("2 cores, 1 torch threads, x86_64 (AVX2), Python 3.12.1, torch "
                            "2.13.0, load average 1.50, 2026-12-02 09:30:00 UTC")
    set_language("zh")
    try:
        assert str(MACHINE) == ("2 个核心，torch 用 1 个线程，x86_64（AVX2），Python 3.12.1，"
                                "torch 2.13.0，平均负载 1.50，2026-12-02 09:30:00 UTC")
        measured = machine()
        assert str(Machine({**MACHINE, "load_average_1min": None})).endswith(
            "平均负载 n/a，2026-12-02 09:30:00 UTC")
    finally:
        set_language("en")
    assert isinstance(measured, dict) and sorted(json.loads(json.dumps(measured))) == sorted(
        ["python", "torch", "cpu", "cpu_capability", "threads", "cores", "load_average_1min",
         "time_utc"])


def test_the_command_line_stays_english_in_a_chinese_session():
    """MINILLM_LANGUAGE=zh starts the engine in Chinese; `python -m minillm bench serve` still
    prints English (here against a closed port: every request fails, the table says so)."""
    url = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, "MINILLM_LANGUAGE": "zh"}
    out = subprocess.run([sys.executable, "-m", "minillm", "bench", "serve", "--url",
                          url, "--requests", "2", "--concurrency", "1",
                          "--no-progress", "--no-full-length", "--timeout", "5"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    table_text, json_line = out.stdout.strip().rsplit("\n", 1)
    assert table_text.startswith(f"{url}  model None  completions, streaming\n"
                                 "2 requests at concurrency 1, "), table_text
    assert "个" not in out.stdout and json.loads(json_line)["errors"] == 2


def test_the_command_line_in_process_is_english_and_gives_the_language_back(chinese, capsys):
    from minillm.tools.cli import main

    url = f"http://127.0.0.1:{free_port()}"
    assert main(["bench", "serve", "--url", url, "--requests", "1", "--concurrency", "1",
                 "--no-progress", "--no-full-length", "--timeout", "5"]) == 1
    assert capsys.readouterr().out.startswith(f"{url}  model None  completions, streaming\n"
                                              "1 requests at concurrency 1")
    assert language() == "zh"
