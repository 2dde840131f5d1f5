"""The search's step graph: one hybridized block per (model or ensemble, search kind, beam), which runs the
decoder(s) on one token per row and the search update, with every weight passed in as an input.

`nmt.search` drives these blocks; see its docstring for the search itself.
"""
from __future__ import annotations

import warnings
import weakref

from mxnet import gluon

from nmt import native as native_ops
from nmt.tokenizer import EOS_ID

_NEG_INF = float("-inf")


def _act(F, x, kind: str):
    """`Activation` (oneDNN's vectorized kernels on CPU), several times faster than the plain `tanh`/`sigmoid`."""
    return F.Activation(x, act_type=kind)


def decoder_step(F, decoder, prev, hs, cs, memory, src_len, group: int, weights, native: bool = False,
                 skip=None):
    """The decoder on one token per row: log-probs (N,V) and new per-layer states [(N,H)] * L for N = B*group
    rows, where the `group` rows of a sentence (its beams) share one memory row (B,S,M) and length (B,). The
    LSTM layers run on the weights of `Decoder.step_weights`: the first layer looks its input gates up per token
    (no product on the embedding), each layer adds W_h h (and W_x x above the first) without concatenating
    inputs; states stay per layer. On one time step this measured faster than the fused RNN kernel. The
    sentence's beams attend as one (group, S) product; the arithmetic is the training graph's, without
    dropout. `native`: the cell's element-wise part is one `nmt_lstm_cell`, dot and general attention one
    `nmt_attention` (`nmt.native`). `skip` (N,) (needs `nmt_masked_fc`): rows whose results are not used
    (1; finished hypotheses), left out of the matrix products; their log-probs and states are then meaningless
    (finite)."""
    A, X = decoder.num_attention_weights, decoder.num_lexical_weights

    def dense(x, w, b, n):   # x W^T (+ b) over the last axis
        if skip is not None:
            return F.nmt_masked_fc(x, skip, w, no_bias=1) if b is None else F.nmt_masked_fc(x, skip, w, b)
        return F.FullyConnected(x, w, b, no_bias=b is None, num_hidden=n, flatten=False)
    gates_in, out_w, out_b, combine, attention, lexical, lstm = (
        weights[0], weights[1], weights[2], weights[3:6], weights[6:6 + A], weights[6 + A:6 + A + X],
        weights[6 + A + X:])
    H = decoder._hidden
    new_hs, new_cs = [], []
    x = None
    for l, (h_l, c_l) in enumerate(zip(hs, cs)):
        if l == 0:
            g_x = F.Embedding(prev, gates_in, input_dim=decoder._vocab_size, output_dim=4 * H)
            g_h = dense(h_l, lstm[0], None, 4 * H)
        else:
            w_x, w_h, b = lstm[1 + 3 * (l - 1):4 + 3 * (l - 1)]
            g_x = dense(x, w_x, b, 4 * H)
            g_h = dense(h_l, w_h, None, 4 * H)
        if native:
            x, c_l = F.nmt_lstm_cell(g_x, g_h, c_l)
        else:
            # the fused kernel's gate order; four slices (MXNet's `split` is ~8x slower here)
            i, f, g, o = (F.slice_axis(g_x + g_h, axis=1, begin=k * H, end=(k + 1) * H) for k in range(4))
            c_l = _act(F, f, "sigmoid") * c_l + _act(F, i, "sigmoid") * _act(F, g, "tanh")
            x = _act(F, o, "sigmoid") * _act(F, c_l, "tanh")
        new_hs.append(x)
        new_cs.append(c_l)
    logits, _ = decoder.attend_and_project(F, F.reshape(x, shape=(-1, group, H)), memory, src_len, out_w, out_b,
                                          combine, attention, lexical, native=native, dense=dense)
    return F.log_softmax(F.reshape(logits, shape=(-3, 0)), axis=-1), new_hs, new_cs


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


