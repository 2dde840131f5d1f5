"""Data parallelism, MXNet Gluon's recipe: one object that runs forward/backward per device share.

A single device is the same code with one share. Each update:
  1. the global batch is split into `accum_steps x num_devices` equal shares (x num_workers in a distributed job,
     where each worker keeps its own `accum_steps x num_devices`); each share is cut to the columns its longest
     sentence needs (rounded up to a short ladder of lengths, so the number of graph shapes stays small),
  2. per micro-step, each device runs forward + loss under `autograd.record` and its own backward; gradients
     are written (one micro-step) or accumulated in place (grad_req="add", zeroed after every update),
  3. `trainer.allreduce_grads()` sums gradients over devices (and workers, for dist kvstores),
  4. the global norm of the summed gradient is computed once, on device 0, with one fused kernel, and
  5. the update divides by N = the number of target tokens of the global batch (over all workers), so the
     update is the gradient of the mean per-token loss, independent of how the batch was split. For Adam
     without weight decay (the default) clipping and 1/N are one scale *array* handed to MXNet's fused
     multi-tensor Adam kernel, so the whole update runs without a host synchronization; other optimizers
     scale the gradients in place and use `trainer.update`.
"""
from __future__ import annotations

import logging
import math
import os
from typing import List, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from nmt.batching import Batch, split_batch

logger = logging.getLogger("nmt.parallel")

# Parameters per fused-kernel call: MXNet 1.9.1's multi-tensor Adam crashes above ~50 tensors per call.
_FUSED_CHUNK = 24
# Share widths: exact up to this length, then rounded up to a multiple of _LEN_STEP (few graph shapes).
_EXACT_LEN, _LEN_STEP = 16, 8

Loaded = Tuple[mx.nd.NDArray, ...]


class DeviceError(ValueError):
    """--gpus / --cpu-devices asks for devices this machine does not have."""


def parse_devices(gpus: Optional[str], cpu_devices: int = 1) -> List[mx.Context]:
    """Contexts from the command line: "2" = the first two visible GPUs, "4,5,6,7" = exactly those ids
    (ids as CUDA numbers them after CUDA_VISIBLE_DEVICES), None = `cpu_devices` CPU contexts."""
    if gpus is None or str(gpus).strip() == "":
        if cpu_devices < 1:
            raise DeviceError(f"--cpu-devices must be at least 1, got {cpu_devices}")
        return [mx.cpu(i) for i in range(cpu_devices)]
    spec = str(gpus).strip()
    try:
        if "," in spec:
            ids = [int(x) for x in spec.split(",") if x.strip() != ""]
        else:
            ids = list(range(int(spec)))
    except ValueError:
        raise DeviceError(f"--gpus {spec!r}: give a count (--gpus 2 = first two GPUs) or a comma-separated "
                          "list of ids (--gpus 4,5,6,7; --gpus 3, = only GPU 3)") from None
    if not ids or min(ids) < 0 or len(set(ids)) != len(ids):
        raise DeviceError(f"--gpus {spec!r}: need at least one GPU, ids must be distinct and >= 0")
    found = mx.context.num_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
    if found == 0:
        raise DeviceError(f"--gpus {spec}: no GPU found{where}. This needs the CUDA build of MXNet "
                          "(pip install -r requirements/gpu.txt) and a visible NVIDIA GPU; omit --gpus to train on CPU")
    if max(ids) >= found:
        raise DeviceError(f"--gpus {spec} asks for GPU id {max(ids)} ({len(ids)} GPUs) but only {found} "
                          f"GPU(s) were found{where}: valid ids are 0..{found - 1}")
    return [mx.gpu(i) for i in ids]


def default_kvstore(ctxs: Sequence[mx.Context], requested: str = "auto") -> str:
    """kvstore `device` on GPUs (reduction on the GPUs, P2P where possible), `local` on CPU contexts."""
    if requested != "auto":
        return requested
    return "device" if ctxs[0].device_type == "gpu" else "local"


