"""The advice for a lost or damaged params.best (`restore_best`), and what became of its step's own checkpoint, which
holds the same parameters (`own_copy`): pruned by --keep-last, deleted otherwise, or damaged."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

from nmt import checkpoint as ckpt, manifest
from nmt.manifest import CheckpointError


def restore_best(model_dir: Path, step: Optional[int], use: ckpt.StepUse = None) -> str:
    """How to do without a lost or damaged params.best (or its manifest): the step checkpoint of the same parameters,
    unless it is gone too (`own_copy`; `nmt.resume.rebuild_best` writes params.best again from it). `use`: how the
    command asks for a step's checkpoint (`--checkpoint N`; nmt-train's --init-from: the file)."""
    if (Path(model_dir) / ckpt.EXPORT).exists():   # an export holds no step checkpoint, and trains no more
        return f"export it again (nmt-export --overwrite) from the model directory its {ckpt.EXPORT} names"
    try:   # the newest kept step whose files are intact (a damaged newest one would fail the advice)
        kept = manifest.newest_intact(Path(model_dir))[0]["step"] if step else None
    except CheckpointError:
        kept = None
    own = Path(model_dir) / ckpt.params_file(step or 0)   # (newer than the newest intact checkpoint: damaged files)
    if step and (not own.exists() or kept is not None and step > kept):
        instead = (f"use {use(kept)} (a kept step), or train again" if use and kept else "train again" if use else
                   "use --checkpoint latest or a kept step, or train again")
        return (f"{own.name}, the step's own copy, {own_copy(model_dir, step)}, so the best parameters are lost: "
                f"{instead}")
    return (f"use {use(step) if use else f'--checkpoint {step}'}, the same parameters (nmt-train --resume writes "
            f"{ckpt.PARAMS_BEST} again from {ckpt.params_file(step)})" if step else "restore it from a copy")


def own_copy(model_dir: Path, step: int) -> str:
    """What became of `step`'s own parameter file, as the rest of a sentence naming it: "is damaged" (it is there),
    "is no longer kept (--keep-last)" (the training state keeps newer steps only), deleted otherwise (the training
    state still keeps that step: --keep-last keeps it, or the run keeps all it saved), or "is missing" (no training
    state tells)."""
    if (Path(model_dir) / ckpt.params_file(step)).exists():
        return "is damaged"
    for kept in (lambda: ckpt.TrainState.load(model_dir).params_files,   # state.json, else the newest checkpoint's
                 lambda: manifest.newest_intact(Path(model_dir))[0]["state"]["params_files"]):
        with contextlib.suppress(CheckpointError, OSError, KeyError, TypeError):
            steps = [s for s in map(ckpt.params_step, kept()) if s is not None]
            if step in steps:
                return "was deleted (not by --keep-last: the run keeps that step)"
            if steps and step < max(steps):
                return "is no longer kept (--keep-last)"
    return "is missing"
