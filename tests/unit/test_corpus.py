"""Reading, validation, normalization and filtering of parallel text (synthetic files only)."""
import gzip
import random
import re
import shlex
import subprocess
import unicodedata
from pathlib import Path

import pytest

from nmt.cleaning import clean_training_pairs
from nmt.corpus import MAX_LINE_CHARS, CorpusError, Pairs, concat, read_lines, read_parallel, read_tsv
from nmt.rest_markup import strip_rest_markup
from nmt.text import normalize
from tests.synth import damaged

KO = ["안녕하세요.", "고양이가 잔다.", "비가 온다."]
EN = ["Hello.", "The cat sleeps.", "It is raining."]


def messages(records):
    return "\n".join(r.getMessage() for r in records)


# --- normalize ---------------------------------------------------------------------------------------------

def test_normalize_composes_decomposed_hangul():
    nfd = unicodedata.normalize("NFD", "한국어")
    assert len(nfd) == 8 and nfd != "한국어"   # jamo, as saved by macOS
    assert normalize(nfd) == "한국어"


def test_normalize_reads_full_width_ascii_as_ascii():
    """A Korean input method's full-width mode (HWP documents too) writes ＡＢＣ, １０ and ．，！？: each was an
    unseen character (byte pieces), so "ＴＶ를 봐요．" translated otherwise than "TV를 봐요." (BLEU 2.82 -> 1.21 on the
    test lines with Latin letters or digits, written full-width)."""
    assert normalize("ＴＶ를 봐요．") == "TV를 봐요." and normalize("１～２％，（ａ）！") == "1~2%,(a)!"
    assert normalize("ｶﾀｶﾅ　「가」") == "ｶﾀｶﾅ 「가」"   # (half-width katakana and CJK brackets are not ASCII's)


def test_normalize_whitespace_and_invisible_characters():
    text = "\ufeff  a\u200bb\x00c\td\u00a0\u00a0e\u3000f\x85g\u2028h\r  "
    assert normalize(text) == "abc d e f g h"
    assert normalize(" \t \u200b ") == ""


@pytest.mark.parametrize("mark", ["\u200e", "\u200f", "\u061c", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
                                  "\u2066", "\u2067", "\u2068", "\u2069", "\u00ad", "\u3164", "\uffa0", "\u115f",
                                  "\u1160", "\u2061", "\u2064", "\u180e",
                                  "\u206a", "\u206f", "\u2800", "\ufff9", "\ufffb", "\U00013430", "\U0001343f",
                                  "\U0001d173", "\U0001d17a"])
def test_characters_that_show_nothing_are_removed(mark):
    """Bidirectional marks and isolates, the soft hyphen and the Hangul fillers reached the model as byte pieces: a
    line that looked blank got a translation ("Hold it." for a lone LRM), and "고마워요." with an RLM another; then
    the deprecated, interlinear, musical and Egyptian format controls and the Braille blank ("I'm sick.")."""
    assert normalize(mark) == "" and normalize(f"{mark}고마{mark}워요.{mark}") == "고마워요."
    assert normalize("\U0001f469\u200d\U0001f4bb \u2764\ufe0f") == "\U0001f469\u200d\U0001f4bb \u2764\ufe0f"   # joined
    flag = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"   # England's: tags after a flag
    assert normalize(f"{flag} 가") == f"{flag} 가"


@pytest.mark.parametrize("mark", ["\u200d", "\u200c", "\u034f", "\ufe0f", "\u200d\ufe0f", "\u180b", "\u180c",
                                  "\U000e0001", "\U000e0020", "\U000e007f", "\U000e0100", "\U000e01ef",
                                  "\U0001bca0", "\u17b5"])
def test_a_word_of_joiners_alone_is_nothing(mark):
    """A line of a ZWJ alone was translated "I'm adder.", of a variation selector "You don't say."."""
    assert normalize(mark) == "" and normalize(f"가 {mark} 나") == "가 나"


@pytest.mark.parametrize("mark", ["\u200d", "\u200c", "\u034f", "\ufe0f", "\u200d\ufe0f", "\U000e0100"])
def test_a_joiner_with_nothing_to_join_is_removed_and_one_in_an_emoji_sequence_kept(mark):
    """Only a word of joiners went: a ZWJ or VS16 stuck to a Korean word ("오늘\u200d 날씨가 좋네요.") became three byte
    pieces, which changed the translation, though the docs say such joiners are removed."""
    for text in (f"오늘{mark} 날씨가", f"{mark}오늘 날씨가", f"오{mark}늘 날씨가", f"오늘 {mark}날씨가"):
        assert normalize(text).replace(" ", "") == "오늘날씨가", text
    assert normalize(f"Hello{mark} world") == "Hello world"
    for kept in ("\U0001f468\u200d\U0001f469\u200d\U0001f467", "1\ufe0f\u20e3", "\u2764\ufe0f", "\u00a9\ufe0f",
                 "\u845b\U000e0100"):   # a family, a keycap, a red heart, (c), an ideograph's variant
        assert normalize(f"가 {kept} 나") == f"가 {kept} 나", kept
    for text in (f"\uff34{mark}", f"\u212a{mark}", f"\uff41{mark}\uff42", f"\u1100{mark}\u1161"):   # folded first:
        assert normalize(text) == normalize(normalize(text)) == unicodedata.normalize("NFKC", text.replace(mark, ""))


def test_nfc_comes_after_what_is_removed():
    # "e", a zero-width space, then a combining acute: composed once the space between is gone
    assert normalize("e\u200b\u0301t\u00e9") == "\u00e9t\u00e9"


# --- read_parallel: good input ------------------------------------------------------------------------------

def test_read_parallel_aligned_and_normalized(write_file):
    ko = write_file("x.ko", [unicodedata.normalize("NFD", s) for s in KO])
    en = write_file("x.en", ["  " + s + "  " for s in EN])
    pairs = read_parallel(ko, en)
    assert pairs.src == KO and pairs.tgt == EN and pairs.name == "x" and pairs.dropped == {}
    assert all(unicodedata.is_normalized("NFC", s) for s in pairs.src)


def test_last_line_without_newline(write_file):
    pairs = read_parallel(write_file("a.ko", "\n".join(KO)), write_file("a.en", EN))
    assert pairs.src == KO and pairs.tgt == EN


def test_bom_is_stripped_with_warning(write_file, nmt_logs):
    ko = write_file("b.ko", b"\xef\xbb\xbf" + "\n".join(KO).encode() + b"\n")
    pairs = read_parallel(ko, write_file("b.en", EN))
    assert pairs.src[0] == KO[0] and not any("\ufeff" in s for s in pairs.src)
    assert "byte-order mark" in messages(nmt_logs) and str(ko) in messages(nmt_logs)


def test_utf16_is_rejected(write_file):
    ko = write_file("u.ko", "\n".join(KO).encode("utf-16"))
    with pytest.raises(CorpusError, match="UTF-16.*iconv"):
        read_parallel(ko, write_file("u.en", EN))


def test_crlf_converted_with_warning(write_file, nmt_logs):
    ko = write_file("c.ko", "\r\n".join(KO) + "\r\n")
    pairs = read_parallel(ko, write_file("c.en", EN))
    assert pairs.src == KO and not any("\r" in s for s in pairs.src)
    assert "3 CRLF" in messages(nmt_logs)


def test_a_carriage_return_inside_a_line_is_an_error_naming_it(write_file):
    """nmt-translate refused such a line while nmt-score, nmt-evaluate and training read it as one sentence with a
    space: the translation of the two sentences left one out."""
    from nmt.corpus import read_lines
    ko = write_file("r.ko", "고마워요.\r오늘 날씨가 좋네요.\n" + "\n".join(KO[1:]) + "\n")
    with pytest.raises(CorpusError, match=r"r.ko:1: a carriage return \(CR\) splits the line into 2 lines") as e:
        read_parallel(ko, write_file("r.en", EN))
    assert "tr '\\r' ' '" in str(e.value)
    with pytest.raises(CorpusError, match="r.ko:1: a carriage return"):
        read_lines(ko, keep_blank_end=True)
    # a CR before the line end (CRLF) or beside only blanks is no second line
    assert read_lines(write_file("e.ko", "가 \r \r\n나\r\n")) == ["가", "나"]


def test_blank_ends_are_dropped_only_where_every_file_is_blank(tmp_path, nmt_logs):
    from nmt.corpus import drop_blank_ends
    a, b, c = ["x", "y", "", ""], ["x", "", "", "", ""], ["x", "y", "z", ""]
    drop_blank_ends([("a", a), ("b", b), ("c", c)])
    assert (a, b, c) == (["x", "y", ""], ["x", "", ""], ["x", "y", "z"])   # line 3 has text in c
    assert "b: ignored 2 blank line(s) at the end" in messages(nmt_logs)


def test_cr_only_line_ends_are_an_error(write_file):
    ko = write_file("m.ko", "\r".join(KO) + "\r")
    with pytest.raises(CorpusError, match="CR only") as e:
        read_parallel(ko, write_file("m.en", EN))
    assert str(ko) in str(e.value)
    # one LF at the end (as an editor or `echo >>` adds) took it for a line split by stray CRs, whose advice
    # (`tr '\r' ' '`) made the file one line
    ko = write_file("n.ko", "\r".join(KO) + "\r\n")
    with pytest.raises(CorpusError, match=r"n.ko: line ends are CR only \(old Mac format: 2 CR, 1 LF\), so the file "
                                          r"reads as one line; convert them, e.g. `tr '\\r' '\\n'"):
        read_parallel(ko, write_file("n.en", EN))
    # the command as given works: a path with a space quoted, a compressed file read by zcat (`tr` over gzip's bytes
    # made a damaged gzip file)
    import gzip
    spaced = write_file("my data/m k.ko", "\r".join(KO) + "\r")
    packed = spaced.with_name("p.ko.gz")
    packed.write_bytes(gzip.compress(spaced.read_bytes()))
    for path, made in ((spaced, spaced.with_name("m k.lf.ko")), (packed, packed.with_name("p.lf.ko"))):
        with pytest.raises(CorpusError) as e:
            read_parallel(path, write_file("n.en", EN))
        command = re.search("e.g. `(.*)`$", str(e.value))[1]
        subprocess.run(command, shell=True, check=True)
        assert read_parallel(made, write_file("n.en", EN)).src == KO, command


def test_trailing_blank_lines_ignored_with_warning(write_file, nmt_logs):
    pairs = read_parallel(write_file("t.ko", KO + ["", "  "]), write_file("t.en", EN))
    assert len(pairs) == 3
    assert "2 blank line(s) at the end" in messages(nmt_logs)


def test_reading_a_large_file_says_how_far_it_got(write_file, nmt_logs, monkeypatch):
    """Normalizing each side of a 2 M-pair corpus took minutes on a busy host, and nmt-train said nothing from its
    settings to the pairs kept: each file read logs how far it got every REPORT_SECONDS (here at every line), not
    after its last line, which the next line of the log says."""
    from nmt import log
    monkeypatch.setattr(log, "REPORT_SECONDS", 0.0)
    ko = write_file("big.ko", KO)
    assert read_lines(ko) == KO
    said = [r.getMessage() for r in nmt_logs if "so far" in r.getMessage()]
    assert said == [f"{ko}: {n} of 3 lines read so far" for n in (1, 2)]


