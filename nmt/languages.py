"""Which language a text is in, as far as a Korean <-> English system needs to know: a line meant to be Korean is
when it has Hangul (technical Korean is full of English words), a line meant to be English is not when Hangul is at
most half of its letters (English names Korean things: "kimchi (김치)"). Used to catch swapped or one-language
parallel files, and an input given to the model of the other direction."""
from __future__ import annotations

import os
import re
from typing import Sequence, Tuple

from nmt.corpus import CorpusError
from nmt.text import normalize
from nmt.textfile import undo_latin1_command, undo_latin1_loses

_HANGUL = re.compile("[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")
_LATIN = re.compile("[A-Za-z\u00c0-\u024f]")
_AS_READ = re.compile("[ -~\uac00-\ud7a3]*")   # printable ASCII and syllables: `normalize` changes no count of them
_JSON_REQUEST = re.compile(r'\ufeff?\s*\{.*"text"\s*:.*\}\s*')   # (a first line's byte-order mark too)


def has_hangul(text: str) -> bool:
    return _HANGUL.search(text) is not None


def korean(text: str, lang: str) -> bool:
    """Whether a line of text meant to be in `lang` reads as Korean, as the model reads it (`normalize`): any Hangul
    in a Korean one, Hangul outnumbering Latin letters in an English one, counted in syllables (NFC: macOS's
    decomposed "서울", NFD, is five jamo, which outnumbered the letters of "I live in 서울특별시."). Hangul fillers
    (chat's "blank" lines), which the model does not read, are none; full-width letters ("ＴＶ") are letters."""
    return _read_as_korean(text if _AS_READ.fullmatch(text) else normalize(text), lang)


def _read_as_korean(read: str, lang: str) -> bool:
    """`korean` of a line as `normalize` read it."""
    if lang == "ko":
        return has_hangul(read)
    hangul = len(_HANGUL.findall(read))
    return hangul > 0 and hangul > len(_LATIN.findall(read))


def check_languages(src: Sequence[str], tgt: Sequence[str], src_lang: str, names: Tuple[str, str],
                    direction: str) -> None:
    """CorpusError if the Korean side of parallel text (by `src_lang`) has Hangul on no more of its lines than the
    English side: the files are swapped, or both are in one language (a Korean side of blank lines alone only if the
    English side is mostly Hangul). `names`: how the error names the source and the target side (e.g. "--train-src
    a.ko"); `direction`: where their languages come from (e.g. "--src ko --tgt en")."""
    ko, en = (0, 1) if src_lang == "ko" else (1, 0)
    shares = (hangul_share(src, "ko" if ko == 0 else "en"), hangul_share(tgt, "ko" if ko == 1 else "en"))
    if shares[ko] > shares[en] or shares[en] < 0.5 and not any(x.strip() for x in (src, tgt)[ko]):
        return   # (a Korean side of blank lines alone tells no language: nmt-score's empty sources or translations)
    paths = [os.path.realpath(name.split(" ", 1)[-1]) for name in names]   # ("--flag path")
    same = "the same file is given for both sides" if paths[0] == paths[1] else ""
    if min(shares) >= 0.5:   # both Korean: the English side is the one at fault
        raise CorpusError(f"{names[en]} should be the English side ({direction}) but is mostly Hangul on "
                          f"{shares[en]:.0%} of its lines, as {names[ko]} has Hangul on {shares[ko]:.0%}: "
                          + (same or "is it the Korean file again?"))
    raise CorpusError(f"{names[ko]} should be the Korean side ({direction}) but has Hangul on {shares[ko]:.0%} of its "
                      f"lines, against {shares[en]:.0%} in {names[en]}: " +
                      (same or _encoded_twice((src, tgt)[ko], names[ko].split(" ", 1)[-1]) or
                       ("are both files English?" if max(shares) < 0.5 else "are the files swapped?")))


