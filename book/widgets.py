"""Widgets as the notebook left them, in static HTML: a page needs no kernel and no widget
manager to show them.

An executed notebook keeps each widget's state (nbclient stores it in the notebook's metadata);
a widget's output refers to its model. `freeze_widgets` replaces each such output with HTML drawn
from that state: boxes as boxes, HTML widgets (the course's charts are inline SVG) as their HTML,
an Output widget as its outputs, each control as an inert copy showing its value. A widget with
controls gets one line saying that the notebook moves it. Its Python callbacks cannot run in a
static page, so an embedded widget manager would show controls that move and change nothing."""

from __future__ import annotations

import html

import nbformat

STATE_MIME = "application/vnd.jupyter.widget-state+json"
VIEW_MIME = "application/vnd.jupyter.widget-view+json"
NOTE = {"en": "A widget, shown as the notebook left it: run the notebook to move it.",
        "zh": "交互控件，这里是笔记本运行结束时的样子：运行笔记本即可操作它。"}
BOXES = {"VBoxModel": "w-vbox", "BoxModel": "w-vbox", "GridBoxModel": "w-vbox",
         "HBoxModel": "w-hbox", "TabModel": "w-vbox", "AccordionModel": "w-vbox",
         "StackModel": "w-vbox"}
HTML_MODELS = {"HTMLModel", "HTMLMathModel"}
SLIDERS = {"IntSliderModel", "FloatSliderModel", "FloatLogSliderModel", "IntRangeSliderModel",
           "FloatRangeSliderModel"}
SELECTIONS = {"DropdownModel", "SelectionSliderModel", "RadioButtonsModel",
              "ToggleButtonsModel", "SelectModel", "SelectionRangeSliderModel"}
TEXTS = {"TextModel", "TextareaModel", "IntTextModel", "FloatTextModel", "BoundedIntTextModel",
         "BoundedFloatTextModel", "PasswordModel", "ComboboxModel"}
PROGRESS = {"IntProgressModel", "FloatProgressModel"}


class WidgetState:
    """The widget models of one executed notebook, by id."""

    def __init__(self, nb):
        self.models = nb.metadata.get("widgets", {}).get(STATE_MIME, {}).get("state", {})
        self.controls = 0

    def model(self, ref: str) -> dict | None:
        return self.models.get(ref.removeprefix("IPY_MODEL_")) if isinstance(ref, str) else None

    def style(self, state: dict) -> str | None:
        """The widget's layout as inline CSS, or None when the layout hides it."""
        layout = (self.model(state.get("layout")) or {}).get("state", {})
        if layout.get("display") == "none" or layout.get("visibility") == "hidden":
            return None
        rules = [f"{name}:{layout[name]}" for name in ("width", "max_width", "min_width")
                 if layout.get(name)]
        return ";".join(rule.replace("_", "-") for rule in rules)

    def render(self, ref: str) -> str:
        model = self.model(ref)
        if model is None:
            return ""
        name, state = model.get("model_name", ""), model.get("state", {})
        style = self.style(state)
        if style is None:
            return ""
        attribute = f' style="{html.escape(style)}"' if style else ""
        if name in BOXES:
            inner = "".join(self.render(child) for child in state.get("children", []))
            return f'<div class="{BOXES[name]}"{attribute}>{inner}</div>'
        if name in HTML_MODELS:
            return f"<div{attribute}>{_labelled(state, state.get('value', ''))}</div>"
        if name == "LabelModel":
            return f"<div{attribute}>{html.escape(str(state.get('value', '')))}</div>"
        if name == "OutputModel":
            return f"<div{attribute}>{outputs_html(state.get('outputs', []))}</div>"
        if name == "ImageModel":
            return ""  # the course's charts are SVG in HTML widgets, never image widgets
        if name in PROGRESS:
            return (f'<progress value="{state.get("value", 0)}" max="{state.get("max", 100)}"'
                    f'{attribute}></progress>')
        self.controls += 1
        return f'<div class="w-control"{attribute}>{self.control(name, state)}</div>'

    def control(self, name: str, state: dict) -> str:
        if name in SLIDERS:
            value = state.get("value")
            shown = _format(value, state.get("readout_format"))
            return _labelled(state, f'<input type="range" disabled min="{state.get("min")}" '
                                    f'max="{state.get("max")}" step="{state.get("step") or "any"}" '
                                    f'value="{value}"><output>{html.escape(shown)}</output>')
        if name in SELECTIONS:
            labels, index = state.get("_options_labels", []), state.get("index")
            chosen = labels[index] if isinstance(index, int) and index < len(labels) else ""
            return _labelled(state, f"<select disabled><option>{html.escape(str(chosen))}"
                                    "</option></select>")
        if name in TEXTS:
            value = html.escape(str(state.get("value", "")))
            if name == "TextareaModel":
                return _labelled(state, f"<textarea disabled>{value}</textarea>")
            return _labelled(state, f'<input type="text" disabled value="{value}">')
        if name in ("CheckboxModel", "ToggleButtonModel"):
            checked = " checked" if state.get("value") else ""
            return _labelled(state, f'<input type="checkbox" disabled{checked}>')
        if name == "ButtonModel":
            return f"<button disabled>{html.escape(state.get('description', ''))}</button>"
        return _labelled(state, html.escape(str(state.get("value", ""))))


def _labelled(state: dict, inner: str) -> str:
    description = state.get("description")
    label = f"<label>{html.escape(description)}</label>" if description else ""
    return label + inner


def _format(value, readout_format: str | None) -> str:
    if isinstance(value, list):
        return " – ".join(_format(v, readout_format) for v in value)
    try:
        return format(value, readout_format or "")
    except (TypeError, ValueError):
        return str(value)


def outputs_html(outputs: list) -> str:
    """An Output widget's outputs as HTML (what a notebook would show for them)."""
    parts = []
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            parts.append(f"<pre>{html.escape(output.get('text', ''))}</pre>")
        elif kind == "error":
            parts.append(f"<pre class='error'>{html.escape(output.get('ename', ''))}: "
                         f"{html.escape(output.get('evalue', ''))}</pre>")
        else:
            data = output.get("data", {})
            if "image/svg+xml" in data:
                parts.append(_text(data["image/svg+xml"]))
            elif "image/png" in data:
                parts.append(f'<img src="data:image/png;base64,{_text(data["image/png"]).strip()}"'
                             ' alt="">')
            elif "text/html" in data:
                parts.append(_text(data["text/html"]))
            elif "text/plain" in data:
                parts.append(f"<pre>{html.escape(_text(data['text/plain']))}</pre>")
    return "".join(parts)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def freeze_widgets(nb, language: str = "en") -> int:
    """Replace every widget output of `nb` by static HTML of its last state and drop the stored
    state. A widget whose model is gone (closed before the notebook ended) keeps nothing.
    Returns the number of widgets drawn."""
    state = WidgetState(nb)
    note = NOTE["zh" if language.startswith("zh") else "en"]
    drawn = 0
    for cell in nb.cells:
        kept = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(VIEW_MIME)
            if view is None:
                kept.append(output)
                continue
            state.controls = 0
            body = state.render(view.get("model_id", ""))
            if not body:
                continue
            if state.controls:
                body += f'<p class="book-widget-note">{html.escape(note)}</p>'
            kept.append(nbformat.v4.new_output(
                "display_data", data={"text/html": f'<div class="book-widget">{body}</div>'}))
            drawn += 1
        if "outputs" in cell:
            cell.outputs = kept
    nb.metadata.pop("widgets", None)
    return drawn
