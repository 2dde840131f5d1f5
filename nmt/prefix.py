"""Target prefixes from text, as the search takes them (`nmt.search_blocks.TargetPrefix`).

A prefix that ends inside a word (no space after it, as when a translator is typing) leaves its last word to be
completed: its whole words are forced as tokens, and the word's characters may then be written by any tokens that
spell them and go on (typed "I wa", the translation may go on with "▁was", or "▁w" "a" "ter", ...), as the model
prefers. SentencePiece cuts a word alone differently from the same word within a longer one ("▁w" "a" for "wa", but
"▁wa" "ter" or "▁water" for "water"), so forcing the pieces of "wa" would leave the model only continuations of
"▁w" "a". A prefix ending in a space is taken as whole words: after its pieces the next one begins a word (or the
translation ends), where forced pieces alone would let the model add letters to the last word.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from nmt.text import normalize
from nmt.tokenizer import EOS_ID

WORD_START = "\u2581"   # SentencePiece's mark of a space before a piece
# The longest last word completed (characters); a longer one (a URL, a hostile request) is forced as its pieces. Its
# table takes a row of V booleans per character, and each character may cost a step that waits for the device.
MAX_OPEN_WORD = 48


def split_last_word(text: str) -> Tuple[str, str]:
    """(the text before the last word, the last word) of a normalized text (single spaces, stripped); (text, "")
    when the last word is over MAX_OPEN_WORD characters: it is then taken as a whole word."""
    head, _, word = text.rpartition(" ")
    return (head, word) if len(word) <= MAX_OPEN_WORD else (text, "")


def ends_in_word(prefix: str) -> bool:
    """Whether a target prefix ends inside a word as the model reads it (`normalize`): no space after its last
    word, characters the model does not read (a zero-width space, a Hangul filler, ESC[0m) not counted ("We \u200b"
    left "We" open, as if typed without the space). (A syllable appended, which normalize keeps whole, shows it.)"""
    return not normalize(prefix + "\uac00").endswith(" \uac00")


def word_table(surfaces: Sequence[Optional[str]], word: str, may_end: bool = False
               ) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """How tokens may spell `word` (its SentencePiece form, e.g. "▁was"): `allowed` (len(word), V) bool, whether a
    token may follow the word's first o characters (its text is the next part of the word, or the rest of the word
    and more), only where the word can still be finished; and `sizes` (V,), the characters each token writes.
    `surfaces`: each token's text (None: a special or byte piece, which spells nothing). None when no tokens can
    spell the word (a character only byte pieces write). `may_end`: the translation may also end (EOS) instead
    (the word "▁" of a prefix that ends with a space: the next token begins a word, or there is none)."""
    sizes = np.array([len(s) if s else 0 for s in surfaces], dtype=np.int64)
    by_first: Dict[str, List[int]] = {}
    for v, s in enumerate(surfaces):
        if s:
            by_first.setdefault(s[0], []).append(v)
    length = len(word)
    allowed = np.zeros((length, len(surfaces)), dtype=bool)
    for o in range(length - 1, -1, -1):   # from the end: a part of the word is allowed only if the rest can follow
        rest = word[o:]
        for v in by_first.get(rest[0], ()):
            s = surfaces[v]
            if s.startswith(rest) or (rest.startswith(s) and allowed[o + len(s)].any()):
                allowed[o, v] = True
    if may_end and length:
        allowed[0, EOS_ID], sizes[EOS_ID] = True, length
    return (allowed, sizes) if length and allowed[0].any() else None


def one_prefix(prefix) -> Optional[List[str]]:
    """The prefixes argument of a single sentence (`Translator.translate("...", prefixes=...)`) as the list the
    calls for several take: None, or [prefix] for a str; a TypeError naming it otherwise."""
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError(f"prefixes must be a str for one sentence, got {type(prefix).__name__}")
    return None if prefix is None else [prefix]
