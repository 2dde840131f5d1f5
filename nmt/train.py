"""Training from parts: `build_data` (nmt.data), `build_model` (the architecture registry), `build_optimizer`
(nmt.optim), and a `Trainer` of what they built, whose `fit()` only checks stop conditions and calls `train_step`,
`validate` and `save_checkpoint`. `create_trainer(cfg)` (nmt.trainer_setup) builds them; `train(cfg)` builds and
runs them (for nmt-train and the tests)."""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import mxnet as mx
from mxnet import gluon

from nmt import checkpoint as ckpt
from nmt.batching import Batch
from nmt.config import Config
from nmt.commands import shell_word
from nmt.config_resume import as_command_line
from nmt.data import TrainData, build_data
from nmt.dirlock import ModelDirLock, ModelDirLocked, remove_made
from nmt.evaluate import VALID_METRICS, Scores, patience_note, perplexity, score, track_best
from nmt.finetune import for_init, new_run
from nmt.log import LossMeter, MetricsWriter, Progress, logging_kept, setup_logging, to_log_file
from nmt.tensorboard import TensorBoardWriter
from nmt.loss import Seq2SeqLoss, dev_loss
from nmt.models import build_model
from nmt.optim import build_optimizer, learning_rate
from nmt.parallel import DataParallel
from nmt.preflight import checked_config
from nmt.resume import (average_at_end, end_signalled_epoch, record_stop, since_valid_part, stopped_at_once, unscored,
                        unvalidated_stop)
from nmt.scoring import checkpoint_info, retire_scores, score_test_set
from nmt.signals import INTERRUPTS, checkpoint_on_signal, terminated_as_interrupt
from nmt.storage import error_line
from nmt.trainer_setup import create_trainer
from nmt.translate import Translator
from nmt.workers import WorkerGroup

__all__ = ["Trainer", "TrainResult", "build_data", "build_model", "build_optimizer", "create_trainer", "run_training",
           "train"]

logger = logging.getLogger("nmt.train")
_SAMPLES = 5   # dev translations shown in TensorBoard at each validation


