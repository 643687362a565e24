"""What an acceptance rate buys: the speed-up of a draft of a given cost.

Costs are in units of one plain decode step of the target. One round drafts k tokens, each
costing `draft_cost` (a draft model runs k steps one after another), then verifies them in one
target pass over k + 1 tokens, costing `verify_cost` (about 1 while decode is bound by memory
bandwidth; the lesson measures it). If each drafted token is accepted with probability a,
independently, the round yields (1 - a^(k+1)) / (1 - a) tokens, so

    speed-up = (1 - a^(k+1)) / (1 - a) / (k * draft_cost + verify_cost)

(Leviathan et al., 2023, with verify_cost = 1). A separate draft model pays a large draft_cost;
Medusa's heads, EAGLE's one-layer head and DeepSeek-V3's MTP modules read the target's own hidden
state, so their draft_cost is small and training them is what raises a.
"""

from __future__ import annotations

import math

from ..utils.validate import check_int, check_number
from .acceptance import expected_tokens_per_pass


def _check_costs(k, draft_cost, verify_cost) -> tuple[int, float, float]:
    k = check_int("k", k, 0, allowed="an int >= 0 (the tokens drafted per round)")
    draft_cost = check_number("draft_cost", draft_cost, 0,
                              allowed="a number >= 0 (one draft token's cost, in decode steps)")
    verify_cost = check_number("verify_cost", verify_cost, 0, ok=lambda v: 0 < v < math.inf,
                               allowed="a number > 0 (the verifying pass's cost, in decode "
                                       "steps)")
    return k, draft_cost, verify_cost


def expected_speedup(acceptance: float, k: int, draft_cost: float,
                     verify_cost: float = 1.0) -> float:
    """Plain decoding's time per token over speculative decoding's, when each of k drafted
    tokens is accepted independently with probability `acceptance`."""
    k, draft_cost, verify_cost = _check_costs(k, draft_cost, verify_cost)
    return expected_tokens_per_pass(acceptance, k) / (k * draft_cost + verify_cost)


def break_even_acceptance(k: int, draft_cost: float, verify_cost: float = 1.0) -> float | None:
    """The lowest acceptance rate at which speculation is as fast as plain decoding (0.0 when
    it always is), or None when even accepting every draft loses (k + 1 < a round's cost)."""
    k, draft_cost, verify_cost = _check_costs(k, draft_cost, verify_cost)
    cost = k * draft_cost + verify_cost
    if k + 1 < cost:
        return None
    if cost <= 1:
        return 0.0
    low, high = 0.0, 1.0  # tokens per round rise with the acceptance rate: bisect
    for _ in range(60):
        middle = (low + high) / 2
        if expected_tokens_per_pass(middle, k) < cost:
            low = middle
        else:
            high = middle
    return high


def accepted_per_round(acceptance: float, k: int) -> list[float]:
    """The chance that a round accepts exactly m of its k drafted tokens, for m = 0..k, when
    each is accepted independently with probability `acceptance` and the first rejection ends
    the round: a^m (1 - a) for m < k, a^k for m = k."""
    a = check_number("acceptance", acceptance, 0, 1, allowed="a probability in [0, 1]")
    k = check_int("k", k, 0, allowed="an int >= 0 (the tokens drafted per round)")
    return [a ** m * (1 - a) for m in range(k)] + [a ** k]
