"""How nmt reads one line of text, the same in training, translation, scoring and the server (whose web page
compiles some of these patterns): `normalize` (NFC, full-width ASCII as ASCII, terminal escape sequences, control and
zero-width characters removed, whitespace collapsed), what it removed, for warnings (`removed_controls`), how many
lines a text holds (`count_lines`), and a translation written back as one tidy line (`tidy_translation`)."""
from __future__ import annotations

import re
import unicodedata
from typing import Optional, Tuple

from nmt.config import CHARS_PER_TOKEN

# Control characters go; whitespace-like ones (tab, CR, vertical tab, NEL, ...) become spaces via str.split().
# Characters that show nothing but would become tokens of their own go too: zero-width space, word joiner and the
# invisible operators, a stray BOM, the soft hyphen, bidirectional marks, embeddings and isolates, Hangul fillers and
# the Braille blank (chat's "blank" lines), deprecated, interlinear, musical and Egyptian format controls.
INVISIBLE = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\xad\u061c\u115f\u1160\u17b4\u17b5\u180e"
                       "\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\u2800\u3164\ufeff\uffa0"
                       "\ufff9-\ufffb\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a]")
# Joiners, variation selectors and tag characters shape the characters beside them (an emoji sequence, a flag); a
# word of them alone shows nothing.
JOINERS = re.compile("[\u034f\u180b-\u180d\u180f\u200c\u200d\ufe00-\ufe0f\U000e0001\U000e0020-\U000e007f"
                     "\U000e0100-\U000e01ef]+")
# A run of them with nothing to shape: at a word's start, or after ASCII or Hangul (ZWJ after "오늘" became three
# byte pieces that changed the translation), but for a keycap's VS16 ("1\ufe0f\u20e3")
NOTHING_TO_JOIN = "[\x00-\x7f\u1100-\u11ff\u3130-\u318f\uac00-\ud7a3]"   # (and whitespace; the web page reads it)
_STRAY_JOINERS = re.compile(f"(?:^|(?<=\\s)|(?<={NOTHING_TO_JOIN})){JOINERS.pattern}(?!\u20e3)")
# Why pairs read again may differ from those a run recorded, its files unchanged (in its errors' words)
READ_SINCE = ("the run began before nmt read text as it does now: full-width ASCII, ＡＢ．, as ASCII; joiners next to "
              "no emoji removed; terminal escape sequences (ESC[31m) removed whole; python-docs-ko's footnote marks, "
              "link references and substitutions (|version|) stripped or rendered, as the all recipe reads it")
# Full-width ASCII, U+FF01-U+FF5E (a Korean input method's full-width mode, HWP documents: "ＴＶ를 봐요．"), as the
# ASCII it stands for, as NFKC and Moses' punctuation normalization fold it; else each is a byte piece or two
FULL_WIDTH = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)}
_CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")   # the control characters `normalize` removes
# Terminal escape sequences go whole: a colour that `ls --color`, grep or a logger wrote into the text (ESC[31m), a
# cursor key typed where nothing edits the line (ESC[D), a hyperlink or window title (ESC]8;;url ESC\), a character set
# (ESC(B, tput sgr0's), a function key (F1: ESC O P; ESC[[A on the Linux console, whose F1-F5 end in a letter after "[",
# not a CSI's final byte) or Alt with a key (ESC b), a cursor save or keypad mode (ESC 7, ESC =). Their ESC alone is a
# control character: removed alone, it left "[31m" or "OP" in the text. CSI ESC[ to its final byte (parameters
# 0x30-0x3F, intermediates 0x20-0x2F, a final 0x40-0x7E), OSC (ESC]) to its BEL or ST, SS2/SS3 (ESC N, ESC O) with their
# one character of 0x40-0x7E (a key: ESC O P), ESC and one character of the others (not those that begin a string), and
# ESC N or ESC O before anything else alone (Alt+Shift+O; not SS3: a following space, digit or Hangul stays). U+009B,
# CSI in one character, is more often "›" (CP1252's 0x9B) read as Latin-1 than a terminal's: it starts a sequence only
# before a parameter byte (U+009B 31m, U+009B ?25h), else it is a control character alone ("\x9bNext" is "Next", not
# "ext"). So is U+009D, OSC in one character, which curly quotes' UTF-8 read as Latin-1 holds (U+201D ends in 0x9D,
# U+201C in 0x9C, ST): it starts a string only before its number (U+009D 0;title BEL), else the words up to the next
# opening quote went with it. Written for Python and JavaScript (the web page compiles the pattern as it is).
ESCAPE_SEQUENCE = re.compile(r"\x1b\[\[[A-E]|(?:\x1b\[[0-?]*|\x9b[0-?]+)[ -/]*[@-~]"
                             r"|(?:\x1b\][^\x07\x1b\x9c]*|\x9d[0-9]+(?:;[^\x07\x1b\x9c]*)?)(?:\x07|\x1b\\|\x9c)"
                             r"|\x1b[()*+][0-~]|\x1b[NO][@-~]|\x1b[0-OQ-WYZ\\`-~]")
_SURROGATE = re.compile("[\ud800-\udfff]")

# Where text breaks into lines: str.splitlines()'s boundaries (LF, CR, VT, FF, FS, GS, RS, NEL, U+2028, U+2029).
_SPACE_RUN = re.compile(" {2,}")
LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
SPACED = re.compile("[\x0b\x0c\x1c-\x1f\x85\u2028\u2029]")   # those, and U+001F, that a line may hold: spaces
_BLANKS = re.compile(r"[^\S\r]+")   # whitespace (NBSP, U+3000 ...) but CR, which a reader takes for a line end


