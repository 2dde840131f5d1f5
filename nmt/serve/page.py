"""The web page (page.html), with how the server reads a line filled in: the page splits a line into words as the
model reads it (for the word alignment's indices) and knows a line of invisible characters for blank, by the very
character classes (and terminal escape sequences) of `nmt.text.normalize`."""
from __future__ import annotations

import functools
import json
from pathlib import Path

from nmt.text import ESCAPE_SEQUENCE, FULL_WIDTH, INVISIBLE, JOINERS, NOTHING_TO_JOIN

PAGE = Path(__file__).with_name("page.html")
READ_RULES = "__READ_RULES__"   # in page.html, where the classes go
_SPACE = "".join(chr(c) for c in range(0x3001) if chr(c).isspace())   # what str.split() splits at (none past U+3000)


def js_class(pattern: str) -> str:
    """A JavaScript regular expression (for the "u" flag) of the Python character class `pattern`, "[...]" of
    literal characters and ranges: each character as \\u{hex}, which neither JSON nor HTML can mangle."""
    if not (pattern.startswith("[") and pattern.endswith("]")) or "\\" in pattern or "^" in pattern:
        raise ValueError(f"not a character class of literal characters: {pattern!r}")
    return "[" + "".join(c if c == "-" else f"\\u{{{ord(c):x}}}" for c in pattern[1:-1]) + "]"


@functools.lru_cache(maxsize=1)
def page_html() -> str:
    html = PAGE.read_text(encoding="utf-8")
    rules = {"invisible": js_class(INVISIBLE.pattern), "joiners": js_class(JOINERS.pattern.removesuffix("+")),
             "space": js_class(f"[{_SPACE}]"), "nothing_to_join": js_class(NOTHING_TO_JOIN),
             "full_width": js_class(f"[{chr(min(FULL_WIDTH))}-{chr(max(FULL_WIDTH))}]"),   # (as ASCII: "!" first)
             "escapes": ESCAPE_SEQUENCE.pattern}   # (written for JavaScript's "u" flag too)
    if html.count(READ_RULES) != 1:
        raise RuntimeError(f"{PAGE} must hold {READ_RULES} once")
    return html.replace(READ_RULES, json.dumps(rules))
