"""Draft trees: one pass gives each node the logits of its own path; greedy tree decoding gives
exactly the plain tokens and leaves the cache as a fresh prefill would; the multi-draft rule
keeps the target's distribution; SuffixDraft's trees; bad input."""

import pytest
import torch

from minillm.course.checks.ch08_speculative import P, Q, chi_square_p_value
from minillm.generation.kv_cache import KVCache
from minillm.generation.loop import generate
from minillm.generation.stopping import Sequence
from minillm.speculative import (DraftTree, PromptLookupDraft, SuffixDraft, TreeDecoder,
                                 acceptance_with_candidates, choose_child, keep_path,
                                 tree_forward, tree_speculative_generate, verify_tree_greedy,
                                 verify_tree_sampled)
from test_speculative import Digits, assert_holds_a_fresh_prefill, tiny_llama, tiny_prompts


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tiny_llama()
    torch.set_num_threads(threads)


# --- the tree ---------------------------------------------------------------------------------

def test_paths_share_their_prefixes_and_parents_come_first():
    tree = DraftTree.from_paths([[10, 11, 12], [10, 13], [14], [10, 11]])
    assert tree.tokens == [10, 11, 12, 13, 14]
    assert tree.parents == [-1, 0, 1, 0, -1]
    assert tree.depths() == [1, 2, 3, 2, 1]
    assert tree.children(-1) == [0, 4] and tree.children(0) == [1, 3]
    assert tree.path(2) == [0, 1, 2] and tree.path(4) == [4]
    assert tree.positions(7).tolist() == [[7, 8, 9, 10, 9, 8]]


def test_the_mask_shows_each_node_the_cache_its_ancestors_and_itself():
    tree = DraftTree.from_paths([[10, 11, 12], [10, 13], [14]])
    seen = tree.attention_mask(2)[0, 0].int().tolist()
    assert seen == [[1, 1, 1, 0, 0, 0, 0, 0],   # the root
                    [1, 1, 1, 1, 0, 0, 0, 0],   # 10
                    [1, 1, 1, 1, 1, 0, 0, 0],   # 10 11
                    [1, 1, 1, 1, 1, 1, 0, 0],   # 10 11 12
                    [1, 1, 1, 1, 0, 0, 1, 0],   # 10 13: not 11's branch
                    [1, 1, 1, 0, 0, 0, 0, 1]]   # 14


@pytest.mark.parametrize("tokens, parents", [([1, 2], [-1]), ([1, 2], [-1, 1]), ([1], [-2])])
def test_a_tree_whose_parents_do_not_fit_is_refused(tokens, parents):
    with pytest.raises(ValueError, match="parent"):
        DraftTree(tokens, parents)


def test_one_tree_pass_gives_each_node_its_own_paths_logits(tiny):
    ids = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    tree = DraftTree.from_paths([[7, 8, 5], [7, 9], [3, 4], [3, 8, 8, 1]])
    cache = KVCache.for_model(tiny, 1, 32)
    with torch.inference_mode():
        tiny(torch.tensor([ids[:-1]]), cache=cache)
        logits = tree_forward(tiny, cache, ids[-1], tree)
        assert cache.length == len(ids) + len(tree)
        for i in range(len(tree)):
            own = tiny(torch.tensor([ids + [tree.tokens[n] for n in tree.path(i)]]))[0, -1]
            torch.testing.assert_close(logits[i + 1], own.float(), rtol=1e-6, atol=1e-6)


def test_the_kept_path_sits_where_a_fresh_prefill_puts_it(tiny):
    ids = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    tree = DraftTree.from_paths([[3, 4], [7, 9], [7, 8, 5]])
    cache = KVCache.for_model(tiny, 1, 32)
    with torch.inference_mode():
        tiny(torch.tensor([ids[:-1]]), cache=cache)
        tree_forward(tiny, cache, ids[-1], tree)
        kept = tree.path(len(tree) - 1)  # 7 8 5: nodes 2, 4, 5
        keep_path(cache, len(ids) - 1, kept)
        fresh = KVCache.for_model(tiny, 1, 32)
        tiny(torch.tensor([ids + [7, 8, 5]]), cache=fresh)
    assert cache.length == fresh.length == len(ids) + 3
    for layer in range(tiny.config.n_layers):
        for got, want in zip(cache.read(layer), fresh.read(layer)):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


