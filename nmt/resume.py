"""Where a resumed run starts: the training state of its model directory, checked against the run's settings, and
the latest checkpoint's parameters, optimizer states and sampler position restored (rank 0's files on every worker:
no shared filesystem needed)."""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Optional, Tuple

from mxnet import gluon

from nmt import checkpoint as ckpt, manifest
from nmt.atomic import atomic_copy
from nmt.config import Config, ConfigError
from nmt.config_resume import check_test_files, given_by, resumed_config
from nmt.data import TrainData
from nmt.encoded import killed_writes
from nmt.lost_best import own_copy, restore_best
from nmt.optim import load_states
from nmt.workers import WorkerGroup

logger = logging.getLogger("nmt.train")
ckpt_logger = logging.getLogger("nmt.checkpoint")   # (what the model directory's files say)


def resumed_state(cfg: Config, workers: WorkerGroup) -> Tuple[ckpt.TrainState, Config]:
    """The training state of the model directory, after checking that `cfg` continues the same model (the other
    workers read rank 0's files from a private copy: no shared filesystem needed), and the configuration to train
    with: `cfg`, but on a worker whose machine has no config.json there, rank 0's recorded settings with the keys
    `cfg` gives on top (`given_by`: a --patience an earlier resume changed is rank 0's without the flag). An unset
    --valid-metric in `cfg` becomes the run's (a run that recorded "bleu" for Korean output goes on by it, and
    config.json keeps it), as does the one the run's null stands for (config.json keeps null: it serves a run of the
    other direction)."""
    model_dir = Path(cfg.train.model_dir)
    state = resume_state(model_dir) if workers.is_chief else ckpt.TrainState()
    if workers.is_chief:   # config.json's model settings and languages those of the checkpoint, before the data's
        step = ckpt.latest_step(state)   # checks (a swapped pair failed them as "not the dev pairs")
        manifest.check_model_settings(model_dir / ckpt.params_file(step), manifest.step_key(step))
    if workers.num_workers > 1:
        state = ckpt.TrainState(**workers.broadcast_json(vars(state)))
    saved = workers.read_shared(model_dir, ckpt.CONFIG, Config.load)
    if workers.lacks(model_dir / ckpt.CONFIG):   # (its flags met no config.json here)
        cfg = rank0_settings(saved, cfg, workers.rank, ckpt.latest_step(state))
    _, changes = resumed_config(saved, cfg, None, str(model_dir / ckpt.CONFIG))   # the model and data must match
    check_test_files(saved, cfg, state.test_sum, str(model_dir / ckpt.CONFIG))
    nothing_to_average(state, cfg.train, saved.train, "train.average_last" in (cfg.labels or given_by(cfg)))
    if cfg.train.valid_metric in (None, saved.valid_metric):   # (create_trainer(cfg, resume=True): the best score
        cfg.train.valid_metric = saved.train.valid_metric      # is by the run's metric; a null stays null)
    if changes:
        logger.info("resuming with settings changed since the last run: %s", "; ".join(changes))
    return state, cfg


def nothing_to_average(state: ckpt.TrainState, t, saved, given: bool = True) -> None:
    """ConfigError for a resume with --average-last (`t`: this run's training settings; `saved`: the run's; `given`:
    whether this resume gives --average-last, not only the run's saved one: a plain --resume, e.g. to score a --no-eval
    run's test sets, goes on as before, its warning said again) of a run that ended at a limit it has still reached
    (no update, no checkpoint: not one a signal stopped, whose resume may end its epoch and save one) and keeps fewer
    than two checkpoints: it ended saying "nothing to average" (params.best, which may be an older step's, is no step
    of the last N)."""
    from nmt.signals import INTERRUPTS
    limit = state.limit_reached(t)
    if not (given and t.average_last and limit and state.stopped not in INTERRUPTS and len(state.params_files) < 2):
        return
    step, n = ckpt.latest_step(state), t.average_last
    pruned = f" (its --keep-last {saved.keep_last} kept no older one)" if saved.keep_last < 2 else ""
    raise ConfigError(
        f"--average-last {n}: the run keeps one checkpoint, step {step}{pruned}, and has reached its {limit} limit: "
        f"this resume makes no update, so there is nothing to average into {ckpt.PARAMS_AVG}; give a higher "
        f"{ckpt.LIMIT_FLAGS[limit]} with --keep-last {max(n, t.keep_last)} to train on and average the last {n} "
        "checkpoints as it ends" + (", or --average-last 0 to resume without averaging"
                                    if n == saved.average_last else ""))


