"""The chapter 00 checkers: the right answers pass, in any number type; each hint is given for the
mistake it names and for no other."""

import functools

import numpy as np
import pytest
import torch

from minillm.course.checks import ch00_welcome as checks
from minillm.course.checks._base import CheckFailed
from minillm.tokenizer.chat import SMOLLM_SYSTEM, chatml

from memorizing import assert_hidden_cases_catch_memorizing

# --- 1 · chat_prompt ---------------------------------------------------------------------------


def right_prompt(messages):
    return chatml(messages, True, SMOLLM_SYSTEM)


CHAT_MISTAKES = {
    "no generation prompt": (lambda m: chatml(m, False, SMOLLM_SYSTEM), "opening the assistant"),
    "no default system": (lambda m: chatml(m, True, None), "puts its default one"),
    "default system always": (
        lambda m: chatml([{"role": "system", "content": SMOLLM_SYSTEM}] + m, True, None),
        "only when the conversation has none"),
    "no newline after im_end": (
        lambda m: right_prompt(m).replace("<|im_end|>\n", "<|im_end|>"), "followed by a newline"),
}


def test_the_right_prompt_passes_and_matches_the_tokenizers_template(reference, capsys):
    checks.check_chat_prompt(right_prompt)
    assert "✅" in capsys.readouterr().out
    _, tokenizer = reference
    for messages in checks.CONVERSATIONS + checks.HIDDEN_CONVERSATIONS:
        assert right_prompt(messages) == tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False)


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("name", CHAT_MISTAKES)
def test_each_chat_prompt_hint_fires_only_for_its_mistake(name, hidden):
    check = functools.partial(checks.check_chat_prompt, hidden=hidden)
    wrong, words = CHAT_MISTAKES[name]
    with pytest.raises(CheckFailed, match=words):
        check(wrong)
    for other, (other_wrong, _) in CHAT_MISTAKES.items():
        if other != name:
            with pytest.raises(CheckFailed) as failure:
                check(other_wrong)
            assert words not in str(failure.value)


@pytest.mark.parametrize("hidden", [False, True])
def test_an_unnamed_chat_prompt_mistake_shows_where_it_differs(hidden):
    with pytest.raises(CheckFailed, match="first differ at character") as failure:
        checks.check_chat_prompt(lambda m: right_prompt(m).replace("user", "User"), hidden=hidden)
    assert not any(words in str(failure.value) for _, words in CHAT_MISTAKES.values())


def test_a_prompt_that_changes_the_messages_is_named():
    def pops(messages):
        text = right_prompt(messages)
        messages.pop()
        return text

    with pytest.raises(CheckFailed, match="changed its argument `messages`"):
        checks.check_chat_prompt(pops)


# --- 2 · answer --------------------------------------------------------------------------------


def _generate(model, tokenizer, prompt, k):
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=k,
                             do_sample=False, pad_token_id=tokenizer.eos_token_id)
    return ids, out


def right_answer(model, tokenizer, messages, k):
    ids, out = _generate(model, tokenizer, right_prompt(messages), k)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def with_prompt(model, tokenizer, messages, k):
    ids, out = _generate(model, tokenizer, right_prompt(messages), k)
    return tokenizer.decode(out[0], skip_special_tokens=True)


def with_special_tokens(model, tokenizer, messages, k):
    ids, out = _generate(model, tokenizer, right_prompt(messages), k)
    return tokenizer.decode(out[0, ids.shape[1]:])


def no_template(model, tokenizer, messages, k):
    ids, out = _generate(model, tokenizer, messages[-1]["content"], k)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def no_generation_prompt(model, tokenizer, messages, k):
    ids, out = _generate(model, tokenizer, chatml(messages, False, SMOLLM_SYSTEM), k)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def one_token_more(model, tokenizer, messages, k):
    return right_answer(model, tokenizer, messages, k + 1)


ANSWER_MISTAKES = {
    "prompt included": (with_prompt, "you returned the prompt too"),
    "special tokens kept": (with_special_tokens, "skip_special_tokens=True"),
    "no chat template": (no_template, "never saw the chat template"),
    "no generation prompt": (no_generation_prompt, "carries on the user's"),
}


def test_the_right_answer_passes(reference, capsys):
    checks.check_answer(right_answer, *reference)
    assert "✅" in capsys.readouterr().out


@pytest.mark.parametrize("name", ANSWER_MISTAKES)
def test_each_answer_hint_fires_only_for_its_mistake(reference, name):
    wrong, words = ANSWER_MISTAKES[name]
    with pytest.raises(CheckFailed, match=words) as failure:
        checks.check_answer(wrong, *reference)
    others = [w for n, (_, w) in ANSWER_MISTAKES.items() if n != name] + ["max_new_tokens="]
    assert not any(w in str(failure.value) for w in others)


