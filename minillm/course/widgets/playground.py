"""Playground: a prompt box and every GenerationConfig control; generates with the real model and
streams the text as it comes (beam search shows all returned beams at the end).

The last two runs stand side by side, each with its settings (those that differ between the two
in bold), its text, why it ended and how long it took, so two settings can be compared."""

from __future__ import annotations

import html
import warnings
from dataclasses import dataclass, field

from ...decoding.config import GenerationConfig, IgnoredSamplingOptionsWarning
from ..language import say
from .readable import finish_reason_text, number


def config_from_values(values: dict, tokenizer=None) -> GenerationConfig:
    """A GenerationConfig from the controls' values. Widget conventions: top_k 0, min_p 0 and
    seed -1 mean "off"; `stop` and `bad_words` are comma-separated text (bad words are turned
    into token ids with and without a leading space, which needs `tokenizer`). A slider's float
    (0.20000000000000004) is rounded to 6 significant digits (0.2)."""
    fields = {name: float(f"{value:.6g}") if isinstance(value, float) else value
              for name, value in values.items()}
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
        from ...decoding.processors import bad_words_ids

        fields["bad_words_ids"] = bad_words_ids(tokenizer, words)
    with warnings.catch_warnings():  # the run's card marks the options greedy decoding ignores
        warnings.simplefilter("ignore", IgnoredSamplingOptionsWarning)
        return GenerationConfig.merge(None, **fields)


MAX_NEW_TOKENS = 300  # the slider's top
SAMPLING_ONLY = ("temperature", "top_k", "top_p", "min_p", "seed")
BEAM_ONLY = ("length_penalty", "early_stopping", "num_return_sequences")
RUNS_SHOWN = 2  # the latest run and the one before it, side by side


def describe_parts(config: GenerationConfig) -> list[str]:
    """The decoding mode, then each option that differs from its default, rounded for people
    and marked when the mode ignores it."""
    if config.is_beam_search:
        mode = say("beam search, {n} beams", "束搜索，{n} 条束", n=config.num_beams)
    else:
        mode = say("sampling", "采样") if config.do_sample else say("greedy", "贪心解码")
    default = GenerationConfig()
    parts = [mode]
    for name in GenerationConfig.field_names():
        value = getattr(config, name)
        if name in ("do_sample", "num_beams") or value == getattr(default, name):
            continue
        note = ""
        if name in SAMPLING_ONLY and not config.do_sample:
            note = say(" (sampling only)", "（仅用于采样）")
        elif name in BEAM_ONLY and not config.is_beam_search:
            note = say(" (beam search only)", "（仅用于束搜索）")
        parts.append(f"{name}={number(value)}{note}")
    return parts


def describe(config: GenerationConfig) -> str:
    """e.g. "sampling · temperature=0.7 · length_penalty=2.0 (beam search only)"."""
    return " · ".join(describe_parts(config))


# How a setting that is off reads on a card, in the controls' words instead of Python's None.
OFF = {"min_p": "off", "seed": "random", "stop": "none", "bad_words_ids": "none",
       "eos_token_id": "the model's"}


def setting_values(config: GenerationConfig) -> dict[str, str]:
    """Every field of `config`, rounded for people: what two runs' cards compare. A field that
    is off (None) reads as the controls say it: min_p=off, seed=random, stop=none."""
    values = {}
    for name in GenerationConfig.field_names():
        value = getattr(config, name)
        values[name] = OFF.get(name, "none") if value is None else number(value)
    return values


@dataclass
class Run:
    """One press of Generate, as its card shows it."""

    index: int
    settings: list[str]                              # describe_parts(config)
    values: dict = field(default_factory=dict)       # setting_values(config)
    texts: list[str] = field(default_factory=list)   # one per returned sequence
    notes: list[str] = field(default_factory=list)   # per sequence: score, why it ended
    seconds: float | None = None                     # None while it runs


PRE = "white-space:pre-wrap;overflow-wrap:break-word;margin:4px 0;font-size:13px"


def card_settings(run: Run, other: Run | None) -> list[tuple[str, bool]]:
    """The settings a card lists, each with whether it differs from `other`'s: the run's own
    description, plus any setting `other` changed that this run left at its default."""
    differ = {name for name, value in run.values.items()
              if other is not None and other.values.get(name) != value}
    parts = list(run.settings)
    named = {p.split("=")[0] for p in parts if "=" in p}
    parts += [f"{name}={run.values[name]}" for name in run.values
              if name in differ and name not in named]
    mode_differs = other is not None and other.settings[:1] != run.settings[:1]
    return [(p, p.split("=")[0] in differ if "=" in p else mode_differs) for p in parts]


def run_card(run: Run, other: Run | None, latest: bool) -> str:
    """One run's card; the settings that differ from `other`'s in bold."""
    settings = " · ".join(f"<b>{html.escape(p)}</b>" if differs else html.escape(p)
                          for p, differs in card_settings(run, other))
    when = say("latest", "最新") if latest else say("before", "上一次")
    no_text = say("(no text)", "（没有文本）")
    body = "".join(
        f"<pre style='{PRE}'>{html.escape(text) if text else f'<i>{no_text}</i>'}</pre>"
        f"<div style='font-size:12px;color:#555'>{html.escape(note)}</div>"
        for text, note in zip(run.texts, run.notes)) or f"<i>{say('generating…', '生成中…')}</i>"
    took = say("running…", "运行中…") if run.seconds is None else f"{run.seconds:.1f} s"
    header = say("run {i} · {when} · {took}", "第 {i} 次运行 · {when} · {took}", i=run.index,
                 when=when, took=took)
    return (f"<div class='minillm-run' data-run='{run.index}' style='flex:1 1 0;min-width:0;"
            f"border:1px solid #ccc;border-radius:4px;padding:6px'>"
            f"<div style='font-size:12px;color:#555'>{header}</div>"
            f"<div style='font-size:12px'>{settings}</div>{body}</div>")