class Trainer:
    """One training run over parts built elsewhere: the data, an initialized model, its gluon.Trainer (optimizer
    and kvstore), the devices, the training state (fresh or resumed) and the group of workers."""

    def __init__(self, cfg: Config, data: TrainData, net: gluon.HybridBlock, optimizer: gluon.Trainer,
                 ctxs, state: ckpt.TrainState, workers: Optional[WorkerGroup] = None,
                 tensorboard: Optional[TensorBoardWriter] = None):
        t = cfg.train
        self.cfg, self.data, self.net, self.optimizer, self.ctxs, self.state = cfg, data, net, optimizer, ctxs, state
        self.workers = workers or WorkerGroup()
        self.rank, self.is_chief, self.model_dir = self.workers.rank, self.workers.is_chief, Path(t.model_dir)
        self.loss_block = Seq2SeqLoss(net, label_smoothing=cfg.optim.label_smoothing)
        self.loss_block.hybridize(static_alloc=True)
        self.dp = DataParallel(self.loss_block, net.collect_params(), optimizer, ctxs, accum_steps=t.accum_steps,
                               clip_norm=cfg.optim.clip_norm, num_workers=self.workers.num_workers, rank=self.rank,
                               amp=t.amp, sentences=0 if cfg.data.batch_tokens else cfg.data.batch_size)
        self.metrics = MetricsWriter(self.model_dir / ckpt.METRICS if self.is_chief else None).keep_until(state.step)
        self.translator = Translator(net, data.src_tok, data.tgt_tok, cfg.decode, ctx=ctxs[0], warn_cut_off=False)
        self.since_valid = LossMeter(since_valid_part(state, self.is_chief))   # loss since the last validation
        # the step of the last validation: this invocation's, or the checkpoint's (then no token since it)
        self._validated_at = state.step if state.since_valid and not state.since_valid[-1] else -1
        self.progress = Progress(t.log_every, t.progress and self.is_chief, state.since_log)
        self.tensorboard = tensorboard or TensorBoardWriter(None)   # curves (a writer that does nothing: off)
        self.signal_name, self.averaged, self.stopped_before = "", False, state.stopped   # (resume.unvalidated_stop)
        self.averaging = False   # while the run's end averages its checkpoints (a signal then: resume.stopped_at_once)
        self.scores_tests = False   # the run scores the test sets as it ends (`run_training`'s `evaluate`)
        self.lock: Optional[ModelDirLock] = None   # the model directory's lock (rank 0), released when fit() ends
        self._t_start, self._elapsed0, self._resumed_at = time.perf_counter(), state.elapsed, 0

    # -- the parts of the loop ----------------------------------------------------------------------------------
    def train_step(self, batch: Batch) -> mx.nd.NDArray:
        """One update on a global batch; returns its summed training loss, label-smoothed (on the device)."""
        lr = learning_rate(self.state.step, self.cfg.optim, self.state.lr_scale)
        self.optimizer.set_learning_rate(lr)
        mx.random.seed(self.workers.dropout_seed(self.cfg.train.seed, self.state.step))   # resumable per update
        loss, nll, _ = self.dp.step(batch)   # summed over the batch: label-smoothed loss, plain NLL
        self.state.step += 1
        self.state.tokens_seen += batch.num_tgt_tokens
        self.state.elapsed = self._elapsed0 + time.perf_counter() - self._t_start
        self.since_valid.add(loss, batch.num_tgt_tokens, nll)   # this worker's part: summed over workers (validate)
        self.progress.update(self.state.step, batch, loss, lr, nll, self.dp.last_share or 1.0)   # this worker's part
        if self.state.step % self.cfg.train.log_every == 0:   # the progress bar has just read loss and speed
            last = self.progress.last
            self.tensorboard.log_train(self.state.step, loss=last["loss"], nll=last["nll"], learning_rate=lr,
                                       grad_norm=self.dp.last_grad_norm, tokens_per_s=last.get("tok_per_s"))
        return loss

    def validate(self, scheduled: bool = True) -> bool:
        """Dev loss and BLEU on rank 0, one metrics.jsonl row; whether the dev --valid-metric improved (the other
        workers: False; they take rank 0's state at the checkpoint that follows). `scheduled`: one of --valid-every's
        or an epoch's end, not that of a stop at a limit (see `track_best`)."""
        self._validated_at = self.state.step
        train_loss, train_nll = self.since_valid.means(self.workers.sum, reset=scheduled)   # (a collective)
        if not self.is_chief:
            return False
        row, sources, hyps, refs = self._dev_scores()
        if train_loss is not None:   # label-smoothed; train_nll is the one to compare with dev_nll
            row["train_loss"], row["train_nll"] = train_loss, train_nll
        o = self.cfg.optim
        improved = track_best(self.state, row, self.cfg.valid_metric, scheduled,
                              o.plateau_patience if o.schedule == "plateau" else 0)
        row.update(best_bleu=self.state.best_bleu, best_score=self.state.best_score, valid_metric=self.cfg.valid_metric)
        mecab = row.get("dev_bleu_ko_mecab")   # Korean output
        logger.info("validation step %d epoch %.2f: dev ppl %.2f BLEU %.2f chrF %.2f%s (best %s at step %d)%s",
                    row["step"], self.epochs_done(), row["dev_ppl"], row["dev_bleu"], row["dev_chrf"],
                    "" if mecab is None else f" ko-mecab BLEU {mecab:.2f}", self._best(), self.state.best_step,
                    patience_note(self.state, improved, scheduled))
        self.metrics.write(row)
        self.tensorboard.log_validation(row["step"], loss=row["dev_nll"], perplexity=row["dev_ppl"],
                                        bleu=row["dev_bleu"], chrf=row["dev_chrf"], bleu_ko_mecab=mecab)
        self.tensorboard.log_samples(row["step"], sources[:_SAMPLES], hyps[:_SAMPLES], refs[:_SAMPLES])
        return improved

    def _dev_scores(self) -> Tuple[Dict[str, float], List[str], List[str], List[str]]:
        """The validation's metrics row, and the dev sources, translations and references it scored."""
        t0, n, dev = time.perf_counter(), self.cfg.train.valid_max_sentences, self.data.splits.dev
        nll, tokens = dev_loss(self.loss_block, self.data.encoded, self.ctxs[0])
        with self.translator.unreported():   # dev sources cut: said once, as the data was read (nmt.data)
            hyps = self.translator.translate(dev.src[:n], beam_size=self.cfg.train.valid_beam)
        sc = score(hyps, dev.tgt[:n], self.cfg.data.tgt_lang)
        row = {"step": self.state.step, "epoch": round(self.epochs_done(), 3), "dev_nll": nll / max(tokens, 1),
                "dev_ppl": perplexity(nll, tokens), "dev_bleu": sc.bleu, "dev_chrf": sc.chrf,
                **{f"dev_{k}": v for k, v in sc.extra.items()},   # dev_bleu_ko_mecab for Korean output
                "lr": learning_rate(self.state.step - 1, self.cfg.optim, self.state.lr_scale),   # the last update's
                "tokens_seen": self.state.tokens_seen, "elapsed": round(self.state.elapsed, 1),
                "valid_seconds": round(time.perf_counter() - t0, 1)}
        return row, dev.src[:n], hyps, dev.tgt[:n]

    def save_checkpoint(self, is_best: bool = False) -> None:
        """Checkpoint on rank 0; every worker goes on from rank 0's state (its validations decide lr and stopping)."""
        self.state.sampler, self.state.since_log = self.data.batches.state_dict(), self.progress.meter.totals()
        self.state.since_valid = self.since_valid.totals(self.workers.sum)   # every worker's (a collective)
        if self.is_chief:
            self.tensorboard.sync(self.state.step)   # (its curves up to the checkpoint, which a resume keeps)
            if is_best:   # the test scores of the best before are its step's now (first: a run killed between the
                retire_scores(self.model_dir, "best")   # two left them as the new best's)
            ckpt.save_checkpoint(self.model_dir, self.net, self.optimizer, self.state, self.cfg.train.keep_last,
                                 is_best)
        if self.workers.num_workers > 1:
            self.state = ckpt.TrainState(**self.workers.broadcast_json(vars(self.state)))

    def _best(self) -> str:
        """The best dev score so far by --valid-metric, named (e.g. "BLEU 8.33")."""
        return f"{VALID_METRICS[self.cfg.valid_metric][0]} {self.state.best_score:.2f}"

    def epochs_done(self) -> float:
        """Training progress in epochs (1.5 = half-way through the second epoch)."""
        sampler = self.data.sampler
        return sampler.epoch + sampler.position / max(len(sampler), 1)

    def should_stop(self) -> str:
        """The reason to stop now, or "". A signal or the time limits reach workers at different updates: in a
        distributed job they vote, and all act on the outcome at the same (next) update."""
        t = self.cfg.train
        timed_out = bool(t.max_seconds) and time.perf_counter() - self._t_start >= t.max_seconds
        over_budget = bool(t.time_budget) and self.state.elapsed >= t.time_budget
        wish = self.workers.agree_stop(self.signal_name or ("max_seconds" if timed_out else "")
                                       or ("time_budget" if over_budget else ""))
        reached = self.state.limit_reached(t)   # (the time limits and the epochs: voted above, and the loop's)
        return wish if wish in INTERRUPTS or reached not in ("early_stop", "max_steps") else reached

    # -- the loop ------------------------------------------------------------------------------------------------
    def fit(self) -> ckpt.TrainState:
        """Train until a stop condition, validating and checkpointing per `valid_every`, at epoch ends and the end."""
        try:
            self._fit()
        finally:
            if self.lock is not None:
                self.lock.release()
        return self.state

    def _fit(self) -> None:
        t, step0 = self.cfg.train, self.state.step
        self._t_start, self._elapsed0, self.state.stopped = time.perf_counter(), self.state.elapsed, ""
        with contextlib.closing(self.tensorboard), checkpoint_on_signal(self):
            stop = self.should_stop()
            while not stop and self.state.epoch < t.max_epochs:
                self._resumed_at = self.state.step if self.data.sampler.position else 0   # (mid-epoch: a resume)
                self.progress.start_epoch(self.state.epoch, len(self.data.sampler), self.data.sampler.position)
                with contextlib.closing(iter(self.data.batches)) as batches:   # (a 2nd signal as it closes: raised)
                    for batch in batches:
                        self.train_step(batch)
                        if self._validation_due():
                            self.save_checkpoint(self.validate())
                        if (stop := self.should_stop()):
                            break
                self.progress.end_epoch()
                if self._epoch_done() and stop not in INTERRUPTS:   # also at a limit: its validation is scheduled
                    self.next_epoch()   # checkpoint at the start of the next epoch, validated unless just done
                    self.save_checkpoint(self._validated_at != self.state.step and self.validate())
                    stop = self.should_stop()   # (again at a limit: this validation may have run out the patience)
            self._finish(stop or "max_epochs", trained=self.state.step > step0)
        self.averaged = average_at_end(self, trained=self.state.step > step0)

    def _epoch_done(self) -> bool:   # every batch of the epoch has been trained on
        sampler = self.data.sampler
        return sampler.epoch > self.state.epoch or sampler.position >= len(sampler)

    def _validation_due(self) -> bool:   # the last update is one --valid-every validates
        return bool(self.cfg.train.valid_every) and self.state.step % self.cfg.train.valid_every == 0

    def averages(self, here: bool = True) -> bool:
        """Whether the run ends by averaging its last checkpoints into params.avg (--average-last) on this worker (or,
        not `here`, on rank 0: the other workers, which hold rank 0's training state, say what rank 0 does)."""
        return bool(self.cfg.train.average_last) and (self.is_chief or not here) and len(self.state.params_files) >= 2

    def next_epoch(self) -> None:
        e = self.progress.epoch   # nan and 0 until an epoch of this run has had an update (none: a resume at its end)
        part = f" over its updates since the resume at step {self._resumed_at}" if self._resumed_at else ""
        logger.info("epoch %d done at step %d%s", self.state.epoch + 1, self.state.step, "" if not e["tok_per_s"]
                    else f": train loss {e['loss']:.3f} (NLL {e['nll']:.3f}){part}, {e['tok_per_s']:.0f} tokens/s")
        self.state.epoch += 1
        self.data.sampler.set_epoch(self.state.epoch)

    def _finish(self, stop: str, trained: bool = True) -> None:
        """Record why training stopped; a final validation and checkpoint unless the last update has one."""
        self.state.stopped = stop
        if not trained and stop in ckpt.LIMIT_FLAGS:   # --resume of a finished run: a warning, unless to average
            logger.log(logging.INFO if self.averages(here=False) or self.scores_tests else logging.WARNING,   # or score
                       "no update made: the run had already reached its %s limit; give a higher %s to train on",
                       stop, ckpt.LIMIT_FLAGS[stop])
        last = ckpt.params_step(self.state.params_files[-1]) if self.state.params_files else None
        unvalidated = unvalidated_stop(self, trained, stop)
        if unvalidated and self._epoch_done():   # (a signal on an epoch's last update: that epoch's end, the loop's)
            stop = end_signalled_epoch(self, stop)
        elif self.state.step != last or unvalidated:
            self.save_checkpoint(stop not in INTERRUPTS and self.validate(scheduled=False))
        elif self.is_chief:
            record_stop(self)   # why training stopped (and the checkpoints a lowered --keep-last prunes later)
        best = (f"best dev {self._best()} at step {self.state.best_step}" if self.state.best_score is not None
                else "no validation yet")
        logger.info("training stopped (%s) at step %d, epoch %.2f; %s", stop, self.state.step, self.epochs_done(), best)
        self.workers.finished()   # distributed: no collective after this, leave with the others (else: at once)

    def evaluate_tests(self, which: str = "best") -> Dict[str, Scores]:
        """Translate every test set of the recipe with the `which` checkpoint; scores merged into scores.json."""
        info, tr = checkpoint_info(self.model_dir, which), self.translator
        tr.model_dir, tr.checkpoint, tr.params_file = self.model_dir, which, self.model_dir / str(info["params_file"])
        tr.params_step, tr.params_sha256 = info["step"], info["sha256"]
        ckpt.load_parameters(self.net, tr.params_file, self.ctxs, self.model_dir / ckpt.CONFIG)
        results = {}
        for name, pairs in self.data.splits.tests.items():
            _, _, results[name] = score_test_set(self.translator, name, pairs, save=self.is_chief, one_warning=True)
            logger.info("test %s (%d sentences, %s checkpoint, beam %d, length penalty %g): %s | %s", name,
                        len(pairs.src), which, self.cfg.decode.beam_size, self.cfg.decode.length_penalty_alpha,
                        results[name].summary(), results[name].signatures())
        return results