def share_width(needed: int, width: int) -> int:
    """Columns a share keeps: `needed` (its longest row) up to 16, else rounded up to a multiple of 8;
    never more than the batch's `width`, never less than 1."""
    needed = max(int(needed), 1)
    if needed > _EXACT_LEN:
        needed = -(-needed // _LEN_STEP) * _LEN_STEP
    return min(needed, int(width))


def trim_batch(batch: Batch) -> Batch:
    """`batch` without the padding columns no row uses (see `share_width`). The loss is padding-invariant,
    so this only saves work: the last length bucket is padded to the longest sentence of the corpus."""
    s = share_width(int(batch.src_len.max(initial=1)), batch.src.shape[1])
    t = share_width(int(batch.tgt_len.max(initial=1)), batch.tgt_in.shape[1])
    if s == batch.src.shape[1] and t == batch.tgt_in.shape[1]:
        return batch
    return Batch(batch.src[:, :s], batch.src_len, batch.tgt_in[:, :t], batch.tgt_out[:, :t], batch.tgt_len)


def load_share(share: Batch, ctx: mx.Context) -> Loaded:
    """(src, src_len, tgt_in, tgt_out, tgt_len) float32 NDArrays on `ctx`.

    `mx.nd.array` copies through the engine and blocks the Python thread until every operation already queued
    (the previous update) has run; wrapping a fresh numpy copy zero-copy (DLPack) does not, so the next update
    is queued while the current one computes."""
    out = []
    for a in (share.src, share.src_len, share.tgt_in, share.tgt_out, share.tgt_len):
        host = mx.nd.from_numpy(np.array(a, dtype=np.float32, order="C", copy=True), zero_copy=True)
        out.append(host if host.context == ctx else host.as_in_context(ctx))
    return tuple(out)


class DataParallel:
    """Runs one update of `loss_block` over `ctxs`, accumulating `accum_steps` micro-batches."""

    def __init__(self, loss_block: gluon.HybridBlock, params: gluon.ParameterDict, trainer: gluon.Trainer,
                 ctxs: Sequence[mx.Context], accum_steps: int = 1, clip_norm: float = 0.0,
                 num_workers: int = 1, rank: int = 0, trim: bool = True):
        self.loss_block = loss_block
        self.params = [p for p in params.values() if p.grad_req != "null"]
        self.trainer = trainer
        self.ctxs = list(ctxs)
        self.accum_steps = accum_steps
        self.clip_norm = clip_norm
        self.num_workers = num_workers
        self.rank = rank
        self.trim = trim
        # One micro-step writes its gradients; several accumulate and are zeroed after every update.
        self._accumulate = accum_steps > 1
        for p in self.params:
            p.grad_req = "add" if self._accumulate else "write"
        self.zero_grad()

    @property
    def num_shares(self) -> int:
        return self.accum_steps * len(self.ctxs)

    def zero_grad(self) -> None:
        """Zero every gradient, one fused kernel per device."""
        for k in range(len(self.ctxs)):
            grads = [p.list_grad()[k] for p in self.params]
            for i in range(0, len(grads), _FUSED_CHUNK):
                chunk = grads[i:i + _FUSED_CHUNK]
                mx.nd.reset_arrays(*chunk, num_arrays=len(chunk))

    def shares(self, batch: Batch) -> List[Batch]:
        """This worker's shares of a global batch: `accum_steps * num_devices` pieces of equal row count,
        each cut to the columns it needs (when `trim`)."""
        pieces = split_batch(batch, self.num_workers * self.num_shares)
        mine = pieces[self.rank * self.num_shares:(self.rank + 1) * self.num_shares]
        return [trim_batch(p) for p in mine] if self.trim else mine

    def forward_backward(self, batch: Batch) -> Tuple[List[mx.nd.NDArray], List[mx.nd.NDArray]]:
        """Forward + backward of this worker's part of `batch`; returns per-share (loss_sum, nll_sum) arrays,
        left on their devices (no host synchronization)."""
        losses, nlls = [], []
        shares = self.shares(batch)
        for k in range(self.accum_steps):
            micro = shares[k * len(self.ctxs):(k + 1) * len(self.ctxs)]
            inputs = [load_share(share, ctx) for share, ctx in zip(micro, self.ctxs)]
            with autograd.record():
                outs = [self.loss_block(*x) for x in inputs]
                heads = [loss.sum() for loss, _ in outs]
            autograd.backward(heads)
            losses += heads
            nlls += [nll.sum() for _, nll in outs]
        return losses, nlls

    def step(self, batch: Batch) -> Tuple[mx.nd.NDArray, mx.nd.NDArray, mx.nd.NDArray]:
        """One update on a global batch. Returns (loss_sum, nll_sum, grad_norm) as NDArrays on device 0."""
        losses, nlls = self.forward_backward(batch)
        self.trainer.allreduce_grads()
        normalizer = batch.num_tgt_tokens
        norm = self.global_norm(normalizer)
        scale = self._clip_scale(norm)
        mode = os.environ.get("NMT_UPDATE_MODE", "fused")
        if mode == "sync":
            self.trainer.update(normalizer / float(scale.asscalar()))
        elif mode != "fused" or not self._fused_adam_update(scale / float(normalizer)):
            if self.clip_norm > 0:
                self._scale_grads(scale)
            self.trainer.update(normalizer)
        if self._accumulate:
            self.zero_grad()
        ctx0 = self.ctxs[0]
        loss = mx.nd.add_n(*[l.as_in_context(ctx0) for l in losses])
        nll = mx.nd.add_n(*[n.as_in_context(ctx0) for n in nlls])
        return loss, nll, norm

    # -- gradient norm and clipping ------------------------------------------------------------------------------
    def global_norm(self, normalizer: int) -> mx.nd.NDArray:
        """Norm of (summed gradient / normalizer), shape (1,), on device 0 (all devices hold the same sum)."""
        grads = [p.list_grad()[0] for p in self.params]
        sums = [mx.nd.multi_sum_sq(*grads[i:i + _FUSED_CHUNK], num_arrays=len(grads[i:i + _FUSED_CHUNK]))
                for i in range(0, len(grads), _FUSED_CHUNK)]
        total = mx.nd.concat(*sums, dim=0) if len(sums) > 1 else sums[0]
        return total.sum().sqrt().reshape((1,)) / float(normalizer)

    def _clip_scale(self, norm: mx.nd.NDArray) -> mx.nd.NDArray:
        """min(1, clip_norm / norm) as an array on device 0 (1 when clipping is off)."""
        ones = mx.nd.ones((1,), ctx=self.ctxs[0])
        if self.clip_norm <= 0:
            return ones
        return mx.nd.minimum(ones, self.clip_norm / (norm + 1e-6))

    def clip_global_norm(self, normalizer: int) -> mx.nd.NDArray:
        """Scale gradients in place so that the norm of (summed gradient / normalizer) is at most clip_norm;
        returns the norm before clipping."""
        norm = self.global_norm(normalizer)
        if self.clip_norm > 0:
            self._scale_grads(self._clip_scale(norm))
        return norm

    def _scale_grads(self, scale: mx.nd.NDArray) -> None:
        scales = {self.ctxs[0]: scale}
        for p in self.params:
            for g in p.list_grad():
                s = scales.get(g.context)
                if s is None:
                    s = scales[g.context] = scale.as_in_context(g.context)
                g *= s

    # -- fused update --------------------------------------------------------------------------------------------
    def _fused_adam_update(self, rescale: mx.nd.NDArray) -> bool:
        """Adam update of every device's replica with MXNet's multi-tensor AdamW kernel, which takes the gradient
        scale as an array. With weight decay 0 and eta 1 it is Adam's formula; moments and step counts live in
        the Trainer's own updaters, so `save_states`/`load_states` are unchanged. False (nothing done) when the
        optimizer or settings are not the plain case."""
        tr = self.trainer
        opt = tr._optimizer
        if (type(opt) is not mx.optimizer.Adam or opt.multi_precision or opt.clip_gradient is not None
                or getattr(tr, "_amp_loss_scaler", None) is not None or tr._update_on_kvstore
                or any(np.dtype(p.dtype) != np.float32 or p._stype != "default" or p._grad_stype != "default"
                       for p in self.params)):
            return False
        if not tr._kv_initialized:
            tr._init_kvstore()
        if tr._params_to_init:
            tr._init_params()
        indices = [tr._param2idx[p.name] for p in self.params]
        if any(wd != 0 for wd in opt._get_wds(indices)):
            return False
        for k, updater in enumerate(tr._updaters):
            weights = [p.list_data()[k] for p in self.params]
            grads = [p.list_grad()[k] for p in self.params]
            opt = updater.optimizer   # load_states may have replaced the optimizer object
            opt._set_current_context(weights[0].context.device_id)
            for idx, w in zip(indices, weights):
                if idx not in updater.states:
                    updater.states[idx] = opt.create_state_multi_precision(idx, w)
                    updater.states_synced[idx] = True
                elif not updater.states_synced[idx]:
                    updater.states[idx] = updater.sync_state_context(updater.states[idx], w.context)
                    updater.states_synced[idx] = True
            opt._update_count(indices)
            lrs = opt._get_lrs(indices)
            for i, idx in enumerate(indices):   # Adam's bias correction, folded into the step size
                t = opt._index_update_count[idx]
                lrs[i] *= math.sqrt(1.0 - opt.beta2 ** t) / (1.0 - opt.beta1 ** t)
            scale = rescale.as_in_context(weights[0].context)
            for i in range(0, len(weights), _FUSED_CHUNK):
                sl = slice(i, i + _FUSED_CHUNK)
                n = len(weights[sl])
                mx.nd.contrib.multi_adamw_update(
                    weights[sl], grads[sl], [updater.states[j][0] for j in indices[sl]],
                    [updater.states[j][1] for j in indices[sl]], scale, lrs=lrs[sl], wds=[0.0] * n, etas=[1.0] * n,
                    beta1=opt.beta1, beta2=opt.beta2, epsilon=opt.epsilon, out=weights[sl])
        return True
