"""`Seq2SeqModel.fixed_step_shapes` must tell the truth: the search plans its step graph once per batch shape
(`static_shape`) for a model that declares it, which is only correct if `step` keeps every state array's shape."""
import dataclasses

import mxnet as mx
import numpy as np
import pytest

from nmt.models import build_model
from nmt.models.ensemble import Ensemble
from tests.synth import ARCHS, tiny_model_config


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


@pytest.mark.parametrize("arch", ARCHS)
def test_every_source_field_that_runs_over_source_positions_is_named(arch):
    """A state class that left its encoder memory out of `source_position_fields` decoded alone and passed the step
    tests, and an ensemble of it with an LSTM crashed with an MXNetError ("Incompatible attr ... expected [18,10],
    got [18,16]") once the search cut the positions of a done long sentence: its attention kept the old width."""
    model, positions = _model(arch), 11   # (a length no tiny model's other sizes have)
    src = mx.nd.array((np.arange(3 * positions).reshape(3, positions) % 25) + 3)
    state = model.init_state(model.encode(src, mx.nd.array([positions, 7, 4])))
    cls = type(state)

    def arrays(value):
        return [a for v in value for a in arrays(v)] if isinstance(value, tuple) else [] if value is None else [value]
    for name in cls.source_fields:
        for a in arrays(getattr(state, name)):
            axes = [i for i, n in enumerate(a.shape) if n == positions]
            named = name in cls.source_position_fields
            assert (axes == [cls.source_position_axis]) if named else not axes, \
                f"{cls.__name__}.{name} {a.shape}: source positions on axis {axes}, source_position_fields " \
                f"{cls.source_position_fields} on axis {cls.source_position_axis}"


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


@pytest.mark.parametrize("arch", ARCHS + ("lstm-mlp-lexical",))
@pytest.mark.parametrize("hybrid", [False, True])
def test_beams_share_their_sentence_s_source_row(arch, hybrid):
    """A step over K hypotheses per sentence and one memory row per sentence (`repeat(K)`) computes what a step
    computes when every hypothesis has its own copy of the memory (a state of beam 1 with each sentence taken K
    times), for every architecture's way of attending (dot, mlp with the lexical model, multi-head)."""
    if arch == "lstm-mlp-lexical":
        mx.random.seed(0)
        cfg = dataclasses.replace(tiny_model_config("lstm"), attention="mlp", lexical_model=True, num_layers=2)
        model = build_model(cfg, 30, 30)
        model.initialize(mx.init.Xavier())
    else:
        model = _model(arch)
    src = mx.nd.array([[5, 6, 7, 8, 9], [9, 10, 3, 0, 0]])
    state = model.init_state(model.encode(src, mx.nd.array([5, 3])))
    step = model.hybrid_step if hybrid else model.step
    _, state, _ = step(mx.nd.array([2, 2]), state)   # one hypothesis per sentence at first
    shared, copied = state.repeat(3), state.select(mx.nd.array([0, 0, 0, 1, 1, 1]))
    assert shared.beam == 3 and copied.beam == 1
    assert shared.arrays()[0].shape[0] == 2 and copied.arrays()[0].shape[0] == 6
    tokens = mx.nd.array([4, 11, 12, 13, 14, 15])
    for _ in range(2):
        (lp_a, shared, att_a), (lp_b, copied, att_b) = step(tokens, shared), step(tokens, copied)
        np.testing.assert_allclose(lp_a.asnumpy(), lp_b.asnumpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(att_a.asnumpy(), att_b.asnumpy(), rtol=1e-5, atol=1e-6)
        for a, b in zip(shared.arrays(moving_only=True), copied.arrays(moving_only=True)):
            np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-5, atol=1e-5)
        tokens = tokens[::-1]
    assert float(mx.nd.abs(lp_a[0] - lp_a[1]).max().asscalar()) > 1e-4   # the hypotheses do differ
