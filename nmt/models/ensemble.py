"""An ensemble of models as one `Seq2SeqModel`: the search decodes it like any model.

Members share both vocabularies (any architectures) and are given once each; every member encodes the source and
runs its own decoder step, and the ensemble's log-probabilities are the mean of the members' (as averaging their
log-linear scores: not renormalized, so scores of an ensemble of a model and its copy are that model's).
"""
from __future__ import annotations

import dataclasses
from typing import Any, List, Sequence, Tuple

import mxnet as mx

from nmt.models.base import DecoderState, Seq2SeqModel, array_module


@dataclasses.dataclass(frozen=True)
class EnsembleState(DecoderState):
    """One state per member, in member order (each reorders its own fields as it defines them)."""

    members: Tuple[DecoderState, ...]


def _mean(F, arrays):
    """The mean of equally shaped arrays (a single one is returned as it is)."""
    return arrays[0] if len(arrays) == 1 else F.add_n(*arrays) * (1.0 / len(arrays))


def models_in(member) -> List[Seq2SeqModel]:
    """The models a member decodes with (or a list of members: theirs): itself, or an `Ensemble`'s members, all the
    way down."""
    if isinstance(member, (list, tuple)):
        return [m for inner in member for m in models_in(inner)]
    return [m for inner in member.members for m in models_in(inner)] if isinstance(member, Ensemble) else [member]


def _check_given_once(members: Sequence[Seq2SeqModel]) -> None:
    """ValueError naming a model object that two members hold (the same member twice, or one an `Ensemble` member
    holds too): the ensemble's mean would count it twice, as `Translator.from_dir` refuses a directory given twice."""
    seen: dict = {}   # id(model) -> the first member holding it (1-based); an Ensemble member holds each once
    for i, member in enumerate(members, 1):
        for m in models_in(member):
            j = seen.setdefault(id(m), i)
            if j == i:
                continue
            where, again = (f"member {k}" if members[k - 1] is m else f"a model of member {k} (an Ensemble)"
                            for k in (i, j))
            raise ValueError(f"ensemble {where} is {again} again (the same {type(m).__name__} object): the "
                             "ensemble's mean would count that model twice; give each model once")


class Ensemble(Seq2SeqModel):
    """Members decoding together, following the mean of their log-probabilities. A ValueError names a member
    given twice (the same object, also within a member that is an Ensemble) or one with other vocabularies.

    Not hybridized as a whole (members built alike have parameters of the same names): each member runs its own
    graphs. Its `forward` is the mean of the members' teacher-forced log-probabilities (B,T,V)."""

    def __init__(self, members: Sequence[Seq2SeqModel], **kwargs):
        members = list(members)
        if not members:
            raise ValueError("an ensemble needs at least one model")
        first = members[0]
        _check_given_once(members)
        for i, m in enumerate(members[1:], 2):
            if (m.src_vocab_size, m.tgt_vocab_size) != (first.src_vocab_size, first.tgt_vocab_size):
                raise ValueError(f"ensemble member {i} has vocabularies of {m.src_vocab_size}/{m.tgt_vocab_size} "
                                 f"pieces, member 1 {first.src_vocab_size}/{first.tgt_vocab_size}: members must "
                                 "share their source and target vocabularies")
        kwargs.setdefault("prefix", "ensemble_")
        super().__init__(first.cfg, first.src_vocab_size, first.tgt_vocab_size, **kwargs)
        self._size = len(members)
        self.fixed_step_shapes = all(m.fixed_step_shapes for m in members)
        for i, m in enumerate(members):
            setattr(self, f"member{i}", m)

    @property
    def members(self) -> Tuple[Seq2SeqModel, ...]:
        return tuple(getattr(self, f"member{i}") for i in range(self._size))

    def hybrid_forward(self, F, src, src_len, tgt_in):
        return _mean(F, [F.log_softmax(m(src, src_len, tgt_in), axis=-1) for m in self.members])

    def log_probs(self, src: mx.nd.NDArray, src_len: mx.nd.NDArray, tgt_in: mx.nd.NDArray) -> mx.nd.NDArray:
        """The mean of the members' teacher-forced log-probabilities, as `step` gives them (not renormalized)."""
        return self(src, src_len, tgt_in)

    def encode(self, src: mx.nd.NDArray, src_len: mx.nd.NDArray) -> Tuple[Any, ...]:
        return tuple(m.encode(src, src_len) for m in self.members)

    def init_state(self, encoded: Tuple[Any, ...]) -> EnsembleState:
        return EnsembleState(tuple(m.init_state(e) for m, e in zip(self.members, encoded)))

    def step(self, prev_tokens, state: EnsembleState):
        """Mean log-probabilities and mean attention of the members' `step`s."""
        return self._combine(prev_tokens, state, [m.step(prev_tokens, s) for m, s in zip(self.members, state.members)])

    def hybrid_step(self, prev_tokens, state: EnsembleState):
        """As `step`, each member running its own hybridized step."""
        return self._combine(prev_tokens, state,
                             [m.hybrid_step(prev_tokens, s) for m, s in zip(self.members, state.members)])

    @staticmethod
    def _combine(prev_tokens, state: EnsembleState, outs):
        F = array_module(prev_tokens)
        log_probs = _mean(F, [lp for lp, _, _ in outs])
        attention = _mean(F, [a for _, _, a in outs])
        return log_probs, EnsembleState(tuple(s for _, s, _ in outs), beam=state.beam), attention


def as_model(model) -> Seq2SeqModel:
    """A model, or an `Ensemble` of a list or tuple of models (one model alone is returned as it is)."""
    if isinstance(model, (list, tuple)):
        return model[0] if len(model) == 1 else Ensemble(model)
    return model
