"""Checks before training, and the dry run that does only them.

`check_checkpoint_room` is what every run checks once the model is built: room for --keep-last checkpoints.
`dry_run(cfg)` (`nmt-train --dry-run`) validates the whole configuration, the data and the model directory
(readable, clean or resumable, writable, room) and describes what would be trained, without training. It runs the
data pipeline for exact figures: a new run's tokenizers and encoded corpus go to a temporary directory; a resumed
one's encoded corpus is cached in the model directory (nmt.encoded), which the run that follows then reuses.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from nmt import checkpoint as ckpt
from nmt import manifest
from nmt.atomic import scratch_dir
from nmt.config import CORPUS_FILES, LR_FREE_OPTIMIZERS, Config, ConfigError, ModelConfig
from nmt.models import ARCHITECTURES
from nmt.tensorboard import TensorBoardWriter
from nmt.storage import allocated, check_room, check_writable, free_bytes, human_bytes


def parameter_count(net) -> int:
    """Parameters of a model whose shapes are known (deferred ones count 0 until the first forward)."""
    return int(sum(np.prod(p.shape) for p in net.collect_params().values() if p.shape and all(p.shape)))


def checkpoint_bytes(cfg: Config, net) -> int:
    """Disk a run needs in its model directory: --keep-last checkpoints and the one being written (float32
    parameters plus Adam's two moments each), params.best and its next copy while that is written and, with
    --average-last, params.avg."""
    t = cfg.train
    params = 4 * parameter_count(net)
    return (t.keep_last + 1) * 3 * params + params * (3 if t.average_last > 1 else 2)


def check_search_widths(cfg: Config, tgt_vocab: int) -> None:
    """ConfigError naming the flags when the dev translations (--valid-beam) or the test sets' (--beam-size) could
    not run over the target vocabulary: found before training, where a run found it at its first validation or after
    its last update."""
    from nmt.search import search_too_wide
    for beam, flag in ((cfg.train.valid_beam, "--valid-beam"), (cfg.decode.beam_size, "--beam-size")):
        why = search_too_wide(beam, cfg.decode.batch_size, tgt_vocab, flag, "--decode-batch-size")
        if why:
            raise ConfigError(why)


def check_checkpoint_room(cfg: Config, net, no_update: bool = False, data_bytes: int = 0) -> int:
    """StorageError unless the model directory has room for `checkpoint_bytes` and `data_bytes` (the tokenizers and
    encoded corpus a new run writes there first, which a dry run made elsewhere); returns that sum. `no_update`: a
    resume of a run at its limit, which writes no checkpoint (at most params.avg, with --average-last)."""
    t, model_dir = cfg.train, Path(cfg.train.model_dir)
    needed = checkpoint_bytes(cfg, net)
    params = 4 * parameter_count(net)   # bytes of one parameter file (float32)
    if no_update:   # (the figure the dry run reports too)
        needed = params * bool(t.average_last) + (1 << 20)
        check_room(model_dir, needed, ("params.avg and the small files beside it" if t.average_last else
                                       "the small files") + " of a resume at the run's limit (no update)",
                   keep_last=False)
        return needed
    per = 3 * params
    # a resumed run's checkpoints are there already: new ones take their place as they are pruned
    there = sum(f.stat().st_size for pattern in ("params.*", "trainer.*.states") for f in model_dir.glob(pattern)
                if f.is_file())
    # ... but at least room for one more checkpoint, a copy of params.best and of params.avg before any is pruned, and
    # 1 MiB for the small files beside them and the file system's rounding
    least = per + params * (2 if t.average_last else 1) + (1 << 20)
    check_room(model_dir, max(needed - there, least) + data_bytes, f"--keep-last {t.keep_last} checkpoints of "
               f"{human_bytes(per)} each (parameters and optimizer states) and params.best" +
               (f" (beyond the {human_bytes(there)} of checkpoints already there)" if there else "") +
               (f", with the tokenizers, encoded corpus and small files ({human_bytes(data_bytes)})"
                if data_bytes else ""),
               keep_last=t.keep_last > 1 and needed - there > least)   # (else --keep-last cannot lower it)
    return needed + data_bytes


def checked_config(cfg, caller: str, new: bool = False) -> Config:
    """`cfg` made again of its values, which all pass its checks, also those set by hand since it was made (a
    ConfigError naming the field, before any work: a beam size of 0 failed at the first validation), and as
    `Config.from_dict` takes them: "~" expanded, paths absolute, numpy's numbers and booleans as Python's; files
    given replace the recipe (a DataConfig's default "tatoeba"). `new`: a new run's, whose model settings of another
    architecture are refused (`refuse_unread`; a run's own config.json, resumed or fine-tuned from, is taken as is)."""
    if not isinstance(cfg, Config):
        raise TypeError(f"{caller}: cfg must be a Config (Config.from_dict makes one of a dict), got "
                        f"{type(cfg).__name__}")
    for f in dataclasses.fields(Config):
        if not isinstance(getattr(cfg, f.name), f.default_factory):
            raise TypeError(f"{caller}: cfg.{f.name} must be a {f.default_factory.__name__}, got "
                            f"{type(getattr(cfg, f.name)).__name__}")
    d = {s: {k: v.item() if type(v).__module__ == "numpy" else v for k, v in values.items()}   # (np.bool_ too)
         for s, values in cfg.to_dict().items()}
    checked = Config.from_dict(d, f"{caller}: cfg", file=True)
    checked.given, checked.labels = cfg.given, cfg.labels
    if checked.data.recipe and any(getattr(checked.data, f) for f in CORPUS_FILES):   # (config.json then names none)
        checked.data.recipe = None
    if new:
        refuse_unread(checked, caller)
    return checked


def refuse_unread(cfg: Config, caller: str) -> None:
    """A ConfigError for a model setting `cfg`'s architecture does not read, off its default, in a new run from
    Python (nmt-train's flags: `cli.check_model_flags`): it would be saved and change nothing. (A run's own
    config.json, resumed or fine-tuned from, is taken as it is.)"""
    arch = ARCHITECTURES.get(cfg.model.arch)   # (unknown: named by the model's own checks; none listed: as the CLI)
    every = ModelConfig.__dataclass_fields__
    fields = (*arch.config_fields, "arch", "shared_vocab") if arch and arch.config_fields else every
    unread = [k for k in every if k not in fields and getattr(cfg.model, k) != getattr(ModelConfig, k)]
    if unread:
        owners = [a for a, c in sorted(ARCHITECTURES.items()) if unread[0] in c.config_fields]
        raise ConfigError(f"{caller}: cfg model.{unread[0]} {getattr(cfg.model, unread[0])!r} is a setting of "
                          f"{' or '.join(f'--arch {a}' for a in owners)}, not of --arch {cfg.model.arch}, which "
                          f"would ignore it: leave it at its default ({getattr(ModelConfig, unread[0])!r})")


def run_inputs(cfg: Config, init: Optional[Path]) -> Dict[str, Any]:
    """What a run reads, by flag: its data files and directories and the --init-from parameters (which --overwrite
    must not delete)."""
    return {**cfg.data.input_paths(), "--init-from": init}


def _check_model_dir(cfg: Config, resume: bool, overwrite: bool, init: Optional[Path]) -> Dict[str, Any]:
    """The model directory as a run would find it: clean or resumable (its newest intact checkpoint), writable,
    not locked by a live trainer. Raises the error the run would raise."""
    from nmt.dirlock import ModelDirLock, check_model_dir
    model_dir = Path(cfg.train.model_dir)
    if (model_dir / ckpt.LOCK).is_file():
        with ModelDirLock(model_dir):   # refused, naming the holder, while another trainer writes it
            pass
    check_model_dir(model_dir, resume, overwrite, run_inputs(cfg, init))
    check_writable(model_dir)
    out: Dict[str, Any] = {"model_dir": str(model_dir), "exists": model_dir.is_dir()}
    if resume:
        from nmt.config_resume import check_test_files
        from nmt.resume import check_kept_files
        ckpt.check_manifests(model_dir)
        body, problems = manifest.newest_intact(model_dir)
        check_kept_files(model_dir, repair=False, state=ckpt.TrainState(**body["state"]))
        out["resume_step"], out["damaged"], out["sampler"] = body["step"], problems, body["state"]["sampler"]
        out["sums"] = tuple(body["state"].get(f"{split}_sum", "") for split in ("train", "dev", "test"))
        check_test_files(Config.load(model_dir / ckpt.CONFIG), cfg, out["sums"][2], str(model_dir / ckpt.CONFIG))
        out["limit_reached"] = ckpt.TrainState(**body["state"]).limit_reached(cfg.train)
    return out


def _first_batch_forward(net, data, ctx) -> None:
    """Run the model on the first batch: completes deferred shapes, so the parameter count is exact."""
    import mxnet as mx
    batch = next(iter(data.batches))
    net(*[mx.nd.array(a, ctx=ctx) for a in (batch.src, batch.src_len, batch.tgt_in)])


def dry_run(cfg: Config, resume: bool = False, overwrite: bool = False, init: Optional[Path] = None
            ) -> Dict[str, Any]:
    """Everything `train(cfg)` would check before its first update (with `init`: that its parameters load into the
    model), and what it would train; trains nothing, and writes to the model directory at most its lock and (on
    --resume) the encoded-corpus cache."""
    from nmt.finetune import copy_tokenizers
    import mxnet as mx
    from nmt.data import build_data
    from nmt.models import build_model
    t = cfg.train
    ctxs = _check_devices(cfg)
    report: Dict[str, Any] = {"devices": [str(c) for c in ctxs]}
    report.update(_check_model_dir(cfg, resume, overwrite, init))
    model_dir = Path(t.model_dir)
    step = report.get("resume_step")   # config.json's settings the checkpoint's, before the data's checks
    if resume and step:
        manifest.check_model_settings(model_dir / ckpt.params_file(step), manifest.step_key(step))
    # (a resume loads the directory's tokenizers; a dry run killed, kill -9, leaves its own for the next to remove)
    with scratch_dir(tempfile.gettempdir(), "nmt-dry-run-") as tmp:
        if init is not None:
            copy_tokenizers(init, cfg, tmp)
        data = build_data(cfg, model_dir if resume else tmp, resume=resume,
                          saved_sums=report.pop("sums", ("", "", "")), scratch=not resume)
        check_search_widths(cfg, data.tgt_tok.vocab_size)
        sampler = report.pop("sampler", None)   # of the checkpoint a resume starts from (checked above)
        if resume:   # the position a resume continues from belongs to these batches (else an error names why)
            data.batches.load_state_dict(sampler)
        net = build_model(cfg.model, data.src_tok.vocab_size, data.tgt_tok.vocab_size)
        net.initialize(mx.init.Xavier(magnitude=2.24), ctx=ctxs[0])
        _first_batch_forward(net, data, ctxs[0])
        if init is not None:
            ckpt.load_parameters(net, init, ctxs[0], init.parent / ckpt.CONFIG)
            report["init_from"] = str(init)
        resumed = model_dir / ckpt.params_file(report.get("resume_step") or 0)
        if resume and resumed.is_file():   # the checkpoint a resume starts from fits the model config.json describes
            ckpt.load_parameters(net, resumed, ctxs[0], model_dir / ckpt.CONFIG)
        # what a new run writes into the model directory before its checkpoints: these files, and 1 MiB for its
        # config.json, train.log, lock and TensorBoard events (its own check of the checkpoints' room comes after)
        made = 0 if resume else allocated(tmp) + (1 << 20)
    needed = check_checkpoint_room(cfg, net, no_update=bool(report.get("limit_reached")), data_bytes=made)
    src, tgt = cfg.data.src_lang, cfg.data.tgt_lang
    report.update({
        "train_pairs": len(data.encoded.train_src), "dev_pairs": len(data.encoded.dev_src),
        "tests": {k: len(v.src) for k, v in data.splits.tests.items()},
        "vocab": {f"{src}+{tgt} (shared)": data.src_tok.vocab_size} if cfg.model.shared_vocab else
        {src: data.src_tok.vocab_size, tgt: data.tgt_tok.vocab_size},
        "arch": cfg.model.arch, "parameters": parameter_count(net), "settings": settings_lines(cfg),
        "batches_per_epoch": len(data.sampler),
        "disk_needed": needed, "disk_free": free_bytes(model_dir)})
    return report


def _check_devices(cfg: Config) -> list:
    """The devices a run of `cfg` would train on, after the checks and warnings the run gives before building
    anything: devices, kvstore, empty shares, the optimizer, TensorBoard."""
    from nmt.parallel import check_amp_devices, default_kvstore, parse_devices, warn_empty_shares
    from nmt.optim import warn_lr_free
    from nmt.workers import check_kvstore
    t = cfg.train
    ctxs = parse_devices(t.gpus, t.cpu_devices)
    if t.amp:
        check_amp_devices(ctxs)
    kvstore = default_kvstore(ctxs, t.kvstore)
    check_kvstore(kvstore)   # (dist_*: inside a job of the launcher, whose variables count its workers)
    workers = int(os.environ["DMLC_NUM_WORKER"]) if kvstore.startswith("dist") else 1
    warn_empty_shares(0 if cfg.data.batch_tokens else cfg.data.batch_size, len(ctxs), t.accum_steps, workers)
    warn_lr_free(cfg.optim)   # (as the run's build_optimizer does)
    TensorBoardWriter.check(t.tensorboard)   # (--tensorboard without tensorboardX: the run refuses at once)
    return ctxs


def settings_lines(cfg: Config) -> List[str]:
    """The settings that decide what a run learns and when it stops, for people (the dry run's report and the
    training log; config.json holds every one): the model's own (its architecture's `config_fields`), the optimizer
    and schedule, the batch, validation and the limits."""
    from nmt.models import ARCHITECTURES
    m, o, d, t = cfg.model, cfg.optim, cfg.data, cfg.train
    fields = getattr(ARCHITECTURES.get(m.arch), "config_fields", ()) or [f for f in vars(m) if f != "arch"]
    then = {"inv_sqrt": "then inverse square root", "constant": "then constant",
            "plateau": f"then halved after every {o.plateau_patience} validations without gain"}[o.schedule]
    limits = [f"{name} {value:g}{unit}" for name, value, unit in (
        ("max_steps", t.max_steps, ""), ("max_epochs", t.max_epochs, ""), ("time_budget", t.time_budget, " s"),
        ("max_seconds", t.max_seconds, " s")) if value]
    return [f"model settings ({m.arch}): " + ", ".join(f"{f} {getattr(m, f)}" for f in fields),
            f"optimizer: {o.optimizer}, " + ("which takes no learning rate" if o.optimizer in LR_FREE_OPTIMIZERS
                                             else f"lr {o.lr:g} after {o.warmup_steps} warm-up updates, {then}")
            + f"; label smoothing {o.label_smoothing:g}, weight decay {o.weight_decay:g}, clip norm {o.clip_norm:g}",
            "batch: " + (f"{d.batch_tokens} padded target positions" if d.batch_tokens else f"{d.batch_size} sentences")
            + (f" in {t.accum_steps} micro-batches per device" if t.accum_steps > 1 else "") + f", seed {t.seed}",
            "validation: " + (f"every {t.valid_every} updates and " if t.valid_every else "") + "at each epoch end, "
            f"by dev {cfg.valid_metric} (beam {t.valid_beam}); "
            + (f"early stop after {t.patience} without gain" if t.patience else "no early stop")
            + "; limits: " + (", ".join(limits) or "none")]


def describe(report: Dict[str, Any]) -> str:
    """The dry run's report for people."""
    lines: List[str] = [
        f"model directory: {report['model_dir']} ({'exists' if report['exists'] else 'new'}, writable, "
        f"{human_bytes(report['disk_free'])} free, about {human_bytes(report['disk_needed'])} needed)"]
    if "init_from" in report:
        lines.append(f"start from: {report['init_from']} (fine-tuning; its parameters load into the model)")
    if "resume_step" in report:
        lines.append(f"resume from step {report['resume_step']}"
                     + (f" (damaged newer checkpoints: {'; '.join(report['damaged'])})" if report["damaged"] else ""))
    tests = ", ".join(f"{k} ({v})" for k, v in report["tests"].items()) or "none"
    lines += [f"data: {report['train_pairs']} training pairs within the length limits, {report['dev_pairs']} dev "
              f"pairs; tests: {tests}",
              "vocabulary: " + ", ".join(f"{k} {v}" for k, v in report["vocab"].items()),
              f"model: {report['arch']}, {report['parameters']:,} parameters", *report["settings"],
              f"devices: {', '.join(report['devices'])}",
              f"batches per epoch: {report['batches_per_epoch']}"]
    if report.get("limit_reached"):   # (the run warns so, and makes no update)
        lines.append(f"warning: the run has already reached its {report['limit_reached']} limit: a resume makes no "
                     f"update; give a higher {ckpt.LIMIT_FLAGS[report['limit_reached']]} to train on")
    lines.append("dry run: configuration, data and model directory are valid; nothing was trained")
    return "\n".join(lines)
