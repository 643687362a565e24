"""The language switch: every page links to the same page in the other edition, or to the other
edition's front page where that page has no twin. The edition's settings (MINILLM_BOOK_EDITION)
name the other edition's folder relative to this one and the pages it has."""

import json
import os
import posixpath


def _twin(app, pagename, templatename, context, doctree):
    edition = json.loads(os.environ.get("MINILLM_BOOK_EDITION", "{}"))
    twin = edition.get("twin")
    if not twin:
        return
    target = pagename if pagename in twin["pages"] else "index"
    depth = pagename.count("/")
    here_to_root = "../" * depth
    url = posixpath.normpath(here_to_root + twin["root"] + "/" + target + ".html")
    context["language_twin"] = {"url": url, "label": twin["label"], "lang": twin["language"],
                                "same_page": target == pagename}


def setup(app):
    app.connect("html-page-context", _twin)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
