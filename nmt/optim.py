"""The optimizer of a training run: a `gluon.Trainer` over MXNet's optimizers, and the learning-rate schedule."""
from __future__ import annotations

import logging
import math
from typing import Dict

from mxnet import gluon

from nmt.config import BETA_OPTIMIZERS, LR_FREE_OPTIMIZERS, OptimConfig


# MXNet's NAG defaults to momentum 0, with which its update is plain SGD's: --optimizer nag gets the usual 0.9
# (Sutskever et al. 2013). Set where the optimizer is made, not by `apply_settings`: a run's saved states keep their
# momentum (a run begun before keeps 0, and resumes as it trained).
NAG_MOMENTUM = 0.9


def optimizer_settings(o: OptimConfig) -> Dict[str, float]:
    """The settings `o` gives MXNet's optimizer, by its attribute names (the learning rate aside: the schedule sets
    it at every update): the betas to every optimizer that has them, where config.json records them."""
    settings = {"wd": o.weight_decay}
    if o.optimizer in BETA_OPTIMIZERS:
        settings.update(beta1=o.beta1, beta2=o.beta2)
    if o.optimizer == "adam":
        settings.update(epsilon=1e-9)
    return settings


def build_optimizer(o: OptimConfig, params: gluon.ParameterDict, kvstore="local") -> gluon.Trainer:
    """A Trainer updating `params` with the optimizer `o` names. The update is applied outside the kvstore
    (`update_on_kvstore=False`), so the summed gradient can be normalized and clipped first (`nmt.parallel`). A
    warning for an optimizer whose update reads no learning rate (`warn_lr_free`)."""
    warn_lr_free(o)
    momentum = {"momentum": NAG_MOMENTUM} if o.optimizer == "nag" else {}
    return gluon.Trainer(params, o.optimizer, {"learning_rate": o.lr, **optimizer_settings(o), **momentum},
                         kvstore=kvstore, update_on_kvstore=False)


def warn_lr_free(o: OptimConfig) -> None:
    """Warn of an optimizer whose update reads no learning rate (adadelta): the schedule's rate would seem to train.
    Given by a run as it makes its optimizer, and by its --dry-run."""
    if o.optimizer in LR_FREE_OPTIMIZERS:
        logging.getLogger("nmt.train").warning(
            "--optimizer %s takes no learning rate (MXNet's update has none): --lr, --warmup-steps and --lr-schedule "
            "do not change its updates (the lr logged is not applied), and --weight-decay takes its share off every "
            "weight at each update; another --optimizer follows the schedule", o.optimizer)


def load_states(trainer: gluon.Trainer, path: str) -> None:
    """`Trainer.load_states`, with the update count every device continues from. The pickled optimizer counts the
    updates of the devices that saved it (Adam's bias correction reads them); a device that was not among them (a
    resume on more GPUs or CPU contexts, or on other GPUs) would count again from 0 and take larger steps than the
    others, its copy of the parameters drifting from theirs. `begin_num_update` is where a new count starts."""
    trainer.load_states(path)
    trainer.optimizer.begin_num_update = trainer.optimizer.num_update


def apply_settings(trainer: gluon.Trainer, o: OptimConfig) -> None:
    """Give `trainer`'s optimizer the settings of `o`. `Trainer.load_states` restores the optimizer pickled with a
    checkpoint, settings included: after it, this makes a resumed run's new --weight-decay (or beta1, beta2) take
    effect. The optimizer itself cannot change within a run (`nmt.config_resume.resumed_config`)."""
    for name, value in optimizer_settings(o).items():
        setattr(trainer.optimizer, name, value)


def learning_rate(step: int, o: OptimConfig, lr_scale: float = 1.0) -> float:
    """Linear warmup to `o.lr`, then inverse-square-root decay (or constant; plateau: constant times `lr_scale`,
    which the trainer halves on stalled validations). `lr_scale` applies only under the plateau schedule: a run
    resumed with another --lr-schedule leaves the plateau's halvings behind (and finds them again if it returns)."""
    warm = max(o.warmup_steps, 1)
    if step < warm:
        lr = o.lr * (step + 1) / warm
    elif o.schedule == "inv_sqrt":
        lr = o.lr * math.sqrt(warm / (step + 1))
    elif o.schedule in ("constant", "plateau"):
        lr = o.lr
    else:   # a schedule added to config.LR_SCHEDULES but not here
        raise ValueError(f"no learning rate for schedule {o.schedule!r}")
    return lr * lr_scale if o.schedule == "plateau" else lr
