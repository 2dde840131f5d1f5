"""The model directory: atomic writes, what a crash leaves behind, keep-N, load_params."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import mxnet as mx
import pytest

from nmt import checkpoint as ckpt, dirlock
from nmt.atomic import atomic_open, atomic_write_text
from tests.synth import list_params_files, load_params, write_task

REPO = Path(__file__).resolve().parents[2]


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    path = tmp_path / "f.txt"
    atomic_write_text(path, "old")
    with pytest.raises(RuntimeError):
        with atomic_open(path, "w", encoding="utf-8") as f:
            f.write("new, half written")
            raise RuntimeError("crash while writing")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]   # no temporary file left behind


def test_an_atomic_write_that_cannot_be_made_names_the_path_given(tmp_path, capsys):
    """A directory at the path gave IsADirectoryError naming a temporary file ('/tmp/.x.040cef36.tmp' -> '/tmp/x');
    a directory where no file can be created, FileNotFoundError naming one ('/proc/.x.png.5f438d72.tmp')."""
    import re
    from nmt.commands import run_cli
    from nmt.storage import StorageError
    (tmp_path / "d").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "d")
    for path, says in ((tmp_path / "d", "Is a directory [errno EISDIR]; give the path of a file, not of a directory"),
                       (tmp_path / "link", "Is a directory [errno EISDIR]"),
                       (tmp_path / "file" / "x.png", "Not a directory [errno ENOTDIR]; a part of the path is a file"),
                       (Path("/proc/x.png"), "cannot create a file in /proc ("),
                       (Path("/proc/nmt-none/x.png"), "cannot make its directory /proc/nmt-none (")):
        with pytest.raises(StorageError, match=f"^cannot write {re.escape(str(path))}: {re.escape(says)}"):
            atomic_write_text(path, "x")
    assert sorted(os.listdir(tmp_path)) == ["d", "file", "link"] and os.listdir(tmp_path / "d") == []
    assert (tmp_path / "file").read_text() == "x"
    # a command's one-line error, not a traceback
    assert run_cli(lambda: atomic_write_text(tmp_path / "d", "x")) == 2
    assert capsys.readouterr().err == (f"error: cannot write {tmp_path / 'd'}: Is a directory [errno EISDIR]; give "
                                       "the path of a file, not of a directory\n")


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_writes_get_the_permissions_of_a_plain_write(tmp_path, umask, mode):
    """Not mkstemp's private 0600: a model directory must be readable wherever it is copied or shared."""
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "config.json", "{}")
        with open(tmp_path / "plain.txt", "w") as f:
            f.write("x")
    finally:
        os.umask(old)
    assert (tmp_path / "config.json").stat().st_mode & 0o777 == mode == (tmp_path / "plain.txt").stat().st_mode & 0o777


@pytest.mark.parametrize("umask, mode", [(0o022, 0o600), (0o077, 0o644), (0o077, 0o640)])
def test_a_rewritten_file_keeps_its_permissions(tmp_path, umask, mode):
    """A rewrite (nmt-evaluate's scores.json, a resume's state.json) took the umask's permissions: a file made
    private became readable by all under umask 022, and a shared one unreadable to the team under 077."""
    path = tmp_path / "scores.json"
    path.write_text("{}")
    path.chmod(mode)
    old = os.umask(umask)
    try:
        atomic_write_text(path, '{"test": 1}')
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode and path.read_text() == '{"test": 1}'


def test_a_long_file_name_is_written_through_a_shorter_temporary_name(tmp_path):
    """A name of 242-255 bytes, legal for the file, was "File name too long": its temporary sibling's was not."""
    path = tmp_path / ("x" * 250 + ".json")
    atomic_write_text(path, "{}")
    assert path.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == [path.name]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner (chown) needs root")
