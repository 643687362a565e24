"""Which fonts the browser really drew an element's text with, asked through the Chrome DevTools
Protocol (CSS.getPlatformFontsForNode): a CSS font list only says what was asked for, and Chinese
text drawn without a CJK font shows as boxes."""

from __future__ import annotations

PROBE = "data-font-probe"


def drawn_fonts(page, locator) -> dict[str, int]:
    """font family -> how many glyphs of the element's own text it drew."""
    locator.evaluate(f"e => e.setAttribute('{PROBE}', '1')")
    client = page.context.new_cdp_session(page)
    try:
        client.send("DOM.enable")
        client.send("CSS.enable")
        root = client.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
        node = client.send("DOM.querySelector", {"nodeId": root, "selector": f"[{PROBE}]"})
        fonts = client.send("CSS.getPlatformFontsForNode", {"nodeId": node["nodeId"]})["fonts"]
    finally:
        locator.evaluate(f"e => e.removeAttribute('{PROBE}')")
        client.detach()
    return {f["familyName"]: f["glyphCount"] for f in fonts}


def cjk_glyphs(fonts: dict[str, int]) -> int:
    """Glyphs drawn with a CJK font (Noto Sans CJK, the font `make browser` installs)."""
    return sum(n for name, n in fonts.items() if "CJK" in name)