def test_a_blank_last_line_against_a_translation_is_a_pair_dropped_not_a_count_error(write_file, nmt_logs):
    """The blank end of one file was dropped before the files were aligned, so a last sentence missing its
    translation was "line counts differ: ... has 2 lines" where both files have 3."""
    ko, en = write_file("b.ko", KO[:2] + [""]), write_file("b.en", EN)
    pairs = read_parallel(ko, en)
    assert len(pairs) == 2 and pairs.dropped == {"empty_line": 1}
    assert f"{ko} / {en}: dropped 1 pair(s) with an empty side: line 3" in messages(nmt_logs)


def test_files_shifted_by_a_line_with_a_blank_end_are_said_to_look_misaligned(write_file, nmt_logs):
    """A blank line inserted in one file and one added at the end of the other: the counts agree, and every pair
    after the first blank is misaligned; it said only "dropped 2 pair(s) with an empty side"."""
    ko, en = write_file("s.ko", [KO[0], "", *KO[1:]]), write_file("s.en", [*EN, ""])
    assert len(read_parallel(ko, en)) == 2
    assert (f"{ko} / {en}: dropped 2 pair(s) with an empty side: line 2, 4; the last line is blank on one side only: "
            "are the files misaligned, a sentence missing from one of them?") in messages(nmt_logs)
    nmt_logs.clear()
    read_parallel(write_file("i.ko", [KO[0], "", KO[2]]), write_file("i.en", EN))   # not at the end: no such hint
    assert "dropped 1 pair(s) with an empty side: line 2" in messages(nmt_logs)
    assert "misaligned" not in messages(nmt_logs)


@pytest.mark.parametrize("text, read, said", [
    ("\x1b[31m빨강\x1b[0m 글씨", "빨강 글씨", "2 terminal escape sequence(s)"),   # ls --color, grep, a logger
    ("grep \x1b[01;31m\x1b[Kword\x1b[m\x1b[K", "grep word", "4 terminal escape sequence(s)"),
    ("a\x1b[Db", "ab", "1 terminal escape sequence(s)"),   # a cursor key typed where nothing edits the line
    ("\x1b[?25l진행\x1b[?25h \x1b[2 q끝", "진행 끝", "3 terminal escape sequence(s)"),   # private mode, intermediate
    ("\x1b]8;;https://x.org\x1b\\link\x1b]8;;\x07 ok", "link ok", "2 terminal escape sequence(s)"),   # OSC 8
    ("\x1b(B\x1b[m plain", "plain", "2 terminal escape sequence(s)"),   # tput sgr0
    ("\x9b1;2Hx\x9d0;t\x9cy", "xy", "2 terminal escape sequence(s)"),   # the C1 forms
    ("\x9bNext \x9b Products \x9b12 가", "Next Products 12 가", "3 control character(s)"),   # "›" read as Latin-1
    ("\x9b?25l\x9b0;1m굵게\x9b0 q 끝", "굵게 끝", "3 terminal escape sequence(s)"),   # but a parameter makes it CSI
    # U+009D (OSC) and U+009C (ST) of curly quotes' UTF-8 read as Latin-1 ("” ... “"): the words between stay
    ("\xe2\x80\x9cHi,\xe2\x80\x9d he said. \xe2\x80\x9cBye.\xe2\x80\x9d", "\xe2Hi,\xe2 he said. \xe2Bye.\xe2",
     "8 control character(s)"),
    ("가\x9d나 다\x9c라 \x9d2 마\x9c", "가나 다라 2 마", "4 control character(s)"),   # Korean, a digit: not OSC
    ("\x9d0;t\x9c\x9d8;;u\x9cl\x9d104\x07 끝", "l 끝", "3 terminal escape sequence(s)"),   # a parameter: OSC
    ("\x1b[31m가\x00나", "가나", "1 terminal escape sequence(s) (colours, cursor keys: ESC[31m ...) and 1 control "
                                   "character(s)"),
    ("lone \x1b x", "lone x", "1 control character(s)"),   # an ESC that starts no sequence goes alone
    ("안녕\x1bOP하세요 \x1bOA", "안녕하세요", "2 terminal escape sequence(s)"),   # F1, an arrow key (SS3): "OP" stayed
    ("가\x1b[[A나 \x1b[[E끝", "가나 끝", "2 terminal escape sequence(s)"),   # the Linux console's F1, F5: "A" stayed
    ("안녕\x1bO하세요 \x1bO", "안녕하세요", "2 terminal escape sequence(s)"),   # ESC O, not SS3: "O" stayed
    ("가\x1bO 나 \x1bO1 \x1bN~다", "가 나 1 다", "3 terminal escape sequence(s)"),   # SS3 took the space, the digit
    ("\x1b7a\x1bbc\x1b8 \x1b=d\x1b>", "ac d", "5 terminal escape sequence(s)"),   # a cursor saved, Alt+b, keypad
    ("\x1b]0;no end \x1bP1", "]0;no end P1", "2 control character(s)"),   # strings (OSC, DCS) unended: ESC alone
    ("[31m plain", "[31m plain", ""),
])
def test_terminal_escape_sequences_are_removed_whole(text, read, said):
    """A colour code kept its text: its ESC was removed as a control character, leaving "[31m" and "[0m" in the line
    (with a warning that counted 2 control characters). The whole sequence goes now, wherever control characters
    are removed (`normalize`: corpora, nmt-translate, the service), and the warnings count sequences as such."""
    from nmt.text import removed_controls
    assert normalize(text) == read
    assert removed_controls(text).startswith(said) and bool(removed_controls(text)) == bool(said)


def test_a_line_with_a_colour_code_is_said_naming_the_line(write_file, nmt_logs):
    """In a corpus file (training, dev or test data) and in nmt-translate's input, the warning names the sequences."""
    from nmt.stream import StreamStats, _read_line
    ko = write_file("c.ko", [KO[0], "\x1b[1;32m고양이가\x1b[0m 잔다.", KO[2]])
    assert read_parallel(ko, write_file("c.en", EN)).src == KO
    said = messages(nmt_logs)
    assert f"{ko}: 1 line(s) with terminal escape sequence(s) (colours, cursor keys: ESC[31m ...), removed whole: " \
           "line 2" in said and "control character" not in said
    nmt_logs.clear()
    stats = StreamStats()
    line = "\x1b[31m고마워요.\x1b[0m\x07"
    assert _read_line(line.encode(), False, 3, ("in.ko", None), "error", False, stats) == (line, None)
    assert (stats.escapes, stats.controls) == (1, 1) and messages(nmt_logs) == (
        "in.ko:3: 2 terminal escape sequence(s) (colours, cursor keys: ESC[31m ...) and 1 control character(s) "
        "removed before translating")


def test_a_target_prefixs_escape_sequences_are_said_with_the_texts(nmt_logs):
    """nmt-translate --json-input removes them from a line's "target_prefix" too, and its warning counts them there
    (`removed_controls` of the text and the prefix)."""
    import json
    from nmt.stream import StreamStats, _read_line
    from nmt.text import removed_controls
    said = "terminal escape sequence(s) (colours, cursor keys: ESC[31m ...)"
    assert removed_controls("가", "\x1b[31m나") == f"1 {said}"
    assert removed_controls("\x1b[0m가\x00", "\x1b[31m나\x07") == f"2 {said} and 2 control character(s)"
    stats = StreamStats()
    line = json.dumps({"text": "고마워요.", "target_prefix": "\x1b[32mThank\x1b[0m"})
    assert _read_line(line.encode(), False, 4, ("in.jsonl", None), "error", True, stats) == (
        "고마워요.", "\x1b[32mThank\x1b[0m")
    assert (stats.escapes, stats.controls) == (1, 0)   # (counted apart: it lost no control character)
    assert messages(nmt_logs) == f"in.jsonl:4: 2 {said} removed before translating"


def test_the_summary_counts_lines_with_sequences_and_with_control_characters_apart(nmt_logs):
    """nmt-translate's closing line counted a line that lost only a colour code as one "with control characters
    removed", where its own warning had said "1 terminal escape sequence(s)": the two are counted apart, a line with
    both in both, and the per-line warnings stop after `CONTROL_WARNINGS` lines with either."""
    from types import SimpleNamespace
    from nmt.cli_decode import _summary
    from nmt.stream import CONTROL_WARNINGS, StreamStats, _read_line
    stats = StreamStats()
    lines = ["\x1b[31m가\x1b[0m", "\x00나", "\x1b[1m다\x07", "라"] + ["\x1bOP마"] * CONTROL_WARNINGS
    for i, line in enumerate(lines, 1):
        _read_line(line.encode(), False, i, ("in.ko", None), "error", False, stats)
    warned = [r.getMessage() for r in nmt_logs if "removed before translating" in r.getMessage()]
    last = " (the last such warning; the summary counts them all)"   # (on the last one said, and only there)
    assert [w.endswith(last) for w in warned] == [False] * (CONTROL_WARNINGS - 1) + [True], warned
    nmt_logs.clear()
    tr = SimpleNamespace(truncated=0, cut_off=0, left_out=0, src_lang="ko", tgt_lang="en")
    _summary(tr, stats, "in.ko", [0, 0, 0])   # (it said "; 8 with control characters removed")
    assert messages(nmt_logs).endswith(f"; {2 + CONTROL_WARNINGS} with terminal escape sequences removed; 2 with "
                                       "control characters removed")
    assert (stats.escapes, stats.controls) == (2 + CONTROL_WARNINGS, 2)
    nmt_logs.clear()
    for stats in (StreamStats(lines=3, escapes=1), StreamStats(lines=3, controls=1), StreamStats(lines=3)):
        _summary(tr, stats, "in.ko", [0, 0, 0])   # (what none lost is not said: no "; 0 with ...")
    assert [m.split(" lines/s)")[1] for m in messages(nmt_logs).splitlines()] == [
        "; 1 with terminal escape sequences removed", "; 1 with control characters removed", ""]


def test_a_streams_output_is_opened_once_at_its_first_line_read_well(monkeypatch):
    """`translate_stream` given a function that opens its output (nmt-translate's --output, which replaces a file):
    called once, as the first line is read well (before its chunk is translated: an output that cannot be opened is
    said before the work), or at the end of an empty input; not for a line refused at the start."""
    import io
    from nmt import stream
    from nmt.corpus import CorpusError
    said = []
    monkeypatch.setattr(stream, "translation_rows", lambda tr, lines, first, *rest: (
        said.append(f"translate {first}+{len(lines)}") or ([x.upper() for x in lines], [[] for _ in lines])))

    def run(raw, **kw) -> str:
        said.clear()
        out = io.StringIO()
        stream.translate_stream(None, [(x, False) for x in raw], lambda: said.append("open") or out, name="in.ko",
                                chunk_lines=2, **kw)
        return out.getvalue()
    assert run([b"a", b"b", b"c"]) == "A\nB\nC\n" and said == ["open", "translate 1+2", "translate 3+1"]
    assert run([]) == "" and said == ["open"]
    refused = []
    assert run([b"\xff", b"a"], on_bad_line=refused.append) == "A\n" and said == ["open", "translate 2+1"]
    assert [str(e).split(":")[:2] for e in refused] == [["in.ko", "1"]]
    with pytest.raises(CorpusError, match="in.ko:1: invalid UTF-8"):
        run([b"\xff", b"a"])
    assert said == []


