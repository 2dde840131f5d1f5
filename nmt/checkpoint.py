"""The model directory: file names defined once, atomic checkpoint save, load, resume, keep-N, averaging.

Layout of a model directory (everything needed to translate or to resume, nothing else):

    config.json                  the full Config (data, model, optim, train, decode)
    spm.<src>.model / .vocab     SentencePiece models of both languages
    params.<step>                parameters of the last `keep_last` checkpoints
    params.best                  parameters of the best checkpoint by the dev --valid-metric (config.json's)
    params.avg                   average of the last N checkpoints (only with --average-last N)
    trainer.<step>.states        optimizer states of the checkpoint (named by step: never paired with another's)
    manifest.<key>.json          per checkpoint (key: step, best, avg): its files' sizes and sha256 (nmt.manifest),
                                 written after them; a step's manifest holds its TrainState too
    state.json                   TrainState of the latest checkpoint, written last
    train.lock                   held by the one trainer writing the directory (nmt.dirlock)
    metrics.jsonl, train.log     one row per validation; the training log
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from nmt import manifest
from nmt.atomic import atomic_write_text, fsync_dir, keep_mode
from nmt.manifest import CheckpointError
from nmt.storage import error_line, guarded_write, mxnet_name, short_write_failure, written_whole

logger = logging.getLogger("nmt.checkpoint")
# the flag that lets a resumed run go on past each limit a finished run stopped at (`TrainState.limit_reached`)
LIMIT_FLAGS = {"max_steps": "--max-steps", "max_epochs": "--max-epochs", "time_budget": "--time-budget",
               "early_stop": "--patience"}
StepUse = Optional[Callable[[int], str]]   # how a command asks for a step's checkpoint (`lost_best.restore_best`)

CONFIG = "config.json"
STATE = "state.json"
PARAMS_BEST = "params.best"
PARAMS_AVG = "params.avg"
METRICS = "metrics.jsonl"
LOG = "train.log"
SCORES = "scores.json"
SCORES_LOCK = f"{SCORES}.lock"   # (scores.json's lock file, opened in place)
LOCK = "train.lock"
EXPORT = "export.json"   # in a directory nmt-export wrote (nmt.export): one checkpoint, no training state
# Every file a run keeps in its model directory, by name: no command's output may be written over one (nmt.cli_io)
OWN_FILE = re.compile(r"(config|state|scores|export)\.json|scores\.json\.lock|metrics\.jsonl|train\.(log|lock)|params\."
                      r"(best|avg|\d+)|trainer\.\d+\.states|(manifest|encoded)\..+\.(json|npy)|spm\.\w+\.(model|vocab)")


def params_file(step: int) -> str:
    return f"params.{manifest.step_key(step)}"


def params_step(name: str) -> Optional[int]:
    """The step of a `params.<step>` file name; None for any other name (params.best, params.avg, ...)."""
    return manifest.numbered_step(name, "params")


def kept_steps(model_dir: Path) -> List[int]:
    """The steps whose parameter file (params.<step>) the model directory keeps, in order."""
    return sorted(s for s in (params_step(p.name) for p in Path(model_dir).glob("params.*")) if s is not None)


def config_of(model_dir: Path, flag: str = "model directory") -> Path:
    """`model_dir`/config.json; a CheckpointError naming `flag` when `model_dir` is not a model directory (a
    checkpoint file in one, a path that does not exist, a directory nmt-train did not write)."""
    model_dir = Path(model_dir)
    if (model_dir / CONFIG).is_file():
        return model_dir / CONFIG
    if model_dir.is_file():   # a checkpoint's file in one, most likely
        which = {PARAMS_BEST: "best", PARAMS_AVG: "avg"}.get(model_dir.name, params_step(model_dir.name))
        home = f": give the model directory that holds it, {model_dir.absolute().parent}" + (
            f", with checkpoint {which}" if which is not None else "")
        raise CheckpointError(f"{flag} {model_dir} is a file" + (home if (model_dir.parent / CONFIG).is_file() else
                                                                  ", not a model directory (written by nmt-train)"))
    from nmt.dirlock import config_coming, in_place_of_file, left_aside   # (both import this module)
    from nmt.export import left_by_export
    kind = in_place_of_file(model_dir / CONFIG)
    if kind:
        raise CheckpointError(f"{flag} {model_dir}: {model_dir / CONFIG} is {kind}, not the file of the model's "
                              "settings that nmt-train writes: put that file in its place")
    found = f"{CONFIG} not found" if model_dir.is_dir() else "no such directory"
    raise CheckpointError(f"{flag} {model_dir}: {found}; " + (left_aside(model_dir) or config_coming(model_dir) or
                                                               left_by_export(model_dir) or
                                                               "give a directory written by nmt-train"))


def trainer_states_file(step: int) -> str:
    return f"trainer.{manifest.step_key(step)}.states"


@dataclass
class TrainState:
    """Everything besides parameters and optimizer states that a resume needs, JSON-serializable."""
    step: int = 0                          # updates done, over all runs of this model directory
    epoch: int = 0                         # current epoch (0-based)
    sampler: Dict[str, Any] = field(default_factory=dict)   # BucketSampler.state_dict() of the next batch
    best_bleu: float = -1.0                # dev BLEU of the best checkpoint
    best_step: int = 0
    best_score: Optional[float] = None     # its dev --valid-metric (absent from runs before the flag: its BLEU)
    best_ppl: Optional[float] = None       # its dev perplexity: a tie of the metric goes to the lower (None: unknown)
    bad_validations: int = 0               # scheduled validations since the best of them (early stopping)
    scheduled_best: Optional[list] = None  # [score, ppl] of that best if not best_* (evaluate.track_best)
    lr_scale: float = 1.0                  # plateau schedule multiplier
    tokens_seen: int = 0                   # target tokens trained on
    since_valid: list = field(default_factory=list)   # [loss sum, NLL sum, tokens] since the last validation
    since_log: list = field(default_factory=list)     # the same since the last --log-every point (TensorBoard's)
    elapsed: float = 0.0                   # training wall time over all runs, seconds
    params_files: List[str] = field(default_factory=list)   # params.<step> files kept, oldest first
    stop_file: str = ""                    # of them, one saved at a stop (Ctrl-C, a limit): dropped at the next save
    stopped: str = ""                      # why training ended ("max_steps", "early_stop", ...), "" while running
    hardware: str = ""                     # what the latest (resumed) run trained on (parallel.describe_hardware)
    init_from: str = ""                    # the parameter file a fine-tuning run started from (--init-from)
    dev_sum: str = ""                      # sha256 of the dev pairs validated on (nmt-evaluate --dev-set compares)
    train_sum: str = ""                    # sha256 of the training pairs trained on (--resume compares, as dev_sum)
    test_sum: str = ""                     # sha256 of the test pairs (files moved since: --resume compares)

    def __post_init__(self) -> None:
        if self.best_score is None and self.best_step:   # a state written before --valid-metric, which was BLEU then
            self.best_score = self.best_bleu

    def save(self, model_dir: Path) -> None:
        atomic_write_text(Path(model_dir) / STATE, json.dumps(asdict(self), indent=1) + "\n")

    def limit_reached(self, t) -> str:
        """The limit of `t` (a TrainConfig) the run has reached ("" none), in the order training tells them: a
        resume of it stops before any update (early_stop first: raising another limit trains no more)."""
        return ("early_stop" if t.patience and self.bad_validations >= t.patience else
                "max_steps" if t.max_steps and self.step >= t.max_steps else
                "time_budget" if t.time_budget and self.elapsed >= t.time_budget else
                "max_epochs" if self.epoch >= t.max_epochs else "")

    @classmethod
    def load(cls, model_dir: Path) -> "TrainState":
        path = Path(model_dir) / STATE
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise CheckpointError(f"{path} not found: {model_dir} holds no training state") from None
        except OSError as e:   # no permission, a directory, ...
            raise CheckpointError(f"{path} cannot be read ({e.strerror or e})") from None
        except (ValueError, TypeError) as e:   # not JSON (json.JSONDecodeError), not UTF-8, not a state's fields
            raise CheckpointError(f"{path} is not a valid training state ({e})") from None


def _save_with(writer, path: Path, needed: Optional[int] = None) -> None:
    """Let an MXNet writer (save_parameters, save_states) write a temp file, fsync it, rename it into place. A full
    disk, missing permission or read-only file system is a StorageError naming `path` (and, when full, the
    `needed` bytes and those free); the file `path` held before stays as it was."""
    import mxnet as mx
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with guarded_write(path, needed):
            writer(str(tmp))
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            if path.name.startswith("params"):
                written_whole(tmp, path, needed)
            keep_mode(path, tmp)   # (params.best rewritten)
            os.replace(tmp, path)
    except mx.base.MXNetError as e:
        _remove(tmp)
        raise (short_write_failure(path, e, needed) or e) from None
    except BaseException:
        _remove(tmp)
        raise
    fsync_dir(path.parent)


def _remove(path: Path) -> None:
    """Delete a temporary file if it exists and can be deleted (not on a read-only file system)."""
    with contextlib.suppress(OSError):
        path.unlink()


def save_checkpoint(model_dir: Path, net, trainer, state: TrainState, keep_last: int, is_best: bool) -> None:
    """Write params.<step>, trainer.<step>.states and their manifest; then params.best (the same parameters, which
    the step's files hold if a run is killed before its manifest) and its manifest; last state.json; prune the
    files of checkpoints beyond `keep_last`. A failure at any point leaves the previous checkpoint the newest intact
    one, or this one, from which --resume writes params.best again (`nmt.resume.check_kept_files`)."""
    model_dir = Path(model_dir)
    name, states = params_file(state.step), trainer_states_file(state.step)
    size = _file_size(model_dir, state.params_files[-1]) if state.params_files else None
    _save_with(net.save_parameters, model_dir / name, size)
    _save_with(trainer.save_states, model_dir / states, 2 * size if size else None)
    # a stop's checkpoint (where a resume starts) goes at the next save: those kept are an uninterrupted run's
    kept = [f for f in state.params_files if f not in (name, state.stop_file)] + [name]
    state.params_files, state.stop_file = kept[-max(keep_last, 1):], name if state.stopped else ""
    manifest.write_manifest(model_dir, manifest.step_key(state.step), [name, states], state.step, asdict(state))
    if is_best:
        _save_with(net.save_parameters, model_dir / PARAMS_BEST, size)
        manifest.write_manifest(model_dir, "best", [PARAMS_BEST], state.step)
    state.save(model_dir)
    prune(model_dir, {params_step(f) for f in state.params_files})


def _file_size(model_dir: Path, name: str) -> Optional[int]:
    return (model_dir / name).stat().st_size if (model_dir / name).is_file() else None


def prune(model_dir: Path, keep_steps: set) -> None:
    """Delete the params, optimizer states and manifests of steps not in `keep_steps` (only after state.json no
    longer names them); the manifest goes first, so a half-pruned checkpoint is never taken for an intact one."""
    names = [p.name for p in model_dir.iterdir()] if model_dir.is_dir() else []   # (moved away: its next write says)
    for stem, suffix in manifest.STEP_FILES:   # manifests first
        for name in names:
            step = manifest.numbered_step(name, stem, suffix)
            if step is not None and step not in keep_steps:
                (model_dir / name).unlink(missing_ok=True)


def check_manifests(model_dir: Path) -> None:
    """CheckpointError unless the directory keeps checkpoint manifests, as every one nmt writes does: without them,
    nothing can tell its files intact (an earlier version of nmt wrote it, or they were deleted)."""
    if not any(Path(model_dir).glob("manifest.*.json")):
        redo = ("export it again (nmt-export --overwrite)" if (Path(model_dir) / EXPORT).exists() else "train it again")
        raise CheckpointError(f"{model_dir} has no checkpoint manifests (manifest.*.json, written beside every "
                              "checkpoint to verify its files): they were deleted, or an earlier version of nmt wrote "
                              f"the directory, which this one does not read; restore them from a copy, or {redo}")


def latest_step(state: TrainState) -> int:
    """The step of the latest checkpoint named by `state` (its parameter and optimizer-state files)."""
    if not state.params_files:
        raise CheckpointError("the training state names no checkpoint file")
    step = params_step(state.params_files[-1])
    if step is None:
        raise CheckpointError(f"the training state names {state.params_files[-1]!r}, not a params.<step> file")
    return step


def latest_params_path(model_dir: Path, quiet: bool = False) -> Path:
    """The newest intact step checkpoint's parameters, as --resume takes it (state.json, written last, lags a run
    killed as it saved); unless `quiet`, a warning (information, when a live run saves it) names a newer one's fault."""
    from nmt.dirlock import trained_now   # (which imports this module)
    model_dir = Path(model_dir)
    check_manifests(model_dir)
    unsaved: List[int] = []
    body, problems = manifest.newest_intact(model_dir, unsaved)
    if problems and not quiet and len(unsaved) == len(problems) and trained_now(model_dir):
        logger.info("%s: step %s is being saved; the latest is step %d", model_dir, unsaved[0], body["step"])
    elif problems and not quiet:
        logger.warning("%s: the newest checkpoint is damaged (%s); the latest is the newest intact one, step %d",
                       model_dir, "; ".join(problems), body["step"])
    return model_dir / params_file(latest_step(TrainState(**body["state"])))


