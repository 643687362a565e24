"""Speculative decoding (推测解码): a cheap draft proposes k tokens, the target model checks them
all in one forward pass, and an acceptance rule keeps exactly the target's distribution.

    acceptance.py  the rule: accept draft token x with probability min(1, p(x)/q(x)); on a
                   rejection draw from normalise(max(0, p - q)); a bonus token when all pass.
                   Greedy decoding is the special case "accept while the draft picked the argmax".
    drafts.py      who proposes: PromptLookupDraft (copy what followed the latest n-gram's earlier
                   occurrence in the context), ModelDraft (a cheaper model, for example
                   `first_layers(model, 8)`: SmolLM2's first 8 layers with its final norm and head)
                   and SuffixDraft (a tree of what followed every earlier occurrence)
    loop.py        draft, verify, roll the KV cache back: SpeculativeDecoder and
                   speculative_generate, which returns the text with acceptance statistics
    tree.py        several drafts in one pass: DraftTree, its positions and attention mask, greedy
                   and sampled verification (the multi-draft rule, choose_child)
    tree_loop.py   the loop with a tree: TreeDecoder and tree_speculative_generate
    speedup.py     what an acceptance rate buys: the expected speed-up of k drafts of a given
                   cost, the acceptance rate where a draft breaks even

The three measured tasks and `compare`, which times plain against speculative decoding, are in
minillm/tools/bench/speculative.py (scripts/bench_speculative.py and the lesson run it).

    >>> out = speculative_generate(model, tokenizer, prompt, PromptLookupDraft(), k=4,
    ...                            max_new_tokens=64)
    >>> out.text, out.stats.acceptance_rate, out.stats.tokens_per_pass
"""

from .acceptance import (accept_or_resample, accept_probability, expected_tokens_per_pass,
                         residual_distribution, verify_greedy, verify_sampled)
from .drafts import Draft, ModelDraft, PromptLookupDraft, SuffixDraft, first_layers
from .loop import SpeculativeDecoder, SpeculativeGeneration, SpeculativeStats, speculative_generate
from .speedup import accepted_per_round, break_even_acceptance, expected_speedup
from .tree import (DraftTree, acceptance_with_candidates, choose_child, keep_path, tree_forward,
                   verify_tree_greedy, verify_tree_sampled)
from .tree_loop import TreeDecoder, tree_speculative_generate

__all__ = [
    "accept_or_resample", "accept_probability", "residual_distribution", "verify_greedy",
    "verify_sampled", "expected_tokens_per_pass", "Draft", "PromptLookupDraft", "ModelDraft",
    "first_layers", "SpeculativeDecoder", "SpeculativeGeneration",
    "SpeculativeStats", "speculative_generate", "expected_speedup", "break_even_acceptance",
    "accepted_per_round", "SuffixDraft", "DraftTree", "acceptance_with_candidates",
    "choose_child", "keep_path", "tree_forward", "verify_tree_greedy", "verify_tree_sampled",
    "TreeDecoder", "tree_speculative_generate",
]
