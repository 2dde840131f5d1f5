"""Batched greedy and beam search over `Seq2Seq.encode` and the model's decoder.

All sentences (times beams) advance together. One step is one hybridized graph: the decoder on the previous
tokens, log-softmax, and the whole search update (candidate scores, top-k, back-pointers, reordered states,
finished flags) on the device. Per step the host reads only which sentences are done, and reads it for the
previous step while the current one computes, so the device never waits for Python. Once a quarter of the
batch is done, the done sentences leave it (their hypotheses are final) and the rest continue as a smaller
batch, so finished sentences cost nothing; in beam search a sentence is done as soon as no active hypothesis
can still beat its best finished ones (exact: see `_BeamStep._settled`). The chosen tokens and back-pointers
stay on the device until a sentence leaves, then one copy brings them to the host to trace the hypotheses back.
A sentence stops growing at EOS or after `max_len` tokens; every computation is per row, so a sentence decodes
the same alone or in a batch.

`model` may also be a sequence of models sharing both vocabularies (an ensemble): every member encodes the
source and runs its own decoder step, and the search follows the mean of their log-probabilities.
"""
from __future__ import annotations

import warnings
import weakref
from typing import Dict, List, Optional, Sequence, Tuple, Union

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


def _act(F, x, kind: str):
    """`Activation` (oneDNN's vectorized kernels on CPU), several times faster than the plain `tanh`/`sigmoid`."""
    return F.Activation(x, act_type=kind)


def _decoder_step(F, decoder, prev, hs, cs, memory, src_len, group: int, weights):
    """The decoder on one token per row: log-probs (N,V) and new per-layer states [(N,H)] * L for N = B*group
    rows, where the `group` rows of a sentence (its beams) share one memory row (B,S,M) and length (B,). The
    LSTM layers run on the weights of `Decoder.step_weights`: the first layer looks its input gates up per token
    (no product on the embedding), each layer adds W_h h (and W_x x above the first) without concatenating
    inputs; states stay per layer. On one time step this measured faster than the fused RNN kernel. The
    sentence's beams attend as one (group, S) product; the arithmetic is the training graph's, without
    dropout."""
    A = decoder.num_attention_weights
    gates_in, out_w, out_b, combine, attention, lstm = (weights[0], weights[1], weights[2], weights[3:6],
                                                        weights[6:6 + A], weights[6 + A:])
    H = decoder._hidden
    new_hs, new_cs = [], []
    x = None
    for l, (h_l, c_l) in enumerate(zip(hs, cs)):
        if l == 0:
            gates = F.Embedding(prev, gates_in, input_dim=decoder._vocab_size, output_dim=4 * H) + \
                F.FullyConnected(h_l, lstm[0], no_bias=True, num_hidden=4 * H)
        else:
            w_x, w_h, b = lstm[1 + 3 * (l - 1):4 + 3 * (l - 1)]
            gates = F.FullyConnected(x, w_x, b, num_hidden=4 * H) + \
                F.FullyConnected(h_l, w_h, no_bias=True, num_hidden=4 * H)
        # the fused kernel's gate order; four slices (MXNet's `split` is ~8x slower here)
        i, f, g, o = (F.slice_axis(gates, axis=1, begin=k * H, end=(k + 1) * H) for k in range(4))
        c_l = _act(F, f, "sigmoid") * c_l + _act(F, i, "sigmoid") * _act(F, g, "tanh")
        x = _act(F, o, "sigmoid") * _act(F, c_l, "tanh")
        new_hs.append(x)
        new_cs.append(c_l)
    logits, _ = decoder.attend_and_project(F, F.reshape(x, shape=(-1, group, H)), memory, src_len, out_w, out_b,
                                          combine, attention)
    return F.log_softmax(F.reshape(logits, shape=(-3, 0)), axis=-1), new_hs, new_cs


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


def _encode_all(members: list, src: mx.nd.NDArray, src_len: mx.nd.NDArray, K: int) -> Tuple[list, list, list]:
    """Per member memory (B,S,M), and the decoder's initial states per layer, each repeated for K beams,
    member by member: [h of member 1's layers, h of member 2's ...] and likewise c."""
    memories, hs, cs = [], [], []
    for m in members:
        memory, (h, c) = m.encode(src, src_len)
        memories.append(memory)
        hs += _layer_states(h.repeat(K, axis=0) if K > 1 else h)
        cs += _layer_states(c.repeat(K, axis=0) if K > 1 else c)
    return memories, hs, cs


class _Decoders:
    """The members' decoders, for a step block: not registered as its children (Gluon warns about lists and
    tuples of blocks, not about this), the first member by weak reference (it is the step cache's weak key, and
    a decoder keeps its model alive through its name scope), the others strongly, so that their ids in the
    cache's key cannot be reused while the block is cached."""

    def __init__(self, members):
        self._first = weakref.ref(members[0])
        self._others = tuple(members[1:])

    def __iter__(self):
        return iter([self._first().decoder] + [m.decoder for m in self._others])


