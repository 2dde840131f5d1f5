"""Batched greedy and beam search over the model interface (`Seq2SeqModel.encode`, `init_state`, `hybrid_step`).

All sentences (times beams) advance together: per step the model's hybridized step gives log-probabilities and
its new state, and one hybridized update block (`nmt.search_blocks`) chooses the tokens and back-pointers on the
device and moves the state's arrays that follow the hypotheses (as `DecoderState.reorder` would). The host reads
only which sentences are done, one step late (while the next step computes), so the device never waits for Python.
Once a quarter of the batch is done, the done sentences leave it (`DecoderState.select`; their hypotheses are
final) and the rest continue as a smaller batch. In beam search a sentence is done as soon as no active hypothesis
can still beat its n-best finished ones (`Settled`: the same result in fewer steps). The chosen tokens and
back-pointers stay on the device until a sentence leaves, then one copy brings them to the host to trace the
hypotheses back. No search chooses <pad> or <s>, which no translation holds (`NeverChosen`, in the update blocks).
A sentence stops growing at EOS or after its `max_len` tokens; every computation is per row, so a sentence decodes
the same alone or in a batch (its scores equal up to float32 rounding, which may depend on the batch shapes).

`BeamStream` is the same search over a stream of sentences: new ones join the running batch between two steps
(`DecoderState.concat`) and each leaves as soon as it is done, which a service uses to keep its batch full
(`nmt.serve`). `beam_search` is a stream that is given one batch.

`model` may be a list of models sharing both vocabularies, each given once: they decode as an
`nmt.models.ensemble.Ensemble` (which refuses one model object given twice: its mean would count it twice).

A sentence may be given a target prefix (token ids, or a `TargetPrefix`: token ids, then a word to complete): its
translations start with it. While a sentence is within its prefix, the model's log-probabilities are masked to the
prefix's next token, or to the tokens that fit the word (`Forcing`), before the search chooses, so the prefix is
scored by the model like any other text and the search knows nothing of it; a beam spreads only where the prefix
leaves a choice. The prefix does not count against the sentence's `max_len`. A prefix token no search takes (<pad>
or <s>; in `greedy_search`, one of `banned`) is a ValueError naming it: forced, it would leave no token to take.
"""
from __future__ import annotations

import dataclasses
import numbers
from fractions import Fraction
from typing import Dict, List, Optional, Sequence, Tuple, Union

import mxnet as mx
import numpy as np

from nmt.models.base import Seq2SeqModel
from nmt.models.ensemble import as_model
from nmt.parallel import to_device
from nmt.search_batch import Hyps, SearchBatch
from nmt.search_blocks import Forcing, TargetPrefix, as_prefix, update_block
from nmt.tokenizer import BOS_ID

# MXNet 1.9.1's builds index arrays with 32-bit integers: a search step's scores (hypotheses x target vocabulary)
# must stay below this (`search_too_wide`).
MAX_ARRAY_SIZE = 2 ** 31

MaxLen = Union[int, Sequence[int], np.ndarray]
Models = Union[Seq2SeqModel, Sequence[Seq2SeqModel]]
NBest = List[Tuple[List[int], float]]
# per sentence, the token ids its translations must start with, or a TargetPrefix (None or []: none)
Prefixes = Optional[Sequence[Union[None, Sequence[int], TargetPrefix]]]


def _max_lens(max_len: MaxLen, batch: int) -> np.ndarray:
    """Per-sentence maximum output length (steps, EOS included) as an int array of shape (batch,)."""
    arr = np.asarray(max_len)
    if arr.ndim == 0:
        arr = np.full(batch, int(arr))
    if arr.shape != (batch,):
        raise ValueError(f"max_len must be an int or have one entry per sentence ({batch}); got shape {arr.shape}")
    return np.maximum(arr.astype(np.int64), 0)


