"""Data parallelism (数据并行) in front of the engine: several replicas of the model, each with its
own prefix cache, and a router that picks a replica for each request.

Round robin spreads the requests evenly and ignores the caches, so the turns of one
conversation land on different replicas and each replica ends up caching every conversation.
A prefix-aware router (SGLang's cache-aware policy; llm-d and vLLM's production stack route so
too) sends a request to the replica whose cache already holds the longest part of its prompt,
unless that part is short or that replica has been given many more requests than the least
busy one; then the least busy one takes it.

`replay_routing` replays (prompt ids, output ids) requests one after another, as
`radix_cache.radix_cache_hit_rate` does for one replica: there is no clock, so "busy" counts
the requests a replica was given so far.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..utils.validate import check_int, check_number
from .radix_cache import RadixCache

POLICIES = ("round robin", "prefix-aware")


@dataclass
class RoutingReplay:
    """The replicas' caches after a replay, how many requests each was given, and the replica
    each request went to, in order."""

    policy: str
    caches: list[RadixCache]
    given: list[int]
    chosen: list[int]

    @property
    def hit_rate(self) -> float:
        """Prompt tokens found cached, over all replicas."""
        queried = sum(c.queried_tokens for c in self.caches)
        return sum(c.hit_tokens for c in self.caches) / queried if queried else 0.0

    @property
    def computed_tokens(self) -> int:
        """Prompt tokens the replicas computed: those not found in a cache."""
        return sum(c.queried_tokens - c.hit_tokens for c in self.caches)


def prefix_aware_choice(caches: list[RadixCache], given: list[int], prompt,
                        min_share: float, slack: int) -> int:
    """The replica with the longest cached prefix of `prompt`, if it covers at least `min_share`
    of the prompt and that replica was given at most `slack` requests more than the least busy
    one; otherwise the least busy replica (the first of equals)."""
    least = min(range(len(caches)), key=given.__getitem__)
    matched = [cache.walk(tuple(prompt[:-1]))[1] for cache in caches]
    best = max(range(len(caches)), key=matched.__getitem__)
    if matched[best] < min_share * len(prompt) or given[best] - given[least] > slack:
        return least
    return best


def replay_routing(requests, replicas: int, capacity: int | None, policy: str, *,
                   min_share: float = 0.5, slack: int = 4) -> RoutingReplay:
    """Route each (prompt ids, output ids) request to one of `replicas` replicas, each with a
    RadixCache of `capacity` tokens, by `policy` ("round robin" or "prefix-aware"): the chosen
    replica matches the prompt, then caches the prompt and the output but its last token."""
    check_int("replicas", replicas, 1)
    check_number("min_share", min_share, 0.0, 1.0)
    check_int("slack", slack, 0)
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    caches = [RadixCache(capacity) for _ in range(replicas)]
    given, chosen = [0] * replicas, []
    for i, (prompt, output) in enumerate(requests):
        if len(prompt) == 0:
            raise ValueError(f"request {i} has an empty prompt")
        r = (i % replicas if policy == "round robin"
             else prefix_aware_choice(caches, given, prompt, min_share, slack))
        caches[r].match(prompt)
        caches[r].insert(list(prompt) + list(output)[:-1])
        given[r] += 1
        chosen.append(r)
    return RoutingReplay(policy, caches, given, chosen)
