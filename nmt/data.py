"""The training data as the trainer sees it (`build_data`): SentencePiece models of both languages, or one joint
model of both (trained on the training split, or reused from the model directory), token ids of the training and dev
pairs within the length limits, the resegmentation of training batches for subword regularization, and the bucketed
batches."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from nmt.batching import BatchIterator, Resegment
from nmt.checkpoint import CONFIG
from nmt.commands import shell_word
from nmt.config import Config, ConfigError, DataConfig
from nmt.encoded import RowsView, encode_flat, load_or_encode, text_checksum
from nmt.evaluate import korean_bleu
from nmt.recipes import DatasetSplits, load_data
from nmt.sampler import BucketSampler
from nmt.storage import scratch_room
from nmt.text import READ_SINCE
from nmt.textfile import TooFewPairs
from nmt.tokenizer import (JOINT, Tokenizer, VocabTooSmall, character_coverage, load_or_train_tokenizer,
                           load_tokenizers, tokenizer_names)
from nmt.workers import WorkerGroup

logger = logging.getLogger("nmt.data")


@dataclass
class EncodedData:
    """Token ids of the training and dev sets, after dropping pairs longer than the token limits (training ids are
    views of flat arrays, nmt.encoded: no Python object per token)."""
    train_src: Sequence[Sequence[int]]
    train_tgt: Sequence[Sequence[int]]
    dev_src: List[List[int]]
    dev_tgt: List[List[int]]
    train_src_text: List[str] = field(default_factory=list)   # the kept training pairs' text (for resegmenting)
    train_tgt_text: List[str] = field(default_factory=list)


def build_tokenizers(cfg: Config, model_dir: Path, splits: Optional[DatasetSplits],
                     workers: Optional[WorkerGroup] = None) -> Tuple[Tokenizer, Tokenizer]:
    """Source and target SentencePiece models: loaded from the model directory when `splits` is None (resume),
    else reused from it or trained on `splits.train` (with `--shared-vocab`: one model of `--vocab-size` pieces on
    both sides' text, serving as both). In a distributed job only rank 0 trains them and the other workers load
    its files (SentencePiece training is not bit-identical across thread counts, and the workers must encode the
    data alike)."""
    d, shared = cfg.data, cfg.model.shared_vocab
    if workers is not None and workers.num_workers > 1:
        if workers.is_chief:
            build_tokenizers(cfg, model_dir, splits)
        names = sorted(set(tokenizer_names(d.src_lang, d.tgt_lang, shared)))
        with workers.shared_files(model_dir, names) as copy:
            return load_tokenizers(copy, d.src_lang, d.tgt_lang, shared)
    if splits is None:
        return load_tokenizers(model_dir, d.src_lang, d.tgt_lang, shared)
    if shared:
        try:
            load_or_train_tokenizer(model_dir, JOINT, lambda: list(splits.train.src) + list(splits.train.tgt),
                                    d.vocab_size, d.spm_model_type, coverage=character_coverage(d.src_lang, d.tgt_lang))
        except VocabTooSmall as e:
            raise _too_small(d.vocab_size, [(f"joint ({d.src_lang} and {d.tgt_lang}, --shared-vocab)", e)]) from None
        return load_tokenizers(model_dir, d.src_lang, d.tgt_lang, shared)
    made, small = [], []   # (both sides' needs in one error: --vocab-size is one size for both)
    for lang, text in ((d.src_lang, splits.train.src), (d.tgt_lang, splits.train.tgt)):
        try:
            made.append(load_or_train_tokenizer(model_dir, lang, text, d.vocab_size, d.spm_model_type))
        except VocabTooSmall as e:
            small.append((lang, e))
    if small:
        raise _too_small(d.vocab_size, small)
    return made[0], made[1]


def _too_small(vocab_size: int, small: List[Tuple[str, VocabTooSmall]]) -> VocabTooSmall:
    """The error of a --vocab-size below what one tokenizer's characters need, or both's (one size for both)."""
    need = max(e.need for _, e in small)
    needs = " and ".join(f"{e.need} ({lang})" for lang, e in small) if len(small) == 2 else need
    which = "both tokenizers: their" if len(small) == 2 else f"the {small[0][0]} tokenizer: its"
    return VocabTooSmall(f"--vocab-size {vocab_size} is too small for {which} characters and the 256 byte-fallback "
                         f"pieces need at least {needs}; raise --vocab-size to at least {need}", need)


def encode_data(cfg: Config, splits: DatasetSplits, src_tok: Tokenizer, tgt_tok: Tokenizer,
                cache_dir: Optional[Path] = None, scratch: bool = False) -> EncodedData:
    """Token ids of the splits; the training ids from (or into) the encoded-corpus cache in `cache_dir` (`scratch`:
    a temporary directory in $TMPDIR, `nmt.encoded.load_or_encode`)."""
    d = cfg.data
    if cache_dir is not None:
        tr_s, tr_t, _ = load_or_encode(cache_dir, src_tok, tgt_tok, splits.train.src, splits.train.tgt, scratch)
    else:
        tr_s, tr_t = encode_flat(src_tok, splits.train.src), encode_flat(tgt_tok, splits.train.tgt)
    ls, lt = tr_s.lengths, tr_t.lengths
    keep = np.flatnonzero((ls > 0) & (ls <= d.max_src_tokens) & (lt > 0) & (lt <= d.max_tgt_tokens))
    if len(keep) < len(tr_s):   # a warning when it is more than a few: the limits may be too low for the data
        logger.log(logging.WARNING if len(keep) < 0.95 * len(tr_s) else logging.INFO,
                   "dropped %d of %d training pairs longer than --max-src-tokens %d / --max-tgt-tokens %d subword "
                   "tokens (or empty after tokenization)", len(tr_s) - len(keep), len(tr_s), d.max_src_tokens,
                   d.max_tgt_tokens)
    if not len(keep):
        raise ConfigError("no training pair is left after the token-length filter; "
                          "raise --max-src-tokens/--max-tgt-tokens")
    dv_s, dv_t = src_tok.encode(splits.dev.src), tgt_tok.encode(splits.dev.tgt)
    # dev loss uses every dev pair, truncated to the training limits so its batches fit the same shapes
    cut = sum(len(s) > d.max_src_tokens or len(t) > d.max_tgt_tokens for s, t in zip(dv_s, dv_t))
    if cut:
        logger.info("dev loss and perplexity: %d of %d dev pairs are cut to --max-src-tokens %d / --max-tgt-tokens "
                    "%d subword tokens (dev BLEU translates them whole)", cut, len(dv_s), d.max_src_tokens,
                    d.max_tgt_tokens)
    n, limit = cfg.train.valid_max_sentences, cfg.decode.max_input_tokens
    if any(len(s) > limit for s in dv_s[:n]):   # validations translate them quietly
        logger.info("dev BLEU: %d of the %d dev sources validated on have more than --max-input-tokens %d subword "
                    "tokens; they are translated cut", sum(len(s) > limit for s in dv_s[:n]), len(dv_s[:n]), limit)
    dv_s = [s[:d.max_src_tokens] for s in dv_s]
    dv_t = [t[:d.max_tgt_tokens] for t in dv_t]
    return EncodedData(RowsView(tr_s, keep), RowsView(tr_t, keep), dv_s, dv_t,
                       [splits.train.src[i] for i in keep], [splits.train.tgt[i] for i in keep])


def subword_resegmenter(d: DataConfig, data: EncodedData, src_tok: Tokenizer, tgt_tok: Tokenizer) -> Resegment:
    """(example indices, seed) -> their training pairs segmented with SentencePiece sampling (see
    `Tokenizer.encode_sampled`): subword regularization, a new segmentation of each sentence every epoch."""
    alpha = d.subword_sampling

    def resegment(indices, seed: int):
        return (src_tok.encode_sampled([data.train_src_text[i] for i in indices], alpha, seed),
                tgt_tok.encode_sampled([data.train_tgt_text[i] for i in indices], alpha, seed + 1))
    return resegment


@dataclass
class TrainData:
    """What training reads: the text splits, both tokenizers, their ids, and the batches over the ids."""
    splits: DatasetSplits
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    encoded: EncodedData
    sampler: BucketSampler
    batches: BatchIterator
    sums: Tuple[str, str, str] = ("", "", "")   # `pair_sums` of the splits (TrainState.train_sum, dev_sum, test_sum)


def pair_sums(splits: DatasetSplits) -> Tuple[str, str, str]:
    """sha256 of the training, the dev and the test pairs (`TrainState.train_sum`, `dev_sum`, `test_sum`)."""
    tests = [x for name in sorted(splits.tests) for x in (*splits.tests[name].src, *splits.tests[name].tgt)]
    return (text_checksum([*splits.train.src, *splits.train.tgt]), text_checksum([*splits.dev.src, *splits.dev.tgt]),
            text_checksum(tests))


def check_same_pairs(d: DataConfig, sums: Tuple[str, ...], saved: Tuple[str, ...], model_dir: Path,
                     rank0: bool = False) -> None:
    """ConfigError unless a resumed run's pairs (their `pair_sums`: `sums`) are those its checkpoint trained,
    validated and is to be tested on (`saved`; "" for unknown): a file edited in place keeps its path, which is all
    the settings compare, and a moved one (given where it is now) is accepted by its pairs. `rank0`: as
    `other_pairs`."""
    for i, what in ((1, "dev"), (0, "training"), (2, "test")):   # the dev pairs first: a dev pair changes the
        if saved[i] and sums[i] != saved[i]:                         # training pairs
            raise other_pairs(d, what, model_dir, rank0=rank0)


def other_pairs(d: DataConfig, what: str, model_dir: Path, how: str = "", rank0: bool = False) -> ConfigError:
    """The ConfigError of a resumed run whose `what` pairs ("training", "dev" or "test") are not the run's (in
    `model_dir`; `rank0`: on rank 0's machine, not this worker's), `how` it shows where not by their checksum."""
    from nmt.config_resume import rank0_run
    files, done, changed = {
        "dev": (("dev_src", "dev_tgt"), "validated", "they" if d.dev_src else "they, or the training or test files "
                "they are drawn from (a held-out dev set leaves out pairs of the test set),"),
        "training": (("train_src", "train_tgt"), "trained", "they, or the dev or test files (whose pairs leave the "
                                                            "training data),"),
        "test": (("test_src", "test_tgt"), "started", "they")}[what]
    rank0_says = f" {rank0_run(model_dir)}" if rank0 else ""
    named = (" and ".join(str(getattr(d, f)) for f in files if getattr(d, f))
             or ("of the recipe's corpora" if d.recipe else "held out of the training files"))
    return ConfigError(f"--resume: the {what} pairs ({named}) are not those the run {done} "
                       f"{'with' if what == 'test' else 'on until now'}{how}: "
                       f"{changed} changed since it started, or are other files than it read (or {READ_SINCE}); the "
                       "data cannot change within a run: give it its files as they were, start a new run (another "
                       "--model-dir, or --overwrite), or go on from this run with new data: fine-tune it into another "
                       f"--model-dir with --init-from {shell_word(model_dir)}{rank0_says}")


def build_data(cfg: Config, model_dir: Path, resume: bool = False, workers: Optional[WorkerGroup] = None,
               saved_sums: Tuple[str, str, str] = ("", "", ""), scratch: bool = False) -> TrainData:
    """The data of a run per `cfg.data`: the text splits of the recipe (or files), tokenizers trained into
    `model_dir` (or, on `resume`, loaded from it), token ids and the bucketed batches, seeded with
    `cfg.train.seed` (the sampler starts at epoch 0; a resume loads its position). `saved_sums`: the `pair_sums` a
    resumed run's pairs must have (`check_same_pairs`). `scratch`: `model_dir` is a temporary directory in $TMPDIR
    (a dry run's, `nmt.atomic.scratch_dir`), which a lack of room names as such, not as --model-dir."""
    d = cfg.data
    if d.tgt_lang == "ko":   # (its validations would fail: before any work)
        korean_bleu()
    rank0 = workers is not None and workers.lacks(Path(model_dir) / CONFIG)   # (its run is rank 0's, not here)
    try:
        splits = load_data(d)
    except TooFewPairs as e:   # (a resumed run had enough: other data, not a dev set to give)
        if not (resume and saved_sums[0]):
            raise
        raise other_pairs(d, "training", model_dir, f" ({e.left} after cleaning: the run had {e.needed} or more)",
                          rank0) from None
    sums = pair_sums(splits)
    check_same_pairs(d, sums, saved_sums, model_dir, rank0)
    logger.info("data: %d train, %d dev pairs; tests: %s", len(splits.train.src), len(splits.dev.src),
                ", ".join(f"{k} ({len(v.src)})" for k, v in splits.tests.items()) or "none")
    if len(splits.dev.src) > cfg.train.valid_max_sentences:   # a file in document or domain order: its first part
        logger.info("dev BLEU and chrF: on the first %d of the %d dev pairs (--valid-max-sentences); the loss on all",
                    cfg.train.valid_max_sentences, len(splits.dev.src))
    with scratch_room(model_dir if scratch else None, "the tokenizers and, meanwhile, their training text"):
        src_tok, tgt_tok = build_tokenizers(cfg, model_dir, None if resume else splits, workers)
    chief = workers is None or workers.is_chief   # the others may not write the model directory
    encoded = encode_data(cfg, splits, src_tok, tgt_tok, Path(model_dir) if chief else None, scratch)
    sampler = BucketSampler(encoded.train_src.lengths, encoded.train_tgt.lengths,
                            batch_size=None if d.batch_tokens else d.batch_size, batch_tokens=d.batch_tokens,
                            num_buckets=d.num_buckets, bucketing=d.bucketing, shuffle=True, seed=cfg.train.seed)
    logger.info("batches: %d per epoch in %d shapes (%s bucketing), %.0f%% of the padded positions are tokens",
                len(sampler), len(sampler.bucket_shapes), sampler.bucketing, 100 * sampler.real_fraction)
    if not d.batch_tokens and d.batch_size > sampler.num_examples:   # e.g. a token count given as --batch-size
        logger.warning("--batch-size %d is more than the %d training pairs: each batch is a whole bucket; for a "
                       "batch of about N target tokens give --batch-tokens N", d.batch_size, sampler.num_examples)
    resegment = subword_resegmenter(d, encoded, src_tok, tgt_tok) if d.subword_sampling else None
    batches = BatchIterator(encoded.train_src, encoded.train_tgt, sampler, prefetch=2, resegment=resegment)
    sampler.set_epoch(0)
    return TrainData(splits, src_tok, tgt_tok, encoded, sampler, batches, sums)
