"""TensorBoard curves of a training run (`TensorBoardWriter`, when tensorboardX is installed).

The event files are written here, in the calling thread, with tensorboardX's protobuf messages and checksum:
tensorboardX's own writer hands events to a thread through a bounded queue and closes at exit, so one failed write
(a full disk) printed tracebacks from that thread, from its exit hook and from our flush, and a thread dead of it
left the queue full, which blocked the next `add_scalar` for good. A few events per logging interval need no
thread; a failed write here stops the curves with one warning and training goes on.
"""
from __future__ import annotations

import errno
import itertools
import logging
import math
import os
import re
import struct
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

from nmt.commands import first_line, shell_word

TENSORBOARD_DIR = "tensorboard"   # inside the model directory: the curves travel with the model
TENSORBOARD_PIP = "pip install 'tensorboardX==2.6.5' 'protobuf==5.29.6'"   # the versions requirements/common.txt pins

log = logging.getLogger("nmt.log")
FLUSH_SECONDS = 30   # how stale the curves on disk may grow between validations
_FILES = itertools.count(1)   # (a count per process: two writers started in one second get two files)


def tensorboard_problem() -> str:
    """What keeps tensorboardX from being imported ("" when nothing): not installed, or its import failing (a
    protobuf of another version than its generated code's)."""
    try:
        import tensorboardX  # noqa: F401
    except ModuleNotFoundError as e:
        return "tensorboardX is not installed" if e.name == "tensorboardX" else f"tensorboardX cannot be imported ({e})"
    except Exception as e:   # (protobuf: TypeError "Descriptors cannot be created directly", ImportError ...)
        return f"tensorboardX cannot be imported ({type(e).__name__}: {first_line(e)})"
    return ""


