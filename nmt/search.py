"""Batched greedy and beam search over `Seq2Seq.encode` and the model's decoder.

All sentences (times beams) advance together. One step is one hybridized graph: the decoder on the previous
tokens, log-softmax, and the whole search update (candidate scores, top-k, back-pointers, reordered states,
finished flags) on the device. Per step the host only reads one number, whether anything is still active,
and reads it for the previous step while the current one computes, so the device never waits for Python. The
chosen tokens and back-pointers stay on the device until the end, when one copy brings them to the host to
trace the hypotheses back. A sentence stops growing at EOS or after `max_len` tokens; every computation is per
row, so a sentence decodes the same alone or in a batch.
"""
from __future__ import annotations

import weakref
from typing import List, Sequence, Tuple, Union

import mxnet as mx
import numpy as np
from mxnet import gluon

try:
    from nmt.tokenizer import BOS_ID, EOS_ID
except ModuleNotFoundError as e:  # only while nmt.tokenizer is not written yet
    if e.name != "nmt.tokenizer":
        raise
    BOS_ID, EOS_ID = 2, 3

MaxLen = Union[int, Sequence[int], np.ndarray]
_NEG_INF = float("-inf")


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


def _upload(a: np.ndarray, ctx: mx.Context) -> mx.nd.NDArray:
    """A fresh float32 NDArray on `ctx` without waiting for the engine (mx.nd.array would)."""
    host = mx.nd.from_numpy(np.array(a, dtype=np.float32, order="C", copy=True), zero_copy=True)
    return host if host.context == ctx else host.as_in_context(ctx)


