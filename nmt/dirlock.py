"""What a training run may do with its model directory (`check_model_dir`: new, resumed or overwritten, and what
--overwrite may delete), and one trainer per directory: an exclusive lock on `<model dir>/train.lock`, held for the
whole run.

The lock is an `fcntl.flock` on the file: the kernel drops it when its holder exits, however it exits (SIGKILL
included), so a lock left by a dead process never blocks the next run. The file itself records who holds it
(host, PID, since when) only so that a refused second trainer can say so.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

from nmt import manifest
from nmt.checkpoint import CONFIG, EXPORT, LOCK, LOG, OWN_FILE, PARAMS_BEST, STATE, CheckpointError, kept_steps
from nmt.commands import shell_word
from nmt.tensorboard import TENSORBOARD_DIR
from nmt.storage import check_writable, guarded_write, mxnet_name


class ModelDirLocked(CheckpointError):
    """Another live process trains into the same model directory."""


class ModelDirLock:
    """The exclusive right to write a model directory; `release()` (or process exit) gives it up."""

    def __init__(self, model_dir: Path):
        self.path = Path(model_dir) / LOCK
        self._fd: Optional[int] = None

    def acquire(self) -> "ModelDirLock":
        """Take the lock or raise ModelDirLocked naming its holder and what to do."""
        check_writable(self.path.parent)   # (a directory no file can be made in: named, as --dry-run names it)
        with guarded_write(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(str(self.path), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ModelDirLocked(self._refusal()) from None
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        data = (json.dumps(holder) + "\n").encode("utf-8")
        try:
            with guarded_write(self.path, len(data)):   # (a full disk as a run starts: a traceback, an empty lock)
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
        except BaseException:
            self.path.unlink(missing_ok=True)   # ours (locked): nobody else's to lose
            os.close(fd)
            raise
        self._fd = fd
        return self

    def acquire_after(self, check: Callable[[], None]) -> "ModelDirLock":
        """`acquire` once `check()` of what the directory holds passes, but a live trainer's lock is named first: a
        directory it writes may hold no checkpoint yet, which `check` would take for a run that stopped early."""
        if self.path.is_file():   # a live trainer holds it (a refused run makes no lock file where it had none)
            with self:
                pass
        check()
        return self.acquire()

    def _refusal(self) -> str:
        try:
            h = json.loads(self.path.read_text(encoding="utf-8"))
            who = f"process {h['pid']} on host {h['host']} (since {h['since']})"
        except (OSError, ValueError, KeyError, TypeError):
            who, h = "another process (its details are unreadable)", {}
        if h.get("pid") == os.getpid() and h.get("host") == socket.gethostname():   # e.g. a notebook's cell run again
            return (f"--model-dir {self.path.parent} is held by this very process: a Trainer of create_trainer keeps "
                    "it until its fit() ends; fit that trainer, or give the directory up with trainer.lock.release()")
        return (f"--model-dir {self.path.parent} is being trained by {who}, which holds {self.path}; two trainers "
                "would overwrite each other's checkpoints. Wait for it to finish, stop it (SIGTERM saves a "
                "checkpoint; then --resume), or train into another --model-dir")

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "ModelDirLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def trained_now(model_dir: Path) -> bool:
    """Whether another process holds the model directory's lock: its flock, tried (briefly shared), which a trainer
    on any host sharing the file system holds; not the host and process train.lock names, which stay in the file
    after a kill (a directory copied from a cluster node, another container's host name, a process id reused)."""
    try:
        fd = os.open(str(Path(model_dir) / LOCK), os.O_RDONLY)
    except OSError:   # no lock file: no trainer
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:   # held, but not by this process (its loads come after its saves)
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            holder = json.loads((Path(model_dir) / LOCK).read_text(encoding="utf-8"))
            return (holder["host"], int(holder["pid"])) != (socket.gethostname(), os.getpid())
        return True
    except OSError:   # a file system without locks
        return False
    finally:
        os.close(fd)   # (and the shared lock with it)


def has_checkpoint(model_dir: Path) -> bool:
    """Whether `model_dir` holds a checkpoint to load: state.json, params.best, an export's export.json, or a step's
    files (a run killed as it saved its first, before state.json)."""
    model_dir = Path(model_dir)
    return any((model_dir / f).exists() for f in (STATE, PARAMS_BEST, EXPORT)) or bool(kept_steps(model_dir))


def in_place_of_file(path: Path) -> str:
    """What is where the file `path` belongs when something is there but no regular file: "a directory" or "not a
    regular file" (a FIFO, a socket: there, not "not found"); "" for a regular file or nothing."""
    if path.is_file() or not path.exists():
        return ""
    return "a directory" if path.is_dir() else "not a regular file"


def no_checkpoint_yet(model_dir: Path) -> str:
    """What a command says of a model directory that holds no checkpoint (nothing to load): the run that holds its
    lock writes the first later; else its run ended before it saved one (a full disk or another error as it saved:
    the end of its train.log says it, and how far it got; or a kill)."""
    model_dir = Path(model_dir)
    if trained_now(model_dir):
        return (f"{model_dir} holds no checkpoint yet (no {STATE}, no {PARAMS_BEST}): the run training it (it holds "
                f"{LOCK}) writes the first at its first validation (--valid-every) or when stopped with Ctrl-C")
    log = model_dir / LOG
    return (f"{model_dir} holds no checkpoint (no {STATE}, no {PARAMS_BEST}): its run ended before it saved one"
            + (f" ({log} says how far it got, and ends with its error unless it was killed)" if log.is_file()
               else "")
            + "; start it again with the command that started it, --overwrite added")


def config_coming(model_dir: Path) -> str:
    """What a command says of a model directory without config.json that nmt-train started (its train.lock is
    there): a run that reads its data, trains its tokenizers and encodes them (minutes on millions of pairs) writes
    config.json only then, if another process holds the lock; else its run ended first. "" without a train.lock,
    and where a checkpoint is (a trained run's config.json deleted: its train.lock stays; --overwrite deletes it)."""
    if has_checkpoint(model_dir):
        return ""
    if trained_now(model_dir):
        return (f"the run training it (it holds {LOCK}) writes it once it has read and encoded its data, before its "
                "first update, and its first checkpoint at its first validation (--valid-every): wait for that")
    if not (Path(model_dir) / LOCK).is_file():
        return ""
    return (f"its run ended before it wrote it (its error output says why; {Path(model_dir) / LOG} how far it got): "
            "start it again with the command that started it, --overwrite added")


def alive(pid) -> bool:
    """Whether the process `pid` (a number, or one as text) is running on this host."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:   # another user's
        return True
    return True


logger = logging.getLogger("nmt.train")
OVERWRITTEN = ".overwritten"   # --overwrite: the replaced run's files, until the new run's data is read


def left_aside(model_dir: Path) -> str:
    """What to do with the run that an --overwrite killed before its new run read the data left in OVERWRITTEN;
    "" when there is none."""
    aside = Path(model_dir) / OVERWRITTEN
    return (f"{aside} holds the run that an interrupted --overwrite set aside: to keep that run, delete the other "
            f"files of {model_dir} and move its files back there; to start over, delete {aside}"
            ) if aside.is_dir() else ""


def set_aside(model_dir: Path) -> Optional[Path]:
    """--overwrite, by the holder of the lock: every file of `model_dir` but the lock moves into its OVERWRITTEN
    directory, which is returned for `replacing` (None: the directory holds nothing to replace)."""
    model_dir = Path(model_dir)
    held = [p for p in model_dir.iterdir() if p.name not in (LOCK, OVERWRITTEN)]
    if not held:
        return None
    logger.warning("--overwrite: replacing %s (its files are kept aside until the new run's data is read)", model_dir)
    aside = model_dir / OVERWRITTEN   # (none is left of a killed run: check_model_dir refuses the directory then)
    aside.mkdir()
    for p in held:
        p.rename(aside / p.name)
    return aside


@contextlib.contextmanager
def replacing(model_dir: Path, aside: Optional[Path]) -> Iterator[None]:
    """Around a run's set-up until its data is read and the room for its checkpoints checked: then the run that
    --overwrite replaces (`aside`) is deleted; if the set-up fails first (a missing file, a bad setting, a full
    disk), what it wrote goes and that run's files come back."""
    try:
        yield
    except BaseException:
        if aside is not None:
            for p in Path(model_dir).iterdir():
                if p.name not in (LOCK, OVERWRITTEN):
                    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
            for p in aside.iterdir():
                p.rename(Path(model_dir) / p.name)
            aside.rmdir()
        raise
    if aside is not None:
        shutil.rmtree(aside)


def remove_made(model_dir: Path, existed: bool) -> None:
    """What a run that failed while setting up made: its model directory, or when the directory was there (empty)
    before the run, what is in it now."""
    if not existed:
        shutil.rmtree(model_dir, ignore_errors=True)
        return
    for path in model_dir.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def check_model_dir(model_dir: Path, resume: bool, overwrite: bool, inputs: Optional[Dict[str, Any]] = None) -> None:
    """CheckpointError unless a run may use `model_dir` as asked; changes nothing (also for --dry-run). `inputs`:
    the run's own files and directories by flag, which --overwrite must not delete."""
    model_dir = Path(mxnet_name(model_dir, "--model-dir"))   # (its checkpoints are MXNet's files)
    if resume and overwrite:
        raise CheckpointError("--resume and --overwrite contradict each other; give one of them")
    if model_dir.exists() and not model_dir.is_dir():
        raise CheckpointError(f"--model-dir {model_dir} exists and is not a directory")
    for link in (p for p in (model_dir, *model_dir.parents) if p.is_symlink() and not p.exists()):   # (a traceback)
        raise CheckpointError(f"--model-dir {model_dir}: {link} is a symbolic link to {os.readlink(link)}, which leads "
                              "nowhere (missing, or links back: a loop): mend the link, or give another "
                              "--model-dir")
    if left_aside(model_dir):   # (--overwrite would delete it, --resume and a new run not see it)
        raise CheckpointError(f"--model-dir {model_dir}: {left_aside(model_dir)}")
    held = sorted(p.name for p in model_dir.iterdir() if p.name != LOCK) if model_dir.is_dir() else []
    if EXPORT in held and not overwrite:
        raise CheckpointError(f"--model-dir {model_dir} is an export (nmt-export: one checkpoint, no training state; "
                              f"its {EXPORT} names the directory it came from): resume that directory, or fine-tune "
                              f"from this one into a new directory with --init-from {shell_word(model_dir)}")
    # a run that stopped before its first checkpoint leaves its train.log (a config.json alone may be the user's own)
    no_checkpoint = STATE not in held and not manifest.step_keys(model_dir)
    if resume:
        workers = int(os.environ.get("DMLC_NUM_WORKER") or 1) if os.environ.get("DMLC_ROLE") == "worker" else 1
        if not held and workers > 1:   # (rank 0 checks: the scheduler ranks the workers, on any machine)
            raise CheckpointError(f"--resume: {model_dir / STATE} not found on {socket.gethostname()}, a machine of "
                                  f"this job of {workers} workers (rank 0 reads the run, and the scheduler may rank "
                                  "any machine's worker first): a distributed run's directory must be at this path on "
                                  "every machine of the job, or on a file system they share (a new run in its place "
                                  "here would start over apart from the run)")
        if no_checkpoint:
            raise CheckpointError(f"--resume: {model_dir / STATE} not found, so there is nothing to resume; " + (
                "the run stopped before its first checkpoint: start it again with the command that started it (its "
                "flags, --init-from too), --overwrite in place of --resume" if LOG in held else
                "drop --resume to start a new run" + (
                    f" in another --model-dir (this one holds files, but no run: {shown(held)}" + (
                        f"; --init-from {shell_word(model_dir)} fine-tunes its {PARAMS_BEST} in a new run"
                        if PARAMS_BEST in held else "") + ")" if held else "")))
        if not (model_dir / CONFIG).is_file():
            kind = in_place_of_file(model_dir / CONFIG)
            what = "not found" if not kind else "is a directory, not a file" if kind == "a directory" else f"is {kind}"
            raise CheckpointError(f"--resume: {model_dir / CONFIG} {what}: a run resumes with the settings it was "
                                  "started with, which that file holds; restore it (or train into a new --model-dir)")
        return
    if held and not overwrite and LOG not in held and no_checkpoint:   # (a run writes its log first)
        raise CheckpointError(f"--model-dir {model_dir} already exists and holds files, but no run (no {LOG} or "
                              f"checkpoint): {shown(held)}; a model directory holds only its run's files: move them "
                              "out, or give another --model-dir")
    if held and not overwrite:
        unsaved = LOG in held and no_checkpoint
        raise CheckpointError(f"--model-dir {model_dir} already exists and is not empty; " + (
            "it holds a run that stopped before its first checkpoint (nothing to --resume): pass --overwrite to "
            "delete it and start over, or give another --model-dir" if unsaved else "pass --resume to continue its "
            "training, --overwrite to delete it and start over, or another --model-dir"))
    if held:
        _check_overwrite(model_dir, held, inputs or {})


def shown(held: List[str]) -> str:
    """The first files of a directory's listing `held`, for a message."""
    return ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")


def _check_overwrite(model_dir: Path, held: List[str], inputs: Dict[str, Any]) -> None:
    """CheckpointError unless --overwrite may delete everything in `model_dir`: it must be a model directory (a
    run wrote its log there first, or a checkpoint) and must not hold any of the run's `inputs`."""
    if EXPORT in held:   # (one checkpoint, but no training: the directory it came from is the run to start over)
        raise CheckpointError(f"--overwrite deletes a training run's directory, and --model-dir {model_dir} is an "
                              f"export (nmt-export; its {EXPORT} names the run it came from): give a new --model-dir")
    if LOG not in held and STATE not in held and not manifest.step_keys(model_dir):   # (a config.json may be yours)
        raise CheckpointError(f"--overwrite deletes a model directory, and --model-dir {model_dir} is not one: it has "
                              f"no {LOG} or checkpoint but holds {shown(held)}; give the directory of the run to "
                              "start over, or a new --model-dir")
    check_outside(model_dir, inputs)
    foreign = [name for name in held if not (OWN_FILE.fullmatch(name) or name in (TENSORBOARD_DIR, OVERWRITTEN)
                                             or name.startswith(".") and name.endswith(".tmp"))]
    if foreign:   # (a user's notes, an export made inside it: --overwrite deleted them without a word)
        raise CheckpointError(f"--overwrite deletes --model-dir {model_dir} whole, and it holds what no run writes: "
                              f"{shown(foreign)}; move {'it' if len(foreign) == 1 else 'them'} out of the directory "
                              "first, or give a new --model-dir")


def check_outside(model_dir: Path, inputs: Dict[str, Any]) -> None:
    """CheckpointError if any of a run's `inputs` (paths by flag) is inside `model_dir`, which --overwrite deletes."""
    roots = {model_dir.resolve(), Path(os.path.abspath(model_dir))}
    for flag, path in inputs.items():   # the file, also reached through a symbolic link in the directory (deleted)
        seen = {Path(path).resolve(), Path(path).parent.resolve() / Path(path).name, Path(os.path.abspath(path))} \
            if path else set()
        if any(root == p or root in p.parents for p in seen for root in roots):
            raise CheckpointError(f"{flag} {path} is inside --model-dir {model_dir}, which --overwrite deletes: move "
                                  "it out of the directory or give another --model-dir")


def prepare_model_dir(model_dir: Path, resume: bool, overwrite: bool, inputs: Optional[Dict[str, Any]] = None) -> None:
    """Create the model directory; refuse to clobber an existing one unless --resume or --overwrite (whose files
    `nmt.dirlock.set_aside` then moves aside; `check_model_dir`)."""
    model_dir = Path(model_dir)
    check_model_dir(model_dir, resume, overwrite, inputs)
    with guarded_write(model_dir):
        model_dir.mkdir(parents=True, exist_ok=True)
