"""The model interface: what training, search, ensembles, scoring, attention plots and benchmarks see of a model.

An architecture is a `Seq2SeqModel` subclass registered under a name (`nmt.models.register`). It implements:

* teacher-forced `forward(src, src_len, tgt_in) -> logits (B,T,V)` (the HybridBlock's `hybrid_forward`),
* `encode(src, src_len) -> encoded` (whatever its decoder needs; source lengths included),
* `init_state(encoded) -> DecoderState` (one row per sentence),
* `step(prev_tokens (N,), state) -> (log_probs (N,V), state, attention (N,S))`.

`log_probs(src, src_len, tgt_in)` (the log-softmax of `forward`) scores given translations in one pass.
`step` runs the decoder's own blocks: the same parameters and the same math as `forward`, one position at a time.
A search never looks inside a state: it calls `repeat` (each sentence's hypothesis K times, for K beams), `select`
(sentences leave the batch), `concat` (sentences join), `narrow_positions` (source positions cut) and `arrays` /
`with_arrays` (its update graph moves hypotheses between the beams of their sentence, as `reorder` does).
The source side of a state (encoder memory) has one row per sentence, shared by its beams: a step attends with
all of a sentence's hypotheses at once (`fold_beams`).
"""
from __future__ import annotations

import dataclasses
import threading
import types
import warnings
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple

import mxnet as mx
from mxnet import gluon

from nmt.config import ConfigError

NDArray = mx.nd.NDArray
MIN_VOCAB = 4   # PAD, UNK, BOS, EOS


def check_model_size(src_vocab: int, tgt_vocab: int, largest: Dict[str, int], total: int, flags: str) -> None:
    """ConfigError for a vocabulary without room for the 4 special pieces, or for a model past MXNet's 32-bit indices
    (2**31) in its largest parameter array (`largest`: name -> values) or in all its `total` values (8 GB): such a
    model failed to allocate with a traceback, or hung building millions of layers. `flags`: what makes it smaller."""
    for name, size in (("source", src_vocab), ("target", tgt_vocab)):
        if size < MIN_VOCAB:
            raise ConfigError(f"{name} vocabulary size must be at least {MIN_VOCAB} (PAD, UNK, BOS, EOS); got {size}")
    name, values = max(largest.items(), key=lambda item: item[1])
    if values >= 2 ** 31:
        raise ConfigError(f"the model's {name} would hold up to {values:,} values in one array, more than MXNet's "
                          f"32-bit indices reach (2**31): lower {flags}")
    if total >= 2 ** 31:
        raise ConfigError(f"the model would hold up to {total:,} parameters, more than 2**31 (8 GB of float32): lower "
                          f"{flags}")


def array_module(x: Any):
    """`mx.sym` for a Symbol (inside a hybridized graph), else `mx.nd`: code shared by both paths takes its `F`
    from its input."""
    return mx.sym if isinstance(x, mx.sym.Symbol) else mx.nd


def length_mask(F, like, lengths, axis: int):
    """(B, N) float mask, 1 where position < length along `axis` of `like` (N = that axis's size)."""
    positions = F.cast(F.contrib.arange_like(like, axis=axis), "float32")
    return F.broadcast_lesser(F.reshape(positions, shape=(1, -1)), F.reshape(lengths, shape=(-1, 1)))


def fold_beams(F, x, beam: int):
    """One step's hypotheses (B*beam, 1, ...) as (B, beam, ...): a sentence's beams side by side, like the positions
    of a target, so that they attend over their sentence's source (one row per sentence) in one product. The
    identity with beam 1, which the teacher-forced path (B,T,...) always has."""
    return x if beam == 1 else F.reshape(x, shape=(-1, beam, -2))


def unfold_beams(F, x, beam: int):
    """The inverse of `fold_beams`: (B, beam, ...) -> (B*beam, 1, ...)."""
    return x if beam == 1 else F.reshape(x, shape=(-1, 1, -2))


def param_like(param: gluon.Parameter, like: Any):
    """`param`'s Symbol inside a hybridized graph (when `like` is a Symbol), else its array on `like`'s device:
    what Gluon hands `hybrid_forward`, for code that is no `hybrid_forward` (a step, which takes the beam)."""
    return param.var() if isinstance(like, mx.sym.Symbol) else param.data(like.context)


