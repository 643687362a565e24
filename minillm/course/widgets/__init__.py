"""The course's interactive widgets (ipywidgets + matplotlib). Each widget's numbers come from a
plain compute function and each chart from a plain figure function, both tested without a
browser; charts are shown as inline SVG (render.py), so they draw on a fresh kernel's first run.

    temperature.py   temperature_explorer      <- temperature_table, temperature_figure
    filters.py       top_k_top_p_explorer      <- filter_view, filter_figure (top-k, top-p, min-p)
    tokens.py        token labels and running text (bytes of a character cut across tokens)
    playground.py    playground                <- config_from_values, describe, runs_html
    repetition.py    repetition_explorer       <- repetition_report
    latency.py       LatencyChart (chapter 05) <- plot_latency
    batching.py      block_map_explorer, plot_timeline (chapter 06) <- block_map_figure
"""

from .filters import FilterView, filter_figure, filter_view, top_k_top_p_explorer
from .playground import config_from_values, playground
from .repetition import RepetitionReport, highlight_html, repetition_explorer, repetition_report
from .temperature import (next_token_logits, temperature_explorer, temperature_figure,
                          temperature_table)

__all__ = ["temperature_explorer", "temperature_table", "temperature_figure",
           "next_token_logits", "top_k_top_p_explorer", "filter_view", "filter_figure",
           "FilterView", "playground", "config_from_values", "repetition_explorer",
           "repetition_report", "RepetitionReport", "highlight_html"]
