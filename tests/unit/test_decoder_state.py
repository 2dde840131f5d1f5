"""DecoderState: select (sentences with all their beams), reorder (source fields stay), repeat (source fields stay
one row per sentence), the flat array list, nested and tuple fields."""
import dataclasses
from typing import Tuple

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from nmt.models.base import DecoderState
from nmt.models.ensemble import EnsembleState


@dataclasses.dataclass(frozen=True)
class Toy(DecoderState):
    source_fields = ("memory",)
    memory: mx.nd.NDArray
    h: mx.nd.NDArray
    caches: Tuple[mx.nd.NDArray, ...] = ()
    extra: mx.nd.NDArray = None


def toy(n=3):
    rows = nd.arange(n).reshape((n, 1))
    return Toy(memory=rows * 10, h=rows + 0.5, caches=(rows * 2, rows * 3))


def col(x):
    return x.asnumpy()[:, 0].tolist()


def rows(state):
    """Hypotheses in a state: the rows of its moving fields."""
    return state.h.shape[0]


def test_select_takes_every_field():
    s = toy().select(nd.array([2, 0]))
    assert col(s.memory) == [20, 0] and col(s.h) == [2.5, 0.5] and [col(c) for c in s.caches] == [[4, 0], [6, 0]]
    assert s.extra is None and rows(s) == 2


def test_reorder_leaves_source_fields():
    s = toy().reorder(nd.array([1, 1, 0]))
    assert col(s.memory) == [0, 10, 20] and col(s.h) == [1.5, 1.5, 0.5] and col(s.caches[1]) == [3, 3, 0]


def test_repeat_copies_each_hypothesis_k_times_in_a_row_and_keeps_one_source_row():
    s = toy(2).repeat(3)
    assert col(s.memory) == [0, 10] and col(s.h) == [0.5] * 3 + [1.5] * 3 and col(s.caches[0]) == [0, 0, 0, 2, 2, 2]
    assert s.beam == 3 and rows(s) == 6 and s.repeat(2).beam == 6
    one = toy()
    assert one.repeat(1) is one


def test_select_takes_sentences_with_all_their_beams():
    s = toy(3).repeat(2).select(nd.array([2, 0]))
    assert col(s.memory) == [20, 0] and col(s.h) == [2.5, 2.5, 0.5, 0.5] and s.beam == 2 and rows(s) == 4


def test_concat_refuses_states_of_different_beams():
    with pytest.raises(ValueError, match=r"of \[1, 2\] beams per sentence"):
        DecoderState.concat([toy(2), toy(2).repeat(2)])
    joined = DecoderState.concat([toy(2).repeat(2), toy(1).repeat(2)])
    assert col(joined.memory) == [0, 10, 0] and rows(joined) == 6


def test_arrays_round_trip():
    s = toy()
    arrays = s.arrays()
    assert len(arrays) == 4
    back = s.with_arrays([a + 1 for a in arrays])
    assert col(back.memory) == [1, 11, 21] and col(back.caches[1]) == [1, 4, 7] and back.extra is None


def test_nested_states_follow_their_own_source_fields():
    e = EnsembleState((toy(), toy()))
    r = e.reorder(nd.array([2, 2, 2]))
    assert all(col(m.memory) == [0, 10, 20] and col(m.h) == [2.5] * 3 for m in r.members)
    s = e.repeat(2).select(nd.array([2]))
    assert all(col(m.memory) == [20] and col(m.h) == [2.5, 2.5] and m.beam == 2 for m in s.members)
    assert s.beam == 2 and len(e.arrays()) == 8
    np.testing.assert_array_equal(e.with_arrays(e.arrays()).members[1].h.asnumpy(), toy().h.asnumpy())


def test_moving_arrays_are_what_reorder_moves():
    s, rows = EnsembleState((toy(), toy())), nd.array([2, 0, 1])
    moving = s.arrays(moving_only=True)
    assert len(moving) == 6   # h and two caches per member; the memories stay
    moved = s.with_arrays([nd.take(a, rows) for a in moving], moving_only=True)
    for got, want in zip(moved.arrays(), s.reorder(rows).arrays()):
        np.testing.assert_array_equal(got.asnumpy(), want.asnumpy())
