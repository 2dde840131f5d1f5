"""Logging to console and to the model directory, a throughput meter, and one metrics row per validation."""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional

from tqdm import tqdm

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _TqdmHandler(logging.StreamHandler):
    """Console handler that writes through tqdm so log lines don't break the progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # pragma: no cover - logging must never crash training
            self.handleError(record)


def setup_logging(log_file: Optional[Path] = None, level: int = logging.INFO, console: bool = True) -> None:
    """Configure the `nmt` logger: console (via tqdm) and, if given, an appended log file."""
    root = logging.getLogger("nmt")
    root.setLevel(level)
    root.propagate = False
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    fmt = logging.Formatter(FORMAT, datefmt="%Y-%m-%d %H:%M:%S")
    if console:
        ch = _TqdmHandler()
        ch.setFormatter(fmt)
        root.addHandler(ch)
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(log_file, encoding="utf-8")
        fh.setFormatter(fmt)
        root.addHandler(fh)


class MetricsWriter:
    """Appends one JSON object per line (metrics.jsonl); each row is flushed and fsynced."""

    def __init__(self, path: Optional[Path]):
        self.path = Path(path) if path else None

    def write(self, row: Dict[str, Any]) -> None:
        if self.path is None:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_metrics(path: Path) -> list:
    """Rows of a metrics.jsonl file (a torn last line from a crash is ignored)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


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
    """Training loss summed over updates (on the device, so adding costs no host synchronization) and the target
    tokens it covers; `mean()` reads the loss per token and starts over."""

    def __init__(self):
        self.total, self.tokens = None, 0

    def add(self, loss_sum, tokens: int) -> None:
        self.total = loss_sum if self.total is None else self.total + loss_sum
        self.tokens += tokens

    def mean(self) -> Optional[float]:
        """Mean loss per target token since the last call (None if no token was added); a host synchronization."""
        value = float(self.total.asscalar()) / self.tokens if self.tokens else None
        self.total, self.tokens = None, 0
        return value


class Progress:
    """The console's view of an epoch: a tqdm bar whose loss, learning rate and tokens/s refresh every
    `log_every` updates (the loop's only host synchronization besides the gradient norm)."""

    def __init__(self, log_every: int, enabled: bool):
        self.log_every, self.enabled = log_every, enabled
        self.speed, self.meter, self.bar = Speedometer(), LossMeter(), None
        self.last: Dict[str, float] = {"loss": float("nan"), "tok_per_s": 0.0}

    def start_epoch(self, epoch: int, total: int, done: int) -> None:
        self.bar = tqdm(total=total, initial=done, desc=f"epoch {epoch + 1}", unit="upd", disable=not self.enabled,
                        dynamic_ncols=True, leave=False)

    def update(self, step: int, batch, loss_sum, lr: float) -> None:
        self.meter.add(loss_sum, batch.num_tgt_tokens)
        self.speed.update(batch.num_sentences, batch.num_src_tokens, batch.num_tgt_tokens)
        if self.bar is not None:   # None: updates outside `fit` (e.g. a benchmark's), logged but not drawn
            self.bar.update(1)
        if step % self.log_every == 0:
            self.last = {"loss": self.meter.mean(), **self.speed.read(), "lr": lr}
            if self.bar is not None:
                self.bar.set_postfix(loss=f"{self.last['loss']:.3f}", lr=f"{lr:.2e}",
                                     tok_s=f"{self.last['tok_per_s']:.0f}")
            logging.getLogger("nmt.train").debug("step %d loss %.4f", step, self.last["loss"])

    def end_epoch(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
