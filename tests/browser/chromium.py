"""Which Chromium (or Chrome) the browser tests drive: the one the machine has. Nothing is
installed here: `make browser` installs Debian's on a Debian machine, and CI runs it first.

CHROMIUM=/path/to/browser chooses one; otherwise the first found of the names on PATH, then
the macOS applications. MINILLM_BROWSER_TESTS=required (CI sets it) turns "none found" from a
skip into a failure, and asks for the CJK font too."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
MAC_APPS = ("/Applications/Chromium.app/Contents/MacOS/Chromium",
            "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome")
HOW_TO_ENABLE = ("to run them, install Chromium or Chrome (Debian: `make browser`; Ubuntu: "
                 "`sudo snap install chromium`; Fedora: `sudo dnf install chromium`; macOS: "
                 "Google Chrome) or set CHROMIUM=/path/to/chromium")
# Chinese terms in the lessons need a CJK font, or the browser draws boxes (Debian's path).
CJK_FONT = "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"


def required() -> bool:
    """Whether a missing browser fails the tests instead of skipping them (CI)."""
    return os.environ.get("MINILLM_BROWSER_TESTS", "") == "required"


def find_chromium() -> tuple[str | None, str]:
    """(the browser's path, how it was found) or (None, why none: a sentence that says how to
    enable the browser tests)."""
    chosen = os.environ.get("CHROMIUM")
    if chosen:
        if Path(chosen).is_file() and os.access(chosen, os.X_OK):
            return chosen, f"CHROMIUM={chosen}"
        return None, (f"browser tests skipped: CHROMIUM={chosen} is not an executable file; "
                      f"point it at one, or unset it to look on PATH")
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found, f"{name} on PATH"
    for app in MAC_APPS:
        if Path(app).is_file():
            return app, app
    return None, (f"browser tests skipped: no Chromium or Chrome on PATH ({', '.join(NAMES)}); "
                  + HOW_TO_ENABLE)


def chromium_or_skip() -> str:
    """The browser's path for a browser test module; where there is none, skip the module with
    the sentence that says how to enable it, or fail it when MINILLM_BROWSER_TESTS=required."""
    import pytest

    chromium, found = find_chromium()
    if chromium is None:
        if required():
            pytest.fail(f"MINILLM_BROWSER_TESTS=required, but {found.split(': ', 1)[1]}",
                        pytrace=False)
        pytest.skip(found, allow_module_level=True)
    return chromium


def cjk_font_found() -> bool:
    """Whether a font with Chinese glyphs is installed (fontconfig's answer where it is there)."""
    if Path(CJK_FONT).is_file():
        return True
    if shutil.which("fc-list"):
        listed = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True,
                                text=True, timeout=60)
        return bool(listed.stdout.strip())
    return Path("/System/Library/Fonts/PingFang.ttc").is_file()  # macOS
