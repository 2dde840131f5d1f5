"""Write failures: a full disk (a small tmpfs, or an injected OSError(ENOSPC) where mounting is not possible), a
read-only file system and missing permissions end in one StorageError naming the file, the error and the space;
the previous checkpoint stays the newest intact one; the CLI exits 2 without a traceback."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import pytest

from nmt import checkpoint as ckpt
from nmt import download, storage
from nmt.log import MetricsWriter
from nmt.resume import resume_state
from nmt.storage import StorageError, is_fixable
from nmt.tokenizer import train_tokenizer
from tests.synth import make_pairs, write_task

REPO = Path(__file__).resolve().parents[2]


class _Net:
    """Writes `n` float32 parameters with MXNet (a real NDArray file), or fails like a full disk."""

    def __init__(self, value: float, n: int = 64, fail: bool = False):
        self.value, self.n, self.fail = value, n, fail

    def save_parameters(self, path: str) -> None:
        if self.fail:
            Path(path).write_bytes(b"torn")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        mx.nd.save(path, {"w": mx.nd.full((self.n,), self.value)})


class _Trainer:
    def save_states(self, path: str) -> None:
        Path(path).write_bytes(b"states")


@pytest.fixture
def small_disk(tmp_path):
    """small_disk(size, read_only=False): a fresh tmpfs of `size` mounted under tmp_path (root only)."""
    mounted = []

    def mount(size: str, read_only: bool = False) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                           text=True)
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}); the injected-ENOSPC "
                        "tests cover the same paths")
        mounted.append(where)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        return where
    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], check=False)


def test_injected_enospc_in_a_checkpoint_names_the_file_and_keeps_the_previous(tmp_path):
    state = ckpt.TrainState(step=10)
    ckpt.save_checkpoint(tmp_path, _Net(1.0), _Trainer(), state, keep_last=2, is_best=True)
    state.step = 20
    with pytest.raises(StorageError, match=r"params\.00000020: No space left on device \[errno ENOSPC\]; .* free, "
                                           r"about .* needed"):
        ckpt.save_checkpoint(tmp_path, _Net(2.0, fail=True), _Trainer(), state, keep_last=2, is_best=False)
    assert resume_state(tmp_path).step == 10
    assert mx.nd.load(str(ckpt.params_path(tmp_path, "latest")))["w"].asnumpy()[0] == 1.0
    assert not list(tmp_path.glob(".*.tmp"))


def _file_size_limit(limit: int):
    """A preexec_fn: the child may write files of `limit` bytes at most (`ulimit -f`, a batch job's)."""
    import resource
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def test_a_file_size_limit_is_named(tmp_path):
    """`ulimit -f` (or FAT32's 4 GiB): the decoding commands ended in a traceback (OSError: [Errno 27] File too
    large), and a checkpoint that MXNet wrote short was "free some space" with 75 GiB free."""
    out = tmp_path / "big.out"
    code = ("import sys; from nmt.storage import guarded_write\n"
            "with guarded_write(sys.argv[1]), open(sys.argv[1], 'w') as f:\n    f.write('x' * 100000)\n")
    p = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, cwd=REPO,
                       preexec_fn=_file_size_limit(4096), env={**os.environ, "PYTHONPATH": str(REPO)})
    assert f"StorageError: cannot write {out}: File too large [errno EFBIG]; the file would pass a size limit: " \
           "the shell's (`ulimit -f`, a batch job's)" in p.stderr, p.stderr
    code = ("import sys, mxnet as mx; from nmt.storage import short_write_failure\n"
            "print(short_write_failure(sys.argv[1], mx.base.MXNetError('Write incomplete'), 100000))\n")
    p = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, cwd=REPO,
                       preexec_fn=_file_size_limit(4096), env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.stdout.startswith(f"cannot write {out}: File too large [errno EFBIG]"), p.stdout + p.stderr


def test_a_numpy_array_written_short_is_named(tmp_path):
    """np.save into a file reports a short write as "OSError: N requested and M written", with no errno: the
    encoded-corpus cache, written on a disk that filled, ended training in a traceback (and `ulimit -f` too)."""
    out = tmp_path / "encoded.npy"
    code = ("import signal, sys, numpy as np; from nmt.atomic import atomic_open\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "with atomic_open(sys.argv[1], 'wb', size=800128) as f:\n    np.save(f, np.zeros(100000))\n")
    p = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, cwd=REPO,
                       preexec_fn=_file_size_limit(65536), env={**os.environ, "PYTHONPATH": str(REPO)})
    [last] = p.stderr.strip().splitlines()[-1:]
    assert last.startswith(f"nmt.storage.StorageError: cannot write {out}: File too large [errno EFBIG]"), p.stderr
    assert not list(tmp_path.iterdir())   # (the temporary file removed)


