"""The chapter 04 checkers pass correct code, leave no room for in-place edits, and give each usual
mistake its own hint (and no other mistake that hint)."""

import functools

import pytest
import torch

from minillm.course.checks import ch04_decoding as checks
from minillm.course.checks._base import CheckFailed
from minillm.decoding import RepetitionPenaltyProcessor, TopKProcessor, TopPProcessor

from memorizing import assert_hidden_cases_catch_memorizing
from test_tokenizer_checks import assert_hints_are_specific


def right_top_k(logits, k):
    k = min(k, logits.shape[-1])
    return logits.masked_fill(logits < torch.topk(logits, k).values[..., -1:], float("-inf"))


def right_top_p(logits, p):
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = sorted_logits.softmax(-1)
    remove = probs.cumsum(-1) - probs >= p
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def right_penalty(ids, logits, p):
    seen = torch.gather(logits, 1, ids)
    return logits.scatter(1, ids, torch.where(seen < 0, seen * p, seen / p))


def test_correct_functions_pass(capsys):
    checks.check_apply_temperature(lambda logits, t: logits / t)
    checks.check_top_k(right_top_k)
    checks.check_top_k(lambda logits, k: TopKProcessor(k)(None, logits))
    checks.check_top_p(right_top_p)
    checks.check_top_p(lambda logits, p: TopPProcessor(p)(None, logits))
    checks.check_repetition_penalty(right_penalty)
    checks.check_repetition_penalty(
        lambda ids, logits, p: RepetitionPenaltyProcessor(p)(ids, logits))
    checks.check_beam_step(checks.reference_beam_step)
    assert capsys.readouterr().out.count("✅") == 8


def test_beam_step_accepts_lists(capsys):
    checks.check_beam_step(lambda *a: tuple(t.tolist() for t in checks.reference_beam_step(*a)))
    assert "✅" in capsys.readouterr().out


@pytest.mark.parametrize("check, in_place", [
    (checks.check_apply_temperature, lambda logits, t: logits.div_(t)),
    (checks.check_top_k, lambda logits, k: logits.masked_fill_(
        logits < torch.topk(logits, min(k, logits.shape[-1])).values[..., -1:], float("-inf"))),
    (checks.check_top_p, lambda logits, p: logits.copy_(right_top_p(logits, p))),
    (checks.check_repetition_penalty, lambda ids, logits, p: logits.scatter_(
        1, ids, right_penalty(ids, logits, p).gather(1, ids))),
])
def test_changing_the_logits_in_place_is_named(check, in_place):
    with pytest.raises(CheckFailed, match="changed its argument `logits`"):
        check(in_place)


@pytest.mark.parametrize("hidden", [False, True])
def test_temperature_hints_are_specific(hidden):
    check = functools.partial(checks.check_apply_temperature, hidden=hidden)
    assert_hints_are_specific(check, {
        "multiplied": (lambda logits, t: logits * t, "multiplied by the temperature"),
        "probabilities": (lambda logits, t: torch.softmax(logits / t, -1),
                          "returned probabilities"),
        "subtracted": (lambda logits, t: logits - t, "subtracted the temperature"),
    })


@pytest.mark.parametrize("hidden", [False, True])
def test_top_k_hints_are_specific(hidden):
    check = functools.partial(checks.check_top_k, hidden=hidden)
    assert_hints_are_specific(check, {
        "strict": (checks._strict_top_k, "tied with the k-th best"),
        "k + 1": (lambda logits, k: checks._top_k_variant(logits, k, shift=1), "kept k + 1"),
        "k - 1": (lambda logits, k: checks._top_k_variant(logits, k, shift=-1), "kept k - 1"),
        "lowest": (lambda logits, k: checks._top_k_variant(logits, k, largest=False),
                   "the k lowest"),
        "zero": (lambda logits, k: checks._top_k_variant(logits, k, fill=0.0), "not 0"),
    })


def test_top_k_above_the_vocabulary_is_explained_where_it_crashes():
    def no_min(logits, k):
        return logits.masked_fill(logits < torch.topk(logits, k).values[..., -1:], float("-inf"))

    with pytest.raises(CheckFailed, match=r"raised RuntimeError.*k = 50 is at least the "
                                          r"vocabulary size \(20\).*min\(k, vocab\)"):
        checks.check_top_k(no_min)


