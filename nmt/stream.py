"""The line streams of `nmt-translate`: raw input lines read with a bound on their length, decoded and checked
(`read_raw_lines`, `decode_line`), translated chunk by chunk with one output line per input line
(`translate_stream`); the interactive prompt is `nmt.prompt`'s.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import sys
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterable, Iterator, List, Optional, Sequence, TextIO, Tuple, Union

from nmt.align import format_links, with_links
from nmt.config import CHARS_PER_TOKEN
from nmt.json_input import parse_json_line
from nmt.corpus import CorpusError
from nmt.text import char_boundary, one_line, removed_controls, removed_counts, squeeze_blanks
from nmt.textfile import (READ_ERRORS, archive_sign, binary_sign, decompressing, encoding_of, iconv_command, not_text,
                          open_bytes, to_utf8_hint, wide_encoding)
from nmt.log import Every
from nmt.signals import deferred
from nmt.translate import Translator

logger = logging.getLogger("nmt.translate")


# How long the input may pause before the lines read so far are translated: a program that writes a line into the
# pipe and waits for its translation gets it, while a file still fills whole chunks.
IDLE_SECONDS = 0.05
PAUSE = (b"", None)   # what read_raw_lines yields when the input pauses
STDIN = "<stdin>"     # the name of standard input in messages
CONTROL_WARNINGS = 5   # lines whose control characters (or bytes replaced) are named one by one; the summary counts all
REPORT_SECONDS = 60.0  # a long input logs how far it got this often (a 100,000-line file takes ~15 minutes on a CPU)


def read_raw_lines(stream: BinaryIO, max_bytes: int, idle: Optional[float] = None, squeeze: bool = True,
                   source: Tuple[Optional[str], Optional[str]] = (None, None)) -> Iterator[Tuple[bytes, bool]]:
    """(line without its line end, was_cut) of a binary stream; a line longer than `max_bytes` is cut there and
    the rest of it is read and discarded, so no line is ever held whole in memory. With `squeeze`, a line's spaces
    and tabs count as `normalize` leaves them (leading ones dropped, a run as one space) before it is cut: a sentence
    after 20,000 spaces is kept, as the Translator, which cuts after normalizing, keeps it (not for JSON lines, whose
    strings squeezing would change). With `idle` (seconds) and a stream with a file descriptor, PAUSE is yielded once
    when no line is ready and nothing arrives for that long; the descriptor is then read directly (os.read), not
    through the stream's buffer, so that select sees all. `source`: the file (None: standard input) and its
    compression, for the command that converts UTF-16 or UTF-32 input."""
    fd = _fileno(stream) if idle is not None else None
    buf, start, skipping, paused, first = b"", 0, False, False, True
    if fd is not None and hasattr(stream, "peek") and not os.isatty(fd):   # what the buffer holds already (peeked
        # at by open_bytes; not on a terminal, where a peek at its end would take a Ctrl-D)
        buf = stream.read(len(stream.peek(1)))
    while True:
        if first and buf:   # UTF-16 would pass as lines of odd characters with NULs removed (and one line more)
            first, (encoding, sign), archive, binary = False, wide_encoding(buf), archive_sign(buf), binary_sign(buf)
            if archive or binary:
                raise CorpusError(f"the input is {archive or binary}, not text: " + (
                    "extract or decompress it first (gzip, bzip2 and xz are read as they are)" if archive else
                    "give sentences, one per line"))
            if encoding:
                raise CorpusError(f"the input is {encoding} ({sign}); convert it to UTF-8, e.g. "
                                  f"`{iconv_command(source[0], encoding, source[1])}`")
        if skipping:   # the rest of a cut line: nothing of it is kept
            nl = buf.find(b"\n", start)
            if nl >= 0:
                start, skipping = nl + 1, False
                continue
            buf, start = b"", 0
        else:
            nl = buf.find(b"\n", start, start + max_bytes + 1)
            if nl >= 0:
                line, start = buf[start:nl], nl + 1
                yield line.rstrip(b"\r"), False
                continue
            if squeeze and len(buf) - start > max_bytes:
                end = buf.find(b"\n", start)
                end = len(buf) if end < 0 else end
                squeezed = squeeze_blanks(buf[start:end])
                if len(squeezed) < end - start:
                    buf, start = squeezed + buf[end:], 0
                    continue
            if len(buf) - start > max_bytes:
                yield char_boundary(buf[start:start + max_bytes]), True
                skipping = True
                continue
        if idle is not None and fd is not None and not paused and not select.select([fd], [], [], idle)[0]:
            paused = True
            yield PAUSE
            continue
        data = os.read(fd, 1 << 16) if fd is not None else getattr(stream, "read1", stream.read)(1 << 16)
        paused = False
        if not data:
            if len(buf) > start and not skipping:
                yield buf[start:].rstrip(b"\r"), False
            return
        buf, start = buf[start:] + data, 0


def open_input(path: Optional[str], stack: contextlib.ExitStack) -> Tuple[BinaryIO, Optional[float], Optional[str]]:
    """nmt-translate's --input file (None: standard input), open in `stack` (decompressed if gzip, bzip2 or xz), the
    `idle` time to read it with (None for a compressed file: its descriptor holds the compressed bytes) and its
    compression (None: plain)."""
    try:
        f, kind = open_bytes(path) if path is not None else decompressing(sys.stdin.buffer)
    except CorpusError as e:
        raise CorpusError(f"--input {e}") from None
    return stack.enter_context(f) if path is not None or kind else f, None if kind else IDLE_SECONDS, kind


def _fileno(stream) -> Optional[int]:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):   # io.UnsupportedOperation (BytesIO) is an OSError
        return None


def decode_line(raw: bytes, line_no: int, name: str, on_invalid: str = "error",
                compressed: Optional[str] = None, utf8_text: int = 0, replaced_before: int = 0) -> Tuple[str, bool]:
    """(text, had_invalid_bytes) of one input line of `name` (read as `compressed`: "gzip", ... or None); invalid
    UTF-8 is a CorpusError naming the line, or replaced by U+FFFD when `on_invalid` is "replace", with a warning for
    the first CONTROL_WARNINGS such lines (`replaced_before`: how many came before; a CP949 file had one per line).
    `utf8_text`: an earlier line of UTF-8 beyond ASCII (0: none), which makes an invalid line a stray one."""
    replaced = False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        said = (f"{name}:{line_no}: invalid UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start + 1} of the line); the "
                "translations of all lines before it have been written. ")
        path = None if name == STDIN else name
        what = not_text(raw, bool(utf8_text))
        if on_invalid != "replace" and what:
            raise CorpusError(f"{said}{what[0].upper()}{what[1:]}: correct or delete the line, or "
                              "pass --on-invalid-utf8 replace") from None
        if on_invalid != "replace" and utf8_text:   # (a conversion of the whole input would fail on the UTF-8 lines)
            raise CorpusError(f"{said}Line {utf8_text} is UTF-8 text, so this line may be the only one in another "
                              f"encoding (it reads as {encoding_of(raw)}): correct or delete it, or pass "
                              "--on-invalid-utf8 replace") from None
        if on_invalid != "replace":
            raise CorpusError(f"{said}Convert the input to UTF-8 ({to_utf8_hint(raw, path, compressed)}) or pass "
                              "--on-invalid-utf8 replace") from None
        if replaced_before < CONTROL_WARNINGS:
            logger.warning("%s:%d: invalid UTF-8 replaced by U+FFFD (--on-invalid-utf8 replace)%s", name, line_no,
                           " (the last such warning; the summary counts them all)"
                           if replaced_before == CONTROL_WARNINGS - 1 else "")
        text, replaced = raw.decode("utf-8", errors="replace"), True
    # LF splits lines as they are read: a CR is left. Other separators (U+2028, VT, FF, ...) are part of the line.
    parts = sum(1 for part in text.split("\r") if part.strip())
    if parts > 1:
        raise CorpusError(f"{name}:{line_no}: carriage returns (CR) split the line into {parts} lines (old "
                          "Mac line ends?); the translations of all lines before it have been written. Convert them "
                          "to line ends, e.g. `tr '\\r' '\\n' < in.txt > out.txt`")
    return text, replaced


@dataclass
class StreamStats:
    lines: int = 0
    invalid_utf8: int = 0           # lines whose invalid bytes were replaced
    cut: int = 0                    # lines cut while reading (longer than the byte guard)
    controls: int = 0               # lines with control characters (removed before translating; ESC[31m's ESC not)
    escapes: int = 0                # lines with terminal escape sequences (ESC[31m; removed whole before translating)
    cleaned: int = 0                # lines with either, the first CONTROL_WARNINGS of them warned of one by one
    utf8_text: int = 0              # the first line of UTF-8 beyond ASCII: an invalid line after it, a stray one
    refused: int = 0                # lines given to `on_bad_line` (typed at a terminal): no output line
    seconds: float = 0.0

    def removals(self) -> str:
        """The summary's words for the lines that lost terminal escape sequences or control characters, each apart,
        as each line's warning names them: "; 2 with terminal escape sequences removed" ("" for none)."""
        return "".join(f"; {n} with {what} removed" for n, what in
                       ((self.escapes, "terminal escape sequences"), (self.controls, "control characters")) if n)


