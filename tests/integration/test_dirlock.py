"""One trainer per model directory, with two real processes: the second is refused naming the first (host, PID,
since when) and leaves the directory alone; readers load checkpoints while it writes and only ever see intact
ones; a lock left by a killed process does not block."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import mxnet as mx
import pytest

from nmt import checkpoint as ckpt
from nmt.dirlock import ModelDirLock, ModelDirLocked
from tests.synth import write_task

REPO = Path(__file__).resolve().parents[2]

ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("synth"), n_train=400)


def train_cmd(task, model_dir: Path, *extra: str):
    return [sys.executable, str(REPO / "scripts" / "train.py"), "--train-src", task["train_src"], "--train-tgt",
            task["train_tgt"], "--dev-src", task["dev_src"], "--dev-tgt", task["dev_tgt"], "--model-dir",
            str(model_dir), "--vocab-size", "400", "--embed-size", "16", "--hidden-size", "16", "--num-layers", "1",
            "--batch-size", "8", "--valid-every", "3", "--keep-last", "3", "--no-progress",
            "--valid-max-sentences", "5", "--no-eval", "--patience", "0", *extra]


def wait_for(path: Path, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
        assert time.time() < deadline, f"{path} not written within {seconds} s"
        time.sleep(0.1)


def test_second_trainer_is_refused_and_readers_see_only_intact_checkpoints(tmp_path, task):
    d = tmp_path / "m"
    first = subprocess.Popen(train_cmd(task, d, "--max-steps", "100000"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=ENV)
    try:
        wait_for(d / ckpt.METRICS, first)
        for extra in (["--resume"], ["--overwrite"]):
            r = subprocess.run(train_cmd(task, d, *extra), capture_output=True, text=True, env=ENV, timeout=120)
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
            assert f"is being trained by process {first.pid} on host {socket.gethostname()} (since " in r.stderr
            assert "Wait for it to finish" in r.stderr
            assert (d / ckpt.CONFIG).exists() and (d / ckpt.STATE).exists()   # --overwrite deleted nothing
        loads, deadline = 0, time.time() + 4
        while time.time() < deadline:   # the trainer saves every 3 updates meanwhile
            for which in ("latest", "best"):
                assert mx.nd.load(str(ckpt.params_path(d, which)))
                loads += 1
        assert loads >= 10 and first.poll() is None
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 143, err.decode()[-3000:]
    steps = ckpt.TrainState.load(d).step
    assert steps >= 6
    r = subprocess.run(train_cmd(task, d, "--resume", "--max-steps", str(steps + 2)), capture_output=True,
                       text=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]   # once the first has stopped, the directory is free again


def test_a_lock_left_by_a_killed_process_does_not_block(tmp_path):
    d = tmp_path / "m"
    code = ("import sys, time\nfrom nmt.dirlock import ModelDirLock\nlock = ModelDirLock(sys.argv[1]).acquire()\n"
            "print('locked', flush=True)\ntime.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(d)], stdout=subprocess.PIPE, env=ENV)
    try:
        assert holder.stdout.readline().strip() == b"locked"
        with pytest.raises(ModelDirLocked, match=f"process {holder.pid} on host .* holds .*train.lock"):
            ModelDirLock(d).acquire()
    finally:
        holder.kill()
        holder.wait()
    assert json.loads((d / ckpt.LOCK).read_text())["pid"] == holder.pid   # its record is still there: stale
    with ModelDirLock(d) as lock:
        assert lock.held and json.loads((d / ckpt.LOCK).read_text())["pid"] == os.getpid()
    assert not lock.held


def test_a_trainer_of_this_process_not_yet_fitted_is_named_as_such(tmp_path, task):
    """A notebook cell that made a Trainer and failed before fit(), run again, was told that process <its own PID>
    trains the directory, with nothing to say how to go on."""
    from nmt.train import create_trainer
    from tests.synth import tiny_config
    cfg = tiny_config(tmp_path, task, "m", max_steps=1)
    first = create_trainer(cfg)
    with pytest.raises(ModelDirLocked, match="held by this very process: .*trainer.lock.release()"):
        create_trainer(cfg, overwrite=True)
    first.lock.release()
    create_trainer(cfg, overwrite=True).fit()


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_live_trainer_before_its_first_checkpoint_is_named(tmp_path, task, capsys, dry_run):
    """A second trainer was told the live run "stopped before its first checkpoint: start it again with
    --overwrite" (for the first minutes of a real run): what the directory held was judged before its lock."""
    from nmt.cli import train_main
    d = tmp_path / "m"
    lock = ModelDirLock(d).acquire()   # a trainer that has made its directory, not yet a checkpoint
    try:
        argv = train_cmd(task, d, "--resume", *(["--dry-run"] if dry_run else []))[2:]
        assert train_main(argv) == 2
        err = capsys.readouterr().err
        assert "is held by this very process" in err and "stopped before its first checkpoint" not in err, err
    finally:
        lock.release()


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_refused_directory_is_left_without_a_lock_file(tmp_path, task, capsys, dry_run):
    """Probing for a live trainer made train.lock in any existing directory, one refused as not a model directory
    too (a mistyped path, a data folder)."""
    from nmt.cli import train_main
    d = tmp_path / "notes"
    d.mkdir()
    (d / "a.txt").write_text("mine")
    assert train_main(train_cmd(task, d, *(["--dry-run"] if dry_run else []))[2:]) == 2
    err = capsys.readouterr().err   # (not advised --resume or --overwrite, which refuse such a directory too)
    assert (f"--model-dir {d} already exists and holds files, but no run (no train.log or checkpoint): a.txt; a "
            "model directory holds only its run's files: move them out, or give another --model-dir") in err, err
    assert sorted(p.name for p in d.iterdir()) == ["a.txt"]
    assert train_main(train_cmd(task, d, "--resume", *(["--dry-run"] if dry_run else []))[2:]) == 2
    err = capsys.readouterr().err   # (it said "drop --resume to start a new run", refused as above)
    assert "nothing to resume; drop --resume to start a new run in another --model-dir (this one holds files, but " \
           "no run: a.txt)" in err, err


