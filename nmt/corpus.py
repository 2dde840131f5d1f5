"""Reading, validating, filtering and deduplicating parallel text (each line read as `nmt.text.normalize` reads it).

Every reader returns NFC-normalized, whitespace-cleaned `Pairs`. Bad input stops with a `CorpusError`
that names the file, the line, the problem and the remedy; anything dropped on purpose (empty lines,
undecodable lines when asked to skip them, filtered training pairs) is counted and logged.
"""
from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from nmt.commands import shell_word
from nmt.log import counted
from nmt.config import CHARS_PER_TOKEN
from nmt.text import ESCAPE_SEQUENCE, SPACED, control_characters, cut_line, input_guard, normalize
from nmt.textfile import (CorpusError, PathLike, encoding_of, iconv_command, line_ends_command, not_text,
                          read_text_bytes, refuse_another_encoding, to_utf8_hint)

logger = logging.getLogger("nmt.corpus")

# A "line" this long is not one sentence: usually a file whose line ends were not recognised
# (old Mac CR-only files, a binary file, one paragraph per file). Longest real line in shared/data: 2714.
MAX_LINE_CHARS = 20_000

@dataclass
class Pairs:
    """Aligned sentence pairs: `src[i]` translates to `tgt[i]`."""
    src: List[str]
    tgt: List[str]
    name: str
    dropped: Dict[str, int] = field(default_factory=dict)   # reason -> pairs dropped while reading
    lines: Optional[List[int]] = None   # each pair's line in its files, where some were dropped (None: i + 1)

    def __post_init__(self) -> None:
        if len(self.src) != len(self.tgt):
            raise CorpusError(f"{self.name}: {len(self.src)} source but {len(self.tgt)} target sentences")

    def __len__(self) -> int:
        return len(self.src)

    def swapped(self) -> "Pairs":
        """The same pairs in the other translation direction."""
        return Pairs(list(self.tgt), list(self.src), self.name, dict(self.dropped), self.lines)

    def select(self, indices: Sequence[int], name: Optional[str] = None) -> "Pairs":
        return Pairs([self.src[i] for i in indices], [self.tgt[i] for i in indices], name or self.name)


def line_list(numbers: List[int], limit: int = 5) -> str:
    """Line numbers for a message: the first `limit`, and how many more."""
    shown = ", ".join(str(n) for n in numbers[:limit])
    return shown + (f" (and {len(numbers) - limit} more)" if len(numbers) > limit else "")


def read_lines(path: PathLike, *, skip_invalid_utf8: bool = False, max_line_chars: Optional[int] = MAX_LINE_CHARS,
               keep_blank_end: bool = False, skippable: Union[bool, str] = False,
               blank_ok: bool = False, max_input_tokens: Optional[int] = None,
               training: bool = False) -> List[Optional[str]]:
    """Lines of a UTF-8 text file, normalized; None for an undecodable line skipped on request. Blank lines at
    the end are dropped (warned) unless `keep_blank_end` (a file whose every line is data, e.g. translations).
    `blank_ok`: a file of blank lines alone is such data too (translations that are all empty), not an error.
    `skippable`: the error for invalid UTF-8 offers --skip-invalid-utf8 (training data; not a test set), or (a
    string) says why that flag, given, skips nothing here. `max_input_tokens`: sources, which a Translator of that
    setting cuts: no `max_line_chars`, but a line longer than its input guard (`nmt.text.input_guard`) is cut there
    before it is decoded and normalized, as nmt-translate reads it (`nmt.text.cut_line`; a warning names it).
    `training`: training or dev data, whose error for a line over `max_line_chars` says that nmt-train's --max-chars
    does not raise that limit (other commands have no such flag). "~" is the home directory, as in every command's
    file flags."""
    path = "/dev/stdin" if path == "-" else os.path.expanduser(path)   # ("-": standard input, as for every flag)
    cut_bytes = None if max_input_tokens is None else input_guard(max_input_tokens)
    lines = _decode_lines(path, skip_invalid_utf8, None if cut_bytes else max_line_chars, keep_blank_end, skippable,
                          blank_ok, cut_bytes, training)
    _warn_of_changes(path, list(enumerate(lines, 1)))
    text = [t for t in lines if t and t.strip()]
    if len(text) > 1 and all("\t" in t for t in text):
        logger.warning("%s: every line holds a tab, read as a space: the columns of a TSV file? give one file per "
                       "side (e.g. `cut -f1 %s`)", path, shell_word(path))
    return [None if t is None else normalize(t) for t in counted(lines, logger, str(path), "lines read")]


