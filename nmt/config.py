"""Typed configurations, saved as JSON inside the model directory. Each component owns its defaults here, one
comment per field. `nmt.cli` maps flags onto these dataclasses in one place; `Config.save/load` round-trip them so a
model directory describes itself."""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Dict, Optional

from nmt import jsonio
from nmt.config_checks import ConfigError, SettingsClash, TooFewKept, check as _check, typed as _typed


# Defaults are the best of the default job's ablations on dev BLEU (Tatoeba ko->en, 3.9k pairs, 30 minutes on one
# CPU core; docs/results.md): small-data NMT is won by regularization and small vocabularies (Sennrich & Zhang 2019).
# The parallel files a run may be given instead of a recipe's corpora (--train-src ... --test-tgt).
CORPUS_FILES = ("train_src", "train_tgt", "dev_src", "dev_tgt", "test_src", "test_tgt")
# The flags not named after their config keys (`--` and the key with "-" for "_"; nmt.cli's flags, checked by a test).
FLAG_NAMES = {("data", "src_lang"): "--src", ("data", "tgt_lang"): "--tgt", ("optim", "schedule"): "--lr-schedule",
              ("decode", "length_penalty_alpha"): "--length-penalty", ("decode", "batch_size"): "--decode-batch-size"}


def flag_name(section: str, key: str) -> str:
    """The command line's flag of the config key `section.key` (a value check's error names it)."""
    return FLAG_NAMES.get((section, key), f"--{key.replace('_', '-')}")


# Languages a model translates between (either direction); the choices of --bucketing and --spm-model-type.
LANGS, BUCKETINGS, SPM_MODEL_TYPES = ("ko", "en"), ("padding", "quantile"), ("unigram", "bpe")


