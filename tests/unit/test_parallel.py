"""nmt.parallel: trimmed shares, zero-copy loading, the clip factor folded into the update, several devices
through the kvstore equal to one, skipped non-finite updates, AMP's CPU error."""
import logging

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon, nd

from nmt.batching import Batch, make_batch, split_batch
from nmt.config import ConfigError, ModelConfig, OptimConfig
from nmt.loss import Seq2SeqLoss
from nmt.models import build_model
from nmt.optim import build_optimizer
from nmt.parallel import DataParallel, init_amp, load_share, share_width, trim_batch

V = 25


def ragged_batch(seed=0, rows=6, src_pad=40, tgt_pad=50, max_len=9) -> Batch:
    rng = np.random.RandomState(seed)
    src = [list(rng.randint(4, V, rng.randint(1, max_len))) for _ in range(rows)]
    tgt = [list(rng.randint(4, V, rng.randint(1, max_len))) for _ in range(rows)]
    return make_batch(src, tgt, list(range(rows)), src_pad, tgt_pad)


def tiny_model(seed=1, dropout=0.0):
    mx.random.seed(seed)
    # dot attention: with mlp, Adam turns float rounding in the near-zero gradient of the query bias (softmax
    # hardly depends on it) into relative differences above this file's tolerances between device counts
    model = build_model(ModelConfig(embed_size=8, hidden_size=12, num_layers=2, dropout=dropout, word_dropout=0.0,
                                    attention="dot", tie_weights=False), V, V)
    return model


def test_share_width_ladder():
    assert [share_width(n, 100) for n in (0, 1, 7, 16, 17, 24, 25, 95)] == [1, 1, 7, 16, 24, 24, 32, 96]
    assert share_width(95, 90) == 90 and share_width(30, 20) == 20   # never wider than the batch


def test_trimmed_batch_gives_the_same_loss():
    batch = ragged_batch()
    short = trim_batch(batch)
    assert short.src.shape[1] == batch.src_len.max() and short.tgt_in.shape[1] == batch.tgt_len.max()
    model = tiny_model()
    model.initialize(mx.init.Xavier())
    loss_block = Seq2SeqLoss(model, label_smoothing=0.1)
    full = [x.asnumpy() for x in loss_block(*load_share(batch, mx.cpu()))]
    cut = [x.asnumpy() for x in loss_block(*load_share(short, mx.cpu()))]
    np.testing.assert_allclose(cut[0], full[0], rtol=0, atol=1e-5)
    np.testing.assert_allclose(cut[1], full[1], rtol=0, atol=1e-5)
    filler = split_batch(ragged_batch(rows=3), 4)[-1]          # a share of filler rows only
    assert trim_batch(filler).tgt_in.shape[1] == 1 and trim_batch(filler).num_tgt_tokens == 0


def test_load_share_copies_values_to_any_context():
    batch = ragged_batch()
    for ctx in (mx.cpu(0), mx.cpu(1)):
        arrays = load_share(batch, ctx)
        assert all(a.context == ctx and a.dtype == np.float32 for a in arrays)
        for a, ref in zip(arrays, (batch.src, batch.src_len, batch.tgt_in, batch.tgt_out, batch.tgt_len)):
            np.testing.assert_array_equal(a.asnumpy(), ref)
    before = load_share(batch, mx.cpu())[0].asnumpy()
    loaded = load_share(batch, mx.cpu())
    batch.src[:] = 0        # the batch stays the caller's: the loaded copy does not change with it
    np.testing.assert_array_equal(loaded[0].asnumpy(), before)


def _parallel(ctxs, optimizer="sgd", clip=0.0, lr=0.1, seed=1):
    model = tiny_model(seed)
    model.initialize(mx.init.Xavier(), ctx=ctxs)
    loss_block = Seq2SeqLoss(model, label_smoothing=0.0)
    loss_block.hybridize(static_alloc=True)
    trainer = build_optimizer(OptimConfig(optimizer=optimizer, lr=lr), model.collect_params())   # as training
    return model, DataParallel(loss_block, model.collect_params(), trainer, ctxs, clip_norm=clip)


def _weights(model, k=0):
    return {n: p.list_data()[k].asnumpy().copy() for n, p in model.collect_params().items()}


def test_clip_factor_and_normalizer_are_applied_once():
    """SGD is linear in the gradient, so the update must be exactly -lr * min(1, clip/norm) * grad / N."""
    batch = ragged_batch(seed=3)
    model, dp = _parallel([mx.cpu()], clip=0.05, lr=0.5)
    w0 = _weights(model)
    dp.forward_backward(batch)
    grads = {n: p.grad().asnumpy().copy() for n, p in model.collect_params().items()}
    n_tok = batch.num_tgt_tokens
    norm = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values())) / n_tok
    np.testing.assert_allclose(dp.global_norm(n_tok).asscalar(), norm, rtol=1e-5)
    assert norm > 0.05, "the test needs clipping to be active"
    model2, dp2 = _parallel([mx.cpu()], clip=0.05, lr=0.5)
    _, _, got_norm = dp2.step(batch)
    np.testing.assert_allclose(got_norm.asscalar(), norm, rtol=1e-5)
    factor = 0.05 / (norm + 1e-6)
    for name, w in _weights(model2).items():
        np.testing.assert_allclose(w, w0[name] - 0.5 * factor * grads[name] / n_tok, rtol=1e-4, atol=1e-7,
                                   err_msg=name)


