"""When a load test's figures do not mean what they seem to: the report's warnings.

- Answers that ended before the tokens asked: TPOT, latency and throughput then describe shorter
  answers than the workload says (a server ignored `ignore_eos`, or cut a stream short).
- Percentiles that rest on fewer than MIN_REQUESTS requests: p50, p90 and p99 of one value are
  that value three times, not a distribution.
- Token counts that are guesses: no usage from the server and no tokenizer, or a tokenizer that
  counts the probe's prompt differently from the server (not the server's model).
"""

from __future__ import annotations

MIN_REQUESTS = 5

CUT_SHORT = ("no finish_reason: the server closed the stream before the answer was done "
             "(llama-cpp-python's server does this to a stream when another request arrives, "
             "unless started with --interrupt_requests False)")


def caveats(report: dict) -> list[str]:
    """The warnings for `report` (report.summarize's dict), each one sentence or two."""
    if not report["ok"]:
        return []
    return [*_ended_early(report), *_few_requests(report), *_token_counts(report)]


def _ended_early(report: dict) -> list[str]:
    out = report["output_length"]
    if not out["ended_early"]:
        return []
    reasons = out["finish_reasons"]
    text = (f"{out['ended_early']} of {report['ok']} answers ended before the {out['asked']} "
            f"tokens asked (finish_reason " + ", ".join(f"{why} {n}" for why, n in
                                                         sorted(reasons.items())) +
            "): TPOT, latency and throughput describe shorter answers than asked")
    if "none" in reasons:
        text += "; " + CUT_SHORT
    if "stop" in reasons:
        full = report["full_length"]
        text += "; finish_reason stop: the model reached its end of text (or a stop string)"
        if not full["asked"]:
            text += ", as full length was not asked (--no-full-length)"
        elif full["sent"]:
            text += ": the server accepted " + ", ".join(full["sent"]) + " but did not honour it"
        else:
            text += ": the server refused every way of asking for full length (" + \
                ", ".join(full["refused"]) + ")"
    return [text]


def _few_requests(report: dict) -> list[str]:
    streamed = report["workload"]["stream"]
    few = [(label, report[key]["n"]) for key, label in
           (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("latency_ms", "latency"))
           if report[key]["n"] < MIN_REQUESTS and (streamed or key == "latency_ms")]
    if not few:
        return []
    counts = ", ".join(f"{label} {n}" for label, n in few)
    text = (f"percentiles resting on fewer than {MIN_REQUESTS} requests ({counts}) are one "
            "or a few values, not a distribution")
    if any(label == "TPOT" for label, _ in few):
        text += " (TPOT counts only answers of 2 tokens or more)"
    if report["ok"] < MIN_REQUESTS:
        text += f"; send {MIN_REQUESTS} requests or more"
    return [text]


def _token_counts(report: dict) -> list[str]:
    tokenizer = report.get("tokenizer") or {}
    by = report["counted_by"]
    out = []
    guessed = by["prompt"].get("unknown") or by["output"].get("events") or \
        by["output"].get("unknown")
    if guessed and tokenizer.get("error"):
        out.append(f"the server sent no usage and the tokenizer {tokenizer.get('name')!r} could "
                   f"not be loaded ({tokenizer.get('error')}): prompt tokens are unknown and "
                   "output tokens are stream events; name one with --tokenizer")
    check = tokenizer.get("prompt_check")
    if check and check["server"] != check["tokenizer"]:
        out.append(f"the tokenizer {tokenizer.get('name')!r} counts {check['tokenizer']} tokens "
                   f"in a prompt where the server counted {check['server']}: counts "
                   "made with it may be off; name the server's model with --tokenizer")
    return out
