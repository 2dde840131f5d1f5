"""nmt.tensorboard.TensorBoardWriter: the event files it writes read back, a resume continuing the curves, and the
behaviour without tensorboardX."""
from __future__ import annotations

import builtins
import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.config import Config, ConfigError
from nmt.tensorboard import TENSORBOARD_DIR, TensorBoardWriter
from tests.tb_events import read_tensorboard

pytest.importorskip("tensorboardX")


def test_scalars_and_samples_read_back(tmp_path):
    with TensorBoardWriter.create(tmp_path) as tb:
        assert tb.enabled and tb.logdir == tmp_path / TENSORBOARD_DIR
        for step in (10, 20, 30):
            tb.log_train(step, loss=5.0 - step / 10, learning_rate=1e-3 * step, grad_norm=2.5, tokens_per_s=1000 + step)
        tb.log_validation(30, loss=2.0, bleu=12.5, chrf=31.25)
        tb.log_samples(30, ["오늘 날씨가 좋네요.", "a | b", "__init__(*args) `x` [1]"], ["The weather is nice today.", "x",
                       "C:\\dir"], ["Nice weather.", "y", "z"])
    scalars, texts = read_tensorboard(tmp_path / TENSORBOARD_DIR)
    assert scalars["train/loss"] == [(10, 4.0), (20, 3.0), (30, 2.0)]
    assert [s for s, _ in scalars["train/learning_rate"]] == [10, 20, 30]
    assert scalars["train/learning_rate"][2][1] == pytest.approx(0.03)
    assert scalars["train/grad_norm"] == [(10, 2.5), (20, 2.5), (30, 2.5)]
    assert scalars["train/tokens_per_s"] == [(10, 1010.0), (20, 1020.0), (30, 1030.0)]
    assert scalars["dev/loss"] == [(30, 2.0)] and scalars["dev/bleu"] == [(30, 12.5)]
    assert scalars["dev/chrf"] == [(30, 31.25)]
    assert scalars["dev/perplexity"][0][0] == 30 and scalars["dev/perplexity"][0][1] == pytest.approx(math.exp(2.0))
    [(step, text)] = texts["dev/samples"]
    assert step == 30 and "| 오늘 날씨가 좋네요. | The weather is nice today. | Nice weather. |" in text
    assert "a \\| b" in text   # a pipe inside a sentence does not break the table
    assert "| \\_\\_init\\_\\_(\\*args) \\`x\\` \\[1\\] | C:\\\\dir | z |" in text   # Markdown's marks, as written


def test_a_resumed_run_continues_the_same_curves(tmp_path):
    # The first run checkpoints at step 20, logs steps 30 and 40, and dies; the resumed run starts from step 20.
    with TensorBoardWriter.create(tmp_path) as tb:
        for step in (10, 20, 30, 40):
            tb.log_train(step, loss=float(step))
        tb.log_validation(20, loss=1.0, bleu=5.0)
        tb.log_validation(40, loss=0.5, bleu=9.0)
    with TensorBoardWriter.create(tmp_path, resume_step=20) as tb:
        assert tb.logdir == tmp_path / TENSORBOARD_DIR
        for step in (30, 40, 50):
            tb.log_train(step, loss=step + 0.5)
        tb.log_validation(40, loss=0.75, bleu=8.0)
    scalars, _ = read_tensorboard(tmp_path / TENSORBOARD_DIR)
    # one curve: steps 10 and 20 of the first run, then the resumed run's, nothing twice
    assert scalars["train/loss"] == [(10, 10.0), (20, 20.0), (30, 30.5), (40, 40.5), (50, 50.5)]
    assert scalars["dev/bleu"] == [(20, 5.0), (40, 8.0)]


def test_the_curves_up_to_a_checkpoint_are_on_disk_when_it_is_saved(tmp_path):
    """tensorboardX's flush left the events its writer thread had not taken yet: a run killed (kill -9) after the
    checkpoint of a validation lost its dev BLEU, perplexity, chrF and samples of that step for good (the resume
    drops only later steps, and never writes those again). `sync`, as a checkpoint is saved, writes them all."""
    tb = TensorBoardWriter.create(tmp_path)
    for step in (10, 20):
        tb.log_train(step, loss=float(step))
    tb.log_validation(20, loss=1.0, bleu=5.0, chrf=20.0)
    tb.log_samples(20, ["가"], ["a"], ["b"])
    tb.sync(20)
    scalars, texts = read_tensorboard(tmp_path / TENSORBOARD_DIR)   # (as the process is killed now: not closed)
    assert scalars["dev/bleu"] == [(20, 5.0)] and scalars["dev/chrf"] == [(20, 20.0)] and len(texts["dev/samples"]) == 1
    assert [s for s, _ in scalars["train/loss"]] == [10, 20]
    tb.log_train(30, loss=30.0)   # a new file takes the next events
    tb.sync(20)   # (a second sync at one step: a file of its own, none overwritten)
    tb.log_validation(40, loss=0.5, bleu=6.0)
    tb.close()
    scalars, _ = read_tensorboard(tmp_path / TENSORBOARD_DIR)
    assert scalars["train/loss"] == [(10, 10.0), (20, 20.0), (30, 30.0)] and scalars["dev/bleu"] == [(20, 5.0), (40, 6.0)]