def params_path(model_dir: Path, which: str = "best", quiet: bool = False, use: StepUse = None) -> Path:
    """Path of the parameters `which` in {"best", "latest", "avg"} or an explicit step number; unless `quiet`, what
    it takes instead of what was asked for is said (a damaged newest checkpoint, no params.best yet). `use`: how the
    command asks for a step's checkpoint, for the advice on a lost params.best (`lost_best.restore_best`)."""
    model_dir = Path(model_dir)
    if which in ("best", "latest"):
        from nmt.dirlock import has_checkpoint, no_checkpoint_yet   # (which imports this module)
        if not has_checkpoint(model_dir):
            raise CheckpointError(no_checkpoint_yet(model_dir))
    exported = (model_dir / EXPORT).exists()   # its one checkpoint, if exported from it: another asked for, said
    if exported and (which in ("latest", "avg") or str(which).isdecimal() and best_step(model_dir) != int(which)):
        from nmt.export import as_exported   # (which imports this module)
        which = as_exported(model_dir, which)
    say = (lambda *_: None) if quiet else logger.log
    if which == "latest":
        path = latest_params_path(model_dir, quiet)
    elif which in ("best", "avg"):
        path = model_dir / (PARAMS_BEST if which == "best" else PARAMS_AVG)
        if which == "best" and not path.exists() and (model_dir / STATE).exists() and not best_step(model_dir):
            path = latest_params_path(model_dir, quiet)   # no validation yet: the latest is the best we have
            say(logging.WARNING, "%s: no checkpoint validated yet (no %s, the run stopped before its first "
                "validation): using the latest, %s", model_dir, PARAMS_BEST, path.name)
    elif str(which).isdecimal():
        path = model_dir / params_file(int(which))
        if not path.exists() and best_step(model_dir) == int(which):   # pruned, but params.best holds that step
            say(logging.INFO, "%s: step %s is the best checkpoint, %s", model_dir, which, PARAMS_BEST)
            path = model_dir / PARAMS_BEST
    else:
        manifest.check_which(which)
        raise CheckpointError(f"unknown checkpoint '{which}': use best, latest, avg or a step number")
    if not path.exists():
        step = None if (model_dir / EXPORT).exists() else best_step(model_dir)   # (None: no state tells)
        held = "" if step is None else f"it held step {step}, the best on dev: "
        from nmt.config_resume import average_advice   # (which uses this module's TrainState)
        from nmt.lost_best import restore_best   # (which imports this module)
        hint = (average_advice(model_dir) if which == "avg" else
                f"; {held}{restore_best(model_dir, step, use)}" if which == "best" else "")
        if str(which).isdecimal():
            kept = kept_steps(model_dir)
            hint = f"; the steps kept there: {', '.join(map(str, kept))}" if kept else "; it keeps no step's parameters"
        raise CheckpointError(f"{path} not found in model directory {model_dir}{hint}")
    verify_params(path, use)
    return path


