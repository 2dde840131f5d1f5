"""Inference on a tiny trained model: batched == one-by-one decoding, line-for-line output, bad input (invalid UTF-8,
over-long lines, unseen and control characters), n-best, the CLI (files, stdin/stdout, a terminal), attention plots
and the translation benchmark."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import json
import logging
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest

from nmt import checkpoint as ckpt
from nmt.cli_decode import translate_main
from nmt.commands import shell_word
from nmt.config import CHARS_PER_TOKEN, DecodeConfig
from nmt.prompt import interactive
from nmt.stream import PAUSE, read_raw_lines, translate_stream
from nmt.text import one_line, tidy_translation
from nmt.tokenizer import UNK_ID
from nmt.translate import Translator
from tests.synth import as_trained_with_its_config, damaged, non_canonical_split, run_command, synth_file
from tests.synth import twin_of

REPO = Path(__file__).resolve().parents[2]



@pytest.fixture(scope="module")
def src_lines(model_dir):
    return synth_file(model_dir, "test.ko").read_text(encoding="utf-8").splitlines()


def run(argv, capsys):
    """Exit code, stdout and stderr of the command (argparse's errors exit with 2, as on the command line)."""
    return run_command(translate_main, argv, capsys)


# -- the Python API -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("beam", [1, 5])
def test_batched_decoding_equals_one_by_one(tr, src_lines, beam):
    lines = src_lines[:12]
    batched = tr.translate_nbest(lines, nbest=1 if beam == 1 else 3, beam_size=beam)
    single = [tr.translate_nbest([x], nbest=1 if beam == 1 else 3, beam_size=beam)[0] for x in lines]
    assert [[t for t, _ in h] for h in batched] == [[t for t, _ in h] for h in single]
    np.testing.assert_allclose([s for h in batched for _, s in h], [s for h in single for _, s in h], atol=1e-4)
    assert tr.translate(lines, beam_size=beam) == [h[0][0] for h in batched]
    if beam > 1:   # n-best lists are sorted, distinct, and the model has learned the task
        assert all(len(h) == 3 and h[0][1] >= h[1][1] >= h[2][1] and len({t for t, _ in h}) == 3 for h in batched)
    ref = synth_file(tr.model_dir, "test.en").read_text(encoding="utf-8").splitlines()[:12]
    assert sum(h[0][0] == r for h, r in zip(batched, ref)) >= 8


def test_one_output_per_input_in_order_and_empty_lines(tr, src_lines):
    lines = [src_lines[3], "", src_lines[0], "   ", src_lines[3], "\t"]
    out = tr.translate(lines)
    assert len(out) == 6 and out[1] == out[3] == out[5] == "" and out[0] == out[4] and out[0] != out[2]
    assert out[::-1] == tr.translate(lines[::-1])
    assert tr.translate([]) == []
    assert one_line("a\nb\r\nc\u2028d") == "a b  c d"


def test_one_string_is_one_sentence(tr, src_lines):
    """Python API: a string is translated as one sentence (not one per character), as fairseq's hub does."""
    line = src_lines[2]
    assert tr.translate(line) == tr.translate([line])[0] and isinstance(tr.translate(line), str)
    assert tr.translate_nbest(line, 2, beam_size=3) == tr.translate_nbest([line], 2, beam_size=3)[0]
    with pytest.raises(TypeError, match="lines must be a list of sentences, not one string"):
        tr.translate_ids(line)
    for bad, what in (([line, None], "lines\\[1\\] is NoneType"), ([line.encode()], "lines\\[0\\] is bytes")):
        with pytest.raises(TypeError, match=what + ", not str: give a list of sentences"):
            tr.translate(bad)


def test_text_on_several_lines_is_refused_not_cut_to_its_first(tr, src_lines):
    """A paragraph given as one item was read as one sentence, and the model translated its first line alone."""
    with pytest.raises(ValueError, match=r"lines\[1\] has text on 2 lines: give each line as its own item"):
        tr.translate([src_lines[0], src_lines[1] + "\n" + src_lines[2]])
    with pytest.raises(ValueError, match="has text on 3 lines"):
        tr.translate("a\r\nb\rc")
    # str.splitlines' other line boundaries (one_line breaks output lines there too) were read as one sentence
    with pytest.raises(ValueError, match=r"lines\[0\] has text on 2 lines: give each line as its own item"):
        tr.translate(["고마워요.\u2028오늘 날씨가 좋네요."])
    with pytest.raises(ValueError, match=r"lines\[1\] has text on 3 lines"):
        tr.translate_nbest([src_lines[0], src_lines[1] + "\x1c" + src_lines[2] + "\x0b" + src_lines[3]], 1)
    assert tr.translate([src_lines[1] + "\n", "\n" + src_lines[1] + "\r\n\n"]) == tr.translate([src_lines[1]] * 2)


def test_a_lone_surrogate_is_a_value_error_naming_the_item(tr, src_lines):
    """SentencePiece refused it with "TypeError: list must contain strings"."""
    with pytest.raises(ValueError, match=r"lines\[1\] has a lone surrogate U\+DCB8 at character 1: it is not a char"):
        tr.translate([src_lines[0], "리\udcb8"])


def test_an_iterator_of_sentences_is_read_once(tr, src_lines):
    """`translate(line.strip() for line in f)` died in an IndexError: the lines were counted after being read."""
    lines = src_lines[:5]
    assert tr.translate(x for x in lines) == tr.translate(lines)
    assert tr.translate_nbest(iter(lines), 2, beam_size=3) == tr.translate_nbest(lines, 2, beam_size=3)


def test_beam_and_nbest_out_of_range_are_refused(tr, src_lines):
    """beam_size 0 fell back to the saved beam, -1 ran greedy search, and nbest 3 with beam_size 2 ran beam 3."""
    line = src_lines[0]
    for beam, nbest, what in ((0, 1, "beam_size must be >= 1 \\(got 0\\)"), (-1, 1, "beam_size must be >= 1"),
                              (2, 3, "nbest must be between 1 and beam_size=2 \\(got 3\\)")):
        with pytest.raises(ValueError, match=what):
            tr.translate_nbest([line], nbest, beam_size=beam)
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        tr.continuous(beam_size=0)
    sampler = Translator(tr.net, tr.src_tok, tr.tgt_tok, tr.decode)
    sampler.sample = 5
    with pytest.raises(ValueError, match="nbest 2 needs beam search, but the translator samples"):
        sampler.translate_nbest([line], 2)
    assert len(tr.translate_nbest(line, 2, beam_size=2)) == 2


def test_a_gpu_context_without_a_gpu_is_named(tr):
    """The API's devices meet the command line's check: without the GPU, a DeviceError naming the context (it
    looked like parameters that do not fit the model)."""
    from nmt.parallel import DeviceError
    missing = mx.gpu(mx.context.num_gpus())   # the first id past those present
    with pytest.raises(DeviceError, match=rf"gpu\({missing.device_id}\): {mx.context.num_gpus()} GPU\(s\) found here"):
        Translator.from_dir(tr.model_dir, ctx=[mx.cpu(), missing])
    later = mx.gpu(missing.device_id + 1)   # the first one missing is named, not the highest id
    with pytest.raises(DeviceError, match=rf"^gpu\({missing.device_id}\): "):
        Translator.from_dir(tr.model_dir, ctx=[missing, later])


def test_control_characters_are_normalized_away(tr):
    clean = "리 니 차"
    dirty = "\ufeff리\x00 니\x1b\u200b \t차\x7f"
    assert tr.source_ids([dirty]) == tr.source_ids([clean])
    assert tr.translate([dirty]) == tr.translate([clean])


def test_unseen_characters_use_byte_fallback(tr):
    line = "😀 리 ☃ 니 ß"
    ids = tr.source_ids([line])[0]
    assert UNK_ID not in ids
    assert tr.src_tok.decode([ids]) == [line]          # nothing lost on the way in
    out = tr.translate([line, "리 니"])
    assert len(out) == 2 and all("\n" not in x for x in out)


def test_over_long_lines_are_truncated_with_a_warning(tr, capsys, tmp_path):
    limit = tr.decode.max_input_tokens
    huge = "리 니 차 " * 50_000                           # 300k characters, far more than limit tokens
    t0 = time.perf_counter()
    ids = tr.source_ids([huge, "리 니"], first_line=7)
    assert time.perf_counter() - t0 < 5
    assert len(ids[0]) == limit and len(ids[1]) < limit
    # through the CLI: one line out per line in, the warning names the line
    path = tmp_path / "in.ko"
    path.write_text("리 니\n" + huge + "\n차\n", encoding="utf-8")
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", tmp_path / "out.en",
                        "--beam-size", "1"], capsys)
    assert code == 0
    assert len((tmp_path / "out.en").read_text(encoding="utf-8").split("\n")) == 4
    assert f"{path}:2: line longer than the input guard (--max-input-tokens x {CHARS_PER_TOKEN * 4} bytes); cut " \
        "there while reading (any length said next is the cut line's)" in err   # bounded memory (said "characters")
    assert "input line 2 has 250 subword tokens" not in err and "input line 2 has" in err and "truncated to" in err
    assert "; 1 truncated" in err   # cut to the character guard, then to the tokens: one line (it said 2)


def test_nmt_translate_counts_the_lines_whose_byte_pieces_are_left_out(tr, src_lines, tmp_path, capsys,
                                                                      monkeypatch):
    """nmt-translate's summary counts the lines whose translations left out byte pieces, as it counts those cut at
    the length limit (the warning naming them: tests/unit/test_tokenizer.py). Here the tokenizer takes each
    translation's last piece for a byte that forms no character."""
    from nmt.tokenizer import Tokenizer
    whole = Tokenizer.whole_characters
    monkeypatch.setattr(Tokenizer, "whole_characters", lambda self, ids: whole(self, ids)[:-1])
    path = tmp_path / "in.ko"
    path.write_text("\n".join(src_lines[:3]) + "\n\n", encoding="utf-8")   # (and an empty line: nothing left out)
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", tmp_path / "out.en"], capsys)
    assert code == 0 and "translated 4 lines in " in err and "; 3 with byte pieces left out" in err, err
    assert f"input lines 1, 2, 3: 3 {Translator.LEFT_OUT}" in err, err


def test_an_output_in_a_new_directory_is_made_once_a_line_is_read_well(tr, tmp_path, capsys):
    """--output new/dir/out.en: its missing directories are made (as nmt-evaluate's --json FILE's are), as the output
    is opened once the input's first line is read well; an input refused at its start leaves none of them behind."""
    out, bad, good = tmp_path / "new" / "dir" / "out.en", tmp_path / "u16.ko", tmp_path / "in.ko"
    bad.write_bytes("리 니\n".encode("utf-16"))
    code, _, err = run(["--model-dir", tr.model_dir, "--input", bad, "--output", out], capsys)
    assert code == 2 and "the input is UTF-16 (" in err and not (tmp_path / "new").exists(), err
    good.write_text("리 니\n차\n", encoding="utf-8")
    code, _, err = run(["--model-dir", tr.model_dir, "--input", good, "--output", out, "--beam-size", "1"], capsys)
    assert code == 0 and len(out.read_text(encoding="utf-8").splitlines()) == 2, err


def test_the_length_limit_and_byte_piece_warnings_list_their_lines_alike(tr, src_lines, caplog, monkeypatch):
    """The length-limit warning listed its lines by hand ("1, ..., 10 and 3 more") where the byte-piece warning used
    `line_list` ("1, ..., 10 (and 3 more)"): both list them with it now, and so say their "and N more" alike. (Each
    translation's last piece taken for a byte that forms no character, as in the test above.)"""
    from nmt.tokenizer import Tokenizer
    whole = Tokenizer.whole_characters
    monkeypatch.setattr(Tokenizer, "whole_characters", lambda self, ids: whole(self, ids)[:-1])
    short = Translator(tr.net, tr.src_tok, tr.tgt_tok, dataclasses.replace(tr.decode, max_len_a=0.0, max_len_b=1))
    caplog.clear()
    hyps = short.translate_ids([x for x in src_lines if x.strip()][:13], beam_size=1)
    assert [len(h[0][0]) for h in hyps] == [1] * 13, hyps   # every one at the limit of 1 token
    said = [r.getMessage() for r in caplog.records if r.name == "nmt.translate"]
    assert said == ["input lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 (and 3 more): the translation reached its length limit "
                    "(--max-len-a 0 x source tokens + --max-len-b 1) and may be cut off",
                    f"input lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 (and 3 more): 13 {Translator.LEFT_OUT}"], said