def format_nbest(hyps: Sequence[Tuple], alignment: bool = False) -> str:
    """One JSON object per input line: {"translations": [...], "scores": [...]}, best first; with `alignment`
    ((text, score, links) items) "alignments": [...] too."""
    row = {"translations": [h[0] for h in hyps], "scores": [round(h[1], 6) for h in hyps]}
    if alignment:
        row["alignments"] = [format_links(h[2]) for h in hyps]
    return json.dumps(row, ensure_ascii=False)


def translation_rows(translator: Translator, lines: List[str], first_line: int, nbest: Optional[int] = None,
                     alignment: bool = False, prefixes: Optional[List[Optional[str]]] = None
                     ) -> Tuple[List[str], List[List[int]]]:
    """The output line of each input line (its translation; with `nbest`, its `format_nbest` row; with `alignment`,
    the translation, " ||| " and its word alignment, or alignments in the n-best row), and the target ids of its
    best translation as the search wrote them ([] for none). `prefixes`: per line, text its translations start with
    (None: none)."""
    hyps = translator.translate_ids(lines, nbest=nbest or 1, first_line=first_line, prefixes=prefixes)
    best = [h[0][0] if h else [] for h in hyps]
    if alignment:
        with translator.unreported():   # (reported by the search)
            texts = with_links(translator, translator.source_ids(lines, first_line), hyps)
        rows = ([format_nbest(h, alignment=True) for h in texts] if nbest else
                [f"{h[0][0]} ||| {format_links(h[0][2])}" if h else " ||| " for h in texts])
    else:
        texts = translator.texts(hyps)
        rows = [format_nbest(h) for h in texts] if nbest else [h[0][0] if h else "" for h in texts]
    return rows, best


