"""nmt.native: the search's and the gradient sum's CPU kernels against MXNet's operators and numpy, their build
cache, and the fallback."""
import os
import subprocess
import sys
import textwrap

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from nmt import native

needs_native = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.status()}")


def reference_cell(gx, gh, c):
    """The search's LSTM cell on MXNet's operators (nmt.search_graph without native kernels)."""
    H = c.shape[1]
    i, f, g, o = (nd.slice_axis(gx + gh, axis=1, begin=k * H, end=(k + 1) * H) for k in range(4))
    c = nd.Activation(f, act_type="sigmoid") * c + nd.Activation(i, act_type="sigmoid") * nd.Activation(g, act_type="tanh")
    return nd.Activation(o, act_type="sigmoid") * nd.Activation(c, act_type="tanh"), c


@needs_native
@pytest.mark.parametrize("scale", [0.1, 3.0, 40.0])
def test_lstm_cell_matches_mxnet_operators(scale):
    rng = np.random.RandomState(0)
    gx, gh = (nd.array(rng.normal(0, scale, (37, 4 * 24))) for _ in range(2))
    c = nd.array(rng.normal(0, scale, (37, 24)))
    h, c_new = nd.nmt_lstm_cell(gx, gh, c)
    ref_h, ref_c = reference_cell(gx, gh, c)
    np.testing.assert_allclose(c_new.asnumpy(), ref_c.asnumpy(), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(h.asnumpy(), ref_h.asnumpy(), rtol=2e-6, atol=2e-6)


@needs_native
@pytest.mark.parametrize("H", [16, 37])
def test_attention_matches_mxnet_operators(H):
    """Masked dot-product attention as the model computes it (batch_dot, length mask, softmax, batch_dot), lengths
    of 0 (treated as 1), within and beyond the S columns."""
    rng = np.random.RandomState(H)
    B, T, S = 5, 4, 9
    query, values = nd.array(rng.normal(0, 1, (B, T, H))), nd.array(rng.normal(0, 1, (B, S, H)))
    lengths = nd.array([3, 0, 9, 12, 1])
    context, weights = nd.nmt_attention(query, values, lengths)
    scores = nd.batch_dot(query, values, transpose_b=True)
    mask = nd.broadcast_lesser(nd.arange(S).reshape((1, -1)), nd.clip(lengths, 1, 1e9).reshape((-1, 1)))
    ref = nd.softmax(nd.broadcast_add(scores, nd.expand_dims((1 - mask) * -1e9, axis=1)), axis=-1)
    np.testing.assert_allclose(weights.asnumpy(), ref.asnumpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(context.asnumpy(), nd.batch_dot(ref, values).asnumpy(), rtol=1e-5, atol=1e-5)
    assert (weights.asnumpy()[0, :, 3:] == 0).all() and (weights.asnumpy()[1, :, 1:] == 0).all()


@needs_native
@pytest.mark.parametrize("k, V", [(1, 5), (5, 5), (4, 64), (7, 64), (1, 1001), (4, 1001), (7, 1001)])
def test_row_topk_matches_mxnet_topk(k, V):
    rng = np.random.RandomState(V + k)
    x = rng.permutation(37 * V).reshape(37, V).astype("float32") / (37 * V)   # distinct values
    x[3] = np.log(np.linspace(1e-6, 1, V))[rng.permutation(V)]               # a peaked row
    x[5, : V // 2] = -np.inf                                                  # impossible tokens
    x = nd.log_softmax(nd.array(x) * 30, axis=-1)
    values, indices = nd.nmt_row_topk(x, k=k)
    ref_values, ref_indices = nd.topk(x, axis=-1, k=k, ret_typ="both")
    assert values.shape == indices.shape == (37, k)
    np.testing.assert_array_equal(values.asnumpy(), ref_values.asnumpy())
    np.testing.assert_array_equal(indices.asnumpy(), ref_indices.asnumpy())


@needs_native
def test_row_topk_keeps_the_lower_index_among_equal_values():
    x = nd.array([[0.0, 2.0, 1.0, 2.0, 2.0, -1.0] * 10])
    values, indices = nd.nmt_row_topk(x, k=4)
    assert values.asnumpy().tolist() == [[2.0, 2.0, 2.0, 2.0]]
    assert indices.asnumpy().tolist() == [[1.0, 3.0, 4.0, 7.0]]


@needs_native
@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_add_sumsq_sums_replicas_in_place_and_returns_the_sum_of_squares(replicas):
    """Each replica's arrays on its own CPU context; sizes below and above a 4096-value block and the OpenMP
    threshold. The sum is the replicas' float32 sum in order (as `DataParallel`'s elemwise_add fallback), bit for
    bit; the sum of squares float64's to float precision."""
    rng = np.random.RandomState(replicas)
    shapes = [(3,), (4097,), (700, 600), (2, 5, 7)]
    arrays = [[nd.array(rng.normal(0, 2, s), ctx=mx.cpu(r)) for s in shapes] for r in range(replicas)]
    before = [[a.asnumpy() for a in rep] for rep in arrays]
    expected = [before[0][i].copy() for i in range(len(shapes))]
    for r in range(1, replicas):
        for i in range(len(shapes)):
            expected[i] += before[r][i]
    flat = [a for rep in arrays for a in rep]
    out = nd.nmt_add_sumsq(*flat, num_arrays=len(shapes), num_replicas=replicas)
    assert out.shape == (1,) and out.context == mx.cpu(0)
    want = sum(float((e.astype(np.float64) ** 2).sum()) for e in expected)
    np.testing.assert_allclose(out.asscalar(), want, rtol=2e-6)
    for i, e in enumerate(expected):
        np.testing.assert_array_equal(arrays[0][i].asnumpy(), e)   # the first replica holds the sum
        for r in range(1, replicas):                               # the others are left as they were
            np.testing.assert_array_equal(arrays[r][i].asnumpy(), before[r][i])
    nan = nd.array([1.0, np.nan])
    assert np.isnan(nd.nmt_add_sumsq(nan, num_arrays=1, num_replicas=1).asscalar())


needs_masked_fc = pytest.mark.skipif(not native.has_op("nmt_masked_fc"),
                                     reason=f"nmt_masked_fc: native kernels {native.status()}, or not AVX2 without AVX-512")


@needs_masked_fc
@pytest.mark.parametrize("skipped", [(), (1, 5, 6, 11), tuple(range(12))])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("B, K, O", [(3, 33, 50), (3, 256, 64), (64, 40, 1030)])   # partial and whole panels
def test_masked_fc_is_fully_connected_on_the_rows_not_skipped(skipped, bias, B, K, O):
    rng = np.random.RandomState(1)
    x, w, b = (nd.array(rng.normal(0, 1, shape)) for shape in ((B, 4, K), (O, K), (O,)))
    skip = np.zeros(4 * B, np.float32)
    skip[list(skipped)] = 1
    y = (nd.nmt_masked_fc(x, nd.array(skip), w, b) if bias else
         nd.nmt_masked_fc(x, nd.array(skip), w, no_bias=1)).asnumpy()
    ref = nd.FullyConnected(x, w, b if bias else None, no_bias=not bias, num_hidden=O, flatten=False).asnumpy()
    assert y.shape == (B, 4, O)
    kept = skip == 0
    y, ref = y.reshape(4 * B, O), ref.reshape(4 * B, O)
    np.testing.assert_allclose(y[kept], ref[kept], rtol=1e-5, atol=2e-5 * np.sqrt(K))
    assert not y[~kept].any()


@needs_native
def test_kernels_reject_bad_shapes_with_a_message():
    with pytest.raises(mx.base.MXNetError, match="1 <= k <= V"):
        nd.nmt_row_topk(nd.zeros((2, 3)), k=4).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match=r"\(N,4H\)"):
        nd.nmt_lstm_cell(nd.zeros((2, 8)), nd.zeros((2, 8)), nd.zeros((2, 3)))[0].wait_to_read()
    with pytest.raises(mx.base.MXNetError, match=r"values \(B,S,H\)"):
        nd.nmt_attention(nd.zeros((2, 1, 4)), nd.zeros((2, 3, 5)), nd.ones((2,)))[0].wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="array 1 has different shapes in different replicas"):
        nd.nmt_add_sumsq(nd.zeros(3), nd.zeros(4), nd.zeros(3), nd.zeros(5), num_arrays=2,
                         num_replicas=2).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="num_replicas >= 1"):
        nd.nmt_add_sumsq(nd.zeros(3), num_arrays=1, num_replicas=0).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="nmt_pin_thread: needs cores, a comma-separated list"):
        nd.nmt_pin_thread(nd.zeros((1,)), cores="first").wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="nmt_beam_update: expects candidates"):
        nd.nmt_beam_update(nd.zeros((6, 4)), nd.zeros((6, 4)), *[nd.zeros(6)] * 4, nd.zeros(1), nd.ones(9), beam=4,
                           nbest=1, eos=2)[0].wait_to_read()   # 6 rows are not whole sentences of 4 beams
    if native.has_op("nmt_masked_fc"):
        with pytest.raises(mx.base.MXNetError, match=r"skip \(N,\) with N the rows of x"):
            nd.nmt_masked_fc(nd.zeros((2, 3, 4)), nd.zeros(2), nd.zeros((5, 4)), nd.zeros(5)).wait_to_read()
        with pytest.raises(mx.base.MXNetError, match=r"weight \(O,K\)"):
            nd.nmt_masked_fc(nd.zeros((2, 4)), nd.zeros(2), nd.zeros((5, 3)), no_bias=1).wait_to_read()