class _Step(gluon.HybridBlock):
    """Shared by the step blocks: the argument layout and the ensemble's decoder step."""

    def __init__(self, members: list, **kwargs):
        super().__init__(**kwargs)
        self._layers = [m.cfg.num_layers for m in members]
        self._num_weights = [m.decoder.num_step_weights for m in members]
        self._L = sum(self._layers)                      # decoder layers over all members
        self._M = len(members)
        # not children (every weight comes in as an input); a plain holder, which Gluon does not inspect
        self._decoders = _Decoders(members)

    def _split(self, args, n_consts: int):
        """(*h, *c, *memories, *other consts, *weights) -> hs, cs, memories, consts, per-member weights."""
        L, M = self._L, self._M
        hs, cs, rest = args[:L], args[L:2 * L], args[2 * L:]
        memories, consts, flat = rest[:M], rest[M:M + n_consts], rest[M + n_consts:]
        weights, at = [], 0
        for n in self._num_weights:
            weights.append(flat[at:at + n])
            at += n
        return hs, cs, memories, consts, weights

    def _log_probs(self, F, prev, hs, cs, memories, src_len, group: int, weights):
        """Mean log-probabilities (N,V) of the members and their new states, member by member per layer."""
        outs, new_hs, new_cs, at = [], [], [], 0
        for dec, L, memory, w in zip(self._decoders, self._layers, memories, weights):
            lp, h, c = _decoder_step(F, dec, prev, hs[at:at + L], cs[at:at + L], memory, src_len, group, w)
            outs.append(lp)
            new_hs += h
            new_cs += c
            at += L
        log_probs = outs[0] if self._M == 1 else F.add_n(*outs) * (1.0 / self._M)
        return log_probs, new_hs, new_cs


class _GreedyStep(_Step):
    """(prev, done, t, *h, *c, *memories, src_len, limits, *weights) -> (token, done, t + 1, emitted, *h, *c),
    h and c one (B,H) array per layer (of every member)."""

    def hybrid_forward(self, F, prev, done, t, *args):
        hs, cs, memories, (src_len, limits), weights = self._split(args, 2)
        log_probs, hs, cs = self._log_probs(F, prev, hs, cs, memories, src_len, 1, weights)
        token = F.argmax(log_probs, axis=-1)
        stop = F.broadcast_logical_or(done, token == EOS_ID)
        emitted = F.where(stop, F.ones_like(token) * -1, token)
        t1 = t + 1
        done = F.broadcast_logical_or(stop, F.broadcast_greater_equal(F.broadcast_like(t1, limits), limits))
        return (token, done, t1, emitted, *hs, *cs)


class _BeamStep(_Step):
    """One beam-search step for B sentences x K beams (rows b*K + k); see `beam_search` for the rules."""

    def __init__(self, members: list, beam_size: int, nbest: int = 0, **kwargs):
        super().__init__(members, **kwargs)
        self._K, self._V = beam_size, members[0].tgt_vocab_size
        self._nbest = nbest   # > 0: stop a sentence once its nbest best are final (needs a non-decreasing penalty)

    def hybrid_forward(self, F, prev, scores, lengths, finished, t, *args):
        K, R = self._K, min(self._K, self._V)
        hs, cs, memories, (src_len, limits, lp_table), weights = self._split(args, 3)
        log_probs, hs, cs = self._log_probs(F, prev, hs, cs, memories, src_len, K, weights)   # (BK,V)
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
        # a sentence is done when every slot is finished (or will be, by its length limit, at the next step)
        slot_done = F.broadcast_logical_or(finished, F.broadcast_lesser_equal(limits, F.broadcast_like(t1, limits)))
        sentence_done = F.min(F.reshape(slot_done, shape=(-1, K)), axis=1)
        if self._nbest:
            sentence_done = F.broadcast_logical_or(sentence_done, self._settled(F, new_scores, lengths, finished,
                                                                                limits, lp_table))
        return (token, new_scores, lengths, finished, t1, rows, emitted, sentence_done,
                *[F.take(x, rows) for x in hs], *[F.take(x, rows) for x in cs])


    def _settled(self, F, raw, lengths, finished, limits, lp_table):
        """Per sentence: whether its `nbest` best finished hypotheses can no longer be displaced. An active
        hypothesis with raw score s < 0 can only reach a normalized score <= s / lp(limit + 1) (raw scores
        only fall and the penalty only grows with length), so once the nbest-th best finished score is at
        least that bound for every active slot, the rest of the search cannot change the nbest list: the
        sentence stops early with the same result (active slots, scored as they are, rank below it)."""
        K, inf = self._K, float("inf")
        norm = raw / F.take(lp_table, lengths)
        fin_norm = F.reshape(F.where(finished, norm, F.ones_like(norm) * -inf), shape=(-1, K))
        nth = F.min(F.topk(fin_norm, axis=-1, k=self._nbest, ret_typ="value"), axis=1)          # (B,)
        bound = raw / F.take(lp_table, limits + 1)
        best_active = F.max(F.reshape(F.where(finished, F.ones_like(bound) * -inf, bound), shape=(-1, K)), axis=1)
        return F.broadcast_logical_and(nth > -inf, nth >= best_active)


