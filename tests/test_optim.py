"""NativeAdam: MXNet's Adam, bit for bit, with the update of a context's CPU parameters in one native kernel."""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd

from nmt.optim import NativeAdam, adopt_loaded_optimizer, build_optimizer

needs_native = pytest.mark.skipif(not hasattr(nd, "nmt_adam"), reason="no nmt_adam operator registered")
ADAM = dict(learning_rate=0.01, beta1=0.9, beta2=0.98, epsilon=1e-9)


@needs_native
@pytest.mark.parametrize("clip", [-1.0, 0.3])
def test_nmt_adam_is_mxnet_adam_update_bit_for_bit(clip):
    """Sizes below and above a 4096-value block and the OpenMP threshold; per-array lr and wd."""
    shapes = [(3,), (4097,), (700, 600), (2, 5, 7)]
    lrs, wds = [1e-3, 2.5e-3, 7e-4, 1e-2], [0.0, 0.01, 0.0, 0.1]

    def arrays():
        r = np.random.RandomState(4)
        return [[nd.array(r.normal(0, s, shape)) for shape in shapes] for s in (1.0, 2.0, 0.1)] + \
               [[nd.array(r.uniform(0, 1, shape)) for shape in shapes]]
    (w, g, m, v), (w2, g2, m2, v2) = arrays(), arrays()
    kw = dict(beta1=0.9, beta2=0.98, epsilon=1e-9, rescale_grad=0.37, clip_gradient=clip)
    for i in range(len(shapes)):
        nd.adam_update(w[i], g[i], m[i], v[i], out=w[i], lr=lrs[i], wd=wds[i], **kw)
    done = nd.nmt_adam(*w2, *g2, *m2, *v2, num_arrays=len(shapes), lrs=",".join(map(str, lrs)),
                       wds=",".join(map(str, wds)), **kw)
    assert done.shape == (1,)
    for i in range(len(shapes)):
        for want, got in ((w, w2), (m, m2), (v, v2), (g, g2)):
            np.testing.assert_array_equal(got[i].asnumpy(), want[i].asnumpy())
    assert not np.array_equal(w[1].asnumpy(), arrays()[0][1].asnumpy())   # it did update


@needs_native
def test_nmt_adam_rejects_bad_arguments_with_a_message():
    z = nd.zeros
    with pytest.raises(mx.base.MXNetError, match="mean and variance of array 0 differ in shape"):
        nd.nmt_adam(z(3), z(3), z(4), z(3), num_arrays=1, lrs="0.1", wds="0").wait_to_read()
    with pytest.raises(mx.base.MXNetError, match=r"one value per array \(2\), got 1 and 2"):
        nd.nmt_adam(z(3), z(2), z(3), z(2), z(3), z(2), z(3), z(2), num_arrays=2, lrs="0.1",
                    wds="0,0").wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="num_arrays >= 1"):
        nd.nmt_adam(z(3), num_arrays=0, lrs="", wds="").wait_to_read()


def _net(ctxs, dtype="float32"):
    mx.random.seed(5)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Embedding(50, 16), gluon.nn.Dense(300, activation="tanh", flatten=False, in_units=16),
            gluon.nn.Dense(40, flatten=False, in_units=300))
    net.initialize(mx.init.Xavier(), ctx=ctxs)
    net.cast(dtype)
    net.hybridize()
    return net


def _train(optimizer, ctxs, steps=3, dtype="float32", trainer=None, net=None):
    net = net or _net(ctxs, dtype)
    trainer = trainer or gluon.Trainer(net.collect_params(), optimizer, kvstore="local", update_on_kvstore=False)
    rng = np.random.RandomState(0)
    for _ in range(steps):
        x = rng.randint(0, 50, size=(8, 5))
        y = rng.randint(0, 40, size=(8, 5))
        with autograd.record():
            losses = [gluon.loss.SoftmaxCELoss()(net(nd.array(a, ctx=c)), nd.array(b, ctx=c).astype(dtype))
                      for a, b, c in zip(np.array_split(x, len(ctxs)), np.array_split(y, len(ctxs)), ctxs)]
        autograd.backward(losses)
        trainer.step(8)
    return net, trainer


def _weights(net, k=0):
    return {n.split("_", 1)[1]: p.list_data()[k].asnumpy() for n, p in net.collect_params().items()}


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("wd, clip", [(0.0, None), (0.01, 0.05)])
def test_native_adam_trains_exactly_as_mxnet_adam(devices, wd, clip):
    ctxs = [mx.cpu(k) for k in range(devices)]
    extra = {"wd": wd, **({"clip_gradient": clip} if clip else {})}
    calls = []
    real = getattr(nd, "nmt_adam", None)

    def counting(*args, **kwargs):
        calls.append(kwargs["num_arrays"])
        return real(*args, **kwargs)
    if real:
        nd.nmt_adam = counting
    try:
        fast, trainer = _train(NativeAdam(**ADAM, **extra), ctxs)
    finally:
        if real:
            nd.nmt_adam = real
    plain, _ = _train(mx.optimizer.Adam(**ADAM, **extra), ctxs)
    if real:   # one call per context and update, with all 5 parameters
        assert calls == [5] * (3 * devices)
    for k in range(devices):
        want = _weights(plain, k)
        for name, w in _weights(fast, k).items():
            np.testing.assert_array_equal(w, want[name], err_msg=name)
    assert isinstance(trainer._optimizer, NativeAdam) and trainer._updaters[0].aggregate_updates


