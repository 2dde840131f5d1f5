"""Batched greedy and beam search over `Seq2Seq.encode` and the model's decoder.

All sentences (times beams) advance together. One step is one hybridized graph (`nmt.search_graph`): the decoder
on the previous tokens, log-softmax, and the whole search update (candidate scores, top-k, back-pointers,
reordered states, finished flags) on the device. Per step the host reads only which sentences are done, and reads
it for the previous step while the current one computes, so the device never waits for Python. Once a quarter of
the batch is done, the done sentences leave it (their hypotheses are final) and the rest continue as a smaller
batch, so finished sentences cost nothing; in beam search a sentence is done as soon as no active hypothesis can
still beat its best finished ones (exact: see `nmt.search_graph.BeamStep._settled`). The chosen tokens and
back-pointers stay on the device until a sentence leaves, then one copy brings them to the host to trace the
hypotheses back.
A sentence stops growing at EOS or after `max_len` tokens; every computation is per row, so a sentence decodes
the same alone or in a batch.

`model` may also be a sequence of models sharing both vocabularies (an ensemble): every member encodes the
source and runs its own decoder step, and the search follows the mean of their log-probabilities.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import mxnet as mx
import numpy as np

from nmt import native
from nmt.search_graph import call_step, step_block
from nmt.tokenizer import BOS_ID, EOS_ID

MaxLen = Union[int, Sequence[int], np.ndarray]
# A batch sheds its done sentences once this fraction of it is done (each change of batch shape re-plans the
# step graph, which costs about one step).
_COMPACT_FRACTION = 0.25


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


def _layer_states(states: mx.nd.NDArray) -> List[mx.nd.NDArray]:
    """(N,L,H) encoder-side states as L arrays (N,H), the search's layout."""
    return [states[:, l] for l in range(states.shape[1])]


Models = Union["Seq2Seq", Sequence["Seq2Seq"]]   # noqa: F821 (nmt.model.Seq2Seq; not imported here)


def _members(model: Models) -> list:
    """The models of a search: one model, or the members of an ensemble (same vocabularies, same sizes)."""
    members = list(model) if isinstance(model, (list, tuple)) else [model]
    if not members:
        raise ValueError("an ensemble needs at least one model")
    first = members[0]
    for i, m in enumerate(members[1:], 2):
        if (m.src_vocab_size, m.tgt_vocab_size) != (first.src_vocab_size, first.tgt_vocab_size):
            raise ValueError(f"ensemble member {i} has vocabularies of {m.src_vocab_size}/{m.tgt_vocab_size} "
                             f"pieces, member 1 {first.src_vocab_size}/{first.tgt_vocab_size}: members must share "
                             "their source and target vocabularies")
    return members


def _member_weights(members: list, weights: Optional[list], ctx: mx.Context) -> List[list]:
    """Per member, its `decoder.step_weights(ctx)` (given: a flat list for one model, one list per member)."""
    if weights is None:
        return [m.decoder.step_weights(ctx) for m in members]
    if len(members) == 1 and weights and isinstance(weights[0], mx.nd.NDArray):
        return [weights]
    if len(weights) != len(members):
        raise ValueError(f"weights: {len(weights)} lists for {len(members)} ensemble members")
    return list(weights)


def _encode_all(members: list, src: mx.nd.NDArray, src_len: mx.nd.NDArray) -> Tuple[list, list, list]:
    """Per member memory (B,S,M), and the decoder's initial states per layer (B,H) (beam search's first step
    repeats them for the beams), member by member: [h of member 1's layers, h of member 2's ...] and likewise c."""
    memories, hs, cs = [], [], []
    for m in members:
        memory, (h, c) = m.encode(src, src_len)
        memories.append(memory)
        hs += _layer_states(h)
        cs += _layer_states(c)
    return memories, hs, cs


def _native(ctx: mx.Context) -> bool:
    """Whether the step on `ctx` runs `nmt.native`'s kernels: on CPU contexts, when they load."""
    return ctx.device_type == "cpu" and native.available()


class _Segment:
    """Steps between two changes of the batch: its sentences (original numbering) and, per step, the
    back-pointers (beam index within the sentence) and the emitted tokens (-1: none), (steps, B, K) on the host."""

    def __init__(self, ids: np.ndarray, beams: np.ndarray, emitted: np.ndarray):
        self.ids, self.beams, self.emitted = ids, beams, emitted