def normalize(text: str) -> str:
    """NFC, full-width ASCII as ASCII, terminal escape sequences, control and zero-width characters removed,
    whitespace runs (tab, NBSP, ...) collapsed, stripped, and joiners with nothing to join dropped (a word of them, or
    after ASCII or Hangul)."""
    # NFC: Korean typed or saved on macOS arrives as decomposed jamo (NFD), which the tokenizer would see as different,
    # longer strings than the same syllables in NFC; after the removals, which could leave a sequence NFC composes.
    text = INVISIBLE.sub("", ESCAPE_SEQUENCE.sub("", text)).translate(FULL_WIDTH)   # (sequences first: ESC is one)
    text, stray = _STRAY_JOINERS.subn("", unicodedata.normalize("NFC", text))
    words = (unicodedata.normalize("NFC", text) if stray else text).split()   # (jamo a joiner parted: composed)
    return " ".join(w for w in words if not JOINERS.fullmatch(w))


def control_characters(text: str) -> int:
    """How many control characters (NUL, ESC ...; not whitespace) `normalize` removes from `text`, but for those that
    start a terminal escape sequence (`ESCAPE_SEQUENCE`), which goes whole."""
    return len(_CONTROL.findall(ESCAPE_SEQUENCE.sub("", text)))


def removed_counts(*texts: str) -> Tuple[int, int]:
    """How many terminal escape sequences and how many control characters (`control_characters`) `normalize` removes
    from `texts`."""
    return sum(len(ESCAPE_SEQUENCE.findall(t)) for t in texts), sum(control_characters(t) for t in texts)


def removed_controls(*texts: str) -> str:
    """What `normalize` removes from `texts` of terminal escape sequences and control characters, for a warning
    ("" for none): "2 terminal escape sequence(s) (colours, cursor keys: ESC[31m ...) and 1 control character(s)"."""
    sequences, characters = removed_counts(*texts)
    said = [f"{sequences} terminal escape sequence(s) (colours, cursor keys: ESC[31m ...)"] if sequences else []
    return " and ".join(said + ([f"{characters} control character(s)"] if characters else []))


def lone_surrogate(text: str) -> str:
    """"" for valid Unicode; else where its first lone surrogate is (a JSON escape such as \\ud800, or bytes a
    terminal could not decode), which SentencePiece cannot take: "U+D800 at character 2"."""
    m = _SURROGATE.search(text)
    return f"U+{ord(m.group()):04X} at character {m.start()}" if m else ""


def one_line(text: str) -> str:
    """`text` with line-break characters (`LINE_BREAKS`) turned into spaces: one input line gives one output line."""
    return LINE_BREAKS.sub(" ", text)


def tidy_translation(text: str) -> str:
    """A translation decoded from pieces as one line (`one_line`) without the stray spaces a lone word-boundary piece
    ("▁") leaves at its ends or beside another (fairseq strips them too): "Thank  you. " -> "Thank you."."""
    return _SPACE_RUN.sub(" ", one_line(text)).strip(" ")


def count_lines(text: str, read: Optional[str] = None) -> int:
    """How many lines of `text` (split at `LINE_BREAKS`, as str.splitlines splits: LF, CR, U+2028, ...) have something
    on them that the model reads (not a zero-width space or control character alone: `normalize`). More than one in
    what should be one sentence means several: a model trained on sentences usually translates the first alone,
    leaving out the rest. `read`: `normalize(text)`, if known (a text without line breaks is then not read again)."""
    if read is not None and not LINE_BREAKS.search(text):
        return 1 if read else 0
    return sum(1 for part in LINE_BREAKS.split(text) if normalize(part))


def input_guard(max_input_tokens: int) -> int:
    """The bytes a source line is cut to as it is read (`cut_line`; nmt-translate's reader, `nmt.stream`): enough for
    the characters the Translator keeps of it, `max_input_tokens` x CHARS_PER_TOKEN, at 4 bytes (the longest UTF-8
    character) each."""
    return max_input_tokens * CHARS_PER_TOKEN * 4


def squeeze_blanks(pending: bytes) -> bytes:
    """The start of a line read so far as `normalize` would leave its blanks: invisible characters (zero-width
    spaces ...; not the control characters, which are counted later) dropped, leading whitespace dropped and runs of
    it made one space. Bytes that are no UTF-8 (a character cut at the end, invalid ones) are kept as they are."""
    text = pending.decode("utf-8", "surrogateescape")
    text = INVISIBLE.sub(lambda m: m.group() if control_characters(m.group()) else "", text)
    return _BLANKS.sub(" ", text).lstrip(" ").encode("utf-8", "surrogateescape")


def char_boundary(raw: bytes) -> bytes:
    """`raw` backed off to a character boundary (a partial UTF-8 sequence at its end dropped)."""
    end = len(raw)
    while end > 0 and (raw[end - 1] & 0xC0) == 0x80:
        end -= 1
    if end > 0 and raw[end - 1] >= 0xC0:
        end -= 1
    return raw[:end].rstrip(b"\r")


def cut_line(raw: bytes, max_bytes: int, part: int = 1 << 16) -> bytes:
    """A line held whole (a file read at once) that is longer than `max_bytes`, cut as nmt-translate's reader cuts
    it: its blanks squeezed (`squeeze_blanks`), `part` bytes at a time, until it holds more than `max_bytes`, then cut
    there at a character boundary. A line of hundreds of megabytes is neither decoded nor normalized whole."""
    kept, at = b"", 0
    while at < len(raw) and len(kept) <= max_bytes:
        kept, at = squeeze_blanks(kept + raw[at:at + part]), at + part
    return char_boundary(kept[:max_bytes]) if len(kept) > max_bytes else kept
