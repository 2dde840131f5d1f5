"""Batched greedy and beam search over the model interface (`Seq2SeqModel.encode`, `init_state`, `hybrid_step`).

All sentences (times beams) advance together: per step the model's hybridized step gives log-probabilities and
its new state, and one hybridized update block (`GreedyUpdate`, or `BeamUpdate` built from `RowTopK`,
`UpdateScores`, `TopK`, `Settled` and `SortStates`) chooses the tokens and back-pointers on the device and moves
the state's arrays that follow the hypotheses (as `DecoderState.reorder` would). The host reads only which
sentences are done, one step late (while the next step computes), so the device never waits for Python. Once a
quarter of the batch is done, the done sentences leave it (`DecoderState.select`; their hypotheses are final) and
the rest continue as a smaller batch. In beam search a sentence is done as soon as no active hypothesis can still
beat its n-best finished ones (`Settled`: the same result in fewer steps). The chosen tokens and back-pointers stay
on the device until a sentence leaves, then one copy brings them to the host to trace the hypotheses back. A
sentence stops growing at EOS or after its `max_len` tokens; every computation is per row, so a sentence decodes the
same alone or in a batch (its scores equal up to float32 rounding, which may depend on the batch shapes).

`model` may be a list of models sharing both vocabularies: they decode as an `nmt.models.ensemble.Ensemble`.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import mxnet as mx
import numpy as np
from mxnet import gluon

from nmt.models.base import DecoderState, Seq2SeqModel
from nmt.models.ensemble import as_model
from nmt.parallel import to_device
from nmt.tokenizer import BOS_ID, EOS_ID

MaxLen = Union[int, Sequence[int], np.ndarray]
Models = Union[Seq2SeqModel, Sequence[Seq2SeqModel]]
# A batch sheds its done sentences once this fraction of it is done (each change of batch shape re-plans the
# step graph, which costs about one step).
_COMPACT_FRACTION = 0.25
_NEG_INF = float("-inf")


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
    (log_probs, scores, lengths, finished, limits, t, lp_table, *moving) -> (token, scores, lengths, finished,
    t + 1, rows, emitted, sentence done, *moving reordered), every output but `sentence done` (B,) and t one entry
    per row; `moving`: the decoder state's arrays that follow the hypotheses.

    Within a row every candidate shares the score and the length penalty, so the sentence's best K candidates are
    among its rows' best K tokens: a top-k per row, then one over K*K, instead of one over K*V (the same choice,
    a fraction of the work). `nbest` > 0: a sentence is also done once `Settled`."""

    def __init__(self, beam_size: int, vocab_size: int, nbest: int = 0, **kwargs):
        super().__init__(**kwargs)
        self._K = beam_size
        R = min(beam_size, vocab_size)
        with self.name_scope():
            self.row_topk = ROW_TOPK(R)
            self.update_scores = UpdateScores()
            self.top_k = TopK(beam_size, R)
            self.settled = Settled(beam_size, nbest) if nbest else None
            self.sort_states = SortStates()

    def hybrid_forward(self, F, log_probs, scores, lengths, finished, limits, t, lp_table, *moving):
        # all active hypotheses of a sentence with max_len tokens are finished as they are
        fin = F.broadcast_logical_or(finished, F.broadcast_lesser_equal(limits, F.broadcast_like(t, limits)))
        cand_lp, cand_tok = self.row_topk(log_probs)                                          # (BK,R)
        raw, norm, cand_tok = self.update_scores(cand_lp, cand_tok, scores, lengths, fin, lp_table)
        pick, rows = self.top_k(norm)
        new_scores = F.take(F.reshape(raw, shape=(-1,)), pick)
        token = F.take(F.reshape(cand_tok, shape=(-1,)), pick)
        was_fin = F.take(fin, rows)
        is_eos = token == EOS_ID
        lengths = F.take(lengths, rows) + 1 - was_fin
        finished = F.broadcast_logical_or(F.broadcast_logical_or(was_fin, is_eos), new_scores == _NEG_INF)
        emitted = F.where(F.broadcast_logical_or(was_fin, is_eos), F.ones_like(token) * -1, token)
        t1 = t + 1
        # a sentence is done when every slot is finished (or will be, by its length limit, at the next step)
        slot_done = F.broadcast_logical_or(finished, F.broadcast_lesser_equal(limits, F.broadcast_like(t1, limits)))
        sentence_done = F.min(F.reshape(slot_done, shape=(-1, self._K)), axis=1)
        if self.settled is not None:
            sentence_done = F.broadcast_logical_or(
                sentence_done, self.settled(new_scores, lengths, finished, limits, lp_table))
        return (token, new_scores, lengths, finished, t1, rows, emitted, sentence_done,
                *self.sort_states(rows, *moving))