def test_an_answer_past_max_new_tokens_is_named(reference):
    with pytest.raises(CheckFailed, match="runs past max_new_tokens") as failure:
        checks.check_answer(one_token_more, *reference)
    assert not any(w in str(failure.value) for _, w in ANSWER_MISTAKES.values())


def test_a_crashing_answer_gets_a_plain_message(reference):
    with pytest.raises(CheckFailed, match="raised KeyError"):
        checks.check_answer(lambda model, tokenizer, messages, k: messages[0]["text"], *reference)


# --- 3 · decode_speed --------------------------------------------------------------------------


def right_speed(times):
    if len(times) < 2:
        raise ValueError("no decode step")
    return (len(times) - 1) / (times[-1] - times[0])


@pytest.mark.parametrize("kind", [float, np.float64, np.float32, lambda x: torch.tensor(x)])
def test_decode_speed_accepts_any_number_type(kind, capsys):
    checks.check_decode_speed(lambda times: kind(right_speed(times)))
    assert "✅" in capsys.readouterr().out


DECODE_MISTAKES = {
    "first token counted": (lambda t: len(t) / (t[-1] - t[0]), "counted the first token"),
    "seconds per token": (lambda t: (t[-1] - t[0]) / (len(t) - 1), "seconds per token"),
    "timed from 0": (lambda t: (len(t) - 1) / t[-1], "timed from 0"),
}


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("name", DECODE_MISTAKES)
def test_each_decode_speed_hint_fires_only_for_its_mistake(name, hidden):
    wrong, words = DECODE_MISTAKES[name]
    with pytest.raises(CheckFailed, match=words) as failure:
        checks.check_decode_speed(wrong, hidden=hidden)
    assert not any(w in str(failure.value) for n, (_, w) in DECODE_MISTAKES.items() if n != name)


def test_decode_speed_must_raise_valueerror_for_one_token():
    def no_check(times):
        return (len(times) - 1) / max(times[-1] - times[0], 1e-9)

    with pytest.raises(CheckFailed, match="raise ValueError"):
        checks.check_decode_speed(no_check)

    def index_error(times):
        return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else times[5]

    with pytest.raises(CheckFailed, match="raised IndexError.*raise ValueError"):
        checks.check_decode_speed(index_error)


def test_a_string_is_not_a_number():
    with pytest.raises(CheckFailed, match="return a number"):
        checks.check_decode_speed(lambda t: str(right_speed(t)))


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("check", [checks.check_chat_prompt, checks.check_decode_speed,
                                   lambda fn, **kw: checks.check_answer(fn, None, None, **kw)],
                         ids=["chat_prompt", "decode_speed", "answer"])
def test_stubs_say_not_written_yet(check, hidden, unwritten):
    with pytest.raises(CheckFailed, match="not written yet"):
        check(unwritten, hidden=hidden)


# --- the graders' hidden cases (hidden=True) ----------------------------------------------------

def test_the_hidden_cases_pass_every_right_answer(reference, capsys):
    checks.check_chat_prompt(right_prompt, hidden=True)
    checks.check_answer(right_answer, *reference, hidden=True)
    checks.check_decode_speed(right_speed, hidden=True)
    out = capsys.readouterr().out
    assert out.count("✅") == 3
    assert "answer: all 3 cases pass" in out and "decode_speed: all 7 cases pass" in out


def test_the_hidden_answer_past_max_new_tokens_is_named(reference):
    with pytest.raises(CheckFailed, match="runs past max_new_tokens"):
        checks.check_answer(one_token_more, *reference, hidden=True)


def test_the_hidden_cases_are_other_inputs_with_the_same_edges():
    """Other conversations, other times; still a conversation with its own system message and
    one without, a multi-turn one, non-ASCII text, two token times, and both error cases."""
    assert not [m for m in checks.HIDDEN_CONVERSATIONS if m in checks.CONVERSATIONS]
    assert not [c for c in checks.HIDDEN_ANSWER_CASES if c in checks.ANSWER_CASES]
    assert not [t for t in checks.HIDDEN_DECODE_CASES if t in checks.DECODE_CASES]
    for conversations in (checks.HIDDEN_CONVERSATIONS,
                          [m for m, _ in checks.HIDDEN_ANSWER_CASES]):
        assert any(m[0]["role"] == "system" for m in conversations)
        assert any(m[0]["role"] != "system" for m in conversations)
        assert any(any(x["role"] == "assistant" for x in m) for m in conversations)
    assert any(not m["content"].isascii() for c in checks.HIDDEN_CONVERSATIONS for m in c)
    assert any(len(t) == 2 for t in checks.HIDDEN_DECODE_CASES)
    # greedy answers cost the real model as much as the visible ones: as many new tokens
    assert (sum(k for _, k in checks.HIDDEN_ANSWER_CASES)
            <= sum(k for _, k in checks.ANSWER_CASES))
    with pytest.raises(CheckFailed, match="with 1 token there is no decode step"):
        checks.check_decode_speed(lambda t: 1.0 if len(t) == 1 else right_speed(t), hidden=True)
    with pytest.raises(CheckFailed, match="with 0 tokens there is no decode step"):
        checks.check_decode_speed(lambda t: 1.0 if not t else right_speed(t), hidden=True)


