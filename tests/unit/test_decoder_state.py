"""DecoderState: select, reorder (source fields stay), repeat, the flat array list, nested and tuple fields."""
import dataclasses
from typing import Tuple

import mxnet as mx
import numpy as np
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


def test_select_takes_every_field():
    s = toy().select(nd.array([2, 0]))
    assert col(s.memory) == [20, 0] and col(s.h) == [2.5, 0.5] and [col(c) for c in s.caches] == [[4, 0], [6, 0]]
    assert s.extra is None and s.num_rows == 2


def test_reorder_leaves_source_fields():
    s = toy().reorder(nd.array([1, 1, 0]))
    assert col(s.memory) == [0, 10, 20] and col(s.h) == [1.5, 1.5, 0.5] and col(s.caches[1]) == [3, 3, 0]


def test_repeat_copies_each_row_k_times_in_a_row():
    s = toy(2).repeat(3)
    assert col(s.memory) == [0, 0, 0, 10, 10, 10] and col(s.caches[0]) == [0, 0, 0, 2, 2, 2]
    one = toy()
    assert one.repeat(1) is one


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
    s = e.repeat(2).select(nd.array([5]))
    assert all(col(m.memory) == [20] for m in s.members) and len(e.arrays()) == 8
    np.testing.assert_array_equal(e.with_arrays(e.arrays()).members[1].h.asnumpy(), toy().h.asnumpy())


def test_moving_arrays_are_what_reorder_moves():
    s, rows = EnsembleState((toy(), toy())), nd.array([2, 0, 1])
    moving = s.arrays(moving_only=True)
    assert len(moving) == 6   # h and two caches per member; the memories stay
    moved = s.with_arrays([nd.take(a, rows) for a in moving], moving_only=True)
    for got, want in zip(moved.arrays(), s.reorder(rows).arrays()):
        np.testing.assert_array_equal(got.asnumpy(), want.asnumpy())
