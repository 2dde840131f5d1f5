"""nmt.optim: the gluon.Trainer built from OptimConfig, the learning-rate schedule, and optimizer states that
continue exactly after a save and load."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from nmt.config import ConfigError, OptimConfig
from nmt.optim import apply_settings, build_optimizer, learning_rate


def _net(seed=0):
    mx.random.seed(seed)
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Xavier())
    return net


def _steps(net, trainer, n, seed=1):
    rng = np.random.RandomState(seed)
    for _ in range(n):
        x = mx.nd.array(rng.randn(5, 4))
        with autograd.record():
            loss = (net(x) ** 2).sum()
        loss.backward()
        trainer.step(5)


def test_the_config_reaches_mxnets_optimizer():
    net = _net()
    trainer = build_optimizer(OptimConfig(lr=0.25, beta1=0.8, beta2=0.9, weight_decay=0.01), net.collect_params())
    opt = trainer.optimizer
    assert isinstance(opt, mx.optimizer.Adam)
    assert (opt.learning_rate, opt.beta1, opt.beta2, opt.wd, opt.epsilon) == (0.25, 0.8, 0.9, 0.01, 1e-9)
    assert isinstance(build_optimizer(OptimConfig(optimizer="sgd"), _net().collect_params()).optimizer,
                      mx.optimizer.SGD)


@pytest.mark.parametrize("name, kind", [("lamb", mx.optimizer.LAMB), ("ftml", mx.optimizer.FTML)])
def test_every_optimizer_with_betas_gets_them(name, kind):
    """LAMB and FTML took MXNet's own betas (0.9/0.999, 0.6/0.999) while config.json recorded 0.9/0.98 or a
    file's; a resumed run's new betas were logged as changed and never set."""
    for o in (OptimConfig(optimizer=name), OptimConfig(optimizer=name, beta1=0.5, beta2=0.6)):
        opt = build_optimizer(o, _net().collect_params()).optimizer
        assert isinstance(opt, kind) and (opt.beta1, opt.beta2) == (o.beta1, o.beta2)


def test_betas_of_an_optimizer_without_them_are_refused():
    with pytest.raises(ConfigError, match="optim.beta1 0.5: a setting of --optimizer adam, lamb, ftml, which "
                                          "--optimizer sgd has not: drop it"):
        OptimConfig(optimizer="sgd", beta1=0.5)
    with pytest.raises(ConfigError, match="optim.beta1 0.5 and optim.beta2 0.5: a setting of"):
        OptimConfig(optimizer="nag", beta1=0.5, beta2=0.5)
    assert OptimConfig(optimizer="sgd").beta1 == 0.9   # (the defaults, which every config.json records)


@pytest.mark.parametrize("name", ["adam", "sgd", "nag"])
def test_saved_states_continue_bit_identically(tmp_path, name):
    """Two updates, save, two more = a fresh net that loads the parameters and states and makes the last two:
    the optimizer state (Adam's moments and update count) survives the round trip exactly."""
    cfg = OptimConfig(optimizer=name, lr=0.05)
    net = _net()
    trainer = build_optimizer(cfg, net.collect_params())
    _steps(net, trainer, 2)
    net.save_parameters(str(tmp_path / "p"))
    trainer.save_states(str(tmp_path / "s"))
    _steps(net, trainer, 2, seed=2)
    other = _net(seed=5)
    other.load_parameters(str(tmp_path / "p"))
    resumed = build_optimizer(cfg, other.collect_params())
    resumed.load_states(str(tmp_path / "s"))
    _steps(other, resumed, 2, seed=2)
    for a, b in zip(net.collect_params().values(), other.collect_params().values()):
        np.testing.assert_array_equal(a.data().asnumpy(), b.data().asnumpy())


def test_schedule_warms_up_then_decays():
    o = OptimConfig(lr=1.0, warmup_steps=4, schedule="inv_sqrt")
    assert [learning_rate(s, o) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert learning_rate(15, o) == pytest.approx(0.5)
    flat = OptimConfig(lr=1.0, warmup_steps=4, schedule="plateau")
    assert learning_rate(100, flat, lr_scale=0.5) == 0.5


def test_plateau_halvings_apply_only_under_the_plateau_schedule():
    """lr_scale (the plateau's halvings, which state.json keeps) scales the rate only under the plateau schedule, so
    that a run resumed from plateau with --lr-schedule inv_sqrt or constant trains at that schedule's own rate."""
    for schedule in ("inv_sqrt", "constant"):
        o = OptimConfig(lr=1.0, warmup_steps=4, schedule=schedule)
        assert [learning_rate(s, o, lr_scale=0.25) for s in (0, 3, 15, 99)] == \
            [learning_rate(s, o) for s in (0, 3, 15, 99)]
    flat = OptimConfig(lr=1.0, warmup_steps=4, schedule="plateau")
    assert [learning_rate(s, flat, lr_scale=0.25) for s in (0, 3, 99)] == [0.0625, 0.25, 0.25]


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_loaded_states_take_this_runs_settings(tmp_path, name):
    """Trainer.load_states restores the optimizer pickled with the states, with the weight decay (and betas) of the
    run that saved them: a resumed run's new --weight-decay was logged and saved, and never used."""
    net = _net()
    trainer = build_optimizer(OptimConfig(optimizer=name, lr=0.05), net.collect_params())
    _steps(net, trainer, 2)
    trainer.save_states(str(tmp_path / "s"))
    betas = {"beta1": 0.5, "beta2": 0.75} if name == "adam" else {}
    new = OptimConfig(optimizer=name, lr=0.05, weight_decay=0.125, **betas)
    resumed = build_optimizer(new, _net().collect_params())
    resumed.load_states(str(tmp_path / "s"))
    assert resumed.optimizer.wd == 0.0   # MXNet's restore: the old settings
    apply_settings(resumed, new)
    opt = resumed.optimizer
    assert opt.wd == 0.125 and type(opt) is type(trainer.optimizer)
    if name == "adam":
        assert (opt.beta1, opt.beta2, opt.epsilon) == (0.5, 0.75, 1e-9)


def test_an_optimizer_without_a_learning_rate_is_said_so(caplog):
    """MXNet 1.9.1's AdaDelta reads no learning rate: two runs of --lr 0.002 and 50 made the same parameters, while
    the log said "lr 0.002 after 400 warm-up updates, then inverse square root" and metrics.jsonl its rates."""
    from nmt.config import Config
    from nmt.preflight import settings_lines
    after = []
    for lr in (0.002, 50.0):
        net = _net()
        with caplog.at_level("WARNING", logger="nmt"):
            _steps(net, build_optimizer(OptimConfig(optimizer="adadelta", lr=lr), net.collect_params()), 2)
        after.append(net.weight.data().asnumpy())
    np.testing.assert_array_equal(*after)   # what the warning says
    assert "--optimizer adadelta takes no learning rate" in caplog.text
    line = next(x for x in settings_lines(Config(optim=OptimConfig(optimizer="adadelta"))) if "optimizer" in x)
    assert line.startswith("optimizer: adadelta, which takes no learning rate; label smoothing") and "lr " not in line
    caplog.clear()
    build_optimizer(OptimConfig(optimizer="adagrad"), _net().collect_params())
    assert not caplog.text
    assert "optimizer: adagrad, lr 0.002 after 400 warm-up updates" in settings_lines(
        Config(optim=OptimConfig(optimizer="adagrad")))[1]


def test_nag_is_not_plain_sgd():
    """MXNet's NAG defaults to momentum 0, with which it is plain SGD: --optimizer nag and sgd made bit-identical
    parameters."""
    after = {}
    for name in ("sgd", "nag"):
        net = _net()
        trainer = build_optimizer(OptimConfig(optimizer=name, lr=0.05), net.collect_params())
        _steps(net, trainer, 3)
        after[name] = net.weight.data().asnumpy()
    assert trainer.optimizer.momentum == 0.9
    assert not np.allclose(after["sgd"], after["nag"])
