"""Routing requests across replicas: round robin against prefix-aware routing, each replica with
its own radix-tree prefix cache (minillm/engine/routing.py)."""

import random

import pytest

from minillm.engine.radix_cache import radix_cache_hit_rate
from minillm.engine.routing import replay_routing


def chats(users: int, turns: int, seed: int = 0):
    """Multi-turn conversations, interleaved at random (each user's turns in order): every
    turn's prompt is the conversation so far plus a new question, its output a 12-token answer."""
    rng = random.Random(seed)
    system = list(range(1000, 1020))
    history = {u: system + [2000 + u] for u in range(users)}
    order = [u for u in range(users) for _ in range(turns)]
    rng.shuffle(order)
    requests = []
    for u in order:
        prompt = history[u] + [rng.randrange(3000, 4000) for _ in range(6)]
        output = [rng.randrange(4000, 5000) for _ in range(12)]
        requests.append((prompt, output))
        history[u] = prompt + output
    return requests


def test_round_robin_gives_each_replica_its_turn():
    routed = replay_routing(chats(5, 3), 3, None, "round robin")
    assert routed.given == [5, 5, 5]


def test_one_replica_is_the_plain_cache_whatever_the_policy():
    requests = chats(6, 4)
    alone = radix_cache_hit_rate(requests, 400)
    for policy in ("round robin", "prefix-aware"):
        routed = replay_routing(requests, 1, 400, policy)
        assert routed.caches[0].hit_tokens == alone.hit_tokens
        assert routed.hit_rate == alone.hit_rate


def test_a_conversation_stays_on_the_replica_that_caches_it():
    requests = chats(8, 4)
    # a first turn is 20 shared tokens of 27: below min_share, so it goes to the least busy
    routed = replay_routing(requests, 2, None, "prefix-aware", min_share=0.8, slack=8)
    user = [p[20] for p, _ in requests]  # the token after the shared system prompt names the user
    homes = {u: {r for r, v in zip(routed.chosen, user) if v == u} for u in set(user)}
    assert all(len(home) == 1 for home in homes.values()), homes
    spread = replay_routing(requests, 2, None, "round robin")
    assert any(len({r for r, v in zip(spread.chosen, user) if v == u}) == 2 for u in set(user))


def test_with_room_for_a_quarter_of_the_chats_prefix_aware_routing_computes_far_less():
    requests = chats(16, 6)
    longest = max(len(p) + len(o) for p, o in requests)
    capacity = 4 * longest  # each of 4 replicas holds about a quarter of the 16 conversations
    rr = replay_routing(requests, 4, capacity, "round robin")
    aware = replay_routing(requests, 4, capacity, "prefix-aware")
    assert aware.hit_rate > rr.hit_rate + 0.2, (aware.hit_rate, rr.hit_rate)
    assert aware.computed_tokens < 0.5 * rr.computed_tokens
    assert max(aware.given) - min(aware.given) <= 4 + 1  # the slack, plus the request in hand


def test_the_slack_bounds_how_far_the_replicas_drift_apart():
    same = [(list(range(50)) + [100 + i], [7]) for i in range(30)]  # one long shared prefix
    greedy = replay_routing(same, 2, None, "prefix-aware", slack=30)
    assert greedy.given == [30, 0]  # every one goes where the prefix is cached
    held = replay_routing(same, 2, None, "prefix-aware", slack=2)
    assert max(held.given) - min(held.given) <= 3


def test_a_prompt_matching_too_little_goes_to_the_least_busy_replica():
    requests = [([1, 2, 3, 4], [5]), ([9, 8, 7, 6], [5]), ([1, 2, 30, 40, 50, 60], [5])]
    routed = replay_routing(requests, 2, None, "prefix-aware", min_share=0.5)
    assert routed.given == [2, 1]  # the third shares 2 of 6 tokens: below half, so replica 0
    strict = replay_routing(requests, 2, None, "prefix-aware", min_share=0.9)
    assert strict.given == [2, 1]


@pytest.mark.parametrize("args, kwargs, error", [
    ((2, None, "random"), {}, "policy must be one of"),
    ((0, None, "round robin"), {}, "replicas must be"),
    ((2, None, "prefix-aware"), {"min_share": 1.5}, "min_share must be"),
    ((2, None, "prefix-aware"), {"slack": -1}, "slack must be"),
])
def test_bad_settings_say_what_is_allowed(args, kwargs, error):
    with pytest.raises(ValueError, match=error):
        replay_routing(chats(2, 2), *args, **kwargs)


def test_an_empty_prompt_is_named():
    with pytest.raises(ValueError, match="request 1 has an empty prompt"):
        replay_routing([([1, 2], [3]), ([], [3])], 2, None, "prefix-aware")
