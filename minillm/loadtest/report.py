"""A load test's results summed up: percentiles of TTFT, TPOT and latency, and throughput.

p50 is the median: half the requests did better. p99: one request in a hundred did worse; it is
what the unluckiest users see, and what serving systems promise (a service-level objective,
服务等级目标). Percentiles interpolate linearly between the two nearest values, as numpy's
default does (one definition for every minillm report: `minillm.stats.percentile`).
"""

from __future__ import annotations

import math
import os
import platform
import statistics

from ..metrics import throughput
from ..stats import percentile

PERCENTILES = (50, 90, 99)


def _spread(values_s) -> dict:
    values = [1000 * v for v in values_s if not math.isnan(v)]
    out = {"mean": statistics.fmean(values) if values else math.nan}
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(values, q)
    return out


def summarize(results, workload, seconds: float, url: str, model: str | None) -> dict:
    """The report: settings, counts, and the figures in milliseconds and tokens per second."""
    ok = [r for r in results if r.ok]
    metrics = [r.metrics(workload.stream) for r in ok]
    report = {"url": url, "model": model, "workload": workload.as_dict(),
              "requests": len(results), "ok": len(ok), "errors": len(results) - len(ok),
              "error_examples": sorted({r.error for r in results if not r.ok})[:3],
              "seconds": seconds,
              "prompt_tokens": sum(r.prompt_tokens or 0 for r in ok),
              "output_tokens": sum(r.output_tokens for r in ok),
              "client": {"python": platform.python_version(), "cpu_count": os.cpu_count(),
                         "load_average_1min": round(os.getloadavg()[0], 2)
                         if hasattr(os, "getloadavg") else None}}
    if ok:
        first = min(r.start for r in ok)
        last = max(r.end for r in ok)
        wall = last - first
        if workload.stream and all(m.n_tokens for m in metrics):
            wall = throughput(metrics).seconds  # the same figure, by minillm.metrics
        report["throughput_tok_s"] = report["output_tokens"] / wall if wall > 0 else math.nan
        report["requests_per_s"] = len(ok) / wall if wall > 0 else math.nan
        report["latency_ms"] = _spread([m.latency for m in metrics])
        report["ttft_ms"] = _spread([m.ttft for m in metrics])
        report["tpot_ms"] = _spread([m.tpot for m in metrics])
    return report


def table(report: dict) -> str:
    """The report as a plain-text table."""
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
        return "\n".join(lines)
    head = f"{'':<14}{'mean':>10}" + "".join(f"{'p' + str(q):>10}" for q in PERCENTILES)
    lines += [head, "-" * len(head)]
    for key, label in (("ttft_ms", "TTFT ms"), ("tpot_ms", "TPOT ms"),
                       ("latency_ms", "latency ms")):
        row = report[key]
        lines.append(f"{label:<14}" + "".join(f"{row[k]:>10.1f}" for k in
                                              ["mean"] + [f"p{q}" for q in PERCENTILES]))
    lines.append(f"throughput {report['throughput_tok_s']:.1f} output tok/s, "
                 f"{report['requests_per_s']:.2f} req/s; {report['output_tokens']} output and "
                 f"{report['prompt_tokens']} prompt tokens")
    c = report["client"]
    lines.append(f"client: {c['cpu_count']} CPUs, load average {c['load_average_1min']}")
    return "\n".join(lines)
