"""The `Trainer` of a run, built from its parts: devices, kvstore and workers, the model directory checked and locked
(one trainer per directory), then the data, model and optimizer built, restored from the newest intact checkpoint on
--resume, or started from a trained model's parameters with --init-from (`create_trainer`)."""
from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional

import mxnet as mx
import numpy as np

from nmt import checkpoint as ckpt
from nmt.config import Config
from nmt.config_resume import PER_INVOCATION
from nmt.data import build_data
from nmt.dirlock import ModelDirLock, check_model_dir, prepare_model_dir, replacing, set_aside
from nmt.finetune import copy_tokenizers, new_run, start_from
from nmt.log import setup_logging
from nmt.models import build_model
from nmt.optim import apply_settings, build_optimizer
from nmt.parallel import default_kvstore, hardware_of, init_amp, parse_devices
from nmt.preflight import check_checkpoint_room, check_search_widths, checked_config, run_inputs, settings_lines
from nmt.resume import restore, resumed_state
from nmt.scoring import retire_other_decoding
from nmt.storage import check_writable
from nmt.tensorboard import TensorBoardWriter
from nmt.workers import WorkerGroup, create_kvstore

if TYPE_CHECKING:
    from nmt.train import Trainer

__all__ = ["create_trainer"]

logger = logging.getLogger("nmt.train")   # (the run's setup lines, in train.log as the training's)


def create_trainer(cfg: Config, resume: bool = False, overwrite: bool = False, init: Optional[Path] = None) -> Trainer:
    """The Trainer of a run per `cfg`: devices, kvstore and workers, the model directory (locked by rank 0 until
    `fit` ends: one trainer per directory), then data, model and optimizer built (and, with `resume`, restored from
    the newest intact checkpoint; with `init`, a parameter file, starting from it: `nmt.finetune`)."""
    cfg = checked_config(cfg, "create_trainer", new=new_run(resume, init, "create_trainer"))
    t, _ = cfg.train, build_model(cfg.model, 4, 4)   # checked before the data
    ctxs = parse_devices(t.gpus, t.cpu_devices)
    if t.amp:
        init_amp(ctxs)   # ConfigError without GPUs; before the model is built (AMP rewrites its operators)
    kv = create_kvstore(default_kvstore(ctxs, t.kvstore))
    workers = WorkerGroup(kv)   # they agree first (a worker's share of a batch: 1 / workers x devices)
    workers.check_count()
    workers.check_same("flags", {"resume": resume, "overwrite": overwrite, "init_from": bool(init),
                                 "devices": len(ctxs)})
    lock, inputs = None, run_inputs(cfg, init)
    if workers.is_chief:   # what the directory holds is checked before the lock creates it
        lock = ModelDirLock(Path(t.model_dir)).acquire_after(lambda: check_model_dir(Path(t.model_dir), resume,
                                                                                          overwrite, inputs))
    try:
        trainer = _create_locked(cfg, resume, overwrite, ctxs, kv, workers, init, inputs)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    trainer.lock = lock
    return trainer


def _create_locked(cfg: Config, resume: bool, overwrite: bool, ctxs, kv, workers: WorkerGroup,
                   init: Optional[Path], inputs: Dict[str, Any]) -> Trainer:
    """`create_trainer` once the directory is ours: checked writable and, once the model is built, with room for
    its checkpoints, so that a full disk shows before training rather than at the first checkpoint."""
    model_dir, aside = Path(cfg.train.model_dir), None
    if workers.is_chief:
        prepare_model_dir(model_dir, resume, overwrite, inputs)
        aside = set_aside(model_dir) if overwrite and not resume else None
    with replacing(model_dir, aside):   # --overwrite: the run it replaces goes once the data and room are checked
        if workers.is_chief:
            check_writable(model_dir)
            if init is not None:
                copy_tokenizers(init, cfg, model_dir)
            setup_logging(model_dir / ckpt.LOG)
        else:   # the other workers' warnings, named (Python's last-resort handler printed them bare)
            setup_logging(None, logging.WARNING, prefix=f"rank {workers.rank} ")
        state, cfg = resumed_state(cfg, workers) if resume else (ckpt.TrainState(init_from=str(init or "")), cfg)
        TensorBoardWriter.check(cfg.train.tensorboard)   # before the data is read; its writer once all is checked
        state.hardware = hardware_of(ctxs, workers.num_workers, state.hardware if resume else "",
                                     trains=not (resume and state.limit_reached(cfg.train)))
        for line in (f"devices: {ctxs}, kvstore: {getattr(kv, 'type', kv)}, worker {workers.rank} of "
                     f"{workers.num_workers}", *settings_lines(cfg)):   # what config.json holds, for people
            logger.info(line)
        data = build_data(cfg, model_dir, resume, workers, (state.train_sum, state.dev_sum, state.test_sum))
        check_search_widths(cfg, data.tgt_tok.vocab_size)
        state.train_sum, state.dev_sum, state.test_sum = data.sums
        workers.check_same("training data and flags", {   # distributed: all must draw the same batches
            "batches": data.sampler.fingerprint(), "subword_sampling": cfg.data.subword_sampling,   # (lengths)
            "text sha256": dict(zip(("training pairs", "dev pairs", "test pairs"), data.sums)),
            "model": vars(cfg.model), "optim": vars(cfg.optim),
            "train": {k: v for k, v in vars(cfg.train).items() if f"train.{k}" not in PER_INVOCATION}})
        for seed in (random.seed, np.random.seed, mx.random.seed):
            seed(cfg.train.seed)
        net = build_model(cfg.model, data.src_tok.vocab_size, data.tgt_tok.vocab_size)
        net.initialize(mx.init.Xavier(magnitude=2.24), ctx=ctxs)
        net.hybridize(static_alloc=True)
        if workers.is_chief:
            check_checkpoint_room(cfg, net, no_update=resume and bool(state.limit_reached(cfg.train)))
    optimizer = build_optimizer(cfg.optim, net.collect_params(), kv)
    if resume:
        restore(model_dir, net, optimizer, data, state, workers, ctxs)
        apply_settings(optimizer, cfg.optim)   # the states came with the settings saved with them: now this run's
    elif init is not None and workers.is_chief:   # the others get rank 0's parameters with the kvstore
        start_from(net, init, ctxs)
    if workers.is_chief:   # on resume, with the settings changed since (the next --resume continues with them)
        cfg.save(model_dir / ckpt.CONFIG)
        retire_other_decoding(model_dir, cfg.decode)   # (a resume given other decoding flags)
    workers.init_trainer(optimizer)   # distributed: rank 0's parameters on every worker before update 1
    from nmt.train import Trainer   # (which imports this module for `run_training`)
    return Trainer(cfg, data, net, optimizer, ctxs, state, workers, TensorBoardWriter.create(
        model_dir, cfg.train.tensorboard, state.step if resume else None, workers.rank))