def test_the_sweep_of_killed_runs_temporary_entries_leaves_another_users(tmp_path):
    """Run as root, the sweep of what killed processes left (a dry run's or a tokenizer training's directory in /tmp,
    a download's, an encoded-corpus write's file) removed another user's entries too; and a named pipe of such a name,
    which anyone may make in /tmp, stopped it for good (opening it waited for a writer). Only the current user's go."""
    import threading
    from nmt.atomic import scratch_dir
    from nmt.encoded import killed_writes
    other = 65534 if os.geteuid() != 65534 else 65533   # (nobody)
    mine, theirs = tmp_path / "nmt-dry-run-mine0001.tmp", tmp_path / "nmt-dry-run-theirs01.tmp"
    for d in (mine, theirs):
        d.mkdir()
        (d / "spm.ko.model").write_bytes(b"x")
    cache_mine, cache_theirs = tmp_path / ".encoded.0123456789abcdef.src.ids.npy.0a1b2c3d.tmp", \
        tmp_path / ".encoded.0123456789abcdef.tgt.ids.npy.1a2b3c4d.tmp"
    for f in (cache_mine, cache_theirs):
        f.write_bytes(b"x" * 100)
    pipe = tmp_path / "nmt-dry-run-pipe0001.tmp"
    os.mkfifo(pipe)
    for path in (theirs, theirs / "spm.ko.model", cache_theirs, pipe):
        os.chown(path, other, other)
    assert killed_writes(tmp_path) == [cache_mine]

    def sweep():   # (a dry run's start: its own directory, made after the sweep, goes when done)
        with scratch_dir(tmp_path, "nmt-dry-run-"):
            pass
    swept = threading.Thread(target=sweep, daemon=True)
    swept.start()
    swept.join(20)
    if swept.is_alive():   # (its open of the pipe waits: a writer lets it go)
        os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
        swept.join(20)
        pytest.fail("the sweep waited on a named pipe of another user's")
    assert not mine.exists() and (theirs / "spm.ko.model").exists() and pipe.exists()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(p.name for p in (theirs, cache_mine, cache_theirs, pipe))


class _Net:
    """Stands in for a Gluon block: writes a real NDArray file, or fails like a full disk."""

    def __init__(self, value: float, fail: bool = False):
        self.value, self.fail = value, fail

    def save_parameters(self, path: str) -> None:
        if self.fail:
            Path(path).write_bytes(b"torn")
            raise OSError("No space left on device")
        mx.nd.save(path, {"w": mx.nd.full((2,), self.value)})


class _Trainer:
    def __init__(self, fail: bool = False):
        self.fail = fail

    def save_states(self, path: str) -> None:
        Path(path).write_bytes(b"states")
        if self.fail:
            raise OSError("No space left on device")


def test_failed_checkpoint_leaves_the_previous_one_loadable(tmp_path):
    state = ckpt.TrainState(step=10)
    ckpt.save_checkpoint(tmp_path, _Net(1.0), _Trainer(), state, keep_last=2, is_best=True)
    state.step = 20
    with pytest.raises(OSError):
        ckpt.save_checkpoint(tmp_path, _Net(2.0, fail=True), _Trainer(), state, keep_last=2, is_best=False)
    assert ckpt.TrainState.load(tmp_path).step == 10
    assert load_params(tmp_path, "latest")["w"].asnumpy().tolist() == [1.0, 1.0]
    assert load_params(tmp_path, "best")["w"].asnumpy().tolist() == [1.0, 1.0]