def test_top_k_returning_a_mask_is_named():
    with pytest.raises(CheckFailed, match="not a mask or indices"):
        checks.check_top_k(lambda logits, k: ~torch.isneginf(right_top_k(logits, k)))


@pytest.mark.parametrize("hidden", [False, True])
def test_top_p_hints_are_specific(hidden):
    check = functools.partial(checks.check_top_p, hidden=hidden)
    assert_hints_are_specific(check, {
        "drops crossing": (lambda logits, p: checks._top_p_variant(logits, p, crossing=False),
                           "dropped the token that crosses p"),
        "one too many": (checks._one_too_many, "one token too many"),
        "ascending": (lambda logits, p: checks._top_p_variant(logits, p, descending=False),
                      "least likely tokens"),
        "no softmax": (lambda logits, p: checks._top_p_variant(logits, p, softmax=False),
                       "added up the logits"),
        "sorted order": (lambda logits, p: checks._top_p_variant(logits, p, unsort=False),
                         "still in sorted order"),
    })


@pytest.mark.parametrize("hidden", [False, True])
def test_repetition_penalty_hints_are_specific(hidden):
    check = functools.partial(checks.check_repetition_penalty, hidden=hidden)
    assert_hints_are_specific(check, {
        "divides negatives": (lambda ids, logits, p: logits.scatter(1, ids,
                                                                    logits.gather(1, ids) / p),
                              "divided negative scores"),
        "per occurrence": (checks._per_occurrence, "once per occurrence"),
        "wrong way round": (lambda ids, logits, p: logits.scatter(1, ids, torch.where(
            logits.gather(1, ids) < 0, logits.gather(1, ids) / p, logits.gather(1, ids) * p)),
            "the wrong way round"),
        "rows mixed": (lambda ids, logits, p: RepetitionPenaltyProcessor(p)(
            ids.reshape(1, -1).expand(ids.shape[0], -1), logits), "row b in row b only"),
    })


def test_the_per_occurrence_mistake_gives_a_quarter():
    """The hand case: 2.0 penalised three times by 2.0 is 0.25, which is what the hint says."""
    got = checks._per_occurrence(torch.tensor([[0, 0, 0, 1]]), torch.tensor([[2.0, -2.0, 2.0,
                                                                              1.0]]), 2.0)
    assert got[0, 0].item() == 0.25


def swapped_beam_step(log_probs, beam_scores, num_beams):
    scores, parents, tokens = checks.reference_beam_step(log_probs, beam_scores, num_beams)
    return scores, tokens, parents


@pytest.mark.parametrize("hidden", [False, True])
def test_beam_step_hints_are_specific(hidden):
    check = functools.partial(checks.check_beam_step, hidden=hidden)
    assert_hints_are_specific(check, {
        "swapped": (swapped_beam_step, "swapped"),
        "no running scores": (lambda lp, bs, n: checks.reference_beam_step(
            lp, torch.zeros_like(bs), n), "ignore the beams' running scores"),
        "per beam": (checks._per_beam_best, "best token of each beam"),
        "worst first": (lambda lp, bs, n: tuple(t.flip(0) for t in checks.reference_beam_step(
            lp, bs, n)), "best first"),
    })


def test_beam_step_wrong_count_is_named():
    with pytest.raises(CheckFailed, match="expected num_beams"):
        checks.check_beam_step(lambda lp, bs, n: checks.reference_beam_step(lp, bs, 1))


# --- the graders' hidden cases (hidden=True) ----------------------------------------------------

def right_beam_step(log_probs, beam_scores, num_beams):
    vocab = log_probs.shape[-1]
    scores, flat = torch.topk((beam_scores[:, None] + log_probs).flatten(), num_beams)
    return scores, flat // vocab, flat % vocab


RIGHT = [(checks.check_apply_temperature, lambda logits, t: logits / t),
         (checks.check_top_k, right_top_k), (checks.check_top_p, right_top_p),
         (checks.check_repetition_penalty, right_penalty),
         (checks.check_beam_step, right_beam_step)]


