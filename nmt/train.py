"""Training: `train(cfg) -> TrainState`. The loop only checks stop conditions and calls `train_step`,
`validate` and `save_checkpoint`; each of those is small and testable alone."""
from __future__ import annotations

import logging
import math
import random
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import mxnet as mx
import numpy as np
from mxnet import gluon
from tqdm import tqdm

from nmt import checkpoint as ckpt
from nmt.batching import Batch, BatchIterator, BucketSampler, make_batch
from nmt.config import Config, ConfigError
from nmt.data import EncodedData, check_subword_sampling, encode_data, load_tokenizers, subword_resegmenter
from nmt.evaluate import Scores, perplexity, score
from nmt.log import MetricsWriter, Speedometer, setup_logging
from nmt.loss import Seq2SeqLoss
from nmt.models import build_model
from nmt.optim import adopt_loaded_optimizer, build_optimizer
from nmt.parallel import DataParallel, default_kvstore, describe_hardware, init_amp, parse_devices
from nmt.recipes import DatasetSplits, load_data
from nmt.scoring import score_test_set
from nmt.translate import Translator
from nmt.workers import WorkerGroup, create_kvstore

logger = logging.getLogger("nmt.train")


def learning_rate(step: int, cfg: Config, lr_scale: float = 1.0) -> float:
    """Linear warmup to cfg.optim.lr, then inverse-square-root decay (or constant / plateau-scaled)."""
    o = cfg.optim
    warm = max(o.warmup_steps, 1)
    if step < warm:
        lr = o.lr * (step + 1) / warm
    elif o.schedule == "inv_sqrt":
        lr = o.lr * math.sqrt(warm / (step + 1))
    else:  # "constant" and "plateau" (plateau halves lr_scale on stalled validations)
        lr = o.lr
    return lr * lr_scale


def build_trainer(cfg: Config, net: gluon.Block, kvstore) -> gluon.Trainer:
    o = cfg.optim
    if o.optimizer not in ("adam", "sgd", "nag", "adagrad", "rmsprop", "adadelta", "lamb", "ftml"):
        raise ConfigError(f"--optimizer {o.optimizer!r} is not supported")
    params = {"learning_rate": o.lr, "wd": o.weight_decay}
    if o.optimizer == "adam":
        params.update(beta1=o.beta1, beta2=o.beta2, epsilon=1e-9)
    return gluon.Trainer(net.collect_params(), build_optimizer(o.optimizer, **params), kvstore=kvstore,
                         update_on_kvstore=False)


def dev_loss(loss_block: gluon.Block, data: EncodedData, ctx: mx.Context, batch_size: int = 64):
    """Summed NLL and target-token count of the dev set (no label smoothing): for perplexity."""
    nll_total, tokens = 0.0, 0
    order = np.argsort([len(t) for t in data.dev_tgt], kind="stable")
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        b = make_batch(data.dev_src, data.dev_tgt, idx, max(len(data.dev_src[j]) for j in idx) + 1,
                       max(len(data.dev_tgt[j]) for j in idx) + 1)
        arrays = [mx.nd.array(a, ctx=ctx, dtype="float32") for a in (b.src, b.src_len, b.tgt_in, b.tgt_out, b.tgt_len)]
        _, nll = loss_block(*arrays)
        nll_total += float(nll.sum().asscalar())
        tokens += b.num_tgt_tokens
    return nll_total, tokens