def runs_html(runs: list[Run]) -> str:
    """The last RUNS_SHOWN runs side by side, the latest first."""
    shown = runs[::-1][:RUNS_SHOWN]
    cards = [run_card(r, shown[1 - i] if len(shown) == 2 else None, i == 0)
             for i, r in enumerate(shown)]
    return f"<div style='display:flex;gap:8px;align-items:flex-start'>{''.join(cards)}</div>"


def status_html(text: str, error: bool = False) -> str:
    """One line that never wraps (a long text ends in "…", all of it in the tooltip)."""
    colour = "color:#b00;" if error else ""
    return (f"<div title='{html.escape(text, quote=True)}' style='{colour}white-space:nowrap;"
            f"overflow:hidden;text-overflow:ellipsis'>{html.escape(text)}</div>")


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
        "stop": w.Text(value="", placeholder=say(r"e.g. \n\n, The end", r"例如 \n\n, The end"),
                       layout=narrow),
        "bad_words": w.Text(value="", placeholder=say("comma-separated words", "用逗号分隔的词"),
                            layout=narrow),
    }


def playground(model, tokenizer, prompt: str = "Write a short poem about the sea.",
               max_new_tokens: int = 60):
    """The whole GenerationConfig as controls, starting at `max_new_tokens` (1-300). Chat-style
    prompts go through the chat template when "chat" is ticked. The returned box has `.run()`,
    `.controls`, `.status`, `.output` (the runs, side by side) and `.runs`."""
    import ipywidgets as w

    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"max_new_tokens must be an int from 1 to {MAX_NEW_TOKENS}, got "
                         f"{max_new_tokens!r}")

    from ...utils.devices import Timer
    from ...generation.loop import generate
    from ...generation.loop import timed_stream

    box_prompt = w.Textarea(value=prompt, layout=w.Layout(width="95%", height="60px"))
    chat = w.Checkbox(value=True, description=say("chat template", "对话模板"), indent=False,
                      layout=w.Layout(width="130px"))
    controls = _controls(max_new_tokens)
    labelled = [w.HBox([w.Label(name, layout=w.Layout(width="150px")), c])
                for name, c in controls.items()]
    button = w.Button(description=say("Generate", "生成"), button_style="primary")
    status = w.HTML(value=status_html(say("press Generate; the last two runs stay side by side",
                                          "点“生成”；最近两次运行会并排显示")),
                    layout=w.Layout(flex="1 1 0", min_width="0"))
    output = w.HTML()
    runs: list[Run] = []

    def run(_=None):
        values = {name: c.value for name, c in controls.items()}
        try:
            config = config_from_values(values, tokenizer)
        except (ValueError, TypeError) as error:
            status.value = status_html(str(error), error=True)
            return
        text = box_prompt.value
        if chat.value:
            text = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                 add_generation_prompt=True)
        current = Run(len(runs) + 1, describe_parts(config), setting_values(config))
        button.disabled = True
        try:
            runs.append(current)
            output.value = runs_html(runs)
            with Timer(model) as timer:
                if config.num_beams == 1:
                    _stream(text, config, current)
                else:
                    status.value = status_html(say("beam search with {n} beams…",
                                                   "束搜索，{n} 条束…", n=config.num_beams))
                    result = generate(model, tokenizer, text, config)
                    for r in result.sequences:
                        current.texts.append(r.text)
                        current.notes.append(say("score {s:.3f} · ", "得分 {s:.3f} · ",
                                                 s=r.score) + finish_reason_text(
                            r.finish_reason, len(r.token_ids), r.text))
            current.seconds = timer.seconds
            status.value = status_html(say("run {i} done in {s:.1f} s · {note}",
                                           "第 {i} 次运行完成，用时 {s:.1f} 秒 · {note}",
                                           i=current.index, s=timer.seconds,
                                           note=current.notes[0]))
        except (ValueError, TypeError) as error:
            runs.remove(current)
            status.value = status_html(str(error), error=True)
        finally:
            button.disabled = False
            output.value = runs_html(runs)

    def _stream(text, config, current):
        shown = [""]
        current.texts.append("")
        current.notes.append("")

        def tokens_so_far(event):
            status.value = status_html(say("generating… {i}/{n} tokens",
                                           "生成中… {i}/{n} 个词元", i=event.index + 1,
                                           n=config.max_new_tokens))

        stream = timed_stream(model, tokenizer, text, config, on_token=tokens_so_far)
        status.value = status_html(say("generating… (prefill)", "生成中…（预填充）"))
        for piece in stream:
            shown[0] += piece
            current.texts[0] = shown[0]
            output.value = runs_html(runs)
        result = stream.result
        current.texts[0] = result.text
        current.notes[0] = finish_reason_text(result.finish_reason, len(result.token_ids),
                                              result.text)

    button.on_click(run)
    columns = w.HBox([w.VBox(labelled[:8]), w.VBox(labelled[8:])])
    box = w.VBox([box_prompt, w.HBox([button, chat, status]), columns, output])
    box.run, box.controls, box.output, box.status, box.runs = run, controls, output, status, runs
    box.button, box.chat = button, chat
    return box
