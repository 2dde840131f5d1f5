"""The optimizer of a training run: a `gluon.Trainer` over MXNet's optimizers, and the learning-rate schedule."""
from __future__ import annotations

import math

from mxnet import gluon

from nmt.config import OptimConfig


def build_optimizer(o: OptimConfig, params: gluon.ParameterDict, kvstore="local") -> gluon.Trainer:
    """A Trainer updating `params` with the optimizer `o` names. The update is applied outside the kvstore
    (`update_on_kvstore=False`), so the summed gradient can be clipped first (see `nmt.parallel`)."""
    kwargs = {"learning_rate": o.lr, "wd": o.weight_decay}
    if o.optimizer == "adam":
        kwargs.update(beta1=o.beta1, beta2=o.beta2, epsilon=1e-9)
    return gluon.Trainer(params, o.optimizer, kwargs, kvstore=kvstore, update_on_kvstore=False)


def learning_rate(step: int, o: OptimConfig, lr_scale: float = 1.0) -> float:
    """Linear warmup to `o.lr`, then inverse-square-root decay (or constant; plateau: constant times `lr_scale`,
    which the trainer halves on stalled validations)."""
    warm = max(o.warmup_steps, 1)
    if step < warm:
        lr = o.lr * (step + 1) / warm
    elif o.schedule == "inv_sqrt":
        lr = o.lr * math.sqrt(warm / (step + 1))
    else:
        lr = o.lr
    return lr * lr_scale
