"""Logging to console and to the model directory, a throughput meter, one metrics row per validation (the
TensorBoard curves: `nmt.tensorboard`)."""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from nmt.commands import EarlyWarnings
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


def setup_logging(log_file: Optional[Path] = None, level: Optional[int] = None, prefix: str = "") -> None:
    """Configure the `nmt` logger: console (via tqdm) and, if given, an appended log file. sacreBLEU's warnings
    (about the translations it scores) go the same way, formatted and into the log file, not raw to the console.
    `level` None: INFO, or DEBUG if the logger is at DEBUG already (a command's -v, set before the run). `prefix`
    starts each line (a distributed job's other workers: "rank 1 ")."""
    import tqdm  # noqa: F401  (here, in the command's run: missing, its one-line error; not with --help)
    if level is None:
        level = min(logging.INFO, logging.getLogger("nmt").level or logging.INFO)
    handlers: List[logging.Handler] = [_TqdmHandler()]
    fmt = logging.Formatter(prefix + FORMAT, datefmt="%Y-%m-%d %H:%M:%S")
    if log_file is not None:   # (appended in place: a read-only train.log is named, not a traceback)
        with guarded_write(log_file):
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
                h.hand_over(handlers, handlers[0])
            if name == "nmt" and h in _MADE:   # (the same handlers as sacrebleu's; a program's own stay open)
                _MADE.discard(h)
                h.close()
        for h in handlers:
            logger.addHandler(h)


_MADE: "weakref.WeakSet[logging.Handler]" = weakref.WeakSet()   # the handlers setup_logging made


def to_log_file(level: int, message: str, error: Optional[BaseException] = None) -> None:
    """`message` into the log files of the `nmt` logger only (train.log), not to the console: what the command also
    says there in its own words (its `error:` line, or the traceback of `error`, which follows `message`)."""
    exc_info = (type(error), error, error.__traceback__) if error is not None else None
    record = logging.getLogger("nmt.train").makeRecord("nmt.train", level, __file__, 0, message, None, exc_info)
    for h in logging.getLogger("nmt").handlers:
        if isinstance(h, logging.FileHandler):
            h.handle(record)


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


@contextlib.contextmanager
def warned_before(what: str) -> Iterator[None]:
    """Within: the warnings of the `nmt` logger's console and files shown as DEBUG lines (-v), not as warnings, for
    `what` is read again by a command after the one that warned of it (nmt-evaluate --dev-set reads a model's training
    data, whose warnings its training gave): each warning once. Then, but at -v, one line counts those left out; if
    the block ends by an exception, they are said after all, as warnings (they may explain the error)."""
    lowered, handlers = [], list(logging.getLogger("nmt").handlers)
    verbose = logging.getLogger("nmt").isEnabledFor(logging.DEBUG)

    def lower(record: logging.LogRecord) -> bool:   # (each handler sees the record: lowered at the first)
        if record.levelno == logging.WARNING and record.name.startswith("nmt"):
            lowered.append(record)
            record.levelno, record.levelname, record.warned_before = logging.DEBUG, "DEBUG", True
        return verbose or not getattr(record, "warned_before", False)
    for h in handlers:
        h.addFilter(lower)
    failed = False
    try:
        yield
    except Exception:   # (not an interrupt, which they do not explain)
        failed = True
        raise
    finally:
        for h in handlers:
            h.removeFilter(lower)
        if failed and not verbose:
            _said_after_all(what, handlers, lowered)
    if lowered and not verbose:
        logging.getLogger("nmt").info("%s: %s left out, which its training gave (-v shows %s)", what,
                                      *_warnings(len(lowered)))


def _said_after_all(what: str, handlers: List[logging.Handler], held: List[logging.LogRecord]) -> None:
    """The warnings `warned_before` held back (`held`, the records it lowered), said through the `nmt`
    logger's `handlers` as the warnings they were, after a line saying why: what they were held back in failed."""
    if not held:
        return
    logging.getLogger("nmt").info("%s failed; the %s held back until now (its training gave %s):", what,
                                  *_warnings(len(held)))
    for record in held:
        record.levelno, record.levelname, record.warned_before = logging.WARNING, "WARNING", False
        for h in handlers:   # (as the logger would: each handler at its level; its filter passes it now)
            if record.levelno >= h.level:
                h.handle(record)


def _warnings(count: int) -> Tuple[str, str]:
    """The words for `count` warnings `warned_before` held back, and the pronoun that names them: ("1 warning", "it")
    or ("2 warnings", "them")."""
    return (f"{count} warnings", "them") if count > 1 else (f"{count} warning", "it")


class MetricsWriter:
    """Appends one JSON object per line (metrics.jsonl); each row is flushed and fsynced."""

    def __init__(self, path: Optional[Path]):
        self.path = Path(path) if path else None

    def keep_until(self, step: int) -> "MetricsWriter":
        """Drop the rows after `step` (a run resumed from an earlier checkpoint than the newest makes them again),
        and a torn last line (a crash mid-append), which the next row would be appended to."""
        if self.path is not None and self.path.is_file():
            with guarded_write(self.path), open(self.path, "a", encoding="utf-8"):   # (appended in place: a read-only
                pass                                                             # one named now, not at a validation)
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


REPORT_SECONDS = 60.0   # how often a long stage of training's data preparation logs how far it got


def counted(items: Sequence, logger: logging.Logger, where: str, what: str) -> Iterator:
    """`items` one by one, logging at info every REPORT_SECONDS how many were taken ("big.ko: 400000 of 2000000
    lines read so far", `where` and `what` "lines read"): reading or encoding millions of lines takes minutes, which
    passed without a word."""
    report = Every(REPORT_SECONDS)
    for n, item in enumerate(items, 1):
        yield item
        if n < len(items) and report.due():
            logger.info("%s: %d of %d %s so far", where, n, len(items), what)


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