class StepBlock(gluon.HybridBlock):
    """Shared by the step blocks: the argument layout and the ensemble's decoder step. `native`: use the
    kernels of `nmt.native` (loaded; CPU contexts only), the matrix products leaving out the rows whose results
    are not used when the library has `nmt_masked_fc` (`_masked`)."""

    def __init__(self, members: list, native: bool = False, **kwargs):
        super().__init__(**kwargs)
        self._native = native
        self._masked = native and native_ops.has_op("nmt_masked_fc")
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

    def _log_probs(self, F, prev, hs, cs, memories, src_len, group: int, weights, unused=None):
        """Mean log-probabilities (N,V) of the members and their new states, member by member per layer.
        `unused` (N,): rows whose results are not used (1), left out of the products when `_masked` (their
        log-probabilities and states are then meaningless)."""
        skip = unused if self._masked else None
        outs, new_hs, new_cs, at = [], [], [], 0
        for dec, L, memory, w in zip(self._decoders, self._layers, memories, weights):
            lp, h, c = decoder_step(F, dec, prev, hs[at:at + L], cs[at:at + L], memory, src_len, group, w,
                                    self._native, skip)
            outs.append(lp)
            new_hs += h
            new_cs += c
            at += L
        log_probs = outs[0] if self._M == 1 else F.add_n(*outs) * (1.0 / self._M)
        return log_probs, new_hs, new_cs


class GreedyStep(StepBlock):
    """(prev, done, t, *h, *c, *memories, src_len, limits, *weights) -> (token, done, t + 1, emitted, *h, *c),
    h and c one (B,H) array per layer (of every member)."""

    def hybrid_forward(self, F, prev, done, t, *args):
        hs, cs, memories, (src_len, limits), weights = self._split(args, 2)
        log_probs, hs, cs = self._log_probs(F, prev, hs, cs, memories, src_len, 1, weights, done)
        token = F.argmax(log_probs, axis=-1)
        stop = F.broadcast_logical_or(done, token == EOS_ID)
        emitted = F.where(stop, F.ones_like(token) * -1, token)
        t1 = t + 1
        done = F.broadcast_logical_or(stop, F.broadcast_greater_equal(F.broadcast_like(t1, limits), limits))
        return (token, done, t1, emitted, *hs, *cs)