def test_full_tmpfs_during_a_real_mxnet_save_keeps_the_previous_checkpoint(small_disk):
    disk = small_disk("600k")
    state = ckpt.TrainState()
    with pytest.raises(StorageError, match=r"cannot write .*params\.0000000\d.* free, about .* needed") as e:
        for step in range(1, 10):   # 200 KB each: the third does not fit
            state.step = step
            ckpt.save_checkpoint(disk, _Net(float(step), n=50_000), _Trainer(), state, keep_last=5, is_best=False)
    assert "Traceback" not in str(e.value), e.value   # MXNet's message starts with its C++ stack
    good = resume_state(disk)
    assert good.step == step - 1
    assert mx.nd.load(str(ckpt.params_path(disk, "latest")))["w"].asnumpy()[0] == step - 1


def test_read_only_file_system_is_named(small_disk):
    disk = small_disk("1m", read_only=True)
    with pytest.raises(StorageError, match=r"params\.00000001: Read-only file system \[errno EROFS\].*read-only"):
        ckpt.save_checkpoint(disk, _Net(1.0), _Trainer(), ckpt.TrainState(step=1), keep_last=1, is_best=False)
    with pytest.raises(StorageError, match=rf"^--model-dir {disk / 'm'}: cannot create a file in {disk}: Read-only "
                                           r"file system \[errno EROFS\]") as e:
        storage.check_writable(disk / "m")
    assert "probe" not in str(e.value)


def test_a_read_only_model_dir_is_named_not_its_lock(small_disk):
    """nmt-train --model-dir on a read-only disk said "cannot write D/m/train.lock: Read-only file system ...", the
    lock it takes first, without the flag, where --dry-run said "--model-dir D/m: cannot create a file in D: ..."."""
    from nmt.dirlock import ModelDirLock
    disk = small_disk("1m", read_only=True)
    for model_dir in (disk / "m", disk):   # (a new directory, and one that exists)
        with pytest.raises(StorageError) as e:
            ModelDirLock(model_dir).acquire()
        assert str(e.value).startswith(f"--model-dir {model_dir}: cannot create a file in {disk}: Read-only file "
                                       "system [errno EROFS]"), e.value


def test_a_directory_that_cannot_be_written_is_named_not_the_probe(tmp_path, monkeypatch):
    """The check that an output can be written named the file it tried ("cannot write .../.nmt-write-probe-4242:
    Permission denied"), a file the user never gave: now the directory, after the flag and what the user gave."""
    import pathlib

    def refused(self, data):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
    monkeypatch.setattr(pathlib.Path, "write_bytes", refused)   # (root writes anywhere: chmod would not do)
    with pytest.raises(StorageError) as e:
        storage.check_writable(tmp_path / "new" / "m")
    assert str(e.value) == (f"--model-dir {tmp_path / 'new' / 'm'}: cannot create a file in {tmp_path}: Permission "
                            "denied [errno EACCES]; check the permissions of the directory or choose another one")
    with pytest.raises(StorageError) as e:
        storage.check_writable(tmp_path, "--output", shown=tmp_path / "out.txt")
    assert str(e.value).startswith(f"--output {tmp_path / 'out.txt'}: cannot create a file in {tmp_path}: "), e.value


def test_metrics_row_on_a_full_disk(tmp_path, monkeypatch):
    def full(_fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageError, match=r"metrics\.jsonl: No space left on device.* free, about \d+ bytes needed"):
        MetricsWriter(tmp_path / ckpt.METRICS).write({"step": 1, "dev_bleu": 1.0})


def test_a_full_disk_asks_for_the_files_size_not_what_was_written(small_disk, tmp_path):
    """"236.0 KiB free, about 236.0 KiB needed" for a 515 KiB file: the room asked for was the bytes written before
    the disk filled, which the temporary file's removal gives back, so the message said there was room."""
    from nmt.atomic import atomic_write_bytes
    disk, data = small_disk("256k"), os.urandom(400_000)
    with pytest.raises(StorageError, match=r"big: No space left on device \[errno ENOSPC\]; .* free, about 390\.6 "
                                           r"KiB needed"):
        atomic_write_bytes(disk / "big", data)