@pytest.mark.parametrize("devices", [2, 3])
def test_devices_through_the_kvstore_stay_identical_and_match_one_device(devices):
    """Gradients summed by the kvstore, each replica updated by its own updater: the replicas stay bit-identical
    and follow one device (clipping active, Adam)."""
    batch = ragged_batch(seed=5, rows=7)
    one, dp1 = _parallel([mx.cpu(0)], optimizer="adam", clip=1.0, lr=0.01)
    many, dpn = _parallel([mx.cpu(k) for k in range(devices)], optimizer="adam", clip=1.0, lr=0.01)
    for _ in range(3):
        np.testing.assert_allclose(dp1.step(batch)[2].asscalar(), dpn.step(batch)[2].asscalar(), rtol=1e-5)
    single, first = _weights(one), _weights(many, 0)
    for k in range(1, devices):
        for name, w in _weights(many, k).items():
            np.testing.assert_array_equal(w, first[name], err_msg=name)
    for name in first:
        np.testing.assert_allclose(first[name], single[name], rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("devices", [1, 2])
def test_non_finite_gradient_skips_the_update(nmt_logs, devices):
    batch = ragged_batch(seed=2)
    model, dp = _parallel([mx.cpu(k) for k in range(devices)], lr=0.5)
    w0 = _weights(model)
    model.decoder.out_bias.set_data(nd.full((V,), np.nan))
    w0["seq2seq_decoder_out_bias"] = np.full((V,), np.nan, dtype=np.float32)
    _, _, norm = dp.step(batch)
    assert not np.isfinite(norm.asscalar())
    for k in range(devices):
        for name, w in _weights(model, k).items():
            np.testing.assert_array_equal(w, w0[name], err_msg=name)
    assert any("update skipped" in r.getMessage() and r.levelno == logging.WARNING for r in nmt_logs)


def test_amp_without_gpus_is_a_config_error():
    with pytest.raises(ConfigError, match="--amp needs --gpus"):
        init_amp([mx.cpu()])
    model = tiny_model()
    model.initialize(ctx=mx.cpu())
    trainer = gluon.Trainer(model.collect_params(), "adam")
    with pytest.raises(ConfigError, match="--amp"):
        DataParallel(Seq2SeqLoss(model), model.collect_params(), trainer, [mx.cpu()], amp=True)


def test_a_batch_smaller_than_its_shares_is_warned_of(nmt_logs):
    """--batch-size 3 --cpu-devices 4 --accum-steps 2 gave 5 of 8 shares no sentence without a word (the results are
    right: those shares run on padding), where --batch-size 3 --accum-steps 4 alone is refused."""
    model = tiny_model()
    ctxs = [mx.cpu(i) for i in range(4)]
    model.initialize(ctx=ctxs)
    trainer = gluon.Trainer(model.collect_params(), "sgd")
    for sentences, warned in ((3, True), (8, False), (0, False)):   # (0: --batch-tokens, no count of sentences)
        nmt_logs.clear()
        DataParallel(Seq2SeqLoss(model), model.collect_params(), trainer, ctxs, accum_steps=2, sentences=sentences)
        said = [r.getMessage() for r in nmt_logs if r.levelno == logging.WARNING]
        assert said == (["--batch-size 3 is split into 8 shares (4 devices x 2 micro-batches x 1 workers): 5 of them "
                         "get no sentence and compute on padding; raise --batch-size, or use fewer devices"]
                        if warned else []), said


def test_each_worker_draws_its_own_dropout_masks():
    """Every worker seeded MXNet with the seed and step alone, and MXNet seeds a device's generator from that and
    the device's number, cpu(0) or gpu(0) on every machine: each worker's share got the others' dropout masks."""
    from nmt.workers import WorkerGroup

    class Kv:   # (one worker as MXNet counts them: no exit hook; the rank is what is tested)
        num_workers = 1

        def __init__(self, rank):
            self.rank = rank

    def mask(seed):
        mx.random.seed(seed)
        return mx.nd.Dropout(mx.nd.ones((64,)), p=0.5, mode="always").asnumpy()
    masks = [mask(WorkerGroup(Kv(rank)).dropout_seed(7, 3)) for rank in (0, 1, 2)]
    assert not (masks[0] == masks[1]).all() and not (masks[1] == masks[2]).all()
    assert (masks[0] == mask(7 * 100003 + 3)).all()   # rank 0: a single process's masks, as before