@dataclass
class DataConfig:
    src_lang: str = "ko"                 # source language code (ko or en)
    tgt_lang: str = "en"                 # target language code
    recipe: Optional[str] = "tatoeba"    # dataset recipe name (nmt.recipes); None when files are given
    data_dir: Optional[str] = None       # offline mirror laid out like shared/data (else $NMT_DATA_DIR, then download)
    cache_dir: Optional[str] = None      # download cache (default: data/cache in the checkout or ~/.cache/nmt)
    train_src: Optional[str] = None      # explicit parallel files (override the recipe)
    train_tgt: Optional[str] = None
    dev_src: Optional[str] = None
    dev_tgt: Optional[str] = None
    test_src: Optional[str] = None
    test_tgt: Optional[str] = None
    upsample: Optional[str] = None       # "corpus=K[,corpus=K]": repeat a recipe corpus's training pairs K times
    max_chars: int = 400                 # drop training pairs with a side longer than this (characters)
    max_ratio: float = 4.0               # drop training pairs whose length ratio in UTF-8 bytes exceeds this
    skip_invalid_utf8: bool = False      # skip (and count) undecodable lines instead of stopping with an error
    vocab_size: int = 2000               # SentencePiece pieces per language (or of the joint one); small win here
    spm_model_type: str = "unigram"      # SentencePiece algorithm: unigram (default) or bpe
    subword_sampling: float = 0.0        # > 0: a sampled segmentation per training batch (Kudo 2018; BPE-dropout)
    max_src_tokens: int = 80             # training pairs longer than this (subword tokens) are dropped
    max_tgt_tokens: int = 80
    batch_size: int = 32                 # global batch of one update, in sentences (whatever the device count)
    batch_tokens: Optional[int] = None   # or: global batch in padded target positions (overrides batch_size)
    num_buckets: int = 8                 # bucket count; few fixed shapes keep the hybridized graph cached
    bucketing: str = "padding"           # "padding": the buckets that pad least; "quantile": length quantiles

    def input_paths(self) -> Dict[str, Optional[str]]:
        """The files and directories this data is read from, by flag (that a run deletes or overwrites none)."""
        return {f"--{name.replace('_', '-')}": getattr(self, name) for name in (*CORPUS_FILES, "data_dir", "cache_dir")}

    def __post_init__(self) -> None:
        _typed(self)
        for name in (*CORPUS_FILES, "data_dir", "cache_dir"):
            if getattr(self, name):   # relative to where the run started: its resume or evaluation may run elsewhere
                setattr(self, name, os.path.abspath(os.path.expanduser(getattr(self, name))))
        _check([*[(getattr(self, name) != "", f"--{name.replace('_', '-')} is empty: give a path, or leave it out")
                  for name in (*CORPUS_FILES, "data_dir", "cache_dir")],   # (in a file: a flag's "" is refused early)
                (self.batch_size >= 1 or bool(self.batch_tokens), f"--batch-size must be >= 1, got {self.batch_size}"),
                (self.batch_tokens is None or self.batch_tokens >= 1,
                 f"--batch-tokens must be >= 1, got {self.batch_tokens}"),
                (not self.batch_tokens or self.batch_size == DataConfig.batch_size,   # (a model's config.json: both)
                 f"--batch-size {self.batch_size} and --batch-tokens {self.batch_tokens} contradict each other: a "
                 "batch is counted in sentences or in padded target positions; give one of them"),
                (16 <= self.vocab_size <= 1_000_000, f"--vocab-size must be from 16 to 1000000, got {self.vocab_size}"),
                (self.max_chars >= 1, f"--max-chars must be >= 1, got {self.max_chars}"),
                (self.max_ratio >= 1, "--max-ratio must be >= 1 (the longer side's UTF-8 bytes over the shorter's; "
                                      f"inf: no limit), got {self.max_ratio}"),
                (self.num_buckets >= 1, f"--num-buckets must be >= 1, got {self.num_buckets}"),
                *[(n >= 1, f"--max-{side}-tokens must be >= 1, got {n}")
                  for side, n in (("src", self.max_src_tokens), ("tgt", self.max_tgt_tokens))],
                *[(value in allowed, f"{flag} {value!r}: use one of {', '.join(allowed)}")
                  for flag, value, allowed in (("--src", self.src_lang, LANGS), ("--tgt", self.tgt_lang, LANGS),
                                               ("--bucketing", self.bucketing, BUCKETINGS),
                                               ("--spm-model-type", self.spm_model_type, SPM_MODEL_TYPES))],
                (self.subword_sampling == 0.0 or 0.0 < self.subword_sampling < 1.0,
                 "--subword-sampling must be between 0 and 1, exclusive (0 = off; " + (
                     "smoothing alpha, 0.1-0.5 is usual" if self.spm_model_type == "unigram"
                     else "BPE-dropout rate, 0.1 is usual") + f"), got {self.subword_sampling}")])
        _check([(self.src_lang != self.tgt_lang, f"--src and --tgt are both {self.src_lang!r} (a side not given is its "
                 "default, ko or en, a --config file's or the run's): give --src ko --tgt en, or --src en --tgt ko")],
               SettingsClash, ("data.src_lang", "data.tgt_lang"))   # (a pair: a --config file's side may meet a flag's)


ATTENTION_TYPES = ("dot", "general", "mlp")   # the LSTM's attention scores (nmt.models.lstm), which --attention offers