class Trainer:
    """Holds what one training run needs; `fit()` is the loop."""

    def __init__(self, cfg: Config, resume: bool = False, overwrite: bool = False,
                 splits: Optional[DatasetSplits] = None, kv=None):
        self.cfg = cfg
        t = cfg.train
        check_subword_sampling(cfg.data)
        self.model_dir = Path(t.model_dir)
        self.ctxs = parse_devices(t.gpus, t.cpu_devices)
        if t.amp:
            init_amp(self.ctxs)   # ConfigError without GPUs; before the model is built (AMP rewrites its operators)
        kv_name = default_kvstore(self.ctxs, t.kvstore)
        self.kv = kv if kv is not None else create_kvstore(kv_name)
        self.workers = WorkerGroup(self.kv)
        self.rank, self.num_workers = self.workers.rank, self.workers.num_workers
        self.is_chief = self.rank == 0
        _validate(cfg)
        if self.is_chief:
            ckpt.prepare_model_dir(self.model_dir, resume, overwrite)
        setup_logging(self.model_dir / ckpt.LOG if self.is_chief else None, console=self.is_chief)
        # the other workers read rank 0's files from a private copy: no shared filesystem or write access needed
        self.read_dir = (self.workers.share_files(self.model_dir, (ckpt.CONFIG, ckpt.STATE))
                         if resume else self.model_dir)
        self.state = ckpt.TrainState.load(self.read_dir) if resume else ckpt.TrainState()
        self.state.stopped = ""
        if resume:
            saved = Config.load(self.read_dir / ckpt.CONFIG)
            if saved.model != cfg.model or saved.data.src_lang != cfg.data.src_lang or saved.data.tgt_lang != cfg.data.tgt_lang:
                raise ConfigError(f"--resume: the model or languages differ from {self.model_dir / ckpt.CONFIG}; "
                                  "resume with the same model flags (or start a new --model-dir)")
        self.state.hardware = describe_hardware(self.ctxs, self.num_workers)
        logger.info("devices: %s, kvstore: %s, worker %d of %d", self.ctxs, kv_name, self.rank, self.num_workers)
        self.splits = splits if splits is not None else load_data(cfg.data)
        logger.info("data: %d train, %d dev pairs; tests: %s", len(self.splits.train.src), len(self.splits.dev.src),
                    ", ".join(f"{k} ({len(v.src)})" for k, v in self.splits.tests.items()) or "none")
        toks = load_tokenizers(cfg, self.model_dir, None if resume else self.splits, self.workers)
        self.src_tok, self.tgt_tok = toks[cfg.data.src_lang], toks[cfg.data.tgt_lang]
        if self.is_chief and not resume:
            cfg.save(self.model_dir / ckpt.CONFIG)
        self.data = encode_data(cfg, self.splits, self.src_tok, self.tgt_tok)
        self.sampler = BucketSampler([len(s) for s in self.data.train_src], [len(t) for t in self.data.train_tgt],
                                     batch_size=None if cfg.data.batch_tokens else cfg.data.batch_size,
                                     batch_tokens=cfg.data.batch_tokens, num_buckets=cfg.data.num_buckets,
                                     bucketing=cfg.data.bucketing,
                                     shuffle=True, seed=t.seed)
        logger.info("batches: %d per epoch in %d shapes (%s bucketing), %.0f%% of the padded positions are tokens",
                    len(self.sampler), len(self.sampler.bucket_shapes), self.sampler.bucketing,
                    100 * self.sampler.real_fraction)
        self.workers.check_same("training data and flags", {   # distributed: all must draw the same batches
            "batches": self.sampler.fingerprint(), "subword_sampling": cfg.data.subword_sampling,
            "model": vars(cfg.model), "optim": vars(cfg.optim),
            "train": {k: getattr(t, k) for k in ("seed", "accum_steps", "max_steps", "max_epochs", "valid_every")}})
        resegment = (subword_resegmenter(cfg.data, self.data, self.src_tok, self.tgt_tok)
                     if cfg.data.subword_sampling else None)
        self.batches = BatchIterator(self.data.train_src, self.data.train_tgt, self.sampler, prefetch=2,
                                     resegment=resegment)
        _seed_everything(t.seed)
        self.net = build_model(cfg.model, self.src_tok.vocab_size, self.tgt_tok.vocab_size)
        self.net.initialize(mx.init.Xavier(magnitude=2.24), ctx=self.ctxs)
        self.loss_block = Seq2SeqLoss(self.net, label_smoothing=cfg.optim.label_smoothing)
        self.net.hybridize(static_alloc=True)
        self.loss_block.hybridize(static_alloc=True)
        self.trainer = build_trainer(cfg, self.net, self.kv)
        if resume:
            if self.is_chief:   # the others get rank 0's parameters as load_states initializes the kvstore
                self.net.load_parameters(str(ckpt.latest_params_path(self.model_dir)), ctx=self.ctxs)
            states = ckpt.trainer_states_file(ckpt.latest_step(self.state))
            self.trainer.load_states(str(self.workers.share_files(self.model_dir, (states,)) / states))
            adopt_loaded_optimizer(self.trainer)
            self.batches.load_state_dict(self.state.sampler)
            logger.info("resumed from step %d (epoch %d, batch %d of %d)", self.state.step, self.state.epoch + 1,
                        self.sampler.position, len(self.sampler))
        else:
            self.sampler.set_epoch(0)
        self.workers.init_trainer(self.trainer)   # distributed: rank 0's parameters on every worker before update 1
        self.dp = DataParallel(self.loss_block, self.net.collect_params(), self.trainer, self.ctxs,
                               accum_steps=t.accum_steps, clip_norm=cfg.optim.clip_norm,
                               num_workers=self.num_workers, rank=self.rank, amp=t.amp)
        self.metrics = MetricsWriter(self.model_dir / ckpt.METRICS if self.is_chief else None)
        self.translator = Translator(self.net, self.src_tok, self.tgt_tok, cfg.decode, ctx=self.ctxs[0])
        self._signal = None

    # -- pieces of the loop -------------------------------------------------------------------------------------
    def train_step(self, batch: Batch):
        lr = learning_rate(self.state.step, self.cfg, self.state.lr_scale)
        self.trainer.set_learning_rate(lr)
        mx.random.seed(self.cfg.train.seed * 100003 + self.state.step)   # dropout masks resumable per update
        loss, nll, norm = self.dp.step(batch)
        self.state.step += 1
        self.state.tokens_seen += batch.num_tgt_tokens
        return loss, nll, norm, lr

    def validate(self, train_loss: Optional[float] = None) -> Dict[str, float]:
        """Dev loss and BLEU; one metrics.jsonl row (with `train_loss`, the mean training loss per target token
        since the previous validation, when given)."""
        t0 = time.perf_counter()
        nll, tokens = dev_loss(self.loss_block, self.data, self.ctxs[0])
        n = self.cfg.train.valid_max_sentences
        srcs, refs = self.splits.dev.src[:n], self.splits.dev.tgt[:n]
        hyps = self.translator.translate(srcs, beam_size=self.cfg.train.valid_beam)
        sc = score(hyps, refs, self.cfg.data.tgt_lang)
        row = {"step": self.state.step, "epoch": round(self.epochs_done(), 3), "dev_nll": nll / max(tokens, 1),
               "dev_ppl": perplexity(nll, tokens), "dev_bleu": sc.bleu, "dev_chrf": sc.chrf,
               "lr": learning_rate(self.state.step, self.cfg, self.state.lr_scale),
               "tokens_seen": self.state.tokens_seen, "elapsed": round(self.state.elapsed, 1),
               "valid_seconds": round(time.perf_counter() - t0, 1)}
        if train_loss is not None:
            row["train_loss"] = train_loss
        improved = sc.bleu > self.state.best_bleu
        if improved:
            self.state.best_bleu, self.state.best_step, self.state.bad_validations = sc.bleu, self.state.step, 0
        else:
            self.state.bad_validations += 1
            if self.cfg.optim.schedule == "plateau" and self.state.bad_validations % self.cfg.optim.plateau_patience == 0:
                self.state.lr_scale *= 0.5
        row["best_bleu"] = self.state.best_bleu
        logger.info("validation step %d epoch %.2f: dev ppl %.2f BLEU %.2f chrF %.2f (best %.2f at step %d)%s",
                    row["step"], row["epoch"], row["dev_ppl"], sc.bleu, sc.chrf, self.state.best_bleu,
                    self.state.best_step, "" if improved else f", {self.state.bad_validations} without gain")
        self.metrics.write(row)
        row["improved"] = improved
        return row

    def save(self, is_best: bool = False) -> None:
        self.state.sampler = self.batches.state_dict()
        if self.is_chief:
            ckpt.save_checkpoint(self.model_dir, self.net, self.trainer, self.state, self.cfg.train.keep_last, is_best)
        if self.num_workers > 1:   # all continue from rank 0's state: its validations decide lr scale and early stop
            self.state = ckpt.TrainState(**self.workers.broadcast_json(vars(self.state)))

    def epochs_done(self) -> float:
        """Training progress in epochs (1.5 = half-way through the second epoch)."""
        return self.sampler.epoch + self.sampler.position / max(len(self.sampler), 1)

    def _should_stop(self, t_start: float) -> str:
        t = self.cfg.train
        timed_out = bool(t.max_seconds) and time.perf_counter() - t_start >= t.max_seconds
        over_budget = bool(t.time_budget) and self.state.elapsed >= t.time_budget
        # a signal or the time budget reaches workers at different updates: in a distributed job they vote, and
        # all act on the outcome at the same (next) update; with one worker this is the wish itself
        wish = self.workers.agree_stop(self._signal or ("max_seconds" if timed_out else "")
                                       or ("time_budget" if over_budget else ""))
        if wish in ("SIGINT", "SIGTERM"):
            return wish
        if t.max_steps and self.state.step >= t.max_steps:
            return "max_steps"
        if wish:
            return wish
        if t.patience and self.state.bad_validations >= t.patience:
            return "early_stop"
        return ""

    # -- the loop ------------------------------------------------------------------------------------------------
    def fit(self) -> ckpt.TrainState:
        t = self.cfg.train
        t_start, elapsed0 = time.perf_counter(), self.state.elapsed
        old_handlers = _install_signal_handlers(self)
        speed, last_log = Speedometer(), {"loss": float("nan")}
        since_valid: list = [0.0, 0]   # training loss sum (on the device) and target tokens since the last validation

        def validate() -> Dict[str, float]:
            nonlocal since_valid
            loss_sum, tokens = since_valid
            since_valid = [0.0, 0]
            if not self.is_chief:
                return {"improved": False}
            return self.validate(float(loss_sum.asscalar()) / tokens if tokens else None)

        stop = self._should_stop(t_start)
        try:
            while not stop and self.state.epoch < t.max_epochs:
                bar = tqdm(total=len(self.sampler), initial=self.sampler.position, desc=f"epoch {self.state.epoch + 1}",
                           unit="upd", disable=not (t.progress and self.is_chief), dynamic_ncols=True, leave=False)
                loss_acc, tok_acc = None, 0
                for batch in self.batches:
                    loss, _, _, lr = self.train_step(batch)
                    loss_acc = loss if loss_acc is None else loss_acc + loss
                    tok_acc += batch.num_tgt_tokens
                    since_valid = [since_valid[0] + loss, since_valid[1] + batch.num_tgt_tokens]
                    speed.update(batch.num_sentences, batch.num_src_tokens, batch.num_tgt_tokens)
                    bar.update(1)
                    if self.state.step % t.log_every == 0:   # the only host synchronization of the loop
                        last_log = {"loss": float(loss_acc.asscalar()) / max(tok_acc, 1), **speed.read(), "lr": lr}
                        loss_acc, tok_acc = None, 0
                        bar.set_postfix(loss=f"{last_log['loss']:.3f}", lr=f"{lr:.2e}",
                                        tok_s=f"{last_log['tok_per_s']:.0f}")
                        logger.debug("step %d loss %.4f", self.state.step, last_log["loss"])
                    self.state.elapsed = elapsed0 + time.perf_counter() - t_start
                    if t.valid_every and self.state.step % t.valid_every == 0:
                        row = validate()
                        self.save(is_best=row["improved"])
                    stop = self._should_stop(t_start)
                    if stop:
                        break
                bar.close()
                if not stop:   # epoch end: validate, checkpoint at the start of the next epoch
                    logger.info("epoch %d done at step %d: train loss %.3f, %.0f tokens/s", self.state.epoch + 1,
                                self.state.step, last_log["loss"], last_log.get("tok_per_s", 0.0))
                    self.state.epoch += 1
                    self.sampler.set_epoch(self.state.epoch)
                    row = validate()
                    self.save(is_best=row["improved"])
                    stop = self._should_stop(t_start)
            stop = stop or "max_epochs"
            self.state.stopped = stop
            if self.state.step != self._last_saved_step():
                interrupted = stop in ("SIGINT", "SIGTERM")
                row = validate() if not interrupted else {"improved": False}
                self.save(is_best=row["improved"])
            elif self.is_chief:
                self.state.save(self.model_dir)   # record why training stopped
            logger.info("training stopped (%s) at step %d, epoch %.2f; best dev BLEU %.2f at step %d",
                        stop, self.state.step, self.epochs_done(), self.state.best_bleu, self.state.best_step)
            self.workers.finished()   # distributed: no collective after this, leave with the others (else: at once)
        finally:
            _restore_signal_handlers(old_handlers)
        if t.average_last > 1 and self.is_chief and len(self.state.params_files) >= 2:
            ckpt.average_checkpoints(self.model_dir, self.state.params_files[-t.average_last:])
        return self.state

    def _last_saved_step(self) -> int:
        f = self.state.params_files[-1] if self.state.params_files else ""
        return int(f.split(".")[1]) if f else -1

    def evaluate_tests(self, which: str = "best") -> Dict[str, Scores]:
        """Translate every test set of the recipe with the `which` checkpoint; scores merged into scores.json."""
        self.net.load_parameters(str(ckpt.params_path(self.model_dir, which)), ctx=self.ctxs)
        self.translator.model_dir, self.translator.checkpoint = self.model_dir, which
        results = {}
        for name, pairs in self.splits.tests.items():
            _, _, results[name] = score_test_set(self.translator, name, pairs, save=self.is_chief)
            logger.info("test %s (%d sentences, %s checkpoint, beam %d): %s | %s", name, len(pairs.src), which,
                        self.cfg.decode.beam_size, results[name].summary(), results[name].bleu_signature)
        return results