def test_a_distributed_resume_without_the_run_on_rank_0s_machine_says_so(tmp_path, monkeypatch):
    """Rank 0 of a job (the scheduler ranks the workers, on any machine) without the run's directory said "drop
    --resume to start a new run": a new run there, apart from the checkpoints on the other machines."""
    from nmt.dirlock import check_model_dir
    for var, value in (("DMLC_ROLE", "worker"), ("DMLC_NUM_WORKER", "2")):
        monkeypatch.setenv(var, value)
    with pytest.raises(ckpt.CheckpointError) as e:
        check_model_dir(tmp_path / "run", resume=True, overwrite=False)
    assert (f"not found on {socket.gethostname()}, a machine of this job of 2 workers (rank 0 reads the run, and the "
            "scheduler may rank any machine's worker first): a distributed run's directory must be at this path on "
            "every machine of the job") in str(e.value)
    assert "where rank 0" not in str(e.value)   # (a dry run checks every worker alone: none knows its rank)
    assert "drop --resume" not in str(e.value)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ckpt.LOG).write_text("")   # a run stopped before its first checkpoint: there, on rank 0's
    with pytest.raises(ckpt.CheckpointError, match="the run stopped before its first checkpoint: start it again "
                                                   "with the command that started it"):
        check_model_dir(tmp_path / "run", resume=True, overwrite=False)
    (tmp_path / "run" / ckpt.LOG).unlink()
    monkeypatch.setenv("DMLC_NUM_WORKER", "1")
    with pytest.raises(ckpt.CheckpointError, match="nothing to resume; drop --resume to start a new run"):
        check_model_dir(tmp_path / "run", resume=True, overwrite=False)


def test_a_model_dir_under_a_dangling_symbolic_link_is_named(tmp_path):
    """--model-dir dl/m, dl a link to a directory since removed: a FileExistsError traceback ("File exists: 'dl'")."""
    from nmt.dirlock import check_model_dir
    (tmp_path / "dl").symlink_to(tmp_path / "nowhere")
    for model_dir in (tmp_path / "dl" / "m", tmp_path / "dl"):
        with pytest.raises(ckpt.CheckpointError, match=rf"^--model-dir {model_dir}: {tmp_path / 'dl'} is a symbolic "
                                                       rf"link to {tmp_path / 'nowhere'}, which leads nowhere \(missing, or links back: a loop\)"):
            check_model_dir(model_dir, resume=False, overwrite=False)