def test_optimizer_states_always_match_the_checkpoint_state_json_names(tmp_path):
    """A crash after the new parameters but while writing the new optimizer states must not pair step 10's
    parameters with step 20's Adam moments: the states file is named by step and the old one stays."""
    state = ckpt.TrainState(step=10)
    ckpt.save_checkpoint(tmp_path, _Net(1.0), _Trainer(), state, keep_last=2, is_best=False)
    state.step = 20
    with pytest.raises(OSError):
        ckpt.save_checkpoint(tmp_path, _Net(2.0), _Trainer(fail=True), state, keep_last=2, is_best=False)
    loaded = ckpt.TrainState.load(tmp_path)
    assert loaded.step == 10 and ckpt.latest_step(loaded) == 10
    assert (tmp_path / ckpt.trainer_states_file(10)).read_bytes() == b"states"
    assert not list(tmp_path.glob(".*.tmp"))   # no temporary file left behind
    state.step = 30
    ckpt.save_checkpoint(tmp_path, _Net(3.0), _Trainer(), state, keep_last=2, is_best=False)
    # each kept checkpoint keeps its optimizer states: --resume can fall back to it if the newest is damaged
    assert sorted(p.name for p in tmp_path.glob("trainer.*.states")) == [ckpt.trainer_states_file(10),
                                                                         ckpt.trainer_states_file(30)]


def test_a_state_written_before_valid_metric_keeps_its_best_bleu_as_the_best_score(tmp_path):
    """Runs trained before --valid-metric (which went by BLEU) resume, and average, against the BLEU they kept."""
    old = {k: v for k, v in vars(ckpt.TrainState(step=30, best_bleu=7.5, best_step=20)).items() if k != "best_score"}
    (tmp_path / ckpt.STATE).write_text(json.dumps(old))
    assert ckpt.TrainState.load(tmp_path).best_score == 7.5
    assert ckpt.TrainState(**old).best_score == 7.5   # as --resume reads it from a checkpoint's manifest
    old.update(best_bleu=-1.0, best_step=0)   # no validation yet: no best
    (tmp_path / ckpt.STATE).write_text(json.dumps(old))
    assert ckpt.TrainState.load(tmp_path).best_score is None


def test_keep_last_and_which(tmp_path):
    state = ckpt.TrainState()
    for step in (1, 2, 3, 4):
        state.step = step
        ckpt.save_checkpoint(tmp_path, _Net(float(step)), _Trainer(), state, keep_last=2, is_best=step == 2)
    assert list_params_files(tmp_path) == [ckpt.params_file(3), ckpt.params_file(4)]
    assert load_params(tmp_path, "latest")["w"].asnumpy()[0] == 4.0
    assert load_params(tmp_path, "best")["w"].asnumpy()[0] == 2.0
    assert load_params(tmp_path, "3")["w"].asnumpy()[0] == 3.0
    ckpt.average_checkpoints(tmp_path, state.params_files)
    assert load_params(tmp_path, "avg")["w"].asnumpy()[0] == 3.5
    with pytest.raises(ckpt.CheckpointError, match="unknown checkpoint"):
        load_params(tmp_path, "newest")
    with pytest.raises(ckpt.CheckpointError, match="not found"):
        load_params(tmp_path, "1")
    with pytest.raises(ckpt.CheckpointError, match="holds no checkpoint"):
        load_params(tmp_path / "nothing", "latest")


