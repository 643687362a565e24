"""The chapter 08 checkers: the right answers pass; each usual mistake gets its own hint; an
acceptance rule that ignores its generator is caught."""

import random

import pytest
import torch

from minillm.course.checks import ch08_speculative as checks
from minillm.course.checks._base import CheckFailed
from minillm.speculative.acceptance import verify_greedy
from minillm.speculative.drafts import PromptLookupDraft
from minillm.speculative.tree import DraftTree

from memorizing import assert_hidden_cases_catch_memorizing
from test_tokenizer_checks import assert_hints_are_specific


def accept_step(p, q, draft_token, generator, rand=None, multinomial=None):
    rand = rand or (lambda: torch.rand((), generator=generator, dtype=p.dtype))
    x = int(draft_token)
    if rand() < torch.clamp(p[x] / q[x], max=1.0):
        return x, True
    residual = torch.clamp(p - q, min=0)
    residual = residual / residual.sum()
    draw = multinomial or (lambda r: torch.multinomial(r, 1, generator=generator))
    return int(draw(residual)), False


def tree_mask(parents, cached):
    return DraftTree(list(range(len(parents))), parents).attention_mask(cached)[0, 0]


def test_right_answers_pass(capsys):
    checks.check_prompt_lookup(lambda ids, k, n: PromptLookupDraft(n, 1).lookup(ids, k))
    checks.check_verify_greedy(verify_greedy)
    checks.check_accept_step(accept_step)
    checks.check_tree_mask(tree_mask)
    assert capsys.readouterr().out.count("✅") == 4


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check", [checks.check_prompt_lookup, checks.check_verify_greedy,
                                   checks.check_accept_step, checks.check_tree_mask])