def _warn_of_changes(path: PathLike, texts: Sequence[Tuple[int, Optional[str]]]) -> None:
    """Warn, naming the lines, of what `normalize` changes in them without a word otherwise: control characters and
    terminal escape sequences (colours: ESC[31m) removed, line breaks other than LF (U+2028, form feed, ...) read as
    spaces. `texts`: (line number, text read from it) items, a TSV file's two columns two items of one line; None
    for a line skipped."""
    text = [(i, t) for i, t in texts if t and t.strip()]
    for what, found in (("control character(s), removed", [i for i, t in text if control_characters(t)]),
                        ("terminal escape sequence(s) (colours, cursor keys: ESC[31m ...), removed whole",
                         [i for i, t in text if ESCAPE_SEQUENCE.search(t)]),
                        ("a line break or separator other than LF (U+2028, form feed, U+001F, ...), read as a space",
                         [i for i, t in text if SPACED.search(t)])):
        found = sorted(set(found))
        if found:
            logger.warning("%s: %d line(s) with %s: line %s", path, len(found), what, line_list(found))


def _split_lines(data: bytes, path: Path, keep_blank_end: bool = False) -> List[bytes]:
    """The lines of `data`; blank lines at the very end are dropped (warned) unless `keep_blank_end`."""
    raw = data.split(b"\n")
    if raw[-1] == b"":
        raw.pop()   # the newline that ends the last line does not start another one
    trailing = 0
    while raw and not keep_blank_end and not raw[-1].strip():
        raw.pop()
        trailing += 1
    if trailing:
        logger.warning("%s: ignored %d blank line(s) at the end of the file", path, trailing)
    return raw


def _cut_long(raw: List[bytes], path: Path, cut_bytes: Optional[int]) -> List[bytes]:
    """`raw`, its lines longer than `cut_bytes` (None: none) cut there (`nmt.text.cut_line`), with a warning."""
    cut = [i for i, line in enumerate(raw) if cut_bytes is not None and len(line) > cut_bytes]
    for i in cut:
        raw[i] = cut_line(raw[i], cut_bytes)
    if cut:
        logger.warning("%s: %d line(s) longer than the input guard (%d bytes: --max-input-tokens x %d), cut there "
                       "while reading (any length said next is the cut line's): line %s", path, len(cut), cut_bytes,
                       CHARS_PER_TOKEN * 4, line_list([i + 1 for i in cut]))
    return raw


def _utf8_text(line: bytes) -> bool:
    """Whether `line` is UTF-8 text beyond ASCII."""
    try:
        return not line.decode("utf-8").isascii()
    except UnicodeDecodeError:
        return False


def _invalid_utf8(path: Path, i: int, line: bytes, at: int, kind: Optional[str], utf8: int,
                  skippable: Union[bool, str]) -> CorpusError:
    """The error for line `i` of `path`, invalid UTF-8 from byte `at`; `utf8`: another line of UTF-8 text beyond
    ASCII (0: none), which makes the line most likely a stray one, to correct rather than convert."""
    said, enc = f"{path}:{i}: invalid UTF-8 (byte 0x{line[at]:02x} at byte {at + 1} of the line)", encoding_of(line)
    what = not_text(line, bool(utf8))
    fix = (f"{said}: {what}; correct or delete the line" if what else
           f"{said}. Line {utf8} is UTF-8 text, so this line may be the only one in another encoding (it reads as "
           f"{enc}), which a conversion of the whole file would fail on or garble: correct or delete the line; if the "
           f"whole file is {enc}, convert it (`{iconv_command(path, enc, kind, into=True)}`)" if utf8 else
           f"{said}. Convert the file to UTF-8 ({to_utf8_hint(line, path, kind, into=True)})")
    return CorpusError(fix + (", or pass --skip-invalid-utf8 to drop such lines and their translations (counted)."
                              if skippable is True else f" ({skippable})." if skippable else "."))