def length_limits(src_lens: np.ndarray, a: float, b: int) -> np.ndarray:
    """The most steps each sentence's translation may take (EOS included): a x its source length (EOS included)
    + b, rounded up, computed exactly with `a` as the decimal it is written as (its shortest repr): in binary floating
    point 1.1 x 50 is 55.00000000000001, which would round up to 56, and rounding the product to some decimals first
    is wrong in turn for products near 1e-10 (rounded to 0 steps) or over 1e9 (an ulp above a whole number)."""
    num, den = Fraction(str(float(a))).as_integer_ratio()
    lens = np.asarray(src_lens)
    return np.array([-(-(num * int(n) + int(b) * den) // den) for n in lens.ravel()],
                    dtype=np.int64).reshape(lens.shape)


def reached_limit(tokens: Sequence[int], limit: int, prefix: Union[None, Sequence[int], TargetPrefix]) -> bool:
    """Whether a hypothesis of `tokens` (EOS excluded) took its sentence's every step without reaching EOS: it was
    cut off by the length `limit`, raised by its prefix's steps as the search raises it."""
    prefix = as_prefix(prefix)
    return len(tokens) >= limit + (prefix.steps if prefix is not None else 0)


def length_penalty(lengths: np.ndarray, alpha: float) -> np.ndarray:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + lengths) / 6.0) ** alpha


def greedy_search(model: Models, src: mx.nd.NDArray, src_len: mx.nd.NDArray, max_len: MaxLen,
                  sample: Optional[int] = None, alpha: float = 0.6, prefixes: Prefixes = None,
                  banned: Sequence[int] = ()) -> List[Tuple[List[int], float]]:
    """Most probable next token at each step; per sentence (token ids without BOS/EOS, score), the score as
    `beam_search` gives it with length penalty `alpha` (beam search with beam 1 is this search). `model`: a model
    or a list of models (an ensemble).

    With `sample` the next token is drawn instead from the model's distribution, renormalized over its `sample`
    most probable tokens (0: over the whole vocabulary), with MXNet's random generator of `src`'s device
    (`mx.random.seed`): the same seed gives the same translations of the same batches.

    `prefixes`: per sentence, token ids its translation starts with (see the module's docstring); `banned`: token
    ids never taken (`Tokenizer.never_written`, for sampling)."""
    model = as_model(model)
    batch, ctx = src.shape[0], src.context
    forcing = Forcing(ctx)
    limits = forcing.add(range(batch), prefixes, _max_lens(max_len, batch), banned)
    if int(limits.max(initial=0)) == 0:
        return [([], 0.0) for _ in range(batch)]
    if sample is not None:
        check_int("sample", sample)
        if sample < 0:
            raise ValueError(f"sample must be >= 0 (got {sample})")
    update = update_block(ctx, sample_top=-1 if sample is None else min(sample, model.tgt_vocab_size))
    ban = np.zeros((1, model.tgt_vocab_size), dtype=np.float32)
    ban[0, list(banned)] = -np.inf
    ban = to_device(ban, ctx) if len(banned) else None

    def advance(state, hyps, first):   # the step of `search`, the SearchBatch made below (its ids: the sentences)
        log_probs, state, _ = model.hybrid_step(hyps.prev, state)
        log_probs = forcing.apply(log_probs if ban is None else mx.nd.broadcast_add(log_probs, ban), search.ids, 1)
        token, done, steps, emitted, scores = update(log_probs, hyps.finished, hyps.lengths, hyps.limits,
                                                     hyps.scores)
        forcing.after(search.ids, 1, token, None)
        hyps = dataclasses.replace(hyps, prev=token, finished=done, lengths=steps, scores=scores)
        return state, hyps, emitted, None, done

    search = SearchBatch(advance, 1)
    zeros = to_device(np.zeros(batch), ctx)
    search.join(model.init_state(model.encode(src, src_len)),
                Hyps(prev=to_device(np.full(batch, BOS_ID), ctx), limits=to_device(limits, ctx),
                      lengths=zeros, finished=to_device(limits == 0, ctx), scores=zeros),
                np.arange(batch))
    out: List[Tuple[List[int], float]] = [([], 0.0) for _ in range(batch)]
    while search.size:
        search.step()
        for i, tokens, (raw, lengths) in search.take():
            score = raw[0].astype(np.float64) / length_penalty(lengths[0].astype(np.int64), alpha)
            out[i] = ([int(x) for x in tokens[:, 0] if x >= 0], float(score))
    return out


