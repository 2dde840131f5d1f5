"""One trainer per model directory: an exclusive lock on `<model dir>/train.lock`, held for the whole run.

The lock is an `fcntl.flock` on the file: the kernel drops it when its holder exits, however it exits (SIGKILL
included), so a lock left by a dead process never blocks the next run. The file itself records who holds it
(host, PID, since when) only so that a refused second trainer can say so.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Optional

from nmt.checkpoint import LOCK, CheckpointError
from nmt.storage import guarded_write


class ModelDirLocked(CheckpointError):
    """Another live process trains into the same model directory."""


class ModelDirLock:
    """The exclusive right to write a model directory; `release()` (or process exit) gives it up."""

    def __init__(self, model_dir: Path):
        self.path = Path(model_dir) / LOCK
        self._fd: Optional[int] = None

    def acquire(self) -> "ModelDirLock":
        """Take the lock or raise ModelDirLocked naming its holder and what to do."""
        with guarded_write(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(str(self.path), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ModelDirLocked(self._refusal()) from None
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode("utf-8"), 0)
        self._fd = fd
        return self

    def _refusal(self) -> str:
        try:
            h = json.loads(self.path.read_text(encoding="utf-8"))
            who = f"process {h['pid']} on host {h['host']} (since {h['since']})"
        except (OSError, ValueError, KeyError, TypeError):
            who = "another process (its details are unreadable)"
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
