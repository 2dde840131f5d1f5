"""What kind of file a corpus or input file is, by its bytes: compressed (gzip, bzip2, xz: read as the text they
hold), an archive or zstd data (refused), UTF-16 or UTF-32 rather than UTF-8, or legacy text (CP949, Windows-1252)
where UTF-8 fails; each with the command that converts it. `CorpusError` is what every reader of text raises."""
from __future__ import annotations

import bz2
import codecs
import gzip
import logging
import lzma
import os
import re
import zlib
from pathlib import Path
from typing import BinaryIO, Callable, List, Optional, Tuple, Union

from nmt.commands import shell_word

logger = logging.getLogger("nmt.corpus")   # (what it says is the corpus reader's)

PathLike = Union[str, Path]


class CorpusError(ValueError):
    """Unusable input data; the message names the file(s), line, problem and what to do."""


class TooFewPairs(CorpusError):
    """Too few training pairs left after cleaning: `left`, where a run needs `needed` (1, or more than the dev set
    held out of them). A resumed run had them: its data changed (`nmt.data.build_data`)."""

    def __init__(self, message: str, left: int, needed: int) -> None:
        super().__init__(message)
        self.left, self.needed = left, needed


# Compressed text is read as the text it holds (as Sockeye and Marian read corpora): the leading bytes of each format
# (bzip2's with a block or end-of-stream marker, so that a text starting "BZh" stays text), its name and opener.
COMPRESSED = [(re.compile(rb"\x1f\x8b"), "gzip", gzip.open), (re.compile(rb"\xfd7zXZ\x00"), "xz", lzma.open),
              (re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"), "bzip2", bz2.open)]
# What reading a damaged compressed file raises: a truncated one EOFError, bad xz data LZMAError, bad deflate data
# inside a gzip file zlib.error (no OSError), a bad header OSError (gzip.BadGzipFile).
READ_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)
# An output named .gz is written gzip-compressed, flushed chunk by chunk, as Marian writes one; bzip2, xz and the
# others cannot be flushed as they go (a stopped run would lose all), so an output named as one is refused.
UNFLUSHABLE = (".bz2", ".bz", ".tbz", ".tbz2", ".xz", ".txz", ".lzma", ".lz", ".zst", ".zstd", ".lz4", ".lzo", ".z",
               ".br", ".zip", ".7z", ".tgz")


def output_opener(flag: str, path: PathLike):
    """How to open the output file `path` (of `flag`) for text: gzip.open for a .gz name, else open; a CorpusError
    for a name of another compression."""
    suffix = Path(path).suffix.lower()
    if suffix in UNFLUSHABLE:
        raise CorpusError(f"{flag} {path}: an output is written compressed only with gzip (a .gz name), flushed as "
                          "it goes; give a .gz or a plain name (and compress the file afterwards)")
    return gzip.open if suffix == ".gz" else open


def open_bytes(path: PathLike) -> Tuple[BinaryIO, Optional[str]]:
    """`path` open for reading its bytes, through its decompressor when it is a gzip, bzip2 or xz file, and that
    format's name (None: plain); a CorpusError naming the file when it cannot be opened or is a zip archive (which
    may hold several files)."""
    try:
        f = open(path, "rb")   # opened once: a pipe (--input <(...), /dev/stdin) cannot be read again
        head = f.peek(10)[:10] if not f.isatty() else b""   # (a terminal's typed lines: nothing to tell, and a peek
        # would hold the first line where the line reader does not look, or take a Ctrl-D)
        if archive_sign(head) == "a zip archive":
            f.close()
            raise CorpusError(f"{path}: this is a zip archive, not text; unzip it and give the file of sentences "
                              "(gzip, bzip2 and xz files are read as they are)")
        if not f.seekable():   # the decompressor reads on from the peeked bytes
            return decompressing(f)
        name, opener = compression(head)
        if opener is None:
            return f, None
        f.close()
        return opener(path, "rb"), name
    except FileNotFoundError:
        raise CorpusError(f"{path}: file not found; check the path") from None
    except OSError as e:
        raise CorpusError(f"{path}: cannot read ({e.strerror})") from None


def compression(head: bytes) -> Tuple[Optional[str], Optional[Callable]]:
    """The compression format (gzip, bzip2 or xz) of data starting with `head` and its opener, or (None, None)."""
    return next(((n, o) for magic, n, o in COMPRESSED if magic.match(head)), (None, None))


def decompressing(f: BinaryIO) -> Tuple[BinaryIO, Optional[str]]:
    """A stream read once (standard input, a pipe) through its decompressor when its first bytes, peeked at, are
    gzip, bzip2 or xz, and that format's name (None: `f` as it is). A terminal is not peeked at: typed lines are not
    compressed, and each peek at its end would take one of the Ctrl-D that end it."""
    name, opener = compression(f.peek(10)[:10] if hasattr(f, "peek") and not f.isatty() else b"")
    return (opener(f), name) if opener else (f, None)


def to_utf8_hint(line: bytes, path: Optional[PathLike], kind: Optional[str], into: bool = False) -> str:
    """What a line of invalid UTF-8 probably is and the command converting `path` (None: standard input; read as
    `kind`: "gzip" ...) to UTF-8 (`into`: as `iconv_command`'s): Korean legacy text is CP949; a line that has no
    Hangul in CP949 but reads as Windows-1252 (or Latin-1) text (an English file's "Café") is taken for that."""
    enc = encoding_of(line)
    return ("Korean legacy text is often CP949: " if enc == "CP949" else
            "the line reads as Windows-1252 (Latin-1) text: ") + f"`{iconv_command(path, enc, kind, into)}`"


# Hangul that CP949 reads in Korean: two syllables in a row, or one standing apart from Latin letters. A smart quote
# or dash of Windows-1252 before a letter reads as one syllable glued to Latin letters ("don\x92t": "don뭪").
_CP949_HANGUL = "[\uac00-\ud7a3]{2}|(?<![A-Za-z])[\uac00-\ud7a3](?![A-Za-z])"


def encoding_of(line: bytes) -> str:
    """What a line of invalid UTF-8 probably is: "CP949" (Korean legacy text), or "CP1252" for a line that has no
    Korean Hangul in CP949 but reads as Windows-1252 (or Latin-1) text."""
    return "CP949" if _reads_as(line, "cp949", _CP949_HANGUL) or not _reads_as(line, "cp1252", "") else "CP1252"


def not_text(line: bytes, utf8_elsewhere: bool = False) -> str:
    """What a line of invalid UTF-8 is when it is no text of a legacy encoding (so converting it would fail), or "":
    bytes of a binary file, a UTF-8 character cut off at its end, or bytes no encoding `encoding_of` names reads.
    `utf8_elsewhere`: other lines of the file are UTF-8 beyond ASCII (a cut after ASCII alone is a cut then)."""
    controls = sum(1 for b in line if b < 0x20 and b != 0x09)
    if b"\x00" in line or controls * 20 > len(line):
        return "it holds binary bytes (NUL or control codes), not text: is this a text file, one sentence per line?"
    # a UTF-8 character cut at the line's end: the first error there, after UTF-8 beyond ASCII (CP949's Hangul fails
    # at its first byte, a continuation byte in UTF-8; Latin-1's "café" ends in a lead byte after ASCII alone)
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.reason == "unexpected end of data" and (utf8_elsewhere or not line[:e.start].isascii()):
            return ("a UTF-8 character is cut off at the end of the line (a file cut by bytes, as `cut -b` or "
                    "`head -c` cut, not by characters?)")
    if _UTF8_HANGUL_WORD.search(line) or _cp949_beside_utf8(line):   # (a conversion of it: mojibake, or a failure)
        return ("it holds UTF-8 Korean beside bytes of another encoding (a line pasted together from two files?), so "
                "no conversion of the whole line reads it")
    enc = encoding_of(line)
    return "" if _reads_as(line, enc.lower(), "") else f"it is not {enc} text either, so no conversion reads it"


_UTF8_HANGUL = re.compile(rb"[\xea-\xed][\x80-\xbf]{2}|\xe3[\x84-\x86][\x80-\xbf]")   # a syllable, or a jamo (ㅋ)
_UTF8_HANGUL_WORD = re.compile(rb"(?:%s){2}" % _UTF8_HANGUL.pattern)   # two of them in UTF-8 ("요즘", "ㅋㅋ"): a word


def _cp949_beside_utf8(line: bytes) -> bool:
    """Whether `line` is Korean CP949 beside UTF-8 syllables or jamo ("ㅋㅋ") standing alone: at each byte CP949
    cannot read, the nearest UTF-8 syllable or jamo that starts there or before it (CP949 may have read its first
    bytes as a character) is taken out, and what is left reads as Korean CP949. (Such a line may also read as
    Windows-1252, and was advised that conversion: mojibake of the Korean.) Up to 64 of them: each is a decoding of
    the rest of the line (a line of more is no stray paste, and was quadratic in its length)."""
    pos, parts = 0, []
    for _ in range(65):   # (the last: the rest after the 64th)
        try:
            parts.append(line[pos:].decode("cp949"))
            break
        except UnicodeDecodeError as e:
            at, ends, i = pos + e.start, [pos], pos
            while i < at:   # where CP949's characters end before `at` (all read: 1 byte below 0x80, else 2)
                i += 1 if line[i] < 0x80 else 2
                ends.append(i)
            start = next((s for s in reversed(ends) if _UTF8_HANGUL.match(line, s)), None)
            if start is None:
                return False
            parts.append(line[pos:start].decode("cp949"))
            pos = _UTF8_HANGUL.match(line, start).end()
    else:
        return False
    return len(parts) > 1 and re.search(_CP949_HANGUL, " ".join(parts)) is not None


def refuse_another_encoding(path: Path, raw: List[bytes], bad: List[int], utf8: int, kind: Optional[str]) -> None:
    """CorpusError when no line is UTF-8 beyond ASCII (`utf8` 0) and the invalid UTF-8 lines `bad` that
    --skip-invalid-utf8 would skip are most of the file's lines of text, or Korean in CP949 (their first 100), however
    few (a technical text's ASCII lines may be most of it): the file is in another encoding (CP949), whose text the
    flag would drop whole, keeping its ASCII lines alone; what was left failed later as "both files English?"."""
    text = sum(1 for x in raw if x.strip())
    if utf8 or 2 * len(bad) <= text and not all(_reads_as(raw[i - 1], "cp949", _CP949_HANGUL) for i in bad[:100]):
        return
    raise CorpusError(f"{path}: {len(bad)} of its {text} lines of text, from line {bad[0]} on, are not UTF-8 and no "
                      "line is UTF-8 beyond ASCII: the file is in another encoding, whose text beyond ASCII "
                      "--skip-invalid-utf8 would drop whole (it drops stray lines). Convert the file to UTF-8 "
                      f"({to_utf8_hint(raw[bad[0] - 1], path, kind, into=True)}).")


def iconv_command(path: Optional[PathLike], encoding: str, kind: Optional[str], into: bool = False) -> str:
    """The command converting `path` (None: standard input; compressed as `kind`: "gzip" ...) from `encoding` to
    UTF-8; `into`: into a file beside it, named with .utf8 before its suffix (without the compression's). A pipe
    (/dev/stdin, <(...)) gets the command for standard input: a filter to put in it."""
    if path is not None and _stream(path):
        path = None
    cat = _CATS.get(kind or "")
    command = (f"{cat}{'' if path is None else ' ' + shell_word(path)} | iconv -f {encoding} -t UTF-8" if cat else
               f"iconv -f {encoding} -t UTF-8{'' if path is None else ' ' + shell_word(path)}")
    return f"{command} > {_beside(path, 'utf8')}" if into and path is not None else command


_CATS = {"gzip": "zcat", "bzip2": "bzcat", "xz": "xzcat"}   # a compressed file's text on standard output


def _stream(path: PathLike) -> bool:
    """Whether `path` is read as a stream, where a command is a filter to put in it, not a file to write beside:
    a pipe (<(...)), or standard input or a descriptor by name, also when a file is redirected to it (`< file`)."""
    return str(path).startswith(("/dev/stdin", "/dev/fd/", "/proc/self/fd/")) or (os.path.exists(path) and
                                                                                  not os.path.isfile(path))


def _beside(path: PathLike, tag: str) -> str:
    """The file beside `path` a conversion writes into, as a shell word: `tag` before its suffix (without the
    compression's): train.ko.gz -> train.utf8.ko."""
    text = Path(path).with_suffix("") if Path(path).suffix.lower() in (".gz", ".bz2", ".xz") else Path(path)
    return shell_word(text.with_name(f"{text.stem}.{tag}{text.suffix}"))


def line_ends_command(path: PathLike, kind: Optional[str]) -> str:
    """The command turning the CR line ends of `path` (compressed as `kind`) into LF, into a file beside it; for a
    pipe (/dev/stdin, <(...)), a filter to put in it."""
    cat = _CATS.get(kind or "")
    if _stream(path):
        return f"{cat} | tr '\\r' '\\n'" if cat else "tr '\\r' '\\n'"
    read = f"{cat} {shell_word(path)} | tr '\\r' '\\n'" if cat else f"tr '\\r' '\\n' < {shell_word(path)}"
    return f"{read} > {_beside(path, 'lf')}"


def undo_latin1_command(path: PathLike) -> str:
    """The command writing, beside the UTF-8 file `path`, the bytes its text was decoded from as Latin-1 or
    Windows-1252 (each character back to its byte; the C1 controls Windows-1252 leaves undefined too): Korean UTF-8
    saved as UTF-8 again after that decoding comes back whole (a byte-order mark of the export dropped, its line ends
    kept). "" for a compressed file or a stream."""
    if _stream(path) or not os.path.isfile(path) or Path(path).suffix.lower() in (".gz", ".bz2", ".xz"):
        return ""
    return ("python3 -c \"import sys; sys.stdout.buffer.write(bytes(ord(c) if ord(c) < 256 else c.encode('cp1252')[0] "
            "for c in open(sys.argv[1], encoding='utf-8-sig', newline='').read()))\" "
            f"{shell_word(path)} > {_beside(path, 'fixed')}")


# Windows-1252's characters beyond Latin-1 ("€", "’", ...) as the bytes they were decoded from, which
# `undo_latin1_command` writes back (each other character below 256 as its own byte)
_CP1252_BYTES = {ord(bytes([b]).decode("cp1252")): b for b in range(0x80, 0xA0)
                 if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)}   # (its undefined bytes, read as C1 controls or lost)