@pytest.mark.parametrize("variant", ["tmpfs", "injected"])
def test_tokenizer_save_on_a_full_disk(small_disk, tmp_path, monkeypatch, variant):
    lines = [ko for ko, _ in make_pairs(400, seed=1)]
    if variant == "tmpfs":
        out = small_disk("8k")
    else:
        out = tmp_path
        real = os.replace

        def full(src, dst):
            if "spm.ko" in str(dst):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(src, dst)
        monkeypatch.setattr(os, "replace", full)
    with pytest.raises(StorageError, match=r"spm\.ko\.(vocab|model): No space left on device.* free"):
        train_tokenizer(lines, out, "ko", 400)
    assert not (out / "spm.ko.model").exists()


@pytest.mark.parametrize("variant", ["tmpfs", "injected"])
def test_download_on_a_full_disk(small_disk, tmp_path, monkeypatch, variant):
    def stream(url, out, timeout, desc):
        if variant == "injected":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        for _ in range(20):
            out.write(b"x" * 10_000)
        return "0" * 64
    monkeypatch.setattr(download, "_stream", stream)
    dest = (small_disk("64k") if variant == "tmpfs" else tmp_path) / "corpus.tsv"
    with pytest.raises(StorageError, match=r"corpus\.tsv: No space left on device.* free"):
        download.download("https://example.invalid/corpus.tsv", dest, "0" * 64)
    assert not dest.exists()


def test_a_cache_dir_where_no_file_can_be_made_is_named_before_downloading(tmp_path, monkeypatch, capsys):
    """A --cache-dir under a file, or where the kernel makes no files (/proc: ENOENT, not a write error people
    usually meet), is one line naming the flag, before any network access."""
    from nmt.cli import train_main
    monkeypatch.delenv("NMT_DATA_DIR", raising=False)   # no mirror: the recipe's files would be downloaded
    monkeypatch.setattr(download, "_stream", lambda *a: pytest.fail("downloaded"))
    (tmp_path / "file").write_text("")
    for cache, why in ((tmp_path / "file" / "cache", f"{tmp_path / 'file'} is a file, not a directory"),
                       ("/proc/nmt-cache", "cannot create a file in /proc (No such file or directory)")):
        code = train_main(["--dry-run", "--model-dir", str(tmp_path / "m"), "--cache-dir", str(cache)])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and f"error: --cache-dir {cache}: {why}" in err, err


def test_preflight_refuses_a_model_dir_without_room(small_disk, tmp_path):
    """The CLI on a model directory too small for --keep-last checkpoints: exit 2, one line, no traceback."""
    task = write_task(tmp_path / "task", n_train=300)
    disk = small_disk("300k")
    args = ["--train-src", task["train_src"], "--train-tgt", task["train_tgt"], "--dev-src", task["dev_src"],
            "--dev-tgt", task["dev_tgt"], "--vocab-size", "400", "--model-dir", str(disk / "m"), "--keep-last", "3",
            "--no-progress"]
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "train.py"), *args], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert f"error: --model-dir {disk / 'm'}: " in r.stderr and "free, but --keep-last 3 checkpoints" in r.stderr


def test_check_room_names_what_is_needed(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "free_bytes", lambda path: 1000)
    with pytest.raises(StorageError, match=r"--model-dir .*: 1000 bytes free, but 2 checkpoints need about 1\.0 MiB"):
        storage.check_room(tmp_path, 1 << 20, "2 checkpoints")
    from nmt import preflight   # --keep-last 1 (its least) cannot be lowered: not advised
    from nmt.models import build_model
    from tests.synth import tiny_config
    cfg = tiny_config(tmp_path, {}, "m")
    net = build_model(cfg.model, 400, 400)
    net.initialize()
    for keep, advised in ((1, False), (3, True)):
        cfg.train.keep_last = keep
        with pytest.raises(StorageError) as e:
            preflight.check_checkpoint_room(cfg, net)
        assert ("lower --keep-last" in str(e.value)) == advised, str(e.value)


def checkpoint_every_2(tmp_path, steps: int) -> list:
    """nmt-train's flags of a tiny run into tmp_path/m that checkpoints every 2 updates, for `steps` updates."""
    task = write_task(tmp_path / "task", n_train=300)
    return ["--train-src", task["train_src"], "--train-tgt", task["train_tgt"], "--dev-src", task["dev_src"],
            "--dev-tgt", task["dev_tgt"], "--model-dir", str(tmp_path / "m"), "--vocab-size", "400",
            "--embed-size", "16", "--hidden-size", "16", "--num-layers", "1", "--batch-size", "8",
            "--valid-every", "2", "--max-steps", str(steps), "--no-progress", "--no-eval", "--patience", "0"]