@dataclass
class ModelConfig:
    arch: str = "lstm"                   # architecture (nmt.models registry): the model class built from this config
    embed_size: int = 256                # source and target embedding width
    hidden_size: int = 256               # LSTM hidden width (encoder per direction and decoder)
    num_layers: int = 2                  # encoder layers (first bidirectional) and decoder layers
    attention: str = "dot"               # Luong "dot" / "general", or Bahdanau "mlp" (~25% slower per update)
    dropout: float = 0.4                 # dropout on embeddings, between layers and before the output
    tie_weights: bool = True             # share target embedding and output projection (embed==hidden needed)
    word_dropout: float = 0.2            # drop whole source/target token embeddings in training (Sennrich & Zhang 2019)
    lexical_model: bool = True           # attention-weighted source embeddings feed the output (Nguyen & Chiang 2018)
    # Transformer (shares dropout, word_dropout and tie_weights above; its defaults of the first two: ARCH_DEFAULTS).
    # Sizes of a small model for small data, after Araabi & Monz 2020 (fewer layers and heads, a narrower feed-forward
    # than Vaswani et al.'s base); the depth by ablation on our dev sets (docs/transformer.md: 2+2 beat 3+3).
    encoder_layers: int = 2              # Transformer encoder layers (the base model has 6)
    decoder_layers: int = 2              # Transformer decoder layers
    model_size: int = 256                # Transformer width d (embeddings, attention, residual stream)
    ff_size: int = 512                   # Transformer feed-forward inner width (2 d; the base model has 4 d)
    heads: int = 2                       # attention heads (must divide model_size; the base model has 8)
    attention_dropout: float = 0.1       # dropout on attention weights (Transformer)
    activation_dropout: float = 0.1      # dropout after the feed-forward ReLU (Transformer)
    shared_vocab: bool = False           # one SentencePiece model for both (the Transformer: one embedding as well)

    def __post_init__(self) -> None:   # the values are checked by the architecture (nmt.models), the types here
        _typed(self)


# Optimizers of MXNet's registry that --optimizer accepts (those that take only lr and weight decay, plus betas),
# and those of them that take optim.beta1 and optim.beta2 (`nmt.optim.optimizer_settings`).
OPTIMIZERS = ("adam", "sgd", "nag", "adagrad", "rmsprop", "adadelta", "lamb", "ftml")
BETA_OPTIMIZERS = ("adam", "lamb", "ftml")
# Those whose MXNet 1.9.1 update reads no learning rate: AdaDelta (Zeiler 2012) steps by its own ratio of running
# averages, so --lr, --warmup-steps and --lr-schedule do not reach it (`nmt.optim.build_optimizer` warns).
LR_FREE_OPTIMIZERS = ("adadelta",)


@dataclass
class OptimConfig:
    optimizer: str = "adam"
    lr: float = 2e-3                     # peak learning rate (after warmup)
    warmup_steps: int = 400              # linear warmup updates
    schedule: str = "inv_sqrt"           # "inv_sqrt" decay after warmup, "plateau" (halve on no dev gain), "constant"
    plateau_patience: int = 2            # validations without gain before a plateau halving
    label_smoothing: float = 0.2
    weight_decay: float = 0.0
    clip_norm: float = 5.0               # clipping of the per-token mean gradient's global norm (0 disables)
    beta1: float = 0.9
    beta2: float = 0.98

    def __post_init__(self) -> None:
        _typed(self)
        betas = [f"optim.{k} {v}" for k, v, default in (("beta1", self.beta1, 0.9), ("beta2", self.beta2, 0.98))
                 if v != default]
        _check([(self.optimizer in OPTIMIZERS, f"--optimizer {self.optimizer!r} is not supported; use one of "
                                                + ", ".join(OPTIMIZERS)),
                (self.lr > 0 and math.isfinite(self.lr), f"--lr must be > 0 and finite, got {self.lr}"),
                (self.warmup_steps >= 0, f"--warmup-steps must be >= 0, got {self.warmup_steps}"),
                (0 <= self.label_smoothing < 1, f"--label-smoothing must be in [0, 1), got {self.label_smoothing}"),
                (0 <= self.weight_decay < math.inf, f"--weight-decay must be >= 0, got {self.weight_decay}"),
                (0 <= self.clip_norm < math.inf, f"--clip-norm must be >= 0 (0 = off), got {self.clip_norm}"),
                (self.plateau_patience >= 1, f"optim.plateau_patience must be >= 1, got {self.plateau_patience}"),
                (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1,
                 f"optim.beta1 and optim.beta2 must be in [0, 1), got {self.beta1}, {self.beta2}"),
                (self.optimizer in BETA_OPTIMIZERS or not betas, f"{' and '.join(betas)}: a setting of --optimizer "
                 f"{', '.join(BETA_OPTIMIZERS)}, which --optimizer {self.optimizer} has not: drop it"),
                (self.schedule in LR_SCHEDULES,
                 f"--lr-schedule {self.schedule!r}: use {', '.join(LR_SCHEDULES[:-1])} or {LR_SCHEDULES[-1]}")])