class GreedyUpdate(gluon.HybridBlock):
    """(log_probs, done, t, limits) -> (token, done, t + 1, emitted): the most probable token of every row;
    a row is done after EOS or its `limits` tokens, and emits -1 once done."""

    def hybrid_forward(self, F, log_probs, done, t, limits):
        token = F.argmax(log_probs, axis=-1)
        stop = F.broadcast_logical_or(done, token == EOS_ID)
        emitted = F.where(stop, F.ones_like(token) * -1, token)
        t1 = t + 1
        done = F.broadcast_logical_or(stop, F.broadcast_greater_equal(F.broadcast_like(t1, limits), limits))
        return token, done, t1, emitted


# Update blocks per (kind, sizes, device, state arrays), hybridized once and reused for every batch: they hold no
# parameters, and one per device keeps threads decoding on different devices from sharing a cached graph.
_UPDATES: Dict[tuple, gluon.HybridBlock] = {}


def _update_block(ctx: mx.Context, beam_size: int = 0, vocab_size: int = 0, nbest: int = 0,
                  num_moving: int = 0) -> gluon.HybridBlock:
    key = (str(ctx), beam_size, vocab_size, nbest, num_moving)
    if key not in _UPDATES:
        block = BeamUpdate(beam_size, vocab_size, nbest) if beam_size else GreedyUpdate()
        block.hybridize(static_alloc=True)
        _UPDATES[key] = block
    return _UPDATES[key]


@dataclasses.dataclass(frozen=True)
class _Hyps(DecoderState):
    """The search's own per-row variables, selected together with the decoder state when sentences leave:
    the last tokens, and for beam search the raw scores, lengths and finished flags; every row's length limit."""

    prev: mx.nd.NDArray
    limits: mx.nd.NDArray
    scores: Optional[mx.nd.NDArray] = None
    lengths: Optional[mx.nd.NDArray] = None
    finished: Optional[mx.nd.NDArray] = None


def _max_lens(max_len: MaxLen, batch: int) -> np.ndarray:
    """Per-sentence maximum output length (tokens, EOS excluded) as an int array of shape (batch,)."""
    arr = np.asarray(max_len)
    if arr.ndim == 0:
        arr = np.full(batch, int(arr))
    if arr.shape != (batch,):
        raise ValueError(f"max_len must be an int or have one entry per sentence ({batch}); got shape {arr.shape}")
    return np.maximum(arr.astype(np.int64), 0)


def _length_penalty(lengths: np.ndarray, alpha: float) -> np.ndarray:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + lengths) / 6.0) ** alpha


class _Segment:
    """Steps between two changes of the batch: its sentences (original numbering) and, per step, the
    back-pointers (beam index within the sentence) and the emitted tokens (-1: none), (steps, B, K) on the host."""

    def __init__(self, ids: np.ndarray, beams: np.ndarray, emitted: np.ndarray):
        self.ids, self.beams, self.emitted = ids, beams, emitted


# advance(state, hyps, t, first) -> (state, hyps, t + 1, emitted (BK,), back-pointer rows (BK,) or None, done (B,))
Advance = Callable[[DecoderState, _Hyps, mx.nd.NDArray, bool], tuple]


