"""nmt.accel, the optional CPU top-k kernel, against its reference (MXNet's topk, `nmt.search.RowTopK`): the same
values and ids (ties, -inf, k = V), clear errors, the same beam-search hypotheses on a trained model, and a search
that works, with one line logged, when the kernel cannot be built or the package is absent."""
import os
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest

from nmt import search_update
from nmt.search import RowTopK, beam_search, set_row_topk
from tests.integration.test_copy_task_search import copy_batch, copy_model  # noqa: F401 (a fixture)
from tests.unit.test_search import assert_same_hypotheses

REPO = Path(__file__).resolve().parents[2]
accel = pytest.importorskip("nmt.accel")


@pytest.fixture
def kernel():
    """The accel module with its kernel loaded (skip, with the reason, when it cannot be built here); the search's
    top-k choice is restored afterwards."""
    if accel.status() != "loaded":
        pytest.skip(f"nmt.accel kernel not available: {accel.status()}")
    before = search_update.ROW_TOPK
    yield accel
    search_update.ROW_TOPK = before


def both(x, k):
    """(kernel values, ids), (MXNet values, ids) as numpy arrays."""
    ours = mx.nd.nmt_row_topk(mx.nd.array(x), k=k)
    ref = mx.nd.topk(mx.nd.array(x), axis=-1, k=k, ret_typ="both")
    return [a.asnumpy() for a in ours], [a.asnumpy() for a in ref]


@pytest.mark.parametrize("case", ["random", "ties", "neg_inf", "all_neg_inf", "k_equals_v", "short_rows"])
def test_kernel_matches_mxnet_topk(kernel, case):
    rng = np.random.RandomState(0)
    x, k = rng.randn(37, 1000).astype("float32"), 4
    if case == "ties":            # few distinct values: the lower id first among equal ones
        x = rng.randint(0, 3, (37, 1000)).astype("float32")
    elif case == "neg_inf":       # finished-looking rows: most tokens -inf
        x[rng.rand(37, 1000) < 0.995] = -np.inf
    elif case == "all_neg_inf":
        x[:] = -np.inf
    elif case == "k_equals_v":
        x, k = rng.randint(0, 4, (5, 7)).astype("float32"), 7
    elif case == "short_rows":    # shorter than one 32-value chunk, and a remainder after the chunks
        x, k = rng.randn(9, 45).astype("float32"), 3
    (values, ids), (ref_values, ref_ids) = both(x, k)
    np.testing.assert_array_equal(values, ref_values)
    np.testing.assert_array_equal(ids, ref_ids)
    assert ids.dtype == ref_ids.dtype == np.float32


def test_kernel_block_hybridized(kernel):
    block = kernel.NativeRowTopK(5)
    block.hybridize(static_alloc=True)
    x = mx.nd.array(np.random.RandomState(1).randn(64, 3000))
    for ours, ref in zip(block(x), RowTopK(5)(x)):
        np.testing.assert_array_equal(ours.asnumpy(), ref.asnumpy())


@pytest.mark.parametrize("shape,k", [((4, 6), 7), ((4, 6), 0), ((24,), 2), ((2, 3, 4), 2)])
def test_kernel_rejects_bad_shapes_and_k(kernel, shape, k):
    with pytest.raises(mx.base.MXNetError, match=r"nmt_row_topk: expects an \(N,V\) input and 1 <= k <= V"):
        mx.nd.nmt_row_topk(mx.nd.zeros(shape), k=k).wait_to_read()


def test_search_same_hypotheses_with_and_without(kernel, copy_model):
    model, _ = copy_model
    (src, src_len, *_), _ = copy_batch(np.random.RandomState(5), 48)
    results = {}
    for name, block in (("mxnet", RowTopK), ("accel", kernel.NativeRowTopK)):
        set_row_topk(block)
        results[name] = beam_search(model, src, src_len, beam_size=4, max_len=12, nbest=3)
    assert_same_hypotheses(results["mxnet"], results["accel"], atol=0.0)
    kernel.install()
    assert search_update.ROW_TOPK is kernel.NativeRowTopK
    kernel.uninstall()
    assert search_update.ROW_TOPK is RowTopK


# A beam search on an untrained model by the search's default choice; prints its best ids and, when given,
# whether nmt.accel was imported.
_DECODE = """
import logging, sys
import mxnet as mx, numpy as np
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
if sys.argv[1] == "absent":
    sys.modules["nmt.accel"] = None   # as if the package were not installed
from nmt.config import ModelConfig
from nmt.models import build_model
from nmt.search import beam_search
mx.random.seed(3)
model = build_model(ModelConfig(embed_size=16, hidden_size=16, dropout=0.0, word_dropout=0.0), 30, 30)
model.initialize(mx.init.Xavier())
src = mx.nd.array(np.random.RandomState(0).randint(4, 30, (6, 7)))
print([h[0][0] for h in beam_search(model, src, mx.nd.array([7, 5, 3, 7, 2, 6]), 4, 9)])
print(sorted(m for m in sys.modules if m.startswith("nmt.accel") and sys.modules[m] is not None))
"""


def _decode(tmp_path, mode, **env):
    run = subprocess.run([sys.executable, "-c", _DECODE, mode], capture_output=True, text=True, timeout=300,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "NMT_CACHE_DIR": str(tmp_path),
                                        **env})
    assert run.returncode == 0, run.stderr
    ids, modules = run.stdout.splitlines()
    return ids, modules, [ln for ln in run.stderr.splitlines() if ln.strip()]


def test_failed_build_falls_back_with_one_line(tmp_path):
    reference, _, _ = _decode(tmp_path, "off", NMT_ACCEL="0")
    ids, modules, stderr = _decode(tmp_path, "bad-compiler", CXX="false")
    assert ids == reference and modules == "['nmt.accel']"
    assert len(stderr) == 1 and stderr[0].startswith("nmt.accel: nmt.accel not used: build or load failed"), stderr
    assert not list(tmp_path.glob("*.so"))


def test_search_runs_with_accel_off_or_absent(tmp_path):
    off_ids, off_modules, off_err = _decode(tmp_path, "off", NMT_ACCEL="0")
    absent_ids, absent_modules, absent_err = _decode(tmp_path, "absent")
    assert off_ids == absent_ids
    assert off_modules == absent_modules == "[]" and off_err == absent_err == []


def test_translate_no_accel_flag_same_output(kernel, tmp_path_factory, capsys):
    from tests.test_translate import run, synth_file, tiny_model
    model = tiny_model(tmp_path_factory)
    argv = ["--model-dir", model, "--input", synth_file(model, "test.ko"), "--beam-size", 4]
    kernel.install()
    code, accelerated, _ = run(argv, capsys)
    assert code == 0 and search_update.ROW_TOPK is kernel.NativeRowTopK
    code, plain, _ = run(argv + ["--no-accel"], capsys)
    assert code == 0 and search_update.ROW_TOPK is RowTopK
    assert plain == accelerated and plain.strip()