def _apply(value: Any, fn: Callable[[Any], Any], on_state: Callable[["DecoderState"], Any]) -> Any:
    """`value` with `fn` applied to each array (a nested state goes to `on_state`, a tuple item by item)."""
    if isinstance(value, DecoderState):
        return on_state(value)
    if isinstance(value, tuple):
        return tuple(_apply(v, fn, on_state) for v in value)
    return None if value is None else fn(value)


def _leaves(value: Any, moving_only: bool) -> List[Any]:
    """The arrays of a field value, depth first (None contributes nothing)."""
    if isinstance(value, DecoderState):
        return value.arrays(moving_only)
    if isinstance(value, tuple):
        return [a for v in value for a in _leaves(v, moving_only)]
    return [] if value is None else [value]


def _concat_field(values: List[Any], name: str, pad_axis: Optional[int]) -> Any:
    """One field of several states, their rows one after the other (`DecoderState.concat`); `pad_axis`: the axis
    of source positions, padded with zeros to the longest."""
    if isinstance(values[0], DecoderState):
        return DecoderState.concat(values)
    if isinstance(values[0], tuple):
        return tuple(_concat_field(list(v), f"{name}[{i}]", pad_axis) for i, v in enumerate(zip(*values)))
    if values[0] is None:
        return None
    if pad_axis is not None:
        a, width = pad_axis, max(v.shape[pad_axis] for v in values)
        values = [v if v.shape[a] == width else
                  mx.nd.concat(v, mx.nd.zeros(v.shape[:a] + (width - v.shape[a],) + v.shape[a + 1:], ctx=v.context,
                                              dtype=v.dtype), dim=a) for v in values]
    shapes = {tuple(v.shape[1:]) for v in values}
    if len(shapes) > 1:
        raise ValueError(f"cannot join decoder states: {name} has rows of shapes {sorted(shapes)}")
    return mx.nd.concat(*values, dim=0)