def check_int(name: str, value) -> None:
    """TypeError unless `value` is an integer (not a bool): the search's blocks are built once for each value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")


def check_beam_args(beam_size: int, nbest: int) -> None:
    """TypeError unless both are ints; ValueError unless 1 <= nbest <= beam_size."""
    check_int("beam_size", beam_size)
    check_int("nbest", nbest)
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1 (got {beam_size})")
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest must be between 1 and beam_size={beam_size} (got {nbest})")


def search_too_wide(beam: int, batch: int, vocab: int, beam_flag: str, batch_flag: str) -> str:
    """Why a search of `beam` hypotheses for each of `batch` sentences cannot run over a `vocab`-piece target
    vocabulary (its step's scores pass `MAX_ARRAY_SIZE`), naming the flags that set them; "" when it can."""
    scores = beam * batch * vocab
    if scores < MAX_ARRAY_SIZE:
        return ""
    return (f"{beam_flag} {beam} x {batch_flag} {batch} hypotheses x {vocab} target pieces is {scores:,} scores per "
            f"search step, more than MXNet's 32-bit indices reach (2**31): lower {beam_flag} or {batch_flag}")


class BeamStream:
    """Beam search over a stream of sentences on one device: `add` puts sentences into the running batch, `step`
    advances it by one token and returns the n-best lists of the sentences that are done, with the ids `add` gave
    them. A sentence decodes as it would alone (`beam_search`'s rules and results).

    Sentences join a running batch only if the model's step keeps its state's shapes (`fixed_step_shapes`: the
    state of a new sentence has the running one's shapes, its encoder memory padded to the widest source,
    `DecoderState.source_position_fields`); otherwise `can_join` says no and they wait until the batch is empty."""

    def __init__(self, model: Models, ctx: mx.Context, beam_size: int, nbest: int = 1, alpha: float = 0.6,
                 early_stop: bool = True):
        check_beam_args(beam_size, nbest)
        self.model, self.ctx, self.K, self.nbest, self.alpha = as_model(model), ctx, beam_size, nbest, alpha
        # stopping a sentence once its result is settled is exact for any non-decreasing length penalty
        self._settle = nbest if early_stop and alpha >= 0 else 0
        self._batch = SearchBatch(self._advance, beam_size)
        self._update = None
        self._lp_table: Optional[mx.nd.NDArray] = None
        self._bos: Optional[mx.nd.NDArray] = None
        self.left_last_step = False   # whether sentences left the batch at the last step (it changed shape)
        self._lengths: Dict[int, int] = {}   # source length (EOS included) of every sentence in the batch
        self._width = 0                       # positions of the batch's encoder memory
        self._forcing = Forcing(ctx)

    @property
    def size(self) -> int:
        """Sentences being decoded."""
        return self._batch.size

    @property
    def can_join(self) -> bool:
        """Whether sentences can be added now."""
        return self.size == 0 or self.model.fixed_step_shapes

    def add(self, src: mx.nd.NDArray, src_len: mx.nd.NDArray, max_len: MaxLen, ids: Sequence[int],
            prefixes: Prefixes = None) -> None:
        """Sentences `src` (n, S) with lengths (n,), at most `max_len` tokens each (besides their `prefixes`, token
        ids their translations start with), known from now on by `ids` (ints)."""
        n, K, ctx = src.shape[0], self.K, self.ctx
        if not self.can_join:
            raise ValueError(f"BeamStream.add: {type(self.model).__name__}'s state changes shape from step to step: "
                             "sentences can only start a batch")
        limits = self._forcing.add(ids, prefixes, _max_lens(max_len, n))
        self._length_penalties(int(limits.max(initial=0)) + 2)
        state = self.model.init_state(self.model.encode(src, src_len))
        if self._update is None:
            self._update = update_block(ctx, K, self.model.tgt_vocab_size, self._settle,
                                        len(state.arrays(moving_only=True)))
        scores = np.full((n, K), -np.inf)
        scores[:, 0] = 0.0  # one live hypothesis per sentence at the start, so beams do not duplicate it
        zeros = to_device(np.zeros(n * K), ctx)
        hyps = Hyps(prev=to_device(np.full(n * K, BOS_ID), ctx), limits=to_device(np.repeat(limits, K), ctx),
                     scores=to_device(scores.reshape(-1), ctx), lengths=zeros, finished=zeros, beam=K)
        first = self.size == 0
        if first:   # the first step runs the model on one row per sentence (its K beams are one hypothesis)
            self._bos = to_device(np.full(n, BOS_ID), ctx)
        self._batch.join(state if first else state.repeat(K), hyps, np.asarray(ids, dtype=np.int64), first=first)
        self._lengths.update(zip((int(i) for i in ids), src_len.asnumpy().astype(int).tolist()))
        self._width = max(self._width if not first else 0, int(src.shape[1]))

    def step(self) -> List[Tuple[int, NBest]]:
        """Advance every sentence by one token; (id, n-best list) of those that are done."""
        self._batch.step()
        done = [(i, self._nbest(tokens, final)) for i, tokens, final in self._batch.take()]
        self.left_last_step = bool(done)
        self._forget([i for i, _ in done])
        return done

    def cancel(self, ids: Sequence[int]) -> None:
        """Stop decoding the sentences `ids` (those still in the batch): they leave it now, and `step` never returns
        them. For a caller that no longer waits for them (a request that timed out)."""
        ids = [int(i) for i in ids if int(i) in self._lengths]
        if ids:
            self._batch.drop(ids)
            if self._batch.first:   # no step taken yet: the first step's tokens are one BOS per sentence
                self._bos = self._bos[:self.size]
            self.left_last_step = True   # the batch changed shape: a good step for others to join
            self._forget(ids)

    def _forget(self, ids: Sequence[int]) -> None:
        """Sentences `ids` have left the batch."""
        for i in ids:
            del self._lengths[i]
            self._forcing.discard(i)
        needed = max(self._lengths.values(), default=0)
        if 0 < needed < self._width:   # the longest sources left: the rest attend over no more than they need
            self._batch.state, self._width = self._batch.state.narrow_positions(needed), needed

    def _length_penalties(self, size: int) -> None:
        """Penalties of every length below `size`, computed in float64 once and rounded to float32 once."""
        if self._lp_table is None or self._lp_table.shape[0] < size:
            self._lp_table = to_device(length_penalty(np.arange(size), self.alpha), self.ctx)

    def _advance(self, state, hyps, first):
        log_probs, state, _ = self.model.hybrid_step(self._bos if first else hyps.prev, state)
        if first and self.K > 1:
            log_probs, state = mx.nd.repeat(log_probs, self.K, axis=0), state.repeat(self.K)
        log_probs = self._forcing.apply(log_probs, self._batch.ids, self.K)
        token, scores, lengths, finished, rows, emitted, done, *moving = self._update(
            log_probs, hyps.scores, hyps.lengths, hyps.finished, hyps.limits, self._lp_table,
            *state.arrays(moving_only=True))
        self._forcing.after(self._batch.ids, self.K, token, rows)
        hyps = dataclasses.replace(hyps, prev=token, scores=scores, lengths=lengths, finished=finished)
        return state.with_arrays(moving, moving_only=True), hyps, emitted, rows, done

    def _nbest(self, history: np.ndarray, final: Tuple[np.ndarray, np.ndarray]) -> NBest:
        raw, lengths = final
        score = raw.astype(np.float64) / length_penalty(lengths.astype(np.int64), self.alpha)
        live = [k for k in np.argsort(-score, kind="stable") if np.isfinite(score[k])]
        return [([int(x) for x in history[:, k] if x >= 0], float(score[k])) for k in live[:self.nbest]]


def beam_search(model: Models, src: mx.nd.NDArray, src_len: mx.nd.NDArray, beam_size: int, max_len: MaxLen,
                alpha: float = 0.6, nbest: int = 1, early_stop: bool = True, prefixes: Prefixes = None
                ) -> List[NBest]:
    """Beam search; per sentence up to `nbest` (token ids without BOS/EOS, score), best first.

    Scores are summed log-probabilities (the EOS one included) divided by the GNMT length penalty
    ((5 + |Y|) / 6) ** alpha, |Y| counting EOS. Finished hypotheses keep their beam slot and compete by
    that score with the extensions of the active ones; a sentence is done when all its slots are
    finished, and active hypotheses are finished as they are after `max_len` tokens. With beam 1 this is
    exactly greedy search. `model`: a model or a list of models (an ensemble).

    With `early_stop` (and alpha >= 0) a sentence stops as soon as no active hypothesis can still beat its
    `nbest`-th best finished one (`Settled`): the same result, fewer steps.

    `prefixes`: per sentence, token ids its translations start with (see the module's docstring).
    """
    check_beam_args(beam_size, nbest)
    batch = src.shape[0]
    limits = _max_lens(max_len, batch)
    if int(limits.max(initial=0)) == 0 and not any(map(as_prefix, prefixes or ())):
        return [[([], 0.0)] for _ in range(batch)]
    stream = BeamStream(model, src.context, beam_size, nbest, alpha, early_stop)
    stream.add(src, src_len, limits, np.arange(batch), prefixes)
    out: List[NBest] = [[] for _ in range(batch)]
    while stream.size:
        for i, hyps in stream.step():
            out[i] = hyps
    return out