def test_prepare_model_dir(tmp_path):
    d = tmp_path / "m"
    dirlock.prepare_model_dir(d, resume=False, overwrite=False)
    (d / "x").write_text("x")
    with pytest.raises(ckpt.CheckpointError, match="already exists"):
        dirlock.prepare_model_dir(d, resume=False, overwrite=False)
    with pytest.raises(ckpt.CheckpointError, match="is not one: it has no train.log or checkpoint but holds x"):
        dirlock.prepare_model_dir(d, resume=False, overwrite=True)   # not a model directory: nothing deleted
    (d / ckpt.CONFIG).write_text("{}")   # a settings file of one's own is no run either
    with pytest.raises(ckpt.CheckpointError, match="is not one: it has no train.log or checkpoint but holds config"):
        dirlock.prepare_model_dir(d, resume=False, overwrite=True)
    (d / ckpt.CONFIG).unlink()
    (d / ckpt.LOG).write_text("")   # the first file a run writes
    with pytest.raises(ckpt.CheckpointError, match="--dev-tgt .*/x is inside --model-dir"):
        dirlock.prepare_model_dir(d, resume=False, overwrite=True, inputs={"--dev-src": None, "--dev-tgt": d / "x"})
    with pytest.raises(ckpt.CheckpointError, match="--cache-dir .* is inside --model-dir"):
        dirlock.prepare_model_dir(d, resume=False, overwrite=True, inputs={"--cache-dir": str(d)})
    (tmp_path / "train.ko").write_text("가\n")
    (d / "link.ko").symlink_to(tmp_path / "train.ko")   # the link goes with the directory: "file not found" later
    with pytest.raises(ckpt.CheckpointError, match="--train-src .*/link.ko is inside --model-dir"):
        dirlock.prepare_model_dir(d, resume=False, overwrite=True, inputs={"--train-src": d / "link.ko"})
    (d / "link.ko").unlink()
    (d / "data").symlink_to(tmp_path)   # a link to a directory of inputs (the file reached through it)
    with pytest.raises(ckpt.CheckpointError, match="--train-src .*/data/train.ko is inside --model-dir"):
        dirlock.prepare_model_dir(d, resume=False, overwrite=True, inputs={"--train-src": d / "data" / "train.ko"})
    (d / "data").unlink()
    assert (d / "x").exists()
    with pytest.raises(ckpt.CheckpointError, match="it holds what no run writes: x; move it out"):   # (not a run's)
        dirlock.prepare_model_dir(d, resume=False, overwrite=True, inputs={"--train-src": tmp_path / "train.ko"})
    (d / "x").rename(d / ckpt.params_file(3))
    dirlock.prepare_model_dir(d, resume=False, overwrite=True, inputs={"--train-src": tmp_path / "train.ko"})
    assert (d / ckpt.params_file(3)).exists() and (d / ckpt.LOG).exists()   # checked only: set_aside moves them
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(ckpt.CheckpointError, match="not a directory"):
        dirlock.prepare_model_dir(f, resume=False, overwrite=False)


def test_kill_9_mid_training_leaves_a_resumable_directory(tmp_path):
    """SIGKILL (no handler can run) at an arbitrary moment after the first checkpoint: the directory still loads
    and --resume finishes the run."""
    task = write_task(tmp_path / "data", n_train=300)
    model_dir = tmp_path / "m"
    args = ["--train-src", task["train_src"], "--train-tgt", task["train_tgt"], "--dev-src", task["dev_src"],
            "--dev-tgt", task["dev_tgt"], "--model-dir", str(model_dir), "--vocab-size", "400",
            "--embed-size", "16", "--hidden-size", "16", "--num-layers", "1", "--batch-size", "8",
            "--valid-every", "3", "--valid-max-sentences", "4", "--keep-last", "1", "--patience", "0",
            "--no-progress", "--no-eval"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "train.py"), *args, "--max-steps", "100000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.time() + 120
        while not (model_dir / ckpt.STATE).exists() or ckpt.TrainState.load(model_dir).step < 9:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.time() < deadline
            time.sleep(0.05)
        time.sleep(0.37)   # somewhere in the middle of later updates/checkpoints
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    state = ckpt.TrainState.load(model_dir)
    assert len(load_params(model_dir, "latest")) > 0
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "train.py"), *args, "--resume",
                        "--max-steps", str(state.step + 3)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert ckpt.TrainState.load(model_dir).step == state.step + 3


@pytest.mark.parametrize("files, stop, keep, going", [
    ([2, 4, 6], 0, 1, "steps 2, 4, 6 go"), ([2, 4, 6], 0, 2, "steps 2, 4 go"), ([2, 4, 6, 8], 0, 3, "steps 2, 4 go"),
    ([2, 4, 5], 5, 2, "steps 2, 5 go"), ([2, 4, 5], 5, 1, "steps 2, 4, 5 go")])