def test_the_hidden_cases_pass_every_right_answer(capsys):
    for check, right in RIGHT:
        check(right, hidden=True)
    checks.check_top_k(lambda logits, k: TopKProcessor(k)(None, logits), hidden=True)
    checks.check_top_p(lambda logits, p: TopPProcessor(p)(None, logits), hidden=True)
    checks.check_repetition_penalty(
        lambda ids, logits, p: RepetitionPenaltyProcessor(p)(ids, logits), hidden=True)
    checks.check_beam_step(checks.reference_beam_step, hidden=True)
    assert capsys.readouterr().out.count("✅") == 9


@pytest.mark.parametrize("check, right", RIGHT, ids=[c.__name__ for c, _ in RIGHT])
def test_the_hidden_cases_catch_an_answer_that_memorized_the_visible_ones(check, right):
    assert_hidden_cases_catch_memorizing(check, right)


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check", [c for c, _ in RIGHT], ids=[c.__name__ for c, _ in RIGHT])
def test_an_unwritten_stub_says_so(check, hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(unwritten, hidden=hidden)


def test_the_hidden_cases_are_other_inputs_with_the_same_edges():
    """Other seeds, shapes and numbers; still ties, k = vocab and k > vocab, p = 1, a token
    repeated in input_ids, and more beams than tokens."""
    assert not {seed for seed, *_ in checks.TEMPERATURES} & {
        seed for seed, *_ in checks.HIDDEN_TEMPERATURES}
    for cases in (checks.TOP_K_CASES, checks.HIDDEN_TOP_K_CASES):
        assert any(ties for *_, ties in cases)
        assert any(k == vocab for _, _, vocab, k, _ in cases)
        assert any(k > vocab for _, _, vocab, k, _ in cases)
        assert any(k == 1 for _, _, _, k, _ in cases)
    for hidden in (False, True):
        assert any(p == 1.0 for _, p in checks._top_p_logits(hidden))
        ids = checks._penalty_cases(hidden)[0][0]
        assert any(len(set(row)) < len(row) for row in ids.tolist())
    assert any(beams > vocab for _, beams, vocab in checks.HIDDEN_BEAM_CASES)
    assert not any(torch.equal(a, b) for (a, _), (b, _) in zip(checks._top_p_logits(),
                                                                checks._top_p_logits(True)))


def test_the_hidden_top_k_above_the_vocabulary_is_explained_too():
    def no_min(logits, k):
        return logits.masked_fill(logits < torch.topk(logits, k).values[..., -1:], float("-inf"))

    with pytest.raises(CheckFailed, match=r"raised RuntimeError.*k = 12 is at least the "
                                          r"vocabulary size \(10\).*min\(k, vocab\)"):
        checks.check_top_k(no_min, hidden=True)


# --- the same hints in the Chinese edition ------------------------------------------------------


ZH_HINTS = [  # (check, a wrong answer, words of its Chinese hint, words of its English hint)
    (checks.check_apply_temperature, lambda logits, t: logits * t, "你乘上了温度",
     "multiplied by the temperature"),
    (checks.check_apply_temperature, lambda logits, t: torch.softmax(logits / t, -1),
     "你返回的是概率", "returned probabilities"),
    (checks.check_apply_temperature, lambda logits, t: logits - t, "你减去了温度",
     "subtracted the temperature"),
    (checks.check_top_k, checks._strict_top_k, "与第 k 名分数相同", "tied with the k-th best"),
    (checks.check_top_k, lambda logits, k: checks._top_k_variant(logits, k, shift=1),
     "你保留了 k + 1 个词元", "kept k + 1"),
    (checks.check_top_k, lambda logits, k: checks._top_k_variant(logits, k, shift=-1),
     "你保留了 k - 1 个词元", "kept k - 1"),
    (checks.check_top_k, lambda logits, k: checks._top_k_variant(logits, k, largest=False),
     "最低的 k 个分数", "the k lowest"),
    (checks.check_top_k, lambda logits, k: checks._top_k_variant(logits, k, fill=0.0),
     "分数必须是 -inf，而不是 0", "not 0"),
    (checks.check_top_p, lambda logits, p: checks._top_p_variant(logits, p, crossing=False),
     "你去掉了越过 p 的那个词元", "dropped the token that crosses p"),
    (checks.check_top_p, checks._one_too_many, "你多保留了一个词元", "one token too many"),
    (checks.check_top_p, lambda logits, p: checks._top_p_variant(logits, p, descending=False),
     "你保留的是最不可能的词元", "least likely tokens"),
    (checks.check_top_p, lambda logits, p: checks._top_p_variant(logits, p, softmax=False),
     "你累加的是 logits", "added up the logits"),
    (checks.check_top_p, lambda logits, p: checks._top_p_variant(logits, p, unsort=False),
     "掩码还是排序后的顺序", "still in sorted order"),
    (checks.check_repetition_penalty,
     lambda ids, logits, p: logits.scatter(1, ids, logits.gather(1, ids) / p),
     "你把负分数也除了", "divided negative scores"),
    (checks.check_repetition_penalty, checks._per_occurrence, "每个不同的词元只惩罚一次",
     "once per occurrence"),
    (checks.check_repetition_penalty, lambda ids, logits, p: logits.scatter(1, ids, torch.where(
        logits.gather(1, ids) < 0, logits.gather(1, ids) / p, logits.gather(1, ids) * p)),
     "正负弄反了", "the wrong way round"),
    (checks.check_repetition_penalty, lambda ids, logits, p: RepetitionPenaltyProcessor(p)(
        ids.reshape(1, -1).expand(ids.shape[0], -1), logits), "第 b 行的词元只在第 b 行受罚",
     "row b in row b only"),
    (checks.check_beam_step, swapped_beam_step, "parents 和 tokens 弄反了", "swapped"),
    (checks.check_beam_step, lambda lp, bs, n: checks.reference_beam_step(
        lp, torch.zeros_like(bs), n), "没有算上各条束已有的累计得分",
     "ignore the beams' running scores"),
    (checks.check_beam_step, checks._per_beam_best, "你取的是每条束各自最好的词元",
     "best token of each beam"),
    (checks.check_beam_step, lambda lp, bs, n: tuple(
        t.flip(0) for t in checks.reference_beam_step(lp, bs, n)), "按从好到差的顺序返回",
     "best first"),
]


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check, wrong, zh_words, en_words", ZH_HINTS,
                         ids=[f"{c.__name__}-{en}" for c, _, _, en in ZH_HINTS])
