"""Typed configurations, saved as JSON inside the model directory.

Each component owns its defaults here, one comment per field. `nmt.cli` maps flags onto these
dataclasses in one place; `Config.save/load` round-trip them so a model directory describes itself.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the flag or field."""


# Defaults are the measured best of the default job (Tatoeba ko->en, 3.9k pairs, 30 minutes on one CPU core; README
# "Results", ablations): small-data NMT is won by regularization and small vocabularies (Sennrich & Zhang 2019).
# Each of vocabulary 2000, dropout 0.4, label smoothing 0.2 and word dropout 0.2 beat its alternative in a run of
# its own on dev BLEU; mlp attention beat dot alone, but not once word dropout was on (and costs ~25% per update).


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
    max_ratio: float = 4.0               # drop training pairs whose character-length ratio exceeds this
    skip_invalid_utf8: bool = False      # skip (and count) undecodable lines instead of stopping with an error
    vocab_size: int = 2000               # SentencePiece vocabulary per language; small vocabularies win on small data
    spm_model_type: str = "unigram"      # SentencePiece algorithm: unigram (default) or bpe
    subword_sampling: float = 0.0        # > 0: a sampled segmentation per training batch (Kudo 2018; BPE-dropout)
    max_src_tokens: int = 80             # training pairs longer than this (subword tokens) are dropped
    max_tgt_tokens: int = 80
    batch_size: int = 32                 # global batch of one update, in sentences (whatever the device count)
    batch_tokens: Optional[int] = None   # or: global batch in target tokens (overrides batch_size)
    num_buckets: int = 8                 # bucket count; few fixed shapes keep the hybridized graph cached
    bucketing: str = "padding"           # "padding": the buckets that pad least; "quantile": length quantiles (old)


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
    lexical_model: bool = True           # attention-weighted source embeddings also feed the output layer
                                         # (Nguyen & Chiang 2018), for rare words in small data
    # Transformer (--arch transformer; the fields above that it shares: dropout, word_dropout, tie_weights).
    # Sizes are those of a small model for small data (Araabi & Monz 2020): not yet tuned on this project's data.
    encoder_layers: int = 3              # Transformer encoder layers
    decoder_layers: int = 3              # Transformer decoder layers
    model_size: int = 256                # Transformer width d (embeddings, attention, residual stream)
    ff_size: int = 1024                  # Transformer feed-forward inner width (4 d, as in Vaswani et al. 2017)
    heads: int = 4                       # attention heads (must divide model_size)
    attention_dropout: float = 0.1       # dropout on attention weights (Transformer)
    activation_dropout: float = 0.1      # dropout after the feed-forward ReLU (Transformer)
    shared_vocab: bool = False           # one SentencePiece model for both languages; the Transformer then ties
                                         # source embedding = target embedding (= output layer with tie_weights)


@dataclass
class OptimConfig:
    optimizer: str = "adam"
    lr: float = 2e-3                     # peak learning rate (after warmup)
    warmup_steps: int = 400              # linear warmup updates
    schedule: str = "inv_sqrt"           # "inv_sqrt" decay after warmup, "plateau" (halve on no dev gain), "constant"
    plateau_patience: int = 2            # validations without gain before a plateau halving
    label_smoothing: float = 0.2
    weight_decay: float = 0.0
    clip_norm: float = 5.0               # global gradient-norm clipping over all devices (0 disables)
    beta1: float = 0.9
    beta2: float = 0.98


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
    patience: int = 10                   # early stop after this many validations without a better dev BLEU
    keep_last: int = 3                   # parameter files of the last N checkpoints kept
    average_last: int = 0                # average the last N checkpoints into params.avg at the end (0 = off)
    seed: int = 1
    log_every: int = 50                  # updates between progress-bar/log refreshes (host syncs only here)
    valid_beam: int = 1                  # beam size of the dev translation used for BLEU during training
    valid_max_sentences: int = 500       # cap on dev sentences translated for BLEU (loss uses all)
    progress: bool = True                # tqdm bar on stderr
    amp: bool = False                    # automatic mixed precision (float16 compute, float32 weights); GPUs only


@dataclass
class DecodeConfig:
    beam_size: int = 5
    length_penalty_alpha: float = 0.6    # GNMT length penalty ((5+len)/6)^alpha
    max_len_a: float = 1.5               # maximum output length = a * source length + b
    max_len_b: int = 10
    batch_size: int = 64                 # sentences per decoding batch (length-sorted)
    nbest: int = 1
    max_input_tokens: int = 250          # longer inputs are truncated with a warning


# A key missing from a saved config (written before the key existed) means what that version did, not today's
# default: fields whose default changed after they were added are listed here with their old value.
ABSENT_MEANS: Dict[tuple, Any] = {
    ("model", "word_dropout"): 0.0,      # the default became 0.2 after models were trained without word dropout
    ("model", "lexical_model"): False,   # models from before the lexical model had none
    ("data", "bucketing"): "quantile",   # the only scheme before the field existed
}


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any], source: str = "config") -> "Config":
        parts = {}
        for f in dataclasses.fields(cls):
            sub = d.get(f.name, {}) or {}
            klass = f.default_factory  # type: ignore[misc]
            known = {x.name for x in dataclasses.fields(klass)}
            unknown = sorted(set(sub) - known)
            if unknown:
                raise ConfigError(f"{source}: unknown key(s) in section '{f.name}': {', '.join(unknown)}; "
                                  f"known: {', '.join(sorted(known))}")
            absent = {k: v for (section, k), v in ABSENT_MEANS.items() if section == f.name and k not in sub}
            parts[f.name] = klass(**{**absent, **sub})
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"{source}: unknown section(s) {', '.join(unknown)}; "
                              "known: data, model, optim, train, decode")
        return cls(**parts)

    def save(self, path) -> None:
        from nmt.atomic import atomic_write_text
        atomic_write_text(Path(path), json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path) -> "Config":
        path = Path(path)
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e})") from None
        return cls.from_dict(d, source=str(path))

    def replace(self, **sections) -> "Config":
        return dataclasses.replace(self, **sections)
