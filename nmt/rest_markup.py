"""reStructuredText markup stripped from text as its rendered page shows it: the python-docs-ko corpus's sentences
come from the .po files of Sphinx documentation, whose roles, literals and links carry no language."""
from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Dict, List, Tuple

from nmt.corpus import Pairs
from nmt.languages import has_hangul

# python-docs-ko's substitutions (|name|) that show code or a name, the same on the English and the Korean page, as
# the 3.13 docs define them: Sphinx's |version| (Doc/conf.py: 3.13 on the corpus's branch) and conf.py's rst_epilog;
# inspect.rst's link, urllib.request.rst's methods and functions.rst's table of builtins; rendered as this module
# renders their markup (:func:`x` as x, ``x()`` as x()). The others show a sentence defined elsewhere in the docs
# (dbm's |flag_r|, ftplib's |param_doc_user|: "Open existing database for reading only."), which neither side of a
# pair holds and the Korean page shows translated (or in English): removed from both sides, which still translate
# each other ("'r' (default):", "'r' (기본값):"). (Dropping their 5 pairs would redraw the all recipe's dev set.)
SUBSTITUTIONS = {"version": "3.13", "python_x_dot_y_literal": "python3.13",
                 "usr_local_bin_python_x_dot_y_literal": "/usr/local/bin/python3.13",
                 "coroutine-origin-link": "sys.set_coroutine_origin_tracking_depth",
                 "protocol_open": "BaseHandler.<protocol>_open", "http_error_nnn": "BaseHandler.http_error_<nnn>",
                 "protocol_request": "BaseHandler.<protocol>_request",
                 "protocol_response": "BaseHandler.<protocol>_response",
                 **{f"func-{f}": f"{f}()" for f in ("bytearray", "bytes", "dict", "frozenset", "list", "memoryview",
                                                    "range", "set", "str", "tuple")}}

# reStructuredText markup that carries no language: roles, literals, links, emphasis, escapes, footnote marks.
_MARKUP = r"""
    :(?P<role>(?:[A-Za-z0-9_+.-]+:)+)`(?P<rtext>[^`]+)`            # :func:`x`, :c:func:`x`, :ref:`t <label>`
  | ``(?P<lit>.+?)``                                               # ``code``
  | `(?P<ltext>[^`]+?)`(?:__?)?                                    # `text <url>`_, `text`_, `default role`
  | \*\*(?P<strong>[^*]+?)\*\*                                     # **strong**
  | (?<![\w\\])\*(?P<emph>(?:\\.|[^\s*\\])(?:(?:\\.|[^*\\])*?(?:\\.|[^\s*\\]))?)\*(?!\w)   # *emphasis*
  | \\(?P<esc>.)                                                   # \x -> x; "\ " joins (Korean particles)
  | \ ?\[(?:[0-9]+|\#[\w-]*|\*)\]_(?!\w)(?P<note>)                 # a footnote reference [1]_: a mark
  | \ ?\|(?P<subst>nbsp)\|\ ?                                      # the docs' non-breaking space substitution
  | (?<![\w|\\])\|(?P<shown>[A-Za-z][\w.-]*)\|(?:__?)?(?![\w|])  # |version|, |name|_: `SUBSTITUTIONS`
"""
_REST = re.compile(_MARKUP + r"""
  | (?<![\w`|\\'"])(?P<ref>[A-Za-z](?:[A-Za-z0-9]|[._-](?=[A-Za-z0-9]))*)__?(?=[\s,.;:!?)]|$)   # vectorcall_: a link
""", re.X)
_INNER = re.compile(_MARKUP, re.X)   # within emphasis, where a reference is no markup (*mangle_from_*)
_TARGET = re.compile(r"(.*?)\s*<[^<>]*>", re.S)


def _shown_text(text: str) -> str:
    """What Sphinx shows for a role/link target: the title of `title <target>`, the last part of `~a.b`."""
    m = _TARGET.fullmatch(text)
    if m and m.group(1):
        return m.group(1)
    text = text.lstrip("!")
    return text[1:].rsplit(".", 1)[-1] if text.startswith("~") else text


def _rest_sub(m: "re.Match[str]") -> str:
    kind = m.lastgroup
    if kind == "rtext":
        text, role = _shown_text(m.group("rtext")), m.group("role")
        return {"pep:": "PEP ", "rfc:": "RFC "}.get(role.lower(), "") + text   # roles are case-insensitive
    if kind == "lit":
        return m.group("lit")
    if kind == "ltext":
        return _shown_text(m.group("ltext"))
    if kind in ("strong", "emph"):
        return strip_rest_markup(m.group(kind), _INNER)
    if kind in ("note", "subst", "ref"):
        return {"note": "", "subst": " "}.get(kind, m.group("ref"))
    if kind == "shown":   # (not within a word: "(blue|white|red)" is a regular expression's alternatives)
        return SUBSTITUTIONS.get(m.group("shown"), "")
    return "" if m.group("esc") == " " else m.group("esc")


def strip_rest_markup(text: str, markup: "re.Pattern[str]" = _REST) -> str:
    """Text as a reader of the rendered reST sees it: `:func:`x`` -> x, ``code`` -> code, `t <url>`_ -> t."""
    text = markup.sub(_rest_sub, text)
    # "Example::" renders as "Example:" and a lone " ::" vanishes (both introduce a literal block).
    if text.endswith("::"):
        text = text[:-3] if text.endswith(" ::") else text[:-1]
    return text.strip()


_NATURAL_WORD = re.compile(r"(?<![\w.])[A-Za-z][a-z]+(?![\w(])")


def clean_rest_docs(pairs: Pairs) -> Tuple[Pairs, Dict[str, int]]:
    """Documentation pairs (ko -> en) with reST markup removed; pairs without language content dropped.

    Dropped: Korean side without Hangul ("no_hangul"), identical sides ("identical": code, names),
    English side without a single ordinary word ("code_only"). Markup such as :func:`x`, ``code`` or |version|
    becomes its plain text on both sides (`SUBSTITUTIONS`).
    """
    counts: Counter = Counter()
    ko_out: List[str] = []
    en_out: List[str] = []
    for ko, en in zip(pairs.src, pairs.tgt):
        ko, en = " ".join(strip_rest_markup(ko).split()), " ".join(strip_rest_markup(en).split())
        if ko == en:
            counts["identical"] += 1
        elif not has_hangul(ko):
            counts["no_hangul"] += 1
        elif not _NATURAL_WORD.search(en):
            counts["code_only"] += 1
        else:
            ko_out.append(ko)
            en_out.append(en)
    dropped = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
    logging.getLogger("nmt.recipes").info("%s: %d of %d pairs have language content after markup removal (dropped "
                                          "%s)", pairs.name, len(ko_out), len(pairs), dropped)
    return Pairs(ko_out, en_out, pairs.name, dict(pairs.dropped)), dict(counts)