def rank0_settings(saved: Config, cfg: Config, rank: int, at: Optional[int] = None) -> Config:
    """The configuration of worker `rank`, on a machine without the model directory: rank 0's recorded settings
    (`saved`) with the keys this worker's `cfg` gives on top (`given_by`); a ConfigError, naming the worker, for a
    given model or data key that differs from rank 0's (another key that differs, the workers' check names), by the
    flag (or --config key) that gave it: nmt-train's `cfg.labels`, the keys its command line gives, as rank 0 takes
    them (not a recipe its --train-src set aside); with advice that names rank 0's files as rank 0's (`at`: the step
    of its checkpoint the run resumes from)."""
    path = Path(cfg.train.model_dir) / ckpt.CONFIG
    given = dict(cfg.labels) if cfg.labels else given_by(cfg)   # (Python's: its keys)
    try:
        return resumed_config(saved, cfg, given, str(path), at)[0]
    except ConfigError as e:
        raise ConfigError(f"worker rank {rank}, which has no {path} on its machine and resumes with rank 0's settings "
                          f"and its own flags on top: {e}") from None


def since_valid_part(state: ckpt.TrainState, is_chief: bool) -> Optional[list]:
    """This worker's part of the loss since the last validation that a resumed run's checkpoint (`state`) holds
    (None: a new run's): rank 0 takes the totals, which are all workers', and every worker their count of tokens, so
    that all of them sum the totals at the next validation (a distributed job's collective) or none does, an update
    or not before it (a resume at the end of an epoch a signal stopped on its last update hung there)."""
    since = state.since_valid
    return since if is_chief or not since else [0.0, 0.0, since[-1]]


def unvalidated_stop(trainer, trained: bool, stop: str) -> bool:
    """Whether `trainer`, a resumed run that made no update (not `trained`), ends at a limit (`stop`) on the checkpoint
    a signal saved, unvalidated: tokens were trained since the last scheduled validation (the signal did not come
    right after one). Its `_finish` validates it then, as an uninterrupted run to that step does."""
    from nmt.signals import INTERRUPTS
    tokens = (trainer.state.since_valid or [0])[-1]
    return not (trained or stop in INTERRUPTS or trainer.stopped_before not in INTERRUPTS or not tokens)


def end_signalled_epoch(trainer, stop: str) -> str:
    """The end of the epoch a signal stopped on its last update, as the training loop ends one, for a no-update resume
    that ends the run there (`unvalidated_stop`): the next epoch, a scheduled validation, and a checkpoint that is no
    stop's (the next save would drop it, from the checkpoints kept and averaged). The reason to stop after it: the
    validation may have run out --patience. (An uninterrupted run's checkpoints, validations and state, exactly.)"""
    trainer.state.stopped = ""
    trainer.next_epoch()
    trainer.save_checkpoint(trainer.validate())
    trainer.state.stopped = trainer.state.limit_reached(trainer.cfg.train) or stop
    if trainer.is_chief:
        trainer.state.save(trainer.model_dir)
    return trainer.state.stopped


def record_stop(trainer) -> None:
    """state.json of `trainer`'s run (rank 0) saved with why training stopped, where the stop saved no checkpoint. The
    checkpoints beyond a --keep-last that this resume lowered are kept, and named: they go at the run's next
    checkpoint, which takes their place (Sockeye and fairseq too prune only as they write one); a resume that saves
    none (at its limit, to average or score) deletes nothing that --checkpoint N may still load."""
    state, keep = trainer.state, trainer.cfg.train.keep_last
    state.save(trainer.model_dir)
    if len(state.params_files) > keep:   # (then 2 or more go)
        # the next save keeps itself and the last keep - 1 of these, a stop's not among them (`ckpt.save_checkpoint`)
        older = [f for f in state.params_files if f != state.stop_file]
        extra = [f for f in state.params_files if f not in older[max(0, len(older) - keep + 1):]]
        ckpt_logger.info("--keep-last %d: this run saved no checkpoint, so it keeps the %d it had until its next one, "
                         "which keeps the last %d (steps %s go then)", keep, len(state.params_files), keep,
                         ", ".join(str(ckpt.params_step(f)) for f in extra))