@dataclasses.dataclass(frozen=True)
class DecoderState:
    """A decoder state with named fields; every field is an NDArray with one row per hypothesis or per sentence on
    axis 0, a tuple of those (e.g. one key/value cache per layer), a nested `DecoderState` (an ensemble's members)
    or None.

    `source_fields` name the fields that are the same for every hypothesis of a sentence (encoder memory, source
    length): they hold one row per sentence, which its `beam` hypotheses share (rows b*beam .. b*beam + beam - 1
    of every other field are sentence b's; `fold_beams` lines them up with it). `reorder` leaves them as they are,
    since beams only ever move within their own sentence. Subclasses are frozen dataclasses."""

    source_fields: ClassVar[Tuple[str, ...]] = ()
    # Source fields whose arrays run over source positions on axis `source_position_axis`, masked beyond the source
    # length (encoder memory): `concat` pads them with zeros to the widest, so sentences of any length join a
    # running search, and `narrow_positions` cuts them (an ensemble's members then attend over equal widths).
    source_position_fields: ClassVar[Tuple[str, ...]] = ()
    source_position_axis: ClassVar[int] = 1
    beam: int = dataclasses.field(default=1, kw_only=True)   # hypotheses per sentence

    def _map(self, fn: Callable[[Any], Any], on_state: Callable[["DecoderState"], Any],
             names: Sequence[str]) -> "DecoderState":
        changes = {name: _apply(getattr(self, name), fn, on_state) for name in names}
        return dataclasses.replace(self, **changes)

    def _names(self, moving_only: bool = False) -> Tuple[str, ...]:
        """The fields holding arrays (all but `beam`); `moving_only`: those of the hypotheses."""
        return tuple(f.name for f in dataclasses.fields(self)
                     if f.name != "beam" and not (moving_only and f.name in self.source_fields))

    def select(self, sentences: NDArray) -> "DecoderState":
        """The sentences at positions `sentences` (int or float indices on the state's device), in that order,
        with all their hypotheses."""
        rows = sentences
        if self.beam > 1:
            beams = mx.nd.arange(self.beam, ctx=sentences.context, dtype=sentences.dtype)
            rows = mx.nd.broadcast_add(mx.nd.reshape(sentences, shape=(-1, 1)) * self.beam,
                                       mx.nd.reshape(beams, shape=(1, -1))).reshape((-1,))
        state = self._map(lambda v: mx.nd.take(v, sentences), lambda s: s.select(sentences), self.source_fields)
        return state._map(lambda v: mx.nd.take(v, rows), lambda s: s.select(sentences), self._names(True))

    def reorder(self, rows: NDArray) -> "DecoderState":
        """Hypotheses moved to `rows` within their own sentences (a beam search's back-pointers): the source
        fields stay as they are."""
        return self._map(lambda v: mx.nd.take(v, rows), lambda s: s.reorder(rows), self._names(moving_only=True))

    def repeat(self, k: int) -> "DecoderState":
        """Each hypothesis `k` times in a row (row b becomes rows b*k .. b*k + k - 1): one copy per beam; the
        source fields stay one row per sentence."""
        if k == 1:
            return self
        state = self._map(lambda v: mx.nd.repeat(v, k, axis=0), lambda s: s.repeat(k), self._names(True))
        return dataclasses.replace(state, beam=self.beam * k)

    @staticmethod
    def concat(states: Sequence["DecoderState"]) -> "DecoderState":
        """The sentences of `states` one after the other (sentences joining a running search): states of one
        structure and beam whose arrays have the same shapes beyond axis 0 (the source positions of
        `source_position_fields` are padded), else ValueError naming the field."""
        first = states[0]
        if len({s.beam for s in states}) > 1:
            raise ValueError(f"cannot join decoder states of {sorted({s.beam for s in states})} beams per sentence")
        changes = {n: _concat_field([getattr(s, n) for s in states], f"{type(first).__name__}.{n}",
                                    first.source_position_axis if n in first.source_position_fields else None)
                   for n in first._names()}
        return dataclasses.replace(first, **changes)

    def narrow_positions(self, width: int) -> "DecoderState":
        """The state with `source_position_fields` cut to their first `width` positions (after the longest
        sentences left: the rest attend over no more than they need)."""
        def cut(v):
            a = self.source_position_axis
            return v if v.shape[a] <= width else mx.nd.slice_axis(v, axis=a, begin=0, end=width)
        changes = {n: _apply(getattr(self, n), cut if n in self.source_position_fields else lambda v: v,
                             lambda s: s.narrow_positions(width)) for n in self._names()}
        return dataclasses.replace(self, **changes)

    def arrays(self, moving_only: bool = False) -> List[Any]:
        """Every array of the state, field by field, depth first (what a hybridized step takes as inputs);
        `moving_only`: those `reorder` moves (a search may reorder them inside its own graph)."""
        return [a for n in self._names(moving_only) for a in _leaves(getattr(self, n), moving_only)]

    def with_arrays(self, arrays: Sequence[Any], moving_only: bool = False) -> "DecoderState":
        """A state of this one's structure holding `arrays` (NDArrays or Symbols) in the order of
        `arrays(moving_only)`; with `moving_only` the source fields stay as they are."""
        it = iter(arrays)
        return self._map(lambda _: next(it),
                         lambda s: s.with_arrays([next(it) for _ in s.arrays(moving_only)], moving_only),
                         self._names(moving_only))