class _GreedyStep(gluon.HybridBlock):
    """(prev, h, c, memory, src_len, done, limits, t) -> (token, h, c, done, t + 1, emitted, active count)."""

    def __init__(self, model, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.decoder = model.decoder   # shared: the very same parameters

    def hybrid_forward(self, F, prev, h, c, memory, src_len, done, limits, t):
        logits, h, c, _ = self.decoder(F.reshape(prev, shape=(-1, 1)), h, c, memory, src_len)
        token = F.argmax(F.log_softmax(F.reshape(logits, shape=(0, -1)), axis=-1), axis=-1)
        stop = F.broadcast_logical_or(done, token == EOS_ID)
        emitted = F.where(stop, F.ones_like(token) * -1, token)
        t1 = t + 1
        done = F.broadcast_logical_or(stop, F.broadcast_greater_equal(F.broadcast_like(t1, limits), limits))
        return token, h, c, done, t1, emitted, F.sum(1 - done)


class _BeamStep(gluon.HybridBlock):
    """One beam-search step for B sentences x K beams (rows b*K + k); see `beam_search` for the rules."""

    def __init__(self, model, beam_size: int, **kwargs):
        super().__init__(**kwargs)
        self._K, self._V = beam_size, model.tgt_vocab_size
        with self.name_scope():
            self.decoder = model.decoder   # shared: the very same parameters

    def hybrid_forward(self, F, prev, h, c, memory, src_len, scores, lengths, finished, limits, t, lp_table):
        K, R = self._K, min(self._K, self._V)
        logits, h, c, _ = self.decoder(F.reshape(prev, shape=(-1, 1)), h, c, memory, src_len)
        log_probs = F.log_softmax(F.reshape(logits, shape=(0, -1)), axis=-1)           # (BK,V)
        # all active hypotheses of a sentence with max_len tokens are finished as they are
        fin = F.broadcast_logical_or(finished, F.broadcast_lesser_equal(limits, F.broadcast_like(t, limits)))
        # Within a row every candidate shares the score and the length penalty, so the sentence's best K
        # candidates are among its rows' best K tokens: a top-k per row, then one over K*K, instead of one
        # over K*V (the same choice, a fraction of the work).
        cand_lp, cand_tok = F.topk(log_probs, axis=-1, k=R, ret_typ="both")            # (BK,R)
        # a finished hypothesis has one candidate, itself under EOS, at an unchanged score
        column = F.broadcast_like(F.reshape(F.contrib.arange_like(cand_lp, axis=1), shape=(1, -1)), cand_lp)
        fin_b = F.broadcast_like(F.reshape(fin, shape=(-1, 1)), cand_lp)
        cand_lp = F.where(fin_b, F.where(column == 0, F.zeros_like(cand_lp), F.ones_like(cand_lp) * _NEG_INF),
                          cand_lp)
        cand_tok = F.where(fin_b, F.ones_like(cand_tok) * EOS_ID, cand_tok)
        raw = F.broadcast_add(cand_lp, F.reshape(scores, shape=(-1, 1)))
        penalty = F.take(lp_table, lengths + 1 - fin)                                  # of the candidate length
        norm = F.broadcast_div(raw, F.reshape(penalty, shape=(-1, 1)))
        top = F.topk(F.reshape(norm, shape=(-1, K * R)), axis=-1, k=K, ret_typ="indices")   # (B,K)
        first_row = F.reshape(F.contrib.arange_like(top, axis=0), shape=(-1, 1)) * K
        pick = F.reshape(F.broadcast_add(top, first_row * R), shape=(-1,))
        new_scores = F.take(F.reshape(raw, shape=(-1,)), pick)
        token = F.take(F.reshape(cand_tok, shape=(-1,)), pick)
        beam = F.floor(top / R)
        rows = F.reshape(F.broadcast_add(beam, first_row), shape=(-1,))               # (BK,) source rows
        was_fin = F.take(fin, rows)
        is_eos = token == EOS_ID
        lengths = F.take(lengths, rows) + 1 - was_fin
        finished = F.broadcast_logical_or(F.broadcast_logical_or(was_fin, is_eos), new_scores == _NEG_INF)
        emitted = F.where(F.broadcast_logical_or(was_fin, is_eos), F.ones_like(token) * -1, token)
        t1 = t + 1
        active = F.sum(1 - F.broadcast_logical_or(
            finished, F.broadcast_lesser_equal(limits, F.broadcast_like(t1, limits))))
        return (token, F.take(h, rows), F.take(c, rows), new_scores, lengths, finished, t1, rows, emitted, active)


# Step blocks per model (hybridized once, reused for every batch); weak keys so a model can be freed.
_STEPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _step_block(model, kind: str, beam_size: int = 1) -> gluon.HybridBlock:
    cache = _STEPS.setdefault(model, {})
    key = (kind, beam_size)
    if key not in cache:
        block = _GreedyStep(model) if kind == "greedy" else _BeamStep(model, beam_size)
        block.hybridize(static_alloc=True)
        cache[key] = block
    return cache[key]


def _run(step_fn, state: list, num_steps: int, active_at: int) -> List[list]:
    """Call `state = step_fn(state)` up to `num_steps` times; stop before a step when nothing was active after
    the previous one. The active count (output `active_at`) of step t is read while step t+1 computes; a step
    queued after everything finished is discarded. Returns the states after each kept step."""
    kept: List[list] = []
    for _ in range(num_steps):
        new = step_fn(state)
        if kept and kept[-1][active_at].asscalar() == 0:
            break
        kept.append(new)
        state = new
    return kept


def greedy_search(model, src: mx.nd.NDArray, src_len: mx.nd.NDArray, max_len: MaxLen) -> List[List[int]]:
    """Most probable next token at each step; per sentence the token ids without BOS/EOS."""
    batch, ctx = src.shape[0], src.context
    limits = _max_lens(max_len, batch)
    num_steps = int(limits.max(initial=0))
    if num_steps == 0:
        return [[] for _ in range(batch)]
    memory, (h, c) = model.encode(src, src_len)
    step = _step_block(model, "greedy")
    state = [_upload(np.full(batch, BOS_ID), ctx), h, c, _upload(limits == 0, ctx), _upload(np.zeros(1), ctx)]
    lim = _upload(limits, ctx)
    kept = _run(lambda s: list(step(s[0], s[1], s[2], memory, src_len, s[3], lim, s[4])), state, num_steps, 6)
    tokens = mx.nd.stack(*[s[5] for s in kept], axis=1).asnumpy().astype(np.int64)   # (B, steps)
    return [[int(x) for x in row if x >= 0] for row in tokens]


def beam_search(model, src: mx.nd.NDArray, src_len: mx.nd.NDArray, beam_size: int, max_len: MaxLen,
                alpha: float = 0.6, nbest: int = 1) -> List[List[Tuple[List[int], float]]]:
    """Beam search; per sentence up to `nbest` (token ids without BOS/EOS, score), best first.

    Scores are summed log-probabilities (the EOS one included) divided by the GNMT length penalty
    ((5 + |Y|) / 6) ** alpha, |Y| counting EOS. Finished hypotheses keep their beam slot and compete by
    that score with the extensions of the active ones; a sentence is done when all its slots are
    finished, and active hypotheses are finished as they are after `max_len` tokens. With beam 1 this is
    exactly greedy search.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1 (got {beam_size})")
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest must be between 1 and beam_size={beam_size} (got {nbest})")
    batch, K, ctx = src.shape[0], beam_size, src.context
    limits = _max_lens(max_len, batch)
    num_steps = int(limits.max(initial=0))
    if num_steps == 0:
        return [[([], 0.0)] for _ in range(batch)]
    memory, (h, c) = model.encode(src, src_len)
    memory = memory.repeat(K, axis=0)  # row b*K + k = beam k of sentence b
    src_len_k = src_len.repeat(K, axis=0)
    scores = np.full((batch, K), -np.inf)
    scores[:, 0] = 0.0  # one live hypothesis per sentence at the start, so beams do not duplicate it
    # penalties of every possible length, computed in float64 once and rounded to float32 once
    lp_table = _upload(_length_penalty(np.arange(num_steps + 2), alpha), ctx)
    lim = _upload(np.repeat(limits, K), ctx)
    step = _step_block(model, "beam", K)
    state = [_upload(np.full(batch * K, BOS_ID), ctx), h.repeat(K, axis=0), c.repeat(K, axis=0),
             _upload(scores.reshape(-1), ctx), _upload(np.zeros(batch * K), ctx), _upload(np.zeros(batch * K), ctx),
             _upload(np.zeros(1), ctx)]
    kept = _run(lambda s: list(step(s[0], s[1], s[2], memory, src_len_k, s[3], s[4], s[5], lim, s[6], lp_table)),
                state, num_steps, 9)
    last = kept[-1]
    rows = mx.nd.stack(*[s[7] for s in kept]).asnumpy().astype(np.int64).reshape(len(kept), batch, K)
    emitted = mx.nd.stack(*[s[8] for s in kept]).asnumpy().astype(np.int64).reshape(len(kept), batch, K)
    scores = last[3].asnumpy().astype(np.float64).reshape(batch, K)
    lengths = last[4].asnumpy().astype(np.int64).reshape(batch, K)
    # trace every final slot back through the back-pointers
    slot = np.tile(np.arange(K), (batch, 1))
    history = np.empty((batch, K, len(kept)), dtype=np.int64)
    for t in range(len(kept) - 1, -1, -1):
        history[:, :, t] = np.take_along_axis(emitted[t], slot, axis=1)
        slot = np.take_along_axis(rows[t], slot, axis=1) - (np.arange(batch) * K)[:, None]
    results: List[List[Tuple[List[int], float]]] = []
    final = scores / _length_penalty(lengths, alpha)
    for b in range(batch):
        live = [k for k in np.argsort(-final[b], kind="stable") if np.isfinite(final[b, k])]
        results.append([([int(x) for x in history[b, k] if x >= 0], float(final[b, k])) for k in live[:nbest]])
    return results