@dataclass
class TrainResult:
    state: ckpt.TrainState
    test_scores: Dict[str, Scores]      # by test-set name, of the best checkpoint (empty if not evaluated)
    interrupted: str = ""               # the stopping signal's name if one came (as training ended too: no test scores)
    average_scores: Dict[str, Scores] = field(default_factory=dict)   # of params.avg, when this run wrote it
    rank: int = 0                       # in a distributed job, this worker's (0: the one that writes the model dir)


def log_error(e: Exception, what: str) -> None:
    """The error `e` that ends the run into its train.log (the console says it: nmt-train's `error:` line, or the
    traceback), where a user looks later, as Sockeye and fairseq log theirs: bad input or a full disk as one line,
    an unexpected error with its traceback."""
    from nmt.commands import user_errors
    if isinstance(e, user_errors()):
        to_log_file(logging.ERROR, f"{what}: {error_line(e)}")
    else:
        to_log_file(logging.ERROR, f"{what}: {type(e).__name__}: {error_line(e)}", error=e)


@logging_kept   # a run from Python leaves the program's logging as it found it (nmt-train: `run_training`)
def train(cfg: Config, resume: bool = False, overwrite: bool = False, evaluate: bool = True,
          init: Optional[Path] = None) -> TrainResult:
    """Train per `cfg` (from `init`, a model directory or params file, as --init-from: with the model's settings but
    for what `cfg` sets otherwise, `nmt.finetune.for_init`); `evaluate`: score the best checkpoint on the tests."""
    cfg = as_command_line(checked_config(cfg, "train", new=new_run(resume, init, "train")), resume)
    if init is not None:
        cfg, init = for_init(cfg, init)
    return run_training(cfg, resume, overwrite, evaluate, init)


