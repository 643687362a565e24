"""Chapter 04's interactive widgets (ipywidgets + matplotlib). Each widget's numbers come from a
plain compute function, tested without a browser:

    temperature.py   temperature_explorer      <- temperature_table
    filters.py       top_k_top_p_explorer      <- filter_view
    playground.py    playground                <- config_from_values
    repetition.py    repetition_explorer       <- repetition_report
"""

from .filters import FilterView, filter_view, top_k_top_p_explorer
from .playground import config_from_values, playground
from .repetition import RepetitionReport, highlight_html, repetition_explorer, repetition_report
from .temperature import next_token_logits, temperature_explorer, temperature_table

__all__ = ["temperature_explorer", "temperature_table", "next_token_logits",
           "top_k_top_p_explorer", "filter_view", "FilterView", "playground",
           "config_from_values", "repetition_explorer", "repetition_report", "RepetitionReport",
           "highlight_html"]