def _updater_run(optimizer, dtypes, steps=3):
    """`steps` updates of one weight per dtype through MXNet's Updater (as the Trainer calls it: all at once)."""
    updater = mx.optimizer.get_updater(optimizer)
    rng = np.random.RandomState(1)
    weights = [nd.array(rng.normal(0, 1, (6, 7)), dtype=d) for d in dtypes]
    for _ in range(steps):
        grads = [nd.array(rng.normal(0, 1, (6, 7)), dtype=d) for d in dtypes]
        updater(list(range(len(dtypes))), grads, weights)
    return [w.asnumpy() for w in weights]


def test_without_the_kernel_each_parameter_takes_mxnet_adam():
    """Turned off (as without a compiler), and for arrays the kernel does not take (float16 with float32 master
    weights, float64; GPUs too): each such parameter goes through MXNet's Adam."""
    real = getattr(nd, "nmt_adam", None)

    def refuse(*args, **kwargs):
        raise AssertionError("nmt_adam called")
    if real is not None:
        del nd.nmt_adam
    try:
        off, _ = _train(NativeAdam(**ADAM), [mx.cpu()])
        nd.nmt_adam = refuse   # present, but not for these dtypes
        other = _updater_run(NativeAdam(**ADAM, multi_precision=True), ["float16", "float64"])
    finally:
        if real is not None:
            nd.nmt_adam = real
        elif hasattr(nd, "nmt_adam"):
            del nd.nmt_adam
    want = _weights(_train(mx.optimizer.Adam(**ADAM), [mx.cpu()])[0])
    for name, w in _weights(off).items():
        np.testing.assert_array_equal(w, want[name], err_msg=name)
    for got, want in zip(other, _updater_run(mx.optimizer.Adam(**ADAM, multi_precision=True), ["float16", "float64"])):
        np.testing.assert_array_equal(got, want)
    mixed = _updater_run(NativeAdam(**ADAM, multi_precision=True), ["float32", "float16", "float32"])
    for got, want in zip(mixed, _updater_run(mx.optimizer.Adam(**ADAM, multi_precision=True),
                                             ["float32", "float16", "float32"])):
        np.testing.assert_array_equal(got, want)


def test_states_saved_with_mxnet_adam_resume_as_native_adam(tmp_path):
    """A run checkpointed before NativeAdam (the states file pickles MXNet's Adam) resumes with the same moments
    and update count, as a NativeAdam, and continues exactly as MXNet's Adam would."""
    ctxs = [mx.cpu()]
    old_net, old = _train(mx.optimizer.Adam(**ADAM), ctxs, steps=2)
    old.save_states(str(tmp_path / "old.states"))
    old_net.save_parameters(str(tmp_path / "old.params"))

    net = _net(ctxs)
    net.load_parameters(str(tmp_path / "old.params"), ctx=ctxs)
    trainer = gluon.Trainer(net.collect_params(), build_optimizer("adam", **ADAM), kvstore="local",
                            update_on_kvstore=False)
    trainer.load_states(str(tmp_path / "old.states"))
    assert type(trainer._optimizer) is mx.optimizer.Adam   # what load_states leaves
    adopt_loaded_optimizer(trainer)
    assert isinstance(trainer._optimizer, NativeAdam) and trainer._updaters[0].optimizer is trainer._optimizer
    assert trainer._updaters[0].aggregate_updates and trainer._optimizer.num_update == 2
    resumed, _ = _train(None, ctxs, steps=1, trainer=trainer, net=net)
    _train(None, ctxs, steps=1, trainer=old, net=old_net)
    want = _weights(old_net)
    for name, w in _weights(resumed).items():
        np.testing.assert_array_equal(w, want[name], err_msg=name)

    # a NativeAdam's own states load as one, and other optimizers are left as they are
    trainer.save_states(str(tmp_path / "new.states"))
    again = gluon.Trainer(_net(ctxs).collect_params(), build_optimizer("adam", **ADAM), update_on_kvstore=False)
    again.load_states(str(tmp_path / "new.states"))
    adopt_loaded_optimizer(again)
    assert isinstance(again._optimizer, NativeAdam) and again._optimizer.num_update == 3
    sgd = gluon.Trainer(_net(ctxs).collect_params(), build_optimizer("sgd", learning_rate=0.1),
                        update_on_kvstore=False)
    adopt_loaded_optimizer(sgd)
    assert type(sgd._optimizer) is mx.optimizer.SGD
    assert sgd._updaters[0].aggregate_updates == (sgd._optimizer.aggregate_num > 0)