def test_full_disk_mid_training_exits_2_and_resume_continues(tmp_path, capsys, monkeypatch):
    """nmt-train whose second checkpoint meets a full disk (injected): exit 2 naming the file, no traceback; the
    first checkpoint is the newest intact one and --resume finishes the run from it."""
    from mxnet import gluon
    from nmt.cli import train_main
    args = checkpoint_every_2(tmp_path, 6)
    real, calls = gluon.Block.save_parameters, []

    def save_parameters(self, filename, *a, **kw):
        calls.append(filename)
        if len(calls) > 2:   # params.00000002 and params.best fit; params.00000004 does not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, filename, *a, **kw)
    monkeypatch.setattr(gluon.Block, "save_parameters", save_parameters)
    assert train_main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"cannot write {tmp_path / 'm' / ckpt.params_file(4)}: No space left" in err
    assert resume_state(tmp_path / "m").step == 2
    monkeypatch.setattr(gluon.Block, "save_parameters", real)
    assert train_main(args + ["--resume"]) == 0
    assert ckpt.TrainState.load(tmp_path / "m").step == 6


def test_the_error_that_ends_a_run_ends_its_train_log(tmp_path, capsys, monkeypatch):
    """A run ended by an error after its setup (a full disk at a checkpoint; an exception in a training step) left
    train.log ending at its last validation, the error only on the terminal: train.log now ends with it, one line
    for bad input or a full disk, the traceback for an unexpected error (Sockeye and fairseq log theirs). The
    terminal shows what it did: the `error:` line, or (run_cli raises it again) the exception."""
    from mxnet import gluon
    from nmt.cli import train_main
    from nmt.train import Trainer
    real = gluon.Block.save_parameters

    def full(self, filename, *a, **kw):
        if "00000004" in str(filename):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, filename, *a, **kw)
    monkeypatch.setattr(gluon.Block, "save_parameters", full)
    assert train_main(checkpoint_every_2(tmp_path / "disk", 6)) == 2
    err = capsys.readouterr().err
    said = f"cannot write {tmp_path / 'disk' / 'm' / ckpt.params_file(4)}: No space left"
    assert "Traceback" not in err and f"error: {said}" in err, err
    log = (tmp_path / "disk" / "m" / ckpt.LOG).read_text().splitlines()
    assert "validation step 2 " in "\n".join(log) and len([line for line in log if " ERROR " in line]) == 1
    assert " ERROR nmt.train: the run stopped at step 4: " in log[-1] and said in log[-1], log[-3:]
    monkeypatch.setattr(gluon.Block, "save_parameters", real)

    step = Trainer.train_step

    def failing(self, batch):
        if self.state.step == 3:
            raise RuntimeError("injected failure\nsecond line")
        return step(self, batch)
    monkeypatch.setattr(Trainer, "train_step", failing)
    with pytest.raises(RuntimeError, match="injected failure"):
        train_main(checkpoint_every_2(tmp_path / "bug", 6))
    assert "Traceback" not in capsys.readouterr().err   # (Python prints it as the exception leaves the command)
    log = (tmp_path / "bug" / "m" / ckpt.LOG).read_text()
    tail = log[log.index(" ERROR "):].splitlines()
    assert tail[0].endswith(" ERROR nmt.train: the run stopped at step 3: RuntimeError: injected failure"), tail
    assert tail[1] == "Traceback (most recent call last):" and tail[-2:] == ["RuntimeError: injected failure",
                                                                          "second line"], tail
    assert "in failing" in log and "validation step 2 " in log