def test_stubs_say_not_written_yet(check, hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(unwritten, hidden=hidden)


def lookup(**kind):
    return lambda ids, k, n: checks._lookup_variant(ids, k, n, **kind)


@pytest.mark.parametrize("hidden", [False, True])
def test_prompt_lookup_hints_are_specific(hidden):
    assert_hints_are_specific(lambda f: checks.check_prompt_lookup(f, hidden=hidden), {
        "first occurrence": (lookup(most_recent=False), "took the first occurrence"),
        "shortest first": (lookup(longest_first=False), "longest n-gram first"),
        "matches itself": (lookup(self_match=True), "EARLIER occurrence"),
        "no cap": (lookup(cap=False), "at most k tokens"),
    })


def never_runs(ids, k, max_ngram):  # range(n, 0) without its step -1: the loop never runs
    for n in range(min(max_ngram, len(ids) - 1), 0):
        return list(ids[-n:])
    return []


def compares_a_tuple(ids, k, max_ngram):  # a list slice never equals a tuple
    for n in range(min(max_ngram, len(ids) - 1), 0, -1):
        suffix = tuple(ids[-n:])
        for start in range(len(ids) - n - 1, -1, -1):
            if ids[start:start + n] == suffix:
                return list(ids[start + n:start + n + k])
    return []


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("empty", [lambda ids, k, n: [], never_runs, compares_a_tuple],
                         ids=["return []", "loop never runs", "list against tuple"])
def test_only_a_self_match_gets_the_self_match_hint(empty, hidden):
    with pytest.raises(CheckFailed) as failure:
        checks.check_prompt_lookup(empty, hidden=hidden)
    text = str(failure.value)
    assert "returned [] for every case, though here the last" in text, text
    assert "EARLIER" not in text and "match themselves" not in text, text
    with pytest.raises(CheckFailed, match="match themselves at the end.*EARLIER occurrence"):
        checks.check_prompt_lookup(lookup(self_match=True), hidden=hidden)


def verify(**kind):
    return lambda scores, draft: checks._verify_variant(scores, draft, **kind)


@pytest.mark.parametrize("hidden", [False, True])
def test_verify_greedy_hints_are_specific(hidden):
    assert_hints_are_specific(lambda f: checks.check_verify_greedy(f, hidden=hidden), {
        "no bonus": (verify(bonus=False), "add the bonus token"),
        "keeps the draft": (verify(keep_draft=True), "emit the TARGET's token"),
        "goes on": (verify(go_on=True), "stop at the first mismatch"),
        "counts the replacement": (verify(count_replacement=True), "is not one of them"),
    })


def tree_variant(kind):
    return lambda parents, cached: torch.tensor(checks._tree_variant(parents, cached, kind))


TREE_HINTS = {"causal": "a plain causal mask", "parent_only": "ALL its ancestors",
              "no_self": "each node sees itself too", "no_root": "every row sees the root",
              "no_cache": "the `cached` tokens already in the KV cache"}


@pytest.mark.parametrize("hidden", [False, True])
def test_tree_mask_hints_are_specific(hidden):
    assert_hints_are_specific(lambda f: checks.check_tree_mask(f, hidden=hidden), {
        kind: (tree_variant(kind), words) for kind, words in TREE_HINTS.items()})


def test_the_tree_mask_reference_is_the_package_mask():
    for parents, cached in checks._tree_cases(random.Random(11), checks.TREE_CASES):
        assert checks._tree_variant(parents, cached, "reference") == \
            tree_mask(parents, cached).tolist()


@pytest.mark.parametrize("wrong, words", [
    (lambda parents, cached: tree_mask(parents, cached).int(), r"return booleans \(torch.bool\)"),
    (lambda parents, cached: tree_mask(parents, cached)[1:], "return a torch tensor of shape"),
    (lambda parents, cached: tree_mask(parents, cached).tolist(), "return a torch tensor"),
], ids=["ints", "no root row", "a list"])
def test_a_tree_mask_of_the_wrong_kind_is_told_what_to_return(wrong, words):
    with pytest.raises(CheckFailed, match=words):
        checks.check_tree_mask(wrong)


def test_tree_mask_hints_come_in_chinese(chinese):
    assert_hints_are_specific(checks.check_tree_mask, {
        "causal": (tree_variant("causal"), "普通的因果掩码"),
        "no_root": (tree_variant("no_root"), "每一行都要看见根"),
    })
    with pytest.raises(CheckFailed, match="请返回布尔值"):
        checks.check_tree_mask(lambda parents, cached: tree_mask(parents, cached).int())


def test_verify_greedy_accepts_tensors_of_tokens(capsys):
    checks.check_verify_greedy(lambda s, d: (torch.tensor(verify_greedy(s, d)[0]).tolist(),
                                             torch.tensor(verify_greedy(s, d)[1])))
    assert "✅" in capsys.readouterr().out


def test_an_accept_step_that_ignores_its_generator_is_caught():
    def global_rng(p, q, token, generator):
        return accept_step(p, q, token, generator, rand=lambda: torch.rand(()),
                           multinomial=lambda r: torch.multinomial(r, 1))

    with pytest.raises(CheckFailed, match="draws from the global RNG"):
        checks.check_accept_step(global_rng)


def test_an_accept_step_that_never_draws_is_caught():
    def never_draws(p, q, token, generator):
        x = int(token)
        if p[x] >= q[x]:
            return x, True
        residual = torch.clamp(p - q, min=0)
        return int(residual.argmax()), False

    with pytest.raises(CheckFailed, match="differently seeded generators"):
        checks.check_accept_step(never_draws)


def test_the_checker_leaves_the_global_random_state_alone(capsys):
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    checks.check_accept_step(accept_step, draws=2000)
    assert torch.equal(torch.rand(3), expected)


def residual_first(p, q, token, generator):  # draws the replacement before the accept test
    residual = torch.clamp(p - q, min=0)
    replacement = int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
    x = int(token)
    if torch.rand((), generator=generator, dtype=p.dtype) < torch.clamp(p[x] / q[x], max=1):
        return x, True
    return replacement, False


def unclamped_residual(p, q, token, generator):  # p - q: negative entries, a sum of 0
    x = int(token)
    if torch.rand((), generator=generator, dtype=p.dtype) < torch.clamp(p[x] / q[x], max=1):
        return x, True
    residual = p - q
    return int(torch.multinomial(residual / residual.sum(), 1, generator=generator)), False


def rand_without_a_size(p, q, token, generator):
    return int(token), bool(torch.rand(generator=generator) < 1)


ACCEPT_STEP_ERRORS = {  # name: (the wrong function, the words of its hint)
    "residual first": (residual_first, "only after a rejection"),
    "unclamped residual": (unclamped_residual, "torch.clamp(p - q, min=0), divided by its sum"),
    "another error": (rand_without_a_size, "It is called with p and q"),
}


@pytest.mark.parametrize("hidden", [False, True])
def test_an_accept_step_that_raises_gets_a_hint(hidden):
    assert_hints_are_specific(lambda f: checks.check_accept_step(f, hidden=hidden),
                              ACCEPT_STEP_ERRORS)
    with pytest.raises(CheckFailed, match="raised RuntimeError"):
        checks.check_accept_step(unclamped_residual, hidden=hidden)


def test_resampling_from_p_is_named():
    def from_p(p, q, token, generator):
        x = int(token)
        if torch.rand((), generator=generator, dtype=p.dtype) < torch.clamp(p[x] / q[x], max=1):
            return x, True
        return int(torch.multinomial(p, 1, generator=generator)), False

    with pytest.raises(CheckFailed, match="drawn from p itself"):
        checks.check_accept_step(from_p)


def test_accepting_every_draft_is_named():
    with pytest.raises(CheckFailed, match="rejected and a different token drawn"):
        checks.check_accept_step(lambda p, q, token, generator: (int(token), True))


def test_an_accept_step_that_changes_p_is_named():
    def normalises_in_place(p, q, token, generator):
        p.div_(p.sum())
        p.mul_(1.5)
        return accept_step(p / 1.5, q, token, generator)

    with pytest.raises(CheckFailed, match="changed its argument `p`"):
        checks.check_accept_step(normalises_in_place)


def test_tokens_that_follow_the_draft_are_named():
    def always_accepts(p, q, token, generator):
        torch.rand((), generator=generator)  # draws, but ignores what it drew
        return int(token), True

    with pytest.raises(CheckFailed, match="rejected and a different token drawn"):
        checks.check_accept_step(always_accepts)

    def reversed_residual(p, q, token, generator):  # max(0, q - p): the draft's leftover
        x = int(token)
        if p[x] == 0:
            return int(torch.multinomial(p, 1, generator=generator)), False
        if torch.rand((), generator=generator, dtype=p.dtype) < torch.clamp(p[x] / q[x], max=1):
            return x, True
        residual = torch.clamp(q - p, min=0)
        return int(torch.multinomial(residual / residual.sum(), 1, generator=generator)), False

    with pytest.raises(CheckFailed, match="follow the draft q, not the target p"):
        checks.check_accept_step(reversed_residual)


# --- the same hints in Chinese (set_language("zh"), as the notebooks in zh/ do) ----------------


def test_prompt_lookup_hints_come_in_chinese(chinese):
    assert_hints_are_specific(checks.check_prompt_lookup, {
        "first occurrence": (lookup(most_recent=False), "你取的是第一次出现的位置"),
        "shortest first": (lookup(longest_first=False), "先试最长的 n-gram"),
        "matches itself": (lookup(self_match=True), "更早的一次出现"),
        "no cap": (lookup(cap=False), "最多返回 k 个词元"),
    })
    with pytest.raises(CheckFailed, match=r"prompt_lookup\(.*\) 返回了 .*，应为 ") as failure:
        checks.check_prompt_lookup(lookup(cap=False))
    assert "returned" not in str(failure.value)


def test_prompt_lookup_empty_answers_come_in_chinese(chinese):
    with pytest.raises(CheckFailed, match="它对每个用例都返回了 \\[\\]，可这里最后 2 个 id"):
        checks.check_prompt_lookup(lambda ids, k, n: [])
    with pytest.raises(CheckFailed, match="匹配的是它们自己"):
        checks.check_prompt_lookup(lookup(self_match=True))


def test_accept_step_errors_come_in_chinese(chinese):
    assert_hints_are_specific(checks.check_accept_step, {
        "residual first": (residual_first, "只在拒绝之后"),
        "unclamped residual": (unclamped_residual, "p - q 本身有负数"),
        "another error": (rand_without_a_size, "调用它时"),
    })


def test_verify_greedy_hints_come_in_chinese(chinese):
    assert_hints_are_specific(checks.check_verify_greedy, {
        "no bonus": (verify(bonus=False), "要再加上额外词元"),
        "keeps the draft": (verify(keep_draft=True), "输出目标模型的词元"),
        "goes on": (verify(go_on=True), "在第一个不一致处停下"),
        "counts the replacement": (verify(count_replacement=True), "不算在内"),
    })
    with pytest.raises(CheckFailed, match="形状为 .* 的 target_scores") as failure:
        checks.check_verify_greedy(verify(bonus=False))
    assert "returned" not in str(failure.value) and "argmax：" in str(failure.value)


@pytest.mark.parametrize("wrong, words", [
    (lambda p, q, token, generator: (int(token), True), "必须被拒绝，并另抽一个词元"),
    (lambda p, q, token, generator: int(token), "请返回一对 (token, accepted)"),
    (lambda p, q, token, generator: (float(token), True), "请返回 int 类型的词元 id"),
    (lambda p, q, token, generator: (int(token), "yes"), "请返回 True 或 False"),
], ids=["accepts everything", "not a pair", "float token", "accepted not a bool"])
def test_accept_step_hints_come_in_chinese(chinese, wrong, words):
    with pytest.raises(CheckFailed) as failure:
        checks.check_accept_step(wrong)
    assert words in str(failure.value), str(failure.value)


def test_accept_step_statistics_and_generator_hints_come_in_chinese(chinese, capsys):
    def global_rng(p, q, token, generator):
        return accept_step(p, q, token, generator, rand=lambda: torch.rand(()),
                           multinomial=lambda r: torch.multinomial(r, 1))

    with pytest.raises(CheckFailed, match="它在从全局随机数生成器里抽取"):
        checks.check_accept_step(global_rng)

    def from_p(p, q, token, generator):
        x = int(token)
        if torch.rand((), generator=generator, dtype=p.dtype) < torch.clamp(p[x] / q[x], max=1):
            return x, True
        return int(torch.multinomial(p, 1, generator=generator)), False

    with pytest.raises(CheckFailed, match="似乎是直接从 p 里抽的"):
        checks.check_accept_step(from_p)

    def never_draws(p, q, token, generator):
        x = int(token)
        return (x, True) if p[x] >= q[x] else (int(torch.clamp(p - q, min=0).argmax()), False)

    with pytest.raises(CheckFailed, match="换了两个种子不同的生成器"):
        checks.check_accept_step(never_draws)
    checks.check_accept_step(accept_step, draws=2000)
    out = capsys.readouterr().out
    assert "✅ accept_step：全部 5 个用例通过" in out and "理论值" in out, out


# --- the hidden cases (hidden=True), which no notebook shows ----------------------------------

def test_the_hidden_cases_pass_every_right_answer(capsys):
    checks.check_prompt_lookup(lambda ids, k, n: PromptLookupDraft(n, 1).lookup(ids, k),
                               hidden=True)
    checks.check_verify_greedy(verify_greedy, hidden=True)
    checks.check_accept_step(accept_step, hidden=True)
    checks.check_tree_mask(tree_mask, hidden=True)
    out = capsys.readouterr().out
    assert out.count("✅") == 4, out
    assert str(checks.HIDDEN_ACCEPT_CASE.p.tolist()) in out, out


def test_the_hidden_cases_are_other_cases():
    visible = checks._lookup_cases(random.Random(8))
    hidden = checks._lookup_cases(random.Random(18), checks.HIDDEN_LOOKUP_CASES)
    assert not any(case in visible for case in hidden[:len(checks.HIDDEN_LOOKUP_CASES)])
    assert not torch.equal(checks.HIDDEN_ACCEPT_CASE.p[:len(checks.P)], checks.P)


@pytest.mark.parametrize("check, right", [
    (checks.check_prompt_lookup, lambda ids, k, n: PromptLookupDraft(n, 1).lookup(ids, k)),
    (checks.check_verify_greedy, verify_greedy),
    (checks.check_tree_mask, tree_mask),
])
def test_the_hidden_cases_catch_an_answer_that_memorized_the_visible_ones(check, right):
    assert_hidden_cases_catch_memorizing(check, right)


def test_the_hidden_accept_step_catches_the_usual_mistakes():
    def global_rng(p, q, token, generator):
        return accept_step(p, q, token, generator, rand=lambda: torch.rand(()),
                           multinomial=lambda r: torch.multinomial(r, 1))

    def from_p(p, q, token, generator):
        x = int(token)
        if torch.rand((), generator=generator, dtype=p.dtype) < torch.clamp(p[x] / q[x], max=1):
            return x, True
        return int(torch.multinomial(p, 1, generator=generator)), False

    def never_draws(p, q, token, generator):
        x = int(token)
        return (x, True) if p[x] >= q[x] else (int(torch.clamp(p - q, min=0).argmax()), False)

    def reversed_residual(p, q, token, generator):  # max(0, q - p): the draft's leftover
        x = int(token)
        if p[x] == 0:
            return int(torch.multinomial(p, 1, generator=generator)), False
        if torch.rand((), generator=generator, dtype=p.dtype) < torch.clamp(p[x] / q[x], max=1):
            return x, True
        residual = torch.clamp(q - p, min=0)
        return int(torch.multinomial(residual / residual.sum(), 1, generator=generator)), False

    def accepts_only_when_p_beats_q(p, q, token, generator):  # never with probability p / q
        x = int(token)
        torch.rand((), generator=generator)
        if p[x] >= q[x]:
            return x, True
        residual = torch.clamp(p - q, min=0)
        return int(torch.multinomial(residual / residual.sum(), 1, generator=generator)), False

    for wrong, message in [
            (global_rng, "draws from the global RNG"), (from_p, "drawn from p itself"),
            (never_draws, "differently seeded generators"),
            (reversed_residual, "follow the draft q, not the target p"),
            (lambda p, q, token, generator: (int(token), True),
             "rejected and a different token drawn"),
            (accepts_only_when_p_beats_q, "do not follow the target p")]:
        with pytest.raises(CheckFailed, match=message):
            checks.check_accept_step(wrong, hidden=True)


def test_the_hidden_accept_step_names_its_own_tokens(chinese):
    def rejects_when_p_beats_q(p, q, token, generator):  # but accepts a draft equal to p
        x = int(token)
        if p[x] >= q[x] and not torch.equal(p, q):
            return (x + 1) % len(p), False
        return accept_step(p, q, token, generator)

    with pytest.raises(CheckFailed) as failure:
        checks.check_accept_step(rejects_when_p_beats_q, hidden=True)
    assert "草稿词元 3 的 p = 0.35 >= q = 0.15，应当总被接受" in str(failure.value)
    with pytest.raises(CheckFailed) as failure:
        checks.check_accept_step(lambda p, q, token, generator: (int(token), True), hidden=True)
    assert "给词元 1 的概率是 0，所以草稿词元 1 必须被拒绝" in str(failure.value)