def _decode_lines(path: PathLike, skip_invalid_utf8: bool, max_line_chars: Optional[int], keep_blank_end: bool = False,
                  skippable: Union[bool, str] = False, blank_ok: bool = False, cut_bytes: Optional[int] = None,
                  training: bool = False) -> List[Optional[str]]:
    """Decoded, not yet normalized lines of a UTF-8 text file; None for an undecodable line skipped on request.

    A UTF-8 byte-order mark is stripped and CRLF line ends are converted, each with a logged warning (and blank lines
    at the end dropped, see `read_lines`). Empty files, UTF-16, CR-only line ends, invalid UTF-8 and absurdly long
    lines raise `CorpusError` (for `training` data, the last says that --max-chars, nmt-train's, does not raise it)."""
    path = Path(path)
    data, kind = read_text_bytes(path, blank_ok)
    if data.endswith(b"\r") and data.count(b"\r") == 1 and b"\n" not in data:   # one line, ended by a CR
        data = data[:-1]
    if b"\r" in data:
        lf, bare_cr = data.count(b"\n"), data.count(b"\r") - data.count(b"\r\n")
        if lf < bare_cr:   # (an editor's one LF at the end of CR line ends too)
            counts = f": {bare_cr} CR, {lf} LF" if lf else ""
            raise CorpusError(f"{path}: line ends are CR only (old Mac format{counts}), so the file reads as "
                              f"{'one line' if lf < 2 else f'{lf} lines'}; convert them, e.g. "
                              f"`{line_ends_command(path, kind)}`")
        crlf = data.count(b"\r\n")
        if crlf:
            logger.warning("%s: converted %d CRLF (Windows) line ends to LF", path, crlf)
            data = data.replace(b"\r\n", b"\n")
    raw = _cut_long(_split_lines(data, path, keep_blank_end), path, cut_bytes)

    lines: List[Optional[str]] = []
    bad: List[int] = []
    utf8 = 0   # the first line of UTF-8 text beyond ASCII: the file is likely UTF-8, an undecodable line a stray one
    for i, b in enumerate(raw, 1):
        try:
            text = b.decode("utf-8")
        except UnicodeDecodeError as e:
            if not skip_invalid_utf8:   # (a UTF-8 line after it tells a stray line too, as one before it does)
                utf8 = utf8 or next((j for j, x in enumerate(raw[i:], i + 1) if _utf8_text(x)), 0)
                raise _invalid_utf8(path, i, b, e.start, kind, utf8, skippable) from None
            bad.append(i)
            lines.append(None)
            continue
        parts = sum(1 for part in text.split("\r") if part.strip())   # CRLF line ends were converted above
        if parts > 1:
            raise CorpusError(f"{path}:{i}: a carriage return (CR) splits the line into {parts} lines (lines end with "
                              "LF or CRLF); read as one line, its translation would usually leave all but the first "
                              f"out. Make it one line (`tr '\\r' ' '`), or split it in both files of a pair")
        if max_line_chars is not None and len(text) > max_line_chars:
            raise CorpusError(f"{path}:{i}: line is {len(text)} characters long (limit {max_line_chars}, for every "
                              f"file read{', whatever --max-chars' if training else ''}); the file must hold one "
                              "sentence per line -- check its line ends or split this line into sentences")
        utf8 = utf8 or (i if not text.isascii() else 0)
        lines.append(text)
    if bad:
        refuse_another_encoding(path, raw, bad, utf8, kind)
        logger.warning("%s: skipped %d line(s) with invalid UTF-8 (--skip-invalid-utf8): line %s",
                       path, len(bad), line_list(bad))
    return lines


def _align(src: List[Optional[str]], tgt: List[Optional[str]], name: str, where: str) -> Pairs:
    """Pairs from aligned line lists, dropping (and counting) pairs with a skipped or empty side."""
    out_s: List[str] = []
    out_t: List[str] = []
    invalid: List[int] = []
    empty: List[int] = []
    kept: List[int] = []
    for i, (s, t) in enumerate(zip(src, tgt), 1):
        if s is None or t is None:
            invalid.append(i)
        elif not s or not t:
            empty.append(i)
        else:
            out_s.append(s)
            out_t.append(t)
            kept.append(i)
    dropped = {}
    if invalid:
        dropped["invalid_utf8"] = len(invalid)
        logger.warning("%s: dropped %d pair(s) with a skipped side (invalid UTF-8): line %s", where, len(invalid),
                       line_list(invalid))
    if empty:
        dropped["empty_line"] = len(empty)
        shifted = empty[-1] == len(src)   # a blank last line beside a sentence: the end of a one-line shift?
        logger.warning("%s: dropped %d pair(s) with an empty side: line %s%s", where, len(empty), line_list(empty),
                       "; the last line is blank on one side only: are the files misaligned, a sentence missing "
                       "from one of them?" if shifted else "")
    if not out_s:
        raise CorpusError(f"{where}: no usable pairs (every line has an empty or undecodable side)")
    return Pairs(out_s, out_t, name, dropped, kept if dropped else None)


def drop_blank_ends(files: Sequence[Tuple[PathLike, List[Optional[str]]]], keep_blank_pairs: bool = False) -> None:
    """Drops (warned) the blank lines the line-aligned files' lines (read with `keep_blank_end`) end with, but not
    one that another file has text beside: a pair with one blank side is the caller's to warn of or drop. With
    `keep_blank_pairs`, only those past every other file's end (nmt-score scores every pair, a blank one too)."""
    for path, lines in files:
        extra = 0
        while lines and lines[-1] == "" and all(len(lines) > len(o) or not keep_blank_pairs and o[len(lines) - 1] == ""
                                                 for _, o in files if o is not lines):
            lines.pop()
            extra += 1
        if extra:
            logger.warning("%s: ignored %d blank line(s) at the end of the file", path, extra)