def _search(step_fn, state: list, consts: list, batch: int, K: int, num_steps: int, *,
            next_state: Sequence[int], per_row_state: Sequence[int], per_row_consts: Sequence[int],
            per_sentence_consts: Sequence[int], flags_at: int, emitted_at: int, rows_at: Optional[int],
            final_state: Sequence[int]) -> Tuple[List[_Segment], Dict[int, list]]:
    """Run `outputs = step_fn(state, consts)` for up to `num_steps` steps over a batch of `batch` sentences
    that sheds its done sentences. `state` and `consts` hold arrays whose first axis is the B*K rows
    (`per_row_*` positions), one row per sentence (`per_sentence_consts`) or anything else; the next state is
    `outputs[next_state]`; `outputs[flags_at]` says per sentence whether it is done (read one step late, while
    the next step runs; a step queued after all were done is dropped).
    Returns the segments and, per original sentence, the host copies of `state[final_state]` (K rows each)
    at the moment it left the batch."""
    ctx = state[0].context
    ids = np.arange(batch)
    segments: List[_Segment] = []
    finals: Dict[int, list] = {}
    steps: list = []
    flags = None

    def close() -> None:
        if steps:
            emitted = mx.nd.stack(*[o[emitted_at] for o in steps]).asnumpy().astype(np.int64)
            emitted = emitted.reshape(len(steps), len(ids), K)
            if rows_at is None:
                beams = np.zeros_like(emitted)
            else:
                rows = mx.nd.stack(*[o[rows_at] for o in steps]).asnumpy().astype(np.int64)
                beams = rows.reshape(len(steps), len(ids), K) - (np.arange(len(ids)) * K)[None, :, None]
            segments.append(_Segment(ids, beams, emitted))

    def finalize(positions: np.ndarray) -> None:
        values = [state[i].asnumpy().reshape(len(ids), K) for i in final_state]
        for p in positions:
            finals[int(ids[p])] = [v[p] for v in values]

    for _ in range(num_steps):
        outputs = step_fn(state, consts)
        done = None if flags is None else flags.asnumpy() > 0.5
        if done is not None and done.all():
            break   # everything was done before this step: drop it
        steps.append(outputs)
        state = [outputs[i] for i in next_state]
        flags = outputs[flags_at]
        if done is not None and done.sum() >= max(1.0, _COMPACT_FRACTION * len(ids)):
            # done before this step means done after it: those sentences leave with their current state
            close()
            steps = []
            finalize(np.flatnonzero(done))
            keep = np.flatnonzero(~done)
            rows = _upload((keep[:, None] * K + np.arange(K)).reshape(-1), ctx)
            state = [mx.nd.take(x, rows) if i in per_row_state else x for i, x in enumerate(state)]
            kept = _upload(keep, ctx)
            consts = [mx.nd.take(x, rows) if i in per_row_consts else mx.nd.take(x, kept) if i in per_sentence_consts
                      else x for i, x in enumerate(consts)]
            flags = mx.nd.take(flags, kept)
            ids = ids[keep]
    close()
    finalize(np.arange(len(ids)))
    return segments, finals


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


def greedy_search(model: Models, src: mx.nd.NDArray, src_len: mx.nd.NDArray, max_len: MaxLen,
                  weights: Optional[list] = None) -> List[List[int]]:
    """Most probable next token at each step; per sentence the token ids without BOS/EOS. `model`: a model or
    an ensemble (sequence of models). `weights`: `decoder.step_weights(ctx)` of the model (of each member: one
    list per member) when the caller decodes several batches with unchanged parameters."""
    batch, ctx = src.shape[0], src.context
    limits = _max_lens(max_len, batch)
    num_steps = int(limits.max(initial=0))
    members = _members(model)
    if num_steps == 0:
        return [[] for _ in range(batch)]
    memories, hs, cs = _encode_all(members, src, src_len)
    step = step_block(members, "greedy", native=_native(ctx))
    L, M = len(hs), len(members)
    # state: prev, done, t, h per layer, c per layer; outputs: token, done, t + 1, emitted, h..., c...
    state = [_upload(np.full(batch, BOS_ID), ctx), _upload(limits == 0, ctx), _upload(np.zeros(1), ctx), *hs, *cs]
    consts = [*memories, src_len, _upload(limits, ctx)]
    flat = [w for ws in _member_weights(members, weights, ctx) for w in ws]
    layers = tuple(range(3, 3 + 2 * L))
    segments, _ = _search(lambda s, k: call_step(step, *s, *k, *flat), state, consts, batch, 1, num_steps,
                          next_state=(0, 1, 2, *[4 + i for i in range(2 * L)]), per_row_state=(0, 1, *layers),
                          per_row_consts=tuple(range(M + 2)), per_sentence_consts=(), flags_at=1, emitted_at=3,
                          rows_at=None, final_state=())
    return [[int(x) for x in tokens[:, 0] if x >= 0] for tokens in _trace(segments, batch, 1)]


