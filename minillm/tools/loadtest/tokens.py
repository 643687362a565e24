"""Token counts for servers that report no `usage`, counted with the model's tokenizer.

A server's `usage` (prompt_tokens, completion_tokens) is the true count, and the client uses it
whenever the server sends one. Some servers send none in a stream (llama-cpp-python's server
0.3.36 never does; vLLM only when asked with stream_options.include_usage). Then, as vLLM's
serving benchmark does, the client counts with the tokenizer: the prompt as the server would
see it (for chat, the model's chat template around the message) and the answer's text encoded
again. Re-encoding the answer can differ from the server's own tokens by a token or so (a word
may be cut differently), so the report says which way each count was made:

    "server"     the server's usage
    "tokenizer"  counted here with the tokenizer
    "events"     (output only) the number of stream events that carried text, when no
                 tokenizer could be loaded
    "unknown"    no usage and no tokenizer (a prompt, or an answer that was not streamed)
"""

from __future__ import annotations

DEFAULT_TOKENIZER = "smollm2-135m"  # the course model


class TokenCounter:
    """Counts tokens with the tokenizer `name` (a model name minillm knows, a .gguf file, a saved
    tokenizer or a Hugging Face model folder: anything `minillm.load_tokenizer` reads), or with
    a tokenizer object. The tokenizer is loaded on first use: a server that reports usage never
    needs it."""

    def __init__(self, tokenizer=DEFAULT_TOKENIZER):
        self.name = tokenizer if isinstance(tokenizer, str) else getattr(tokenizer, "name", "?")
        self._tokenizer = None if isinstance(tokenizer, str) else tokenizer
        self.error: str | None = None
        self.used = False  # whether any count was made with the tokenizer

    def tokenizer(self):
        """The tokenizer, or None when it cannot be loaded (the reason is in `error`)."""
        if self._tokenizer is None and self.error is None:
            from ...tokenizer import load_tokenizer

            try:
                self._tokenizer = load_tokenizer(self.name)
            except (OSError, ValueError, TypeError) as error:
                self.error = f"{type(error).__name__}: {error}"
        return self._tokenizer

    def prompt_tokens(self, prompt: str, chat: bool) -> int | None:
        tokenizer = self.tokenizer()
        if tokenizer is None:
            return None
        self.used = True
        if chat:
            try:
                prompt = tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
            except ValueError:  # no chat template: the message's own tokens
                pass
        return len(tokenizer.encode(prompt))

    def output_tokens(self, text: str) -> int | None:
        tokenizer = self.tokenizer()
        if tokenizer is None:
            return None
        self.used = True
        return len(tokenizer.encode(text))

    def summary(self, prompt: str, chat: bool, server_count: int | None) -> dict:
        """For the report: the tokenizer's name, whether it was used, why it could not be
        loaded, and, where the server counted `prompt` too (`server_count`, from the probe's
        usage), both counts: a tokenizer that is not the server's model's shows here."""
        used, check = self.used, None
        if used and server_count is not None:
            check = {"server": server_count, "tokenizer": self.prompt_tokens(prompt, chat)}
        return {"name": self.name, "used": used, "error": self.error, "prompt_check": check}


def fill_missing_counts(results, prompts, chat: bool, counter: TokenCounter) -> None:
    """Give every answered request a prompt and an output count, and say how each was made."""
    for r in results:
        if not r.ok:
            continue
        if r.prompt_tokens_by is None:
            count = counter.prompt_tokens(prompts[r.index], chat)
            r.prompt_tokens = count
            r.prompt_tokens_by = "unknown" if count is None else "tokenizer"
        if r.output_tokens_by != "server":
            count = counter.output_tokens(r.text)
            if count is not None:
                r.output_tokens, r.output_tokens_by = count, "tokenizer"