# The first byte of a Hangul syllable's UTF-8 (0xEA-0xED) read as Latin-1 or Windows-1252: "고마워요" -> "ê³ ë§ˆì›Œìš”";
# and a jamo's of decomposed Hangul (NFD, macOS's: 0xE1 0x84-0x87 ...; a compatibility jamo's 0xE3 0x84-0x86): "á„‹",
# or "á" and the third byte where Latin-1's C1 control went (`normalize`), but never "á" or "ã" before a letter
_HANGUL_LEAD_AS_LATIN = re.compile("[\u00ea-\u00ed]|[\u00e1\u00e3][\u201e\u2026\u2020\u2021\u00a1-\u00bf]")


def _encoded_twice(lines: Sequence[str], path: str) -> str:
    """The likely cause when most of `lines` (no Hangul) read as Korean UTF-8 decoded as Latin-1 or Windows-1252 and
    encoded to UTF-8 again (an editor or a spreadsheet export that took the file for Latin-1); else ""."""
    picked = [x for x in lines[::max(1, len(lines) // 10_000)] if x.strip()]
    if not picked or sum(len(_HANGUL_LEAD_AS_LATIN.findall(x)) >= 2 for x in picked) < len(picked) / 2:
        return ""
    undo = "" if any("\ufffd" in x for x in picked) else undo_latin1_command(path)   # (bytes lost: U+FFFD)
    lost = undo_latin1_loses(path) if undo else 0   # (bytes lost without a trace: 'ignore')
    return ("its lines read like Korean UTF-8 that was taken for Latin-1 or Windows-1252 and saved as UTF-8 again "
            "(\"고마워요\" as \"ê³ ë§ˆì›Œìš”\"): " + (f"undo it, `{undo}`" if undo and not lost else "write it again "
                                                 "from its source as UTF-8") +
            (f" (bytes were lost on the way: its line {lost} cannot be written back as UTF-8)" if lost else ""))


def hangul_counts(lines: Sequence[str], lang: str) -> Tuple[int, int]:
    """(lines with something left after `normalize`, lines that read as Korean, `korean`) of `lines` meant to be in
    `lang`: what `other_language_warning` reads."""
    read = [normalize(x) for x in lines]
    return sum(1 for x in read if x), sum(_read_as_korean(x, lang) for x in read)


def json_requests(lines: Sequence[str]) -> int:
    """Lines that are JSON objects with a "text" field: nmt-translate's --json-input requests, given without it?"""
    return sum(1 for x in lines if _JSON_REQUEST.fullmatch(x))


# nmt-translate's output lines beyond a translation: --nbest's rows, --alignment's "translation ||| links"
_NBEST_ROW = re.compile(r'\s*\{\s*"translations"\s*:\s*\[.*\}\s*')
_ALIGNED_ROW = re.compile(r".* \|\|\| (?:\d+-\d+(?: \d+-\d+)*)?\s*")


def output_rows(lines: Sequence[str]) -> Tuple[int, int]:
    """(n-best rows, aligned rows) of `lines` ({"translations": [...], ...}; "text ||| 0-0 1-1"): given as
    translations or references?"""
    return sum(1 for x in lines if _NBEST_ROW.fullmatch(x)), sum(1 for x in lines if _ALIGNED_ROW.fullmatch(x))


def other_language_warning(lines: int, hangul: int, src_lang: str, tgt_lang: str) -> str:
    """What to warn of when most of the `lines` non-empty lines of an input to translate (`hangul` of them with
    Hangul) look like the target language, e.g. English given to a ko -> en model (a back-translation run with the
    model of the wrong direction): their translations are of no use. "" when they do not."""
    if lines and (hangul < lines / 2 if src_lang == "ko" else hangul > lines / 2):
        return (f"{hangul} of {lines} non-empty lines {'have' if src_lang == 'ko' else 'are mostly'} Hangul, but the "
                f"model translates {src_lang} -> {tgt_lang}: is the input in the model's source language (or is this "
                "the model of the other direction)?")
    return ""


def hangul_share(lines: Sequence[str], lang: str = "ko", sample: int = 10_000) -> float:
    """The fraction of `lines` (meant to be in `lang`) that read as Korean (`korean`), from at most `sample` lines
    spread over the whole list."""
    if not len(lines):
        return 0.0
    picked = lines[::max(1, len(lines) // sample)]
    return sum(korean(x, lang) for x in picked) / len(picked)