def _status_in_fresh_process(env: dict, tmp_path) -> str:
    """nmt.native.status() and the greedy search's output in a new process with `env` added."""
    code = textwrap.dedent("""
        import logging, mxnet as mx
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
        from nmt import native
        from nmt.config import ModelConfig
        from nmt.model import build_model
        from nmt.search import greedy_search
        print("STATUS", native.status())
        mx.random.seed(1)
        model = build_model(ModelConfig(embed_size=8, hidden_size=8, num_layers=1), 12, 12)
        model.initialize()
        print("OUT", greedy_search(model, mx.nd.array([[5, 6, 2]]), mx.nd.array([3]), 4))
    """)
    full = {**os.environ, "NMT_CACHE_DIR": str(tmp_path / "cache"), **env}
    done = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_without_a_compiler_the_search_runs_on_mxnet_operators(tmp_path):
    out = _status_in_fresh_process({"CXX": str(tmp_path / "no-such-compiler")}, tmp_path)
    assert "STATUS no C++ compiler found" in out
    assert "native CPU kernels not used" in out and "OUT [[" in out


def test_a_failed_build_says_why_and_falls_back(tmp_path):
    broken = tmp_path / "broken-cxx"
    broken.write_text("#!/bin/sh\necho 'broken-cxx: cannot compile today' >&2\nexit 3\n")
    broken.chmod(0o755)
    out = _status_in_fresh_process({"CXX": str(broken)}, tmp_path)
    assert "STATUS build or load failed" in out and "cannot compile today" in out
    assert "OUT [[" in out
    assert not list((tmp_path / "cache").glob("*"))   # nothing half-built left in the cache


