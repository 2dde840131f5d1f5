"""The model directory: file names defined once, atomic checkpoint save, load, resume, keep-N, averaging.

Layout of a model directory (everything needed to translate or to resume, nothing else):

    config.json                  the full Config (data, model, optim, train, decode)
    spm.<src>.model / .vocab     SentencePiece models of both languages
    params.<step>                parameters of the last `keep_last` checkpoints
    params.best                  parameters of the best checkpoint by dev BLEU
    params.avg                   average of the last N checkpoints (only with --average-last N)
    trainer.<step>.states        optimizer (Adam) states of the latest checkpoint (named by step, so that
                                 state.json never pairs one step's parameters with another step's moments)
    state.json                   TrainState of the latest checkpoint; written last, so it always points at
                                 files that exist (a crash at any instant leaves the previous one loadable)
    metrics.jsonl                one row per validation
    train.log                    the training log
"""
from __future__ import annotations

import glob
import json
import logging
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from nmt.atomic import _fsync_dir, atomic_write_text

logger = logging.getLogger("nmt.checkpoint")

CONFIG = "config.json"
STATE = "state.json"
PARAMS_BEST = "params.best"
PARAMS_AVG = "params.avg"
METRICS = "metrics.jsonl"
LOG = "train.log"
SCORES = "scores.json"
_PARAMS_STEP = re.compile(r"^params\.(\d{8})$")


class CheckpointError(RuntimeError):
    """A model directory that is missing, incomplete or would be overwritten; the message says what to do."""


def params_file(step: int) -> str:
    return f"params.{step:08d}"


def params_step(name: str) -> Optional[int]:
    """The step of a `params.<step>` file name; None for any other name (params.best, params.avg, ...)."""
    m = _PARAMS_STEP.match(Path(name).name)
    return int(m.group(1)) if m else None


def trainer_states_file(step: int) -> str:
    return f"trainer.{step:08d}.states"


@dataclass
class TrainState:
    """Everything besides parameters and optimizer states that a resume needs, JSON-serializable."""
    step: int = 0                          # updates done, over all runs of this model directory
    epoch: int = 0                         # current epoch (0-based)
    sampler: Dict[str, Any] = field(default_factory=dict)   # BucketSampler.state_dict() of the next batch
    best_bleu: float = -1.0
    best_step: int = 0
    bad_validations: int = 0               # validations since the best one (early stopping)
    lr_scale: float = 1.0                  # plateau schedule multiplier
    tokens_seen: int = 0                   # target tokens trained on
    elapsed: float = 0.0                   # training wall time over all runs, seconds
    params_files: List[str] = field(default_factory=list)   # params.<step> files kept, oldest first
    stopped: str = ""                      # why training ended ("max_steps", "early_stop", ...), "" while running
    hardware: str = ""                     # what the latest (resumed) run trained on (parallel.describe_hardware)

    def save(self, model_dir: Path) -> None:
        atomic_write_text(Path(model_dir) / STATE, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, model_dir: Path) -> "TrainState":
        path = Path(model_dir) / STATE
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise CheckpointError(f"{path} not found: {model_dir} holds no checkpoint to resume from; "
                                  "start without --resume") from None
        except (json.JSONDecodeError, TypeError) as e:
            raise CheckpointError(f"{path} is not a valid training state ({e})") from None


def _save_with(writer, path: Path) -> None:
    """Let an MXNet writer (save_parameters, save_states) write a temp file, fsync it, rename it into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        writer(str(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def prepare_model_dir(model_dir: Path, resume: bool, overwrite: bool) -> None:
    """Create the model directory; refuse to clobber an existing one unless --resume or --overwrite."""
    model_dir = Path(model_dir)
    if resume and overwrite:
        raise CheckpointError("--resume and --overwrite contradict each other; give one of them")
    if model_dir.exists() and not model_dir.is_dir():
        raise CheckpointError(f"--model-dir {model_dir} exists and is not a directory")
    if resume:
        if not (model_dir / STATE).exists():
            raise CheckpointError(f"--resume: {model_dir / STATE} not found, so there is nothing to resume; "
                                  "drop --resume to start a new run")
        return
    if model_dir.exists() and any(model_dir.iterdir()):
        if not overwrite:
            raise CheckpointError(f"--model-dir {model_dir} already exists and is not empty; pass --resume to "
                                  "continue its training, --overwrite to delete it and start over, or another --model-dir")
        logger.warning("--overwrite: deleting %s", model_dir)
        shutil.rmtree(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)


def save_checkpoint(model_dir: Path, net, trainer, state: TrainState, keep_last: int, is_best: bool) -> None:
    """Write params.<step>, trainer.<step>.states and (last) state.json; copy to params.best; prune old files."""
    model_dir = Path(model_dir)
    name = params_file(state.step)
    _save_with(net.save_parameters, model_dir / name)
    _save_with(trainer.save_states, model_dir / trainer_states_file(state.step))
    if is_best:
        _save_with(net.save_parameters, model_dir / PARAMS_BEST)
    kept = [f for f in state.params_files if f != name] + [name]
    old, state.params_files = kept[:-keep_last] if keep_last > 0 else [], kept[-max(keep_last, 1):]
    state.save(model_dir)
    old += [os.path.basename(p) for p in glob.glob(str(model_dir / "trainer.*.states"))
            if os.path.basename(p) != trainer_states_file(state.step)]
    for f in old:  # only after state.json no longer names them
        try:
            (model_dir / f).unlink()
        except FileNotFoundError:
            pass


def latest_step(state: TrainState) -> int:
    """The step of the latest checkpoint named by `state` (its parameter and optimizer-state files)."""
    if not state.params_files:
        raise CheckpointError("the training state names no checkpoint file")
    step = params_step(state.params_files[-1])
    if step is None:
        raise CheckpointError(f"the training state names {state.params_files[-1]!r}, not a params.<step> file")
    return step


def latest_params_path(model_dir: Path) -> Path:
    state = TrainState.load(model_dir)
    if not state.params_files:
        raise CheckpointError(f"{Path(model_dir) / STATE} names no parameter file")
    return Path(model_dir) / state.params_files[-1]


def params_path(model_dir: Path, which: str = "best") -> Path:
    """Path of the parameters `which` in {"best", "latest", "avg"} or an explicit step number."""
    model_dir = Path(model_dir)
    if which == "latest":
        path = latest_params_path(model_dir)
    elif which in ("best", "avg"):
        path = model_dir / (PARAMS_BEST if which == "best" else PARAMS_AVG)
        if which == "best" and not path.exists() and (model_dir / STATE).exists():
            path = latest_params_path(model_dir)   # no validation yet: the latest is the best we have
    elif str(which).isdigit():
        path = model_dir / params_file(int(which))
    else:
        raise CheckpointError(f"unknown checkpoint '{which}': use best, latest, avg or a step number")
    if not path.exists():
        raise CheckpointError(f"{path} not found in model directory {model_dir}")
    return path


def average_checkpoints(model_dir: Path, files: List[str]) -> Path:
    """Average parameter files element-wise into params.avg (checkpoint averaging)."""
    import mxnet as mx
    model_dir = Path(model_dir)
    total = None
    for f in files:
        p = mx.nd.load(str(model_dir / f))
        total = p if total is None else {k: total[k] + v for k, v in p.items()}
    avg = {k: v / len(files) for k, v in total.items()}
    _save_with(lambda tmp: mx.nd.save(tmp, avg), model_dir / PARAMS_AVG)
    return model_dir / PARAMS_AVG

