"""The sentences the engine prints for a lesson, in both languages (minillm.utils.wording):
English by default, Chinese after the course's set_language("zh"), English again after
set_language("en"). Each converted sentence is pinned in both."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from minillm.course import set_language
from minillm.distributed.demos import ParallelReport
from minillm.generation.agreement import rule
from minillm.measure import comparison
from minillm.measure.comparison import Comparison, load_average, too_noisy
from minillm.measure.metrics import RequestMetrics, Throughput
from minillm.speculative.loop import SpeculativeStats
from minillm.utils.wording import language, text, use_language



def test_english_by_default_and_the_course_switch_moves_the_engine_too():
    assert language() == "en" and text("a", "甲") == "a"
    set_language("zh")
    try:
        assert language() == "zh" and text("a", "甲") == "甲"
    finally:
        set_language("en")
    assert language() == "en" and text("a", "甲") == "a"


def test_both_languages_share_one_set_of_fields_and_plain_strings_are_not_formatted():
    assert text("{n} tokens", "{n} 个词元", n=3) == "3 tokens"
    use_language("zh")
    try:
        assert text("{n} tokens", "{n} 个词元", n=3) == "3 个词元"
        assert text("no {fields}", "没有{fields}") == "没有{fields}"
    finally:
        use_language("en")


@pytest.mark.parametrize("bad", ["fr", "zh-CN", "", None, "ZH"])
def test_an_unknown_language_is_refused_naming_the_choices(bad):
    with pytest.raises(ValueError, match="use one of 'en', 'zh'"):
        use_language(bad)
    assert language() == "en"


class FakeLoad:
    def getloadavg(self):
        return (1.5, 0.0, 0.0)

    def cpu_count(self):
        return 2


SENTENCES = {
    "too_noisy": (too_noisy, "too noisy to call: close other programs and rerun this cell",
                  "噪声太大，无法下结论；关掉其他程序，再运行一次这个单元格"),
    "spread_text": (lambda: Comparison(a=(1.0, 2.0, 1.0), b=(2.0, 3.0, 1.5)).spread_text(),
                    "1.50x (1.50-2.00 over 3 interleaved repetitions)",
                    "1.50x（交替计时 3 轮，范围 1.50-2.00）"),
    "spread_text, one repetition": (lambda: Comparison(a=(1.0,), b=(2.0,)).spread_text(),
                                    "2.00x (2.00-2.00 over 1 interleaved repetition)",
                                    "2.00x（交替计时 1 轮，范围 2.00-2.00）"),
    "rule, cpu": (lambda: rule(SimpleNamespace(device="cpu")),
                  "exactly (a CPU in float32 gives the same tokens whatever the batch shape)",
                  "逐个词元完全相同（CPU 上用 float32，无论批的形状如何，词元都一样）"),
    "rule, gpu": (lambda: rule(SimpleNamespace(device="cuda")),
                  "up to the first near tie (top-2 logits within 0.01): on cuda kernels sum in "
                  "shape-dependent orders",
                  "比到第一个近似并列为止（前两名的 logit 相差不到 0.01）：cuda 上的算子按随形状而变"
                  "的顺序求和"),
    "RequestMetrics": (lambda: str(RequestMetrics(start=0.0, token_times=(0.3, 0.35, 0.4, 0.45))),
                       "4 tokens: TTFT 300.0 ms, TPOT 50.0 ms (20.0 tok/s), latency 450.0 ms",
                       "4 个词元：TTFT 300.0 ms，TPOT 50.0 ms（每秒 20.0 个词元），端到端延迟 450.0 ms"),
    "Throughput": (lambda: str(Throughput(requests=2, output_tokens=8, seconds=0.5,
                                          mean_ttft=0.1, mean_tpot=0.05, mean_latency=0.4)),
                   "2 requests, 8 tokens in 0.50 s: 16.0 tok/s; mean TTFT 100.0 ms, mean TPOT "
                   "50.0 ms",
                   "2 个请求，0.50 秒生成 8 个词元：每秒 16.0 个词元；平均 TTFT 100.0 ms，平均 TPOT "
                   "50.0 ms"),
    "ParallelReport": (lambda: str(ParallelReport(1.5e-5, True, False, [], [], [])),
                       "max |logit difference| = 1.50e-05, top-1 agrees at every position: True\n"
                       "greedy tokens equal: False",
                       "最大 |logit 差| = 1.50e-05，每个位置的第一名都一致：True\n"
                       "贪心解码的词元相同：False"),
    "ParallelReport, no tokens": (lambda: str(ParallelReport(2e-6, False, None, [], [], [])),
                                  "max |logit difference| = 2.00e-06, top-1 agrees at every "
                                  "position: False",
                                  "最大 |logit 差| = 2.00e-06，每个位置的第一名都一致：False"),
    "SpeculativeStats.summary": (
        lambda: SpeculativeStats(k=4, passes=5, proposed=20, accepted=15,
                                 new_tokens=20).summary(),
        "k=4: 20 tokens in 5 target passes (4.00 per pass), 15/20 drafted tokens accepted (75%)",
        "k=4：目标模型前向传播 5 次，生成 20 个词元（每次 4.00 个），草稿词元接受了 15/20（75%）"),
}


def test_the_bpe_progress_bar_follows_the_language(chinese, monkeypatch):
    import tqdm.auto

    from minillm.tokenizer.train import learn_merges

    shown = []

    class Bar:
        def __init__(self, **kwargs):
            shown.append(kwargs["desc"])

        def update(self, n=1):
            pass

        def close(self):
            pass

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    learn_merges("abab abab", 260, special_tokens=(), progress=True)
    assert shown == ["BPE 合并"]


@pytest.mark.parametrize("name", SENTENCES)
def test_each_sentence_in_english_by_default(name):
    make, english, _ = SENTENCES[name]
    assert make() == english


@pytest.mark.parametrize("name", SENTENCES)
def test_each_sentence_in_chinese_after_set_language_zh(name, chinese):
    make, _, chinese_text = SENTENCES[name]
    assert make() == chinese_text


def test_load_average_in_both_languages(monkeypatch):
    monkeypatch.setattr(comparison, "os", FakeLoad())
    assert load_average() == "load average 1.5 on 2 CPUs"
    set_language("zh")
    try:
        assert load_average() == "2 个 CPU 上的平均负载为 1.5"
    finally:
        set_language("en")


def test_too_noisy_is_imported_in_the_language_of_the_moment(chinese):
    """A Chinese notebook sets the language before its imports, and may not change the calls:
    `from ... import TOO_NOISY` there gives the Chinese, through the package's lazy exports
    too (which must not keep the first language they saw)."""
    from minillm.measure import TOO_NOISY as via_package
    from minillm.measure.comparison import TOO_NOISY

    assert TOO_NOISY == via_package == SENTENCES["too_noisy"][2]
    set_language("en")
    from minillm.measure import TOO_NOISY as via_package
    from minillm.measure.comparison import TOO_NOISY

    assert TOO_NOISY == via_package == SENTENCES["too_noisy"][1]
    assert "rerun this cell" in TOO_NOISY  # what tests/test_compare.py relies on


def test_an_unknown_module_attribute_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="TOO_QUIET"):
        comparison.TOO_QUIET
    with pytest.raises(ImportError):
        exec("from minillm.measure.comparison import TOO_QUIET", {})


def test_the_environment_variable_starts_the_engine_in_chinese():
    env = dict(os.environ, MINILLM_LANGUAGE="zh")
    out = subprocess.run([sys.executable, "-c", "from minillm.measure.comparison import "
                          "too_noisy; print(too_noisy())"], env=env, capture_output=True,
                         text=True)
    assert out.stdout.strip() == SENTENCES["too_noisy"][2], out.stderr


QUANT_ROW = dict(row="int8", weight_bytes=2e8, linear_bytes=1e8, perplexity=9.5,
                 max_logit_error=0.5, mean_logit_error=0.01, top1_agreement=0.99,
                 prefill_tokens_per_s=100.0, decode_tokens_per_s=20.0)


@pytest.mark.parametrize("lang, head, labels", [
    ("en", "| scheme | weights MB |", ["weight memory (MB)", "perplexity (lower is better)",
                                         "memory vs quality", "memory vs speed"]),
    ("zh", "| 方案 | 权重 MB |", ["权重内存（MB）", "困惑度（越低越好）", "内存与质量",
                                   "内存与速度"]),
])
def test_chapter_07s_benchmark_table_and_chart_follow_the_language(lang, head, labels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from minillm.tools.bench.quantization import plot_benchmark, table

    set_language(lang)
    try:
        assert table([QUANT_ROW]).startswith(head)
        fig = plot_benchmark([QUANT_ROW])
        a, b = fig.axes
        drawn = [a.get_xlabel(), a.get_ylabel(), a.get_title(), b.get_title()]
        plt.close(fig)
    finally:
        set_language("en")
    assert drawn == labels


def test_a_served_summary_names_its_longest_gap_in_the_language_and_keeps_the_metric_names():
    from minillm.engine.disaggregation import Served

    served = Served([RequestMetrics(start=0.0, token_times=(0.1, 0.2, 0.5))], outputs=[])
    english = served.summary()
    assert list(english) == ["TTFT p50", "TTFT p90", "TPOT p50", "TPOT p90", "longest gap"]
    try:
        use_language("zh")
        chinese = served.summary()
    finally:
        use_language("en")
    assert list(chinese) == ["TTFT p50", "TTFT p90", "TPOT p50", "TPOT p90", "最长间隔"]
    assert chinese["最长间隔"] == english["longest gap"] == pytest.approx(0.3)