def test_the_lock_is_held_until_the_test_sets_are_scored(tmp_path, task, monkeypatch):
    """fit() gave the lock up before the test sets were scored: a second `nmt-train --overwrite` (or --resume) took
    the directory while the first still wrote scores.json, and the new run kept the old run's test scores."""
    from nmt.train import Trainer, train
    from tests.synth import tiny_config
    cfg = tiny_config(tmp_path, task, "m", max_steps=2)
    cfg.data.test_src, cfg.data.test_tgt = task["test_src"], task["test_tgt"]
    held, score = [], Trainer.evaluate_tests

    def evaluate_tests(self, which="best"):
        try:
            ModelDirLock(Path(cfg.train.model_dir)).acquire().release()
        except ModelDirLocked:
            held.append(which)
        return score(self, which)
    monkeypatch.setattr(Trainer, "evaluate_tests", evaluate_tests)
    assert train(cfg).test_scores and held == ["best"]
    ModelDirLock(Path(cfg.train.model_dir)).acquire().release()   # and given up after


def test_a_run_set_aside_by_a_killed_overwrite_is_named_not_deleted(tmp_path, task, capsys):
    """kill -9 while --overwrite set the replaced run aside: every command said the directory held no model (or
    was not empty), and the --overwrite it then advised deleted the run in .overwritten without a word."""
    from nmt.cli import train_main
    from nmt.cli_decode import translate_main
    d = tmp_path / "m"
    assert subprocess.run(train_cmd(task, d, "--max-steps", "3"), env=ENV).returncode == 0
    aside = d / ".overwritten"
    aside.mkdir()
    for p in list(d.iterdir()):
        if p.name not in (aside.name, ckpt.LOCK):
            p.rename(aside / p.name)
    kept = sorted(p.name for p in aside.iterdir())
    says = (f"{aside} holds the run that an interrupted --overwrite set aside: to keep that run, delete the other "
            f"files of {d} and move its files back there; to start over, delete {aside}")
    for argv in (["--overwrite"], ["--resume"], []):
        assert train_main(train_cmd(task, d, "--max-steps", "3", *argv)[2:]) == 2
        assert f"error: --model-dir {d}: {says}\n" == capsys.readouterr().err
    assert translate_main(["--model-dir", str(d), "--input", task["test_src"]]) == 2
    assert f"error: --model-dir {d}: config.json not found; {says}\n" == capsys.readouterr().err
    for init in (d, d / ckpt.PARAMS_BEST):   # (said "config.json not found", "no such ... parameter file")
        assert train_main(train_cmd(task, tmp_path / "tuned", "--init-from", str(init))[2:]) == 2
        assert f"error: --init-from {init}: {says}\n" == capsys.readouterr().err
    assert sorted(p.name for p in aside.iterdir()) == kept


def test_a_full_disk_as_the_lock_is_written_is_one_line_and_leaves_no_lock(tmp_path, monkeypatch):
    """A disk full as a run started (new, --resume, --dry-run): a traceback of os.pwrite, exit 1, and an empty
    train.lock left behind."""
    import errno
    from nmt import dirlock
    from nmt.storage import StorageError

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(dirlock.os, "pwrite", full)
    with pytest.raises(StorageError, match=rf"^cannot write {tmp_path / 'train.lock'}: No space left on device "
                                           r"\[errno ENOSPC\]; .* free, about \d+ bytes needed"):
        dirlock.ModelDirLock(tmp_path).acquire()
    assert not (tmp_path / "train.lock").exists()


def test_a_run_killed_before_its_first_checkpoint_is_told_to_overwrite_not_resume(tmp_path, task, capsys):
    """Killed (or stopped by a full disk) before its first checkpoint, the same command again was told to pass
    --resume, which then refused: nothing to resume, start again with --overwrite."""
    from nmt.cli import train_main
    d = tmp_path / "k9"
    d.mkdir()
    (d / ckpt.CONFIG).write_text("{}")   # as a run killed before its first checkpoint leaves it
    (d / ckpt.LOG).write_text("")
    assert train_main(train_cmd(task, d)[2:]) == 2
    err = capsys.readouterr().err
    assert "it holds a run that stopped before its first checkpoint (nothing to --resume): pass --overwrite" in err
    assert "pass --resume" not in err
    (d / ckpt.LOG).unlink()   # a config.json alone (the user's own, kept in the run's directory): no run stopped there
    for resume in ([], ["--resume"]):
        assert train_main(train_cmd(task, d)[2:] + resume) == 2
        assert "stopped before its first checkpoint" not in capsys.readouterr().err