class _Run:
    """The steps of one search over a batch that sheds its done sentences: what has been emitted, per segment,
    and per original sentence its final `_Hyps` row values (scores and lengths) when it left."""

    def __init__(self, batch: int, K: int):
        self.ids, self.K = np.arange(batch), K
        self.segments: List[_Segment] = []
        self.finals: Dict[int, Tuple[np.ndarray, np.ndarray]] = {}
        self.records: list = []

    def close(self) -> None:
        """Bring the current segment's tokens and back-pointers to the host."""
        if self.records:
            n, B, K = len(self.records), len(self.ids), self.K
            emitted = mx.nd.stack(*[e for e, _ in self.records]).asnumpy().astype(np.int64).reshape(n, B, K)
            if self.records[0][1] is None:
                beams = np.zeros_like(emitted)
            else:
                rows = mx.nd.stack(*[r for _, r in self.records]).asnumpy().astype(np.int64).reshape(n, B, K)
                beams = rows - (np.arange(B) * K)[None, :, None]
            self.segments.append(_Segment(self.ids, beams, emitted))
        self.records = []

    def finalize(self, positions: np.ndarray, hyps: _Hyps) -> None:
        """Keep the raw scores and lengths of the sentences at `positions` of the current batch (beam search)."""
        if hyps.scores is None:
            return
        raw, lengths = (x.asnumpy().reshape(len(self.ids), self.K) for x in (hyps.scores, hyps.lengths))
        for p in positions:
            self.finals[int(self.ids[p])] = (raw[p], lengths[p])


def _search(advance: Advance, state: DecoderState, hyps: _Hyps, batch: int, K: int, num_steps: int) -> _Run:
    """Run `advance` for up to `num_steps` steps over `batch` sentences of K rows each; the done flags of a step are
    read while the next one runs, and a step queued after all were done is dropped."""
    ctx = hyps.prev.context
    run = _Run(batch, K)
    t, flags = to_device(np.zeros(1), ctx), None
    for step in range(num_steps):
        new_state, new_hyps, new_t, emitted, rows, new_flags = advance(state, hyps, t, step == 0)
        done = None if flags is None else flags.asnumpy() > 0.5
        if done is not None and done.all():
            break   # everything was done before this step: drop it
        state, hyps, t, flags = new_state, new_hyps, new_t, new_flags
        run.records.append((emitted, rows))
        if done is not None and done.sum() >= max(1.0, _COMPACT_FRACTION * len(run.ids)):
            # done before this step means done after it: those sentences leave with their current state
            run.close()
            run.finalize(np.flatnonzero(done), hyps)
            keep = np.flatnonzero(~done)
            rows_kept = to_device((keep[:, None] * K + np.arange(K)).reshape(-1), ctx)
            state, hyps = state.select(rows_kept), hyps.select(rows_kept)
            flags = mx.nd.take(flags, to_device(keep, ctx))
            run.ids = run.ids[keep]
    run.close()
    run.finalize(np.arange(len(run.ids)), hyps)
    return run


def _trace(segments: List[_Segment], batch: int, K: int) -> List[np.ndarray]:
    """Per original sentence, (steps, K) tokens of its final slots, traced back through the back-pointers."""
    slots: Dict[int, np.ndarray] = {}
    parts: Dict[int, list] = {i: [] for i in range(batch)}
    for seg in reversed(segments):
        slot = np.stack([slots.get(int(i), np.arange(K)) for i in seg.ids])   # (B, K); new arrivals start here
        history = np.empty_like(seg.emitted)
        for t in range(len(seg.emitted) - 1, -1, -1):
            history[t] = np.take_along_axis(seg.emitted[t], slot, axis=1)
            slot = np.take_along_axis(seg.beams[t], slot, axis=1)
        for b, i in enumerate(seg.ids):
            slots[int(i)] = slot[b]
            parts[int(i)].append(history[:, b])
    return [np.concatenate(parts[i][::-1], axis=0) if parts[i] else np.zeros((0, K), np.int64)
            for i in range(batch)]


def greedy_search(model: Models, src: mx.nd.NDArray, src_len: mx.nd.NDArray, max_len: MaxLen) -> List[List[int]]:
    """Most probable next token at each step; per sentence the token ids without BOS/EOS. `model`: a model or a
    list of models (an ensemble)."""
    model = as_model(model)
    batch, ctx = src.shape[0], src.context
    limits = _max_lens(max_len, batch)
    num_steps = int(limits.max(initial=0))
    if num_steps == 0:
        return [[] for _ in range(batch)]
    update = _update_block(ctx)

    def advance(state, hyps, t, first):
        log_probs, state, _ = model.hybrid_step(hyps.prev, state)
        token, done, t1, emitted = update(log_probs, hyps.finished, t, hyps.limits)
        return state, dataclasses.replace(hyps, prev=token, finished=done), t1, emitted, None, done

    state = model.init_state(model.encode(src, src_len))
    hyps = _Hyps(prev=to_device(np.full(batch, BOS_ID), ctx), limits=to_device(limits, ctx),
                 finished=to_device(limits == 0, ctx))
    run = _search(advance, state, hyps, batch, 1, num_steps)
    return [[int(x) for x in tokens[:, 0] if x >= 0] for tokens in _trace(run.segments, batch, 1)]


