"""Sphinx settings for the course book (both editions). `python -m book` writes the pages into a
source folder and runs Sphinx on it with this folder as its configuration; the edition's
language and its twin (the other edition) come from the environment that command sets."""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

EDITION = json.loads(os.environ.get("MINILLM_BOOK_EDITION", "{}"))

project = "minillm"
author = "the minillm authors"
copyright = "the minillm authors, Apache-2.0"
language = EDITION.get("language", "en")
html_title = EDITION.get("title", "minillm: LLM inference, built step by step")

extensions = ["myst_nb", "mathml", "twin", "chinese_search"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
templates_path = [str(Path(__file__).parent / "_templates")]
html_static_path = [str(Path(__file__).parent / "_static")]
html_css_files = ["book.css"]
html_js_files = ["book.js"]

# The notebooks arrive executed (book/execute.py, cached); Sphinx never runs them.
nb_execution_mode = "off"
# Widgets arrive as static HTML (book/widgets.py): no widget manager is loaded from anywhere.
nb_ipywidgets_js = {}
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3
# Math as MathML, drawn by the browser itself: no MathJax script to fetch or bundle.
html_math_renderer = "mathml"
# Links to repository files outside the book (source files, tests) stay plain text.
suppress_warnings = ["myst.xref_missing", "myst.header", "misc.highlighting_failure",
                     "mystnb.unknown_mime_type"]

html_theme = "sphinx_book_theme"
html_theme_options = {
    "show_navbar_depth": 1,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "launch_buttons": {},
    "article_header_end": ["language-switch.html", "article-header-buttons.html"],
    "home_page_in_toc": True,
    "show_toc_level": 2,
}
html_last_updated_fmt = None
html_copy_source = False
html_show_sourcelink = False

# Chinese search: jieba cuts the text into words; the glossary's terms are added to its
# dictionary so that a term such as 预填充 is one searchable word, not three characters.
if language.startswith("zh") and EDITION.get("search_dictionary"):
    html_search_options = {"dict": EDITION["search_dictionary"]}