def test_each_hint_comes_in_chinese(chinese, hidden, check, wrong, zh_words, en_words):
    with pytest.raises(CheckFailed) as failure:
        check(wrong, hidden=hidden)
    message = str(failure.value)
    assert zh_words in message, message
    assert en_words not in message, message


def test_the_chapters_own_messages_come_in_chinese(chinese, capsys):
    with pytest.raises(CheckFailed, match="不小于词表大小（20）：所有词元都保留"):
        checks.check_top_k(lambda logits, k: logits.masked_fill(
            logits < torch.topk(logits, k).values[..., -1:], float("-inf")))
    with pytest.raises(CheckFailed, match="而不是掩码或下标"):
        checks.check_top_k(lambda logits, k: ~torch.isneginf(right_top_k(logits, k)))
    with pytest.raises(CheckFailed, match="应为 num_beams = "):
        checks.check_beam_step(lambda lp, bs, n: checks.reference_beam_step(lp, bs, 1))
    with pytest.raises(CheckFailed, match="形状为 .* 的 logits"):
        checks.check_apply_temperature(lambda logits, t: logits[:, :-1] / t)
    checks.check_top_p(right_top_p)
    assert "✅ top_p_filter：全部 9 个用例通过" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match="不小于词表大小（10）：所有词元都保留"):
        checks.check_top_k(lambda logits, k: logits.masked_fill(
            logits < torch.topk(logits, k).values[..., -1:], float("-inf")), hidden=True)
    checks.check_top_p(right_top_p, hidden=True)
    assert "✅ top_p_filter：全部 9 个用例通过" in capsys.readouterr().out