def test_a_lowered_keep_last_names_every_checkpoint_its_next_save_removes(tmp_path, files, stop, keep, going):
    """A resume that saves none with a lower --keep-last named the checkpoints beyond it as those the next save
    removes ("steps 2, 4 go" for --keep-last 1 of 2, 4, 6): that save keeps itself and the last keep - 1 of them
    (not a stop's checkpoint, `save_checkpoint`), so 6 went too."""
    import logging
    from types import SimpleNamespace
    from nmt.resume import record_stop
    state = ckpt.TrainState(step=files[-1], params_files=[ckpt.params_file(s) for s in files],
                            stop_file=ckpt.params_file(stop) if stop else "", stopped="max_steps")
    cfg = SimpleNamespace(train=SimpleNamespace(keep_last=keep))
    trainer = SimpleNamespace(state=state, model_dir=tmp_path, cfg=cfg)
    said, logger = [], logging.getLogger("nmt.checkpoint")
    handler, level = logging.Handler(), logger.level
    handler.emit = lambda record: said.append(record.getMessage())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        record_stop(trainer)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert len(said) == 1 and said[0].endswith(f"keeps the last {keep} ({going} then)"), said
    assert ckpt.TrainState.load(tmp_path).params_files == state.params_files


@pytest.mark.parametrize("stop", [True, False], ids=["stopped-at-6", "ran-on"])
@pytest.mark.parametrize("keep", [1, 2, 3])
def test_a_stop_that_saves_no_checkpoint_names_what_a_lowered_keep_last_prunes_later(tmp_path, caplog, keep, stop):
    """`record_stop` (a resume that stopped without saving a checkpoint, given a lower --keep-last): state.json saved
    with why it stopped, the checkpoints beyond the --keep-last kept on disk, and named in one INFO line as those its
    next checkpoint removes (`save_checkpoint`'s pruning, which also drops a stop's checkpoint): "steps 2, 4 go
    then" was said with --keep-last 1, and step 6 went too. None beyond it: no line."""
    from types import SimpleNamespace
    from nmt.resume import record_stop
    net = SimpleNamespace(save_parameters=lambda path: mx.nd.save(path, {"w": mx.nd.zeros((1,))}))
    opt = SimpleNamespace(save_states=lambda path: Path(path).write_bytes(b"s"))
    state = ckpt.TrainState()
    for step in (2, 4, 6):
        state.step, state.stopped = step, "max_steps" if stop and step == 6 else ""
        ckpt.save_checkpoint(tmp_path, net, opt, state, 3, is_best=False)
    files = [ckpt.params_file(s) for s in (2, 4, 6)]
    assert state.params_files == files and state.stop_file == (files[-1] if stop else "")
    trainer = SimpleNamespace(state=state, model_dir=tmp_path,
                              cfg=SimpleNamespace(train=SimpleNamespace(keep_last=keep)))
    state.stopped = "max_steps"
    with caplog.at_level("INFO", logger="nmt.checkpoint"):
        record_stop(trainer)
    assert ckpt.TrainState.load(tmp_path).stopped == "max_steps"
    assert ckpt.TrainState.load(tmp_path).params_files == files and all((tmp_path / f).exists() for f in files)
    said = [r.getMessage() for r in caplog.records if r.name == "nmt.checkpoint"]
    if keep == 3:
        assert said == []
        return
    found = re.fullmatch(rf"--keep-last {keep}: this run saved no checkpoint, so it keeps the 3 it had until its next "
                         rf"one, which keeps the last {keep} \(steps ([\d, ]+) go then\)", said[0])
    assert len(said) == 1 and found, said
    named = [int(s) for s in found[1].split(", ")]
    state.step, state.stopped = 8, ""
    ckpt.save_checkpoint(tmp_path, net, opt, state, keep, is_best=False)   # the next checkpoint
    assert sorted(set((2, 4, 6)) - {ckpt.params_step(p.name) for p in tmp_path.glob("params.0*")}) == named, said
