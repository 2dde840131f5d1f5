"""Batched greedy and beam search over `Seq2Seq.encode` / `Seq2Seq.decode_step`.

All sentences (times beams) advance together, one `decode_step` per output position; only the
chosen token ids and scores (B*K numbers) go to the host per step. A sentence stops growing at EOS
or after `max_len` tokens; every computation is per row, so a sentence decodes the same alone or in
a batch.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple, Union

import mxnet as mx
import numpy as np

try:
    from nmt.tokenizer import BOS_ID, EOS_ID
except ModuleNotFoundError as e:  # only while nmt.tokenizer is not written yet
    if e.name != "nmt.tokenizer":
        raise
    BOS_ID, EOS_ID = 2, 3

MaxLen = Union[int, Sequence[int], np.ndarray]


def _max_lens(max_len: MaxLen, batch: int) -> np.ndarray:
    """Per-sentence maximum output length (tokens, EOS excluded) as an int array of shape (batch,)."""
    arr = np.asarray(max_len)
    if arr.ndim == 0:
        arr = np.full(batch, int(arr))
    if arr.shape != (batch,):
        raise ValueError(f"max_len must be an int or have one entry per sentence ({batch}); got shape {arr.shape}")
    return np.maximum(arr.astype(np.int64), 0)


def greedy_search(model, src: mx.nd.NDArray, src_len: mx.nd.NDArray, max_len: MaxLen) -> List[List[int]]:
    """Most probable next token at each step; per sentence the token ids without BOS/EOS."""
    batch = src.shape[0]
    limits = _max_lens(max_len, batch)
    memory, states = model.encode(src, src_len)
    prev = mx.nd.full((batch,), BOS_ID, ctx=src.context, dtype="float32")
    out: List[List[int]] = [[] for _ in range(batch)]
    done = limits == 0
    for t in range(int(limits.max(initial=0))):
        if done.all():
            break
        log_probs, states, _ = model.decode_step(prev, states, memory, src_len)
        prev = mx.nd.argmax(log_probs, axis=-1)
        tokens = prev.asnumpy().astype(np.int64)
        for i in np.flatnonzero(~done):
            if tokens[i] == EOS_ID:
                done[i] = True
            else:
                out[i].append(int(tokens[i]))
                done[i] = t + 1 >= limits[i]
    return out


def _length_penalty(lengths: np.ndarray, alpha: float) -> np.ndarray:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + lengths) / 6.0) ** alpha


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
    memory, states = model.encode(src, src_len)
    memory = memory.repeat(K, axis=0)  # row b*K + k = beam k of sentence b
    src_len_k = src_len.repeat(K, axis=0)
    states = [s.repeat(K, axis=0) for s in states]

    scores = np.full((batch, K), -np.inf)
    scores[:, 0] = 0.0  # one live hypothesis per sentence at the start, so beams do not duplicate it
    lengths = np.zeros((batch, K), dtype=np.int64)  # predictions in the score (EOS included)
    finished = np.zeros((batch, K), dtype=bool)
    history = np.zeros((batch, K, 0), dtype=np.int64)
    prev = mx.nd.full((batch * K,), BOS_ID, ctx=ctx, dtype="float32")
    rows_base = (np.arange(batch) * K)[:, None]
    vocab = model.tgt_vocab_size
    # A finished hypothesis has one candidate (itself, under the EOS column) at an unchanged score.
    stay = mx.nd.full((1, vocab), -np.inf, ctx=ctx)
    stay[0, EOS_ID] = 0.0
    stay = stay.broadcast_to((batch * K, vocab))
    for t in range(int(limits.max(initial=0)) + 1):
        finished |= (limits <= t)[:, None]  # all active hypotheses of such a sentence have max_len tokens
        if finished.all():
            break
        log_probs, states, _ = model.decode_step(prev, states, memory, src_len_k)
        fin_nd = mx.nd.array(finished.reshape(-1, 1), ctx=ctx).broadcast_to((batch * K, vocab))
        step = mx.nd.where(fin_nd, stay, log_probs)
        raw = step + mx.nd.array(scores.reshape(-1, 1), ctx=ctx)
        cand_len = lengths + ~finished
        norm = raw / mx.nd.array(_length_penalty(cand_len, alpha).reshape(-1, 1), ctx=ctx)
        top = mx.nd.topk(norm.reshape((batch, K * vocab)), axis=-1, k=K, ret_typ="indices", dtype="int64")
        flat = top + mx.nd.array(np.arange(batch)[:, None] * K * vocab, ctx=ctx, dtype="int64")
        new_scores = mx.nd.take(raw.reshape((-1,)), flat.reshape((-1,))).asnumpy().reshape(batch, K)
        top = top.asnumpy()
        beam, token = top // vocab, top % vocab
        src_rows = np.take_along_axis(rows_base + np.arange(K), beam, axis=1)  # (B,K) flat row indices
        was_finished = np.take_along_axis(finished, beam, axis=1)
        lengths = np.take_along_axis(lengths, beam, axis=1) + ~was_finished
        finished = was_finished | (token == EOS_ID) | np.isneginf(new_scores)
        history = np.concatenate([np.take_along_axis(history, beam[:, :, None], axis=1),
                                  np.where(was_finished | (token == EOS_ID), -1, token)[:, :, None]], axis=2)
        scores = new_scores
        rows_nd = mx.nd.array(src_rows.reshape(-1), ctx=ctx, dtype="int64")
        states = [mx.nd.take(s, rows_nd, axis=0) for s in states]
        prev = mx.nd.array(token.reshape(-1), ctx=ctx, dtype="float32")

    results: List[List[Tuple[List[int], float]]] = []
    final = scores / _length_penalty(lengths, alpha)
    for b in range(batch):
        live = [k for k in np.argsort(-final[b], kind="stable") if np.isfinite(final[b, k])]
        results.append([([int(x) for x in history[b, k] if x >= 0], float(final[b, k])) for k in live[:nbest]])
    return results
