"""Playground: a prompt box and every GenerationConfig control; generates with the real model and
streams the text as it comes (beam search shows all returned beams at the end)."""

from __future__ import annotations

import html
import time

from ..decoding.config import GenerationConfig


def config_from_values(values: dict, tokenizer=None) -> GenerationConfig:
    """A GenerationConfig from the controls' values. Widget conventions: top_k 0, min_p 0 and
    seed -1 mean "off"; `stop` and `bad_words` are comma-separated text (bad words are turned
    into token ids with and without a leading space, which needs `tokenizer`)."""
    fields = dict(values)
    if fields.get("min_p") == 0:
        fields["min_p"] = None
    if fields.get("seed") == -1:
        fields["seed"] = None
    stop = fields.pop("stop", "") or ""
    fields["stop"] = [s.encode().decode("unicode_escape") for s in stop.split(",") if s] or None
    words = [w.strip() for w in (fields.pop("bad_words", "") or "").split(",") if w.strip()]
    if words:
        if tokenizer is None:
            raise ValueError("bad words need the tokenizer to turn them into token ids")
        from ..decoding.processors import bad_words_ids

        fields["bad_words_ids"] = bad_words_ids(tokenizer, words)
    return GenerationConfig.merge(None, **fields)


MAX_NEW_TOKENS = 300  # the slider's top
SAMPLING_ONLY = ("temperature", "top_k", "top_p", "min_p", "seed")
BEAM_ONLY = ("length_penalty", "early_stopping", "num_return_sequences")


def describe(config: GenerationConfig) -> str:
    """The decoding mode and every option that differs from its default, marking those the mode
    ignores, e.g. "sampling · temperature=0.7 · length_penalty=2.0 (beam search only)"."""
    if config.is_beam_search:
        mode = f"beam search, {config.num_beams} beams"
    else:
        mode = "sampling" if config.do_sample else "greedy"
    default = GenerationConfig()
    parts = [mode]
    for name in GenerationConfig.field_names():
        value = getattr(config, name)
        if name in ("do_sample", "num_beams") or value == getattr(default, name):
            continue
        note = ""
        if name in SAMPLING_ONLY and not config.do_sample:
            note = " (sampling only)"
        elif name in BEAM_ONLY and not config.is_beam_search:
            note = " (beam search only)"
        parts.append(f"{name}={value!r}{note}")
    return " · ".join(parts)


def _controls(max_new_tokens: int):
    import ipywidgets as w

    narrow = w.Layout(width="300px")
    return {
        "max_new_tokens": w.IntSlider(value=max_new_tokens, min=1, max=MAX_NEW_TOKENS,
                                       layout=narrow),
        "do_sample": w.Checkbox(value=True),
        "temperature": w.FloatSlider(value=1.0, min=0.01, max=3.0, step=0.01, layout=narrow),
        "top_k": w.IntSlider(value=0, min=0, max=200, layout=narrow),
        "top_p": w.FloatSlider(value=0.9, min=0.01, max=1.0, step=0.01, layout=narrow),
        "min_p": w.FloatSlider(value=0.0, min=0.0, max=1.0, step=0.01, layout=narrow),
        "repetition_penalty": w.FloatSlider(value=1.0, min=0.5, max=3.0, step=0.05,
                                            layout=narrow),
        "no_repeat_ngram_size": w.IntSlider(value=0, min=0, max=10, layout=narrow),
        "num_beams": w.IntSlider(value=1, min=1, max=6, layout=narrow),
        "length_penalty": w.FloatSlider(value=1.0, min=-2.0, max=3.0, step=0.1, layout=narrow),
        "early_stopping": w.Dropdown(options=[False, True, "never"], value=False,
                                     layout=narrow),
        "num_return_sequences": w.IntSlider(value=1, min=1, max=6, layout=narrow),
        "seed": w.IntText(value=0, layout=narrow),
        "stop": w.Text(value="", placeholder=r"e.g. \n\n, The end", layout=narrow),
        "bad_words": w.Text(value="", placeholder="comma-separated words", layout=narrow),
    }


def playground(model, tokenizer, prompt: str = "Write a short poem about the sea.",
               max_new_tokens: int = 60):
    """The whole GenerationConfig as controls, starting at `max_new_tokens` (1-300). Chat-style
    prompts go through the chat template when "chat" is ticked."""
    import ipywidgets as w

    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"max_new_tokens must be an int from 1 to {MAX_NEW_TOKENS}, got "
                         f"{max_new_tokens!r}")

    from ..generation import generate, stream

    box_prompt = w.Textarea(value=prompt, layout=w.Layout(width="95%", height="60px"))
    chat = w.Checkbox(value=True, description="chat template")
    controls = _controls(max_new_tokens)
    labelled = [w.HBox([w.Label(name, layout=w.Layout(width="150px")), c])
                for name, c in controls.items()]
    button = w.Button(description="Generate", button_style="primary")
    status = w.HTML()
    output = w.HTML()

    def run(_=None):
        values = {name: c.value for name, c in controls.items()}
        try:
            config = config_from_values(values, tokenizer)
        except (ValueError, TypeError) as error:
            status.value = f"<span style='color:#b00'>{html.escape(str(error))}</span>"
            return
        text = box_prompt.value
        if chat.value:
            text = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                 add_generation_prompt=True)
        start, shown = time.perf_counter(), ""
        output.value = ""
        if config.num_beams == 1:
            status.value = "generating…"
            for piece in stream(model, tokenizer, text, config):
                shown += piece
                output.value = f"<pre style='white-space:pre-wrap'>{html.escape(shown)}</pre>"
        else:
            status.value = f"beam search with {config.num_beams} beams…"
            result = generate(model, tokenizer, text, config)
            rows = [f"<b>score {r.score:.3f}</b> ({r.finish_reason})<pre style='white-space:"
                    f"pre-wrap'>{html.escape(r.text)}</pre>" for r in result.sequences]
            output.value = "".join(rows)
        seconds = time.perf_counter() - start
        status.value = f"done in {seconds:.1f} s · {html.escape(describe(config))}"

    button.on_click(run)
    columns = w.HBox([w.VBox(labelled[:8]), w.VBox(labelled[8:])])
    box = w.VBox([box_prompt, w.HBox([chat, button, status]), columns, output])
    box.run, box.controls, box.output, box.status = run, controls, output, status
    return box
