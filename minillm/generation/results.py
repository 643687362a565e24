"""What every runner returns for one prompt: `minillm.generate` (a `Generation`), the engine
(a `RequestOutput`) and speculative decoding (a `SpeculativeGeneration`) share these fields,
with the same names and meanings."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..measure.metrics import RequestMetrics


@dataclass
class Completion:
    """One prompt's result.

    text              the new text (a stop string and everything after it cut off; EOS not shown)
    token_ids         the new token ids only (an EOS token that ended it is included)
    finish_reason     "eos", "length" or "stop" (the engine adds "cancelled" and "rejected");
                      None while a request still runs
    prompt_token_ids  the prompt's token ids
    metrics           its timing (TTFT, TPOT, latency), once it has finished
    """

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_token_ids: list[int] = field(default_factory=list)
    metrics: RequestMetrics | None = field(default=None, repr=False)
