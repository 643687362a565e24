"""When a load test's figures do not mean what they seem to: the report's warnings.

- Answers that ended before the tokens asked: TPOT, latency and throughput then describe shorter
  answers than the workload says (a server ignored `ignore_eos`, or cut a stream short).
- Percentiles that rest on fewer than MIN_REQUESTS requests: p50, p90 and p99 of one value are
  that value three times, not a distribution.
- Token counts that are guesses: no usage from the server and no tokenizer, or a tokenizer that
  counts the probe's prompt differently from the server (not the server's model).
"""

from __future__ import annotations

from ...utils.wording import text as say

MIN_REQUESTS = 5


def cut_short() -> str:
    return say("no finish_reason: the server closed the stream before the answer was done "
               "(llama-cpp-python's server does this to a stream when another request arrives, "
               "unless started with --interrupt_requests False)",
               "没有 finish_reason：服务器在回答完成之前关闭了流（llama-cpp-python 的服务器在另一个"
               "请求到来时会这样切断一个流，除非启动时加上 --interrupt_requests False）")


def caveats(report: dict) -> list[str]:
    """The warnings for `report` (report.summarize's dict), each one sentence or two, in the
    language of minillm.utils.wording when they are made."""
    if not report["ok"]:
        return []
    return [*_ended_early(report), *_few_requests(report), *_token_counts(report)]


def _ended_early(report: dict) -> list[str]:
    out = report["output_length"]
    if not out["ended_early"]:
        return []
    reasons = out["finish_reasons"]
    text = say("{early} of {ok} answers ended before the {asked} tokens asked (finish_reason "
               "{reasons}): TPOT, latency and throughput describe shorter answers than asked",
               "{ok} 个回答中有 {early} 个在要求的 {asked} 个词元之前就结束了（finish_reason "
               "{reasons}）：TPOT、延迟和吞吐量描述的是比要求更短的回答",
               early=out["ended_early"], ok=report["ok"], asked=out["asked"],
               reasons=say(", ", "、").join(f"{why} {n}" for why, n in sorted(reasons.items())))
    then = say("; ", "；")
    if "none" in reasons:
        text += then + cut_short()
    if "stop" in reasons:
        full = report["full_length"]
        text += then + say("finish_reason stop: the model reached its end of text (or a stop "
                           "string)", "finish_reason stop：模型生成了文本结束符（或停止字符串）")
        if not full["asked"]:
            text += say(", as full length was not asked (--no-full-length)",
                        "，因为没有要求生成满长度（--no-full-length）")
        elif full["sent"]:
            text += say(": the server accepted {sent} but did not honour it",
                        "：服务器接受了 {sent}，却没有照做", sent=say(", ", "、").join(full["sent"]))
        else:
            text += say(": the server refused every way of asking for full length ({refused})",
                        "：服务器拒绝了每一种要求满长度的方式（{refused}）",
                        refused=say(", ", "、").join(full["refused"]))
    return [text]


def _few_requests(report: dict) -> list[str]:
    streamed = report["workload"]["stream"]
    few = [(label, report[key]["n"]) for key, label in
           (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("latency_ms", say("latency", "延迟")))
           if report[key]["n"] < MIN_REQUESTS and (streamed or key == "latency_ms")]
    if not few:
        return []
    counts = say(", ", "、").join(f"{label} {n}" for label, n in few)
    text = say("percentiles resting on fewer than {min} requests ({counts}) are one or a few "
               "values, not a distribution",
               "只基于不到 {min} 个请求的百分位数（{counts}）只是一个或几个值，不是一个分布",
               min=MIN_REQUESTS, counts=counts)
    if any(label == "TPOT" for label, _ in few):
        text += say(" (TPOT counts only answers of 2 tokens or more)",
                    "（TPOT 只统计 2 个词元及以上的回答）")
    if report["ok"] < MIN_REQUESTS:
        text += say("; send {min} requests or more", "；请发送至少 {min} 个请求",
                    min=MIN_REQUESTS)
    return [text]


def _token_counts(report: dict) -> list[str]:
    tokenizer = report.get("tokenizer") or {}
    by = report["counted_by"]
    out = []
    guessed = by["prompt"].get("unknown") or by["output"].get("events") or \
        by["output"].get("unknown")
    if guessed and tokenizer.get("error"):
        out.append(say("the server sent no usage and the tokenizer {name!r} could not be loaded "
                       "({error}): prompt tokens are unknown and output tokens are stream "
                       "events; name one with --tokenizer",
                       "服务器没有发送 usage，分词器 {name!r} 也加载不了（{error}）：提示词元数未知，"
                       "输出词元数是流事件的个数；请用 --tokenizer 指定一个分词器",
                       name=tokenizer.get("name"), error=tokenizer.get("error")))
    check = tokenizer.get("prompt_check")
    if check and check["server"] != check["tokenizer"]:
        out.append(say("the tokenizer {name!r} counts {tokens} tokens in a prompt where the "
                       "server counted {server}: counts made with it may be off; name the "
                       "server's model with --tokenizer",
                       "分词器 {name!r} 在一个提示里数出 {tokens} 个词元，服务器数出 {server} 个："
                       "用它数出的词元数可能有偏差；请用 --tokenizer 指定服务器的模型",
                       name=tokenizer.get("name"), tokens=check["tokenizer"],
                       server=check["server"]))
    return out