def best_step(model_dir: Path, newest: bool = False) -> Optional[int]:
    """The step of params.best: its manifest's, else the training state's, else (state.json gone) the newest intact
    checkpoint's, as --resume takes it; with `newest`, the newest they name (a run killed as it wrote params.best:
    its step's files name the new best; a newest checkpoint damaged: the older intact one names an older best)."""
    steps = []
    for source in (lambda: manifest.read_manifest(model_dir, "best").get("step"),
                   lambda: TrainState.load(model_dir).best_step,
                   lambda: manifest.newest_intact(model_dir)[0]["state"].get("best_step")):
        with contextlib.suppress(CheckpointError, OSError, KeyError, TypeError):   # (a damaged one: named later)
            steps.append(source() or 0)
        if steps and steps[-1] and not newest:   # the first that knows
            return steps[-1]
    return max(steps, default=0) or None


def holds_other(model_dir: Path, step: Optional[int], sha256: Optional[str]) -> bool:
    """Whether `model_dir`'s checkpoint of `step` holds other parameters now than those of `sha256`: another run's,
    which nmt-train --overwrite put there (a step pruned, or not reached yet by the new run: not known, False)."""
    return bool(step and sha256) and params_sha256(Path(model_dir) / params_file(step)) not in (None, sha256)