def average_at_end(trainer, trained: bool) -> bool:
    """--average-last as `trainer`'s run ends (rank 0): its last checkpoints averaged into params.avg, whether that
    was done. Else said why not; and a params.avg of earlier checkpoints, once the run has `trained` past them
    with the averaging off, is named: `--checkpoint avg` would translate with it."""
    from nmt.scoring import retire_scores
    from nmt.signals import INTERRUPTS, terminated_as_interrupt
    last, model_dir, files = trainer.cfg.train.average_last, trainer.model_dir, trainer.state.params_files
    if trainer.averages():
        trainer.averaging = True   # (stopped in here, the run says that params.avg is not written)
        with terminated_as_interrupt():   # (killed, it had said nothing; --resume averages them then)
            retire_scores(model_dir, "avg")
            ckpt.average_checkpoints(model_dir, files, last=last)
        trainer.averaging = False
        return True
    if last and trainer.is_chief:   # a signal, --max-seconds: not the end (--resume goes on, averages)
        going_on = trainer.state.stopped in (*INTERRUPTS, "max_seconds")
        (logger.info if going_on else logger.warning)("--average-last %d: the run has %d checkpoint, nothing to "
                                                      "average%s: no params.avg", last, len(files),
                                                      " yet" if going_on else "")
    elif trained and trainer.is_chief and (model_dir / ckpt.PARAMS_AVG).exists():
        try:
            step = manifest.read_manifest(model_dir, "avg").get("step")
        except ckpt.CheckpointError:   # (its use says what is wrong with it)
            step = "?"
        logger.warning("%s is the average of checkpoints up to step %s, from before this run's updates (to step %d; "
                       "--average-last is off): --checkpoint avg uses those; --resume --average-last N averages the "
                       "newest", model_dir / ckpt.PARAMS_AVG, step, trainer.state.step)
    return False


def stopped_at_once(trainer) -> str:
    """The warning of a run that a signal stopped at once: a second one in the loop (no checkpoint of the stop), or
    one as its end averaged its checkpoints (`trainer.averaging`: params.avg not written, which a resume writes, with
    no update where the run reached its limit; else at its end, or at once with --max-steps at its step)."""
    from nmt.signals import INTERRUPTS
    state = trainer.state
    said = f"stopped at once at step {state.step}"
    if not trainer.averaging:
        return f"{said}: --resume continues from the newest intact checkpoint"
    going_on = state.stopped in (*INTERRUPTS, "max_seconds", "")   # (a resume trains on: `average_advice`)
    return (f"{said} while averaging the last {trainer.cfg.train.average_last} checkpoints into params.avg, which is "
            "not written: --resume continues from the newest intact checkpoint and writes it" + (
                f" as it ends (with --max-steps {state.step}: at once, without an update)" if going_on else ""))


def unscored(model_dir: Path, tests) -> bool:
    """Whether one of the test sets `tests` (names) has no score of the best checkpoint in scores.json yet (a --no-eval
    run's: a resume without it, and no update, is to score them): an entry of params.best's parameters (by their
    sha256, where its manifest has it) under "best" or under the best step's number."""
    from nmt.scoring import read_scores
    sha, step = ckpt.params_sha256(model_dir / ckpt.PARAMS_BEST), ckpt.best_step(model_dir)
    keys = ["best", *([str(step)] if sha and step else [])]
    try:
        scores = read_scores(model_dir)
    except ckpt.CheckpointError:   # (a damaged scores.json: said as the scores are recorded)
        return bool(tests)
    return any(not any(isinstance(e, dict) and (sha is None or e.get("params_sha256") == sha)
                       for e in map(scores.get(name, {}).get, keys)) for name in tests)