def test_a_four_d_mask_must_be_booleans_of_the_whole_shape(tiny):
    cache = KVCache.for_model(tiny, 1, 16)
    with torch.inference_mode():
        tiny(torch.tensor([[1, 2, 3]]), cache=cache)
        with pytest.raises(ValueError, match=r"booleans shaped \(batch, 1, new tokens"):
            tiny(torch.tensor([[4, 5]]), cache=cache,
                 attention_mask=torch.ones(1, 1, 2, 4, dtype=torch.bool))
        with pytest.raises(ValueError, match="torch.int64"):
            tiny(torch.tensor([[4, 5]]), cache=cache,
                 attention_mask=torch.ones(1, 1, 2, 5, dtype=torch.long))


# --- greedy: exactly the plain tokens ---------------------------------------------------------

def test_greedy_tree_decoding_equals_plain_decoding(tiny):
    tokenizer = Digits()
    accepted = 0
    for prompt in tiny_prompts():
        want = generate(tiny, tokenizer, prompt, max_new_tokens=16).token_ids
        for budget in (1, 2, 5, 8):
            out = tree_speculative_generate(tiny, tokenizer, prompt, budget=budget,
                                            max_new_tokens=16)
            assert out.token_ids == want, f"prompt {prompt}, budget {budget}"
            s = out.stats
            assert s.new_tokens == 16 and sum(s.accepted_per_pass) == s.accepted
            assert all(0 <= a <= p <= budget for a, p in zip(s.accepted_per_pass,
                                                             s.proposed_per_pass))
            accepted += s.accepted
    assert accepted > 0


def test_the_cache_ends_as_a_fresh_prefill_of_the_sequence(tiny):
    tokenizer = Digits()
    prompt = tiny_prompts()[1]
    decoder = TreeDecoder(tiny, SuffixDraft(), budget=6)
    sequence = Sequence(prompt, tokenizer, [], 20)
    stats = decoder.run(prompt, sequence)
    assert stats.accepted < stats.proposed  # some branches were dropped
    assert_holds_a_fresh_prefill(tiny, decoder.cache, prompt + sequence.token_ids)


class StarDraft(SuffixDraft):
    """Proposes `budget` one-token guesses, every one a child of the root: the widest tree."""

    def tree(self, ids, budget):
        return DraftTree(list(range(1, budget + 1)), [-1] * budget)


def test_a_request_that_ends_at_the_context_window_fits_every_tree(tiny):
    # the request ends at max_seq_len (128): its last rounds have fewer free positions than the
    # 16 nodes the draft proposes, and the tree is cut to fit them (a parent before its children)
    prompt = tiny_prompts()[1] * 10
    max_new = tiny.config.max_seq_len - len(prompt)
    want = generate(tiny, Digits(), prompt, max_new_tokens=max_new).token_ids
    decoder = TreeDecoder(tiny, StarDraft(), budget=16)
    sequence = Sequence(prompt, Digits(), [], max_new)
    stats = decoder.run(prompt, sequence)
    assert sequence.token_ids == want
    free = [tiny.config.max_seq_len - len(prompt) - sum(a + 1 for a in stats.accepted_per_pass[:i])
            for i in range(stats.passes)]  # positions left before each round
    assert all(p <= f for p, f in zip(stats.proposed_per_pass, free))
    assert sum(p == f < 16 for p, f in zip(stats.proposed_per_pass, free)) >= 5


def test_greedy_verification_walks_the_matching_branch():
    tree = DraftTree.from_paths([[1, 2], [3, 4, 5]])  # nodes: 1, 2, 3, 4, 5
    scores = torch.zeros(6, 8)
    for row, best in enumerate([3, 2, 7, 4, 6, 0]):  # root -> 3 -> 4 -> (6, not 5)
        scores[row, best] = 1.0
    assert verify_tree_greedy(scores, tree) == ([3, 4, 6], [2, 3])
    with pytest.raises(ValueError, match=r"\(nodes \+ 1, vocab\) = \(6, vocab\)"):
        verify_tree_greedy(scores[:5], tree)


# --- sampling: the multi-draft rule -------------------------------------------------------------

@pytest.mark.parametrize("m", [1, 2, 3])
def test_candidates_drawn_from_q_keep_p(m):
    g = torch.Generator().manual_seed(m)
    trials = 6000
    drawn = torch.multinomial(Q, trials * m, replacement=True, generator=g).view(trials, m)
    picks = [choose_child(P, row.tolist(), Q, g) for row in drawn]
    counts = torch.bincount(torch.tensor([t for t, _ in picks]), minlength=len(P)).double()
    assert chi_square_p_value(counts, P) > 1e-3
    assert chi_square_p_value(counts, Q) < 1e-6
    share = sum(i is not None for _, i in picks) / trials
    assert abs(share - acceptance_with_candidates(P, Q, m)) < 0.03


