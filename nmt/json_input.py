"""nmt-translate's `--json-input` lines: one JSON object each, `{"text": ..., "target_prefix": ...}`, checked
(`parse_json_line`), a line of a file or one typed at the prompt."""
from __future__ import annotations

import json
import unicodedata
from typing import Optional, Tuple

from nmt import jsonio
from nmt.corpus import CorpusError
from nmt.text import INVISIBLE, JOINERS, control_characters, count_lines, lone_surrogate

JSON_FIELDS = ("text", "target_prefix")
JSON_EXAMPLE = '{"text": "안녕하세요.", "target_prefix": "Hello"}'


def _padding(c: str) -> bool:
    """Whether character `c` is what a plain line's text may have around it and loses (`text.normalize`):
    whitespace (NBSP, U+3000 ...), an invisible character (a byte-order mark, a zero-width space ...) or a joiner
    with nothing to join there (ZWJ, ZWNJ, a variation selector); JSON's own whitespace is space, tab, CR and LF."""
    return c.isspace() or bool(INVISIBLE.fullmatch(c) or JOINERS.fullmatch(c))


def _padding_as_spaces(line: str) -> str:
    """`line` with what a plain line would lose before and after its text (`_padding`; not a control character,
    which plain lines lose with a warning) as spaces: around the JSON, where it is read as nothing, as a plain
    line's (an error's character position stays that of the line as given). One pass from each end: a regex
    anchored at the line's end was tried again at each character of every run of spaces within it (40,000 spaces
    in a string value: 40 s)."""
    start, end = 0, len(line)
    while start < end and _padding(line[start]):
        start += 1
    while end > start and _padding(line[end - 1]):
        end -= 1

    def spaced(part: str) -> str:
        return "".join(c if control_characters(c) else " " for c in part)
    return spaced(line[:start]) + line[start:end] + spaced(line[end:])


def _json_error(e: json.JSONDecodeError, line: str) -> str:
    """json's message for `line`, with the character it stopped at counted from 1 ("Unterminated string starting
    at" said "at at character 10"), and named when it shows as nothing or as a space: a control character (a tab in
    a string, which JSON takes only escaped, as \\t), an invisible one or a joiner, or a space other than ASCII's."""
    msg = e.msg.removesuffix(" at")
    c = line[e.pos:e.pos + 1]
    if not c or c.isprintable() and not JOINERS.fullmatch(c):
        return f"{msg} at character {e.pos + 1}"
    kind = ("a control character" if unicodedata.category(c) == "Cc" else "a space" if c.isspace() else
            "an invisible character")
    return f"{msg} at character {e.pos + 1}, U+{ord(c):04X}, {kind}"


def parse_json_line(line: str, line_no: int, name: str) -> Tuple[str, Optional[str]]:
    """(text, target prefix or None) of one --json-input line (a blank line: an empty sentence); a CorpusError
    naming the line and the field for anything else."""
    line = line.lstrip("\ufeff")   # an editor's byte-order mark: a file's, or each file's of `cat a.jsonl b.jsonl`
    line = _padding_as_spaces(line)   # (" \ufeff": a space, then a mark, as a plain line reads them: as nothing)
    if not line.strip():   # (as a plain line's, anywhere: `text.INVISIBLE`)
        return "", None
    where = f"{name}:{line_no}"
    try:
        obj = jsonio.loads(line)
    except jsonio.RepeatedKey as e:
        raise CorpusError(f"{where}: field {e.args[0]!r} is given twice; give each field once") from None
    except json.JSONDecodeError as e:
        raise CorpusError(f"{where}: not JSON ({_json_error(e, line)}); with --json-input each line is a JSON object "
                          f"such as {JSON_EXAMPLE}") from None
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: a JSON {jsonio.json_type(obj)}, not an object; with --json-input each line is a "
                          f"JSON object such as {JSON_EXAMPLE}")
    unknown = [k for k in obj if k not in JSON_FIELDS]
    if unknown:
        raise CorpusError(f"{where}: unknown field {unknown[0]!r}; the fields are {', '.join(JSON_FIELDS)}")
    if not isinstance(obj.get("text"), str):
        got = "missing" if "text" not in obj else f"a JSON {jsonio.json_type(obj['text'])}"
        raise CorpusError(f"{where}: field 'text' (the sentence to translate, a string) is {got}: e.g. {JSON_EXAMPLE}")
    prefix = obj.get("target_prefix")
    if prefix is not None and not isinstance(prefix, str):
        raise CorpusError(f"{where}: field 'target_prefix' (text the translation starts with) is a JSON "
                          f"{jsonio.json_type(prefix)}, not a string")
    for field in JSON_FIELDS:
        if count_lines(obj.get(field) or "") > 1:
            raise CorpusError(f"{where}: field {field!r} has text on {count_lines(obj[field])} lines; give one "
                              "sentence per JSON line")
        surrogate = lone_surrogate(obj.get(field) or "")
        if surrogate:
            raise CorpusError(f"{where}: field {field!r} has a lone surrogate {surrogate} (a \\uD800-\\uDFFF escape "
                              "without its pair): it is not a character; give valid Unicode")
    return obj["text"], prefix
