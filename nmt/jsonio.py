"""JSON that users write (config files, --json-input lines, service requests): a key given twice in one object is
refused, as `json.loads` would keep its last value without a word, and types are named as JSON names them. And JSON
the project writes with file names in it (`dumps`)."""
from __future__ import annotations

import dataclasses
import json
import numbers
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple


class RepeatedKey(ValueError):
    """A key given twice in one JSON object; args[0] is the key."""


def _unique_keys(pairs: List[Tuple[str, Any]]) -> dict:
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise RepeatedKey(key)
        seen.add(key)
    return dict(pairs)


class TooDeep(json.JSONDecodeError):
    """JSON nested deeper than Python's recursion limit lets the parser go (RecursionError, not a parse error)."""


def loads(text: str, hook: Callable[[List[Tuple[str, Any]]], Any] = None) -> Any:
    """`json.loads`, but RepeatedKey for a key given twice in an object (or each object as `hook` makes it of its
    pairs), and a json.JSONDecodeError for JSON nested past the parser's recursion limit (TooDeep) or a number longer
    than Python reads (over 4,300 digits)."""
    def number(digits: str) -> int:
        try:
            return int(digits)
        except ValueError:
            raise json.JSONDecodeError(f"a number of {len(digits)} digits (at most {sys.get_int_max_str_digits()})",
                                       text, text.find(digits)) from None
    try:
        return json.loads(text, object_pairs_hook=hook or _unique_keys, parse_int=number)
    except RecursionError:
        raise TooDeep("arrays and objects nested too deeply", text, 0) from None


def json_type(value: Any) -> str:
    """What JSON calls the type of a parsed value: object, array, string, number, true/false, null."""
    kinds = ((bool, "true/false"), (dict, "object"), (list, "array"), (str, "string"), ((int, float), "number"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")


def read_object(path, error: Callable[[str], Exception]) -> Dict[str, Any]:
    """The JSON object in the file at `path` (a config file); `error(message naming the file)` if it is not one."""
    path, data = Path(path), b""
    try:
        data = path.read_bytes()
        d = loads(data.decode("utf-8-sig"))   # (a byte-order mark, as Windows editors write: no part of it)
    except OSError as e:   # no permission, a directory, ...
        raise error(f"{path}: cannot be read ({e.strerror or e})") from None
    except RepeatedKey as e:
        raise error(f"{path}: key {e.args[0]!r} is given twice in one object; give each key once") from None
    except ValueError as e:   # json.JSONDecodeError, or UnicodeDecodeError: JSON is UTF-8 text
        raise error(f"{path}: not valid JSON ({e})" + _encoding_said(path, data, e)) from None
    if not isinstance(d, dict):
        raise error(f"{path}: a JSON {json_type(d)}, where a JSON object of sections (data, model, ...) belongs")
    return d


def _encoding_said(path: Path, data: bytes, e: ValueError) -> str:
    """What a config file of `data` that is not UTF-8 JSON (`e`) is, as the corpus readers say it: UTF-16 (Notepad's
    "Unicode"; without its byte-order mark, an ASCII config's NULs pass as UTF-8 and fail as JSON) or legacy text
    (CP949), with the command converting it; "" for bytes of no text, or bad JSON in UTF-8."""
    from nmt.textfile import iconv_command, not_text, to_utf8_hint, wide_encoding
    wide, _ = wide_encoding(data)
    if wide:
        return f"; it is {wide}: convert it, `{iconv_command(path, wide, None, into=True)}`"
    if not isinstance(e, UnicodeDecodeError):
        return ""
    line = e.object[e.object.rfind(b"\n", 0, e.start) + 1:].split(b"\n", 1)[0]
    return "" if not_text(line) else f"; {to_utf8_hint(line, path, None, into=True)}"


# What a JSON value of a dataclass field may be, by the field's annotation (`int` excludes JSON's true/false).
_JSON_KINDS = {"int": ((int,), "an integer"), "float": ((int, float), "a number"), "str": ((str,), "a string"),
               "bool": ((bool,), "true or false")}


def check_field_types(klass, section: str, values: Dict[str, Any], source: str,
                      error: Callable[[str], Exception]) -> None:
    """`error` naming `source` and `section.key` for the first of `values` (a config file's section) whose JSON type
    does not fit its field of the dataclass `klass`."""
    for f in dataclasses.fields(klass):
        if f.name not in values:
            continue
        optional = str(f.type).startswith("Optional[")
        kinds, says = _JSON_KINDS[str(f.type)[9:-1] if optional else str(f.type)]
        value = values[f.name]
        if value is None and optional:
            continue
        number = not isinstance(value, bool) and isinstance(value, numbers.Real if float in kinds else numbers.Integral)
        if (not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds) and not (
                number and int in kinds):   # numpy's numbers are taken (config's `_typed`)
            raise error(f"{source}: {section}.{f.name} must be {says}{' or null' if optional else ''}, "
                        f"got {json.dumps(value, default=repr)}")


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(obj: Any, **kwargs) -> str:
    """`json.dumps(obj, ensure_ascii=False, **kwargs)` with lone surrogates escaped (\\udcXX): a file name's bytes
    that are not UTF-8 (or not of the locale), as Python names them; the text is then UTF-8, and reads back as the
    same name."""
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(obj, ensure_ascii=False, **kwargs))


def shown(obj: Any) -> Any:
    """`obj` (dicts, lists, strings) with each lone surrogate of a file name shown as the byte it stands for, \\xNN:
    for JSON that a library writes as UTF-8 (a service's answers), where it would fail."""
    if isinstance(obj, str):
        return os.fsencode(obj).decode("utf-8", "backslashreplace") if _LONE_SURROGATE.search(obj) else obj
    if isinstance(obj, dict):
        return {shown(k): shown(v) for k, v in obj.items()}
    return [shown(v) for v in obj] if isinstance(obj, (list, tuple)) else obj
