"""The training data as the trainer sees it: SentencePiece models of both languages (trained on the training
split, or reused from the model directory), token ids of the training and dev pairs within the length limits,
and the resegmentation of training batches for subword regularization."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from nmt.batching import Resegment
from nmt.config import Config, ConfigError, DataConfig
from nmt.recipes import DatasetSplits
from nmt.tokenizer import Tokenizer, load_or_train_tokenizer, tokenizer_path
from nmt.workers import WorkerGroup

logger = logging.getLogger("nmt.data")


@dataclass
class EncodedData:
    """Token ids of the training and dev sets, after dropping pairs longer than the token limits."""
    train_src: List[List[int]]
    train_tgt: List[List[int]]
    dev_src: List[List[int]]
    dev_tgt: List[List[int]]
    train_src_text: List[str] = field(default_factory=list)   # the kept training pairs' text (for resegmenting)
    train_tgt_text: List[str] = field(default_factory=list)


def load_tokenizers(cfg: Config, model_dir: Path, splits: Optional[DatasetSplits],
                    workers: Optional[WorkerGroup] = None) -> Dict[str, Tokenizer]:
    """SentencePiece models of both languages: reused from the model directory, else trained on `splits.train`.
    In a distributed job only rank 0 trains them and the other workers load its files (SentencePiece training is
    not bit-identical across thread counts, and the workers must encode the data alike)."""
    d = cfg.data
    if workers is not None and workers.num_workers > 1:
        if workers.is_chief:
            load_tokenizers(cfg, model_dir, splits)
        names = [tokenizer_path(model_dir, lang).name for lang in (d.src_lang, d.tgt_lang)]
        model_dir = workers.share_files(model_dir, names)
        splits = None
    toks = {}
    for lang, lines in ((d.src_lang, splits.train.src if splits else None),
                        (d.tgt_lang, splits.train.tgt if splits else None)):
        if lines is None:
            toks[lang] = Tokenizer.load(tokenizer_path(model_dir, lang))
        else:
            toks[lang] = load_or_train_tokenizer(model_dir, lang, lines, d.vocab_size, d.spm_model_type)
    return toks


def encode_data(cfg: Config, splits: DatasetSplits, src_tok: Tokenizer, tgt_tok: Tokenizer) -> EncodedData:
    d = cfg.data
    tr_s, tr_t = src_tok.encode(splits.train.src), tgt_tok.encode(splits.train.tgt)
    keep = [i for i in range(len(tr_s)) if 0 < len(tr_s[i]) <= d.max_src_tokens and 0 < len(tr_t[i]) <= d.max_tgt_tokens]
    if len(keep) < len(tr_s):
        logger.info("dropped %d of %d training pairs longer than --max-src-tokens %d / --max-tgt-tokens %d "
                    "subword tokens (or empty after tokenization)", len(tr_s) - len(keep), len(tr_s),
                    d.max_src_tokens, d.max_tgt_tokens)
    if not keep:
        raise ConfigError("no training pair is left after the token-length filter; raise --max-src-tokens/--max-tgt-tokens")
    dv_s, dv_t = src_tok.encode(splits.dev.src), tgt_tok.encode(splits.dev.tgt)
    # dev loss uses every dev pair, truncated to the training limits so its batches fit the same shapes
    dv_s = [s[:d.max_src_tokens] for s in dv_s]
    dv_t = [t[:d.max_tgt_tokens] for t in dv_t]
    return EncodedData([tr_s[i] for i in keep], [tr_t[i] for i in keep], dv_s, dv_t,
                       [splits.train.src[i] for i in keep], [splits.train.tgt[i] for i in keep])


def check_subword_sampling(d: DataConfig) -> None:
    """ConfigError unless --subword-sampling is 0 (off) or strictly between 0 and 1."""
    if d.subword_sampling != 0.0 and not 0.0 < d.subword_sampling < 1.0:
        raise ConfigError(f"--subword-sampling must be between 0 and 1, exclusive (0 = off; {d.spm_model_type}: "
                          + ("smoothing alpha, 0.1-0.5 is usual" if d.spm_model_type == "unigram"
                             else "BPE-dropout rate, 0.1 is usual") + f"), got {d.subword_sampling}")


def subword_resegmenter(d: DataConfig, data: EncodedData, src_tok: Tokenizer, tgt_tok: Tokenizer) -> Resegment:
    """(example indices, seed) -> their training pairs segmented with SentencePiece sampling (see
    `Tokenizer.encode_sampled`): subword regularization, a new segmentation of each sentence every epoch."""
    check_subword_sampling(d)
    alpha = d.subword_sampling

    def resegment(indices, seed: int):
        return (src_tok.encode_sampled([data.train_src_text[i] for i in indices], alpha, seed),
                tgt_tok.encode_sampled([data.train_tgt_text[i] for i in indices], alpha, seed + 1))
    return resegment