class _Output:
    """`translate_stream`'s output: a stream, or a function that opens one (`open`: called once, when first needed)."""

    def __init__(self, out: Union[TextIO, Callable[[], TextIO]]):
        self.stream, self.opener = (None, out) if callable(out) else (out, None)

    def open(self) -> TextIO:
        if self.stream is None:
            self.stream = self.opener()
        return self.stream

    def write(self, text: str) -> None:
        """`text` written and flushed; Ctrl-C or SIGTERM while a slow reader takes it: written whole."""
        with deferred():
            self.open().write(text)
            self.stream.flush()


def translate_stream(translator: Translator, raw_lines: Iterable[Tuple[bytes, bool]],
                     out: Union[TextIO, Callable[[], TextIO]], *,
                     name: str = STDIN, compressed: Optional[str] = None, chunk_lines: int = 1000,
                     on_invalid: str = "error", nbest: Optional[int] = None, alignment: bool = False,
                     json_input: bool = False, on_bad_line: Optional[Callable[[CorpusError], None]] = None,
                     on_chunk: Optional[Callable[[int, List[str], List[List[int]]], None]] = None) -> StreamStats:
    """Translate (line, was_cut) items chunk by chunk, writing one output line per input line (its `translation_rows`
    row) and flushing after every chunk: `chunk_lines` lines, or those read when `raw_lines` yields PAUSE;
    `on_chunk(first_line_number, lines, best_ids)` runs after each chunk is written (`translation_rows`' ids). A line
    that cannot be read (invalid UTF-8 with on_invalid="error"; with `json_input`, no `parse_json_line` object) raises
    its CorpusError once every line before it is translated and written; with `on_bad_line` (lines typed at a
    terminal) the error goes to it instead, the line gets no output line, and the stream goes on. `out`: the output,
    or a function that opens it once a line is read well or the input ends (input refused at once: left as it was)."""
    stats, t0, line_no, output = StreamStats(), time.perf_counter(), 0, _Output(out)
    chunk, prefixes, first, report = [], [], 1, Every(REPORT_SECONDS)   # (prefixes: the lines' --json-input ones)

    def flush(last: bool = False) -> None:
        nonlocal chunk, prefixes, first
        if chunk:
            started = time.perf_counter()
            rows, best = translation_rows(translator, chunk, first, nbest, alignment,
                                          prefixes if json_input else None)
            output.write("".join(r + "\n" for r in rows))
            logger.debug("%s: %s translated in %.2f s", name, f"lines {first}-{first + len(chunk) - 1}"
                         if len(chunk) > 1 else f"line {first}", time.perf_counter() - started)
            if on_chunk is not None:
                on_chunk(first, chunk, best)
            chunk, prefixes = [], []
            if not last and report.due():   # the last: the caller's summary says it
                logger.info("%s: %d lines translated so far (%.1f lines/s)", name, line_no,
                            line_no / (time.perf_counter() - t0))
        first = line_no + 1   # the next chunk's first line (after a line left out too: `on_bad_line`)

    try:   # an unreadable or undecodable line: every line before it is translated and written first
        for item in _readable(raw_lines, name):
            if item is PAUSE:   # the input paused: a program may be waiting for what it gave so far
                flush()
                continue
            line_no += 1
            try:
                text, prefix = _read_line(*item, line_no, (name, compressed), on_invalid, json_input, stats)
            except CorpusError as e:
                if on_bad_line is None:
                    raise
                flush()   # (the lines before it first)
                stats.refused += 1
                on_bad_line(e)
                continue
            output.open()   # (a line read well: now the output may replace a file)
            chunk.append(text)
            prefixes.append(prefix)
            if len(chunk) >= chunk_lines:
                flush()
    except CorpusError:
        flush()
        raise
    flush(last=True)
    output.open()   # (an empty input: an empty output)
    stats.seconds = time.perf_counter() - t0
    return stats


