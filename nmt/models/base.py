"""The model interface: what training, search, ensembles, scoring, attention plots and benchmarks see of a model.

An architecture is a `Seq2SeqModel` subclass registered under a name (`nmt.models.register`). It implements:

* teacher-forced `forward(src, src_len, tgt_in) -> logits (B,T,V)` (the HybridBlock's `hybrid_forward`),
* `encode(src, src_len) -> encoded` (whatever its decoder needs; source lengths included),
* `init_state(encoded) -> DecoderState` (one row per sentence),
* `step(prev_tokens (N,), state) -> (log_probs (N,V), state, attention (N,S))`.

`step` runs the decoder's own blocks: the same parameters and the same math as `forward`, one position at a time.
A search never looks inside a state: it calls `repeat` (each sentence's row K times, for K beams), `reorder`
(hypotheses move between the beams of their own sentence) and `select` (sentences leave the batch).
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Sequence, Tuple

import mxnet as mx
from mxnet import gluon

NDArray = mx.nd.NDArray


def array_module(x: Any):
    """`mx.sym` for a Symbol (inside a hybridized graph), else `mx.nd`: code shared by both paths takes its `F`
    from its input."""
    return mx.sym if isinstance(x, mx.sym.Symbol) else mx.nd


@dataclasses.dataclass(frozen=True)
class DecoderState:
    """A decoder state with named fields; every field is an NDArray with one row per hypothesis on axis 0.

    `source_fields` name the fields that are the same for every hypothesis of a sentence (encoder memory, source
    length): `reorder` leaves them as they are, since beams only ever move within their own sentence. Subclasses
    are frozen dataclasses whose fields are all NDArrays (or nested `DecoderState`s)."""

    source_fields: ClassVar[Tuple[str, ...]] = ()

    def _map(self, fn, names: Sequence[str]) -> "DecoderState":
        changes = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, DecoderState):
                changes[f.name] = fn(value)
            elif f.name in names and value is not None:
                changes[f.name] = fn(value)
        return dataclasses.replace(self, **changes)

    def _names(self) -> Tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self))

    def select(self, rows: NDArray) -> "DecoderState":
        """The hypotheses `rows` (int or float indices on the state's device), in that order; every field."""
        return self._map(lambda v: v.select(rows) if isinstance(v, DecoderState) else mx.nd.take(v, rows),
                         self._names())

    def reorder(self, rows: NDArray) -> "DecoderState":
        """Hypotheses moved to `rows` within their own sentences (a beam search's back-pointers): the source
        fields stay as they are."""
        moving = tuple(n for n in self._names() if n not in self.source_fields)
        return self._map(lambda v: v.reorder(rows) if isinstance(v, DecoderState) else mx.nd.take(v, rows), moving)

    def repeat(self, k: int) -> "DecoderState":
        """Each row `k` times in a row (row b becomes rows b*k .. b*k + k - 1): one copy per beam."""
        if k == 1:
            return self
        return self._map(lambda v: v.repeat(k) if isinstance(v, DecoderState) else mx.nd.repeat(v, k, axis=0),
                         self._names())

    @property
    def num_rows(self) -> int:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, DecoderState):
                return value.num_rows
            if value is not None:
                return int(value.shape[0])
        raise ValueError(f"{type(self).__name__} has no arrays")


class Seq2SeqModel(gluon.HybridBlock):
    """Base of every architecture. `cfg` is the `ModelConfig` it was built from; the vocabulary sizes are those of
    the SentencePiece models it was built for."""

    def __init__(self, cfg, src_vocab_size: int, tgt_vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        self.cfg = cfg
        self.src_vocab_size, self.tgt_vocab_size = int(src_vocab_size), int(tgt_vocab_size)

    def hybrid_forward(self, F, src, src_len, tgt_in):   # pragma: no cover - interface
        """Teacher-forced logits (B,T,V) of `tgt_in` (B,T) given `src` (B,S) and its lengths (B,)."""
        raise NotImplementedError

    def encode(self, src: NDArray, src_len: NDArray) -> Any:   # pragma: no cover - interface
        """Encode a batch of sources for `init_state`."""
        raise NotImplementedError

    def init_state(self, encoded: Any) -> DecoderState:   # pragma: no cover - interface
        """The decoder's state before the first target token, one row per sentence."""
        raise NotImplementedError

    def step(self, prev_tokens: NDArray, state: DecoderState
             ) -> Tuple[NDArray, DecoderState, NDArray]:   # pragma: no cover - interface
        """Log-probabilities (N,V) of the next token after `prev_tokens` (N,), the new state, and the attention
        over the source (N,S) that produced them (what attention plots show)."""
        raise NotImplementedError