def test_a_first_checkpoint_on_a_full_disk_is_not_said_to_be_coming(tmp_path, capsys, monkeypatch):
    """nmt-translate of a run whose first checkpoint met a full disk said "holds no checkpoint yet ...: nmt-train
    writes the first at its first validation", as if the run went on; it ended, and its train.log says why."""
    from mxnet import gluon
    from nmt.cli import train_main
    from nmt.cli_decode import translate_main

    def full(self, filename, *a, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(gluon.Block, "save_parameters", full)
    assert train_main(checkpoint_every_2(tmp_path, 6)) == 2
    model_dir = tmp_path / "m"
    assert "validation step 2 " in (model_dir / ckpt.LOG).read_text()
    capsys.readouterr()
    assert translate_main(["--model-dir", str(model_dir), "--input", os.devnull]) == 2
    assert capsys.readouterr().err == (
        f"error: {model_dir} holds no checkpoint (no state.json, no params.best): its run ended before it saved one "
        f"({model_dir / ckpt.LOG} says how far it got, and ends with its error unless it was killed); start it again "
        "with the command that started it, --overwrite added\n")


def test_a_model_directory_moved_while_training_is_one_error_and_resumes_where_it_went(tmp_path, capsys,
                                                                                       monkeypatch):
    """The model directory renamed after the first checkpoint: the next metrics row ended the run with a
    30-line FileNotFoundError traceback. Now exit 2 naming the file and why; the directory resumes where it went."""
    from nmt.cli import train_main
    from nmt import train as train_module
    args, real, prune = checkpoint_every_2(tmp_path, 6), train_module.ckpt.save_checkpoint, ckpt.prune

    def move_then_prune(model_dir, *a):   # moved as the checkpoint's files were all written: its listing failed
        if (tmp_path / "m").exists():
            (tmp_path / "m").rename(tmp_path / "moved")
        return prune(model_dir, *a)
    monkeypatch.setattr(ckpt, "prune", move_then_prune)
    assert train_main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and (f"error: cannot write {tmp_path / 'm' / ckpt.METRICS}: No such file or "
                                       "directory [errno ENOENT]; a directory on its path is gone (moved or deleted "
                                       "while in use?): put it back or choose another path") in err, err
    monkeypatch.setattr(ckpt, "prune", prune)
    assert train_main(["--model-dir", str(tmp_path / "moved"), "--resume", "--no-progress"]) == 0
    assert ckpt.TrainState.load(tmp_path / "moved").step == 6
    (tmp_path / "cwd").mkdir()   # a relative path whose current directory is deleted: the handler itself failed
    monkeypatch.chdir(tmp_path / "cwd")
    (tmp_path / "cwd").rmdir()
    assert is_fixable(FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "m/metrics.jsonl"))


def test_a_model_directory_gone_while_scores_are_recorded_is_named_not_the_standard_output(tmp_path):
    """nmt-evaluate whose model directory was moved away as it recorded a score said "cannot write the standard
    output: No such file or directory" (and sent its output to /dev/null): its block around stdout took every
    error of the run for stdout's. Another file's error is its own: scores.json's, a directory gone."""
    from nmt.cli_io import output_errors
    from nmt.scoring import record_scores
    gone = tmp_path / "moved-away"
    with pytest.raises(StorageError, match=rf"^cannot write {gone / ckpt.SCORES}: No such file or directory "
                                           r"\[errno ENOENT\]; a directory on its path is gone"):
        with output_errors(None):
            record_scores(gone, "test", "best", {"bleu": 1.0})
    with pytest.raises(PermissionError):   # (not "cannot write the standard output: Permission denied")
        with output_errors(None):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path / "other"))


def test_an_output_file_deleted_while_written_is_an_error(tmp_path):
    """nmt-translate --output d/out.txt whose directory was deleted while it translated wrote on into the unlinked
    file and exited 0: hours of translations lost without a word."""
    import contextlib
    import shutil
    from nmt.cli_io import open_output, output_errors
    for name in ("out.txt", "out.txt.gz"):
        out = tmp_path / "d" / name
        with pytest.raises(StorageError, match=rf"^--output {out}: the file was deleted while it was written \(it, "
                                               r"or its directory, was removed\): what was written to it is lost$"):
            with output_errors(str(out)), contextlib.ExitStack() as stack:
                f = open_output(stack, str(out))
                f.write("first\n")
                shutil.rmtree(tmp_path / "d")
                f.write("second\n")
        with output_errors(str(out)), contextlib.ExitStack() as stack:   # (written whole: no error)
            open_output(stack, str(out)).write("x\n")
        assert out.is_file()


