"""Byte-fallback pieces in a translation: which of them write a character and which are left out of its text.

SentencePiece writes a character outside the vocabulary as the byte pieces of its UTF-8 encoding (<0xED> <0x99>
<0x80>). A search or a sample may write bytes that form no character (a lead byte, then a syllable), which
SentencePiece would write as U+FFFD each, or those of a control character (ESC, U+0006, a line end: also U+2028 and
U+2029, which `str.splitlines` and `Translator.translate` take for one), which no training text holds and a terminal
would act on: `Tokenizer.whole_characters` leaves both out.
"""
from __future__ import annotations

import unicodedata
from typing import Dict, List, Optional, Sequence


def utf8_length(lead: int) -> int:
    """The bytes of the UTF-8 character a byte starts (0: it starts none)."""
    return 1 if lead < 0x80 else 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else \
        4 if 0xF0 <= lead <= 0xF4 else 0


def one_character(data: bytes) -> Optional[str]:
    """The one UTF-8 character `data` is (strictly: no overlong form, no surrogate), else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if len(text) == 1 else None


def written(ids: Sequence[int], byte: Dict[int, int]) -> List[int]:
    """The indices of `ids` to write, `byte` the byte pieces' values by id: every piece but byte pieces that form
    no whole UTF-8 character or form a control character (Unicode category Cc: C0, DEL and C1) or a line or paragraph
    separator (Zl, Zp: U+2028, U+2029)."""
    kept, i = [], 0
    while i < len(ids):
        if ids[i] not in byte:
            kept.append(i)
            i += 1
            continue
        n = utf8_length(byte[ids[i]])
        run = [byte.get(t) for t in ids[i:i + n]]
        char = one_character(bytes(run)) if n and len(run) == n and None not in run else None
        if char is None:   # (its next byte may start a character)
            i += 1
            continue
        if unicodedata.category(char) not in ("Cc", "Zl", "Zp"):
            kept += range(i, i + n)
        i += n
    return kept