def test_turned_off_by_environment(tmp_path):
    out = _status_in_fresh_process({"NMT_NATIVE_OPS": "0"}, tmp_path)
    assert "STATUS turned off (NMT_NATIVE_OPS=0)" in out and "OUT [[" in out


@needs_native
def test_the_build_is_cached_per_machine(tmp_path):
    first = _status_in_fresh_process({}, tmp_path)
    built = list((tmp_path / "cache").glob("nmt-native-ops-*.so"))
    assert "STATUS loaded" in first and "building the native CPU kernels" in first and len(built) == 1
    second = _status_in_fresh_process({}, tmp_path)
    assert "STATUS loaded" in second and "building" not in second
    assert list((tmp_path / "cache").glob("*")) == built


@needs_native
def test_an_unknown_target_cpu_says_which_setting_and_falls_back(tmp_path):
    out = _status_in_fresh_process({"NMT_NATIVE_MARCH": "no-such-cpu"}, tmp_path)
    assert "STATUS build or load failed" in out and "with NMT_NATIVE_MARCH=no-such-cpu" in out
    assert "no-such-cpu" in out.split("NMT_NATIVE_MARCH=no-such-cpu", 1)[1]   # and the compiler's own words
    assert "OUT [[" in out
    assert not list((tmp_path / "cache").glob("*"))


@needs_native
@pytest.mark.skipif(native.has_op("nmt_masked_fc") or not {"avx2", "fma"} <= set(native._cpu_signature().split()),
                    reason="nmt_masked_fc is built here already (its tests ran above), or this CPU has no AVX2/FMA")
def test_masked_fc_tests_on_an_avx2_build_of_the_kernels(tmp_path):
    """On an AVX-512 CPU the kernels are built without nmt_masked_fc, the AVX2 product that decoding uses on AVX2
    CPUs; its tests and the search tests that go through it run in a fresh process on an AVX2 build
    (NMT_NATIVE_MARCH=haswell), with a cache of its own."""
    here = os.path.dirname(os.path.abspath(__file__))
    tests = [os.path.join(here, "test_native.py::test_masked_fc_is_fully_connected_on_the_rows_not_skipped"),
             os.path.join(here, "test_native.py::test_kernels_reject_bad_shapes_with_a_message"),
             os.path.join(here, "test_search.py::test_search_step_computes_what_decode_step_computes")]
    env = {**os.environ, "NMT_NATIVE_MARCH": "haswell", "NMT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *tests], env=env,
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "skipped" not in summary and int(summary.split(" passed")[0].split()[-1]) >= 18, summary