@pytest.mark.parametrize("check, right", [(checks.check_chat_prompt, right_prompt),
                                          (checks.check_decode_speed, right_speed)],
                         ids=["chat_prompt", "decode_speed"])
def test_the_hidden_cases_catch_an_answer_that_memorized_the_visible_ones(check, right):
    assert_hidden_cases_catch_memorizing(check, right)


# --- the same hints in Chinese (set_language("zh"), as the notebooks in zh/ do) ----------------


ZH_WORDS = {  # the words of each hint in the Chinese edition; the English words must not show
    ("chat", "no generation prompt"): "以开启助手的轮次结尾",
    ("chat", "no default system"): "会先放上它默认的那一条",
    ("chat", "default system always"): "只有对话里没有系统消息时",
    ("chat", "no newline after im_end"): "紧跟一个换行符",
    ("answer", "prompt included"): "你把提示词也一起返回了",
    ("answer", "special tokens kept"): "文本里还留着",
    ("answer", "no chat template"): "模型根本没看到对话模板",
    ("answer", "no generation prompt"): "接着用户的话往下写",
    ("answer", "one token more"): "超过了 max_new_tokens",
    ("decode", "first token counted"): "把第一个词元也算进去了",
    ("decode", "seconds per token"): "每个词元花的秒数", ("decode", "timed from 0"): "从 0 开始计时",
}
ZH_CASES = ([("chat", n, w, c) for n, (w, c) in CHAT_MISTAKES.items()]
            + [("answer", n, w, c) for n, (w, c) in ANSWER_MISTAKES.items()]
            + [("answer", "one token more", one_token_more, "runs past max_new_tokens")]
            + [("decode", n, w, c) for n, (w, c) in DECODE_MISTAKES.items()])


@pytest.mark.parametrize("check, name, wrong, english", ZH_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in ZH_CASES])
def test_each_hint_comes_in_chinese(chinese, reference, check, name, wrong, english):
    run = {"chat": checks.check_chat_prompt, "decode": checks.check_decode_speed,
           "answer": lambda fn: checks.check_answer(fn, *reference)}[check]
    with pytest.raises(CheckFailed) as failure:
        run(wrong)
    message = str(failure.value)
    assert ZH_WORDS[check, name] in message, message
    assert " " not in english or english not in message, message  # code stays as it is
    assert "返回了" in message and "returned" not in message, message


def test_the_shared_messages_come_in_chinese(chinese, capsys, unwritten):
    with pytest.raises(CheckFailed, match="`.*stub` 还没有写：把 `raise NotImplementedError` 换成"):
        checks.check_decode_speed(unwritten)
    with pytest.raises(CheckFailed, match="请返回一个数"):
        checks.check_decode_speed(lambda t: str(right_speed(t)))
    with pytest.raises(CheckFailed, match="没有可以计时的解码步：应当抛出 ValueError"):
        checks.check_decode_speed(lambda t: (len(t) - 1) / max(t[-1] - t[0], 1e-9))
    with pytest.raises(CheckFailed, match="两者从第 .* 个字符起开始不同"):
        checks.check_chat_prompt(lambda m: right_prompt(m).replace("user", "User"))
    with pytest.raises(CheckFailed, match="修改了它的参数 `m`：不要改动传进来的列表"):
        checks.check_chat_prompt(lambda m: m.pop() and right_prompt(m))
    with pytest.raises(CheckFailed, match=r"answer\(model, tokenizer, .*\) 抛出了 KeyError"):
        checks.check_answer(lambda model, tokenizer, messages, k: messages[0]["text"], None, None)
    checks.check_decode_speed(right_speed)
    assert "✅ decode_speed：全部 7 个用例通过" in capsys.readouterr().out


def test_english_is_the_default(capsys):
    from minillm.course import current_language

    assert current_language() == "en"
    checks.check_decode_speed(right_speed)
    assert "all 7 cases pass" in capsys.readouterr().out