def run_training(cfg: Config, resume: bool = False, overwrite: bool = False, evaluate: bool = True,
                 params: Optional[Path] = None) -> TrainResult:
    """`train` with `cfg` made for the parameter file `params` already (nmt-train's, by `cli.training_run`)."""
    model_dir, init = Path(checked_config(cfg, "run_training").train.model_dir), params
    # only a directory this run makes is removed on failure (with --overwrite: what was there may not be deleted yet)
    fresh = not resume and (not model_dir.exists() or model_dir.is_dir() and not any(model_dir.iterdir()))
    existed = model_dir.exists()   # (an empty directory of the user's stays, emptied again)
    try:
        with terminated_as_interrupt():   # (the default kill left what it had made: "already exists")
            trainer = create_trainer(cfg, resume=resume, overwrite=overwrite, init=init)
    except ModelDirLocked:
        raise   # the directory is another trainer's: leave it alone
    except BaseException as e:   # a run that failed while setting up leaves no half-made directory to block the next
        if fresh and model_dir.is_dir() and not (model_dir / ckpt.STATE).exists():
            setup_logging(None)   # close the log file before removing it
            remove_made(model_dir, existed)
        elif isinstance(e, Exception):   # (its setup lines, "resuming with settings changed", were logged already)
            log_error(e, "the run did not start")
        raise
    lock, trainer.lock = trainer.lock, None   # held until the test scores are in scores.json, not as fit() ends
    trainer.scores_tests = evaluate and unscored(model_dir, trainer.data.splits.tests)   # (a --no-eval run's resume)
    try:
        try:
            state, scores, averages = trainer.fit(), {}, {}
        except KeyboardInterrupt:   # a second signal (or one as the run's end averages): no checkpoint of the stop
            logger.warning("%s", stopped_at_once(trainer))
            raise
        interrupted = state.stopped if state.stopped in INTERRUPTS else trainer.signal_name   # also in the last step
        if evaluate and trainer.is_chief and not interrupted and trainer.data.splits.tests:
            try:
                with terminated_as_interrupt():
                    scores = trainer.evaluate_tests("best")
                    averages = trainer.evaluate_tests("avg") if trainer.averaged else {}
            except KeyboardInterrupt:
                logger.warning("the test sets are not (all) scored: `nmt-evaluate --model-dir %s --recipe-tests` "
                               "scores them%s", shell_word(model_dir), " (and with --checkpoint avg, params.avg)"
                               if trainer.averaged else "")
                raise
    except Exception as e:
        log_error(e, f"the run stopped at step {trainer.state.step}")
        raise
    finally:
        if lock is not None:
            lock.release()
    return TrainResult(state, scores, interrupted, averages, trainer.rank)