# Bytes of whole lines `undo_latin1_loses` reads at a time (and the longest line): not the file, which may be GBs
UNDO_BLOCK = 1 << 20


def undo_latin1_loses(path: PathLike) -> int:
    """The first line of the file `path` that `undo_latin1_command` cannot write back as UTF-8 (0: none): bytes the
    first decoding dropped ('ignore' skips Windows-1252's five undefined bytes, which many lines of Korean UTF-8
    hold), a character neither Latin-1 nor Windows-1252 has, or a line that is no UTF-8 now. Read UNDO_BLOCK bytes
    of lines at a time: a line end (LF) is never part of another character, so a block fails where one line does."""
    first = 1
    with open(path, "rb") as f:
        for block in iter(lambda: f.readlines(UNDO_BLOCK), []):
            if not _written_back(b"".join(block), first == 1):
                return first + next((i for i, line in enumerate(block) if not _written_back(line, first + i == 1)), 0)
            first += len(block)
    return 0


def _written_back(data: bytes, start: bool) -> bool:
    """Whether `undo_latin1_command` writes `data` (whole lines; `start`: the file's, a byte-order mark dropped)
    back as UTF-8."""
    try:
        data.decode("utf-8-sig" if start else "utf-8").translate(_CP1252_BYTES).encode("latin-1").decode("utf-8")
        return True
    except UnicodeError:
        return False


