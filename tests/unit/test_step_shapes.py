"""`Seq2SeqModel.fixed_step_shapes` must tell the truth: the search plans its step graph once per batch shape
(`static_shape`) for a model that declares it, which is only correct if `step` keeps every state array's shape."""
import mxnet as mx
import pytest

from nmt.models import build_model
from nmt.models.ensemble import Ensemble
from synth import ARCHS, tiny_model_config


def _model(arch: str, seed: int = 0):
    mx.random.seed(seed)
    model = build_model(tiny_model_config(arch), 30, 30)
    model.initialize(mx.init.Xavier())
    return model


def _shapes(state):
    return [a.shape for a in state.arrays()]


@pytest.mark.parametrize("arch", ARCHS)
def test_fixed_step_shapes_is_what_step_does(arch):
    model = _model(arch)
    src = mx.nd.array([[5, 6, 7, 8], [9, 10, 3, 0]])
    state = model.init_state(model.encode(src, mx.nd.array([4, 3])))
    prev = mx.nd.array([2, 2])
    kept = []
    for _ in range(3):
        before = _shapes(state)
        _, state, _ = model.step(prev, state)
        kept.append(_shapes(state) == before)
    assert all(kept) == model.fixed_step_shapes, (arch, kept)


def test_an_ensemble_has_fixed_step_shapes_only_if_every_member_has():
    lstm, transformer = _model("lstm"), _model("transformer", 1)
    assert Ensemble([lstm, _model("lstm", 2)]).fixed_step_shapes
    assert not Ensemble([lstm, transformer]).fixed_step_shapes


@pytest.mark.parametrize("arch", ARCHS)
def test_the_planned_step_graph_equals_step_across_batch_shapes(arch):
    """The hybridized step (planned per shape for the LSTM) gives `step`'s results after the batch shrinks and
    grows again, as it does when a search sheds done sentences and the next batch starts."""
    model = _model(arch)
    for rows in (3, 2, 3, 1):
        src = mx.nd.array([[5, 6, 7, 8]] * rows)
        state = model.init_state(model.encode(src, mx.nd.array([4] * rows)))
        prev = mx.nd.array([2] * rows)
        want, want_state, _ = model.step(prev, state)
        got, got_state, _ = model.hybrid_step(prev, state)
        assert abs(got - want).max().asscalar() < 1e-5
        for a, b in zip(got_state.arrays(), want_state.arrays()):
            assert abs(a - b).max().asscalar() < 1e-5