def _read_line(raw: bytes, cut: bool, line_no: int, source: Tuple[str, Optional[str]], on_invalid: str,
               json_input: bool, stats: StreamStats) -> Tuple[str, Optional[str]]:
    """(text, target prefix or None) of one raw input line of `source` (name, compression), counted in `stats`; a
    CorpusError naming the line for what cannot be read."""
    name = source[0]
    if cut and json_input:   # a cut object is no longer JSON
        raise CorpusError(f"{name}:{line_no}: the line is longer than the input guard (a multiple of "
                          "--max-input-tokens, in bytes) and was cut while reading, so it is no longer a JSON object; "
                          "its text would be cut to --max-input-tokens anyway: shorten it, or raise --max-input-tokens")
    if cut:
        stats.cut += 1
        logger.warning("%s:%d: line longer than the input guard (--max-input-tokens x %d bytes); cut there while "
                       "reading (any length said next is the cut line's)", name, line_no, CHARS_PER_TOKEN * 4)
    text, replaced = decode_line(raw, line_no, name, on_invalid, source[1], stats.utf8_text, stats.invalid_utf8)
    stats.invalid_utf8 += replaced
    stats.utf8_text = stats.utf8_text or (line_no if not replaced and not text.isascii() else 0)
    prefix = None
    if json_input:
        text, prefix = parse_json_line(text, line_no, name)
    else:   # one line of the input, one sentence: U+2028 and the like are spaces to it, as normalize makes them
        text = one_line(text)
    sequences, characters = removed_counts(text, prefix or "")
    if sequences or characters:   # removed by `normalize`, as the service does, which says so too
        stats.escapes, stats.controls = stats.escapes + bool(sequences), stats.controls + bool(characters)
        stats.cleaned += 1
        if stats.cleaned <= CONTROL_WARNINGS:
            logger.warning("%s:%d: %s removed before translating%s", name, line_no,
                           removed_controls(text, prefix or ""), " (the last such warning; the summary counts them all)"
                           if stats.cleaned == CONTROL_WARNINGS else "")
    stats.lines += 1
    return text, prefix


def _readable(raw_lines: Iterable[Tuple[bytes, bool]], name: str) -> Iterator[Tuple[bytes, bool]]:
    """The items of `raw_lines`; a read error (e.g. a truncated .gz --input) is a CorpusError naming the input and
    the last line read whole."""
    lines, items = 0, iter(raw_lines)
    while True:
        try:
            item = next(items)
        except StopIteration:
            return
        except READ_ERRORS as e:
            raise CorpusError(f"{name}: unreadable after line {lines} ({e}); the translations of the lines before it "
                              "have been written") from None
        except CorpusError as e:   # read_raw_lines' own, which do not know the input's name
            raise CorpusError(f"{name}: {e}") from None
        lines += item is not PAUSE
        yield item
