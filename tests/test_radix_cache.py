"""The radix-tree prefix cache against a plain list of cached sequences (hits to the token, at
least one token left to compute), its LRU eviction, and the block-hash replay against the
engine's own prefix-cache counts on a tiny model."""

import random

import pytest

from minillm.model.toy import tiny_model
from minillm.engine import Engine
from minillm.engine.radix_cache import RadixCache, block_cache_hit_rate, radix_cache_hit_rate


def longest_cached_prefix(cached, tokens):
    """The reference: the longest common prefix with any cached sequence, last token excluded."""
    best = 0
    for seq in cached:
        n = 0
        while n < min(len(seq), len(tokens) - 1) and seq[n] == tokens[n]:
            n += 1
        best = max(best, n)
    return best


def test_hits_are_counted_to_the_token_against_a_list_of_sequences():
    rng = random.Random(0)
    cache, cached = RadixCache(), []
    stems = [[rng.randrange(5) for _ in range(rng.randint(1, 12))] for _ in range(6)]
    for _ in range(300):
        seq = rng.choice(stems) + [rng.randrange(5) for _ in range(rng.randint(0, 10))]
        assert cache.match(seq) == longest_cached_prefix(cached, seq)
        cache.insert(seq)
        cached.append(seq)
        # the tree holds each distinct prefix once: its size is the number of distinct prefixes
        assert cache.tokens == len({tuple(s[:i]) for s in cached for i in range(1, len(s) + 1)})


def test_a_shared_start_that_ends_inside_a_block_is_shared_to_the_token():
    system = list(range(37))
    first, second = system + [100, 101, 102], system + [200, 201]
    cache = RadixCache()
    cache.insert(first)
    assert cache.match(second) == 37
    assert cache.match(first) == len(first) - 1  # the last token is always computed
    assert cache.tokens == len(first)
    cache.insert(second)
    assert cache.tokens == len(first) + 2  # the branch stores only what differs
    blocks = block_cache_hit_rate([(first, [1]), (second, [1])], num_blocks=16, block_size=16)
    assert blocks.hit_tokens == 32  # the block-hash chain shares whole blocks only


def test_lru_eviction_drops_the_least_recently_used_leaf_first():
    cache = RadixCache(capacity=12)
    a, b, c = [1, 2, 3, 4, 5], [1, 2, 6, 7, 8], [9, 9, 9, 9, 9]
    cache.insert(a)          # 5 tokens
    cache.insert(b)          # + 3 (shares 1, 2)
    assert cache.tokens == 8
    cache.match(a + [0])     # all of a's path is now the most recently used
    cache.insert(c)          # 13 tokens > 12: b's leaf (6, 7, 8) goes, not a's
    assert cache.tokens == 10
    assert cache.match(a + [0]) == 5 and cache.match(b) == 2 and cache.match(c + [0]) == 5


def test_capacity_and_eviction_of_everything():
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        RadixCache(0)
    cache = RadixCache(capacity=4)
    cache.insert([1, 2, 3, 4, 5, 6])  # longer than the capacity: it does not stay
    assert cache.tokens == 0 and cache.leaves() == []  # one edge of 6: evicted whole
    cache.insert([1, 2])
    assert cache.evict(100) == 2 and cache.tokens == 0


def test_the_block_replay_counts_what_the_engine_counts():
    """Requests run one at a time through the engine (max_num_seqs=1) hit the prefix cache
    exactly as the replay of their prompts and outputs says, also when blocks are evicted."""
    model, tok = tiny_model()
    rng = random.Random(1)
    stems = [[rng.randrange(64) for _ in range(rng.randint(5, 40))] for _ in range(4)]
    prompts = [rng.choice(stems) + [rng.randrange(64) for _ in range(rng.randint(1, 20))]
               for _ in range(30)]
    news = [rng.randint(1, 12) for _ in prompts]
    for num_blocks in (64, 12):
        engine = Engine(model, tok, num_blocks=num_blocks, block_size=8, max_num_seqs=1,
                        max_num_batched_tokens=16)
        outs = engine.generate(prompts, [{"max_new_tokens": n} for n in news], ignore_eos=True)
        replay = block_cache_hit_rate([(p, o.token_ids) for p, o in zip(prompts, outs)],
                                      num_blocks, block_size=8)
        assert engine.blocks.hit_tokens > 0
        assert (replay.hit_tokens, replay.queried_tokens) == \
            (engine.blocks.hit_tokens, engine.blocks.queried_tokens)
        radix = radix_cache_hit_rate([(p, o.token_ids) for p, o in zip(prompts, outs)],
                                     num_blocks * 8)
        assert radix.queried_tokens == replay.queried_tokens
        assert radix.tokens <= num_blocks * 8


def test_the_block_replay_refuses_a_request_larger_than_the_pool():
    with pytest.raises(ValueError, match="needs more than the pool's 2 blocks of 4"):
        block_cache_hit_rate([(list(range(10)), [1])], num_blocks=2, block_size=4)