def verify_params(path: Path, use: StepUse = None, advise: bool = True) -> None:
    """CheckpointError naming the file and what is wrong unless the parameter file `path` (and config.json and the
    SentencePiece models beside it) match its checkpoint's manifest (`use`: see `lost_best.restore_best`; `advise`:
    with its advice for a lost params.best, which a resume, writing it again, does without)."""
    model_dir, key = path.parent, _manifest_key(path)
    check_manifests(model_dir)
    try:
        manifest.verify(model_dir, key)
    except CheckpointError as e:
        from nmt.lost_best import restore_best   # (which imports this module)
        lost = any(str(model_dir / n) in str(e) for n in (path.name, manifest.manifest_name(key)))   # (not spm)
        again = (restore_best(model_dir, best_step(model_dir, newest=True), use) if key == "best" else
                 "nmt-train --resume --average-last N averages the last N kept checkpoints into it again")
        advice = f"; {again}" if advise and lost and key in ("best", "avg") else ""
        raise CheckpointError(f"checkpoint {path.name} of {model_dir} cannot be used: {e}{advice}") from None
    except OSError as e:   # a file it lists (or the manifest) exists but cannot be read: no permission, ...
        raise CheckpointError(f"checkpoint {path.name} of {model_dir} cannot be used: {e.filename or path} cannot be "
                              f"read ({e.strerror or e})") from None


