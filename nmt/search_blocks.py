"""The hybridized blocks of a search step (`nmt.search`): per step one cached call chooses the tokens and
back-pointers on the device (`GreedyUpdate`, or `BeamUpdate` built from `RowTopK`, `UpdateScores`, `TopK`,
`Settled` and `SortStates`) and moves the decoder state's arrays that follow the hypotheses. Both first set the
pieces no translation holds to -inf (`NeverChosen`: <pad> and <s>), so no search chooses them. While sentences are
within their target prefixes, `Forcing` first masks the step's log-probabilities to the prefix's tokens
(`ForceTokens`), or to those that can write its last word (`MaskTokens`).

A hypothesis's length (`lengths`, EOS counted) is the number of steps it has taken while active, so the rules that
depend on how far a row has come (its length limit) read its own length, not a step counter of the batch: rows
that joined a running batch later (`nmt.search.BeamStream`) follow the same rules.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Callable, Dict, Optional, Sequence, Union

import mxnet as mx
import numpy as np
from mxnet import gluon

from nmt.parallel import to_device
from nmt.tokenizer import BOS_ID, DROPPED_IDS, EOS_ID, PAD_ID

_NEG_INF = float("-inf")
_DROPPED_NAMES = {PAD_ID: "<pad>", BOS_ID: "<s>"}   # (`DROPPED_IDS`)


class NeverChosen(gluon.HybridBlock):
    """log_probs (N,V) -> log_probs with <pad> and <s> at -inf: pieces no translation holds (a text drops them,
    `nmt.tokenizer.DROPPED_IDS`), which a model's step may still give some probability (an undertrained one, or label
    smoothing's share). Every update block applies it first, so greedy search, sampling and beam search (n-best,
    ensembles, target prefixes) never choose them and know no ids; fairseq and Sockeye mask them alike."""

    def hybrid_forward(self, F, log_probs):
        column = F.contrib.arange_like(log_probs, axis=1)                                     # (V,)
        banned = F.zeros_like(column)
        for token in DROPPED_IDS:
            banned = banned + (column == token)
        row = F.where(banned, F.ones_like(column) * _NEG_INF, F.zeros_like(column))
        return F.broadcast_add(log_probs, F.reshape(row, shape=(1, -1)))


class RowTopK(gluon.HybridBlock):
    """The k best tokens of every row of log-probabilities (N,V): values and ids (N,k), best first."""

    def __init__(self, k: int, **kwargs):
        super().__init__(**kwargs)
        self._k = k

    def hybrid_forward(self, F, log_probs):
        return F.topk(log_probs, axis=-1, k=self._k, ret_typ="both")


# The hook for an optional accelerated kernel: the block class `BeamUpdate` computes each step's per-row top-k
# with (called as ROW_TOPK(k)). RowTopK, on MXNet's operators, is the reference it must match.
ROW_TOPK: Callable[[int], gluon.HybridBlock] = RowTopK


class UpdateScores(gluon.HybridBlock):
    """Candidates (BK,R) of every hypothesis -> their summed log-probabilities (raw) and length-normalized scores.
    A finished hypothesis (`fin`) has one candidate, itself under EOS, at an unchanged score."""

    def hybrid_forward(self, F, cand_lp, cand_tok, scores, lengths, fin, lp_table):
        column = F.broadcast_like(F.reshape(F.contrib.arange_like(cand_lp, axis=1), shape=(1, -1)), cand_lp)
        fin_b = F.broadcast_like(F.reshape(fin, shape=(-1, 1)), cand_lp)
        cand_lp = F.where(fin_b, F.where(column == 0, F.zeros_like(cand_lp), F.ones_like(cand_lp) * _NEG_INF),
                          cand_lp)
        cand_tok = F.where(fin_b, F.ones_like(cand_tok) * EOS_ID, cand_tok)
        raw = F.broadcast_add(cand_lp, F.reshape(scores, shape=(-1, 1)))
        penalty = F.take(lp_table, lengths + 1 - fin)                                  # of the candidate length
        return raw, F.broadcast_div(raw, F.reshape(penalty, shape=(-1, 1))), cand_tok


class TopK(gluon.HybridBlock):
    """Per sentence, its K best candidates among the K*R of its rows: their flat positions in the (BK,R)
    candidates and the rows (BK,) they extend (the back-pointers)."""

    def __init__(self, beam_size: int, row_k: int, **kwargs):
        super().__init__(**kwargs)
        self._K, self._R = beam_size, row_k

    def hybrid_forward(self, F, norm):
        K, R = self._K, self._R
        top = F.topk(F.reshape(norm, shape=(-1, K * R)), axis=-1, k=K, ret_typ="indices")   # (B,K)
        first_row = F.reshape(F.contrib.arange_like(top, axis=0), shape=(-1, 1)) * K
        pick = F.reshape(F.broadcast_add(top, first_row * R), shape=(-1,))
        rows = F.reshape(F.broadcast_add(F.floor(top / R), first_row), shape=(-1,))
        return pick, rows


class Settled(gluon.HybridBlock):
    """Per sentence: whether its `nbest` best finished hypotheses can no longer be displaced. An active
    hypothesis with raw score s < 0 can only reach a normalized score <= s / lp(limit + 1) (raw scores only
    fall, an ensemble's mean log-probabilities being <= 0 too, and the penalty only grows with length), so once
    the nbest-th best finished score is at least that bound for every active slot, the rest of the search cannot
    change the n-best list: the sentence stops early with the same result (active slots, scored as they are,
    rank below it)."""

    def __init__(self, beam_size: int, nbest: int, **kwargs):
        super().__init__(**kwargs)
        self._K, self._nbest = beam_size, nbest

    def hybrid_forward(self, F, raw, lengths, finished, limits, lp_table):
        K, inf = self._K, float("inf")
        norm = raw / F.take(lp_table, lengths)
        fin_norm = F.reshape(F.where(finished, norm, F.ones_like(norm) * -inf), shape=(-1, K))
        nth = F.min(F.topk(fin_norm, axis=-1, k=self._nbest, ret_typ="value"), axis=1)          # (B,)
        bound = raw / F.take(lp_table, limits + 1)
        best_active = F.max(F.reshape(F.where(finished, F.ones_like(bound) * -inf, bound), shape=(-1, K)), axis=1)
        return F.broadcast_logical_and(nth > -inf, nth >= best_active)


class SortStates(gluon.HybridBlock):
    """The arrays of a decoder state that follow the hypotheses (`DecoderState.arrays(moving_only=True)`), taken
    at the back-pointer rows: `DecoderState.reorder` inside the update's graph, one cached call for any number of
    arrays (a Transformer's per-layer caches)."""

    def hybrid_forward(self, F, rows, *moving):
        return tuple(F.take(a, rows) for a in moving)


class BeamUpdate(gluon.HybridBlock):
    """One beam-search update for B sentences x K beams (rows b*K + k), see `beam_search` for the rules:
    (log_probs, scores, lengths, finished, limits, lp_table, *moving) -> (token, scores, lengths, finished, rows,
    emitted, sentence done, *moving reordered), every output but `sentence done` (B,) one entry per row; `moving`:
    the decoder state's arrays that follow the hypotheses. An active hypothesis's length is the steps its sentence
    has taken, so a row reaches its sentence's `limits` (maximum length) when its length does.

    Within a row every candidate shares the score and the length penalty, so the sentence's best K candidates are
    among its rows' best K tokens: a top-k per row, then one over K*K, instead of one over K*V (the same choice,
    a fraction of the work). `nbest` > 0: a sentence is also done once `Settled`."""

    def __init__(self, beam_size: int, vocab_size: int, nbest: int = 0, **kwargs):
        super().__init__(**kwargs)
        self._K = beam_size
        R = min(beam_size, vocab_size)
        with self.name_scope():
            self.never_chosen = NeverChosen()
            self.row_topk = ROW_TOPK(R)
            self.update_scores = UpdateScores()
            self.top_k = TopK(beam_size, R)
            self.settled = Settled(beam_size, nbest) if nbest else None
            self.sort_states = SortStates()

    def hybrid_forward(self, F, log_probs, scores, lengths, finished, limits, lp_table, *moving):
        # all active hypotheses of a sentence with max_len tokens are finished as they are
        fin = F.broadcast_logical_or(finished, limits <= lengths)
        cand_lp, cand_tok = self.row_topk(self.never_chosen(log_probs))                       # (BK,R)
        raw, norm, cand_tok = self.update_scores(cand_lp, cand_tok, scores, lengths, fin, lp_table)
        pick, rows = self.top_k(norm)
        new_scores = F.take(F.reshape(raw, shape=(-1,)), pick)
        token = F.take(F.reshape(cand_tok, shape=(-1,)), pick)
        was_fin = F.take(fin, rows)
        is_eos = token == EOS_ID
        lengths = F.take(lengths, rows) + 1 - was_fin
        finished = F.broadcast_logical_or(F.broadcast_logical_or(was_fin, is_eos), new_scores == _NEG_INF)
        emitted = F.where(F.broadcast_logical_or(was_fin, is_eos), F.ones_like(token) * -1, token)
        # a sentence is done when every slot is finished (or will be, by its length limit, at the next step)
        slot_done = F.broadcast_logical_or(finished, limits <= lengths)
        sentence_done = F.min(F.reshape(slot_done, shape=(-1, self._K)), axis=1)
        if self.settled is not None:
            sentence_done = F.broadcast_logical_or(
                sentence_done, self.settled(new_scores, lengths, finished, limits, lp_table))
        return (token, new_scores, lengths, finished, rows, emitted, sentence_done,
                *self.sort_states(rows, *moving))


class ForceTokens(gluon.HybridBlock):
    """(log_probs (N,V), forced (N,)) -> log_probs where a row with a forced token (>= 0) keeps only that token's
    log-probability (-inf elsewhere) and a row with -1 keeps all: any search or sampler then takes the forced token
    (a target prefix, `nmt.search`) and scores it by the model."""

    def hybrid_forward(self, F, log_probs, forced):
        column = F.reshape(F.contrib.arange_like(log_probs, axis=1), shape=(1, -1))
        forced = F.reshape(forced, shape=(-1, 1))
        keep = F.broadcast_logical_or(F.broadcast_equal(column, forced), forced < 0)
        return F.where(keep, log_probs, F.ones_like(log_probs) * _NEG_INF)


class MaskTokens(gluon.HybridBlock):
    """(log_probs (N,V), mask (N,V)) -> log_probs at -inf where the mask is 0: the tokens a row may take (a word of
    a target prefix being completed, `Forcing`)."""

    def hybrid_forward(self, F, log_probs, mask):
        return F.where(mask, log_probs, F.ones_like(log_probs) * _NEG_INF)


class GreedyUpdate(gluon.HybridBlock):
    """(log_probs, done, steps, limits, scores) -> (token, done, steps, emitted, scores): the most probable token of
    every row, or with `sample_top` >= 0 a token drawn from the row's distribution renormalized over its
    `sample_top` most probable tokens (0: over all); a row is done after EOS or its `limits` tokens (`steps`: the
    tokens it has taken, EOS included), and emits -1 once done. `scores` sums the log-probabilities of the tokens
    taken, as beam search's raw scores do."""

    def __init__(self, sample_top: int = -1, **kwargs):
        super().__init__(**kwargs)
        self._top = sample_top
        with self.name_scope():
            self.never_chosen = NeverChosen()

    def hybrid_forward(self, F, log_probs, done, steps, limits, scores):
        log_probs = self.never_chosen(log_probs)
        if self._top < 0:
            token = F.argmax(log_probs, axis=-1)
        elif self._top == 0:   # softmax: an ensemble's mean log-probabilities are not normalized
            token = F.sample_multinomial(F.softmax(log_probs, axis=-1), dtype="float32")
        else:
            values, ids = F.topk(log_probs, axis=-1, k=self._top, ret_typ="both")
            token = F.pick(ids, F.sample_multinomial(F.softmax(values, axis=-1), dtype="float32"), axis=-1)
        stop = F.broadcast_logical_or(done, token == EOS_ID)
        emitted = F.where(stop, F.ones_like(token) * -1, token)
        scores = scores + F.where(done, F.zeros_like(scores), F.pick(log_probs, token, axis=-1))
        steps = steps + 1 - done
        return token, F.broadcast_logical_or(stop, limits <= steps), steps, emitted, scores


@dataclasses.dataclass(frozen=True)
class TargetPrefix:
    """What a sentence's translations must start with: `tokens`, then optionally a word to complete, as a table:
    `allowed[o]` (V,) says which tokens may follow the first o characters of the word, and a token writes
    `sizes[token]` characters (one that writes at least the rest of the word completes it)."""
    tokens: Sequence[int]
    allowed: Optional[np.ndarray] = None   # (characters of the word, V) bool
    sizes: Optional[np.ndarray] = None     # (V,) int

    @property
    def steps(self) -> int:
        """The most steps it can take: its tokens and a token per character of the word."""
        return len(self.tokens) + (0 if self.allowed is None else len(self.allowed))


def as_prefix(prefix: Union[None, Sequence[int], TargetPrefix]) -> Optional[TargetPrefix]:
    """A sentence's prefix (token ids or a `TargetPrefix`) as a `TargetPrefix`; None when it forces nothing."""
    if prefix is not None and not isinstance(prefix, TargetPrefix):
        prefix = TargetPrefix(prefix)
    return prefix if prefix is not None and prefix.steps else None


class _Progress:
    """How far one sentence has come through its `TargetPrefix`: tokens taken, then each row's characters of the
    word written (`offsets`; None until the tokens are taken)."""

    def __init__(self, prefix: TargetPrefix):
        self.prefix, self.taken = prefix, 0
        self.offsets: Optional[np.ndarray] = None


def _check_never_forced(prefixes: Sequence[Optional[TargetPrefix]], banned: Sequence[int]) -> None:
    """ValueError naming the first prefix token that is <pad>, <s> (`DROPPED_IDS`) or in `banned`: the search sets
    it to -inf after forcing it, so greedy search wrote <pad> with a score of -inf and beam search no translation."""
    never = {int(t) for t in banned}
    for n, prefix in enumerate(prefixes):
        for j, token in enumerate(() if prefix is None else prefix.tokens):
            if int(token) in DROPPED_IDS:
                raise ValueError(f"prefixes[{n}][{j}] is {_DROPPED_NAMES[int(token)]} (id {int(token)}), which no "
                                 "search writes (a translation's text drops it): a prefix holds only tokens a "
                                 "translation can")
            if int(token) in never:
                raise ValueError(f"prefixes[{n}][{j}] is token {int(token)}, which `banned` keeps this search from "
                                 "taking: a prefix holds only tokens the search can take")


class Forcing:
    """The target prefixes of the sentences being searched, by sentence id: `apply` masks a step's
    log-probabilities to the token each row must take (`ForceTokens`) or, while a word is being completed, to the
    tokens that fit it (`MaskTokens`); `after` follows the tokens chosen (read from the device only while a word is
    being completed). Once no sentence is within its prefix, both do nothing."""

    def __init__(self, ctx: mx.Context):
        self.ctx = ctx
        self.progress: Dict[int, _Progress] = {}

    def add(self, ids: Sequence[int], prefixes: Optional[Sequence[Union[None, Sequence[int], TargetPrefix]]],
            limits: np.ndarray, banned: Sequence[int] = ()) -> np.ndarray:
        """Take the prefixes of sentences `ids` (token ids or `TargetPrefix`); their length limits raised by the
        steps the prefixes can take. A prefix token the search never takes (<pad>, <s>: `NeverChosen`; `banned`)
        is a ValueError naming it: forced, it would leave its row no token to take."""
        if prefixes is None:
            return limits
        if len(prefixes) != len(ids):
            raise ValueError(f"prefixes must have one entry per sentence ({len(ids)}); got {len(prefixes)}")
        prefixes = [as_prefix(p) for p in prefixes]
        _check_never_forced(prefixes, banned)   # (before any is taken: a refused call leaves the search as it was)
        limits = limits.copy()
        for n, (i, prefix) in enumerate(zip(ids, prefixes)):
            if prefix is not None:
                self.progress[int(i)] = _Progress(prefix)
                limits[n] += prefix.steps
        return limits

    def apply(self, log_probs: mx.nd.NDArray, ids: np.ndarray, beam: int) -> mx.nd.NDArray:
        """`log_probs` of this step of the sentences `ids` (`beam` rows each), masked to the prefixes."""
        if not self.progress:
            return log_probs
        forced = np.full(len(ids), -1.0, dtype=np.float32)
        words = []   # (position, progress) of the sentences completing a word at this step
        for n, i in enumerate(ids.tolist()):
            p = self.progress.get(i)
            if p is None:
                continue
            if p.taken < len(p.prefix.tokens):
                forced[n] = p.prefix.tokens[p.taken]
                p.taken += 1
                if p.taken == len(p.prefix.tokens) and p.prefix.allowed is None:
                    self.discard(i)   # the rest of its steps are free
                continue
            if p.offsets is None:   # its tokens are taken: the word starts
                p.offsets = np.zeros(beam, np.int64)
            words.append((n, p))
        if not words:
            return update_block(self.ctx, force="tokens")(log_probs, to_device(np.repeat(forced, beam), self.ctx))
        mask = np.ones((len(ids), beam, log_probs.shape[1]), dtype=np.uint8)
        for n in np.flatnonzero(forced >= 0):
            mask[n] = 0
            mask[n, :, int(forced[n])] = 1
        for n, p in words:
            within = p.offsets < len(p.prefix.allowed)
            mask[n, within] = p.prefix.allowed[p.offsets[within]]
        mask = mx.nd.array(mask.reshape(len(ids) * beam, -1), ctx=self.ctx, dtype="uint8")
        return update_block(self.ctx, force="mask")(log_probs, mask)

    def after(self, ids: np.ndarray, beam: int, token: mx.nd.NDArray, rows: Optional[mx.nd.NDArray]) -> None:
        """Follow the tokens chosen at this step (`rows`: the back-pointers, None for one row per sentence) through
        the words being completed: the only time the search waits for the device at a step."""
        if not self.progress:
            return
        words = [(n, i) for n, i in enumerate(ids.tolist())
                 if i in self.progress and self.progress[i].offsets is not None]
        if not words:
            return
        tokens = token.asnumpy().astype(np.int64).reshape(-1, beam)
        parents = np.arange(len(ids) * beam) if rows is None else rows.asnumpy().astype(np.int64)
        parents = parents.reshape(-1, beam) - np.arange(len(ids))[:, None] * beam   # rows within the sentence
        for n, i in words:
            p = self.progress[i]
            length = len(p.prefix.allowed)
            start = p.offsets[parents[n]]
            # a row whose token did not fit (a candidate at -inf) or that wrote the rest of the word is past it
            fits = (start < length) & p.prefix.allowed[np.minimum(start, length - 1), tokens[n]]
            p.offsets = np.where(fits, start + p.prefix.sizes[tokens[n]], length)
            if (p.offsets >= length).all():
                self.discard(i)

    def discard(self, i: int) -> None:
        """Forget sentence `i` (past its prefix, or gone from the search)."""
        self.progress.pop(i, None)


# Update blocks per (thread, kind, sizes, device, state arrays), hybridized once and reused for every batch: they
# hold no parameters. Two threads never share one: building one block's graph in two threads at once fails inside
# Gluon (each enters the block's name scope, and the first to leave clears the other's: "'NoneType' object has no
# attribute '__exit__'"), as two models served at once did (nmt-serve runs a thread per model).
_UPDATES: Dict[tuple, gluon.HybridBlock] = {}


def update_block(ctx: mx.Context, beam_size: int = 0, vocab_size: int = 0, nbest: int = 0,
                  num_moving: int = 0, sample_top: int = -1, force: str = "") -> gluon.HybridBlock:
    """The update block of a search (`BeamUpdate` with a `beam_size`, else `GreedyUpdate`), or with `force` the
    block of a target prefix ("tokens": `ForceTokens`, "mask": `MaskTokens`), for device `ctx`."""
    key = (threading.get_ident(), ROW_TOPK, str(ctx), beam_size, vocab_size, nbest, num_moving, sample_top, force)
    if key not in _UPDATES:
        if force:
            block = ForceTokens() if force == "tokens" else MaskTokens()
        else:
            block = BeamUpdate(beam_size, vocab_size, nbest) if beam_size else GreedyUpdate(sample_top)
        block.hybridize(static_alloc=True)
        _UPDATES[key] = block
    return _UPDATES[key]