def test_an_output_file_is_checked_by_the_open_file_not_by_its_path(tmp_path):
    """Whether --output was deleted while written was asked of its path: a file deleted and made again there by
    another program went unnoticed (exit 0, the translations lost), and a directory reached through a symbolic link
    retargeted meanwhile was said to be gone, though every line was written in the directory it pointed to."""
    import contextlib
    from nmt.cli_io import open_output, output_errors

    def write(out: Path, meanwhile) -> None:
        with output_errors(str(out)), contextlib.ExitStack() as stack:
            f = open_output(stack, str(out))
            f.write("first\n")
            meanwhile()
            f.write("second\n")
    out = tmp_path / "out.txt"
    with pytest.raises(StorageError, match=rf"^--output {out}: the file was deleted while it was written \(it, or its "
                                           r"directory, was removed; the file there now is another\): what was "
                                           r"written to it is lost$"):
        write(out, lambda: (out.unlink(), out.write_text("another program's\n")))
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    (tmp_path / "current").symlink_to("v1")

    def retarget():   # (as `ln -sfn v2 current` does it: a new link renamed over the old one)
        (tmp_path / "new").symlink_to("v2")
        (tmp_path / "new").replace(tmp_path / "current")
    write(tmp_path / "current" / "out.txt", retarget)
    assert (tmp_path / "v1" / "out.txt").read_text() == "first\nsecond\n" and not list((tmp_path / "v2").iterdir())
    write(tmp_path / "moved.txt", lambda: (tmp_path / "moved.txt").rename(tmp_path / "elsewhere.txt"))
    assert (tmp_path / "elsewhere.txt").read_text() == "first\nsecond\n"   # (moved whole by whoever moved it)


def test_an_error_while_writing_a_deleted_output_file_is_that_error(tmp_path):
    """The check of a deleted --output runs as its writes end well: an error that ended them (an input line that
    cannot be read, Ctrl-C) is said as it is, not replaced by "the file was deleted"."""
    import contextlib
    from nmt.cli_io import open_output, output_errors
    from nmt.corpus import CorpusError
    out = tmp_path / "out.txt"
    for error in (CorpusError("in.ko:2: not UTF-8"), KeyboardInterrupt()):
        with pytest.raises(type(error)) as e:
            with output_errors(str(out)), contextlib.ExitStack() as stack:
                f = open_output(stack, str(out))
                f.write("first\n")
                out.unlink()
                raise error
        assert e.value is error