def _manifest_key(path: Path) -> str:
    """The key of the manifest of the parameter file `path` (params.<step>, params.best, params.avg, ...)."""
    step = params_step(path.name)
    return manifest.step_key(step) if step is not None else path.name.split(".", 1)[1]


def params_sha256(path: Path) -> Optional[str]:
    """The sha256 that the manifest of the parameter file `path` records for it (None: no such manifest or entry)."""
    with contextlib.suppress(CheckpointError, OSError):
        return manifest.read_manifest(path.parent, _manifest_key(path))["files"].get(path.name, {}).get("sha256")
    return None


def average_checkpoints(model_dir: Path, files: List[str], last: int = 0) -> Path:
    """Average parameter files element-wise into params.avg (checkpoint averaging): the `last` of `files` (0: all;
    fewer than `last` are averaged with a warning)."""
    import mxnet as mx
    model_dir = Path(model_dir)
    if last and len(files) < last:
        logger.warning("--average-last %d: the run has %d checkpoints; params.avg averages those", last, len(files))
    files = files[-last:] if last else files
    logger.info("params.avg: the average of the checkpoints of steps %s", ", ".join(str(params_step(f)) for f in files))
    for i, f in enumerate(files):   # each verified before any is read; a damaged one said with what averages without it
        try:
            verify_params(model_dir / f)
        except CheckpointError as e:
            from nmt.config_resume import average_advice   # (which uses this module's TrainState)
            after = len(files) - 1 - i   # (one alone is no average)
            raise CheckpointError(f"{e}; params.avg is not written: restore the file from a backup" + (
                f", or leave it out, with N at most {after} (the checkpoints after it){average_advice(model_dir)}"
                if after > 1 else "")) from None
    total = None
    for f in files:
        p = mx.nd.load(str(model_dir / f))
        total = p if total is None else {k: total[k] + v for k, v in p.items()}
    avg, newest = {k: v / len(files) for k, v in total.items()}, model_dir / files[-1]
    _save_with(lambda tmp: mx.nd.save(tmp, avg), model_dir / PARAMS_AVG, _file_size(model_dir, files[-1]))
    manifest.write_manifest(model_dir, "avg", [PARAMS_AVG], params_step(newest.name), model_of=_manifest_key(newest))
    return model_dir / PARAMS_AVG


def load_parameters(net, path: Path, ctx, described_by: Path) -> None:
    """Load the parameter file `path` into `net`, the model its config.json `described_by` describes; when they do
    not fit, a CheckpointError naming the file."""
    import mxnet as mx   # not at import time, as above
    try:
        with open(path, "rb"):   # no permission, a directory: said plainly, not in MXNet's words
            pass
    except OSError as e:
        raise CheckpointError(f"{path} cannot be read ({e.strerror or e})") from None
    manifest.check_model_settings(path, _manifest_key(path))   # (config.json edited into another model)
    try:
        net.load_parameters(mxnet_name(path), ctx=ctx)
    except (mx.base.MXNetError, AssertionError, ValueError, KeyError) as e:
        try:
            mx.nd.load(str(path))
        except mx.base.MXNetError as unreadable:
            raise CheckpointError(f"{path}: not a complete MXNet parameter file (truncated, damaged or another kind of "
                                  f"file: {error_line(unreadable)})") from None
        raise CheckpointError(f"{path}: cannot load these parameters into the model described by {described_by} "
                              f"({error_line(e)})") from None