# Step blocks per (first) model (hybridized once, reused for every batch); weak keys so a model can be freed. An
# ensemble's block holds its other members, so their ids in the key stay theirs while the block is cached.
_STEPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _step_block(members: list, kind: str, beam_size: int = 1, nbest: int = 0) -> gluon.HybridBlock:
    cache = _STEPS.setdefault(members[0], {})
    key = (kind, beam_size, nbest, tuple(id(m) for m in members[1:]))
    if key not in cache:
        block = _GreedyStep(members) if kind == "greedy" else _BeamStep(members, beam_size, nbest)
        block.hybridize(static_alloc=True)
        block._graph_built = False
        cache[key] = block
    return cache[key]


class _Segment:
    """Steps between two changes of the batch: its sentences (original numbering) and, per step, the
    back-pointers (beam index within the sentence) and the emitted tokens (-1: none), (steps, B, K) on the host."""

    def __init__(self, ids: np.ndarray, beams: np.ndarray, emitted: np.ndarray):
        self.ids, self.beams, self.emitted = ids, beams, emitted


def _call_step(step: gluon.HybridBlock, *args) -> list:
    """`step(*args)`; its first call builds the graph, which leaves the decoder weights that come in as inputs
    unused as parameters (Gluon warns about those)."""
    if step._graph_built:
        return list(step(*args))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Parameter .* is not used by any computation")
        out = list(step(*args))
    step._graph_built = True
    return out


def _search(step_fn, state: list, consts: list, K: int, num_steps: int, *, next_state: Sequence[int],
            per_row_state: Sequence[int], per_row_consts: Sequence[int], per_sentence_consts: Sequence[int],
            flags_at: int, emitted_at: int, rows_at: Optional[int],
            final_state: Sequence[int]) -> Tuple[List[_Segment], Dict[int, list]]:
    """Run `outputs = step_fn(state, consts)` for up to `num_steps` steps over a batch that sheds its done
    sentences. `state` and `consts` hold arrays whose first axis is the B*K rows (`per_row_*` positions), one
    row per sentence (`per_sentence_consts`) or anything else; the next state is `outputs[next_state]`;
    `outputs[flags_at]` says per sentence whether it is done (read one step late, while the next step runs; a
    step queued after all were done is dropped).
    Returns the segments and, per original sentence, the host copies of `state[final_state]` (K rows each)
    at the moment it left the batch."""
    ctx = state[0].context
    ids = np.arange(state[0].shape[0] // K)
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
    memories, hs, cs = _encode_all(members, src, src_len, 1)
    step = _step_block(members, "greedy")
    L, M = len(hs), len(members)
    # state: prev, done, t, h per layer, c per layer; outputs: token, done, t + 1, emitted, h..., c...
    state = [_upload(np.full(batch, BOS_ID), ctx), _upload(limits == 0, ctx), _upload(np.zeros(1), ctx), *hs, *cs]
    consts = [*memories, src_len, _upload(limits, ctx)]
    flat = [w for ws in _member_weights(members, weights, ctx) for w in ws]
    layers = tuple(range(3, 3 + 2 * L))
    segments, _ = _search(lambda s, k: _call_step(step, *s, *k, *flat), state, consts, 1, num_steps,
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
    `nbest`-th best finished one (see `_BeamStep._settled`): the same result, fewer steps.
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
    memories, hs, cs = _encode_all(members, src, src_len, K)
    scores = np.full((batch, K), -np.inf)
    scores[:, 0] = 0.0  # one live hypothesis per sentence at the start, so beams do not duplicate it
    # penalties of every possible length, computed in float64 once and rounded to float32 once
    lp_table = _upload(_length_penalty(np.arange(num_steps + 2), alpha), ctx)
    # stopping a sentence once its result is settled is exact for any non-decreasing length penalty
    step = _step_block(members, "beam", K, nbest if early_stop and alpha >= 0 else 0)
    L, M = len(hs), len(members)
    # row b*K + k = beam k of sentence b. state: prev, scores, lengths, finished, t, h per layer, c per layer;
    # outputs: token, scores, lengths, finished, t + 1, rows, emitted, sentence done, h..., c...
    state = [_upload(np.full(batch * K, BOS_ID), ctx), _upload(scores.reshape(-1), ctx),
             _upload(np.zeros(batch * K), ctx), _upload(np.zeros(batch * K), ctx), _upload(np.zeros(1), ctx),
             *hs, *cs]
    # memories and lengths once per sentence: its K beams attend together
    consts = [*memories, src_len, _upload(np.repeat(limits, K), ctx), lp_table]
    flat = [w for ws in _member_weights(members, weights, ctx) for w in ws]
    layers = tuple(range(5, 5 + 2 * L))
    segments, finals = _search(
        lambda s, k: _call_step(step, *s, *k, *flat), state, consts, K, num_steps,
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
