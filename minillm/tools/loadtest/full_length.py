"""Asking a server for answers exactly `max_tokens` long, in the spellings servers understand.

A load test compares servers at the same work, so every answer should run to `max_tokens`: an
answer that stops at the model's end of text (EOS) is shorter work, and its TPOT and throughput
describe something else. The OpenAI API has no field for this; servers added their own:

    field             asks for                                understood by
    ignore_eos: true  never stop at the end of text           vLLM, SGLang, minillm serve,
                                                              llama.cpp's C++ llama-server
    min_tokens: N     no end of text before N tokens          vLLM, SGLang, llama-cpp-python's
                      (N = max_tokens)                        server (it bans the model's one
                                                              eos_token_id; other end-of-text
                                                              tokens may still end an answer)

llama-cpp-python's server (`python -m llama_cpp.server`, 0.3.36) accepts `ignore_eos` and drops
it silently; minillm serve and OpenAI's own API refuse a field they do not know (HTTP 400).
Not sent: `logit_bias` {EOS id: -100}, OpenAI's own way, needs the server's token ids (a
tokenizer that is not the server's would ban unrelated tokens), and llama-cpp-python 0.3.36
loses both `min_tokens` and `logit_bias` when one request has both.

So before the test, `probe` sends one short request with every spelling and, if the server
refuses it, finds which spellings it refuses and leaves those out. Whether a server *honoured*
what it accepted shows in the report: the answers that ended before `max_tokens`. (No field helps
with one cause: llama-cpp-python's server cuts a stream short, with no finish reason, when
another request arrives, unless started with `--interrupt_requests False`.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

FIELDS = ("ignore_eos", "min_tokens")


def full_length_fields(names, max_tokens: int) -> dict:
    """The request fields that ask for `max_tokens` tokens, in the spellings `names`."""
    unknown = [n for n in names if n not in FIELDS]
    if unknown:
        raise ValueError(f"unknown full-length field(s) {unknown}; known: {FIELDS}")
    values = {"ignore_eos": True, "min_tokens": max_tokens}
    return {n: values[n] for n in names}


@dataclass
class Probe:
    """What one-token requests sent before the test found out.

    sent            the full-length fields the server accepted (sent with every request)
    refused         field -> the server's error for a request that had it
    prompt_tokens   the server's `usage.prompt_tokens` for the probe's prompt (None: no usage)
    """

    sent: tuple = ()
    refused: dict = field(default_factory=dict)
    prompt_tokens: int | None = None


async def probe(send, workload, model: str | None, prompt: str) -> Probe:
    """Send `prompt` with max_tokens 1, not streamed: with every field; if that fails, with
    none, then with each alone. At most 2 + len(FIELDS) requests, none of them timed. A server
    that fails even without any field gets none: the test's failures then show its own error.
    `send(body)` posts one request and returns its client.RequestResult."""
    short = dataclasses.replace(workload, output_tokens=1, stream=False)

    async def ask(names):
        return await send(short.payload(prompt, model, names))

    everything = await ask(FIELDS)
    if everything.ok:
        return Probe(FIELDS, prompt_tokens=everything.prompt_tokens)
    bare = await ask(())
    if not bare.ok:
        return Probe()
    sent, refused = [], {}
    for name in FIELDS:
        alone = await ask((name,))
        if alone.ok:
            sent.append(name)
        else:
            refused[name] = alone.error
    return Probe(tuple(sent), refused, bare.prompt_tokens)