@dataclass
class TrainResult:
    state: ckpt.TrainState
    test_scores: Dict[str, Scores]      # by test-set name, of the best checkpoint (empty if not evaluated)


def train(cfg: Config, resume: bool = False, overwrite: bool = False, evaluate: bool = True) -> TrainResult:
    """Train per `cfg`; with `evaluate`, score the best checkpoint on the recipe's test sets at the end."""
    model_dir = Path(cfg.train.model_dir)
    fresh = not resume and (overwrite or not model_dir.exists() or not any(model_dir.iterdir()))
    try:
        trainer = Trainer(cfg, resume=resume, overwrite=overwrite)
    except BaseException:
        # A run that failed while setting up (bad data, bad flags) leaves no half-made model directory behind
        # to block the next attempt.
        if fresh and model_dir.is_dir() and not (model_dir / ckpt.STATE).exists():
            setup_logging(None)   # close the log file before removing it
            shutil.rmtree(model_dir, ignore_errors=True)
        raise
    state = trainer.fit()
    scores: Dict[str, Scores] = {}
    if evaluate and trainer.is_chief and state.stopped not in ("SIGINT", "SIGTERM") and trainer.splits.tests:
        scores = trainer.evaluate_tests("best")
    return TrainResult(state, scores)


def _validate(cfg: Config) -> None:
    d, t, o = cfg.data, cfg.train, cfg.optim
    checks = [
        (d.batch_size >= 1 or d.batch_tokens, f"--batch-size must be >= 1, got {d.batch_size}"),
        (d.batch_tokens is None or d.batch_tokens >= 1, f"--batch-tokens must be >= 1, got {d.batch_tokens}"),
        (t.accum_steps >= 1, f"--accum-steps must be >= 1, got {t.accum_steps}"),
        (t.max_steps >= 0, f"--max-steps must be >= 0, got {t.max_steps}"),
        (t.max_epochs >= 1, f"--max-epochs must be >= 1, got {t.max_epochs}"),
        (d.vocab_size >= 16, f"--vocab-size must be >= 16, got {d.vocab_size}"),
        (o.lr > 0, f"--lr must be > 0, got {o.lr}"),
        (0 <= o.label_smoothing < 1, f"--label-smoothing must be in [0, 1), got {o.label_smoothing}"),
        (o.schedule in ("inv_sqrt", "plateau", "constant"), f"--lr-schedule {o.schedule!r}: use inv_sqrt, plateau or constant"),
        (t.valid_every >= 0, f"--valid-every must be >= 0, got {t.valid_every}"),
        (t.keep_last >= 1, f"--keep-last must be >= 1, got {t.keep_last}"),
        (d.src_lang != d.tgt_lang, f"--src and --tgt are both {d.src_lang!r}"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ConfigError(msg)
    if not d.batch_tokens and d.batch_size < t.accum_steps:
        raise ConfigError(f"--batch-size {d.batch_size} is smaller than --accum-steps {t.accum_steps}")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    mx.random.seed(seed)


def _install_signal_handlers(trainer: Trainer):
    """SIGINT/SIGTERM set a flag; the loop saves a checkpoint after the current update and exits cleanly."""
    def handler(signum, _frame):
        name = signal.Signals(signum).name
        if trainer._signal:       # second signal: stop at once
            raise KeyboardInterrupt
        logger.warning("%s received: saving a checkpoint after this update, then stopping "
                       "(send it again to stop at once)", name)
        trainer._signal = name
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            old[sig] = signal.signal(sig, handler)
        except ValueError:   # not the main thread (e.g. inside some notebook runners)
            pass
    return old


def _restore_signal_handlers(old) -> None:
    for sig, h in old.items():
        signal.signal(sig, h)