def restore(model_dir: Path, net, optimizer: gluon.Trainer, data: TrainData, state: ckpt.TrainState,
            workers: WorkerGroup, ctxs) -> None:
    """Parameters, optimizer states and the sampler's position of the latest checkpoint."""
    if workers.is_chief:   # the others get rank 0's parameters as the kvstore is initialized
        ckpt.load_parameters(net, model_dir / ckpt.params_file(ckpt.latest_step(state)), ctxs, model_dir / ckpt.CONFIG)
    states = ckpt.trainer_states_file(ckpt.latest_step(state))
    workers.read_shared(model_dir, states, lambda path: load_states(optimizer, str(path)))
    data.batches.load_state_dict(state.sampler)
    at, size = data.sampler.position, len(data.sampler)
    logger.info("resumed from step %d, epoch %.2f (batch %d of %d of epoch %d)", state.step,
                data.sampler.epoch + at / max(size, 1), at, size, data.sampler.epoch + 1)


def resume_state(model_dir: Path) -> ckpt.TrainState:
    """The TrainState to resume from: that of the newest intact checkpoint (its manifest verified), with a warning
    naming what is wrong with any newer one."""
    model_dir = Path(model_dir)
    steps = manifest.step_keys(model_dir)   # (a killed run's files without their manifest: no earlier version's)
    if steps and not (model_dir / ckpt.STATE).exists() and not any(model_dir.glob("manifest.*.json")):
        first = steps[-1]
        raise ckpt.CheckpointError(
            f"--resume: {model_dir}: the run stopped as it wrote its first checkpoint (step {first}: its files, "
            "without their manifest), so there is nothing to resume: start it again with the command that started it, "
            "--overwrite in place of --resume")
    ckpt.check_manifests(model_dir)
    try:
        body, problems = manifest.newest_intact(model_dir)
    except OSError as e:   # a file of a checkpoint exists but cannot be read: no permission, ...
        raise ckpt.CheckpointError(f"--resume: {e.filename or model_dir} cannot be read ({e.strerror or e})") from None
    state = ckpt.TrainState(**body["state"])
    if problems:   # an older checkpoint's state names the checkpoints kept then: one may have gone at a newer save
        present = set(manifest.step_keys(model_dir))
        state.params_files = [f for f in state.params_files if ckpt.params_step(f) in present]
    check_kept_files(model_dir, state=state)
    remove_leftovers(model_dir)
    prune_older(model_dir, state)
    if problems:
        ckpt_logger.warning("--resume: the newest checkpoint is damaged (%s); resuming from step %d, the newest "
                            "intact one", "; ".join(problems), state.step)
        state.save(model_dir)   # `latest` names an intact checkpoint again
    return state


# The temporary files of what only a trainer writes (under the directory's lock): parameters, optimizer states,
# manifests, the training state, config.json and metrics.jsonl, before their rename into place
# (`checkpoint._save_with`, `nmt.atomic`); not scores.json's, which nmt-evaluate may be writing, nor the encoded
# corpus's, which a --dry-run --resume may be writing (`nmt.encoded.killed_writes` finds those of killed ones).
_LEFTOVER = re.compile(r"\.(params\.\w+|trainer\.\d+\.states|manifest\.\w+\.json|state\.json|config\.json|"
                       r"metrics\.jsonl)(\.[0-9a-f]{8})?\.tmp")


def remove_leftovers(model_dir: Path) -> None:
    """Delete the temporary files a run killed while saving left behind (as large as a checkpoint each, or as the
    encoded corpus): no later save writes their names again, so they stayed for good."""
    left = [p for p in Path(model_dir).iterdir() if _LEFTOVER.fullmatch(p.name)] + killed_writes(model_dir)
    for p in left:
        p.unlink(missing_ok=True)
    if left:
        ckpt_logger.info("--resume: removed %d temporary file(s) a run killed while saving left: %s", len(left),
                         ", ".join(sorted(p.name for p in left)))


