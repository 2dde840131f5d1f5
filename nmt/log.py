"""Logging to console and to the model directory, a throughput meter, one metrics row per validation, and
TensorBoard curves (`TensorBoardWriter`, when tensorboardX is installed)."""
from __future__ import annotations

import functools
import json
import logging
import math
import os
import sys
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from nmt.commands import EarlyWarnings, first_line, shell_word
from nmt.storage import guarded_write

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _TqdmHandler(logging.StreamHandler):
    """Console handler that writes through tqdm so log lines don't break the progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm   # (imported as logging is set up, not with the module: see setup_logging)
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # pragma: no cover - logging must never crash training
            self.handleError(record)


def setup_logging(log_file: Optional[Path] = None, level: Optional[int] = None, console: bool = True,
                  prefix: str = "") -> None:
    """Configure the `nmt` logger: console (via tqdm) and, if given, an appended log file. sacreBLEU's warnings
    (about the translations it scores) go the same way, formatted and into the log file, not raw to the console.
    `level` None: INFO, or DEBUG if the logger is at DEBUG already (a command's -v, set before the run). `prefix`
    starts each line (a distributed job's other workers: "rank 1 ")."""
    import tqdm  # noqa: F401  (here, in the command's run: missing, its one-line error; not with --help)
    if level is None:
        level = min(logging.INFO, logging.getLogger("nmt").level or logging.INFO)
    handlers = []
    fmt = logging.Formatter(prefix + FORMAT, datefmt="%Y-%m-%d %H:%M:%S")
    if console:
        handlers.append(_TqdmHandler())
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        # (a file name's bytes that are not UTF-8 written as \udcNN escapes, as stderr shows them)
        handlers.append(logging.FileHandler(log_file, encoding="utf-8", errors="backslashreplace"))
    for h in handlers:
        h.setFormatter(fmt)
        _MADE.add(h)
    for name, at in (("nmt", level), ("sacrebleu", max(level, logging.WARNING))):
        logger = logging.getLogger(name)
        logger.setLevel(at)
        logger.propagate = False
        for h in list(logger.handlers):
            logger.removeHandler(h)
            if isinstance(h, EarlyWarnings):   # the command's warnings so far: into the log file too
                h.hand_over(handlers, handlers[0] if console else None)
            if name == "nmt" and h in _MADE:   # (the same handlers as sacrebleu's; a program's own stay open)
                _MADE.discard(h)
                h.close()
        for h in handlers:
            logger.addHandler(h)


_MADE: "weakref.WeakSet[logging.Handler]" = weakref.WeakSet()   # the handlers setup_logging made


def logging_kept(fn: Callable) -> Callable:
    """`fn`, leaving the `nmt` and `sacrebleu` loggers as it found them (handlers, level, propagation), the
    handlers `setup_logging` made meanwhile (a run's train.log) closed: `nmt.train.train`, called from a program or
    a notebook, which would otherwise log its later messages into the finished run's train.log, and not to its
    own handlers."""
    @functools.wraps(fn)
    def kept(*args, **kwargs):
        loggers = [logging.getLogger(name) for name in ("nmt", "sacrebleu")]
        saved = [(lg.level, lg.propagate, list(lg.handlers)) for lg in loggers]
        try:
            return fn(*args, **kwargs)
        finally:
            for lg, (level, propagate, handlers) in zip(loggers, saved):
                for h in [h for h in lg.handlers if h not in handlers]:
                    lg.removeHandler(h)
                    if h in _MADE:
                        _MADE.discard(h)
                        h.close()
                for h in handlers:
                    lg.addHandler(h)
                lg.setLevel(level)
                lg.propagate = propagate
    return kept


class MetricsWriter:
    """Appends one JSON object per line (metrics.jsonl); each row is flushed and fsynced."""

    def __init__(self, path: Optional[Path]):
        self.path = Path(path) if path else None

    def keep_until(self, step: int) -> "MetricsWriter":
        """Drop the rows after `step` (a run resumed from an earlier checkpoint than the newest makes them again),
        and a torn last line (a crash mid-append), which the next row would be appended to."""
        if self.path is not None and self.path.is_file():
            text = self.path.read_text(encoding="utf-8")
            rows = metrics_rows(text)
            if any(r.get("step", 0) > step for r in rows) or text and not text.endswith("\n"):
                from nmt.atomic import atomic_write_text
                atomic_write_text(self.path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows
                                                     if r.get("step", 0) <= step))
        return self

    def write(self, row: Dict[str, Any]) -> None:
        if self.path is None:
            return
        line = json.dumps(row, ensure_ascii=False) + "\n"
        with guarded_write(self.path, len(line.encode("utf-8"))):   # a full disk: StorageError naming the file
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())


def read_metrics(path: Path) -> list:
    """Rows of a metrics.jsonl file (a torn last line from a crash is ignored)."""
    return metrics_rows(Path(path).read_text(encoding="utf-8"))