def warn_one_sided_blanks(src: list, other: list, src_name: str, other_name: str) -> None:
    """Warn (naming the lines) where exactly one of two line-aligned files is blank: a sentence missing from one
    side shifts every line after it, which the scores would not show."""
    lines = [i for i, (x, y) in enumerate(zip(src, other), 1) if bool(x.strip()) != bool(y.strip())]
    if lines:
        logging.getLogger("nmt").warning("%s and %s: %d line(s) blank on one side only (line %s): are the files "
                                         "misaligned, a sentence missing from one of them?", src_name, other_name,
                                         len(lines), line_list(lines, 10))


def read_parallel(src_path: PathLike, tgt_path: PathLike, *, skip_invalid_utf8: bool = False,
                  name: Optional[str] = None, whole: bool = False) -> Pairs:
    """Line-aligned file pair: line i of `src_path` translates to line i of `tgt_path`. Pairs with an empty or
    skipped side are dropped (counted), unless `whole`: a test set, read as nmt-evaluate reads its files (every line
    counts, none is skipped, and a source line of any length is the Translator's to cut)."""
    unskipped = "--skip-invalid-utf8 drops lines of training and dev files only: a test set is scored whole"
    skippable = not whole or (skip_invalid_utf8 and unskipped)   # (the flag given: a word of why it did nothing)
    src, tgt = (read_lines(p, skip_invalid_utf8=skip_invalid_utf8 and not whole, keep_blank_end=True,
                           skippable=skippable, max_line_chars=None if whole and side == 0 else MAX_LINE_CHARS,
                           training=not whole)
                for side, p in enumerate((src_path, tgt_path)))
    drop_blank_ends([(src_path, src), (tgt_path, tgt)])
    if len(src) != len(tgt):
        raise CorpusError(
            f"line counts differ: {src_path} has {len(src)} line{'s' * (len(src) != 1)} but {tgt_path} has "
            f"{len(tgt)}. Parallel files must be line-aligned (line i of one translates line i of the other); find the "
            "extra or missing line (a sentence broken over two lines, or a missing translation) and fix the files.")
    if whole:   # (no None: nothing skipped)
        warn_one_sided_blanks(src, tgt, str(src_path), str(tgt_path))   # type: ignore[arg-type]
        return Pairs(src, tgt, name or Path(src_path).stem)   # type: ignore[arg-type]
    return _align(src, tgt, name or Path(src_path).stem, f"{src_path} / {tgt_path}")


def read_tsv(path: PathLike, src_col: int, tgt_col: int, *, skip_invalid_utf8: bool = False,
             name: Optional[str] = None) -> Pairs:
    """Pairs from two tab-separated columns (0-based) of a UTF-8 file; other columns are ignored."""
    if src_col < 0 or tgt_col < 0 or src_col == tgt_col:
        raise CorpusError(f"{path}: source and target columns must be two different column numbers >= 0 "
                          f"(got {src_col} and {tgt_col})")
    need = max(src_col, tgt_col) + 1
    src: List[Optional[str]] = []
    tgt: List[Optional[str]] = []
    for i, line in enumerate(_decode_lines(path, skip_invalid_utf8, MAX_LINE_CHARS, training=True), 1):
        if line is None or not line.strip():
            src.append(None if line is None else "")   # counted by _align as invalid / empty
            tgt.append(None if line is None else "")
            continue
        cols = line.split("\t")   # before normalize(), which turns tabs into spaces
        if len(cols) < need:
            raise CorpusError(f"{path}:{i}: {len(cols)} tab-separated field(s), but column {need - 1} (0-based) is "
                              f"needed; every line must have at least {need} fields separated by tabs")
        src.append(cols[src_col])
        tgt.append(cols[tgt_col])
    _warn_of_changes(path, [(i, x) for i, pair in enumerate(zip(src, tgt), 1) for x in pair])   # (columns read)
    src, tgt = ([None if x is None else normalize(x) for x in side] for side in (src, tgt))
    return _align(src, tgt, name or Path(path).stem, str(path))


def concat(parts: Sequence[Pairs], name: str) -> Pairs:
    """One `Pairs` holding all of `parts` in order (read-time drop counts are summed)."""
    dropped: Counter = Counter()
    for p in parts:
        dropped.update(p.dropped)
    return Pairs([s for p in parts for s in p.src], [t for p in parts for t in p.tgt], name, dict(dropped))