def prune_older(model_dir: Path, state: ckpt.TrainState) -> None:
    """Delete the checkpoints `state` does not keep, older than its newest (a newer one is a damaged one, named in a
    warning): a run killed after its newest checkpoint's manifest, before its state.json, had not pruned them (an
    older step, a stop's checkpoint between two kept ones), and a resume that makes no update saves nothing that
    would."""
    kept, steps = {ckpt.params_step(f) for f in state.params_files} - {None}, manifest.step_keys(model_dir)
    old = [s for s in steps if s not in kept and s < max(kept, default=0)]
    if old:
        state.save(model_dir)   # first: no file state.json names is deleted (it may name them, written before)
        ckpt.prune(model_dir, set(steps) - set(old))
        ckpt_logger.info("--resume: removed the checkpoint(s) of step %s, which --keep-last no longer keeps",
                         ", ".join(map(str, sorted(old))))


def rebuild_best(model_dir: Path, step: Optional[int]) -> bool:
    """Write params.best and its manifest again from the best step's (`step`) own checkpoint (the same parameters)
    when that is kept and intact; False when it cannot be."""
    model_dir = Path(model_dir)
    source = model_dir / ckpt.params_file(step or 0)
    if not step or not source.exists():
        return False
    try:
        ckpt.verify_params(source)
    except ckpt.CheckpointError:
        return False
    from nmt.scoring import retire_scores
    retire_scores(model_dir, "best")   # the test scores recorded as best's were another step's (or go to its key)
    atomic_copy(source, model_dir / ckpt.PARAMS_BEST)
    manifest.write_manifest(model_dir, "best", [ckpt.PARAMS_BEST], step, model_of=manifest.step_key(step))
    return True


def check_kept_files(model_dir: Path, repair: bool = True, state: Optional[ckpt.TrainState] = None) -> None:
    """Before a resumed run (from `state`) trains, the files it reads only at its end: CheckpointError for a damaged
    scores.json; for a params.best missing where the training state names a best, unlike its manifest, or of a step
    past `state` (a run killed between a best's files and its step's), written again from the best step's checkpoint
    with a warning (`repair`; a dry run only says so), else a warning."""
    from nmt.scoring import read_scores
    read_scores(model_dir)
    step = state.best_step if state is not None and state.best_step else ckpt.best_step(model_dir)
    if not ((model_dir / ckpt.PARAMS_BEST).exists() or step):
        return
    written = None   # the step of an intact params.best
    try:
        if not (model_dir / ckpt.PARAMS_BEST).exists():
            raise ckpt.CheckpointError(f"{model_dir / ckpt.PARAMS_BEST} is missing")
        ckpt.verify_params(model_dir / ckpt.PARAMS_BEST, advise=False)   # (it said "use --checkpoint N" in nmt-train)
        written = ckpt.best_step(model_dir)
        if state is not None and written and state.best_step and written != state.best_step:
            raise ckpt.CheckpointError(f"{model_dir / ckpt.PARAMS_BEST} is of step {written}, not of step "
                                       f"{state.best_step}, the best where the run resumes at step {state.step} (a "
                                       "run killed while saving, or a newer checkpoint damaged)")
    except ckpt.CheckpointError as e:
        source = ckpt.params_file(step or 0)
        if not repair and (model_dir / source).is_file():   # a dry run writes nothing
            ckpt_logger.warning("--resume: %s; the run will write it again from %s", e, source)
        elif repair and rebuild_best(model_dir, step):
            ckpt_logger.warning("--resume: %s; written again from %s, the same parameters", e, source)
        elif written:   # intact, of another step: what the best checkpoint is until the run finds a new best
            ckpt_logger.warning("--resume: %s; %s %s, so %s stays, with step %d's parameters, until the run finds a "
                                "new best", e, source, own_copy(model_dir, step or 0), ckpt.PARAMS_BEST, written)
        else:
            ckpt_logger.warning("--resume: %s; unless the run finds a new best, scoring its best at the end will "
                                "fail: %s", e, restore_best(model_dir, step, lambda s: f"nmt-evaluate "
                                                                 f"--checkpoint {s}"))