@pytest.mark.parametrize("beam", [1, 4])
def test_translations_cut_at_the_length_limit_are_named(tr, src_lines, tmp_path, capsys, caplog, beam):
    """A translation that takes its every step without reaching EOS was cut off by --max-len-a/-b: a warning
    names its line. Greedy search's oracle: the translations made without a limit that are at least as long."""
    lines = src_lines[:8]
    free = [len(h[0][0]) for h in tr.translate_ids(lines, beam_size=beam)]
    b = sorted(free)[len(free) // 2]                    # some lines are longer, some shorter
    short = Translator(tr.net, tr.src_tok, tr.tgt_tok, dataclasses.replace(tr.decode, max_len_a=0.0, max_len_b=b))
    caplog.clear()
    hyps = short.translate_ids(lines, beam_size=beam, first_line=11)
    at_limit = [11 + i for i, h in enumerate(hyps) if len(h[0][0]) == b]
    if beam == 1:
        assert at_limit == [11 + i for i, n in enumerate(free) if n >= b]
    assert 0 < len(at_limit) < len(lines) and short.cut_off == len(at_limit)
    assert all(len(h[0][0]) <= b for h in hyps)
    said = [r.getMessage() for r in caplog.records if "length limit" in r.getMessage()]
    assert said == [f"input line{'s' if len(at_limit) > 1 else ''} {', '.join(map(str, at_limit))}: the translation "
                    f"reached its length limit (--max-len-a 0 x source tokens + --max-len-b {b}) and may be cut off"]
    caplog.clear()
    tr.translate_ids(lines, beam_size=beam)
    assert not [r for r in caplog.records if "length limit" in r.getMessage()]
    # nmt-translate counts them in its summary
    path = tmp_path / "in.ko"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", tmp_path / "out.en", "--beam-size",
                        beam, "--max-len-a", "0", "--max-len-b", b], capsys)
    assert code == 0 and f"; {len(at_limit)} at the length limit" in err, err
    if beam == 1:
        # the a x source length part: the source's tokens counting its EOS (translation.md), rounded up
        part = Translator(tr.net, tr.src_tok, tr.tgt_tok, dataclasses.replace(tr.decode, max_len_a=0.8, max_len_b=0))
        limits = [math.ceil(0.8 * (len(ids) + 1)) for ids in tr.src_tok.encode(lines)]
        assert [len(h[0][0]) for h in part.translate_ids(lines, beam_size=1)] == list(map(min, free, limits))
        assert any(f >= n for f, n in zip(free, limits)) and any(f < n for f, n in zip(free, limits))
        assert part.cut_off == sum(f >= n for f, n in zip(free, limits))   # (the warning's count: the same limits)


def test_reader_cuts_a_giant_line_without_holding_it(tmp_path):
    data = "가나다\n".encode() + "한".encode() * 1000 + b"\n" + b"x" * 5000 + b"\nlast"
    lines = list(read_raw_lines(io.BytesIO(data), max_bytes=100))
    assert [cut for _, cut in lines] == [False, True, True, False]
    assert lines[0][0].decode() == "가나다" and lines[3][0] == b"last"
    assert lines[1][0].decode("utf-8") == "한" * 33         # cut at a character boundary, still valid UTF-8
    assert lines[2][0] == b"x" * 100


class Trickle(io.BytesIO):
    """A stream that hands out at most 333 bytes a read, as a slow pipe does."""
    def read1(self, size=-1):
        return super().read1(min(size, 333))


@pytest.mark.parametrize("stream", [io.BytesIO, Trickle])
def test_reader_counts_blanks_as_normalize_leaves_them(stream):
    """Leading spaces and runs of spaces or tabs count once, as normalize leaves them, before the byte guard cuts a
    line: 5,000 spaces before a sentence cut it to spaces alone, which the Translator translates whole."""
    data = (b" " * 5000 + "가나다".encode() + b" \t" * 300 + b"x  y\n" + b" " * 5000 + b"\n" + b"z" * 150 +
            b"\n" + "\u3000\u00a0\u200b".encode() * 50 + "한".encode() * 50 + b"\nlast")
    assert list(read_raw_lines(stream(data), max_bytes=100)) == [   # (NBSP, U+3000, zero-width spaces too)
        ("가나다 x y".encode(), False), (b"", False), (b"z" * 100, True), ("한".encode() * 33, True),
        (b"last", False)]
    assert next(read_raw_lines(stream(data), max_bytes=100, squeeze=False)) == (b" " * 100, True)


def test_cli_translates_a_sentence_after_many_spaces_as_the_translator_does(tr, tmp_path, capsys):
    line = " " * 5000 + "\u00a0\u200b" * 2000 + "리 니 차" + "\t \t" * 2000 + "리"
    path = tmp_path / "in.ko"
    path.write_text(f"{line}\n리 니\n", encoding="utf-8")
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", tmp_path / "out.en",
                        "--max-input-tokens", "20"], capsys)
    assert code == 0 and "input guard" not in err, err
    assert (tmp_path / "out.en").read_text(encoding="utf-8").splitlines() == tr.translate([line, "리 니"])
    assert tr.translate([line])[0] == tr.translate(["리 니 차 리"])[0]


# -- invalid UTF-8 ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk", [2, 1000])
def test_invalid_utf8_error_names_the_line_after_writing_all_before(tr, tmp_path, capsys, chunk):
    good = ["리 니 차", "", "두포 푸시"]
    path = tmp_path / "in.ko"
    path.write_bytes(("\n".join(good) + "\n").encode() + b"\xff\xfe \xea\xb0\n" + "차\n".encode())
    out = tmp_path / "out.en"
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", out,
                        "--chunk-lines", chunk], capsys)
    assert code == 2
    assert f"error: {path}:4: invalid UTF-8 (byte 0xff at byte 1 of the line)" in err and "Traceback" not in err
    assert out.read_text(encoding="utf-8").splitlines() == tr.translate(good)
    # UTF-8 Korean before it: a stray line, which converting the whole input (iconv) would fail on
    assert "Line 1 is UTF-8 text, so this line may be the only one in another encoding (it reads as " in err, err
    assert "correct or delete it, or pass --on-invalid-utf8 replace" in err and "iconv" not in err, err
    path.write_bytes(b"ok\n" + "차".encode("cp949") + b"\n")   # nothing but ASCII before: the whole input, maybe
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", out, "--chunk-lines", chunk], capsys)
    assert code == 2 and f"{path}:2: invalid UTF-8" in err and "Convert the input to UTF-8 (" in err and \
        f"iconv -f CP949 -t UTF-8 {shell_word(path)}" in err, err


def test_cr_line_ends_are_named_after_writing_the_lines_before(tr, tmp_path, capsys):
    """Lines of old Mac line ends (CR) in an LF input were translated as one line: one output line for several."""
    path = tmp_path / "in.ko"
    path.write_bytes("리 니\r\n차\r \n두포 푸시\r차\r\n".encode())
    out = tmp_path / "out.en"
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", out], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"error: {path}:3: carriage returns (CR) split the line into 2 lines" in err and "tr '\\r' '\\n'" in err
    assert out.read_text(encoding="utf-8").splitlines() == tr.translate(["리 니", "차"])


def test_a_line_of_a_file_with_other_line_separators_is_one_line(tr, tmp_path, capsys):
    """Only LF (and a CR, refused above) ends a line of a file: U+2028, VT, FS or NEL in one is part of it, a space
    once normalized, as in the model's training data. (The Python API refuses them in an item: str.splitlines and
    the output side break lines there.) The prompt reads a line the same way."""
    path = tmp_path / "in.ko"
    path.write_bytes("리 니\n차\u2028두포\x0b푸시\x1c차\x85리\n니\n".encode())
    out = tmp_path / "out.en"
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", out], capsys)
    assert code == 0 and "error" not in err, err
    assert out.read_text(encoding="utf-8").split("\n") == tr.translate(["리 니", "차 두포 푸시 차 리", "니"]) + [""]
    assert interactive(tr, read=typing(["차\u2028두포 푸시", "니"])) == 0
    assert capsys.readouterr().out.split("\n") == [*tr.translate(["차 두포 푸시", "니"]), ""]


def test_invalid_utf8_replaced_on_request(tr, tmp_path, capsys):
    path = tmp_path / "in.ko"
    path.write_bytes("리 니\n".encode() + b"\xc0 \xea\xb0\xa2 \xff\n" + "차\n".encode())
    out = tmp_path / "out.en"
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", out,
                        "--on-invalid-utf8", "replace"], capsys)
    assert code == 0 and f"{path}:2: invalid UTF-8 replaced by U+FFFD" in err
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and lines[0] == tr.translate(["리 니"])[0]