def test_a_one_line_file_ended_by_a_cr_is_that_line(write_file):
    """'고마워요.\\r' was "line ends are CR only (old Mac format), so the whole file reads as one line": it is one."""
    assert read_parallel(write_file("o.ko", KO[0] + "\r"), write_file("o.en", EN[:1])).src == KO[:1]
    with pytest.raises(CorpusError, match="CR only"):   # two lines ended so are still refused
        read_parallel(write_file("t.ko", KO[0] + "\r" + KO[1] + "\r"), write_file("t.en", EN[:2]))


def test_what_reading_changes_in_a_line_is_said_naming_the_lines(write_file, nmt_logs):
    """Control characters were removed and U+2028 or a form feed inside a training line read as a space without a
    word (nmt-translate warned of the same); a TSV file given as one side was trained on as sentences of both
    languages."""
    ko = write_file("c.ko", [KO[0], "안녕\x00하세요.", "좋아요.\u2028나빠요.", "좋아요.\x0c나빠요.", "좋아요.\x1f나빠요."])
    en = write_file("c.en", [*EN, "Good. Bad.", "Good. Bad."])
    pairs = read_parallel(ko, en)
    assert pairs.src[1:] == ["안녕하세요.", "좋아요. 나빠요.", "좋아요. 나빠요.", "좋아요. 나빠요."]
    said = messages(nmt_logs)
    assert f"{ko}: 1 line(s) with control character(s), removed: line 2" in said
    assert (f"{ko}: 3 line(s) with a line break or separator other than LF (U+2028, form feed, U+001F, ...), read as "
            "a space: line 3, 4, 5") in said
    assert "tab" not in said
    tsv = write_file("p.tsv", [f"{k}\t{e}" for k, e in zip(KO, EN)])
    read_parallel(tsv, write_file("p.en", EN))
    assert (f"{tsv}: every line holds a tab, read as a space: the columns of a TSV file? give one file per side "
            f"(e.g. `cut -f1 {shlex.quote(str(tsv))}`)") in messages(nmt_logs)
    nmt_logs.clear()   # two lines are columns too, a blank line between them none
    two = write_file("two.tsv", [f"{KO[0]}\t{EN[0]}", "", f"{KO[1]}\t{EN[1]}"])
    assert read_lines(two) == [f"{KO[0]} {EN[0]}", "", f"{KO[1]} {EN[1]}"]
    assert f"{two}: every line holds a tab, read as a space" in messages(nmt_logs)
    nmt_logs.clear()
    read_lines(write_file("one.ko", [f"{KO[0]}\t{EN[0]}"]))   # one line's tab: no sign of columns
    assert "tab" not in messages(nmt_logs)


def test_a_max_chars_over_the_line_limit_is_taken_and_the_limit_named(write_file, tmp_path):
    """--max-chars was bounded at 20000 for a while: the models trained with a higher one could no longer load. It is
    taken again; a longer line is refused as it is read, whatever --max-chars, and the error says so."""
    from nmt.config import Config, DataConfig
    path = tmp_path / "c.json"
    Config(data=DataConfig(max_chars=100_000)).save(path)
    assert Config.load(path).data.max_chars == 100_000
    with pytest.raises(CorpusError, match=rf"l.ko:2: line is {MAX_LINE_CHARS + 1} characters long \(limit "
                                          rf"{MAX_LINE_CHARS}, for every file read, whatever --max-chars\)"):
        read_parallel(write_file("l.ko", [KO[0], "가" * (MAX_LINE_CHARS + 1)]), write_file("l.en", EN[:2]))


def test_a_huge_source_line_is_cut_before_it_is_normalized(write_file, nmt_logs, monkeypatch):
    """nmt-score and nmt-evaluate read a --src-file line of 100 MB whole and normalized it (1.3 GB, 69 s) before the
    Translator cut it to 4,000 characters; nmt-translate cuts while reading. Sources read for a Translator
    (`max_input_tokens`) are cut as nmt-translate cuts them: normalize never sees more than the input guard, the
    characters the Translator keeps are the same, and lines under the guard are read as before."""
    import nmt.corpus
    from nmt.text import input_guard
    guard, keep = input_guard(250), 250 * 16   # (bytes; the characters the Translator keeps of a line)
    huge = " \u200b " * 100_000 + "가나다 abc\t\tdef " * 200_000   # ~4 MB: blanks first, which do not count
    lines = [KO[0], huge, "x" * 30_000, KO[2] + " \x1b[31m"]
    path = write_file("big.ko", lines)
    seen, real = [], nmt.corpus.normalize
    monkeypatch.setattr(nmt.corpus, "normalize", lambda t: seen.append(len(t.encode())) or real(t))
    read = read_lines(path, keep_blank_end=True, blank_ok=True, max_input_tokens=250)
    assert max(seen) <= guard and len(read) == 4
    assert [read[0], read[3]] == [KO[0], KO[2]]
    assert [t[:keep].rstrip() for t in read[1:3]] == [normalize(t)[:keep].rstrip() for t in lines[1:3]]
    assert f"big.ko: 2 line(s) longer than the input guard ({guard} bytes: --max-input-tokens x 64), cut there " \
           "while reading (any length said next is the cut line's): line 2, 3" in messages(nmt_logs)
    monkeypatch.setattr(nmt.corpus, "normalize", real)
    assert read_lines(path, max_line_chars=None, keep_blank_end=True)[::3] == read[::3]   # (as before)
    with pytest.raises(CorpusError, match=r"big.ko:2: line is \d+ characters long"):   # (no source: refused)
        read_lines(path)


def test_archives_and_compressed_files_not_read_are_named_as_such(tmp_path):
    """A zstd file was "invalid UTF-8 ... often CP949", a .tgz "UTF-16 (or not text ...)", and a bad byte in a .gz
    was to be fixed by `iconv` on the gzip file itself."""
    import gzip
    import io
    import tarfile
    from nmt.corpus import read_lines
    text = "안녕하세요.\n고마워요.\n".encode()
    (tmp_path / "a.ko.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(range(40)))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("a.ko")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    (tmp_path / "a.tgz").write_bytes(buffer.getvalue())
    for name, what in (("a.ko.zst", "zstd data"), ("a.tgz", "a tar archive")):
        with pytest.raises(CorpusError, match=f"{name}: this is {what}, not text; extract or decompress the file"):
            read_lines(tmp_path / name)
    (tmp_path / "bad.ko.gz").write_bytes(gzip.compress(text + "고양이\n".encode("cp949")))
    zcat = re.escape(f"`zcat {shlex.quote(str(tmp_path / 'bad.ko.gz'))} | iconv -f CP949")
    with pytest.raises(CorpusError, match=r"bad\.ko\.gz:3: invalid UTF-8 .*" + zcat):
        read_lines(tmp_path / "bad.ko.gz")
    # GNU tar's magic too; a text with "ustar" at the magic's offset (a word such as "mustard") stays text
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(text))
    (tmp_path / "gnu.tar").write_bytes(buffer.getvalue())
    with pytest.raises(CorpusError, match="gnu.tar: this is a tar archive, not text"):
        read_lines(tmp_path / "gnu.tar")
    (tmp_path / "must.en").write_text("I like it.\n" * 23 + "No mustard.\n")   # ("ustar" at bytes 257-261)
    assert read_lines(tmp_path / "must.en")[-1] == "No mustard."


@pytest.mark.parametrize("codec, named, name", [
    ("utf-32", "UTF-32", "w.ko"), ("utf-32-le", "UTF-32LE", "w.ko"), ("utf-32-be", "UTF-32BE", "my w.ko"),
    ("utf-16", "UTF-16", "w.ko"), ("utf-16-be", "UTF-16BE", "w.ko"), ("utf-16-le", "UTF-16LE", "my w.ko.gz"),
    ("utf-32-le", "UTF-32LE", "w.ko.xz"), ("utf-16-le", "UTF-16LE", "-w.ko")])
def test_utf32_and_utf16_are_named_with_a_conversion_that_works(tmp_path, codec, named, name):
    """UTF-32 was named UTF-16 (its byte-order mark starts with UTF-16's; without one, any character past U+FFFF made
    it UTF-16LE), and the advice `iconv -f UTF-16 ... > out.txt` made a file refused again, whose own advice then
    wrote out.txt over itself. A path with a space was not quoted, and a compressed file was given to iconv as it
    is. Following the advice now works."""
    import lzma
    from nmt.corpus import read_lines
    path, text = tmp_path / name, "안녕하세요. Hello. 😀\n고마워요.\n"
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "wb") as f:
        f.write(text.encode(codec))
    with pytest.raises(CorpusError) as err:
        read_lines(path)
    command = re.search(r"`(.*iconv .*)`$", str(err.value)).group(1)
    converted = tmp_path / name.replace("w.ko", "w.utf8.ko").removesuffix(".gz").removesuffix(".xz")
    assert str(err.value).startswith(f"{path}: the file is {named} (") and command.endswith(
        f"iconv -f {named} -t UTF-8{'' if opener is not open else ' ' + shlex.quote(str(path))} > "
        f"{shlex.quote(str(converted))}")
    subprocess.run(command, shell=True, check=True)
    assert read_lines(converted) == ["안녕하세요. Hello. 😀", "고마워요."]
    if name == "w.ko":   # relative, from its directory: a name starting with "-" is not taken for an option
        rel = read_lines_error(tmp_path, "-w.ko")
        subprocess.run(re.search(r"`(.*iconv .*)`$", rel).group(1), shell=True, check=True, cwd=tmp_path)


def read_lines_error(directory, name: str) -> str:
    from nmt.corpus import read_lines
    import os
    (directory / name).write_bytes((directory / "w.ko").read_bytes())
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        with pytest.raises(CorpusError) as err:
            read_lines(name)
        return str(err.value)
    finally:
        os.chdir(cwd)


def test_utf16_lines_of_one_character_are_not_taken_for_utf32():
    """"네\n응\n..." in UTF-16LE has a line end in every UTF-32 character's third byte: it was named UTF-32LE, whose
    advice made one line of plane-10 characters."""
    from nmt.textfile import wide_encoding
    assert wide_encoding("".join(c + "\n" for c in "네응예아오헉와좋음" * 20).encode("utf-16-le"))[0] == "UTF-16LE"
    assert wide_encoding(("\n" * 50).encode("utf-16-le"))[0] == "UTF-16LE"