def test_disabled_writer_does_nothing(tmp_path):
    for tb in (TensorBoardWriter.create(tmp_path, requested=False), TensorBoardWriter.create(tmp_path, rank=1)):
        assert not tb.enabled
        tb.log_train(1, loss=1.0)
        tb.log_validation(1, loss=1.0, bleu=1.0)
        tb.log_samples(1, ["a"], ["b"])
        tb.close()
    assert not (tmp_path / TENSORBOARD_DIR).exists()


def test_without_tensorboardx(tmp_path, monkeypatch, caplog):
    real_import = builtins.__import__

    def no_tensorboardx(name, *args, **kwargs):
        if name == "tensorboardX" or name.startswith("tensorboardX."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboardx)
    with pytest.raises(ConfigError, match=r"--tensorboard .*pip install 'tensorboardX=="):
        TensorBoardWriter.create(tmp_path, requested=True)
    from nmt.preflight import dry_run   # the dry run called such a run valid, which then refused at once
    cfg = Config()
    cfg.train.tensorboard, cfg.train.model_dir = True, str(tmp_path / "m")
    with pytest.raises(ConfigError, match=r"--tensorboard .*pip install 'tensorboardX=="):
        dry_run(cfg)
    logger = logging.getLogger("nmt")
    monkeypatch.setattr(logger, "propagate", True)
    caplog.clear()   # only the records of the call below (earlier tests may have left "nmt" at INFO)
    with caplog.at_level(logging.INFO, logger="nmt"):
        tb = TensorBoardWriter.create(tmp_path)   # the default: off, with one line saying how to turn it on
    assert not tb.enabled and not (tmp_path / TENSORBOARD_DIR).exists()
    # distinct messages: with "nmt" propagating, pytest's handler may see a record both there and at the root
    [line] = {r.getMessage() for r in caplog.records if "TensorBoard" in r.getMessage()}
    assert "tensorboardX is not installed" in line and "pip install" in line


def test_a_tensorboardx_that_cannot_be_imported_is_not_said_to_be_missing(tmp_path, monkeypatch, caplog):
    """With a protobuf of another version installed, training said "tensorboardX is not installed" of an installed
    tensorboardX: it says what its import raised."""
    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "tensorboardX":
            raise TypeError("Descriptors cannot be created directly.")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", broken)
    with pytest.raises(ConfigError, match=r"^--tensorboard needs tensorboardX: tensorboardX cannot be imported "
                                          r"\(TypeError: Descriptors cannot be created directly.\): pip install "):
        TensorBoardWriter.create(tmp_path, requested=True)


WRITES_UNTIL_FULL = """
import logging, resource, signal, sys
from nmt.tensorboard import TensorBoardWriter
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # (past the limit: EFBIG, as a full disk's ENOSPC)
tb = TensorBoardWriter.create(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
for step in range(1, 301):
    tb.log_train(step, loss=1.0, learning_rate=1e-3, grad_norm=1.0, tokens_per_s=1000.0, nll=1.0)
    if step % 50 == 0:
        tb.log_validation(step, loss=1.0, bleu=1.0, chrf=1.0)
        tb.log_samples(step, ["가"], ["a"], ["b"])
        tb.sync(step)
print("enabled" if tb.enabled else "stopped")
tb.close()
"""


def test_a_write_that_fails_stops_the_curves_with_one_warning(tmp_path):
    """A full disk while the curves were written ended training in tracebacks (tensorboardX's writer thread, its
    exit hook, our flush, our close) before the checkpoint's own clear error, and a writer thread dead of it left
    tensorboardX's queue full, which blocked the next event for good. Now one warning, and the caller goes on."""
    run = subprocess.run([sys.executable, "-c", WRITES_UNTIL_FULL, str(tmp_path)], capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0 and run.stdout == "stopped\n", run.stderr
    [line] = run.stderr.splitlines()
    assert line == (f"WARNING TensorBoard curves stopped at update 50: cannot write in {tmp_path / TENSORBOARD_DIR}: "
                    "File too large; training goes on without them")
    scalars, _ = read_tensorboard(tmp_path / TENSORBOARD_DIR)   # what was written before stays readable
    assert scalars["train/loss"][:3] == [(1, 1.0), (2, 1.0), (3, 1.0)]


def test_a_file_where_the_curves_go_stops_them_with_one_warning(tmp_path, caplog):
    """A file named tensorboard in the model directory (where the curves' directory goes): nmt-train --resume ended
    in a FileExistsError traceback from the directory's mkdir, outside the guard that warns of a failed write."""
    (tmp_path / TENSORBOARD_DIR).write_text("not a directory\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / TENSORBOARD_DIR).symlink_to("gone")   # (mkdir said "File exists" of a link to nowhere too)
    for model_dir, what in ((tmp_path, "a file"), (tmp_path / "b", "a link to gone, which leads nowhere,")):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="nmt.log"):
            with TensorBoardWriter.create(model_dir, resume_step=600) as tb:
                assert not tb.enabled
                tb.log_train(601, loss=1.0, learning_rate=1e-3, grad_norm=1.0, tokens_per_s=1.0)
        assert [r.getMessage() for r in caplog.records] == [
            f"TensorBoard curves stopped at update 600: cannot write in {model_dir / TENSORBOARD_DIR}: {what} is in "
            "the place of the directory: move it away for them; training goes on without them"]
