"""`StepExecutor`, the search's step for fixed-shape models (the LSTM) loaded for inference: the same results as
`step`, outputs a caller may keep, new parameter arrays read, a bounded number of bound shapes, and oneDNN's fused
RNN without a weight preparation at every step; a model in training keeps the hybridized `StepGraph`, which sees
every update."""
import subprocess
import sys
import textwrap

import mxnet as mx
import numpy as np
import pytest

from nmt.config import ModelConfig
from nmt.models import build_model
from nmt.models.base import StepExecutor, StepGraph


def _model(seed: int = 0, inference: bool = True, **kw):
    mx.random.seed(seed)
    model = build_model(ModelConfig(embed_size=16, hidden_size=16, num_layers=2, **kw), 40, 40)
    model.initialize(mx.init.Xavier())
    if inference:   # as Translator.from_dir leaves a model
        model.collect_params().setattr("grad_req", "null")
    return model


def _state(model, rows: int, width: int = 5):
    src = mx.nd.array(np.arange(rows * width).reshape(rows, width) % 30 + 4)
    return model.init_state(model.encode(src, mx.nd.array([width] * rows)))


def test_a_loaded_lstm_searches_with_the_executor_a_trained_one_with_the_graph():
    model = _model()
    model.hybrid_step(mx.nd.array([2, 2]), _state(model, 2))
    assert isinstance(model._compiled.step, StepExecutor)   # pylint: disable=protected-access
    model.collect_params().setattr("grad_req", "write")   # trained again: updates are written in place
    model.hybrid_step(mx.nd.array([2, 2]), _state(model, 2))
    assert isinstance(model._compiled.step, StepGraph)   # pylint: disable=protected-access


def test_outputs_survive_the_next_step():
    """The executor writes every step into the same arrays; what it returns are copies."""
    model = _model()
    state, prev = _state(model, 3), mx.nd.array([2, 2, 2])
    log_probs, new_state, attention = model.hybrid_step(prev, state)
    kept = [x.asnumpy().copy() for x in (log_probs, attention, *new_state.arrays())]
    model.hybrid_step(mx.nd.array([7, 8, 9]), new_state)
    for before, now in zip(kept, (log_probs, attention, *new_state.arrays())):
        np.testing.assert_array_equal(before, now.asnumpy())


@pytest.mark.parametrize("how", ["update in place", "new arrays", "load_parameters"])
def test_new_parameter_values_are_used(how, tmp_path):
    """A model in training is updated in place between validation searches; a loaded one may get new arrays or
    load other parameters."""
    model = _model(lexical_model=True, inference=how != "update in place")
    state, prev = _state(model, 2), mx.nd.array([3, 4])
    model.hybrid_step(prev, state)
    if how == "update in place":
        for p in model.collect_params().values():
            p.set_data(p.data() * 0.5 + 0.01)
    elif how == "new arrays":
        model.initialize(mx.init.Uniform(0.3), force_reinit=True)
    else:
        other = _model(seed=1, lexical_model=True)
        other.save_parameters(str(tmp_path / "other.params"))
        model.load_parameters(str(tmp_path / "other.params"))
    want, _, _ = model.step(prev, state)
    got, _, _ = model.hybrid_step(prev, state)
    assert abs(got - want).max().asscalar() < 1e-5


def test_a_changed_source_is_read_and_shapes_are_bounded():
    model = _model()
    prev = mx.nd.array([2, 2])
    for width in range(2, 2 + StepExecutor.MAX_SHAPES + 3):   # more widths than it keeps
        for seed in range(2):   # the same shape, other source arrays: they are copied in
            state = _state(model, 2, width)
            state = state.with_arrays([a + seed for a in state.arrays()])
            want, _, _ = model.step(prev, state)
            got, _, _ = model.hybrid_step(prev, state)
            assert abs(got - want).max().asscalar() < 1e-5
    assert len(model._compiled.step._bound) == StepExecutor.MAX_SHAPES   # pylint: disable=protected-access


_COUNT_RNN_PREPARATIONS = textwrap.dedent("""
    import sys
    import mxnet as mx
    from nmt.config import ModelConfig
    from nmt.models import build_model
    from nmt.models.base import StepGraph, StepExecutor
    model = build_model(ModelConfig(embed_size=32, hidden_size=32, num_layers=2), 50, 50)
    model.initialize(mx.init.Xavier())
    model.collect_params().setattr("grad_req", "null")
    step = (StepGraph if sys.argv[1] == "graph" else StepExecutor)(model)
    src = mx.nd.ones((8, 6))
    state = model.init_state(model.encode(src, mx.nd.array([6] * 8)))
    prev = mx.nd.ones(8)
    for _ in range(3):
        step(prev, state)[0].wait_to_read()
    print("STEPS", flush=True)
    for _ in range(5):
        step(prev, state)[0].wait_to_read()
    mx.nd.waitall()
""")


def test_the_fused_rnn_keeps_its_prepared_weights():
    """With the executor, steps after the first run oneDNN's RNN without concatenating its weights again (the
    planned graph does so at every step in most processes: docs/performance.md#decoding)."""
    env = {"DNNL_VERBOSE": "1", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", _COUNT_RNN_PREPARATIONS, "executor"], capture_output=True, text=True,
                         env=env, timeout=300, check=True).stdout
    if "_verbose,exec" not in out:
        pytest.skip("this MXNet build does not report oneDNN primitives (DNNL_VERBOSE)")
    after = out.split("STEPS", 1)[1].splitlines()
    executed = [line.split(",")[3] for line in after if "_verbose,exec" in line]
    assert executed.count("rnn") == 5
    assert executed.count("concat") == 0, executed