def _reads_as(line: bytes, encoding: str, pattern: str) -> bool:
    try:
        return re.search(pattern, line.decode(encoding)) is not None
    except UnicodeDecodeError:
        return False


def archive_sign(data: bytes) -> str:
    """The archive or compression format of data starting with `data`, by its magic bytes, or "" (a tar archive
    also inside gzip, bzip2 or xz: their reader gives its bytes)."""
    return ("a zip archive" if data.startswith(b"PK\x03\x04") else "a tar archive" if data[257:263] == b"ustar\x00" or
            data[257:265] == b"ustar  \x00"   # (POSIX's magic, GNU's: not a word of text ending in "ustar")
            else "zstd data" if data.startswith(b"\x28\xb5\x2f\xfd") else
            next((f"{name} data" for magic, name, _ in COMPRESSED if magic.match(data)), ""))


BINARY = ((b"\x89PNG\r\n\x1a\n", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
          (b"%PDF-", "a PDF document"), (b"\x7fELF", "a program (ELF)"), (b"\x93NUMPY", "a NumPy array"),
          (b"\x12\x01\x00\x00\x00\x00\x00\x00", "an MXNet parameter file (params.*)"),
          (b"SQLite format 3\x00", "an SQLite database"))


def binary_sign(data: bytes) -> str:
    """The binary format (an image, a PDF, model parameters ...) of data starting with `data`, by its magic bytes,
    or "": no text, whose first line would otherwise be taken for legacy-encoded text. A start that is UTF-8 text
    without NUL ("%PDF-1.7 is the latest version.", "GIF89a와 ...") is no such file."""
    head = data[:4096]
    try:
        text = b"\x00" not in head and bool(codecs.getincrementaldecoder("utf-8")().decode(head, final=False))
    except UnicodeDecodeError:
        text = False
    return "" if text else next((name for magic, name in BINARY if data.startswith(magic)), "")


def wide_encoding(data: bytes) -> Tuple[str, str]:
    """(its encoding, what shows it) when text starting with `data` is UTF-16 or UTF-32 rather than UTF-8: a
    byte-order mark, or NUL bytes as a tenth or more of its first 1,000 bytes (where they stand tells the byte order,
    and UTF-32's two high bytes of every character); ("", "") when nothing shows it."""
    for bom, name in ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"), (codecs.BOM_UTF16_LE, "UTF-16"),
                      (codecs.BOM_UTF16_BE, "UTF-16")):   # UTF-32's little-endian mark starts with UTF-16's
        if data.startswith(bom):
            return name, f"it starts with a {name} byte-order mark"
    head = data[:1000]
    if not head or head.count(0) * 10 < len(head):
        return "", ""
    # UTF-32: every character's high byte is 0, the next one too but for the rare one past U+FFFF (at most 0x10); in
    # UTF-16 text, the bytes there are another character's (a letter, or a line end on lines of one character)
    def utf32(high: int, next_: int) -> bool:
        return not any(head[high::4]) and max(head[next_::4]) <= 0x10 and head[next_::4].count(0) * 10 >= 9 * len(
            head[next_::4])
    name = ("UTF-32LE" if len(head) >= 4 and utf32(3, 2) else "UTF-32BE" if len(head) >= 4 and utf32(0, 1) else
            "UTF-16LE" if head[1::2].count(0) >= head[0::2].count(0) else "UTF-16BE")
    return name, "or not text: NUL bytes fill its start"


