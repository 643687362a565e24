"""Chat templates (对话模板): how a list of messages becomes the one string the model reads.

An instruct model was fine-tuned on conversations written in a fixed format. SmolLM2 uses ChatML:

    <|im_start|>system
    You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
    <|im_start|>user
    Hi!<|im_end|>
    <|im_start|>assistant

The model file stores its template as a Jinja program (`tokenizer.chat_template`); minillm renders
it with jinja2 the way transformers does. `chatml` below writes the same format in plain Python,
to read.
"""

from __future__ import annotations

from functools import lru_cache

SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# ChatML without a default system prompt: the template minillm gives the tokenizers it trains.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def chatml(messages, add_generation_prompt: bool = True, default_system: str | None = None) -> str:
    """ChatML in plain Python. With `default_system`, a system message is put first when the
    conversation has none (SmolLM2's template does this with SMOLLM_SYSTEM)."""
    messages = check_messages(messages)
    parts = []
    if default_system is not None and messages and messages[0]["role"] != "system":
        parts.append(f"<|im_start|>system\n{default_system}<|im_end|>\n")
    for message in messages:
        parts.append(f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def check_messages(messages) -> list[dict]:
    """A clear error for anything that is not a list of {"role": str, "content": str} dicts."""
    if isinstance(messages, (str, bytes)) or not hasattr(messages, "__iter__"):
        raise TypeError("messages must be a list of dicts like "
                        f"{{'role': 'user', 'content': 'Hi'}}, not {type(messages).__name__}")
    messages = list(messages)
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise TypeError(f"messages[{i}] is a {type(message).__name__}; each message must be "
                            "a dict with 'role' and 'content'")
        for key in ("role", "content"):
            if key not in message:
                raise ValueError(f"messages[{i}] has no {key!r}; each message needs 'role' "
                                 "and 'content'")
            if not isinstance(message[key], str):
                raise TypeError(f"messages[{i}][{key!r}] must be a str, not "
                                f"{type(message[key]).__name__}")
    return messages


@lru_cache(maxsize=16)
def _compile(template: str):
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


def render(template: str, messages, add_generation_prompt: bool = True, **extra) -> str:
    """Render a Jinja chat template (the model's own) for `messages`."""
    messages = check_messages(messages)
    return _compile(template).render(messages=messages,
                                     add_generation_prompt=add_generation_prompt, **extra)