def test_utf16_without_a_byte_order_mark_and_blank_files_are_named_as_such(tmp_path):
    """UTF-16 without a BOM was "invalid UTF-8" with a hint to convert from CP949; a file of blank lines "empty"."""
    from nmt.corpus import read_lines
    (tmp_path / "u.ko").write_bytes("안녕하세요. 고마워요.\n".encode("utf-16-le") * 3)
    with pytest.raises(CorpusError, match=r"u.ko: the file is UTF-16LE \(or not text: NUL bytes fill its start\); "
                                          r"convert it to UTF-8, e.g. `iconv -f UTF-16LE"):
        read_lines(tmp_path / "u.ko")
    (tmp_path / "b.ko").write_text("\n  \n\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"b.ko: the file has only blank lines; give a file with one sentence"):
        read_lines(tmp_path / "b.ko")
    (tmp_path / "n.ko").write_bytes("안녕\x00하세요.\n".encode())   # one stray NUL: a control character, removed
    assert read_lines(tmp_path / "n.ko") == ["안녕하세요."]


# --- read_parallel: bad input -------------------------------------------------------------------------------

def test_mismatched_line_counts_name_both_files_and_counts(write_file):
    ko, en = write_file("d.ko", KO), write_file("d.en", EN[:2])
    with pytest.raises(CorpusError) as e:
        read_parallel(ko, en)
    msg = str(e.value)
    assert str(ko) in msg and str(en) in msg and "3 lines" in msg and "has 2" in msg
    with pytest.raises(CorpusError, match=r"has 1 line but .* has 3\. Parallel files"):   # was "has 1 lines"
        read_parallel(write_file("o.ko", KO[:1]), write_file("o.en", EN))


def test_invalid_utf8_names_file_and_line(write_file):
    ko = write_file("e.ko", b"1.\n" + "고양이".encode("cp949") + b"\n" + KO[2].encode("cp949") + b"\n")
    with pytest.raises(CorpusError) as e:
        read_parallel(ko, write_file("e.en", EN))
    msg = str(e.value)
    assert f"{ko}:2:" in msg and "invalid UTF-8" in msg and "--skip-invalid-utf8" in msg
    assert ("Korean legacy text is often CP949: `iconv -f CP949 -t UTF-8 "
            f"{shlex.quote(str(ko))} > {shlex.quote(str(ko.with_name('e.utf8.ko')))}`") in msg
    # a UTF-8 file with one line in CP949: converting it whole, as advised, failed ("illegal input sequence")
    def quoted(path) -> str:   # (a path in a command: quoted where needed, e.g. a $TMPDIR with a space)
        return re.escape(shlex.quote(str(path)))
    mixed = write_file("m.ko", KO[0].encode() + b"\n" + "고양이".encode("cp949") + b"\n" + KO[2].encode() + b"\n")
    with pytest.raises(CorpusError, match=r"m.ko:2: invalid UTF-8 \(byte 0xb0 at byte 1 of the line\)\. Line 1 is UTF-8 "
                                          r"text, so this line may be the only one in another encoding \(it reads as "
                                          r"CP949\), .*: correct or delete the line; if the whole file is CP949, "
                                          rf"convert it \(`iconv -f CP949 -t UTF-8 {quoted(mixed)} > "
                                          rf"{quoted(mixed.with_name('m.utf8.ko'))}`\), or pass --skip-invalid-utf8"):
        read_parallel(mixed, write_file("m.en", EN))
    first = write_file("f.ko", "고양이".encode("cp949") + b"\n" + KO[1].encode() + b"\n" + KO[2].encode() + b"\n")
    with pytest.raises(CorpusError, match=r"f.ko:1: .*\. Line 2 is UTF-8 text, so this line may be the only one"):
        read_parallel(first, write_file("f.en", EN))   # (the stray line first: only the lines before it were looked at)
    # an English file in Latin-1 or Windows-1252 got the CP949 command too, which would make Hangul of its accents
    en = write_file("l.en", EN[0].encode() + b"\n" + "\u201cCaf\u00e9\u201d au lait.".encode("cp1252") + b"\n" +
                    EN[2].encode() + b"\n")
    with pytest.raises(CorpusError, match=r"l.en:2: .*the line reads as Windows-1252 \(Latin-1\) text: `iconv -f "
                                          rf"CP1252 -t UTF-8 {quoted(en)} > {quoted(en.with_name('l.utf8.en'))}`"):
        read_parallel(write_file("k.ko", KO), en)
    from nmt.textfile import encoding_of, to_utf8_hint   # Hangul anywhere in the line (it was looked for at its start alone), any
    assert to_utf8_hint('Tom은 "집"에'.encode("cp949"), "my in.ko", None) == \
        "Korean legacy text is often CP949: `iconv -f CP949 -t UTF-8 'my in.ko'`"   # Windows-1252 sign; a quoted path
    assert to_utf8_hint("Nestl\u00e9\u2122 \u2022 caf\u00e9".encode("cp1252"), "a.en", "xz") == \
        "the line reads as Windows-1252 (Latin-1) text: `xzcat a.en | iconv -f CP1252 -t UTF-8`"
    # a smart quote or dash before a letter reads as one CP949 syllable glued to Latin letters ("don\x92t": "don뭪"):
    # English, which the CP949 command would have turned into such Hangul without a word
    for english in ("I don\u2019t know.", "\u201cHello,\u201d he said \u2014 twice."):
        assert encoding_of(english.encode("cp1252")) == "CP1252", english
    for korean in ("네.", "Python의 새 기능", "감사합니다"):   # one syllable apart from Latin letters, or two in a row
        assert encoding_of(korean.encode("cp949")) == "CP949", korean


def test_bytes_no_conversion_reads_are_not_called_an_encoding(write_file):
    """A UTF-8 file cut by bytes (`cut -b1-40`), a binary file and bytes no legacy encoding reads were all "in
    another encoding (it reads as CP949)", with an iconv command that fails on them."""
    cut = KO[0].encode()[:-2]   # ("." and the last byte of 요)
    for content, said in ((KO[1].encode() + b"\n" + cut + b"\n", "a UTF-8 character is cut off at the end of the line"),
                          (KO[1].encode() + b"\n\x89PNG\x1a\x00\x00IHDR\xff\x01\n", "it holds binary bytes"),
                          (b"x\x81\x20y\n", "it is not CP949 text either, so no conversion reads it")):
        ko = write_file("b.ko", content + KO[2].encode() + b"\n")
        with pytest.raises(CorpusError) as e:
            read_parallel(ko, write_file("b.en", EN[:len(content.splitlines()) + 1]))
        assert f": {said}" in str(e.value) and "iconv" not in str(e.value) and "correct or delete the line" in str(
            e.value), str(e.value)
    # a Latin-1 line ending in an accented letter (a UTF-8 lead byte) is Latin-1, not a cut character
    en = write_file("c.en", EN[0].encode() + b"\n" + "Let us go to the caf\u00e9".encode("latin-1") + b"\n" +
                    EN[2].encode() + b"\n")
    with pytest.raises(CorpusError, match=r"c.en:2: .*the line reads as Windows-1252 \(Latin-1\) text: `iconv -f "
                                          r"CP1252"):
        read_parallel(write_file("k.ko", KO), en)
    # cut after ASCII, in a file of UTF-8 beyond it (`head -c` into "API 함"), is a cut, not CP1252
    ko = write_file("h.ko", KO[0].encode() + b"\n" + b"API " + "함".encode()[:1] + b"\n" + KO[2].encode() + b"\n")
    with pytest.raises(CorpusError, match=r"h.ko:2: .*: a UTF-8 character is cut off at the end of the line"):
        read_parallel(ko, write_file("h.en", EN))
    text = write_file("p.en", ["%PDF-1.7 is the latest version.", "GIF89a is a format.", EN[2]])   # text: read
    assert read_parallel(write_file("p.ko", KO), text).tgt[:2] == ["%PDF-1.7 is the latest version.",
                                                                    "GIF89a is a format."]
    # a file whose format has a signature: its first line (a PNG's "\x89PNG") read as CP949 and CP1252
    for head, kind in ((b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "a PNG image"),
                       (b"\x12\x01" + b"\x00" * 14, "an MXNet parameter file (params.*)"), (b"%PDF-1.7\n", "a PDF document")):
        with pytest.raises(CorpusError, match=rf"b.bin: this is {re.escape(kind)}, not text: give a file of sentences"):
            read_parallel(write_file("b.bin", head + b"\xff\x00 x\n" * 3), write_file("b.en", EN))
    import io
    from nmt.stream import decode_line, read_raw_lines   # (nmt-translate's input)
    with pytest.raises(CorpusError, match=r"^the input is a PNG image, not text: give sentences, one per line$"):
        list(read_raw_lines(io.BytesIO(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\n"), max_bytes=100))
    with pytest.raises(CorpusError, match="of the line\\); the translations of all lines before it have been written. "
                                          "A UTF-8 character is cut off at the end of the line .*: correct or delete "
                                          "the line, or pass --on-invalid-utf8 replace"):
        decode_line(cut, 2, "in.ko", utf8_text=1)
    with pytest.raises(CorpusError, match="A UTF-8 character is cut off at the end of the line"):
        decode_line(b"OK \xea\xb0", 2, "in.ko", utf8_text=1)   # (after ASCII alone, in Korean input)
    assert list(read_raw_lines(io.BytesIO(b"%PDF-1.7 is a version.\n"), max_bytes=100)) == [
        (b"%PDF-1.7 is a version.", False)]


def test_replaced_invalid_utf8_is_warned_of_for_the_first_lines_and_counted_for_all(nmt_logs):
    """nmt-translate --on-invalid-utf8 replace on a CP949 file warned once per line (100,000 warnings for as many
    lines), where lines with control characters are named for the first five and counted in the summary."""
    from nmt.stream import CONTROL_WARNINGS, StreamStats, _read_line
    stats = StreamStats()
    for n in range(1, 9):
        _read_line("안녕하세요.".encode("cp949"), False, n, ("in.ko", None), "replace", False, stats)
    said = [r.getMessage() for r in nmt_logs if "replaced by U+FFFD" in r.getMessage()]
    assert len(said) == CONTROL_WARNINGS and stats.invalid_utf8 == 8
    assert said[0].startswith("in.ko:1: ") and said[-1].endswith("(the last such warning; the summary counts them all)")


def test_a_line_of_utf8_korean_and_cp949_bytes_is_not_to_be_converted(write_file):
    """A line holding CP949 bytes beside UTF-8 Hangul was called Windows-1252, and the `iconv -f CP1252` advised ran
    without an error and made all of the file's Korean mojibake."""
    from nmt.stream import decode_line
    mixed = "나는".encode("cp949") + " 고마워요.".encode()
    with pytest.raises(CorpusError, match="it holds UTF-8 Korean beside bytes of another encoding .*; correct or "
                                          "delete the line") as e:
        read_parallel(write_file("x.ko", mixed + "\n고마워요.\n".encode()), write_file("x.en", ["I.", "Thanks."]),
                      whole=True)
    assert "iconv" not in str(e.value)
    with pytest.raises(CorpusError, match="It holds UTF-8 Korean beside bytes of another encoding") as e:
        decode_line(mixed, 1, "in.ko")
    assert "iconv" not in str(e.value)
    with pytest.raises(CorpusError, match="CP949: `iconv -f CP949"):   # CP949 alone: converted
        decode_line("나는 고마워요.".encode("cp949"), 1, "in.ko")


def test_a_line_of_cp949_beside_one_utf8_syllable_or_jamo_is_not_to_be_converted(write_file):
    """Only two UTF-8 syllables in a row told such a line: CP949 beside one ("요"), or beside jamo ("ㅋㅋ"), read as
    Windows-1252, and the line was said to read as CP1252 with that file's conversion advised (`iconv -f CP1252`
    runs without an error and makes all of the file's Korean mojibake). CP949 text or Windows-1252 text holding bytes
    of a UTF-8 syllable (hanja before Hangul, "ê" before two smart quotes) is not such a line."""
    from nmt.stream import decode_line
    from nmt.textfile import encoding_of, not_text
    for mixed in ("안녕하세요".encode("cp949") + " 요".encode(), "안녕하세요 ".encode("cp949") + "ㅋㅋ".encode(),
                  "나는".encode("cp949") + "요".encode() + " 안녕하세요.".encode("cp949"),   # (glued: CP949 read on)
                  "고양이가".encode("cp949") + "가".encode() + "있다".encode("cp949")):   # (its first 2 bytes: hanja)
        assert encoding_of(mixed) == "CP1252"   # (what the advice went by)
        with pytest.raises(CorpusError, match="it holds UTF-8 Korean beside bytes of another encoding .*; correct or "
                                              "delete the line") as e:
            read_parallel(write_file("x.ko", mixed + "\n고마워요.\n".encode()), write_file("x.en", ["I.", "Thanks."]),
                          whole=True)
        assert "iconv" not in str(e.value) and "CP1252" not in str(e.value)
        with pytest.raises(CorpusError, match="It holds UTF-8 Korean beside bytes of another encoding"):
            decode_line(mixed, 1, "in.ko")
    for text, enc in (("漢字가 있다".encode("cp949"), "CP949"), ("Café au lait, d\u00ea\u2019\u201d".encode("cp1252"),
                                                               "CP1252")):   # (ED AE B0, EA 92 94: as UTF-8's)
        assert not_text(text) == "" and encoding_of(text) == enc


def test_utf8_jamo_beside_a_stray_byte_is_not_to_be_converted():
    """UTF-8 Korean of jamo ("ㅋㅋ") and single syllables with one stray byte read as Windows-1252, and the whole file's
    conversion from it was advised (`iconv -f CP1252`: every Korean line of the file made mojibake): two jamo in a
    row are a UTF-8 Korean word, as two syllables are."""
    from nmt.textfile import not_text
    assert not_text(b"\xe3\x85\x8b\xe3\x85\x8b\xce\xea\xb0\x80").startswith("it holds UTF-8 Korean beside bytes")


def test_the_search_for_utf8_syllables_beside_cp949_stops_after_64():
    """Each UTF-8 syllable taken out of a CP949 line decoded the rest of the line again: a line of 300,000 of them
    among CP949 took 30 s (quadratic). 64 are taken out; a line of more is no stray paste."""
    from nmt.textfile import _cp949_beside_utf8
    def line(strays: int) -> bytes:
        return b"".join("안녕 ".encode("cp949") + "요".encode() + b" " for _ in range(strays))
    assert _cp949_beside_utf8(line(64)) and not _cp949_beside_utf8(line(65))


def test_a_stray_byte_beside_utf8_syllables_is_an_invalid_utf8_error(write_file):
    """Where CP949 cannot read a byte, the UTF-8 syllable or jamo taken out must start where what comes before it
    reads as CP949: else decoding that part raised UnicodeDecodeError out of the advice ("ㅋㅋ", a stray byte,
    "가"), a traceback for a line of invalid UTF-8."""
    from nmt.stream import decode_line
    for line in (b"\xe3\x85\x8b\xe3\x85\x8b\xce\xea\xb0\x80", b"\xea\xb0\x80\xb6\xea\xb0\x80\xb0\xa1",
                 b"\xce\xea\xb0\x80\xa3\xc7\xd0\xb1\xb3\xbf\xe4"):
        with pytest.raises(CorpusError, match=r"^in\.ko:1: invalid UTF-8 \(byte 0x"):
            decode_line(line, 1, "in.ko")
        with pytest.raises(CorpusError, match=r"invalid UTF-8"):
            read_parallel(write_file("s.ko", line + b"\n"), write_file("s.en", ["x"]), whole=True)


def test_a_big_file_that_is_no_text_is_refused_by_its_start(monkeypatch):
    """A 400 MB PNG (or a tar archive) given as a corpus was read whole before its signature was looked at: 5.5 s
    and 937 MB of memory; a bigger one ran the machine out of memory. Its first 4 KiB tell."""
    import io
    import nmt.corpus as corpus
    import nmt.textfile as textfile

    class Counted(io.BytesIO):
        read_so_far = 0

        def read(self, size=-1):
            out = super().read(size)
            Counted.read_so_far += len(out)
            return out
    for start, kind in ((b"\x89PNG\r\n\x1a\n", "a PNG image"), (b"x" * 257 + b"ustar\x00", "a tar archive"),
                        (b"\xff\xfe", "UTF-32")):   # (its mark, then NULs)
        Counted.read_so_far = 0
        for module in (textfile, corpus):   # (corpus read files itself before)
            monkeypatch.setattr(module, "open_bytes", lambda path: (Counted(start + b"\x00" * (50 << 20)), None),
                                raising=False)
        with pytest.raises(CorpusError, match=re.escape(kind)):
            corpus.read_lines("big.ko")
        assert Counted.read_so_far <= 4096, (kind, Counted.read_so_far)


def test_the_advice_for_a_pipe_is_a_filter_to_put_in_it(tmp_path):
    """For /dev/stdin (or <(...)) the advice to write beside the file made `iconv ... /dev/stdin > /dev/stdin.utf8`:
    a file in /dev."""
    import os
    from nmt.textfile import iconv_command, line_ends_command, undo_latin1_command
    read, write = os.pipe()
    try:
        assert iconv_command(f"/dev/fd/{read}", "CP949", None, into=True) == "iconv -f CP949 -t UTF-8"
        assert iconv_command(f"/dev/fd/{read}", "CP949", "gzip", into=True) == "zcat | iconv -f CP949 -t UTF-8"
        assert line_ends_command(f"/dev/fd/{read}", None) == "tr '\\r' '\\n'"   # (not `> /dev/fd/N.lf`)
        assert line_ends_command(f"/dev/fd/{read}", "gzip") == "zcat | tr '\\r' '\\n'"
        assert undo_latin1_command(f"/dev/fd/{read}") == ""
        # standard input redirected from a file (`< file`) is a regular file to os.path: still a stream by its name
        import sys
        (tmp_path / "in.ko").write_text("x\n")
        code = ("from nmt.textfile import iconv_command as i, line_ends_command as l, undo_latin1_command as u; "
                "print([i('/dev/stdin', 'CP949', None, into=True), l('/dev/stdin', None), u('/dev/stdin')])")
        with open(tmp_path / "in.ko") as stdin:
            said = subprocess.run([sys.executable, "-c", code], stdin=stdin, capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        assert said.stdout == str(["iconv -f CP949 -t UTF-8", "tr '\\r' '\\n'", ""]) + "\n", said
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("name", ["c.ko", "c.ko.gz"])
def test_the_advice_for_a_cp949_corpus_file_converts_it_into_a_file_beside_it(tmp_path, name):
    """The CP949 advice printed the converted text (`iconv -f CP949 -t UTF-8 c.ko`, no `> FILE`), unlike the
    UTF-16 and UTF-32 advice: a file of sentences is converted into a file. Following the advice now works."""
    from nmt.corpus import read_lines
    path, text = tmp_path / name, "안녕하세요.\n고마워요.\n"
    with (gzip.open if name.endswith(".gz") else open)(path, "wb") as f:
        f.write(text.encode("cp949"))
    with pytest.raises(CorpusError) as err:
        read_lines(path)
    command = re.search(r"`(.*iconv .*)`", str(err.value)).group(1)
    assert command.endswith(f" > {shlex.quote(str(tmp_path / 'c.utf8.ko'))}"), command
    subprocess.run(command, shell=True, check=True)
    assert read_lines(tmp_path / "c.utf8.ko") == ["안녕하세요.", "고마워요."]


def test_invalid_utf8_skipped_on_request_and_counted(write_file, nmt_logs):
    ko = write_file("f.ko", KO[0].encode() + b"\n\xff\xfe broken\n" + KO[2].encode() + b"\n")
    pairs = read_parallel(ko, write_file("f.en", EN), skip_invalid_utf8=True)
    assert pairs.src == [KO[0], KO[2]] and pairs.tgt == [EN[0], EN[2]]   # the translation goes too: alignment kept
    assert pairs.dropped == {"invalid_utf8": 1}
    assert "skipped 1 line(s) with invalid UTF-8" in messages(nmt_logs) and "line 2" in messages(nmt_logs)
    # the pairs they took with them too (each file said how many lines it skipped; 10 and 15 lines took 20 pairs)
    assert f"{ko} / " in messages(nmt_logs) and "dropped 1 pair(s) with a skipped side (invalid UTF-8): line 2" \
        in messages(nmt_logs)


def test_a_cp949_file_is_not_skipped_whole_as_invalid_lines(write_file, tmp_path):
    """--skip-invalid-utf8 on a CP949 file dropped every Korean line, keeping its ASCII ones ("OK"), and training
    then stopped with "are both files English?": most lines invalid and none UTF-8 beyond ASCII is a file in another
    encoding, to convert, not stray lines to skip."""
    lines = ["안녕하세요.", "OK", "고마워요.", "잘 자요."]
    ko = write_file("cp.ko", ("\n".join(lines) + "\n").encode("cp949"))
    for read in (lambda: read_parallel(ko, write_file("cp.en", ["Hello.", "OK", "Thanks.", "Good night."]),
                                       skip_invalid_utf8=True),
                 lambda: read_tsv(write_file("cp.tsv", "".join(f"{e}\t{k}\n" for e, k in zip(EN * 2, lines))
                                             .encode("cp949")), 1, 0, skip_invalid_utf8=True)):
        with pytest.raises(CorpusError, match=r"3 of its 4 lines of text, from line 1 on, are not UTF-8 .*`iconv -f "
                                              r"CP949 -t UTF-8 "):
            read()
    # stray lines in a UTF-8 file, or a few in an English one, are still skipped
    assert read_lines(write_file("s.ko", KO[0].encode() + b"\n\xb0\xa1\n" + KO[1].encode() + b"\n"),
                      skip_invalid_utf8=True) == [KO[0], None, KO[1]]
    assert read_lines(write_file("s.en", b"Caf\xe9\nHello.\nThanks.\n"), skip_invalid_utf8=True)[1:] == [
        "Hello.", "Thanks."]


def test_a_cp949_file_of_mostly_ascii_lines_is_not_skipped_of_its_korean(write_file):
    """A CP949 Korean file whose ASCII lines (code, numbers, names: technical docs) were half of its lines or more
    had every Korean line skipped under --skip-invalid-utf8, and training stopped with "are both files English?",
    as before refuse_another_encoding: lines of CP949 Hangul in a file with no UTF-8 beyond ASCII are a CP949
    file, whatever their share."""
    ko = ["Python 3.13", "print(x)", "sys.path", "OK", "42", "json.dumps()",
          "파이썬 자습서", "모듈을 임포트합니다.", "반환값은 없습니다.", "예외를 일으킵니다."]
    en = ["Python 3.13", "print(x)", "sys.path", "OK", "42", "json.dumps()",
          "The Python Tutorial", "Import the module.", "It returns nothing.", "It raises an exception."]
    path = write_file("docs.ko", ("\n".join(ko) + "\n").encode("cp949"))
    with pytest.raises(CorpusError, match=r"4 of its 10 lines of text, from line 7 on, are not UTF-8 .*`iconv -f "
                                          r"CP949 -t UTF-8 "):
        read_parallel(path, write_file("docs.en", en), skip_invalid_utf8=True)
    # Windows-1252 lines ("Café") among more ASCII ones are still skipped, as stray lines
    assert read_lines(write_file("w.en", b"Caf\xe9 au lait.\nHello.\nThanks.\n"), skip_invalid_utf8=True) == [
        None, "Hello.", "Thanks."]


def test_only_a_majority_of_lines_of_text_without_utf8_is_another_encoding(write_file):
    """The refusal of --skip-invalid-utf8 on a file in another encoding counts lines of text, not blank ones (a
    CP949 file with a blank line between its sentences is still one), wants more than half of them invalid, and
    none UTF-8 beyond ASCII (a UTF-8 file with most of its lines broken keeps its stray-line skipping); lines of
    CP949 Hangul are refused whatever their share (the test above), so the share is tested with Windows-1252 ones."""
    cp = "안녕하세요.\n\n\n고마워요.\n\n\nOK\n".encode("cp949")   # 2 of 3 lines of text invalid, 7 lines
    with pytest.raises(CorpusError, match=r"cp.ko: 2 of its 3 lines of text, from line 1 on, are not UTF-8 .*`iconv "
                                          r"-f CP949 -t UTF-8 "):
        read_lines(write_file("cp.ko", cp), skip_invalid_utf8=True)
    half = "Café.\nOK\nNaïve.\nFine.\n".encode("cp1252")   # 2 of 4: half, not most
    assert read_lines(write_file("half.en", half), skip_invalid_utf8=True) == [None, "OK", None, "Fine."]
    most = "Café.\nOK\nNaïve.\nDéjà vu.\n".encode("cp1252")   # 3 of 4
    with pytest.raises(CorpusError, match=r"most.en: 3 of its 4 lines of text, from line 1 on, are not UTF-8"):
        read_lines(write_file("most.en", most), skip_invalid_utf8=True)
    broken = b"\xb0\xa1\n" + KO[0].encode() + b"\n\xb3\xaa\n\xb4\xd9\n"   # 3 of 4, beside a UTF-8 Korean line
    assert read_lines(write_file("broken.ko", broken), skip_invalid_utf8=True) == [None, KO[0], None, None]


@pytest.mark.parametrize("content", [b"", b"\n\n  \n", b"\xef\xbb\xbf"])
def test_empty_file_is_an_error(write_file, content):
    ko = write_file("g.ko", content)
    with pytest.raises(CorpusError, match="empty") as e:
        read_parallel(ko, write_file("g.en", EN))
    assert str(ko) in str(e.value)


@pytest.mark.parametrize("module", ["gzip", "bz2", "lzma"])
def test_compressed_files_are_read_as_their_text(write_file, module):
    """OPUS and most corpus sites ship .gz (some .bz2 or .xz) files, which Sockeye and Marian read as they are;
    they were refused here ("decompress it first")."""
    import importlib
    compress = importlib.import_module(module).compress
    plain = read_parallel(write_file("p.ko", KO), write_file("p.en", EN))
    packed = read_parallel(write_file("c.ko.z", compress("\n".join(KO).encode() + b"\n")),
                           write_file("c.en.z", compress("\r\n".join(EN).encode())))   # the usual checks still apply
    assert (packed.src, packed.tgt) == (plain.src, plain.tgt) and packed.src


def test_a_zip_archive_or_a_damaged_compressed_file_is_named(write_file):
    import gzip
    import zipfile
    archive = write_file("x.zip", b"")
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("x.ko", "\n".join(KO))
    with pytest.raises(CorpusError, match=f"{archive}: this is a zip archive, not text; unzip it"):
        read_parallel(archive, write_file("x.en", EN))
    cut = write_file("cut.ko.gz", gzip.compress("\n".join(KO * 50).encode())[:-20])
    with pytest.raises(CorpusError, match=f"{cut}: a damaged gzip file"):
        read_parallel(cut, write_file("x.en", EN))
    text = "".join(f"{i} {k}\n" for i, k in enumerate(KO * 50)).encode()
    bad = write_file("bad.ko.gz", damaged(gzip.compress(text)))   # (a zlib.error, no OSError: it was a traceback)
    with pytest.raises(CorpusError, match=f"{bad}: a damaged gzip file .*invalid"):
        read_parallel(bad, write_file("x.en", EN))

def test_text_that_starts_like_a_bzip2_header_is_text(write_file):
    pairs = read_parallel(write_file("b.en", ["BZh9 is a model number.", "Hello."]), write_file("b.ko", KO[:2]))
    assert pairs.src[0] == "BZh9 is a model number."


def test_no_usable_pairs_is_an_error(write_file):
    with pytest.raises(CorpusError, match="no usable pairs"):
        read_parallel(write_file("v.ko", ["\u00a0", "\u200b"]), write_file("v.en", ["a", "b"]))


def test_missing_file_is_an_error(tmp_path, write_file):
    with pytest.raises(CorpusError, match="not found"):
        read_parallel(tmp_path / "nope.ko", write_file("h.en", EN))


def test_empty_lines_inside_are_dropped_and_counted(write_file, nmt_logs):
    ko = write_file("i.ko", [KO[0], "", KO[2], "\u200b"])
    en = write_file("i.en", [EN[0], EN[1], EN[2], "Extra."])
    pairs = read_parallel(ko, en)
    assert pairs.src == [KO[0], KO[2]] and pairs.tgt == [EN[0], EN[2]]
    assert pairs.dropped == {"empty_line": 2}
    assert "dropped 2 pair(s) with an empty side: line 2, 4" in messages(nmt_logs)


def test_absurdly_long_line_is_an_error(write_file):
    ko = write_file("j.ko", [KO[0], "가" * (MAX_LINE_CHARS + 1), KO[2]])
    with pytest.raises(CorpusError, match="one sentence per line") as e:
        read_parallel(ko, write_file("j.en", EN))
    assert f"{ko}:2:" in str(e.value)


# --- read_tsv ---------------------------------------------------------------------------------------------

def test_read_tsv_chooses_columns(write_file):
    path = write_file("k.tsv", [f"{e}\t{unicodedata.normalize('NFD', k)}\tCC-BY #{i}" for i, (k, e) in
                                enumerate(zip(KO, EN))])
    assert read_tsv(path, 1, 0).src == KO and read_tsv(path, 1, 0).tgt == EN
    assert read_tsv(path, 0, 1, name="t").src == EN


def test_read_tsv_too_few_fields(write_file):
    path = write_file("l.tsv", [f"{EN[0]}\t{KO[0]}", EN[1], f"{EN[2]}\t{KO[2]}"])
    with pytest.raises(CorpusError, match="1 tab-separated field") as e:
        read_tsv(path, 1, 0)
    assert f"{path}:2:" in str(e.value)


def test_read_tsv_blank_and_empty_fields_counted(write_file, nmt_logs):
    path = write_file("n.tsv", [f"{EN[0]}\t{KO[0]}", "", f"{EN[1]}\t ", f"{EN[2]}\t{KO[2]}"])
    pairs = read_tsv(path, 1, 0)
    assert pairs.src == [KO[0], KO[2]] and pairs.dropped == {"empty_line": 2}


def test_read_tsv_invalid_utf8_skip(write_file):
    path = write_file("o.tsv", f"{EN[0]}\t{KO[0]}\n".encode() + b"bad\t\xc0\xaf\n" + f"{EN[1]}\t{KO[1]}\n".encode())
    with pytest.raises(CorpusError, match=f"{path}:2: invalid UTF-8"):
        read_tsv(path, 1, 0)
    assert read_tsv(path, 1, 0, skip_invalid_utf8=True).dropped == {"invalid_utf8": 1}


def test_read_tsv_warns_of_what_it_removes_as_the_plain_readers_do(write_file, nmt_logs):
    """Tatoeba's kor.txt (any TSV source) lost control characters and terminal escape sequences without a word, where
    the same lines as two plain files were warned of, naming the lines; an ignored column loses nothing to warn of."""
    path = write_file("w.tsv", [f"{EN[0]}\t{KO[0]}\tCC-BY \x00#1", f"\x1b[31m{EN[1]}\x1b[0m\t{KO[1]}\x07",
                                f"{EN[2]}\t{KO[2]}\u2028", f"{EN[0]}\x01\t\x1bOP{KO[0]}", f"{EN[1]}\x00\t\x00{KO[1]}"])
    pairs = read_tsv(path, 1, 0)
    assert pairs.src == KO + KO[:2] and pairs.tgt == EN + EN[:2]
    assert messages(nmt_logs).splitlines() == [   # (line 5, with some in both columns: one line)
        f"{path}: 3 line(s) with control character(s), removed: line 2, 4, 5",
        f"{path}: 2 line(s) with terminal escape sequence(s) (colours, cursor keys: ESC[31m ...), removed whole: line "
        "2, 4",
        f"{path}: 1 line(s) with a line break or separator other than LF (U+2028, form feed, U+001F, ...), read as a "
        "space: line 3"]


@pytest.mark.parametrize("cols", [(1, 1), (-1, 0)])
def test_read_tsv_bad_columns(write_file, cols):
    with pytest.raises(CorpusError, match="columns"):
        read_tsv(write_file("p.tsv", ["a\tb"]), *cols)


# --- Pairs ---------------------------------------------------------------------------------------------------

def test_pairs_must_be_aligned():
    with pytest.raises(CorpusError, match="2 source but 1 target"):
        Pairs(["a", "b"], ["x"], "bad")


def test_pairs_swap_select_concat():
    p = Pairs(["a", "b", "c"], ["x", "y", "z"], "p", {"empty_line": 1})
    assert p.swapped().src == ["x", "y", "z"] and p.select([2, 0]).tgt == ["z", "x"]
    both = concat([p, p.select([1])], "both")
    assert both.src == ["a", "b", "c", "b"] and both.dropped == {"empty_line": 1} and both.name == "both"


# --- clean_training_pairs -------------------------------------------------------------------------------------

def test_clean_training_pairs_each_reason(nmt_logs):
    train = Pairs(
        ["좋은 문장.", "테스트 원문.", "다른 원문.", "개발 문장.", "긴" * 50, "짧", "좋은 문장.",
         "또 좋은 문장입니다, 아주 좋은 문장이에요.", "", "긴 번역이 나오는 원문입니다."],   # (the last: its target over
        ["A good sentence.", "Other target.", "Test target.", "Dev target x.", "Long.",   # --max-chars, not its ratio)
         "Much much longer text", "A good sentence.", "Another good one, a very good one.", "Empty source.",
         "A target over forty characters long, it is."],
        "train")
    test = Pairs(["테스트 원문."], ["Test target."], "test")
    dev = Pairs(["개발 문장?"], ["Dev target x."], "dev")
    kept, counts = clean_training_pairs(train, [test, dev], max_chars=40, max_ratio=3.0)
    # (characters, not bytes: the second kept source has 24 characters, 58 bytes)
    assert kept.src == ["좋은 문장.", "또 좋은 문장입니다, 아주 좋은 문장이에요."]
    assert kept.tgt == ["A good sentence.", "Another good one, a very good one."]
    assert counts == {"overlap:test": 2, "overlap:dev": 1, "too_long": 2, "ratio": 1, "duplicate": 1, "empty": 1}
    assert len(kept) + sum(counts.values()) == len(train)
    assert "kept 2 of 10" in messages(nmt_logs) and "overlap:test 2" in messages(nmt_logs)
    # 3 of 10 dropped by the length and ratio limits: a warning that names them
    assert [r.levelname for r in nmt_logs] == ["WARNING"]
    assert "(too_long: over --max-chars 40, ratio: over --max-ratio 3.0)" in messages(nmt_logs)


def test_ratio_uses_bytes_so_short_korean_pairs_survive():
    train = Pairs(["수고했어.", "네"], ["Thank you for your efforts.", "Yes, I will certainly do that tomorrow."], "t")
    kept, counts = clean_training_pairs(train, [], max_chars=400, max_ratio=4.0)
    assert kept.src == ["수고했어."] and counts == {"ratio": 1}


def test_clean_keeps_order_on_random_data(nmt_logs):
    rng = random.Random(0)
    src = [f"문장 {rng.randrange(50)}" for _ in range(200)]
    tgt = [f"sentence {s.split()[1]}" for s in src]
    kept, counts = clean_training_pairs(Pairs(src, tgt, "r"), [], max_chars=100, max_ratio=5.0)
    firsts = list(dict.fromkeys(zip(src, tgt)))
    assert list(zip(kept.src, kept.tgt)) == firsts and counts == {"duplicate": 200 - len(firsts)}
    # most pairs are duplicates: a warning of that, not of a limit set too low
    assert [r.levelname for r in nmt_logs] == ["WARNING"] and "--max-chars" not in messages(nmt_logs)
    assert f"{200 - len(firsts)} of 200 training pairs" in messages(nmt_logs)


def test_a_corpus_given_twice_is_warned_of(nmt_logs):
    """A file catted twice lost half its pairs as duplicates with only an INFO line."""
    src, tgt = [f"문장 {i}." for i in range(100)], [f"Sentence {i}." for i in range(100)]
    kept, counts = clean_training_pairs(Pairs(src * 2, tgt * 2, "train"), [], max_chars=100, max_ratio=5.0,
                                        where="tr.ko / tr.en")
    assert len(kept) == 100 and counts == {"duplicate": 100}
    assert [r.levelname for r in nmt_logs] == ["WARNING"]
    assert messages(nmt_logs) == ("tr.ko / tr.en: kept 100 of 200 training pairs; dropped duplicate 100; 100 of 200 "
                                  "training pairs (50%) are exact duplicates of earlier pairs and were dropped: was a "
                                  "file concatenated twice, or a corpus given twice?")


@pytest.mark.parametrize("repeats", [1, 10])   # one repeated pair among many; 10 of 110: the share allowed
def test_a_few_duplicates_are_no_warning(nmt_logs, repeats):
    src, tgt = [f"문장 {i}." for i in range(100)], [f"Sentence {i}." for i in range(100)]
    kept, counts = clean_training_pairs(Pairs(src + src[:repeats], tgt + tgt[:repeats], "t"), [], max_chars=100,
                                        max_ratio=5.0)
    assert len(kept) == 100 and counts == {"duplicate": repeats}
    assert [r.levelname for r in nmt_logs] == ["INFO"] and "exact duplicates" not in messages(nmt_logs)


@pytest.mark.parametrize("copies, warned", [(5, False), (34, True)])   # of 100 kept: 5% allowed (names, numbers)
def test_many_pairs_with_the_same_text_on_both_sides_are_warned_of(nmt_logs, copies, warned):
    """A third of one's own corpus untranslated (the "Korean" side a copy of the English) passed without a word; the
    recipes drop such pairs of python-docs-ko, and Tatoeba has none."""
    src, tgt = [f"문장 {i}." for i in range(100)], [f"Sentence {i}." for i in range(100)]
    src[:copies] = tgt[:copies]
    kept, counts = clean_training_pairs(Pairs(src, tgt, "t"), [], max_chars=100, max_ratio=5.0, where="tr.ko / tr.en")
    assert len(kept) == 100 and counts == {}   # (kept: they may be names or numbers)
    said = f"; {copies} of the 100 kept pairs ({copies}%) have the same text on both sides: untranslated copies teach"
    assert [r.levelname for r in nmt_logs] == ["WARNING" if warned else "INFO"]
    assert (said in messages(nmt_logs)) == warned, messages(nmt_logs)
    nmt_logs.clear()   # the same pairs cleaned again (a held-out dev set's rest): said once, above, not twice
    clean_training_pairs(kept, [], max_chars=100, max_ratio=5.0, copies_said=True)
    assert "same text on both sides" not in messages(nmt_logs)


# --- reST markup ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, plain", [
    ("Previously, :exc:`TypeError` was raised.", "Previously, TypeError was raised."),
    ("이전에는 :exc:`TypeError`\\가 발생했습니다.", "이전에는 TypeError가 발생했습니다."),
    ("Use ``os.sep`` and :c:func:`PyMem_Free`.", "Use os.sep and PyMem_Free."),
    (":meth:`~object.__del__` methods", "__del__ methods"),
    (":term:`바이트열류 객체 <bytes-like object>`", "바이트열류 객체"),
    ("see `Sphinx <https://sphinx-doc.org>`_ and `reStructuredText`_", "see Sphinx and reStructuredText"),
    ("introduced by :pep:`489` and :rfc:`2822`", "introduced by PEP 489 and RFC 2822"),
    ("See :RFC:`4007` and :PEP:`8`", "See RFC 4007 and PEP 8"),   # Sphinx reads roles in any case
    ("``s*``\\의 *\\*buffer*\\를 **반드시** 해제", "s*의 *buffer를 반드시 해제"),
    ("o1 *= o2", "o1 *= o2"),
    ("For example::", "For example:"),
    # footnote marks, the non-breaking space and link references were kept: 84 + 18 pairs of python-docs-ko and more
    ('Equivalent to printf("%d"). [1]_', 'Equivalent to printf("%d").'), ("See [#]_ and [*]_ too", "See and too"),
    ("a² |nbsp| ≤ |nbsp| n", "a² ≤ n"),
    ("If callable supports vectorcall_, this", "If callable supports vectorcall, this"),
    ("the os.path__ module and ``class_``", "the os.path module and class_"), ("__init__ and _x", "__init__ and _x"),
    ("If optional *mangle_from_* is True", "If optional mangle_from_ is True"),   # (no markup within emphasis)
    ("g = Generator(fp, mangle_from_=True)", "g = Generator(fp, mangle_from_=True)"),
    # substitutions stayed as |version| (8 times in the two files) ...: rendered as the 3.13 docs define them
    ("파이썬 |version|\\가(이) 윈도우 8.1 이상을 지원", "파이썬 3.13가(이) 윈도우 8.1 이상을 지원"),
    ("installed as |usr_local_bin_python_x_dot_y_literal| on", "installed as /usr/local/bin/python3.13 on"),
    ("See |protocol_open|_ for more", "See BaseHandler.<protocol>_open for more"), ("|func-dict|_", "dict()"),
    ("|protocol_request|_, |protocol_response|_", "BaseHandler.<protocol>_request, BaseHandler.<protocol>_response"),
    ("Run |python_x_dot_y_literal|; |func-frozenset|_, |func-memoryview|_",
     "Run python3.13; frozenset(), memoryview()"),
    ("또는 ``None``. |coroutine-origin-link|\\를 참조", "또는 None. sys.set_coroutine_origin_tracking_depth를 참조"),
    ("``'r'`` (default): |flag_r|", "'r' (default):"),   # (a sentence defined elsewhere, on neither side: removed)
    ("IPv(4|6)(Address|Network|Interface) and (blue|white|red)", "IPv(4|6)(Address|Network|Interface) and "
                                                                 "(blue|white|red)"),   # (no substitutions)
    ("a |b|c and d|e| f", "a |b|c and d|e| f"),   # (reST's: a reference starts and ends at no word, each apart)
    (">>> A.__lt__ = f", ">>> A.__lt__ = f"),
])
def test_strip_rest_markup(text, plain):
    assert strip_rest_markup(text) == plain


def test_count_lines_counts_lines_with_text_on_them():
    from nmt.text import count_lines
    assert [count_lines(t) for t in ("", " ", "a", "a\n", "\r\na\r\n\n", "a\nb", "a\r\nb", "a\rb", "a\n \n\tb\rc")] \
        == [0, 0, 1, 1, 1, 2, 2, 2, 3]
    # str.splitlines' other boundaries too, where the output side (translate.one_line) breaks lines; not \x1f or tab
    assert count_lines("a\u2028b\x85c\x0bd") == 4 and count_lines("a\x1fb\tc\u2028") == 1
    assert [count_lines(f"a{c}b") for c in "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"] == [2] * 8


def test_a_line_of_a_file_is_split_at_carriage_returns_only():
    """A line of a file is what lies between LFs: a CR left in it is an old Mac line end (refused), while U+2028 and
    the like stay in it (normalize makes them spaces)."""
    from nmt.stream import decode_line
    line = "가\u2028나\x0b다\x1c라\x85마"
    assert decode_line(line.encode(), 3, "in.ko") == (line, False) and normalize(line) == "가 나 다 라 마"
    with pytest.raises(CorpusError, match="^in.ko:3: carriage returns \\(CR\\) split the line into 2 lines"):
        decode_line("가\u2028나\r다 ".encode(), 3, "in.ko")


@pytest.mark.parametrize("compress", [None, "gzip"])
def test_a_pipe_is_read_from_its_first_byte(compress):
    """A pipe (`--input <(...)`, /dev/stdin) was opened twice, once to look at its first bytes: the first read took up
    to 8 KiB of lines with it, and nmt-translate, nmt-score and nmt-evaluate went on without them."""
    import contextlib
    import gzip
    import os
    import threading

    from nmt.corpus import read_lines
    from nmt.stream import open_input, read_raw_lines
    lines = [f"줄 {i} 안녕하세요." for i in range(2000)]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    data = gzip.compress(data) if compress else data

    def piped(read):
        r, w = os.pipe()
        writer = threading.Thread(target=lambda: (os.write(w, data), os.close(w)))
        writer.start()
        try:
            return read(f"/dev/fd/{r}")
        finally:
            writer.join()
            os.close(r)
    assert piped(read_lines) == lines

    def streamed(path):
        with contextlib.ExitStack() as stack:
            f, idle, _ = open_input(path, stack)
            return [raw.decode("utf-8") for raw, _ in read_raw_lines(f, 1 << 16, idle) if raw]
    assert piped(streamed) == lines


def test_an_english_line_naming_korean_things_is_english_and_technical_korean_is_korean():
    """Any Hangul made a line Korean: English naming Korean things ("kimchi (김치)") given to an en -> ko model was
    warned of as Korean, and refused as the English side of a pair (nmt-score, nmt-evaluate, nmt-train)."""
    from nmt.languages import check_languages, hangul_counts, other_language_warning
    en = ["I like kimchi (김치).", "My name is 민수.", "We visited Busan (부산) last year."]
    ko = ["나는 김치를 좋아한다.", "내 이름은 민수야.", "우리는 작년에 부산에 갔다."]
    for src, tgt, src_lang in ((en, ko, "en"), (ko, en, "ko")):
        check_languages(src, tgt, src_lang, ("--src-file a", "--tgt-file b"), "the model's")   # no error
    assert other_language_warning(*hangul_counts(en, "en"), "en", "ko") == ""
    assert "3 of 3 non-empty lines are mostly Hangul" in other_language_warning(*hangul_counts(ko, "en"), "en", "ko")
    technical = ["Python 3.12의 새 기능", "asyncio 모듈의 EventLoop"]   # Korean full of English words stays Korean
    assert hangul_counts(technical, "ko") == (2, 2) and not other_language_warning(2, 2, "ko", "en")
    with pytest.raises(CorpusError, match="should be the English side .* but is mostly Hangul on 100%"):
        check_languages(ko, ko[::-1], "ko", ("--src-file a", "--tgt-file b"), "the model's")


def test_decomposed_hangul_in_english_lines_counts_as_the_syllables_the_model_reads():
    """An English line naming Korean things in NFD (saved on macOS: each syllable two or three jamo) was counted by
    its jamo: "I live in 서울특별시." (5 syllables, 7 letters) was mostly Hangul, and nmt-translate and nmt-serve warned
    an en -> ko model's input of being Korean."""
    import unicodedata
    from nmt.languages import hangul_counts, korean, other_language_warning
    en = ["I live in 서울특별시.", "My name is 김민준.", "We ate 떡볶이 and 김밥."]
    nfd = [unicodedata.normalize("NFD", x) for x in en]
    assert [korean(x, "en") for x in nfd] == [korean(x, "en") for x in en] == [False] * 3
    assert other_language_warning(*hangul_counts(nfd, "en"), "en", "ko") == ""
    ko = [unicodedata.normalize("NFD", x) for x in ("나는 서울에 산다.", "김치 좋아")]   # still Korean, as in NFC
    assert [korean(x, lang) for x in ko for lang in ("ko", "en")] == [True] * 4


def test_hangul_the_model_does_not_read_and_full_width_letters_count_as_the_model_reads_them():
    """korean() counted an English line's characters as sent, not as the model reads them (`normalize`): Hangul
    fillers (U+3164, chat's "blank" lines), which it removes, were Hangul, and full-width letters (a Korean input
    method's full-width mode), which it reads as ASCII, were no letters. nmt-translate and nmt-serve warned an
    en -> ko model's English input of being Korean ("3 of 1 non-empty lines are mostly Hangul"), and filler lines
    hid English given to a ko -> en model."""
    from nmt.languages import hangul_counts, korean, other_language_warning
    assert not korean("Ｉ ｍｅｔ 김민준．", "en") and not korean("ok \u3164\u3164\u3164", "en")
    assert not korean("\u3164", "ko") and not korean("\u115f\u1160", "ko") and korean("ＴＶ 봐요", "ko")
    chat = ["\u3164"] * 3 + ["See you at 7 tonight.", "Sounds good."]
    assert hangul_counts(chat, "en") == (2, 0) and hangul_counts(chat, "ko") == (2, 0)
    assert other_language_warning(*hangul_counts(chat, "en"), "en", "ko") == ""
    assert "0 of 2 non-empty lines have Hangul" in other_language_warning(*hangul_counts(chat, "ko"), "ko", "en")


def test_decomposed_korean_taken_for_latin1_and_saved_again_is_told_so(write_file):
    """Korean in NFD (macOS's) read as Latin-1 and saved as UTF-8 again ("á\x84\x8bá\x85¡..." for "아") was "are
    both files English?": its jamo's lead byte 0xE1 reads as "á", which the check for such files did not look for
    (a syllable's 0xEA-0xED only). Spanish or Portuguese text ("más", "não") is still no such file."""
    import subprocess
    import unicodedata
    from nmt.languages import check_languages
    korean = unicodedata.normalize("NFD", "안녕하세요.\n고양이가 있다.\n비가 온다.\n")
    twice = write_file("twice.ko", korean.encode().decode("latin-1"))
    en = write_file("t.en", EN)
    src = read_lines(twice)
    with pytest.raises(CorpusError, match="read like Korean UTF-8 that was taken for Latin-1") as e:
        check_languages(src, read_lines(en), "ko", (f"--src-file {twice}", f"--tgt-file {en}"), "ko -> en")
    subprocess.run(re.search("undo it, `(.*)`$", str(e.value))[1], shell=True, check=True)
    assert twice.with_name("twice.fixed.ko").read_bytes() == korean.encode()
    for other in (["¿Qué más está aquí?", "Sí, también él.", "Não há mais."], ["ação não são", "mãe irmã lã"]):
        with pytest.raises(CorpusError, match="are both files English"):
            check_languages(other, EN[:len(other)], "ko", ("--src-file a", "--tgt-file b"), "ko -> en")


def test_a_korean_side_of_blank_lines_alone_is_not_taken_for_swapped_files():
    """nmt-score scores a blank source (or translation) line among others; a Korean side of blank lines alone (an
    all-blank source of a ko -> en model, all-empty translations of an en -> ko one) had Hangul on 0% of its lines,
    no more than the English side: "are both files English?". It says nothing of its language, unless the English
    side is Korean."""
    from nmt.languages import check_languages
    blank, en = ["", " "], ["ni ri", "ri"]
    for src, tgt, src_lang in ((blank, en, "ko"), (en, blank, "en"), (blank, blank, "ko")):
        check_languages(src, tgt, src_lang, ("--src-file a", "--tgt-file b"), "the model's")   # no error
    with pytest.raises(CorpusError, match="--src-file a should be the Korean side .* are the files swapped"):
        check_languages(blank, ["나는 김치를 좋아한다.", "우리는"], "ko", ("--src-file a", "--tgt-file b"), "the model's")
    # "mostly": an English side with Korean on a third of its lines is still taken as English, on two thirds not
    check_languages(blank, ["ni ri", "우리는", "ri"], "ko", ("--src-file a", "--tgt-file b"), "the model's")
    with pytest.raises(CorpusError, match="--src-file a should be the Korean side .* are the files swapped"):
        check_languages(blank, ["ni ri", "우리는", "나는 김치를 좋아한다."], "ko", ("--src-file a", "--tgt-file b"),
                        "the model's")


def _whole_file_answer(path) -> int:
    """`undo_latin1_loses` as it was, on the whole file in memory: the answer the streamed one must keep."""
    from nmt.textfile import _CP1252_BYTES
    try:
        Path(path).read_bytes().decode("utf-8-sig").translate(_CP1252_BYTES).encode("latin-1").decode("utf-8")
        return 0
    except UnicodeError as e:
        return e.object[:e.start].count(b"\n" if isinstance(e.object, bytes) else "\n") + 1


def test_the_mojibake_check_reads_a_block_of_lines_at_a_time(tmp_path, monkeypatch):
    """`undo_latin1_loses` (on the error path of Korean UTF-8 saved again as Latin-1) read the whole file into
    memory, and decoded and encoded it whole: a few times a corpus's size, which may be GBs. It reads UNDO_BLOCK
    bytes of lines at a time now, with the same answer (the first line it cannot write back, or 0)."""
    import tracemalloc
    from nmt import textfile

    def twice(text: str) -> bytes:   # Korean UTF-8 read as Latin-1, saved as UTF-8 again
        return text.encode().decode("latin-1").encode()
    lines = [twice(x + "\n") for x in ("안녕하세요.", "고양이가 있다.", "OK 좋아요.", "2024 년")] * 40
    lossy = "감사.\n".encode().decode("cp1252", "ignore").encode()   # ("감": EA B0 90, 0x90 undefined there: dropped)
    files = {"whole": b"".join(lines), "bom": "\ufeff".encode() + b"".join(lines),
             "no line end": b"".join(lines).rstrip(b"\n"), "empty": b"",
             "a lost byte": b"".join(lines[:97] + [b"\xc3\xaa\xc2\xb3\n"] + lines[97:]),   # "ê³": a lead byte alone
             "no latin-1": b"".join(lines[:150] + ["漢字\n".encode()] + lines[150:]),
             "not utf-8": b"".join(lines[:3] + [b"\xff\n"] + lines[3:]),
             "a bom inside": b"".join(lines[:70] + ["\ufeff".encode() + lines[70]] + lines[71:]),
             "cp1252": b"".join(lines[:20] + [lossy] + lines[20:]),
             "bom, then a loss": "\ufeff".encode() + b"".join(lines[:1] + [lossy] + lines[1:])}
    for block in (64, 1):   # many blocks, and the answer's line within one; each line a block (a BOM inside starts one)
        monkeypatch.setattr(textfile, "UNDO_BLOCK", block)
        said = {}
        for name, data in files.items():
            (tmp_path / "f.ko").write_bytes(data)
            assert textfile.undo_latin1_loses(tmp_path / "f.ko") == _whole_file_answer(tmp_path / "f.ko"), name
            said[name] = textfile.undo_latin1_loses(tmp_path / "f.ko")
        assert said == {"whole": 0, "bom": 0, "no line end": 0, "empty": 0, "a lost byte": 98, "no latin-1": 151,
                        "not utf-8": 4, "a bom inside": 71, "cp1252": 21, "bom, then a loss": 2}, (block, said)
    # two kinds of loss: the first line, as the docstring says (the whole file's decoding named line 100 first)
    (tmp_path / "f.ko").write_bytes(b"".join(lines[:2] + ["漢字\n".encode()] + lines[2:98] + [b"\xff\n"] + lines[98:]))
    assert textfile.undo_latin1_loses(tmp_path / "f.ko") == 3 and _whole_file_answer(tmp_path / "f.ko") == 100
    monkeypatch.setattr(textfile, "UNDO_BLOCK", 1 << 18)
    big = tmp_path / "big.ko"
    big.write_bytes(b"".join(lines) * 3000 + "漢字\n".encode())   # its last line lossy
    tracemalloc.start()
    try:
        assert textfile.undo_latin1_loses(big) == len(lines) * 3000 + 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert big.stat().st_size > 12 << 20 and peak < 4 << 20, peak   # (whole: the file, decoded, encoded ...)