LR_SCHEDULES = ("inv_sqrt", "plateau", "constant")   # after warm-up: nmt.optim.learning_rate, preflight.settings_lines
# kvstores of --kvstore: auto picks device on GPUs and local on CPU contexts; dist_* across machines (nmt-launch).
KVSTORES = ("auto", "local", "device", "dist_sync", "dist_device_sync")
VALID_METRIC_NAMES = ("bleu", "chrf", "ko-mecab", "ppl")   # --valid-metric's (nmt.evaluate.VALID_METRICS: how read)


def default_valid_metric(tgt_lang: str) -> str:
    """--valid-metric where none is given, by the target language, as sacreBLEU reads it: ko-mecab BLEU for Korean
    output (13a BLEU splits Korean at spaces only, and matches whole eojeol, words with their particles), else 13a."""
    return "ko-mecab" if tgt_lang == "ko" else "bleu"


@dataclass
class TrainConfig:
    model_dir: str = "models/tatoeba-ko-en"
    gpus: Optional[str] = None           # "2" = first two GPUs, "4,5,6,7" = those ids; None = CPU
    cpu_devices: int = 1                 # data-parallel over N CPU contexts (tests the multi-device path without GPUs)
    kvstore: str = "auto"                # auto: "device" on GPUs, "local" on CPU; or dist_sync / dist_device_sync
    accum_steps: int = 1                 # micro-batches per update; gradients are summed before the update
    max_steps: int = 0                   # stop after this many updates in total, resumed ones included (0 = no limit)
    max_epochs: int = 60
    max_seconds: float = 0.0             # wall-clock budget for this run (0 = none); a checkpoint is saved at the end
    time_budget: float = 0.0             # training wall time over all runs, resumes included, in seconds (0 = none)
    valid_every: int = 500               # validate every N updates (and at every epoch end)
    patience: int = 10                   # early stop after this many validations without a better valid_metric
    # the dev score that picks params.best and stops early: bleu chrf ko-mecab ppl; None: the target language's,
    # `default_valid_metric` (Config.valid_metric; config.json keeps None, so a run's file serves the other direction)
    valid_metric: Optional[str] = None
    keep_last: int = 3                   # parameter files of the last N checkpoints kept
    average_last: int = 0                # average the last N checkpoints into params.avg as the run stops (0 = off)
    seed: int = 1
    log_every: int = 50                  # updates between progress-bar/log refreshes (host syncs only here)
    valid_beam: int = 1                  # beam size of the dev translation used for BLEU during training
    valid_max_sentences: int = 500       # cap on dev sentences translated for BLEU (loss uses all)
    progress: bool = True                # tqdm bar on stderr
    amp: bool = False                    # automatic mixed precision (float16 compute, float32 weights); GPUs only
    tensorboard: Optional[bool] = None   # curves in <model_dir>/tensorboard; None: on when tensorboardX is installed

    def __post_init__(self) -> None:
        _typed(self)
        self.model_dir = os.path.expanduser(self.model_dir)   # --model-dir=~/m and a config file's "~/m" too
        _check([(self.accum_steps >= 1, f"--accum-steps must be >= 1, got {self.accum_steps}"),
                (self.max_steps >= 0, f"--max-steps must be >= 0, got {self.max_steps}"),
                (self.max_epochs >= 1, f"--max-epochs must be >= 1, got {self.max_epochs}"),
                (self.valid_every >= 0, f"--valid-every must be >= 0, got {self.valid_every}"),
                *[(0 <= v < math.inf, f"{flag} must be finite, >= 0 (0: none), got {v}")
                  for flag, v in (("--max-seconds", self.max_seconds), ("--time-budget", self.time_budget))],
                (self.patience >= 0, f"--patience must be >= 0 (0 = no early stop), got {self.patience}"),
                (self.average_last == 0 or self.average_last >= 2, "--average-last must be 0 (off) or >= 2 (the "
                 f"average of one checkpoint is that checkpoint), got {self.average_last}"),
                (self.keep_last >= 1, f"--keep-last must be >= 1, got {self.keep_last}"),
                (self.valid_metric in (None, *VALID_METRIC_NAMES), f"--valid-metric {self.valid_metric!r}: use "
                 f"{', '.join(VALID_METRIC_NAMES[:-1])} or {VALID_METRIC_NAMES[-1]}"),
                (1 <= self.valid_beam <= 999_999, f"--valid-beam must be from 1 to 999999, got {self.valid_beam}"),
                (self.valid_max_sentences >= 1, f"--valid-max-sentences must be >= 1, got {self.valid_max_sentences}"),
                (self.log_every >= 1, f"--log-every must be >= 1, got {self.log_every}"),
                (0 <= self.seed < 2 ** 32, f"--seed must be between 0 and 2**32 - 1, got {self.seed}"),
                (self.kvstore in KVSTORES, f"--kvstore {self.kvstore!r}: use one of {', '.join(KVSTORES)} (dist_async, "
                                           "asynchronous, is not supported: every worker must apply the same update)")])


