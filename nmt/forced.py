"""Forced decoding: how probable a model finds given translations (`nmt-score`), as Sockeye's `sockeye-score`,
fairseq's `--score-reference` and `marian-scorer` do: to filter a noisy parallel corpus, rerank the n-best lists of
other systems, or compare checkpoints on references.

A pair's score is the score beam search gives that translation: the summed log-probabilities of its target pieces
and EOS under the model (teacher forced by `Seq2SeqModel.log_probs`, one pass per batch; an ensemble's mean, as in
its search), divided by the GNMT length penalty ((5 + |Y|) / 6) ** alpha, |Y| counting EOS. With alpha 0 it is the
plain log-probability. Scoring `nmt-translate --nbest` output gives back its scores (to float32 rounding) wherever
SentencePiece splits a translation's text into the pieces the search chose.

Sources are prepared as for translation (normalized, cut at `--max-input-tokens` with a warning); a target longer
than that is an error naming its line, since a cut translation would be scored as another sentence.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import List, Optional, Sequence

import mxnet as mx
import numpy as np

from nmt.api_inputs import BYTES_LIKE, checked_decode, listed
from nmt.batching import make_batch
from nmt.corpus import CorpusError
from nmt.search import length_limits, length_penalty
from nmt.text import count_lines, lone_surrogate, normalize
from nmt.tokenizer import EOS_ID
from nmt.translate import Translator

SCORE_CHUNK = 10_000   # pairs nmt-score scores and writes at a time


@dataclass
class Scored:
    """One pair's score (higher is better) and where it comes from."""

    score: float                   # log_prob / length penalty
    log_prob: float                # summed over the target's pieces and EOS
    pieces: List[str]              # the target's SentencePiece pieces, then "</s>"
    piece_log_probs: List[float]   # one per entry of `pieces`

    def as_json(self) -> dict:
        return {"score": round(self.score, 6), "log_prob": round(self.log_prob, 6), "length": len(self.pieces),
                "pieces": self.pieces, "piece_log_probs": [round(x, 6) for x in self.piece_log_probs]}


def score_ids(translator: Translator, src_ids: Sequence[List[int]], tgt_ids: Sequence[List[int]],
              alpha: float) -> List[Scored]:
    """Scores of target ids (without BOS/EOS) given source ids (without EOS), in input order, under the translator's
    model (or ensemble), in length-sorted batches of its decode batch size, shared out among its devices."""
    if len(src_ids) != len(tgt_ids):
        raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
    token_lps: List[np.ndarray] = [np.zeros(0)] * len(src_ids)
    order = sorted(range(len(src_ids)), key=lambda i: (len(tgt_ids[i]), len(src_ids[i])))

    def run(ctx: mx.Context, model, chunk: List[int]) -> None:
        b = make_batch(src_ids, tgt_ids, chunk, max(len(src_ids[i]) for i in chunk) + 1,
                       max(len(tgt_ids[i]) for i in chunk) + 1)
        src, src_len, tgt_in, tgt_out = (mx.nd.array(a, ctx=ctx, dtype="float32")
                                         for a in (b.src, b.src_len, b.tgt_in, b.tgt_out))
        picked = mx.nd.pick(model.log_probs(src, src_len, tgt_in), tgt_out, axis=-1).asnumpy()
        for r, i in enumerate(chunk):
            token_lps[i] = picked[r, :b.tgt_len[r]].astype(np.float64)
    translator.share_out(order, run)
    out = []
    for y, lps in zip(tgt_ids, token_lps):
        log_prob = float(lps.sum())
        pieces = [translator.tgt_tok.piece(t) for t in y] + [translator.tgt_tok.piece(EOS_ID)]
        penalty = float(length_penalty(np.array(len(y) + 1), alpha))
        out.append(Scored(log_prob / penalty, log_prob, pieces, lps.tolist()))
    return out


def target_ids(translator: Translator, targets: Sequence[str], first_line: int = 1,
               name: str = "target", limit: Optional[int] = None) -> List[List[int]]:
    """Normalized, tokenized translations; a CorpusError naming `name`:line for one longer than `limit` pieces
    (default: 3 x what nmt-translate may write, a prefix and the search's pieces: every output of it is scored)."""
    if not listed(targets):   # a string: one per character (bytes: per byte; a dict: its keys)
        raise TypeError(f"the translations must be a list of strings, got {type(targets).__name__}: give " + (
            "[text.decode('utf-8')]" if isinstance(targets, bytes) else "[bytes(text).decode('utf-8')]" if
            isinstance(targets, BYTES_LIKE) else "list(d.values())" if isinstance(targets, Mapping) else "[text]"))
    limit_name = "the limit"
    if not limit:   # what nmt-translate may write: a target prefix of up to --max-input-tokens pieces, then the
        # search's pieces for the longest source; 3 times that, as a byte piece written as U+FFFD reads back as 3
        d = checked_decode(translator.decode)
        limit = 3 * (d.max_input_tokens + int(length_limits([d.max_input_tokens + 1], d.max_len_a, d.max_len_b)[0]))
        limit_name = (f"3 x (--max-input-tokens {d.max_input_tokens} + the search's most for such a source, the "
                      f"model's max_len_a {d.max_len_a_text} x {d.max_input_tokens + 1} + max_len_b {d.max_len_b})")
    targets = list(targets)   # read twice below; an iterator would be empty the second time
    for i, t in enumerate(targets):
        if not isinstance(t, str):
            raise TypeError(f"{name}:{first_line + i}: the translation is {type(t).__name__}, not str")
        surrogate = lone_surrogate(t)
        if surrogate:   # SentencePiece would fail on it with a TypeError
            raise CorpusError(f"{name}:{first_line + i}: the translation has a lone surrogate {surrogate}: it is not "
                              "a character; give valid Unicode")
        if count_lines(t) > 1:
            raise CorpusError(f"{name}:{first_line + i}: the translation has text on {count_lines(t)} lines: give one "
                              "line per translation")
    ids = translator.tgt_tok.encode([normalize(t) for t in targets])
    for i, y in enumerate(ids):
        if len(y) > limit:
            raise CorpusError(f"{name}:{first_line + i}: the translation has {len(y)} subword tokens, more than "
                              f"{limit}, {limit_name}; raise --max-input-tokens (decode.max_input_tokens) for it: "
                              "cut, it would be another sentence")
    return ids


def checked_translator(translator, where: str) -> Translator:
    """`translator`, or a TypeError naming `where`'s argument: a model directory given for it, most likely."""
    if not isinstance(translator, Translator):
        hint = (f": load it first, {where}(Translator.from_dir({str(translator)!r}), ...)"
                if isinstance(translator, (str, os.PathLike)) else "")
        raise TypeError(f"{where}: translator must be an nmt.translate.Translator, got {type(translator).__name__}"
                        + hint)
    return translator


def score_lines(translator: Translator, sources: Sequence[str], targets: Sequence[str], first_line: int = 1,
                target_name: str = "target") -> List[Scored]:
    """Scores of translations `targets` of `sources` (raw text, line-aligned) with the translator's length penalty;
    line numbers in warnings and errors count from `first_line`."""
    checked_translator(translator, "score_lines")
    tgt_ids = target_ids(translator, targets, first_line, target_name)
    return score_ids(translator, translator.source_ids(sources, first_line, "sources"), tgt_ids,
                     translator.decode.length_penalty_alpha)