def _check_start(data: bytes, path: Path, kind: Optional[str]) -> None:
    """CorpusError when a file starting with `data` (its first HEAD_BYTES) is no UTF-8 text: an archive, an image,
    UTF-16. UTF-16 without its byte-order mark shows as NUL bytes, one for every ASCII character (spaces and
    punctuation of Korean text too), where UTF-8 text has none but a stray control character."""
    archive, binary = archive_sign(data), binary_sign(data)
    if archive:   # (a zip archive is named as it is opened)
        raise CorpusError(f"{path}: this is {archive}, not text; extract or decompress the file of sentences first "
                          "(gzip, bzip2 and xz files of text are read as they are)")
    if binary:
        raise CorpusError(f"{path}: this is {binary}, not text: give a file of sentences, one per line")
    encoding, sign = wide_encoding(data)
    if encoding:
        raise CorpusError(f"{path}: the file is {encoding} ({sign}); convert it to UTF-8, e.g. "
                          f"`{iconv_command(path, encoding, kind, into=True)}`")


HEAD_BYTES = 4096   # what `_check_start` reads (`binary_sign`'s and `wide_encoding`'s)


def _text_bytes(data: bytes, path: Path, blank_ok: bool = False) -> bytes:
    """A file's bytes without a UTF-8 byte-order mark (warned); CorpusError for a file without text (but, with
    `blank_ok`, one of blank lines: translations that are all empty)."""
    if data.startswith(codecs.BOM_UTF8):
        # Harmless once removed; otherwise U+FEFF would be glued to the first word of line 1.
        logger.warning("%s: removed the UTF-8 byte-order mark at the start of the file", path)
        data = data[len(codecs.BOM_UTF8):]
    if not data.strip() and not (blank_ok and data):
        raise CorpusError(f"{path}: the file " + ("is empty" if not data else "has only blank lines") +
                          "; give a file with one sentence per line")
    return data


def read_text_bytes(path: Path, blank_ok: bool = False) -> Tuple[bytes, Optional[str]]:
    """(`_text_bytes` of the file's bytes, decompressed; its compression or None); a CorpusError for a file that is no
    text, told by its start before the rest is read (a 4 GB image or archive took 4 GB of memory), or damaged.
    `blank_ok`: as `_text_bytes`'."""
    f, kind = open_bytes(path)
    try:
        with f:
            data = f.read(HEAD_BYTES)
            _check_start(data, path, kind)
            data += f.read()
    except READ_ERRORS as e:   # a truncated or corrupt archive
        problem = f"a damaged {kind} file ({e})" if kind else f"cannot read ({e.strerror})"
        raise CorpusError(f"{path}: {problem}") from None
    return _text_bytes(data, path, blank_ok), kind