# Characters kept per subword token before tokenizing (a piece spans few): a line without line ends is cut first.
CHARS_PER_TOKEN = 16


@dataclass
class DecodeConfig:
    beam_size: int = 5
    length_penalty_alpha: float = 0.6    # GNMT length penalty ((5+len)/6)^alpha
    max_len_a: float = 1.5               # maximum output length = a * source length + b
    max_len_b: int = 10
    batch_size: int = 64                 # sentences per decoding batch (length-sorted)
    nbest: int = 1
    max_input_tokens: int = 250          # longer inputs are truncated with a warning
    UNSCORED: ClassVar[tuple] = ("batch_size", "nbest")   # change no translation nor score; a field added does

    def __post_init__(self) -> None:
        _typed(self)
        self.check()

    @property
    def max_len_a_text(self) -> str:
        """max_len_a as messages show it: the decimal the length limit takes (`search.length_limits`, its shortest
        repr), a whole number without ".0"; %g showed 0.1000001 as 0.1 and 999999.9 as 1e+06."""
        return repr(float(self.max_len_a)).removesuffix(".0")

    def check(self) -> None:
        """ConfigError naming the flag of the first bad setting: when made, and before decoding (set by hand)."""
        for flag, value, low in (("--beam-size", self.beam_size, 1), ("--nbest", self.nbest, 1),
                                 ("--decode-batch-size", self.batch_size, 1),
                                 ("--max-input-tokens", self.max_input_tokens, 1), ("--max-len-b", self.max_len_b, 0)):
            _check([(not isinstance(value, bool) and isinstance(value, numbers.Integral) and low <= value < 1e6,
                     f"{flag} must be an integer from {low} to 999999 (got {value!r})")])
        a, alpha = self.max_len_a, self.length_penalty_alpha   # (the penalty ((5 + len) / 6)^alpha is float32)
        real = [not isinstance(v, bool) and isinstance(v, numbers.Real) for v in (a, alpha)]
        _check([(real[0] and 0 <= a < 1e6, f"--max-len-a must be a number from 0 to below 1e6 (got {a!r})"),
                (real[1] and 0 <= alpha <= 10, f"--length-penalty must be a number from 0 to 10 (got {alpha!r})")])
        _check([(self.nbest <= self.beam_size, f"--nbest {self.nbest} is more than --beam-size {self.beam_size}: "
                                               "beam search keeps only beam-size hypotheses; raise --beam-size"),
                (self.max_len_a > 0 or self.max_len_b >= 1, f"--max-len-a {self.max_len_a} --max-len-b "
                 f"{self.max_len_b} allow no output token (the longest translation is a * source length + b): "
                 "raise either")])