class BeamStep(StepBlock):
    """One beam-search step for B sentences x K beams (rows b*K + k); see `beam_search` for the rules.

    `first`: the first step, whose K beams per sentence are one hypothesis (BOS, the encoder's states): the
    decoder and the row top-k run on one row per sentence (`prev`, h and c (B,...)) and the candidates and states
    are repeated for the K rows, a K-th of the work for the same result. Later steps leave the finished
    hypotheses' rows (late in a batch a fifth of them) out of the decoder's matrix products (`StepBlock`). On
    CPU the update after the row top-k is one `nmt_beam_update` (`_update` on MXNet's operators otherwise)."""

    def __init__(self, members: list, beam_size: int, nbest: int = 0, first: bool = False, native: bool = False,
                 **kwargs):
        super().__init__(members, native, **kwargs)
        self._K, self._V = beam_size, members[0].tgt_vocab_size
        self._nbest = nbest   # > 0: stop a sentence once its nbest best are final (needs a non-decreasing penalty)
        self._first = first
        self._fused_update = native and native_ops.has_op("nmt_beam_update")

    def hybrid_forward(self, F, prev, scores, lengths, finished, t, *args):
        K, R = self._K, min(self._K, self._V)
        hs, cs, memories, (src_len, limits, lp_table), weights = self._split(args, 3)
        # all active hypotheses of a sentence with max_len tokens are finished as they are
        fin = F.broadcast_logical_or(finished, F.broadcast_lesser_equal(limits, F.broadcast_like(t, limits)))
        if self._first:
            log_probs, hs, cs = self._log_probs(F, prev, hs, cs, memories, src_len, 1, weights)   # (B,V)
        else:   # a finished hypothesis's step is never used (its one candidate is itself): left out
            log_probs, hs, cs = self._log_probs(F, prev, hs, cs, memories, src_len, K, weights, fin)   # (BK,V)
        # Within a row every candidate shares the score and the length penalty, so the sentence's best K
        # candidates are among its rows' best K tokens: a top-k per row, then one over K*K, instead of one
        # over K*V (the same choice, a fraction of the work).
        cand_lp, cand_tok = (F.nmt_row_topk(log_probs, k=R) if self._native else
                             F.topk(log_probs, axis=-1, k=R, ret_typ="both"))              # (BK,R)
        if self._first and K > 1:   # the sentence's K rows are alike: its candidates and states, K times
            cand_lp, cand_tok = (F.repeat(x, repeats=K, axis=0) for x in (cand_lp, cand_tok))
            hs, cs = ([F.repeat(x, repeats=K, axis=0) for x in xs] for xs in (hs, cs))
        if self._fused_update:   # the rest of the step in one kernel, the same arithmetic
            out = F.nmt_beam_update(cand_lp, cand_tok, scores, lengths, finished, limits, t, lp_table, beam=K,
                                    nbest=self._nbest, eos=EOS_ID)
        else:
            out = self._update(F, cand_lp, cand_tok, scores, lengths, finished, fin, limits, t, lp_table)
        rows = out[5]
        return (*out, *[F.take(x, rows) for x in hs], *[F.take(x, rows) for x in cs])

    def _update(self, F, cand_lp, cand_tok, scores, lengths, finished, fin, limits, t, lp_table):
        """The search update after the row top-k (`nmt_beam_update` on CPU): (token, scores, lengths, finished,
        t + 1, rows, emitted, sentence done)."""
        K, R = self._K, min(self._K, self._V)
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
        return token, new_scores, lengths, finished, t1, rows, emitted, sentence_done

    def _settled(self, F, raw, lengths, finished, limits, lp_table):
        """Per sentence: whether its `nbest` best finished hypotheses can no longer be displaced. An active
        hypothesis with raw score s < 0 can only reach a normalized score <= s / lp(limit + 1) (raw scores only
        fall, an ensemble's mean log-probabilities being <= 0 too, and the penalty only grows with length), so
        once the nbest-th best finished score is at least that bound for every active slot, the rest of the
        search cannot change the nbest list: the sentence stops early with the same result (active slots,
        scored as they are, rank below it)."""
        K, inf = self._K, float("inf")
        norm = raw / F.take(lp_table, lengths)
        fin_norm = F.reshape(F.where(finished, norm, F.ones_like(norm) * -inf), shape=(-1, K))
        nth = F.min(F.topk(fin_norm, axis=-1, k=self._nbest, ret_typ="value"), axis=1)          # (B,)
        bound = raw / F.take(lp_table, limits + 1)
        best_active = F.max(F.reshape(F.where(finished, F.ones_like(bound) * -inf, bound), shape=(-1, K)), axis=1)
        return F.broadcast_logical_and(nth > -inf, nth >= best_active)


# Step blocks per (first) model (hybridized once, reused for every batch); weak keys so a model can be freed. An
# ensemble's block holds its other members, so their ids in the key stay theirs while the block is cached.
STEP_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def step_block(members: list, kind: str, beam_size: int = 1, nbest: int = 0, native: bool = False
               ) -> gluon.HybridBlock:
    cache = STEP_CACHE.setdefault(members[0], {})
    key = (kind, beam_size, nbest, native, tuple(id(m) for m in members[1:]))
    if key not in cache:
        block = GreedyStep(members, native) if kind == "greedy" else \
            BeamStep(members, beam_size, nbest, first=kind == "beam-first", native=native)
        block.hybridize(static_alloc=True)
        block._graph_built = False
        cache[key] = block
    return cache[key]


def call_step(step: gluon.HybridBlock, *args) -> list:
    """`step(*args)`; its first call builds the graph, which leaves the decoder weights that come in as inputs
    unused as parameters (Gluon warns about those)."""
    if step._graph_built:
        return list(step(*args))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Parameter .* is not used by any computation")
        out = list(step(*args))
    step._graph_built = True
    return out