def test_stream_writes_each_chunk_before_reading_on(tr):
    written = []

    class Out(io.StringIO):
        def flush(self):
            written.append(self.getvalue().count("\n"))

    def items():
        for k in range(5):
            # the chunk of lines 1-2 and 3-4 must be out before line 5 is read
            assert (written[-1] if written else 0) == (k // 2) * 2
            yield "리 니".encode(), False
    stats = translate_stream(tr, items(), Out(), chunk_lines=2)
    assert stats.lines == 5 and written[-1] == 5


def test_a_long_input_says_how_far_it_got(tr, monkeypatch, caplog):
    """A 100,000-line file said nothing for the quarter of an hour it took; every REPORT_SECONDS it now logs the
    lines translated so far (here every chunk, and none with the default, a minute)."""
    import nmt.stream
    items = [("리 니".encode(), False)] * 5
    with caplog.at_level("INFO", logger="nmt.translate"):
        translate_stream(tr, items, io.StringIO(), name="big.ko", chunk_lines=2)
        assert "so far" not in caplog.text
        monkeypatch.setattr(nmt.stream, "REPORT_SECONDS", 0.0)
        translate_stream(tr, items, io.StringIO(), name="big.ko", chunk_lines=2)
    said = [r.message.split(" (")[0] for r in caplog.records if "so far" in r.message]
    assert said == [f"big.ko: {n} lines translated so far" for n in (2, 4)]   # 5: the summary


@pytest.mark.parametrize("signals", [1, 2])
def test_a_signal_during_a_chunks_write_stops_after_its_lines(tr, signals):
    """SIGTERM (or Ctrl-C) while a slow reader took a chunk stopped the write halfway: the last line cut. One signal
    now waits for the chunk's lines, then stops as before (no further chunk); a second stops at once."""
    from nmt.commands import Terminated
    from nmt.signals import terminated_as_interrupt

    class Out(io.StringIO):   # a write that a signal (or two) interrupts halfway
        def write(self, text):
            super().write(text[:len(text) // 2])
            for _ in range(signals):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)   # (delivered, in the main thread, before the rest)
            return super().write(text[len(text) // 2:]) + len(text) // 2
    out, before = Out(), signal.getsignal(signal.SIGTERM)
    with terminated_as_interrupt(), pytest.raises(Terminated):
        translate_stream(tr, [("리 니 차".encode(), False)] * 6, out, chunk_lines=3)
    if signals == 1:
        assert out.getvalue().endswith("\n") and len(out.getvalue().splitlines()) == 3, out.getvalue()
    else:
        assert not out.getvalue().endswith("\n"), out.getvalue()
    assert signal.getsignal(signal.SIGTERM) == before   # (each handler put back)


def test_a_signal_whose_reader_is_stopped_too_still_stops_with_its_code(tr):
    """SIGTERM to a whole job (nmt-translate and its reader) during a chunk's write: the reader gone, the write
    failed with BrokenPipeError, and the deferred signal was lost: exit 141 without a word instead of 143."""
    from nmt.commands import Terminated
    from nmt.signals import terminated_as_interrupt

    class Out(io.StringIO):
        def write(self, text):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            raise BrokenPipeError(32, "Broken pipe")
    with terminated_as_interrupt(), pytest.raises(Terminated) as e:
        translate_stream(tr, [("리 니 차".encode(), False)] * 3, Out(), chunk_lines=3)
    assert e.value.exit_code == 143


def test_a_compressed_input_is_translated(tr, tmp_path, capsys):
    """--input big.ko.gz was read as its compressed bytes, and stopped at line 1 as invalid UTF-8 ("convert the
    input to UTF-8 ... CP949"). gzip, bzip2 and xz input is read as the text it holds."""
    import bz2
    import gzip
    lines = ["리 니 차", "", "두포 푸시"]
    expected = run(["--model-dir", tr.model_dir, "--input", _write(tmp_path / "in.ko", lines)], capsys)
    for name, compress in (("in.ko.gz", gzip.compress), ("in.ko.bz2", bz2.compress)):
        path = tmp_path / name
        path.write_bytes(compress("".join(x + "\n" for x in lines).encode()))
        assert run(["--model-dir", tr.model_dir, "--input", path], capsys)[:2] == (0, expected[1])
    assert expected[0] == 0 and len(expected[1].splitlines()) == 3
    # a truncated archive: the lines before the damage are translated and written, then one error naming the file
    words = ["리 니 차", "두포 푸시", "모다 티"]
    many = [" ".join(words[i % 3] for _ in range(1 + i % 4)) + f" {i}" for i in range(3000)]
    whole = run(["--model-dir", tr.model_dir, "--input", _write(tmp_path / "many.ko", many)], capsys)[1].splitlines()
    cut = tmp_path / "cut.ko.gz"
    cut.write_bytes(gzip.compress("".join(x + "\n" for x in many).encode())[:-200])
    code, out, err = run(["--model-dir", tr.model_dir, "--input", cut], capsys)
    done = int(re.search(r"cut.ko.gz: unreadable after line (\d+) \(Compressed file ended", err).group(1))
    assert code == 2 and 0 < done < 3000 and out.splitlines() == whole[:done] and "Traceback" not in err
    bad = tmp_path / "bad.ko.gz"   # bad deflate data (zlib.error, no OSError): a traceback
    bad.write_bytes(damaged(gzip.compress("".join(x + "\n" for x in many).encode())))
    code, out, err = run(["--model-dir", tr.model_dir, "--input", bad], capsys)
    assert code == 2 and re.search(r"^error: .*bad.ko.gz: unreadable after line \d+ \(Error -3 while "
                                   r"decompressing data: invalid", err, re.M) and "Traceback" not in err, err


def test_a_saved_nbest_is_no_default_of_the_decoding_commands(model_dir, tmp_path, capsys):
    """A run trained with a --config file's {"decode": {"nbest": 2}} made nmt-translate write JSON with no --nbest
    (docs: off), --sample end in a traceback ("nbest 2 needs beam search"), and --beam-size 1 be refused as "--nbest
    2 is more than --beam-size 1", also in nmt-evaluate, which has no --nbest flag."""
    from nmt.cli_decode import evaluate_main
    copy = tmp_path / "m"
    shutil.copytree(model_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    config["decode"]["nbest"] = 2
    (copy / "config.json").write_text(json.dumps(config))
    as_trained_with_its_config(copy)
    source = _write(tmp_path / "in.ko", ["리 니 차", "두포 푸시"])
    plain = run(["--model-dir", model_dir, "--input", source], capsys)
    assert run(["--model-dir", copy, "--input", source], capsys)[:2] == plain[:2] and plain[0] == 0
    assert run(["--model-dir", copy, "--input", source, "--sample", "3"], capsys)[0] == 0
    assert run(["--model-dir", copy, "--input", source, "--beam-size", "1"], capsys)[0] == 0
    assert len(json.loads(run(["--model-dir", copy, "--input", source, "--nbest", "2"], capsys)[1].splitlines()[0])[
        "translations"]) == 2
    ref = _write(tmp_path / "in.en", ["a", "b"])
    assert evaluate_main(["--model-dir", str(copy), "--src-file", str(source), "--ref-file", str(ref), "--beam-size",
                          "1", "--no-save"]) == 0


def _write(path, lines):
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


def test_a_pause_in_the_input_gets_the_lines_before_it_translated(tr):
    """A program that writes lines into a pipe and waits for their translations waited forever: lines were
    translated only once --chunk-lines (1,000) had come or the input had ended. The reader says when a pipe
    pauses; the stream then translates what it has."""
    read, write = os.pipe()
    with open(read, "rb") as r, open(write, "wb", buffering=0) as w:
        w.write("리 니\n차".encode())
        lines = read_raw_lines(r, 100, idle=0.05)
        assert next(lines) == ("리 니".encode(), False) and next(lines) is PAUSE   # "차" has no line end yet
        w.write(b"\n\n")
        assert next(lines) == ("차".encode(), False) and next(lines) == (b"", False) and next(lines) is PAUSE
        w.close()
        assert list(lines) == []
    written = []

    class Out(io.StringIO):
        def flush(self):
            written.append(self.getvalue().count("\n"))
    item = ("리 니".encode(), False)
    stats = translate_stream(tr, [PAUSE, item, item, item, PAUSE, PAUSE, item], Out())
    assert stats.lines == 4 and written == [3, 4]


# -- the command line ----------------------------------------------------------------------------------------------
def test_cli_nbest_checkpoint_and_bad_flags(tr, tmp_path, capsys):
    path = tmp_path / "in.ko"
    path.write_text("리 니 차\n\n두포 푸시\n", encoding="utf-8")
    code, out, _ = run(["--model-dir", tr.model_dir, "--input", path, "--nbest", "3", "--beam-size", "4",
                        "--checkpoint", "latest"], capsys)
    rows = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and len(rows) == 3 and rows[1] == {"translations": [], "scores": []}
    assert len(rows[0]["translations"]) == 3 and rows[0]["scores"] == sorted(rows[0]["scores"], reverse=True)
    code, out, _ = run(["--model-dir", tr.model_dir, "--input", path, "--nbest", "1", "--beam-size", "1"], capsys)
    rows = [json.loads(x) for x in out.splitlines()]   # asked for, one best is a row too: greedy's, with its score
    lines = path.read_text(encoding="utf-8").splitlines()
    assert code == 0 and [r["translations"] for r in rows] == [[t] if t else [] for t in tr.translate(lines, 1)]
    assert [len(r["scores"]) for r in rows] == [1, 0, 1] and all(s < 0 for r in rows for s in r["scores"])
    for argv, msg in [(["--nbest", "6"], "--nbest 6 is more than --beam-size 5"),
                      (["--beam-size", "0"], "--beam-size must be an integer from 1 to 999999"),
                      (["--checkpoint", "nope"], "unknown checkpoint 'nope'"),
                      (["--checkpoint", "12345"], "params.00012345 not found"),
                      (["--chunk-lines", "0"], "--chunk-lines: must be >= 1 (got 0)"),
                      (["--cpu-devices", "0"], "--cpu-devices must be at least 1"),
                      (["--input", tmp_path / "missing.ko"], f"--input {tmp_path / 'missing.ko'}: file not found"),
                      (["--input", path, "--plot-attention", path / "plots"],
                       f"--plot-attention {path / 'plots'}: cannot make the directory (a file is in its path)")]:
        code, _, err = run(["--model-dir", tr.model_dir, *argv], capsys)
        assert code == 2 and msg in err and "Traceback" not in err, (argv, err)
    plots = tmp_path / "new" / "plots"   # made as the command started, it stayed behind the refusal found after it
    for argv, msg in [(["--checkpoint", "nope"], "unknown checkpoint 'nope'"),
                      (["--input", tmp_path / "missing.ko"], "file not found")]:   # (found once the model is loaded)
        code, _, err = run(["--model-dir", tr.model_dir, *argv, "--plot-attention", plots], capsys)
        assert code == 2 and msg in err and not plots.parent.exists(), (argv, err)
    if mx.context.num_gpus() == 0:
        code, _, err = run(["--model-dir", tr.model_dir, "--gpus", "1"], capsys)
        assert code == 2 and "--gpus 1: no GPU found" in err
    code, _, err = run(["--model-dir", tmp_path / "nothing"], capsys)
    assert code == 2 and f"--model-dir {tmp_path / 'nothing'}: no such directory; give a directory written" in err
    code, _, err = run(["--model-dir", tmp_path], capsys)
    assert code == 2 and f"--model-dir {tmp_path}: config.json not found; give a directory written" in err
    (tmp_path / "folder" / "config.json").mkdir(parents=True)   # (said "config.json not found", where it is)
    code, _, err = run(["--model-dir", tmp_path / "folder"], capsys)
    assert (code, err) == (2, f"error: --model-dir {tmp_path / 'folder'}: {tmp_path / 'folder' / 'config.json'} is a "
                              "directory, not the file of the model's settings that nmt-train writes: put that file "
                              "in its place\n")
    step = ckpt.params_step(sorted(Path(tr.model_dir).glob("params.0*"))[0].name)
    for name, which in (("params.best", ", with checkpoint best"),   # a checkpoint file, as fairseq takes one
                        (ckpt.params_file(step), f", with checkpoint {step}"), ("config.json", "")):
        code, _, err = run(["--model-dir", Path(tr.model_dir) / name], capsys)
        assert code == 2 and f"--model-dir {Path(tr.model_dir) / name} is a file: give the model directory that " \
            f"holds it, {tr.model_dir}{which}\n" in err, err
    cwd = os.getcwd()
    os.chdir(tr.model_dir)   # a file named from inside the directory: the directory is named, not "."
    try:
        code, _, err = run(["--model-dir", "params.best"], capsys)
    finally:
        os.chdir(cwd)
    assert code == 2 and f"holds it, {Path(tr.model_dir).absolute()}, with checkpoint best\n" in err, err
    (tmp_path / "q").mkdir()   # a file in a directory that is no model's: its directory was named as the model's
    (tmp_path / "q" / "s.ko").write_text("안녕\n")
    code, _, err = run(["--model-dir", tmp_path / "q" / "s.ko"], capsys)
    assert code == 2 and err.endswith(f"--model-dir {tmp_path / 'q' / 's.ko'} is a file, not a model directory "
                                      "(written by nmt-train)\n"), err


def test_verbose_names_the_checkpoint_the_settings_and_each_chunk(tr, tmp_path, capsys):
    """-v gave nothing more in nmt-translate (its one debug call was training's): it names what was loaded, the
    decoding settings in effect (the flags over config.json's) and each chunk's lines and time."""
    path = tmp_path / "in.ko"
    path.write_text("리 니 차\n두포 푸시\n리 니\n", encoding="utf-8")
    argv = ["--model-dir", tr.model_dir, "--input", path, "--beam-size", "4", "--chunk-lines", "2"]
    code, _, err = run(argv, capsys)
    assert code == 0 and "DEBUG" not in err, err
    code, _, err = run(argv + ["-v"], capsys)
    assert code == 0 and f"{tr.model_dir}: checkpoint best (params.best, step {tr.params_step}) on cpu(0); " \
        f"beam_size=4, length_penalty_alpha={tr.decode.length_penalty_alpha}" in err, err
    said = [x.split("nmt.translate: ")[1].split(" in ")[0] for x in err.splitlines() if " DEBUG " in x][1:]
    assert said == [f"{path}: lines 1-2 translated", f"{path}: line 3 translated"], err
    code, _, err = run(argv[:-4] + ["--sample", "3", "--seed", "0", "-v"], capsys)   # no search: what it draws from
    assert code == 0 and "on cpu(0); sampling from the 3 most probable tokens, seed 0; max_len_a=" in err, err
    assert "length_penalty" not in err.split("sampling")[1].splitlines()[0]   # (refused with --sample: no effect)
    model = tmp_path / "model"   # an average has no step: it was "step None"
    shutil.copytree(tr.model_dir, model)
    ckpt.average_checkpoints(model, ckpt.TrainState.load(model).params_files, last=2)
    code, _, err = run(["--model-dir", model, "--input", path, "--checkpoint", "avg", "-v"], capsys)
    assert code == 0 and f"{model}: checkpoint avg (params.avg, an average of checkpoints) on cpu(0); " in err, err
    member = twin_of(model, tmp_path / "member")   # an ensemble's member at its average too
    code, _, err = run(["--model-dir", model, "--ensemble", member, "--input", path, "--checkpoint", "avg", "-v"],
                       capsys)
    assert code == 0 and f"(params.avg, an average of checkpoints) + {member} (an average of checkpoints) on cpu(0)" \
        in err, err


def test_cli_sampling(tr, src_lines, tmp_path, capsys):
    path = tmp_path / "in.ko"
    path.write_text("\n".join(src_lines[:12]) + "\n", encoding="utf-8")
    base = ["--model-dir", tr.model_dir, "--input", path]
    code, top1, _ = run(base + ["--sample", "1"], capsys)
    assert code == 0 and top1.splitlines() == tr.translate(src_lines[:12], beam_size=1)
    draws = [run(base + ["--sample", *seed], capsys)[1] for seed in ([], [], ["--seed", "1"])]
    assert len(draws[0].splitlines()) == 12 and draws[0] == draws[1] == draws[2]   # the seed is 1 by default
    for argv, msg in [(["--sample", "--beam-size", "4"], "instead of a beam search: drop --beam-size"),
                      (["--sample", "3", "--nbest", "1"], "drop --nbest"),
                      (["--seed", "3"], "--seed seeds --sample")]:
        code, _, err = run(base + argv, capsys)
        assert code == 2 and msg in err and "Traceback" not in err, (argv, err)
    code, _, err = run(base + ["--sample", "-1"], capsys)
    assert code == 2 and "argument --sample: must be >= 0 (got -1)" in err
    for seed in ("-1", str(2 ** 32)):   # numpy's range, as nmt-train takes it
        code, _, err = run(base + ["--sample", "--seed", seed], capsys)
        assert code == 2 and f"argument --seed: must be >= 0 and <= {2 ** 32 - 1} (got {seed})" in err


def translate_with_a_pause(model_dir, lines, flags) -> str:
    """nmt-translate's output for `lines` given on a pipe that pauses after the first half: once the command has read
    that half, nothing more comes for 0.5 s (10 times IDLE_SECONDS), then the rest."""
    import fcntl
    import struct
    import termios
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    read, write = os.pipe()
    p = subprocess.Popen([sys.executable, str(REPO / "scripts" / "translate.py"), "--model-dir", str(model_dir),
                          *flags], stdin=read, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    half = len(lines) // 2
    try:
        os.write(write, "".join(x + "\n" for x in lines[:half]).encode())
        deadline = time.time() + 60
        while struct.unpack("i", fcntl.ioctl(read, termios.FIONREAD, b"\0" * 4))[0] and time.time() < deadline:
            time.sleep(0.05)   # bytes still in the pipe: the command has not read them yet
        time.sleep(0.5)
        os.write(write, "".join(x + "\n" for x in lines[half:]).encode())
    finally:
        os.close(write)
        os.close(read)
    out = p.stdout.read().decode()
    assert p.wait(timeout=60) == 0
    return out


def test_seeded_samples_do_not_depend_on_the_inputs_pauses(tr, src_lines, tmp_path, capsys):
    """--sample --seed is repeatable (the same seed, input and flags give the same translations), but a pipe that
    paused was cut into chunks by arrival time, and the draws depend on the chunks: piped with a pause, 39 of 40
    lines differed from --input. With --seed the chunks are --chunk-lines lines whatever the pauses; without it a
    pause still gets the lines before it translated at once (and so drawn otherwise)."""
    lines = src_lines[:40]
    path = tmp_path / "in.ko"
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    code, from_file, err = run(["--model-dir", tr.model_dir, "--input", path, "--sample", "--seed", "1"], capsys)
    assert code == 0 and len(from_file.splitlines()) == 40, err
    assert translate_with_a_pause(tr.model_dir, lines, ["--sample", "--seed", "1"]) == from_file
    assert translate_with_a_pause(tr.model_dir, lines, ["--sample"]) != from_file   # the seed is 1 by default


def test_input_in_the_target_language_is_translated_with_a_warning(tr, tmp_path, capsys):
    """English given to a ko -> en model (a back-translation run with the model of the wrong direction) is
    translated, line for line, and the log says what looks wrong; the model's source language passes quietly."""
    for name, lang, warned in (("four.en", "en", True), ("four.ko", "ko", False)):
        path = tmp_path / name
        lines = synth_file(tr.model_dir, f"test.{lang}").read_text(encoding="utf-8").splitlines(True)[:4]
        path.write_text("".join(lines) + "\n", encoding="utf-8")   # and an empty line, which does not count
        code, out, err = run(["--model-dir", tr.model_dir, "--input", path], capsys)
        assert code == 0 and len(out.splitlines()) == 5, err
        message = f"{path}: {0 if warned else 4} of 4 non-empty lines have Hangul, but the model translates ko -> en"
        assert (message in err) == warned and ("have Hangul" in err) == warned, err


def test_json_requests_without_json_input_are_translated_with_a_warning(tr, tmp_path, capsys):
    """Lines of {"text": ..., "target_prefix": ...} given without --json-input were translated as text, braces and
    all, their prefixes dropped without a word (the Hangul inside passed the language check)."""
    path = tmp_path / "requests.jsonl"
    lines = synth_file(tr.model_dir, "test.ko").read_text(encoding="utf-8").splitlines()[:3]
    path.write_text("".join(json.dumps({"text": x, "target_prefix": "ri"}, ensure_ascii=False) + "\n" for x in lines)
                    + "\n", encoding="utf-8")
    said = f'{path}: every line is a JSON object with a "text" field, translated as it is: --json-input reads'
    code, out, err = run(["--model-dir", tr.model_dir, "--input", path], capsys)
    assert code == 0 and len(out.splitlines()) == 4 and said in err, err
    code, out, err = run(["--model-dir", tr.model_dir, "--input", path, "--json-input"], capsys)
    assert code == 0 and len(out.splitlines()) == 4 and "JSON object" not in err, err
    for encoding in ("utf-8", "utf-8-sig"):   # (Hangul as \uXXXX; a byte-order mark, as PowerShell writes)
        path.write_text("".join(json.dumps({"text": x}) + "\n" for x in lines), encoding=encoding)
        code, out, err = run(["--model-dir", tr.model_dir, "--input", path], capsys)
        assert code == 0 and said in err and "non-empty lines have Hangul" not in err, (encoding, err)
    path.write_text(path.read_text(encoding="utf-8") + lines[0] + "\n", encoding="utf-8")   # (one plain line: text)
    code, out, err = run(["--model-dir", tr.model_dir, "--input", path], capsys)
    assert code == 0 and "JSON object" not in err, err


def test_a_byte_order_mark_starting_any_line_is_dropped_in_both_input_modes(tr, tmp_path, capsys):
    """Files that each start with a byte-order mark, joined (`cat a.jsonl b.jsonl`), have one at the start of a later
    line: --json-input refused it ("not JSON (Unexpected UTF-8 BOM ...)") after the first line, where plain lines
    lose it (an invisible character). Both modes now translate those lines as without it, a line of it alone too."""
    bom, texts = "\ufeff", ["리 니", "차", "", "니 리 차"]
    for json_input in (False, True):
        rows = [(json.dumps({"text": t}, ensure_ascii=False) if t and json_input else t) for t in texts]
        path = tmp_path / ("joined.jsonl" if json_input else "joined.ko")
        path.write_text("".join(bom + r + "\n" for r in rows), encoding="utf-8")
        code, out, err = run(["--model-dir", tr.model_dir, "--input", path, "--beam-size", "1"]
                             + ["--json-input"] * json_input, capsys)
        assert code == 0 and out.split("\n") == [*tr.translate(texts, beam_size=1), ""], (json_input, err)


def padded_lines_translate_alike(tr, path: Path, texts, pads, ends, capsys) -> None:
    """`texts` with `pads` before and `ends` after each, as plain lines and as --json-input lines (the JSON object
    between them), translate as `texts` themselves do."""
    for json_input in (False, True):
        rows = [(json.dumps({"text": t}, ensure_ascii=False) if t and json_input else t) for t in texts]
        path.write_text("".join(p + r + e + "\n" for p, r, e in zip(pads, rows, ends)), encoding="utf-8")
        code, out, err = run(["--model-dir", tr.model_dir, "--input", path, "--beam-size", "1"]
                             + ["--json-input"] * json_input, capsys)
        assert code == 0 and out.split("\n") == [*tr.translate(texts, beam_size=1), ""], (json_input, err)


def test_whitespace_and_marks_around_a_json_line_are_nothing_as_around_a_plain_one(tr, tmp_path, capsys):
    """A space (or a tab, NBSP, U+3000) before a byte-order mark, as joined or pasted files may leave: a plain line
    loses both, a --json-input line was "not JSON (Expecting value at character 2)"; a line of them alone, an
    empty sentence in plain mode, was refused too. Both modes now read what a plain line loses around its text (not
    a control character) as nothing around the JSON; an error's character counts them."""
    texts, pads = ["리 니", "차", "", "니 리 차", "두포"], [" \ufeff", "\t\ufeff", "\u3000\u200b", "", "\xa0"]
    ends = ["", " \ufeff", "\ufeff", " \ufeff", "\u3000"]
    path = tmp_path / "padded.txt"
    padded_lines_translate_alike(tr, path, texts, pads, ends, capsys)
    path.write_text(' \ufeff{"text": }\n', encoding="utf-8")
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--json-input"], capsys)
    assert code == 2 and f"{path}:1: not JSON (Expecting value at character 12)" in err, err


def test_joiners_around_a_json_line_are_nothing_as_around_a_plain_one(tr, tmp_path, capsys):
    """A joiner with nothing to join (ZWNJ, ZWJ, a variation selector: pasted from a page or an emoji) before or after
    the text: a plain line loses it, a --json-input line was "not JSON (Expecting value at character 1)", and a line
    of one alone, an empty sentence in plain mode, was refused too."""
    texts, pads = ["리 니", "", "차", "니 리"], ["\u200c", "\u200d", "\ufe0f \u200b", ""]
    ends = ["", "", "\u200d", " \u200c"]
    path = tmp_path / "joined.txt"
    padded_lines_translate_alike(tr, path, texts, pads, ends, capsys)
    path.write_text('{"text": "\u200d리\u200c"}\n', encoding="utf-8")   # (inside a string: kept, as in plain mode)
    code, out, err = run(["--model-dir", tr.model_dir, "--input", path, "--json-input", "--beam-size", "1"], capsys)
    assert code == 0 and out == tr.translate(["\u200d리\u200c"], beam_size=1)[0] + "\n", err


def test_cli_refuses_to_write_over_its_input(tr, tmp_path, capsys):
    """`--output` naming the `--input` file (or a link to it) would empty it before it is read."""
    path, link = tmp_path / "in.ko", tmp_path / "link.ko"
    path.write_text("리 니\n두포 푸시\n", encoding="utf-8")
    link.symlink_to(path)
    for output in (path, link):
        code, out, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", output], capsys)
        assert code == 2 and out == "" and "Traceback" not in err
        assert f"--output {output} is the --input file: writing it would destroy what this command reads" in err
        assert path.read_text(encoding="utf-8") == "리 니\n두포 푸시\n"
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", tmp_path / "out.en"], capsys)
    assert code == 0 and len((tmp_path / "out.en").read_text(encoding="utf-8").splitlines()) == 2, err


def test_translations_lose_the_stray_spaces_of_lone_word_pieces(tr, monkeypatch):
    """A hypothesis cut at its length limit, or an undertrained model, can end with (or repeat) the word-boundary
    piece "▁": nmt-translate wrote "I " and "Thank  you." as SentencePiece decodes them."""
    monkeypatch.setattr(tr.tgt_tok, "decode", lambda seqs: ["I ", "  Thank  you.\nBye", "   "][:len(seqs)])
    assert tr.texts([[([4], -1.0)], [([5], -2.0), ([6], -3.0)]]) == [[("I", -1.0)], [("Thank you. Bye", -2.0),
                                                                                     ("", -3.0)]]
    import nmt.plot   # the attention plot's translation too
    assert nmt.plot.attention(tr, "리 니").translation == "I"


def test_cli_refuses_to_write_over_its_standard_input(tr, tmp_path):
    """`--output in.ko < in.ko` emptied the file and translated 0 lines (exit 0), and `--output /dev/stdin` on a pipe
    translated its own output without end: standard input was never compared with --output."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    path = tmp_path / "in.ko"
    path.write_text("리 니\n두포 푸시\n", encoding="utf-8")
    cmd = [sys.executable, str(REPO / "scripts" / "translate.py"), "--model-dir", str(tr.model_dir), "--output"]
    with open(path, "rb") as stdin:
        p = subprocess.run([*cmd, str(path)], stdin=stdin, capture_output=True, env=env, timeout=60)
    assert p.returncode == 2 and (f"--output {path} is this command's standard input (--input): writing it would "
                                  "destroy what this command reads") in p.stderr.decode(), p.stderr.decode()
    assert path.read_text(encoding="utf-8") == "리 니\n두포 푸시\n"
    p = subprocess.run([*cmd, "/dev/stdin"], input="리 니\n".encode(), capture_output=True, env=env, timeout=60)
    assert p.returncode == 2 and ("--output /dev/stdin is this command's standard input (--input): writing it would "
                                  "feed the output back") in p.stderr.decode(), p.stderr.decode()
    for stdin in (None, path):   # standard output appended to the input: its own translations read again, no end
        with open(path, "ab") as out, open(stdin or os.devnull, "rb") as f:
            p = subprocess.run(cmd[:-1] + (["--input", str(path)] if stdin is None else []), stdin=f, stdout=out,
                               stderr=subprocess.PIPE, env=env, timeout=60)
        assert p.returncode == 2 and (f"standard output is {'the --input file' if stdin is None else 'this command'}"
                                      ) in p.stderr.decode(), p.stderr.decode()
        assert path.read_text(encoding="utf-8") == "리 니\n두포 푸시\n"


def test_no_output_is_written_over_a_file_of_the_model(tr, tmp_path, capsys):
    """nmt-translate --output m/params.best, nmt-evaluate --json m/scores.json and nmt-score --output m/config.json
    wrote over the model's files: the model was unusable or its recorded scores gone, and the errors that followed
    blamed "an earlier version of nmt"."""
    from nmt.cli_decode import evaluate_main
    from nmt.cli_score import score_main
    model = tmp_path / "m"
    shutil.copytree(tr.model_dir, model)
    before = {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()}
    (tmp_path / "in.ko").write_text("리 니\n", encoding="utf-8")
    (tmp_path / "in.en").write_text("ri ni\n", encoding="utf-8")
    files = ["--src-file", tmp_path / "in.ko"]
    for main, argv, flag, name in [
            (translate_main, ["--input", tmp_path / "in.ko", "--output"], "--output", "params.best"),
            (evaluate_main, [*files, "--ref-file", tmp_path / "in.en", "--json"], "--json", "scores.json"),
            (score_main, [*files, "--tgt-file", tmp_path / "in.en", "--output"], "--output", "config.json")]:
        code = main([str(a) for a in ["--model-dir", model, *argv, model / name]])
        err = capsys.readouterr().err
        assert code == 2 and f"{flag} {model / name} is a file of the model directory {model}: writing it would " \
            "destroy what the model needs" in err, err
    assert {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()} == before
    os.link(model / "params.best", tmp_path / "hard")   # a hard link to one (cp -al backups): the same file
    assert translate_main([str(a) for a in ["--model-dir", model, "--input", tmp_path / "in.ko", "--output",
                                            tmp_path / "hard"]]) == 2
    assert "is a file of the model directory" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()} == before
    assert translate_main([str(a) for a in ["--model-dir", model, "--input", tmp_path / "in.ko", "--output",
                                            model / "hyp.en"]]) == 0   # a file of one's own there is fine


def test_cli_stdin_to_stdout(tr, src_lines):
    lines = src_lines[:5] + [""] + src_lines[5:8]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "translate.py"), "--model-dir", str(tr.model_dir),
                        "--chunk-lines", "3"], input="\n".join(lines).encode(), capture_output=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode("utf-8").split("\n") == tr.translate(lines) + [""]


def test_cli_answers_each_line_of_a_pipe_kept_open(tr, src_lines):
    """A program driving nmt-translate line by line: each translation comes while stdin stays open."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, str(REPO / "scripts" / "translate.py"), "--model-dir", str(tr.model_dir)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        for line in src_lines[:3]:
            p.stdin.write(line.encode() + b"\n")
            p.stdin.flush()
            ready, _, _ = select.select([p.stdout], [], [], 120)
            assert ready, f"no translation of {line!r} within 120 s while the pipe stays open"
            assert p.stdout.readline().decode().rstrip("\n") == tr.translate(line)
        p.stdin.close()
        assert p.wait(60) == 0 and p.stdout.read() == b""
    finally:
        p.kill()


# Decodes the synthetic test set on two CPU contexts (one OpenMP thread each, as the CLI asks for) and prints
# which context searched each batch, then the translations.
_TWO_DEVICES = """
import json, sys
import mxnet as mx
from nmt.translate import Translator
tr = Translator.from_dir(sys.argv[1], ctx=[mx.cpu(0), mx.cpu(1)])
tr.decode.batch_size = 2
used, decode_chunk = [], tr._decode_chunk
def spy(ctx, *args):
    used.append(str(ctx))
    decode_chunk(ctx, *args)
tr._decode_chunk = spy
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()
print(json.dumps({"used": used, "greedy": tr.translate(lines, beam_size=1),
                  "nbest": tr.translate_nbest(lines, nbest=3, beam_size=4),
                  "prefixed": tr.translate_nbest(lines, nbest=2, beam_size=3, prefixes=["ga", "g"] * 5 + ["ga "])}))
"""


def test_two_devices_share_the_batches_and_translate_like_one(tr, src_lines, tmp_path):
    lines = src_lines[:9] + ["", src_lines[0]]
    path = tmp_path / "in.ko"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-c", _TWO_DEVICES, str(tr.model_dir), str(path)], capture_output=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    res = json.loads(p.stdout)
    assert set(res["used"]) == {"cpu(0)", "cpu(1)"} and len(res["used"]) == 2 * 5 + 6   # 5 batches of 2, 6 of 2
    assert res["greedy"] == tr.translate(lines, beam_size=1)
    nbest = tr.translate_nbest(lines, nbest=3, beam_size=4)
    assert [[t for t, _ in h] for h in res["nbest"]] == [[t for t, _ in h] for h in nbest]
    np.testing.assert_allclose([s for h in res["nbest"] for _, s in h], [s for h in nbest for _, s in h], atol=1e-5)
    prefixed = tr.translate_nbest(lines, nbest=2, beam_size=3, prefixes=["ga", "g"] * 5 + ["ga "])   # target prefixes
    assert [[t for t, _ in h] for h in res["prefixed"]] == [[t for t, _ in h] for h in prefixed]


def test_cpu_contexts_that_would_take_turns_leave_the_work_to_the_first(tr, src_lines, monkeypatch, caplog):
    """With several OpenMP threads per operator, CPU contexts must not run side by side (OpenBLAS): the
    translator then decodes on its first context alone, and says why."""
    import nmt.parallel
    monkeypatch.setattr(nmt.parallel, "openmp_threads", lambda: 2)
    two = Translator.from_dir(tr.model_dir, ctx=[mx.cpu(0), mx.cpu(1)])
    assert two.ctxs == [mx.cpu(0), mx.cpu(1)]
    used, decode_chunk = [], two._decode_chunk
    monkeypatch.setattr(two, "_decode_chunk", lambda ctx, *a: (used.append(ctx), decode_chunk(ctx, *a)))
    two.decode.batch_size = 3
    with caplog.at_level("INFO", logger="nmt.parallel"):
        assert two.translate(src_lines[:7]) == tr.translate(src_lines[:7])
    assert used == [mx.cpu(0)] * 3 and "run one after another" in caplog.text


def prompt_process(tr, stdout=None, stderr=None, **env):
    """nmt-translate's prompt (greedy search) on a new pseudo-terminal: (the terminal's master side, the process).
    Standard output and error go to the terminal unless given. SIGHUP as a terminal's session has it (a suite run
    under nohup has it ignored, which nmt keeps so)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, str(REPO / "scripts" / "translate.py"), "--model-dir", str(tr.model_dir),
                          "--beam-size", "1"], stdin=slave, stdout=slave if stdout is None else stdout,
                         stderr=slave if stderr is None else stderr,
                         env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), **env),
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    os.close(slave)
    return master, p


def test_interactive_prompt_on_a_terminal(tr):
    """Typed at a terminal with standard output redirected (`nmt-translate ... > out.en`): the prompt goes to
    stderr and the output holds the translations alone (it held "ko> " before each, and one after the last)."""
    master, p = prompt_process(tr, subprocess.PIPE, subprocess.PIPE)
    try:
        os.write(master, "리 니 차\n".encode())
        line = b""
        deadline = time.time() + 60
        while b"\n" not in line and time.time() < deadline:
            if select.select([p.stdout], [], [], 1)[0]:
                line += os.read(p.stdout.fileno(), 1024)
        assert line.decode() == tr.translate(["리 니 차"], beam_size=1)[0] + "\n"
        os.write(master, b"\x04")   # Ctrl-D: end of input
        assert p.wait(timeout=30) == 0
        assert p.stdout.read() == b""
        err = p.stderr.read().decode()
        assert "Type a sentence" in err and err.count("ko> ") == 2
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("end", ["reader gone", "SIGHUP"])   # (SIGTERM: the same path, a Terminated)
def test_the_prompt_ends_with_the_exit_code_of_what_ended_it(tr, end):
    """At the prompt, SIGTERM and SIGHUP exited 0 (the prompt took them for Ctrl-C's quit), and a reader gone from
    standard output (`nmt-translate | head -1`) gave a BrokenPipeError traceback, exit 1."""
    master, p = prompt_process(tr, subprocess.PIPE, subprocess.PIPE)
    try:
        err, deadline = b"", time.time() + 60
        while b"ko> " not in err and time.time() < deadline:   # (the prompt: the model is loaded)
            if select.select([p.stderr], [], [], 1)[0]:
                err += os.read(p.stderr.fileno(), 1024)
        if end == "reader gone":
            p.stdout.close()
            os.write(master, "리 니 차\n".encode())
        else:
            p.send_signal(getattr(signal, end))
        code = p.wait(timeout=60)
        err += p.stderr.read()
        assert code == {"reader gone": 141, "SIGHUP": 129}[end], err.decode()
        assert b"Traceback" not in err, err.decode()
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("env", [{}, {"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C"}], ids=["utf8", "ascii", "C"])
def test_interactive_prompt_with_output_on_the_terminal(tr, env):
    """On a terminal (stdin, stdout and stderr): the prompt shows before anything is typed. With
    PYTHONIOENCODING=ascii a typed Korean line was a UnicodeDecodeError traceback; under LC_ALL=C readline took each
    byte of a Hangul syllable for a Meta key, and the typed line was lost (it edits lines in a UTF-8 locale only)."""
    master, p = prompt_process(tr, **env)
    want = tr.translate(["리 니 차"], beam_size=1)[0]
    try:
        seen, deadline = b"", time.time() + 60

        def read_until(text: str, times: int = 1) -> None:
            nonlocal seen
            while seen.count(text.encode()) < times and time.time() < deadline:
                if select.select([master], [], [], 1)[0]:
                    seen += os.read(master, 1024)
        read_until("ko> ")   # the banner and the prompt, before anything is typed
        assert seen.endswith(b"Ctrl-D to quit (Ctrl-C interrupts, exit code 130).\r\nko> ")
        os.write(master, "리 니 차\n".encode())
        read_until(want)
        read_until("ko> ", 2)   # (a Ctrl-D before readline reads the line again is the terminal's, and lost)
        os.write(master, b"\x04")
        assert p.wait(timeout=30) == 0
        assert want in seen.decode()
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("output", [False, True], ids=["prompt", "typed-with-output"])
@pytest.mark.parametrize("typed", ["", "리 니"], ids=["empty", "half-typed"])
def test_ctrl_c_at_the_prompt_interrupts_the_command(tr, typed, output, tmp_path):
    """Ctrl-C at the prompt (its line empty or half typed) ended the session silently with exit code 0, where Ctrl-C
    while a line is translated, and everywhere else in nmt-translate, is an interruption: "interrupted", exit code
    130, as the banner now says. Typed at the terminal that the command has as its controlling one, as a user does.
    With --output (lines typed, each translation written to the file) it was "interrupted" already, but glued to the
    echoed "^C"; it is on a line of its own there too, and the translation of the line typed before is kept."""
    import fcntl
    import termios
    master, slave = pty.openpty()

    def own_terminal():   # (a session of its own whose controlling terminal is the pty: Ctrl-C there is its SIGINT)
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    out = tmp_path / "out.en"
    p = subprocess.Popen([sys.executable, str(REPO / "scripts" / "translate.py"), "--model-dir", str(tr.model_dir),
                          "--beam-size", "1", *(["--output", str(out)] if output else [])], stdin=slave, stdout=slave,
                         stderr=slave, start_new_session=True, preexec_fn=own_terminal,
                         env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO)))
    os.close(slave)
    try:
        seen, deadline = b"", time.time() + 60
        while (b"130).\r\n" if output else b"ko> ") not in seen and time.time() < deadline:
            if select.select([master], [], [], 1)[0]:
                seen += os.read(master, 1024)
        assert b"Ctrl-C interrupts, exit code 130" in seen, seen.decode(errors="replace")
        if output:   # a line translated into the file before the Ctrl-C
            os.write(master, "니 리\n".encode())
            while not (out.is_file() and out.read_text(encoding="utf-8")) and time.time() < deadline:
                time.sleep(0.2)
        # Ctrl-C once the command reads the terminal, as a person's is: readline's prompt shows before it waits for
        # keys, and a SIGINT between the two waits for the next key (CPython's readline), so the test hung at times
        os.write(master, typed.encode())
        while typed and not seen.endswith(typed.encode()) and time.time() < deadline:   # (echoed: it reads keys)
            if select.select([master], [], [], 1)[0]:
                seen += os.read(master, 1024)
        time.sleep(0.5)
        os.write(master, b"\x03")
        code = p.wait(timeout=30)
        with contextlib.suppress(OSError):   # (the terminal's last output; EIO once the command has closed it)
            while select.select([master], [], [], 1)[0]:
                seen += os.read(master, 1024)
        said = seen.decode(errors="replace")
        assert code == 130 and said.rstrip().endswith("\ninterrupted") and "Traceback" not in said, (code, said)
        if output:
            assert out.read_text(encoding="utf-8") == tr.translate(["니 리"], beam_size=1)[0] + "\n"
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("redirected", [False, True], ids=["terminal", "stdout-redirected"])
def test_the_typed_line_can_be_edited_at_the_prompt(tr, redirected):
    """input() had no line editing: a user who pressed an arrow key (or Home) to mend a word had "[D" or the like
    typed into the sentence, translated without a word. On a terminal the line is edited with readline; with
    standard output redirected (where input() cannot edit it) a warning says what was removed."""
    master, p = prompt_process(tr, subprocess.PIPE if redirected else None, TERM="dumb")
    want = tr.translate(["리 니 차"], beam_size=1)[0]
    try:
        seen, deadline = b"", time.time() + 60
        while b"ko> " not in seen and time.time() < deadline:
            if select.select([master], [], [], 1)[0]:
                seen += os.read(master, 1024)
        os.write(master, "니 차\x01리 \n".encode())   # Ctrl-A (Home) to add the first word
        if redirected:
            line = p.stdout.readline().decode()
            assert line != want + "\n"
        while (b"removed before translating" not in seen if redirected else seen.count(b"ko> ") < 2) and \
                time.time() < deadline:   # (the prompt again: a Ctrl-D before readline reads the line is lost)
            if select.select([master], [], [], 1)[0]:
                seen += os.read(master, 1024)
        os.write(master, b"\x04")
        assert p.wait(timeout=30) == 0
        said = seen.decode()
        assert (("warning: input:1: 1 control character(s) removed before translating (an arrow key?" in said)
                if redirected else (want in said and "\x01" not in said)), said
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("typed", [[], ["리 니", "차"]])
@pytest.mark.parametrize("given", [[], ["--input", "/dev/stdin"]], ids=["stdin", "dev-stdin"])
def test_one_ctrl_d_at_once_ends_typed_input_with_an_output_file(tr, tmp_path, given, typed):
    """At a terminal with --output, a Ctrl-D before any line took three (each peek at the input took one: one to
    see whether the input is compressed, one for the first line); one ends it, as the banner says. And with
    --input /dev/stdin the first typed line was lost (peeked into a buffer the line reader no longer looked at)."""
    master, slave = pty.openpty()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, str(REPO / "scripts" / "translate.py"), "--model-dir", str(tr.model_dir),
                          "--output", str(tmp_path / "out.en"), "--beam-size", "1", "-v", *given], stdin=slave,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    try:
        deadline, err = time.time() + 60, b""
        while b" on cpu(0); beam_size=" not in err:   # (-v: the model is loaded, the input is about to be read; the
            assert p.poll() is None and time.time() < deadline   # output is made once a line is read, or at its end)
            if select.select([p.stderr], [], [], 0.1)[0]:
                err += os.read(p.stderr.fileno(), 4096)
        time.sleep(1)
        for line in typed:
            os.write(master, f"{line}\n".encode())
            time.sleep(1)
        os.write(master, b"\x04")
        assert p.wait(timeout=30) == 0
        want = "".join(t + "\n" for t in tr.translate(typed, beam_size=1))
        assert (tmp_path / "out.en").read_text(encoding="utf-8") == want
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()


def test_typed_lines_with_an_output_file_say_where_they_go(tr, tmp_path):
    """Typed at a terminal with --output: nothing showed on the terminal, so the command looked hung; it now says
    where each translation goes, and writes it there as each line is typed."""
    master, slave = pty.openpty()
    out = tmp_path / "out.en"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, str(REPO / "scripts" / "translate.py"), "--model-dir", str(tr.model_dir),
                          "--beam-size", "1", "--output", str(out)], stdin=slave, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env)
    os.close(slave)
    want = tr.translate(["리 니 차"], beam_size=1)[0] + "\n"
    try:
        os.write(master, "리 니 차\n".encode())
        deadline = time.time() + 60
        while not (out.exists() and out.read_text(encoding="utf-8") == want) and time.time() < deadline:
            time.sleep(0.1)
        assert out.read_text(encoding="utf-8") == want   # written before the input ends
        os.write(master, b"\x04")
        assert p.wait(timeout=30) == 0
        assert f"each translation goes to {out} as you press Enter; Ctrl-D to end" in p.stderr.read().decode()
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("output", ["afile/out.en", "adir", "read-only.en", "to-nowhere.en", "loop.en", "new/"])
def test_an_output_that_cannot_be_written_is_said_before_a_first_line_comes(tr, tmp_path, output):
    """Since the --output file is opened only once a first line is read well (an input refused at its start leaves
    an existing file as it was), one that cannot be written was said only then: after the user had typed a first
    sentence at the prompt, or once a slow pipe gave one. It is found at the start again, nothing made or emptied:
    also a symbolic link to a file in no directory, or to itself (a traceback of Path.resolve), and a name ending in
    "/" (opening made no directory)."""
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "read-only.en").write_text("kept\n")
    os.chmod(tmp_path / "read-only.en", 0o444)
    (tmp_path / "to-nowhere.en").symlink_to("gone/out.en")
    (tmp_path / "loop.en").symlink_to("loop.en")
    if output == "read-only.en" and os.access(tmp_path / output, os.W_OK):   # (root writes it all the same)
        pytest.skip("a file with no write permission is writable for root")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, str(REPO / "scripts" / "translate.py"), "--model-dir", str(tr.model_dir),
                          "--output", output, "--beam-size", "1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    try:   # (the pipe stays open, with no line in it: a program that has not written one yet)
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"--output {output}: still waiting for a first line to say it cannot be written")
    finally:
        p.kill()
        p.stdin.close()
    err = p.stderr.read()
    says = {"afile/out.en": "cannot make its directory afile (a file is in its path)",
            "adir": "--output adir is a directory", "read-only.en": "cannot write it (permission denied)",
            "to-nowhere.en": f"a symbolic link to gone/out.en, whose file cannot be made (no directory "
                             f"{tmp_path}/gone)",
            "loop.en": "a symbolic link to loop.en, whose file cannot be made (a loop of links)",
            "new/": "--output new/: a name ending in / is a directory's; give the file to write"}[output]
    assert p.returncode == 2 and says in err.decode(), err.decode()
    assert sorted(os.listdir(tmp_path)) == ["adir", "afile", "loop.en", "read-only.en", "to-nowhere.en"]
    assert not os.listdir(tmp_path / "adir") and (tmp_path / "read-only.en").read_text() == "kept\n"


class _Terminal(io.BytesIO):
    """Bytes typed at a terminal: standard input that says it is one."""

    def isatty(self) -> bool:
        return True


def test_a_bad_line_typed_with_an_output_file_is_refused_and_the_typing_goes_on(tr, tmp_path, capsys, monkeypatch):
    """At a terminal with --output and --json-input the banner said "type sentences", and one bad JSON line (or one
    not UTF-8) ended the session, exit 2; the prompt refuses such a line and goes on, and so does this now."""
    typed = [b'{"text": "\xeb\xa6\xac \xeb\x8b\x88"', b'{"text": "\xb8"}', '{"text": "리 니"}'.encode()]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(_Terminal(b"".join(t + b"\n" for t in typed))))
    out = tmp_path / "out.en"
    code, _, err = run(["--model-dir", tr.model_dir, "--beam-size", "1", "--output", out, "--json-input"], capsys)
    assert code == 0, err
    assert out.read_text(encoding="utf-8") == tr.translate(["리 니"], beam_size=1)[0] + "\n"
    assert "type JSON objects such as {" in err and "error: <stdin>:1: not JSON (" in err, err
    assert "error: <stdin>:2: invalid UTF-8 (byte 0xb8" in err, err
    # (also for a terminal fed a file, `script ... < in`, where nobody reads the errors as they come)
    assert "<stdin>: 2 lines refused (said above), without a line in the output" in err, err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(_Terminal(typed[1] + b"\n")))
    err = run(["--model-dir", tr.model_dir, "--output", out], capsys)[2]
    assert err.count("<stdin>: 1 line refused (") == 1 and "translated 0 lines in " in err, err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(_Terminal(typed[2] + b"\n")))
    assert "translated 1 line in " in run(["--model-dir", tr.model_dir, "--output", out, "--json-input"], capsys)[2]
    firsts = []   # a line left out, the lines after it keep their numbers (in warnings, plots' file names)
    translate_stream(tr, iter([(b"{", False), ('{"text": "\ub9ac"}'.encode(), False)]), io.StringIO(),
                     json_input=True, chunk_lines=5, on_bad_line=lambda e: None,
                     on_chunk=lambda first, lines, best: firsts.append(first))
    assert firsts == [2]


def typing(lines):
    """`interactive`'s read function for these typed lines, then end of input (Ctrl-D)."""
    typed = iter(lines)

    def read(prompt):
        try:
            return next(typed)
        except StopIteration:
            raise EOFError from None
    return read


def test_interactive_loop_in_process(tr, capsys):
    assert interactive(tr, read=typing(["리 니", "", "차"])) == 0
    assert capsys.readouterr().out.split("\n") == [*tr.translate(["리 니", "", "차"]), ""]


def test_the_prompt_warns_once_of_a_line_in_the_other_language(tr, capsys):
    """An input file or pipe ends with a warning when its lines look like the other language; typed lines had none:
    Korean typed to an en -> ko model came out as Korean garbage without a word."""
    assert interactive(tr, read=typing(["리 니", "Tom", "Thank you.", "Fine.", "차"])) == 0   # ("Tom": a name)
    out, err = capsys.readouterr()
    assert out.split("\n") == [*tr.translate(["리 니", "Tom", "Thank you.", "Fine.", "차"]), ""]
    assert [x for x in err.splitlines() if x.startswith("warning")] == [
        "warning: input:3: the line has no Hangul, but the model translates ko -> en: is it in the model's source "
        "language (or is this the model of the other direction)?"]


def test_a_line_the_terminal_could_not_decode_is_refused_and_the_prompt_goes_on(tr, capsys):
    """Typed in a CP949 terminal, Korean reaches `input()` as lone surrogates (surrogateescape), which SentencePiece
    refused with a TypeError that ended the session."""
    assert interactive(tr, read=typing(["리 니", "리 \udcb8\udcde", "니"])) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == tr.translate(["리 니", "니"])
    assert "error: input:2: not UTF-8 text (U+DCB8 at character 2): set the terminal to UTF-8" in err


# -- attention ------------------------------------------------------------------------------------------------------
def test_attention_heatmap(tr, src_lines, tmp_path, capsys):
    from nmt.plot import attention, save_attention_plot
    line = max(src_lines[:20], key=lambda x: len(x.split()))
    att = attention(tr, line)
    assert att.translation == tr.translate([line], beam_size=1)[0]
    assert att.weights.shape == (len(att.tgt_pieces), len(att.src_pieces)) and att.src_pieces[-1] == "</s>"
    np.testing.assert_allclose(att.weights.sum(axis=1), 1.0, atol=1e-5)
    # the task reverses word order: the attended source position moves right to left
    focus = att.weights[:-1, :-1].argmax(axis=1)
    assert np.corrcoef(np.arange(len(focus)), focus)[0, 1] < -0.5, att.weights.round(2)
    cut = attention(tr, line, max_len=2)   # cut off by the limit: its first two steps, and no "</s>" row
    assert cut.tgt_pieces == att.tgt_pieces[:2] and len(att.tgt_pieces) > 3
    np.testing.assert_allclose(cut.weights, att.weights[:2], atol=1e-5)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*missing from font")   # a Hangul glyph drawn as an empty box
        png = save_attention_plot(tr, line, tmp_path / "att.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    # and from the command line, one PNG per non-empty line
    path = tmp_path / "in.ko"
    path.write_text(f"{line}\n\n리 니\n", encoding="utf-8")
    code, _, _ = run(["--model-dir", tr.model_dir, "--input", path, "--output", tmp_path / "o.en",
                      "--plot-attention", tmp_path / "plots"], capsys)
    plots = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert code == 0 and plots == ["line-000001.png", "line-000003.png"]
    # a line cut to --max-input-tokens is warned of once, by its number: its plot warned again, as "line 1"
    path.write_text(f"리 니\n\n{' '.join(['리 니'] * 200)}\n", encoding="utf-8")
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", tmp_path / "o.en",
                        "--max-input-tokens", "20", "--plot-attention", tmp_path / "plots"], capsys)
    assert code == 0 and err.count("truncated to 20") == 1 and "input line 3 " in err and "1 truncated" in err, err
    # a line of invisible characters alone (blank to the model) gets no plot, and a translation longer than
    # --max-input-tokens its plot: both stopped the run with the lines after them untranslated
    path.write_text("리 니\n\x01\u200b\n리 니 리 니\n리\n", encoding="utf-8")
    code, _, err = run(["--model-dir", tr.model_dir, "--input", path, "--output", tmp_path / "o.en", "--chunk-lines",
                        "1", "--max-input-tokens", "2", "--plot-attention", tmp_path / "p2"], capsys)
    assert code == 0 and len((tmp_path / "o.en").read_text(encoding="utf-8").splitlines()) == 4, err
    assert sorted(p.name for p in (tmp_path / "p2").iterdir()) == [f"line-00000{n}.png" for n in (1, 3, 4)]


def test_unreported_work_neither_warns_nor_counts_on_its_own_thread(model_dir, caplog):
    """Work over lines reported once (attention plots, word strokes' rounds, the service's alignment) runs within
    `unreported`: it names the cut lines to its caller alone; the translator's counts and its other threads' reports
    are as without it."""
    import threading
    tr = Translator.from_dir(model_dir, decode=DecodeConfig(max_input_tokens=4, max_len_a=0, max_len_b=2))
    long = " ".join(["리 니"] * 10)
    with caplog.at_level(logging.WARNING, logger="nmt.translate"):
        with tr.unreported() as cut:
            quiet = tr.translate(["리", long], first_line=7)
            other = threading.Thread(target=tr.translate, args=([long],))   # another thread: reported as usual
            other.start()
            other.join()
            assert cut == [("input line", 8)]
        assert (tr.truncated, tr.cut_off, caplog.text.count("input line 1 has")) == (1, 1, 1), caplog.text
        assert "input line 8" not in caplog.text and "input lines 7" not in caplog.text
        assert tr.translate(["리", long], first_line=7) == quiet   # and outside it, reported again
    assert (tr.truncated, tr.cut_off) == (2, 3) and "input line 8 has" in caplog.text


def test_the_heatmap_of_a_long_line_stays_a_bounded_image():
    """The figure grew with the pieces of both sides: a 250-piece line's heatmap was a 12,800 x 15,680 pixel PNG
    (which image viewers refuse as a decompression bomb) and took 7 GB to draw."""
    import io
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image
    from nmt.plot import Attention, attention_figure
    n_tgt, n_src = 390, 251
    att = Attention("x", "y", [f"\u2581s{i}" for i in range(n_src)], [f"\u2581t{i}" for i in range(n_tgt)],
                    np.full((n_tgt, n_src), 1.0 / n_src))
    fig = attention_figure(att)
    assert max(fig.get_size_inches()) <= 33 and fig.dpi == 100
    FigureCanvasAgg(fig)
    png = io.BytesIO()
    fig.savefig(png, format="png")
    width, height = Image.open(io.BytesIO(png.getvalue())).size
    assert width * height < 9e6, (width, height)
    small = attention_figure(Attention("x", "y", ["a", "b"], ["c"], np.ones((1, 2)) / 2))   # as before: 0.5 in a piece
    assert tuple(small.get_size_inches()) == (4.0, 3.0)
    # a long source, a short translation: its rows keep 10-point labels (they shrank with the columns), and the
    # title of the whole source fits the figure (it began 155 pixels left of it)
    source = "가나다라마바사 " * 40
    wide = attention_figure(Attention(source, "y", ["a"] * 215, ["b"] * 18, np.ones((18, 215)) / 215))
    canvas = FigureCanvasAgg(wide)
    canvas.draw()
    ax = wide.axes[0]
    assert ax.get_yticklabels()[0].get_fontsize() == 10 and ax.get_xticklabels()[0].get_fontsize() < 5
    box = ax.title.get_window_extent(canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= wide.bbox.width, (box, wide.bbox.width)


def test_a_plots_title_is_the_source_the_model_read_and_fits_its_figure(tr, src_lines, monkeypatch):
    """A line cut to --max-input-tokens was titled with the whole line, though the heatmap's columns were the
    pieces read; and a long line's title ran off the figure's top, with matplotlib's "Tight layout not applied".
    A line at the limit was tokenized a second time to learn whether it was cut, which the Translator tells."""
    import copy
    import dataclasses
    import warnings
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from nmt.plot import attention, attention_figure
    short = copy.copy(tr)
    short.decode = dataclasses.replace(tr.decode, max_input_tokens=3)
    line = " ".join(src_lines[:4])
    encoded = []
    monkeypatch.setattr(tr.src_tok, "encode", lambda texts, f=tr.src_tok.encode: encoded.append(texts) or f(texts))
    att = attention(short, line)
    assert len(encoded) == 1, encoded   # (once, as the Translator reads it)
    read = tr.src_tok.decode([tr.src_tok.encode([line])[0][:3]])[0]
    assert att.source == f"{read} … (cut to --max-input-tokens 3)" and len(att.src_pieces) == 4
    longest = "가" * (3 * 16 + 1)   # (cut to the character guard, 3 x 16, before its pieces were counted)
    assert attention(short, longest).source.endswith(" … (cut to --max-input-tokens 3)")
    assert attention(tr, src_lines[0]).source == src_lines[0]   # whole: as given
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (tight_layout's warning)
        fig = attention_figure(dataclasses.replace(att, source="가나다라마바사 " * 2000))
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
    box = fig.axes[0].title.get_window_extent(canvas.get_renderer())
    assert fig.axes[0].get_title().count("\n") == 4 and box.y1 <= fig.bbox.height, (box, fig.bbox.height)


def test_attention_of_the_pieces_a_search_wrote(tr, src_lines):
    """The heatmap of a translation split its text again: where the search wrote a word in pieces SentencePiece
    would not choose (~5% of lines), the rows were other pieces and their attention another path's. Given its
    pieces, they are fed back as they are."""
    from nmt.align import forced_attention
    from nmt.plot import attention
    pieces, text = non_canonical_split(tr.tgt_tok)
    a = attention(tr, src_lines[0], pieces=pieces)
    assert a.tgt_pieces == pieces + ["</s>"] and a.translation == text
    assert attention(tr, src_lines[0], translation=text).tgt_pieces == [f"\u2581{text}", "</s>"]   # split again
    want = forced_attention(tr, tr.source_ids([src_lines[0]]), [tr.tgt_tok.piece_ids(pieces)])[0]
    np.testing.assert_allclose(a.weights, want, atol=1e-6)
    for kwargs, match in (({"pieces": pieces, "translation": text}, "give a translation's text or its pieces, not "),
                          ({"pieces": pieces, "max_len": 3}, "max_len limits the greedy translation"),
                          ({"pieces": ["zzz"]}, r"pieces\[0\] 'zzz' is not a piece of the en vocabulary"),
                          ({"pieces": pieces * 200}, "pieces has 400 items, more than ")):
        with pytest.raises(ValueError, match=match):
            attention(tr, src_lines[0], **kwargs)


def test_a_plot_is_of_the_pieces_the_search_wrote(tr, tmp_path):
    """A sampled byte piece writes U+FFFD, which tokenizes again as 3 pieces: the translation's plot was refused as
    longer than the limit, with a warning. The saver gets the search's ids: every plot is made, of them, also of a
    sampled <s> or <pad> (nmt-translate --sample 0 --plot-attention stopped at one, exit 2)."""
    import nmt.plot
    from nmt.plot import attention_saver
    from nmt.tokenizer import BOS_ID, PAD_ID
    byte = tr.tgt_tok.piece_ids(["<0xE3>"])
    save = attention_saver(tr, tmp_path / "p")
    save(7, ["리 니", "리", ""], [byte * 90, byte, []])
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["line-000007.png", "line-000008.png"]
    save(9, ["리"], [[BOS_ID, *byte, PAD_ID]])   # (--sample 0 drew them: "attention: pieces[0] is the start ...")
    assert (tmp_path / "p" / "line-000009.png").is_file()
    assert nmt.plot.attention(tr, "리", pieces=["<0xE3>"]).tgt_pieces == ["<0xE3>", "</s>"]


@pytest.mark.parametrize("flags", [[], ["--beam-size", "1"], ["--nbest", "2"], ["--alignment"], ["--sample", "3"]],
                         ids=["beam", "greedy", "nbest", "alignment", "sample"])
def test_plots_show_the_translation_written(tr, src_lines, tmp_path, capsys, monkeypatch, flags):
    """--plot-attention plotted the greedy path whatever was written (beam search's best, a sample), then the text
    of the translation written, split again; each plot is now of the pieces the search wrote for that line."""
    import nmt.plot
    plotted = {}

    def record(translator, sentence, path, title=None, translation=None, pieces=None):
        plotted[Path(path).name] = (translation, pieces)
    monkeypatch.setattr(nmt.plot, "save_attention_plot", record)
    path = tmp_path / "in.ko"
    path.write_text("\n".join(src_lines[:6] + ["", src_lines[6]]) + "\n", encoding="utf-8")
    code, out, err = run(["--model-dir", tr.model_dir, "--input", path, "--plot-attention", tmp_path / "p", *flags],
                         capsys)
    rows = out.splitlines()
    best = ([json.loads(r)["translations"][0] if json.loads(r)["translations"] else "" for r in rows]
            if "--nbest" in flags else [r.split(" ||| ")[0] for r in rows])
    assert code == 0 and len(best) == 8, err
    assert sorted(plotted) == [f"line-{i + 1:06d}.png" for i in range(8) if i != 6]
    for i in range(8):
        if i != 6:
            translation, pieces = plotted[f"line-{i + 1:06d}.png"]
            written = tidy_translation(tr.tgt_tok.decode([tr.tgt_tok.piece_ids(pieces)])[0])
            assert translation is None and written == best[i]
    if not flags:   # the search's own pieces
        assert [plotted[f"line-{i + 1:06d}.png"][1] for i in range(6)] == [
            [tr.tgt_tok.piece(t) for t in h[0][0]] for h in tr.translate_ids(src_lines[:6])]


# -- benchmark ------------------------------------------------------------------------------------------------------
def test_benchmark_script(tr, tmp_path, capsys):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import benchmark_translate
    finally:
        sys.path.remove(str(REPO / "scripts"))
    out = tmp_path / "bench.json"
    files = ["--src-file", str(synth_file(tr.model_dir, "test.ko")),
             "--tgt-file", str(synth_file(tr.model_dir, "test.en"))]
    code = benchmark_translate.main(["--model-dir", str(tr.model_dir), *files, "--max-sentences", "6", "--warmup", "2",
                                     "--rounds", "2", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "sent/s" in printed and "forced" in printed
    res = json.loads(out.read_text())   # the conditions every benchmark records (it wrote cpus, omp_num_threads)
    assert {"cores", "OMP_NUM_THREADS", "load_average_at_start", "cpu", "commit"} <= set(res["machine"])
    assert [(r["search"], r["batch_size"]) for r in res["results"]] == [
        ("greedy", 1), ("greedy", 64), ("beam 5", 1), ("beam 5", 64), ("beam 5 + alignment", 1),
        ("beam 5 + alignment", 64), ("beam 5 + word prefix", 1), ("beam 5 + word prefix", 64),
        ("beam 5 + open prefix", 1), ("beam 5 + open prefix", 64), ("forced", 1), ("forced", 64)]
    assert all(r["sentences"] == 6 and r["sentences_per_s"] > 0 and r["out_tokens_per_s"] > 0 and r["peak_rss_mb"] > 50
               and len(r["round_seconds"]) == 2 and r["seconds"] == min(r["round_seconds"]) for r in res["results"])
    code = benchmark_translate.main(["--model-dir", str(tr.model_dir), *files, "--max-sentences", "2", "--beams", "1",
                                     "--batch-sizes", "2", "--warmup", "0", "--json", str(out)])
    assert code == 0 and [r["search"] for r in json.loads(out.read_text())["results"]] == [   # (not "beam 1 + ...")
        "greedy", "greedy + alignment", "greedy + word prefix", "greedy + open prefix", "forced"]
    code = benchmark_translate.main(["--model-dir", str(tr.model_dir), *files[:3], str(synth_file(tr.model_dir,
                                     "train.en")), "--max-sentences", "6"])
    assert code == 2 and "they must be line-aligned" in capsys.readouterr().err


def test_parameters_that_do_not_fit_the_config_are_a_clear_error(model_dir, tmp_path):
    import shutil
    from nmt.config import Config
    copy = tmp_path / "m"
    shutil.copytree(model_dir, copy)
    cfg = Config.load(copy / ckpt.CONFIG)
    cfg.model.hidden_size += 8
    cfg.save(copy / ckpt.CONFIG)
    with pytest.raises(ckpt.CheckpointError, match=rf"params.best cannot be loaded: .*model.hidden_size "
                                                   rf"{cfg.model.hidden_size} \(saved with {cfg.model.hidden_size - 8}\)"):
        Translator.from_dir(copy)
    as_trained_with_its_config(copy)   # (its manifests written with the edit: the parameters meet the model)
    with pytest.raises(ckpt.CheckpointError, match=r"params.best: cannot load these parameters into the model"):
        Translator.from_dir(copy)


# -- ensembles ------------------------------------------------------------------------------------------------------
def test_cli_ensemble_of_twin_models_translates_like_one(tr, src_lines, tmp_path, capsys):
    """An ensemble of a model and its twin (one parameter a float32 step away: a copy, the same model, is refused)
    follows the same (mean) distribution, so it gives the same output."""
    twin = twin_of(tr.model_dir, tmp_path / "twin")
    path = tmp_path / "in.ko"
    path.write_text("\n".join(src_lines[:10]) + "\n", encoding="utf-8")
    code, out, err = run(["--model-dir", tr.model_dir, "--ensemble", twin, "--input", path], capsys)
    assert code == 0, err
    assert out.splitlines() == tr.translate(src_lines[:10]) and "WARNING" not in err, err
    both = Translator.from_dir(tr.model_dir, ensemble=[twin])
    assert len(both.members) == 2 and both.member_dirs == [twin]


def test_ensemble_members_must_share_vocabularies_and_languages(tr, tmp_path, capsys):
    from nmt.tokenizer import train_tokenizer
    other = tmp_path / "other"
    shutil.copytree(tr.model_dir, other)
    text = synth_file(tr.model_dir, "train.en").read_text(encoding="utf-8").splitlines()
    (other / "spm.en.model").unlink()
    train_tokenizer(text, other, "en", vocab_size=tr.tgt_tok.vocab_size - 20)
    code, _, err = run(["--model-dir", tr.model_dir, "--ensemble", other], capsys)
    assert code == 2 and "Traceback" not in err
    assert (f"{other}: cannot join an ensemble with {tr.model_dir}: its target SentencePiece model spm.en.model (en, "
            f"{tr.tgt_tok.vocab_size - 20} pieces) differs from {tr.model_dir / 'spm.en.model'} (en, ") in err
    assert "must share both vocabularies" in err
    from nmt.members import check_member_vocabulary   # a joint model (--shared-vocab) was labelled by one language
    from nmt.tokenizer import JOINT, Tokenizer
    train_tokenizer(text, tmp_path / "joint", JOINT, vocab_size=tr.tgt_tok.vocab_size - 20)
    joint = Tokenizer.load(tmp_path / "joint" / f"spm.{JOINT}.model", lang="en")
    with pytest.raises(ckpt.CheckpointError, match=rf"its target SentencePiece model spm.{JOINT}.model \(both "
                                                   r"languages, \d+ pieces\) differs from .*spm.en.model \(en, "):
        check_member_vocabulary(other, tr.model_dir, "target", tr.tgt_tok, joint)
    # the same joint file in an en->ko member was a vocabulary that "differs": the direction does
    other_way = Tokenizer.load(tmp_path / "joint" / f"spm.{JOINT}.model", lang="ko")
    with pytest.raises(ckpt.CheckpointError, match=r"its target language is ko, .*'s en; ensemble members "
                                                   "translate the same language pair in the same direction"):
        check_member_vocabulary(other, tr.model_dir, "target", joint, other_way)
    code, _, err = run(["--model-dir", tr.model_dir, "--ensemble", tmp_path / "nothing"], capsys)
    assert code == 2 and f"--ensemble {tmp_path / 'nothing'}: no such directory" in err
    src = tmp_path / "three.ko"   # an ensemble's heatmaps: the mean of its members' attention
    src.write_text("".join(synth_file(tr.model_dir, "test.ko").read_text(encoding="utf-8").splitlines(True)[:3]),
                   encoding="utf-8")
    twin = twin_of(tr.model_dir, tmp_path / "twin")
    code, _, err = run(["--model-dir", tr.model_dir, "--ensemble", twin, "--input", src, "--plot-attention",
                        tmp_path / "plots"], capsys)
    assert code == 0 and len(list((tmp_path / "plots").glob("line-*.png"))) == 3, err
    (tmp_path / "link").symlink_to(tr.model_dir)   # a model given twice would count twice in the mean: refused
    for members in ([tr.model_dir], [twin, tmp_path / "link"], [twin, tmp_path / "plots" / ".." / "twin"],
                    [twin, twin]):
        code, _, err = run(["--model-dir", tr.model_dir, "--ensemble", *members, "--input", src], capsys)
        assert code == 2 and "Traceback" not in err, err
        assert f"{members[-1]}: given twice in the ensemble (the first time as " in err
        assert "the same directory): its checkpoint best (params.best, step " in err, err
        assert err.rstrip().endswith("give each model once") and "WARNING" not in err, err


def test_a_directory_an_earlier_version_wrote_is_refused_with_a_clear_error(model_dir, tmp_path, capsys):
    """A directory without checkpoint manifests (an earlier version wrote none) names itself and says what to do, on
    the API and on the command line (no traceback); before, it was loaded unverified."""
    copy = tmp_path / "old"
    shutil.copytree(model_dir, copy)
    for manifest in copy.glob("manifest.*.json"):
        manifest.unlink()
    with pytest.raises(ckpt.CheckpointError, match=rf"^{copy} has no checkpoint manifests .* an earlier version of "
                                                   r"nmt wrote the directory, which this one does not read"):
        Translator.from_dir(copy)
    code, _, err = run(["--model-dir", copy, "--input", synth_file(model_dir, "test.ko")], capsys)
    assert code == 2 and "earlier version of nmt" in err and "Traceback" not in err


def test_translate_cli_decodes_on_cpu0_to_cpuN_minus_1(tr):
    """`--cpu-devices 2` decodes on cpu(0) and cpu(1), the contexts training uses (`nmt.parallel.parse_devices`)."""
    from nmt.cli_decode import build_translate_parser
    from nmt.cli_io import load_translator
    parse = build_translate_parser().parse_args
    assert load_translator(parse(["--model-dir", str(tr.model_dir), "--cpu-devices", "2"])).ctxs == [mx.cpu(0),
                                                                                                      mx.cpu(1)]
    assert load_translator(parse(["--model-dir", str(tr.model_dir)])).ctxs == [mx.cpu(0)]


def test_threads_sharing_a_translator_get_what_one_thread_gets(model_dir, src_lines):
    """A web app's threads may share one Translator (its calls keep no state between them but the `truncated`
    count): 8 threads translating overlapping batches of other sizes at once get the sequential answers."""
    import threading
    tr = Translator.from_dir(model_dir)   # fresh: the threads also race to build the step graphs
    sizes = [1 + (k * 7) % len(src_lines) for k in range(8)] + [len(src_lines)] * 8
    expected = {n: tr_n for n, tr_n in ((n, Translator.from_dir(model_dir).translate(src_lines[:n]))
                                        for n in set(sizes))}
    got, errors = {}, []

    def work(k: int) -> None:
        try:
            got[k] = tr.translate(src_lines[:sizes[k]])
        except Exception as e:   # noqa: BLE001 - reported below with its thread
            errors.append((k, repr(e)))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(sizes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and all(got[k] == expected[sizes[k]] for k in range(len(sizes)))