class EventFile:
    """One TensorBoard event file: TFRecord frames (length, its masked CRC-32C, the serialized `Event`, its masked
    CRC-32C) gathered in memory and written out by `flush`, which fsyncs. A failed write raises OSError."""

    def __init__(self, logdir: Path, suffix: str):
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.record_writer import masked_crc32c
        self._crc, self._pending, self.flushed = masked_crc32c, bytearray(), time.monotonic()
        self.path = logdir / f"events.out.tfevents.{int(time.time()):010d}.{os.uname().nodename}{suffix}"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        self.add(Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add(self, event) -> None:
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        self._pending += header + struct.pack("<I", self._crc(header)) + data + struct.pack("<I", self._crc(data))

    def flush(self) -> None:
        self.flushed = time.monotonic()
        data, done = bytes(self._pending), 0
        while done < len(data):
            done += os.write(self._fd, data[done:])
        self._pending.clear()
        os.fsync(self._fd)

    def close(self) -> None:
        """Closes the file; what is pending is dropped (`flush` first to keep it)."""
        fd, self._fd, self._pending = self._fd, -1, bytearray()
        if fd >= 0:
            os.close(fd)


class TensorBoardWriter:
    """Training and validation curves and sample translations for TensorBoard, in `<model_dir>/tensorboard`.

    Tags: `train/loss` (label-smoothed), `train/nll` (plain NLL, to compare with `dev/loss`), `train/learning_rate`,
    `train/grad_norm`, `train/tokens_per_s`; `dev/loss`, `dev/perplexity`, `dev/bleu`, `dev/chrf`; text
    `dev/samples`. Steps are update numbers, so a resumed run (`resume_step` = the step of the checkpoint it
    continues from) writes into the same directory and continues the same curves; the events an interrupted run
    wrote after that checkpoint are dropped (a START session log at `resume_step + 1`, TensorBoard's purge). When
    disabled (tensorboardX missing, `--tensorboard` off, a worker other than rank 0, or a write that failed: one
    warning) every method does nothing.
    """

    def __init__(self, logdir: Optional[Path], resume_step: Optional[int] = None):
        self.logdir = Path(logdir) if logdir is not None else None
        self._file: Optional[EventFile] = None
        self._step = resume_step or 0   # (the last update written, for a warning)
        if self.logdir is None:
            return
        self._guard(self._open, self._step, resume_step)

    def _open(self, step: int, resume_step: Optional[int]) -> None:
        if self.logdir.is_symlink() and not self.logdir.exists() or self.logdir.exists() and not self.logdir.is_dir():
            what = (f"a link to {os.readlink(self.logdir)}, which leads nowhere," if not self.logdir.exists() else
                    "a file")   # (mkdir said "File exists" alone)
            raise FileExistsError(errno.EEXIST, f"{what} is in the place of the directory: move it away for them")
        self.logdir.mkdir(parents=True, exist_ok=True)   # (a failed write, warned)
        self._file = EventFile(self.logdir, f".step{step:010d}.{os.getpid()}.{next(_FILES):04d}")
        if resume_step is not None:
            # Events at steps > resume_step came from the interrupted run after its last checkpoint: the resumed
            # run writes those steps again.
            from tensorboardX.proto.event_pb2 import Event, SessionLog
            self._file.add(Event(wall_time=time.time(), step=resume_step + 1,
                                 session_log=SessionLog(status=SessionLog.START)))

    def _guard(self, action, *args) -> None:
        """`action(*args)`; a failed write (a full disk, a quota, an I/O error) ends the curves with a warning."""
        try:
            action(*args)
        except OSError as e:
            file, self._file = self._file, None
            if file is not None:
                file.close()
            log.warning("TensorBoard curves stopped at update %d: cannot write in %s: %s; training goes on without "
                        "them", self._step, self.logdir, e.strerror or e)

    @classmethod
    def create(cls, model_dir: Path, requested: Optional[bool] = None, resume_step: Optional[int] = None,
               rank: int = 0) -> "TensorBoardWriter":
        """The writer for a training run in `model_dir`.

        `requested`: True (`--tensorboard`: a ConfigError naming the flag and the pip command without
        tensorboardX), False (`--no-tensorboard`: off), None (the default: on when tensorboardX is installed, else
        one log line says how to turn it on). Only `rank` 0 writes."""
        cls.check(requested)
        if requested is False or rank != 0:
            return cls(None)
        problem = tensorboard_problem()
        if problem:
            log.info("TensorBoard curves off: %s (%s)", problem, TENSORBOARD_PIP)
            return cls(None)
        writer = cls(Path(model_dir) / TENSORBOARD_DIR, resume_step)
        if writer.enabled:
            log.info("TensorBoard curves in %s (tensorboard --logdir %s)", writer.logdir, shell_word(writer.logdir))
        return writer

    @staticmethod
    def check(requested: Optional[bool]) -> None:
        """A ConfigError naming --tensorboard and the pip command when it is asked for without tensorboardX."""
        problem = tensorboard_problem() if requested else ""
        if problem:
            from nmt.config import ConfigError
            raise ConfigError(f"--tensorboard needs tensorboardX: {problem}: {TENSORBOARD_PIP}")

    @property
    def enabled(self) -> bool:
        return self._file is not None

    def _summary(self, step: int, summary) -> None:
        from tensorboardX.proto.event_pb2 import Event
        if self._file is None:   # (a failed write before)
            return
        self._step = int(step)
        self._file.add(Event(wall_time=time.time(), step=self._step, summary=summary))
        if time.monotonic() - self._file.flushed > FLUSH_SECONDS:
            self._guard(self._file.flush)

    def _scalars(self, step: int, values: Dict[str, Optional[float]]) -> None:
        if self._file is None:
            return
        from tensorboardX.summary import scalar
        for tag, value in values.items():
            if value is not None:
                self._summary(step, scalar(tag, float(value)))

    def log_train(self, step: int, loss: Optional[float] = None, learning_rate: Optional[float] = None,
                  grad_norm: Optional[float] = None, tokens_per_s: Optional[float] = None,
                  nll: Optional[float] = None) -> None:
        """Training scalars at update `step` (None values are left out)."""
        self._scalars(step, {"train/loss": loss, "train/nll": nll, "train/learning_rate": learning_rate,
                             "train/grad_norm": grad_norm, "train/tokens_per_s": tokens_per_s})

    def log_validation(self, step: int, loss: Optional[float] = None, perplexity: Optional[float] = None,
                       bleu: Optional[float] = None, chrf: Optional[float] = None,
                       bleu_ko_mecab: Optional[float] = None) -> None:
        """Validation scalars at update `step` (`bleu_ko_mecab`: for Korean output); perplexity defaults to
        exp(loss). Written out at once."""
        if perplexity is None and loss is not None:
            perplexity = math.exp(min(float(loss), 700.0))
        self._scalars(step, {"dev/loss": loss, "dev/perplexity": perplexity, "dev/bleu": bleu, "dev/chrf": chrf,
                             "dev/bleu_ko_mecab": bleu_ko_mecab})
        self.sync(step)

    def log_samples(self, step: int, sources: Sequence[str], hypotheses: Sequence[str],
                    references: Optional[Sequence[str]] = None) -> None:
        """A few dev translations at update `step`, as one Markdown table under the text tag `dev/samples`."""
        if self._file is None:
            return
        from tensorboardX.summary import text
        refs = list(references) if references is not None else [""] * len(sources)
        # Markdown's marks escaped (`__init__` and `*args` of python-docs sentences are no emphasis; a pipe no cell)
        cell = lambda t: re.sub(r"([\\`*_\[\]|])", r"\\\1", str(t)).replace("\n", " ")  # noqa: E731
        rows = ["| source | output | reference |", "|---|---|---|"]
        rows += [f"| {cell(s)} | {cell(h)} | {cell(r)} |" for s, h, r in zip(sources, hypotheses, refs)]
        self._summary(step, text("dev/samples", "\n".join(rows)))
        self.sync(step)

    def sync(self, step: int) -> None:
        """Every event so far on disk (fsynced), as a checkpoint at update `step` commits to them: a resume keeps
        the events up to its checkpoint, and a process killed after it (kill -9, an out-of-memory kill) loses none
        of them."""
        if self._file is not None:
            self._guard(self._file.flush)

    def close(self) -> None:
        if self._file is not None:
            self._guard(self._file.flush)
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "TensorBoardWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
