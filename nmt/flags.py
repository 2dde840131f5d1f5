"""The command-line flags of nmt-train and the decoding commands: one table per config section, each row a flag, the
config field it sets, its type, help and choices (`nmt.cli` turns them into argparse groups; `nmt-translate`,
`nmt-evaluate` and `nmt-score` take `DECODE_FLAGS`). A new setting's flag goes here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from nmt.config import (ARCH_DEFAULTS, ATTENTION_TYPES, BUCKETINGS, KVSTORES, LANGS, LR_SCHEDULES, SPM_MODEL_TYPES,
                        VALID_METRIC_NAMES)
from nmt.recipes import RECIPES

# (flag, section, field, type, help): the tables mapping flags to config fields, one per config section


@dataclass
class Flag:
    flag: str
    section: str
    field: str
    type: Any = str
    help: str = ""
    choices: Optional[Sequence[str]] = None
    boolean: bool = False        # a store_true flag
    negate: bool = False         # --no-X: stores False


DATA_FLAGS = [
    Flag("--src", "data", "src_lang", str, "source language", choices=LANGS),
    Flag("--tgt", "data", "tgt_lang", str, "target language", choices=LANGS),
    Flag("--recipe", "data", "recipe", str, f"dataset recipe (nmt/recipes.json): {', '.join(RECIPES)}"),
    Flag("--data-dir", "data", "data_dir", str,
         "offline mirror laid out like shared/data (default: $NMT_DATA_DIR, else download)"),
    Flag("--cache-dir", "data", "cache_dir", str, "download cache directory (default: data/cache in a checkout, else "
         "~/.cache/nmt)"),
    Flag("--train-src", "data", "train_src", str, "training source file (instead of --recipe; several: cat them)"),
    Flag("--train-tgt", "data", "train_tgt", str, "training target file"),
    Flag("--dev-src", "data", "dev_src", str, "dev source file (default: the recipe's; for --train-src, 500 training "
         "pairs held out)"),
    Flag("--dev-tgt", "data", "dev_tgt", str, "dev target file"),
    Flag("--test-src", "data", "test_src", str, "test source file, scored at the end (default: the recipe's; for "
         "--train-src, none)"),
    Flag("--test-tgt", "data", "test_tgt", str, "test target file"),
    Flag("--upsample", "data", "upsample", str, "repeat a recipe corpus's training pairs K times in the mixture, "
         "e.g. tatoeba-manythings=4 (comma-separated for several); the tokenizers are trained on the mixture, so "
         "the corpus also weighs K times in the vocabulary"),
    Flag("--max-chars", "data", "max_chars", int, "drop training pairs with a side longer than this (characters; "
         "a line over 20000 is refused as it is read)"),
    Flag("--max-ratio", "data", "max_ratio", float, "drop training pairs whose longer side has more than this many "
         "times the UTF-8 bytes of the shorter"),
    Flag("--skip-invalid-utf8", "data", "skip_invalid_utf8", help="skip (and count) undecodable lines", boolean=True),
    Flag("--vocab-size", "data", "vocab_size", int,
         "SentencePiece vocabulary size per language (with --shared-vocab: of the one joint model)"),
    Flag("--spm-model-type", "data", "spm_model_type", str, "SentencePiece algorithm", choices=SPM_MODEL_TYPES),
    Flag("--subword-sampling", "data", "subword_sampling", float,
         "subword regularization: segment each training batch anew, sampled with this alpha (unigram: smoothing, "
         "0.1-0.5; bpe: BPE-dropout rate, 0.1); 0 = off"),
    Flag("--max-src-tokens", "data", "max_src_tokens", int, "drop training pairs with more source subwords"),
    Flag("--max-tgt-tokens", "data", "max_tgt_tokens", int, "drop training pairs with more target subwords"),
    Flag("--batch-size", "data", "batch_size", int, "global batch of one update in sentences, any device count"),
    Flag("--batch-tokens", "data", "batch_tokens", int, "global batch in padded target positions, at most this many "
         "(sentences x their length bucket's longest target + 1), instead of --batch-size"),
    Flag("--num-buckets", "data", "num_buckets", int, "length buckets (few fixed batch shapes)"),
    Flag("--bucketing", "data", "bucketing", str, "how examples are split into the buckets: the split that pads "
         "least (padding, default) or length quantiles (quantile)", choices=BUCKETINGS),
]
MODEL_FLAGS = [
    Flag("--arch", "model", "arch", str, "architecture", choices=ARCH_DEFAULTS),   # its keys, read when parsing
    Flag("--embed-size", "model", "embed_size", int, "embedding width"),
    Flag("--hidden-size", "model", "hidden_size", int, "LSTM width"),
    Flag("--num-layers", "model", "num_layers", int, "encoder and decoder layers"),
    Flag("--attention", "model", "attention", str, "attention type", choices=ATTENTION_TYPES),
    Flag("--dropout", "model", "dropout", float, "dropout rate"),
    Flag("--word-dropout", "model", "word_dropout", float, "rate of whole token embeddings zeroed in training"),
    Flag("--tie-weights", "model", "tie_weights", help="tie target embedding and output weights (default)",
         boolean=True),
    Flag("--no-tie-weights", "model", "tie_weights", help="separate output weights (needed if embed != hidden size)",
         boolean=True, negate=True),
    Flag("--lexical-model", "model", "lexical_model", help="a lexical model: the attention-weighted source "
         "embeddings feed the output layer too (Nguyen & Chiang 2018; default)", boolean=True),
    Flag("--no-lexical-model", "model", "lexical_model", help="no lexical model (the plain attention decoder)",
         boolean=True, negate=True),
    Flag("--encoder-layers", "model", "encoder_layers", int, "Transformer encoder layers"),
    Flag("--decoder-layers", "model", "decoder_layers", int, "Transformer decoder layers"),
    Flag("--model-size", "model", "model_size", int, "Transformer width (embeddings, attention, residuals)"),
    Flag("--ff-size", "model", "ff_size", int, "Transformer feed-forward inner width"),
    Flag("--heads", "model", "heads", int, "Transformer attention heads (must divide --model-size)"),
    Flag("--attention-dropout", "model", "attention_dropout", float, "Transformer dropout on attention weights"),
    Flag("--activation-dropout", "model", "activation_dropout", float,
         "Transformer dropout after the feed-forward activation"),
    Flag("--shared-vocab", "model", "shared_vocab", help="one SentencePiece model for both languages (--vocab-size "
         "pieces in all); the Transformer ties source and target embeddings (and the output layer with "
         "--tie-weights)", boolean=True),
]
OPTIM_FLAGS = [
    Flag("--optimizer", "optim", "optimizer", str, "optimizer"),
    Flag("--lr", "optim", "lr", float, "peak learning rate"),
    Flag("--warmup-steps", "optim", "warmup_steps", int, "linear warmup updates"),
    Flag("--lr-schedule", "optim", "schedule", str, "decay after warmup", choices=LR_SCHEDULES),
    Flag("--label-smoothing", "optim", "label_smoothing", float, "label smoothing"),
    Flag("--weight-decay", "optim", "weight_decay", float,
         "weight decay of every parameter (MXNet's wd): L2, added to the clipped gradient, with adam (not AdamW), sgd, "
         "nag, rmsprop, ftml; adagrad, lamb and adadelta decay the weights apart from the gradient"),
    Flag("--clip-norm", "optim", "clip_norm", float, "clip the global norm of the per-token mean gradient (0 = off)"),
]
TRAIN_FLAGS = [
    Flag("--model-dir", "train", "model_dir", str,
         "model directory, by default models/<recipe>-<src>-<tgt> (models/custom-<src>-<tgt> for your own "
         "--train-src/--train-tgt files; -<arch> appended for other than lstm)"),
    Flag("--gpus", "train", "gpus", str, "GPUs: a count (2 = the first two) or ids (4,5,6,7; 3, = GPU 3); omit: CPU"),
    Flag("--cpu-devices", "train", "cpu_devices", int, "data-parallel over N CPU contexts (no --gpus)"),
    Flag("--kvstore", "train", "kvstore", str, "auto: device on GPUs, local on CPU contexts; dist_sync or "
         "dist_device_sync across machines (nmt-launch)", choices=KVSTORES),
    Flag("--accum-steps", "train", "accum_steps", int,
         "micro-batches per update on each device (gradient accumulation)"),
    Flag("--max-steps", "train", "max_steps", int, "stop after this many updates in all (0 = no limit)"),
    Flag("--max-epochs", "train", "max_epochs", int, "stop after this many epochs"),
    Flag("--max-seconds", "train", "max_seconds", float, "stop after this many seconds of this run (0 = none)"),
    Flag("--time-budget", "train", "time_budget", float,
         "stop when the training wall time over all runs (resumes included) reaches this many seconds (0 = none)"),
    Flag("--seed", "train", "seed", int, "random seed"),
    Flag("--valid-every", "train", "valid_every", int,
         "validate every N updates and at each epoch end (0: at epoch ends only)"),
    Flag("--patience", "train", "patience", int,
         "early stop after N validations without a better --valid-metric (0 = never)"),
    Flag("--valid-metric", "train", "valid_metric", str,
         "dev score that picks the best checkpoint and stops early (default: ko-mecab, BLEU on morphemes, for Korean "
         "output, --tgt ko, which 13a BLEU reads poorly; bleu, 13a BLEU, otherwise; a resumed run keeps its own)",
         choices=VALID_METRIC_NAMES),
    Flag("--keep-last", "train", "keep_last", int, "parameter files of the last N checkpoints to keep"),
    Flag("--average-last", "train", "average_last", int,
         "average the last N checkpoints into params.avg when the run stops (also on Ctrl-C; the test sets score it "
         "beside the best) (0 = off)"),
    Flag("--log-every", "train", "log_every", int, "updates between progress updates"),
    Flag("--valid-beam", "train", "valid_beam", int, "beam size for dev BLEU during training"),
    Flag("--valid-max-sentences", "train", "valid_max_sentences", int, "dev sentences translated for BLEU"),
    Flag("--no-progress", "train", "progress", help="no progress bar (default: one when stderr is a terminal)",
         boolean=True, negate=True),
    Flag("--amp", "train", "amp", help="automatic mixed precision (float16) on GPUs", boolean=True),
    Flag("--tensorboard", "train", "tensorboard", help="TensorBoard curves in MODEL_DIR/tensorboard (default: on when "
         "tensorboardX is installed)", boolean=True),
    Flag("--no-tensorboard", "train", "tensorboard", help="no TensorBoard curves", boolean=True, negate=True),
]
DECODE_FLAGS = [
    Flag("--beam-size", "decode", "beam_size", int, "beam size (1 = greedy)"),
    Flag("--length-penalty", "decode", "length_penalty_alpha", float, "GNMT length penalty alpha"),
    Flag("--max-len-a", "decode", "max_len_a", float, "max output length = a * source length + b"),
    Flag("--max-len-b", "decode", "max_len_b", int, "max output length = a * source length + b"),
    Flag("--decode-batch-size", "decode", "batch_size", int, "sentences per decoding batch"),
    Flag("--max-input-tokens", "decode", "max_input_tokens", int, "longer inputs are truncated with a warning"),
]
GROUPS = [("data", DATA_FLAGS), ("model", MODEL_FLAGS), ("optimization", OPTIM_FLAGS),
          ("training", TRAIN_FLAGS), ("decoding", DECODE_FLAGS)]