class Seq2SeqModel(gluon.HybridBlock):
    """Base of every architecture. `cfg` is the `ModelConfig` it was built from; the vocabulary sizes are those of
    the SentencePiece models it was built for."""

    # Whether `step` returns a state whose arrays have the shapes of the one it was given (the LSTM's do; a
    # Transformer's key/value caches grow by one position per step). The search then plans its step graph once
    # per batch shape (`static_shape`), which also lets stateful operators (oneDNN's fused RNN on CPU) keep their
    # prepared weights from step to step instead of preparing them again at every call.
    fixed_step_shapes = False
    # The `ModelConfig` fields this architecture reads, besides `arch` and `shared_vocab`: `nmt-train` refuses a
    # flag of any other model field for it (`--hidden-size` with `--arch transformer`). Empty: every flag accepted.
    config_fields: Tuple[str, ...] = ()
    # The fields of `config_fields` a fine-tuning run (`--init-from`) may change: they regularize training and shape
    # no parameter (a small corpus often wants more dropout); any other is the model's.
    tunable_fields: Tuple[str, ...] = ()

    def __init__(self, cfg, src_vocab_size: int, tgt_vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        self.cfg = cfg
        self.src_vocab_size, self.tgt_vocab_size = int(src_vocab_size), int(tgt_vocab_size)
        # Built on first use; a namespace, not a Block attribute, so the graph is no child of the model (its
        # parameters would then be saved twice) and Gluon's check of containers holding Blocks stays quiet.
        self._compiled = types.SimpleNamespace(steps={})

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
        over the source (N,S) that produced them (what attention plots show). N = sentences x `state.beam`: the
        hypotheses of a sentence read its single row of the source fields (`fold_beams`)."""
        raise NotImplementedError

    def log_probs(self, src: NDArray, src_len: NDArray, tgt_in: NDArray) -> NDArray:
        """Teacher-forced log-probabilities (B,T,V): what `step` gives position by position, in one pass (forced
        decoding, `nmt.forced`)."""
        return mx.nd.log_softmax(self(src, src_len, tgt_in), axis=-1)

    def hybrid_step(self, prev_tokens: NDArray, state: DecoderState) -> Tuple[NDArray, DecoderState, NDArray]:
        """`step` run as one hybridized graph (`StepGraph`, built on first use): the same results, one cached
        operator call per step instead of one per operator; one graph per beam (hypotheses per sentence). What a
        search calls."""
        if state.beam not in self._compiled.steps:
            self._compiled.steps[state.beam] = StepGraph(self, state.beam)
        return self._compiled.steps[state.beam](prev_tokens, state)


_FIRST_BUILD = threading.Lock()


class StepGraph(gluon.HybridBlock):
    """A model's `step` as a hybridized block: the state goes in as its flat list of arrays (`arrays()`) and comes
    back rebuilt in the same structure (`with_arrays`). Arrays that the step passes through unchanged (the source
    fields) are not outputs of the graph: the caller's arrays are reused, with no copy per step."""

    def __init__(self, model: Seq2SeqModel, beam: int = 1):
        super().__init__(prefix=f"{model.prefix}step{beam}_")
        # Hybridized before the model becomes its child, so only this block is: the model itself (used for
        # training too) keeps its own mode and cached graph.
        self.hybridize(static_alloc=True, static_shape=model.fixed_step_shapes)
        self.model = model
        self._template = None   # the structure of the state being decoded
        self._passthrough = None   # positions of the state's arrays the step returns unchanged
        self._beam = beam   # a Python number of the graph, like the state's structure

    def __call__(self, prev_tokens: NDArray, state: DecoderState):   # pylint: disable=arguments-differ
        inputs = state.arrays()
        if self._template is not None and type(state) is not type(self._template):
            raise TypeError(f"{type(self).__name__}: a {type(state).__name__} after a {type(self._template).__name__}")
        if state.beam != self._beam:
            raise ValueError(f"{type(self).__name__} for beam {self._beam} given a state of beam {state.beam}")
        self._template = state
        if self._passthrough is None:   # the first call builds the graph, which uses the decoder's parameters
            # only: Gluon warns about the encoder's. One build at a time: the warning filters are global, and the
            # graphs of several devices (one thread each) would otherwise put back each other's.
            with _FIRST_BUILD, warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"Parameter .* is not used by any computation")
                outputs = super().__call__(prev_tokens, *inputs)
        else:
            outputs = super().__call__(prev_tokens, *inputs)
        log_probs, attention, changed = outputs[0], outputs[1], iter(outputs[2:])
        arrays = [inputs[i] if i in self._passthrough else next(changed) for i in range(len(inputs))]
        return log_probs, state.with_arrays(arrays), attention

    def hybrid_forward(self, F, prev_tokens, *arrays):
        log_probs, new_state, attention = self.model.step(prev_tokens, self._template.with_arrays(arrays))
        new = new_state.arrays()
        if len(new) != len(arrays):
            raise ValueError(f"{type(self.model).__name__}.step returned a state of another structure")
        self._passthrough = {i for i, (a, b) in enumerate(zip(new, arrays)) if a is b}
        return (log_probs, attention, *[a for i, a in enumerate(new) if i not in self._passthrough])
