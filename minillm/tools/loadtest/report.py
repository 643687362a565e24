"""A load test's results summed up: percentiles of TTFT, TPOT and latency, and throughput, with
what they rest on: how many requests each percentile comes from, the output tokens asked
against received, and how each token count was made.

p50 is the median: half the requests did better. p99: one request in a hundred did worse; it is
what the unluckiest users see, and what serving systems promise (a service-level objective,
服务等级目标). Percentiles interpolate linearly between the two nearest values, as numpy's
default does (one definition for every minillm report: `minillm.utils.stats.percentile`). The
warnings (caveats.py) say when the figures do not mean what they seem to.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
from collections import Counter

from ...measure.metrics import throughput
from ...utils.columns import columns, pad
from ...utils.stats import percentile
from ...utils.wording import text
from .caveats import caveats

PERCENTILES = (50, 90, 99)
ROWS = ("ttft_ms", "tpot_ms", "latency_ms")


def _row_label(key: str) -> str:
    return {"ttft_ms": "TTFT ms", "tpot_ms": "TPOT ms",
            "latency_ms": text("latency ms", "延迟 ms")}[key]


def _spread(values_s) -> dict:
    """n (how many requests the figures rest on), mean and percentiles, in milliseconds."""
    values = [1000 * v for v in values_s if not math.isnan(v)]
    out = {"n": len(values), "mean": statistics.fmean(values) if values else math.nan}
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(values, q)
    return out


def ended_early(result, asked: int) -> bool:
    """An answer ended early when its finish reason is not "length" (max_tokens reached) and it
    has fewer tokens than asked. (A count made by re-encoding the text may miss by a token, so
    "length" is trusted over it.)"""
    return result.finish_reason != "length" and result.output_tokens < asked


def _output_length(ok, asked: int) -> dict:
    counts = [r.output_tokens for r in ok]
    early = [r for r in ok if ended_early(r, asked)]
    return {"asked": asked, "mean": statistics.fmean(counts) if counts else math.nan,
            "min": min(counts, default=0), "max": max(counts, default=0),
            "ended_early": len(early),
            "finish_reasons": dict(Counter(r.finish_reason or "none" for r in early))}


def summarize(results, workload, seconds: float, url: str, model: str | None, *,
              probe=None, tokenizer: dict | None = None) -> dict:
    """The report: settings, counts, and the figures in milliseconds and tokens per second.
    `probe`: what full_length.probe found; `tokenizer`: tokens.TokenCounter.summary()."""
    from .full_length import Probe

    probe = probe or Probe()
    ok = [r for r in results if r.ok]
    metrics = [r.metrics(workload.stream) for r in ok]
    report = {"url": url, "model": model, "workload": workload.as_dict(),
              "requests": len(results), "ok": len(ok), "errors": len(results) - len(ok),
              "error_examples": sorted({r.error for r in results if not r.ok})[:3],
              "seconds": seconds,
              "prompt_tokens": sum(r.prompt_tokens or 0 for r in ok),
              "output_tokens": sum(r.output_tokens for r in ok),
              "output_length": _output_length(ok, workload.output_tokens),
              "full_length": {"asked": workload.full_length, "sent": list(probe.sent),
                              "refused": probe.refused},
              "counted_by": {"prompt": dict(Counter(r.prompt_tokens_by or "unknown"
                                                    for r in ok)),
                             "output": dict(Counter(r.output_tokens_by or "unknown"
                                                    for r in ok))},
              "tokenizer": tokenizer,
              "client": {"python": platform.python_version(), "cpu_count": os.cpu_count(),
                         "load_average_1min": round(os.getloadavg()[0], 2)
                         if hasattr(os, "getloadavg") else None}}
    if ok:
        first = min(r.start for r in ok)
        last = max(r.end for r in ok)
        wall = last - first
        if workload.stream and all(m.n_tokens for m in metrics):
            wall = throughput(metrics).seconds  # the same figure, by minillm.measure.metrics
        report["throughput_tok_s"] = report["output_tokens"] / wall if wall > 0 else math.nan
        report["requests_per_s"] = len(ok) / wall if wall > 0 else math.nan
        report["latency_ms"] = _spread([m.latency for m in metrics])
        report["ttft_ms"] = _spread([m.ttft for m in metrics])
        report["tpot_ms"] = _spread([m.tpot for m in metrics])
    report["warnings"] = caveats(report)
    return report


def _counted_by(report: dict) -> str:
    name = (report.get("tokenizer") or {}).get("name")
    ways = {"tokenizer": text("tokenizer {name}", "分词器 {name}", name=name),
            "server": text("server", "服务器"), "events": text("events", "流事件"),
            "unknown": text("unknown", "未知")}
    parts = []
    for what in ("prompt", "output"):
        counts = text(", ", "、").join(f"{ways.get(way, way)} {n}"
                           for way, n in sorted(report["counted_by"][what].items()))
        parts.append(text("{what} {counts}", "{what}：{counts}", counts=counts,
                          what=text(what, {"prompt": "提示", "output": "输出"}[what])))
    line = text("tokens counted by (requests): {parts}", "词元的计数方式（请求数）：{parts}",
                parts=text("; ", "；").join(parts))
    check = (report.get("tokenizer") or {}).get("prompt_check")
    if check:
        line += text(" (the probe's prompt: {tokenizer} tokens by the tokenizer, {server} by the "
                     "server)", "（探测用的提示：分词器数出 {tokenizer} 个词元，服务器数出 {server} 个）",
                     tokenizer=check["tokenizer"], server=check["server"])
    return line


def _full_length_line(report: dict) -> str:
    fl = report["full_length"]
    if not fl["asked"]:
        return text("full length not asked (--no-full-length): answers may end at end of text",
                    "没有要求生成满长度（--no-full-length）：回答可能在文本结束处提前结束")
    line = text("full length asked with {ways}", "要求生成满长度的方式：{ways}",
                ways=text(", ", "、").join(fl["sent"]) or text("nothing the server accepts",
                                                   "服务器一种都不接受"))
    if fl["refused"]:
        line += text(" (refused: {ways})", "（被拒绝：{ways}）", ways=text(", ", "、").join(fl["refused"]))
    return line


def _warnings(report: dict) -> list[str]:
    return [text("WARNING: {x}", "警告：{x}", x=x) for x in report["warnings"]]


def _settings_lines(report: dict) -> list[str]:
    w = report["workload"]
    stream = text("streaming", "流式") if w["stream"] else text("not streaming", "非流式")
    rate = text(", {rate} req/s", "，每秒 {rate} 个请求", rate=w["rate"]) if w["rate"] else ""
    return [text("{url}  model {model}  {endpoint}, {stream}",
                 "{url}  模型 {model}  {endpoint}，{stream}",
                 url=report["url"], model=report["model"], endpoint=w["endpoint"], stream=stream),
            text("{requests} requests at concurrency {concurrency}{rate}, ~{prompt} prompt tokens, "
                 "{output} output tokens: {ok} ok, {errors} failed in {seconds:.1f} s",
                 "{requests} 个请求，并发数 {concurrency}{rate}，提示约 {prompt} 个词元，输出 {output} "
                 "个词元：{ok} 个成功，{errors} 个失败，用时 {seconds:.1f} 秒",
                 requests=report["requests"], concurrency=w["concurrency"], rate=rate,
                 prompt=w["prompt_tokens"], output=w["output_tokens"], ok=report["ok"],
                 errors=report["errors"], seconds=report["seconds"])]


def _output_length_line(report: dict) -> str:
    out = report["output_length"]
    reasons = text(", ", "、").join(f"{why} {n}" for why, n in sorted(out["finish_reasons"].items()))
    line = text("output tokens per answer: {asked} asked, {mean:.1f} received on average (min "
                "{min}, max {max}); {early} of {ok} ended early",
                "每个回答的输出词元：要求 {asked} 个，平均收到 {mean:.1f} 个（最少 {min}，最多 {max}）；"
                "{ok} 个中有 {early} 个提前结束", asked=out["asked"], mean=out["mean"],
                min=out["min"], max=out["max"], early=out["ended_early"], ok=report["ok"])
    if reasons:
        line += text(" (finish_reason {reasons})", "（finish_reason {reasons}）", reasons=reasons)
    return line


def table(report: dict) -> str:
    """The report as a plain-text table, the warnings last, in the language of
    minillm.utils.wording (the command line's is English)."""
    lines = _settings_lines(report)
    if report["errors"]:
        lines += [text("  error: {e}", "  错误：{e}", e=e) for e in report["error_examples"]]
    if not report["ok"]:
        return "\n".join(lines + _warnings(report))
    lines.append(_full_length_line(report))
    head = f"{'':<12}{'n':>4}{pad(text('mean', '平均'), 10, right=True)}" + "".join(
        f"{'p' + str(q):>10}" for q in PERCENTILES)
    lines += [head, "-" * columns(head)]
    for key in ROWS:
        row = report[key]
        lines.append(f"{pad(_row_label(key), 12)}{row['n']:>4}" + "".join(
            f"{row[k]:>10.1f}" for k in ["mean"] + [f"p{q}" for q in PERCENTILES]))
    lines.append(_output_length_line(report))
    lines.append(text("throughput {tok_s:.1f} output tok/s, {req_s:.2f} req/s; {output} output "
                      "and {prompt} prompt tokens",
                      "吞吐量：每秒 {tok_s:.1f} 个输出词元，每秒 {req_s:.2f} 个请求；输出词元 {output} 个，"
                      "提示词元 {prompt} 个", tok_s=report["throughput_tok_s"],
                      req_s=report["requests_per_s"], output=report["output_tokens"],
                      prompt=report["prompt_tokens"]))
    lines.append(_counted_by(report))
    c = report["client"]
    lines.append(text("client: {cpus} CPUs, load average {load}",
                      "客户端：{cpus} 个 CPU，平均负载 {load}", cpus=c["cpu_count"],
                      load=c["load_average_1min"]))
    lines += _warnings(report)
    return "\n".join(lines)
