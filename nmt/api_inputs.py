"""The checks of what a `Translator` (`nmt.translate`) is given through the Python API: its decode settings, and
the lines and target prefixes to translate (lists of single-line strings), each refused with a TypeError or
ValueError that names the argument and says what to give."""
from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import List

from nmt.config import DecodeConfig
from nmt.text import count_lines, lone_surrogate

BYTES_LIKE = (bytes, bytearray, memoryview)   # read item by item, a bytes-like object gives ints


def listed(value) -> bool:
    """Whether `value` is read as a list of items: an iterable, but not a str or a bytes-like object (one item per
    character or byte) nor a Mapping (its keys), which `check_lines` refuses, nor a 0-d array (numpy's of one value,
    which cannot be iterated)."""
    return isinstance(value, Iterable) and not isinstance(value, (str, *BYTES_LIKE, Mapping)) and not _zero_d(value)


def _zero_d(value) -> bool:
    """Whether `value` is an array of no dimensions (numpy's `np.array("text")`: one value, iterable in type only)."""
    return getattr(value, "ndim", None) == 0


def checked_decode(decode) -> DecodeConfig:
    """`decode` with its checks run again (`DecodeConfig.check`): one changed by hand fails with the config's own
    message before it is used, not as empty translations or deep inside a search."""
    if not isinstance(decode, DecodeConfig):
        raise TypeError(f"decode must be a DecodeConfig, got {type(decode).__name__}")
    decode.check()
    return decode


def check_lines(lines, arg: str, first_line) -> None:
    """TypeError unless `lines` (the argument `arg`) is an iterable of sentences, not one string or bytes-like
    object (read as one sentence per character or byte) nor a Mapping (its keys translated, its values left out,
    surely not what was meant), and `first_line` an int."""
    if isinstance(lines, str):   # would be read as one sentence per character (or byte)
        raise TypeError(f"{arg} must be a list of sentences, not one string ({lines[:40]!r}): give [sentence]")
    if isinstance(lines, BYTES_LIKE):
        raise TypeError(f"{arg} must be a list of sentences, not one " + (
            f"bytes object ({lines[:40]!r}): give [text.decode('utf-8')]" if isinstance(lines, bytes) else
            f"bytes-like object ({type(lines).__name__}({bytes(lines)[:40]!r})): give [bytes(text).decode('utf-8')]"))
    if isinstance(lines, Mapping):
        raise TypeError(f"{arg} must be a list of sentences, not a {type(lines).__name__}, whose keys would be read "
                        "and its values left out: give list(d.values()) for its values (or list(d) for its keys)")
    if _zero_d(lines):   # (numpy's "iteration over a 0-d array" named no argument)
        raise TypeError(f"{arg} must be a list of sentences, not a 0-d {type(lines).__name__} (one value, "
                        f"{str(lines)[:40]!r}): give [a.item()]")
    if not isinstance(lines, Iterable):
        raise TypeError(f"{arg} must be a list of sentences, got {type(lines).__name__}")
    if isinstance(first_line, bool) or not isinstance(first_line, numbers.Integral):   # (numpy's too)
        raise TypeError(f"first_line must be an int (the first line's number), got {type(first_line).__name__}")


def check_line(x, arg: str, i: int) -> None:
    """TypeError unless `x`, item `i` of `arg`, is a str; ValueError for one with text on several lines or a lone
    surrogate."""
    if not isinstance(x, str):
        raise TypeError(f"{arg}[{i}] is {type(x).__name__}, not str: give a list of sentences (str)")
    if count_lines(x) > 1:
        raise ValueError(f"{arg}[{i}] has text on {count_lines(x)} lines: give each line as its own item (read "
                         "as one sentence, all but the first would usually be left out of its translation)")
    surrogate = lone_surrogate(x)
    if surrogate:   # SentencePiece would fail on it with a TypeError
        raise ValueError(f"{arg}[{i}] has a lone surrogate {surrogate}: it is not a character; give valid Unicode")


def checked_translation_ids(translations, vocab_size: int) -> List[List[int]]:
    """`translations`, one line's translations as target id lists (`Translator.bytes_left_out`'s argument), as
    lists; a TypeError naming what is wrong for anything but a list of lists of ints: one list of ids, or
    `translate_ids`' (ids, score) pairs; a ValueError for an id outside the target vocabulary of `vocab_size`
    pieces, which Tokenizer.decode refuses too (the source side's ids, or another model's)."""
    said = "bytes_left_out: translations must be one line's translations, a list of target id lists"
    if not listed(translations):
        raise TypeError(f"{said}, got {type(translations).__name__}")
    out = []
    for i, ids in enumerate(translations):
        if isinstance(ids, numbers.Integral):
            raise TypeError(f"{said}, not one list of ids (translations[{i}] is {type(ids).__name__}): give [ids]")
        if isinstance(ids, tuple) and len(ids) == 2 and listed(ids[0]) and isinstance(ids[1], numbers.Real):
            raise TypeError(f"{said}; translations[{i}] is an (ids, score) pair, as translate_ids gives them: give "
                            "[ids for ids, _ in hyps]")
        if not listed(ids):
            raise TypeError(f"{said}; translations[{i}] is {type(ids).__name__}, not a list of ids")
        ids = list(ids)
        bad = next((x for x in ids if isinstance(x, bool) or not isinstance(x, numbers.Integral)), ids)
        if bad is not ids:
            raise TypeError(f"{said}; translations[{i}] holds a {type(bad).__name__}, not an id (int)")
        outside = next((int(x) for x in ids if not 0 <= x < vocab_size), None)
        if outside is not None:
            raise ValueError(f"{said}; translations[{i}] holds id {outside}, outside the target vocabulary (size "
                             f"{vocab_size}): the source side's ids, or another model's?")
        out.append(ids)
    return out