def test_a_resume_needs_room_only_beyond_the_checkpoints_already_there(tmp_path, monkeypatch):
    """A resume was refused ("2.8 MiB free, but ... need about 7.0 MiB") where it ran to the end with the space
    there: its kept checkpoints are deleted as new ones are written."""
    from nmt import preflight
    from nmt.models import build_model
    from nmt.preflight import parameter_count
    from tests.synth import tiny_config
    cfg = tiny_config(tmp_path, {}, "m")
    net = build_model(cfg.model, 400, 400)
    net.initialize()
    needed = preflight.checkpoint_bytes(cfg, net)
    (tmp_path / "m").mkdir()
    for name, size in ((ckpt.params_file(4), needed // 4), (ckpt.trainer_states_file(4), needed // 4)):
        (tmp_path / "m" / name).write_bytes(b"\0" * size)
    there = needed // 4 + needed // 4
    monkeypatch.setattr(storage, "free_bytes", lambda path: needed - there)
    assert preflight.check_checkpoint_room(cfg, net) == needed
    monkeypatch.setattr(storage, "free_bytes", lambda path: needed - there - 1000)
    with pytest.raises(StorageError, match=r"\(beyond the .* of checkpoints already there\) need about"):
        preflight.check_checkpoint_room(cfg, net)
    # however much is there, a save writes a checkpoint and a copy of params.best before it prunes any (a resume
    # on a disk that held its checkpoints and little more passed the check, then failed at its first save)
    (tmp_path / "m" / ckpt.params_file(8)).write_bytes(b"\0" * needed)
    least = 4 * 4 * parameter_count(net) + (1 << 20)
    monkeypatch.setattr(storage, "free_bytes", lambda path: least)
    assert preflight.check_checkpoint_room(cfg, net) == needed
    monkeypatch.setattr(storage, "free_bytes", lambda path: least - 1000)
    with pytest.raises(StorageError):
        preflight.check_checkpoint_room(cfg, net)


def test_a_resume_at_its_limit_needs_room_only_for_the_average(tmp_path, monkeypatch):
    """`--resume --average-last 3` of a run at its --max-steps was refused for the room of --keep-last checkpoints
    it would never write; it makes no update, and writes params.avg alone."""
    from nmt.cli import train_main
    from nmt.config import Config
    from nmt.models import build_model
    from nmt.preflight import check_checkpoint_room, parameter_count
    args = checkpoint_every_2(tmp_path, 6)
    assert train_main(args) == 0
    cfg = Config.load(tmp_path / "m" / ckpt.CONFIG)
    net = build_model(cfg.model, 400, 400)
    net.initialize()
    avg = 4 * parameter_count(net) + (1 << 20)   # params.avg and the small files
    monkeypatch.setattr(storage, "free_bytes", lambda path: avg + 1000)
    assert train_main(["--model-dir", str(tmp_path / "m"), "--resume", "--average-last", "3", "--no-progress",
                       "--no-eval"]) == 0
    assert (tmp_path / "m" / ckpt.PARAMS_AVG).is_file()
    monkeypatch.setattr(storage, "free_bytes", lambda path: 1000)
    cfg.train.average_last = 3
    with pytest.raises(StorageError, match=r"params\.avg and the small files beside it of a resume at the run's limit "
                                           r"\(no update\) need about .*; free some space or choose another"):
        check_checkpoint_room(cfg, net, no_update=True)   # (not "lower --keep-last", which cannot help)
    monkeypatch.setattr(storage, "free_bytes", lambda path: avg + 1000)   # the figure a dry run reports: this one
    assert check_checkpoint_room(cfg, net, no_update=True) == avg


def test_a_parameter_file_cut_short_without_an_error_is_not_kept(tmp_path, capsys, monkeypatch):
    """On a nearly full disk MXNet's stream wrote params.best short and reported nothing: it was renamed into place,
    its manifest hashed the cut file, the run exited 0, and nmt-translate then failed on it."""
    from mxnet import gluon
    from nmt.cli import train_main
    args = checkpoint_every_2(tmp_path, 4)
    real, calls = gluon.Block.save_parameters, []

    def short(self, filename, *a, **kw):   # the third file (params.00000004) comes out 100 bytes short, silently
        real(self, filename, *a, **kw)
        calls.append(filename)
        if len(calls) == 3:
            os.truncate(filename, os.path.getsize(filename) - 100)
    monkeypatch.setattr(gluon.Block, "save_parameters", short)
    assert train_main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"cannot write {tmp_path / 'm' / ckpt.params_file(4)}: the file written is " \
        "incomplete" in err, err
    assert not (tmp_path / "m" / ckpt.params_file(4)).exists() and resume_state(tmp_path / "m").step == 2


def test_files_under_a_name_that_is_not_utf8(tmp_path):
    """A directory named in CP949 bytes (unzipped from a Windows archive): training on data there crashed after
    training (config.json, scores.json and stdout could not hold the name: UnicodeEncodeError tracebacks), and a
    model directory there passed --dry-run, then failed at the first checkpoint (MXNet encodes names as UTF-8,
    another name) or, when loading, with SentencePiece's "not a string". Data there now trains and is scored, its
    names written as JSON escapes that read back as the same files; a model directory there is refused at once,
    naming its bytes."""
    import json
    legacy = tmp_path / os.fsdecode("자료".encode("cp949"))
    task = write_task(legacy, n_train=300)
    flags = ["--train-src", task["train_src"], "--train-tgt", task["train_tgt"], "--dev-src", task["dev_src"],
             "--dev-tgt", task["dev_tgt"], "--test-src", task["test_src"], "--test-tgt", task["test_tgt"],
             "--vocab-size", "400", "--embed-size", "16", "--hidden-size", "16", "--num-layers", "1",
             "--max-steps", "4", "--valid-every", "4", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")

    def nmt(script: str, *args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "scripts" / script), *map(str, args)], env=env,
                              cwd=tmp_path, capture_output=True, timeout=300)
    done = nmt("train.py", *flags, "--model-dir", tmp_path / "m")
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")[-2000:]
    config = (tmp_path / "m" / ckpt.CONFIG).read_text(encoding="utf-8")   # (UTF-8, the name escaped)
    assert json.loads(config)["data"]["train_src"] == task["train_src"]
    other = {side: legacy / f"other.{side}" for side in ("ko", "en")}   # (a set of the user's, named by its path)
    for side, path in other.items():
        path.write_bytes(Path(task[f"test_{'src' if side == 'ko' else 'tgt'}"]).read_bytes())
    done = nmt("evaluate.py", "--model-dir", tmp_path / "m", "--src-file", other["ko"], "--ref-file", other["en"],
               "--json", "-")
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    assert str(other["ko"]) in json.loads(done.stdout)["results"]
    assert str(other["ko"]) in json.loads((tmp_path / "m" / ckpt.SCORES).read_text(encoding="utf-8"))
    for script in ("train.py", "translate.py"):   # a model directory there: refused before any work
        args = [*flags, "--model-dir", legacy / "m", "--dry-run"] if script == "train.py" else \
            ["--model-dir", legacy / "link", "--input", task["test_src"]]
        if script == "translate.py":
            (legacy / "link").symlink_to(tmp_path / "m")
        done = nmt(script, *args)
        err = done.stderr.decode()
        assert done.returncode == 2 and "\\xc0\\xda\\xb7\\xe1" in err and "are not UTF-8" in err and \
            "Traceback" not in err, err


def test_a_read_only_scores_lock_is_named_not_scores_json(tmp_path, monkeypatch):
    """A model directory made read-only (`chmod -R a-w`) and its directory writable again: recording a score failed on
    scores.json.lock, opened in place, but the error named scores.json and said to check the directory, which was
    writable (`nmt-train --resume` stopped with it); nmt-evaluate found out only after decoding the whole set."""
    import builtins
    import nmt.scoring
    lock = tmp_path / "scores.json.lock"
    lock.touch()
    real_open, real_access = builtins.open, os.access

    def refused(path, *args, **kwargs):   # (root opens any file: chmod would not do)
        if Path(path) == lock:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(nmt.scoring, "open", refused, raising=False)
    with pytest.raises(StorageError) as e:
        nmt.scoring.record_scores(tmp_path, "t", "best", {"bleu": 1.0})
    assert str(e.value) == (f"cannot write {lock}: Permission denied [errno EACCES]; check the permissions of the "
                            "file (chmod u+w) and of its directory, or choose another directory")
    monkeypatch.setattr(nmt.scoring.os, "access", lambda path, mode: Path(path) != lock and real_access(path, mode))
    assert nmt.scoring.cannot_record(tmp_path) == f"{lock} is not writable (its permissions: chmod u+w)"


def test_a_read_only_log_or_metrics_file_is_named_before_training(tmp_path, monkeypatch):
    """train.log and metrics.jsonl are appended in place: a resume of a directory whose files were made read-only
    ended in a PermissionError traceback from logging's FileHandler, and with train.log writable again, in the error
    of metrics.jsonl at the first validation, the updates since the checkpoint lost."""
    import builtins
    import logging
    import nmt.log
    from nmt.log import MetricsWriter, setup_logging
    log, metrics = tmp_path / "train.log", tmp_path / "metrics.jsonl"
    log.touch()
    metrics.write_text('{"step": 1}\n')

    def refused(path, *args, **kwargs):   # (root opens any file: chmod would not do)
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    advice = ("Permission denied [errno EACCES]; check the permissions of the file (chmod u+w) and of its directory, "
              "or choose another directory")
    monkeypatch.setattr(logging, "FileHandler", refused)
    with pytest.raises(StorageError) as e:
        setup_logging(log)
    assert str(e.value) == f"cannot write {log}: {advice}"
    monkeypatch.setattr(nmt.log, "open", lambda path, mode="r", *a, **k: (
        refused(path) if "a" in mode else builtins.open(path, mode, *a, **k)), raising=False)
    with pytest.raises(StorageError) as e:
        MetricsWriter(metrics).keep_until(1)
    assert str(e.value) == f"cannot write {metrics}: {advice}"


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a file to another user (chown)")
def test_another_users_read_only_lock_is_not_advised_a_chmod_that_fails(tmp_path, monkeypatch):
    """A shared, group-writable model directory: scores.json.lock made by another user (644 by their umask) refused
    this user's scores, who was told to `chmod u+w` it, which only its owner may do (Operation not permitted)."""
    import pwd
    import nmt.scoring
    from nmt.storage import write_failure
    lock = tmp_path / "scores.json.lock"
    lock.touch()
    os.chown(lock, 65534, 65534)
    name = next((p.pw_name for p in pwd.getpwall() if p.pw_uid == 65534), "uid 65534")
    theirs = (f"the file is another user's, {name}'s: they can make it writable for you (chmod g+w for a group you "
              "share, or a+w)")
    refused = PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(lock))
    assert str(write_failure(lock, refused)) == (f"cannot write {lock}: Permission denied [errno EACCES]; {theirs}, or "
                                                 "choose another directory")
    real_access = os.access   # (root may write any file: as the other user's lock refuses this one)
    monkeypatch.setattr(nmt.scoring.os, "access", lambda path, mode: Path(path) != lock and real_access(path, mode))
    assert nmt.scoring.cannot_record(tmp_path) == f"{lock} is not writable ({theirs})"
