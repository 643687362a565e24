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
from ...utils.stats import percentile
from .caveats import caveats

PERCENTILES = (50, 90, 99)
ROWS = (("ttft_ms", "TTFT ms"), ("tpot_ms", "TPOT ms"), ("latency_ms", "latency ms"))


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
    parts = []
    for what in ("prompt", "output"):
        ways = ", ".join(f"{'tokenizer ' + str(name) if way == 'tokenizer' else way} {n}"
                         for way, n in sorted(report["counted_by"][what].items()))
        parts.append(f"{what} {ways}")
    line = "tokens counted by (requests): " + "; ".join(parts)
    check = (report.get("tokenizer") or {}).get("prompt_check")
    if check:
        line += (f" (the probe's prompt: {check['tokenizer']} tokens by the tokenizer, "
                 f"{check['server']} by the server)")
    return line


def _full_length_line(report: dict) -> str:
    fl = report["full_length"]
    if not fl["asked"]:
        return "full length not asked (--no-full-length): answers may end at end of text"
    line = "full length asked with " + (", ".join(fl["sent"]) or "nothing the server accepts")
    if fl["refused"]:
        line += " (refused: " + ", ".join(fl["refused"]) + ")"
    return line


def table(report: dict) -> str:
    """The report as a plain-text table, the warnings last."""
    w = report["workload"]
    lines = [f"{report['url']}  model {report['model']}  {w['endpoint']}, "
             f"{'streaming' if w['stream'] else 'not streaming'}",
             f"{report['requests']} requests at concurrency {w['concurrency']}"
             + (f", {w['rate']} req/s" if w["rate"] else "")
             + f", ~{w['prompt_tokens']} prompt tokens, {w['output_tokens']} output tokens: "
             f"{report['ok']} ok, {report['errors']} failed in {report['seconds']:.1f} s"]
    if report["errors"]:
        lines += [f"  error: {e}" for e in report["error_examples"]]
    if not report["ok"]:
        return "\n".join(lines + [f"WARNING: {x}" for x in report["warnings"]])
    lines.append(_full_length_line(report))
    head = f"{'':<12}{'n':>4}{'mean':>10}" + "".join(f"{'p' + str(q):>10}" for q in PERCENTILES)
    lines += [head, "-" * len(head)]
    for key, label in ROWS:
        row = report[key]
        lines.append(f"{label:<12}{row['n']:>4}" + "".join(
            f"{row[k]:>10.1f}" for k in ["mean"] + [f"p{q}" for q in PERCENTILES]))
    out = report["output_length"]
    reasons = ", ".join(f"{why} {n}" for why, n in sorted(out["finish_reasons"].items()))
    lines.append(f"output tokens per answer: {out['asked']} asked, {out['mean']:.1f} received on "
                 f"average (min {out['min']}, max {out['max']}); {out['ended_early']} of "
                 f"{report['ok']} ended early" + (f" (finish_reason {reasons})" if reasons else ""))
    lines.append(f"throughput {report['throughput_tok_s']:.1f} output tok/s, "
                 f"{report['requests_per_s']:.2f} req/s; {report['output_tokens']} output and "
                 f"{report['prompt_tokens']} prompt tokens")
    lines.append(_counted_by(report))
    c = report["client"]
    lines.append(f"client: {c['cpu_count']} CPUs, load average {c['load_average_1min']}")
    lines += [f"WARNING: {x}" for x in report["warnings"]]
    return "\n".join(lines)