# Defaults of shared fields that differ by architecture (`Config.from_dict` and the command line start from them;
# explicit values win). The shared defaults above were measured with the LSTM; the Transformer's are standard
# low-resource settings, some checked by ablation (why each: docs/transformer.md, "Where the defaults come from").
ARCH_DEFAULTS: Dict[str, Dict[str, Dict[str, Any]]] = {"lstm": {}, "transformer": {
    "model": {"dropout": 0.3, "word_dropout": 0.1}, "optim": {"lr": 1e-3, "warmup_steps": 1000}}}


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    # "section.key" of each value the dict of `from_dict` gave (not in config.json): fine-tuning keeps the model's
    # dropout unless given (`nmt.finetune.for_init`), whether or not the value given is the architecture's default
    given: ClassVar[frozenset] = frozenset()
    # how nmt-train's command line gave each "section.key" (its flag, or "FILE: section.key" of --config): a resumed
    # run logs its changes in these words, as its --dry-run lists them (else, Python's, as the keys)
    labels: ClassVar[Dict[str, str]] = {}

    def __post_init__(self) -> None:
        d, t = self.data, self.train   # (pairs of values, of which a --config file may give one and a flag the other)
        _check([(bool(d.batch_tokens) or d.batch_size >= t.accum_steps,
                 f"--batch-size {d.batch_size} is smaller than --accum-steps {t.accum_steps}")], SettingsClash,
               ("data.batch_size", "data.batch_tokens", "train.accum_steps"))
        _check([(t.average_last <= t.keep_last, f"--average-last {t.average_last} averages the last {t.average_last} "
                 f"of the checkpoints kept: give --keep-last {t.average_last} or more (got {t.keep_last})")],
               TooFewKept)   # (on --resume, which of the two is the run's saved one is said: config_resume.run_clash)
        _check([(t.valid_metric != "ko-mecab" or d.tgt_lang == "ko",
                 f"--valid-metric ko-mecab scores Korean output, and this model translates into {d.tgt_lang!r}: use "
                 "bleu, chrf or ppl")], SettingsClash, ("train.valid_metric", "data.tgt_lang"))

    @property
    def valid_metric(self) -> str:
        """The dev score that chooses params.best and stops early: train.valid_metric, or where it is unset (None)
        the target language's (`default_valid_metric`)."""
        return self.train.valid_metric or default_valid_metric(self.data.tgt_lang)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Dict, source: str = "config", complete: bool = False, file: bool = False) -> "Config":
        """A Config from its dict; with `complete` (a model directory's config.json) every key must be there.
        Keys left out take the defaults of the dict's architecture (`ARCH_DEFAULTS`, then the dataclasses').
        With `file` (`d` is what the file `source` holds, not mixed with flags) a bad value names the file and key."""
        if not isinstance(d, dict):
            raise ConfigError(f"{source}: a configuration is a dict of sections (data, model, ...), got "
                              f"{type(d).__name__}")
        model, parts = d.get("model", {}), {}   # a model section that is no dict (null too) is named below
        arch_defaults = ARCH_DEFAULTS.get(isinstance(model, dict) and str(model.get("arch", ModelConfig.arch)), {})
        for f in dataclasses.fields(cls):
            sub = d.get(f.name, {})
            if not isinstance(sub, dict):
                raise ConfigError(f"{source}: section '{f.name}' must be a JSON object, got {json.dumps(sub)}")
            sub = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in sub.items()}   # a Path: its str
            if complete and f.name == "data":   # a model's own, as its run read it: a blank path meant none, and
                sub = {k: None if v == "" and k in (*CORPUS_FILES, "data_dir", "cache_dir") else v
                       for k, v in sub.items()}
                if sub.get("batch_tokens"):   # batch_tokens won over any batch_size
                    sub["batch_size"] = DataConfig.batch_size
            klass = f.default_factory  # type: ignore[misc]
            known = {x.name for x in dataclasses.fields(klass)}
            unknown = sorted(set(sub) - known)
            if unknown:
                raise ConfigError(f"{source}: unknown key(s) in section '{f.name}': {', '.join(unknown)}; "
                                  f"known: {', '.join(sorted(known))}")
            missing = sorted(known - set(sub))
            if complete and missing:
                raise ConfigError(f"{source} lacks '{f.name}.{missing[0]}' ({len(missing)} of {f.name} missing): an "
                                  "older nmt wrote it, or it was edited (own settings: nmt-train --config); retrain it")
            if f.name == "train" and type(sub.get("gpus")) is int:   # "gpus": 2 means what --gpus 2 does
                sub = {**sub, "gpus": str(sub["gpus"])}
            jsonio.check_field_types(klass, f.name, sub, source, ConfigError)
            try:   # the value checks name the flags; in a file, they name the file and the key of the flag
                if file and f.name == "model":   # ranges, in nmt.models' words (it checks the flags' as it builds)
                    _check([(0 <= v < 1, f"--{k.replace('_', '-')} must be in [0, 1) (got {v!r})")
                            if k.endswith("dropout") else (v >= 1, f"--{k.replace('_', '-')} must be a positive "
                                                           f"integer (got {v!r})")
                            for k, v in sub.items() if k.endswith(("_size", "layers", "heads", "dropout"))
                            and v != getattr(ModelConfig, k, v)])   # a default is valid (a new option's "0 = off")
                parts[f.name] = klass(**{**arch_defaults.get(f.name, {}), **sub})
            except ConfigError as e:
                key = next((f"{f.name}.{k}: " for k in sub if str(e).startswith(f"{flag_name(f.name, k)} ")), "")
                raise (type(e)(f"{source}: {key}{e}") if file else e) from None
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"{source}: unknown section(s) {', '.join(unknown)}; "
                              "known: data, model, optim, train, decode")
        try:
            cfg = cls(**parts)
        except ConfigError as e:   # a check of values from several sections (a SettingsClash)
            raise (type(e)(f"{source}: {e}") if file else e) from None
        cfg.given = frozenset(f"{section}.{k}" for section, sub in d.items() if isinstance(sub, dict) for k in sub)
        return cfg

    def save(self, path) -> None:
        """JSON with the model directory absolute, like the data files (read from elsewhere, it names its run)."""
        from nmt.atomic import atomic_write_text
        d = self.to_dict()
        d["train"]["model_dir"] = os.path.abspath(d["train"]["model_dir"])
        atomic_write_text(Path(path), jsonio.dumps(d, indent=2) + "\n")

    @classmethod
    def load(cls, path, complete: bool = True) -> "Config":
        """A model directory's config (`complete`; model_dir: where it is now, copied or moved), or a --config's."""
        d, here = jsonio.read_object(path, ConfigError), os.path.dirname(os.path.abspath(path))
        if complete and isinstance(d.get("train"), dict) and os.path.isfile(os.path.join(here, "state.json")):
            d["train"]["model_dir"] = here   # (a run's own directory: nmt.checkpoint.STATE beside it)
        return cls.from_dict(d, source=str(path), complete=complete, file=True)

    @classmethod
    def for_arch(cls, arch: str) -> "Config":
        """The default configuration of an architecture (the command line's defaults with `--arch arch`)."""
        return cls.from_dict({"model": {"arch": arch}})