def metrics_rows(text: str) -> list:
    """Rows of a metrics.jsonl file's text (`read_metrics`)."""
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


class Every:
    """`due()` is true once each `seconds`, counted from the last time it was (at first, from construction): how
    often a long job logs how far it got."""

    def __init__(self, seconds: float):
        self.seconds, self.last = seconds, time.perf_counter()

    def due(self) -> bool:
        now = time.perf_counter()
        if now - self.last < self.seconds:
            return False
        self.last = now
        return True


class Speedometer:
    """Throughput since the last `read()`: updates/s, sentences/s, source and target tokens/s."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.t0 = time.perf_counter()
        self.updates = self.sentences = self.src_tokens = self.tgt_tokens = 0

    def update(self, sentences: int, src_tokens: int, tgt_tokens: int) -> None:
        self.updates += 1
        self.sentences += sentences
        self.src_tokens += src_tokens
        self.tgt_tokens += tgt_tokens

    def read(self) -> Dict[str, float]:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        out = {"updates_per_s": self.updates / dt, "sent_per_s": self.sentences / dt,
               "src_tok_per_s": self.src_tokens / dt, "tgt_tok_per_s": self.tgt_tokens / dt,
               "tok_per_s": (self.src_tokens + self.tgt_tokens) / dt}
        self.reset()
        return out


class LossMeter:
    """Training loss (label-smoothed) and, when given, its plain NLL, summed over updates (on the device, so adding
    costs no host synchronization), and the target tokens they cover; `means()` reads both per token and starts
    over."""

    def __init__(self, totals: Optional[list] = None):
        self.total, self.nll, self.tokens = totals or (None, None, 0)   # (`totals` of a checkpoint)

    def add(self, loss_sum, tokens: int, nll_sum=None) -> None:
        self.total = loss_sum if self.total is None else self.total + loss_sum
        if nll_sum is not None:
            self.nll = nll_sum if self.nll is None else self.nll + nll_sum
        self.tokens += tokens

    def totals(self, add_up: Callable[[List[float]], List[float]] = list) -> list:
        """[loss sum, NLL sum, tokens] so far (a host synchronization; what a checkpoint keeps). `add_up`: the sums
        over a job's workers (a collective), each of which added its own part of the batches it counted the tokens
        of."""
        sums = [x if x is None or isinstance(x, float) else float(x.asscalar()) for x in (self.total, self.nll)]
        if self.tokens:   # the same on every worker: all of them call `add_up`, or none
            sums = [None if x is None else y for x, y in zip(sums, add_up([x or 0.0 for x in sums]))]
        return sums + [self.tokens]

    def means(self, add_up: Callable[[List[float]], List[float]] = list, reset: bool = True
              ) -> Tuple[Optional[float], Optional[float]]:
        """Mean loss and NLL per target token since the last call with `reset` (None if no token, or no NLL, was
        added), summed with `add_up` as `totals` does."""
        loss, nll, tokens = self.totals(add_up)
        if reset:
            self.total, self.nll, self.tokens = None, None, 0
        return (None, None) if not tokens else (None if loss is None else loss / tokens,
                                                None if nll is None else nll / tokens)


class Progress:
    """The console's view of an epoch: a tqdm bar whose loss, learning rate and tokens/s refresh every
    `log_every` updates (the loop's only host synchronization besides the gradient norm); and at its end, in
    `epoch`, the mean loss, NLL and tokens/s of the epoch's updates (since a resume, in a resumed epoch; wall time,
    validations included, as in the bar's). `last` and `epoch` hold "nll" only when `update` is given it."""

    def __init__(self, log_every: int, enabled: bool, since_log: Optional[list] = None):
        self.log_every, self.enabled = log_every, enabled   # `since_log`: the loss meter's totals in a checkpoint
        self.speed, self.meter, self.bar = Speedometer(), LossMeter(since_log), None
        self.epoch_speed, self.epoch_meter = Speedometer(), LossMeter()
        self.last: Dict[str, float] = {"loss": float("nan"), "nll": float("nan"), "tok_per_s": 0.0}
        self.epoch: Dict[str, float] = dict(self.last)

    def start_epoch(self, epoch: int, total: int, done: int) -> None:
        from tqdm import tqdm
        # disable=None: drawn only on a terminal; redirected to a file, its frames would fill it (~13 kB an epoch)
        self.bar = tqdm(total=total, initial=done, desc=f"epoch {epoch + 1}", unit="upd",
                        disable=None if self.enabled else True, dynamic_ncols=True, leave=False)
        self.epoch_speed.reset()

    def update(self, step: int, batch, loss_sum, lr: float, nll_sum=None, share: float = 1.0) -> None:
        """`share`: the part of the batch's target tokens whose loss `loss_sum` sums (a worker's of a job's)."""
        for meter, speed in ((self.meter, self.speed), (self.epoch_meter, self.epoch_speed)):
            meter.add(loss_sum, batch.num_tgt_tokens * share, nll_sum)
            speed.update(batch.num_sentences, batch.num_src_tokens, batch.num_tgt_tokens)
        if self.bar is not None:   # None: updates outside `fit` (e.g. a benchmark's), logged but not drawn
            self.bar.update(1)
        if step % self.log_every == 0:
            loss, nll = self.meter.means()
            self.last = {"loss": loss, "nll": nll, **self.speed.read(), "lr": lr}
            if self.bar is not None:
                self.bar.set_postfix(loss=f"{self.last['loss']:.3f}", lr=f"{lr:.2e}",
                                     tok_s=f"{self.last['tok_per_s']:.0f}")
            logging.getLogger("nmt.train").debug("step %d loss %.4f", step, self.last["loss"])

    def end_epoch(self) -> None:
        if self.epoch_meter.tokens:
            loss, nll = self.epoch_meter.means()
            self.epoch = {"loss": loss, "nll": nll, **self.epoch_speed.read()}
        if self.bar is not None:
            self.bar.close()
            self.bar = None


TENSORBOARD_DIR = "tensorboard"   # inside the model directory: the curves travel with the model
TENSORBOARD_PIP = "pip install 'tensorboardX==2.6.5' 'protobuf==5.29.6'"   # the versions requirements/common.txt pins

log = logging.getLogger("nmt.log")


def tensorboard_available() -> bool:
    """Whether tensorboardX can be imported."""
    return not tensorboard_problem()


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


class TensorBoardWriter:
    """Training and validation curves and sample translations for TensorBoard, in `<model_dir>/tensorboard`.

    Tags: `train/loss` (label-smoothed), `train/nll` (plain NLL, to compare with `dev/loss`), `train/learning_rate`,
    `train/grad_norm`, `train/tokens_per_s`; `dev/loss`, `dev/perplexity`, `dev/bleu`, `dev/chrf`; text
    `dev/samples`. Steps are update numbers, so a resumed run (`resume_step` = the step of the checkpoint it
    continues from) writes into the same directory and continues the same curves; the events an interrupted run
    wrote after that checkpoint are dropped (`purge_step`). When disabled (tensorboardX missing, `--tensorboard`
    off, or a worker other than rank 0) every method does nothing.
    """

    def __init__(self, logdir: Optional[Path], resume_step: Optional[int] = None):
        self.logdir = Path(logdir) if logdir is not None else None
        self._writer, self._files = None, 0
        if self.logdir is not None:
            self.logdir.mkdir(parents=True, exist_ok=True)
            # Events at steps > resume_step came from the interrupted run after its last checkpoint: the resumed run
            # writes those steps again.
            self._open(resume_step or 0, resume_step + 1 if resume_step is not None else None)

    def _open(self, step: int, purge: Optional[int] = None) -> None:
        from tensorboardX import SummaryWriter
        # tensorboardX names the file by the second and host only: the step it starts at, the process id and a
        # count keep a file from overwriting another (the run's before a resume, its own before a `sync`).
        self._files += 1
        self._writer = SummaryWriter(logdir=str(self.logdir), purge_step=purge, flush_secs=30,
                                     filename_suffix=f".step{step:010d}.{os.getpid()}.{self._files:04d}")

    def sync(self, step: int) -> None:
        """Every event so far on disk, before a checkpoint at update `step` commits to them (a resume keeps the
        events up to its checkpoint): tensorboardX's flush leaves out the events its writer thread has not taken
        yet, which a process killed then (kill -9, an out-of-memory kill) lost for good. The writer is closed, and
        a new one, in a file of its own, takes the next events."""
        if self._writer is not None:
            self._writer.close()
            self._open(step)

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
        return self._writer is not None

    def _scalars(self, step: int, values: Dict[str, Optional[float]]) -> None:
        if self._writer is None:
            return
        for tag, value in values.items():
            if value is not None:
                self._writer.add_scalar(tag, float(value), int(step))

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
        exp(loss). Flushed at once."""
        if perplexity is None and loss is not None:
            perplexity = math.exp(min(float(loss), 700.0))
        self._scalars(step, {"dev/loss": loss, "dev/perplexity": perplexity, "dev/bleu": bleu, "dev/chrf": chrf,
                             "dev/bleu_ko_mecab": bleu_ko_mecab})
        self.flush()

    def log_samples(self, step: int, sources: Sequence[str], hypotheses: Sequence[str],
                    references: Optional[Sequence[str]] = None) -> None:
        """A few dev translations at update `step`, as one Markdown table under the text tag `dev/samples`."""
        if self._writer is None:
            return
        refs = list(references) if references is not None else [""] * len(sources)
        cell = lambda t: str(t).replace("|", "\\|").replace("\n", " ")  # noqa: E731
        rows = ["| source | output | reference |", "|---|---|---|"]
        rows += [f"| {cell(s)} | {cell(h)} | {cell(r)} |" for s, h, r in zip(sources, hypotheses, refs)]
        self._writer.add_text("dev/samples", "\n".join(rows), int(step))
        self.flush()

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> "TensorBoardWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