def beam_search(model: Models, src: mx.nd.NDArray, src_len: mx.nd.NDArray, beam_size: int, max_len: MaxLen,
                alpha: float = 0.6, nbest: int = 1, weights: Optional[list] = None,
                early_stop: bool = True) -> List[List[Tuple[List[int], float]]]:
    """Beam search; per sentence up to `nbest` (token ids without BOS/EOS, score), best first.

    Scores are summed log-probabilities (the EOS one included) divided by the GNMT length penalty
    ((5 + |Y|) / 6) ** alpha, |Y| counting EOS. Finished hypotheses keep their beam slot and compete by
    that score with the extensions of the active ones; a sentence is done when all its slots are
    finished, and active hypotheses are finished as they are after `max_len` tokens. With beam 1 this is
    exactly greedy search. `model` and `weights` as for `greedy_search`.

    With `early_stop` (and alpha >= 0) a sentence stops as soon as no active hypothesis can still beat its
    `nbest`-th best finished one (see `nmt.search_graph.BeamStep._settled`): the same result, fewer steps.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1 (got {beam_size})")
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest must be between 1 and beam_size={beam_size} (got {nbest})")
    batch, K, ctx = src.shape[0], beam_size, src.context
    limits = _max_lens(max_len, batch)
    num_steps = int(limits.max(initial=0))
    members = _members(model)
    if num_steps == 0:
        return [[([], 0.0)] for _ in range(batch)]
    memories, hs, cs = _encode_all(members, src, src_len)   # the first step repeats them for the K beams
    scores = np.full((batch, K), -np.inf)
    scores[:, 0] = 0.0  # one live hypothesis per sentence at the start, so beams do not duplicate it
    # penalties of every possible length, computed in float64 once and rounded to float32 once
    lp_table = _upload(_length_penalty(np.arange(num_steps + 2), alpha), ctx)
    # stopping a sentence once its result is settled is exact for any non-decreasing length penalty
    stop_at = nbest if early_stop and alpha >= 0 else 0
    first, step = (step_block(members, kind, K, stop_at, _native(ctx)) for kind in ("beam-first", "beam"))
    L, M = len(hs), len(members)
    # row b*K + k = beam k of sentence b. state: prev, scores, lengths, finished, t, h per layer, c per layer
    # (prev, h and c one row per sentence for the first step); outputs: token, scores, lengths, finished, t + 1,
    # rows, emitted, sentence done, h..., c...
    state = [_upload(np.full(batch, BOS_ID), ctx), _upload(scores.reshape(-1), ctx),
             _upload(np.zeros(batch * K), ctx), _upload(np.zeros(batch * K), ctx), _upload(np.zeros(1), ctx),
             *hs, *cs]
    # memories and lengths once per sentence: its K beams attend together
    consts = [*memories, src_len, _upload(np.repeat(limits, K), ctx), lp_table]
    flat = [w for ws in _member_weights(members, weights, ctx) for w in ws]
    layers = tuple(range(5, 5 + 2 * L))
    blocks = iter([first])   # the first call runs `first`, every later one `step`

    def step_fn(s, k):
        return call_step(next(blocks, step), *s, *k, *flat)
    segments, finals = _search(
        step_fn, state, consts, batch, K, num_steps,
        next_state=(0, 1, 2, 3, 4, *[8 + i for i in range(2 * L)]), per_row_state=(0, 1, 2, 3, *layers),
        per_row_consts=(M + 1,), per_sentence_consts=tuple(range(M + 1)), flags_at=7, emitted_at=6, rows_at=5,
        final_state=(1, 2))
    results: List[List[Tuple[List[int], float]]] = []
    for b, history in enumerate(_trace(segments, batch, K)):
        raw, lengths = finals[b]
        final = raw.astype(np.float64) / _length_penalty(lengths.astype(np.int64), alpha)
        live = [k for k in np.argsort(-final, kind="stable") if np.isfinite(final[k])]
        results.append([([int(x) for x in history[:, k] if x >= 0], float(final[k])) for k in live[:nbest]])
    return results