def test_distinct_deterministic_candidates_keep_p():
    g = torch.Generator().manual_seed(0)
    picks = [choose_child(P, [2, 0, 5], None, g) for _ in range(6000)]
    counts = torch.bincount(torch.tensor([t for t, _ in picks]), minlength=len(P)).double()
    assert chi_square_p_value(counts, P) > 1e-3
    first_taken = sum(i == 0 for _, i in picks) / len(picks)
    assert abs(first_taken - P[2].item()) < 0.03  # candidate 2 is accepted with p(2)


def test_more_candidates_accept_more():
    one = acceptance_with_candidates(P, Q, 1)
    assert one == pytest.approx(torch.minimum(P, Q).sum().item())
    rates = [acceptance_with_candidates(P, Q, m) for m in range(1, 6)]
    assert all(a < b for a, b in zip(rates, rates[1:]))
    with pytest.raises(ValueError, match="m"):
        acceptance_with_candidates(P, Q, 0)


def test_sampled_tree_decoding_follows_the_target(tiny):
    """The first token of many seeded runs (a repeating prompt, so the tree has branches)
    follows the target's distribution at temperature 0.7."""
    tokenizer = Digits()
    prompt = [5, 6, 7, 8, 5, 6, 9, 8, 5, 6]
    with torch.inference_mode():
        p = torch.softmax(tiny(torch.tensor([prompt]))[0, -1].float() / 0.7, -1)
    counts = torch.zeros_like(p, dtype=torch.float64)
    for seed in range(600):
        out = tree_speculative_generate(tiny, tokenizer, prompt, budget=4, max_new_tokens=2,
                                        do_sample=True, temperature=0.7, seed=seed)
        counts[out.token_ids[0]] += 1
    cells = p.argsort(descending=True)[:4]
    pool = lambda t: torch.cat([t[cells], t.sum()[None] - t[cells].sum()])  # noqa: E731
    assert chi_square_p_value(pool(counts), pool(p.double())) > 1e-3


def test_sampled_verification_descends_into_accepted_children():
    tree = DraftTree.from_paths([[1, 2]])
    probs = torch.zeros(3, 4)
    probs[0, 1] = probs[1, 2] = probs[2, 3] = 1.0  # the target is sure of 1, 2, then 3
    assert verify_tree_sampled(probs, tree) == ([1, 2, 3], [0, 1])


# --- suffix drafts ------------------------------------------------------------------------------

def test_suffix_draft_counts_every_occurrence():
    ids = [1, 2, 3, 1, 2, 4, 1, 2, 3, 9, 1, 2]
    draft = SuffixDraft(max_match=4, depth=2)
    assert draft.continuations(ids) == [[3, 9], [4, 1], [3, 1]]  # latest first
    tree = draft.tree(ids, 4)
    # 3 twice; then once-seen prefixes, the shorter first, then the more recent
    assert tree.tokens == [3, 4, 9, 1] and tree.parents == [-1, -1, 0, 1]
    assert draft.propose(ids, 2) == ([3, 9], None)
    assert len(draft.tree(ids, 0)) == 0 and len(draft.tree([1, 2, 3], 4)) == 0


def test_prompt_lookup_follows_only_the_latest():
    ids = [1, 2, 3, 1, 2, 4, 1, 2, 3, 9, 1, 2]
    assert PromptLookupDraft(max_ngram=2).lookup(ids, 2) == [3, 9]


@pytest.mark.parametrize("kwargs, message", [
    ({"max_match": 0}, "max_match"), ({"depth": 0}, "depth"),
    ({"max_match": 2, "min_match": 3}, r"min_match \(3\) must be <= max_match \(2\)")])
def test_suffix_draft_refuses_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SuffixDraft(**kwargs)


def test_the_tree_loop_needs_a_tree_draft_and_a_budget(tiny):
    with pytest.raises(TypeError, match="proposes trees, such as SuffixDraft"):
        TreeDecoder(tiny, PromptLookupDraft())
    with pytest.raises(ValueError, match="budget"):
        TreeDecoder(tiny, SuffixDraft(), budget=0)
