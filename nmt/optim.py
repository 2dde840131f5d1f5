"""The optimizer of a training run: MXNet's Adam, with every CPU parameter of a context updated by one native kernel.

MXNet's `adam_update` computes its square root and division one value at a time: 22 ms per update for the 5.8 M
parameters of the 256-wide model on this 2-core CPU, a tenth of a training step. `nmt_adam` (`nmt.native`) does the
same float arithmetic in the same order, vectorized, for all parameters of a context in one call: the same bits in
4.6 ms. Where the kernel cannot run (a GPU, float16, sparse arrays, no compiler), each parameter goes through MXNet's
Adam as before.
"""
from __future__ import annotations

import math
from typing import List, Sequence

import mxnet as mx
import numpy as np
from mxnet import gluon

# Parameters the Updater hands to one `update` call: all of them (MXNet's "aggregated" updates).
_ALL = 1 << 30


class NativeAdam(mx.optimizer.Adam):
    """`mx.optimizer.Adam` whose state, pickling and per-parameter results are Adam's; the Trainer's Updater
    passes all parameters at once (`aggregate_num`), and the float32 CPU ones of each context are updated by one
    `nmt_adam` call."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.aggregate_num = _ALL

    def update_multi_precision(self, index, weight, grad, state):
        if not isinstance(index, (list, tuple)):
            return super().update_multi_precision(index, weight, grad, state)
        native_ok = hasattr(mx.nd, "nmt_adam")
        fused = [i for i in range(len(index)) if native_ok and _fusable(weight[i], grad[i], state[i])]
        rest = sorted(set(range(len(index))) - set(fused))
        for i in rest:
            super().update_multi_precision(index[i], weight[i], grad[i], state[i])
        if fused:
            self._fused_update([index[i] for i in fused], [weight[i] for i in fused], [grad[i] for i in fused],
                               [state[i] for i in fused])

    def _fused_update(self, indices: List, weights: List[mx.nd.NDArray], grads: List[mx.nd.NDArray],
                      states: List) -> None:
        self._update_count(indices)
        lrs, wds = self._get_lrs(indices), self._get_wds(indices)
        for k, i in enumerate(indices):   # Adam's bias correction, per parameter as in `Adam.update`
            t = self._index_update_count[i]
            lrs[k] *= math.sqrt(1. - self.beta2 ** t) / (1. - self.beta1 ** t)
        by_context = {}
        for k, w in enumerate(weights):
            by_context.setdefault(w.context, []).append(k)
        for ks in by_context.values():   # one call per context, on its engine thread
            mx.nd.nmt_adam(*[weights[k] for k in ks], *[grads[k] for k in ks], *[states[k][0] for k in ks],
                           *[states[k][1] for k in ks], num_arrays=len(ks),
                           lrs=",".join(str(lrs[k]) for k in ks), wds=",".join(str(wds[k]) for k in ks),
                           beta1=self.beta1, beta2=self.beta2, epsilon=self.epsilon, rescale_grad=self.rescale_grad,
                           clip_gradient=self.clip_gradient if self.clip_gradient else -1.0)


def _fusable(weight: mx.nd.NDArray, grad: mx.nd.NDArray, state) -> bool:
    """Whether `nmt_adam` takes this parameter: float32 dense arrays on one CPU context, Adam's (mean, var) state
    (a multi-precision state holds a float32 copy of the weight too)."""
    if weight.context.device_type != "cpu" or not isinstance(state, (tuple, list)) or len(state) != 2:
        return False
    return all(isinstance(a, mx.nd.NDArray) and a.dtype == np.float32 and a.stype == "default"
               and a.context == weight.context for a in (weight, grad, *state))


def build_optimizer(name: str, **params) -> mx.optimizer.Optimizer:
    """The optimizer `name` (MXNet's registry) with `params`; "adam" is `NativeAdam`."""
    return NativeAdam(**params) if name == "adam" else mx.optimizer.create(name, **params)


def adopt_loaded_optimizer(trainer: gluon.Trainer) -> None:
    """After `trainer.load_states`: the optimizer pickled in the states file replaces the Trainer's. One saved
    before `NativeAdam` existed is MXNet's Adam: it continues as a `NativeAdam` with the same state; and the
    Updaters hand over parameters the way the optimizer now in place takes them (all at once or one by one)."""
    opt = trainer._optimizer
    if type(opt) is mx.optimizer.Adam:
        upgraded = NativeAdam.__new__(NativeAdam)
        upgraded.__dict__.update(opt.__dict__)
        upgraded.aggregate_num = _ALL
        opt = trainer._optimizer = upgraded
    for updater in trainer._updaters:
        updater.optimizer = opt
        updater.aggregate_updates = opt.aggregate_num > 0
