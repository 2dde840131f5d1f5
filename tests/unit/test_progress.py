"""The training progress bar: drawn on a terminal, left out of a redirected stderr (`nohup nmt-train > log &`),
whose file would otherwise fill with a frame per update; and the log's handlers, which sacreBLEU's warnings use too."""
from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import mxnet as mx
import pytest

from nmt.log import Progress


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, as a tty does."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream, enabled, drawn", [(Terminal, True, True), (io.StringIO, True, False),
                                                    (Terminal, False, False)])
def test_the_bar_is_drawn_only_on_a_terminal(monkeypatch, stream, enabled, drawn):
    err = stream()
    monkeypatch.setattr(sys, "stderr", err)
    progress = Progress(log_every=2, enabled=enabled)
    progress.start_epoch(0, total=4, done=0)
    batch = SimpleNamespace(num_sentences=2, num_src_tokens=10, num_tgt_tokens=12)
    for step in range(1, 5):
        progress.update(step, batch, mx.nd.array([24.0]), lr=1e-3)
    progress.end_epoch()
    assert ("epoch 1" in err.getvalue()) == drawn, repr(err.getvalue())
    assert progress.epoch["loss"] == pytest.approx(2.0)   # the epoch's figures are kept either way, for its log line


def test_sacrebleu_warnings_go_to_the_log_file_formatted(tmp_path, capsys):
    """sacreBLEU's warnings about the translations it scores (e.g. "That's 100 lines that end in a tokenized
    period") reached the console raw and never the run's train.log."""
    import logging

    import sacrebleu

    from nmt.log import logging_kept, setup_logging
    log = tmp_path / "train.log"

    @logging_kept   # (the loggers as they were afterwards, the log file closed)
    def scored():
        setup_logging(log)
        hyps = ["a b c ."] * 100
        sacrebleu.metrics.BLEU().corpus_score(hyps, [hyps])
        logging.getLogger("nmt.test").info("after")
    scored()
    text = log.read_text(encoding="utf-8")
    assert "WARNING" in text and "That's 100 lines that end in a tokenized period" in text and "after" in text
    assert "That's 100 lines" in capsys.readouterr().err   # the console too, formatted the same way


def test_a_torn_metrics_row_is_dropped_before_the_next_is_appended(tmp_path):
    """A crash mid-append left half a row without its line end: the resumed run's next row was appended onto it,
    and reading dropped the merged line (the rows ended at 180 where the run had 200)."""
    from nmt.log import MetricsWriter, read_metrics
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 160}\n{"step": 180}\n{"step": 20', encoding="utf-8")
    writer = MetricsWriter(path).keep_until(180)
    writer.write({"step": 200})
    assert [r["step"] for r in read_metrics(path)] == [160, 180, 200]
    MetricsWriter(path).keep_until(200)   # whole rows: left as they are
    assert path.read_text(encoding="utf-8") == '{"step": 160}\n{"step": 180}\n{"step": 200}\n'


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "-v"])
def test_warnings_given_before_are_lowered_only_within_warned_before(tmp_path, capsys, verbose):
    """`warned_before` (nmt-evaluate --dev-set reading a model's training data again) shows the warnings of what it
    wraps as DEBUG lines, on the console and in the log file, and one line counts them but at -v. Only within it:
    a warning given after it is a warning again (the filter removed), and an error within it stays an error."""
    import logging
    from nmt.log import logging_kept, setup_logging, warned_before
    log = tmp_path / "run.log"

    @logging_kept
    def command():
        setup_logging(log, level=logging.DEBUG if verbose else logging.INFO)
        said = logging.getLogger("nmt.recipes")
        with warned_before("the data read again"):
            said.warning("held out 1")
            said.warning("held out 2")
            said.error("an error within")
        said.warning("a warning after")
    command()
    for text in (capsys.readouterr().err, log.read_text(encoding="utf-8")):
        assert "ERROR nmt.recipes: an error within" in text and "WARNING nmt.recipes: a warning after" in text, text
        assert "WARNING nmt.recipes: held out" not in text, text
        count = "INFO nmt: the data read again: 2 warnings left out, which its training gave (-v shows them)"
        if verbose:
            assert "DEBUG nmt.recipes: held out 1" in text and "DEBUG nmt.recipes: held out 2" in text, text
            assert "left out" not in text, text
        else:
            assert "held out" not in text and count in text, text


def test_warnings_held_back_stay_held_after_an_interrupt_and_from_a_handler_above_them(tmp_path, capsys):
    """`warned_before` says its held warnings after a failure, not after Ctrl-C (which they do not explain), and
    gives them again only to the handlers whose level takes a warning (a program's own at ERROR: not)."""
    import logging
    from nmt.log import logging_kept, setup_logging, warned_before
    errors_only = tmp_path / "errors.log"

    @logging_kept
    def command(stop: BaseException):
        setup_logging(None)
        own = logging.FileHandler(errors_only, encoding="utf-8")
        own.setLevel(logging.ERROR)
        logging.getLogger("nmt").addHandler(own)
        with pytest.raises(type(stop)):
            with warned_before("the data read again"):
                logging.getLogger("nmt.recipes").warning("held out")
                raise stop
        own.close()
    command(KeyboardInterrupt())
    assert "held out" not in capsys.readouterr().err
    command(ValueError("the dev set is empty"))
    err = capsys.readouterr().err
    assert "WARNING nmt.recipes: held out" in err and "the 1 warning held back until now (its training gave it):" in err
    assert errors_only.read_text(encoding="utf-8") == ""


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "-v"])
def test_warnings_held_back_are_said_when_the_reading_fails(tmp_path, capsys, verbose):
    """A reading within `warned_before` that raised left its held warnings unsaid, and their count line too: the error
    came alone, without the warnings that may explain it (a line that is no pair, before "the dev set is empty").
    Said after all, as warnings, on the console and in the log file, before the error (at -v: shown already)."""
    import logging
    from nmt.log import logging_kept, setup_logging, warned_before
    log = tmp_path / "run.log"

    @logging_kept
    def command():
        setup_logging(log, level=logging.DEBUG if verbose else logging.INFO)
        said = logging.getLogger("nmt.recipes")
        with pytest.raises(ValueError):
            with warned_before("the data read again"):
                said.warning("held out 1")
                said.warning("held out 2")
                raise ValueError("the dev set is empty")
        said.warning("a warning after")
    command()
    for text in (capsys.readouterr().err, log.read_text(encoding="utf-8")):
        held = ["WARNING nmt.recipes: held out 1", "WARNING nmt.recipes: held out 2", "WARNING nmt.recipes: a warning "
                "after"]
        if verbose:   # (shown as they came)
            assert "DEBUG nmt.recipes: held out 1" in text and held[0] not in text and "held back" not in text, text
            continue
        why = "INFO nmt: the data read again failed; the 2 warnings held back until now (its training gave them):"
        assert why in text and "left out" not in text, text
        assert text.index(why) < text.index(held[0]) < text.index(held[1]) < text.index(held[2]), text
        assert text.count("held out 1") == 1, text