def _check_beam_args(beam_size: int, nbest: int) -> None:
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1 (got {beam_size})")
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest must be between 1 and beam_size={beam_size} (got {nbest})")


def beam_search(model: Models, src: mx.nd.NDArray, src_len: mx.nd.NDArray, beam_size: int, max_len: MaxLen,
                alpha: float = 0.6, nbest: int = 1, early_stop: bool = True) -> List[List[Tuple[List[int], float]]]:
    """Beam search; per sentence up to `nbest` (token ids without BOS/EOS, score), best first.

    Scores are summed log-probabilities (the EOS one included) divided by the GNMT length penalty
    ((5 + |Y|) / 6) ** alpha, |Y| counting EOS. Finished hypotheses keep their beam slot and compete by
    that score with the extensions of the active ones; a sentence is done when all its slots are
    finished, and active hypotheses are finished as they are after `max_len` tokens. With beam 1 this is
    exactly greedy search. `model`: a model or a list of models (an ensemble).

    With `early_stop` (and alpha >= 0) a sentence stops as soon as no active hypothesis can still beat its
    `nbest`-th best finished one (`Settled`): the same result, fewer steps.
    """
    _check_beam_args(beam_size, nbest)
    model = as_model(model)
    batch, K, ctx = src.shape[0], beam_size, src.context
    limits = _max_lens(max_len, batch)
    num_steps = int(limits.max(initial=0))
    if num_steps == 0:
        return [[([], 0.0)] for _ in range(batch)]
    state = model.init_state(model.encode(src, src_len))
    # stopping a sentence once its result is settled is exact for any non-decreasing length penalty
    update = _update_block(ctx, K, model.tgt_vocab_size, nbest if early_stop and alpha >= 0 else 0,
                           len(state.arrays(moving_only=True)))
    # penalties of every possible length, computed in float64 once and rounded to float32 once
    lp_table = to_device(_length_penalty(np.arange(num_steps + 2), alpha), ctx)
    bos = to_device(np.full(batch, BOS_ID), ctx)

    def advance(state, hyps, t, first):
        # the first step's K beams of a sentence are one hypothesis: the model runs on one row per sentence
        log_probs, state, _ = model.hybrid_step(bos if first else hyps.prev, state)
        if first and K > 1:
            log_probs, state = mx.nd.repeat(log_probs, K, axis=0), state.repeat(K)
        token, scores, lengths, finished, t1, rows, emitted, done, *moving = update(
            log_probs, hyps.scores, hyps.lengths, hyps.finished, hyps.limits, t, lp_table,
            *state.arrays(moving_only=True))
        hyps = dataclasses.replace(hyps, prev=token, scores=scores, lengths=lengths, finished=finished)
        return state.with_arrays(moving, moving_only=True), hyps, t1, emitted, rows, done

    scores = np.full((batch, K), -np.inf)
    scores[:, 0] = 0.0  # one live hypothesis per sentence at the start, so beams do not duplicate it
    zeros = np.zeros(batch * K)
    hyps = _Hyps(prev=to_device(np.full(batch * K, BOS_ID), ctx), limits=to_device(np.repeat(limits, K), ctx),
                 scores=to_device(scores.reshape(-1), ctx), lengths=to_device(zeros, ctx),
                 finished=to_device(zeros, ctx))
    run = _search(advance, state, hyps, batch, K, num_steps)
    results: List[List[Tuple[List[int], float]]] = []
    for b, history in enumerate(_trace(run.segments, batch, K)):
        raw, lengths = run.finals[b]
        final = raw.astype(np.float64) / _length_penalty(lengths.astype(np.int64), alpha)
        live = [k for k in np.argsort(-final, kind="stable") if np.isfinite(final[k])]
        results.append([([int(x) for x in history[:, k] if x >= 0], float(final[k])) for k in live[:nbest]])
    return results
