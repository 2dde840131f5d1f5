"""Data parallelism, MXNet Gluon's recipe: one object that runs forward/backward per device share.

A single device is the same code with one share. Each update:
  1. the global batch is split into `accum_steps x num_devices` equal shares (x num_workers in a distributed job,
     where each worker keeps its own `accum_steps x num_devices`),
  2. per micro-step, each device runs forward + loss under `autograd.record` and its own backward; gradients
     accumulate in place (grad_req="add"),
  3. `trainer.allreduce_grads()` sums gradients over devices (and workers, for dist kvstores),
  4. the summed gradient is clipped by its global norm (computed once, on device 0 after the all-reduce, without
     a host synchronization), and
  5. `trainer.update(N)` divides by N = the number of target tokens of the global batch (over all workers), so the
     update is the gradient of the mean per-token loss, independent of how the batch was split.
"""
from __future__ import annotations

import logging
import os
from typing import List, Optional, Sequence, Tuple

import mxnet as mx
from mxnet import autograd, gluon

from nmt.batching import Batch, split_batch

logger = logging.getLogger("nmt.parallel")


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


class DataParallel:
    """Runs one update of `loss_block` over `ctxs`, accumulating `accum_steps` micro-batches."""

    def __init__(self, loss_block: gluon.HybridBlock, params: gluon.ParameterDict, trainer: gluon.Trainer,
                 ctxs: Sequence[mx.Context], accum_steps: int = 1, clip_norm: float = 0.0,
                 num_workers: int = 1, rank: int = 0):
        self.loss_block = loss_block
        self.params = [p for p in params.values() if p.grad_req != "null"]
        self.trainer = trainer
        self.ctxs = list(ctxs)
        self.accum_steps = accum_steps
        self.clip_norm = clip_norm
        self.num_workers = num_workers
        self.rank = rank
        for p in self.params:
            p.grad_req = "add"   # micro-batches and devices accumulate; zeroed after every update
        self.zero_grad()

    @property
    def num_shares(self) -> int:
        return self.accum_steps * len(self.ctxs)

    def zero_grad(self) -> None:
        for p in self.params:
            p.zero_grad()

    def shares(self, batch: Batch) -> List[Batch]:
        """This worker's shares of a global batch: `accum_steps * num_devices` equal-shaped pieces."""
        pieces = split_batch(batch, self.num_workers * self.num_shares)
        return pieces[self.rank * self.num_shares:(self.rank + 1) * self.num_shares]

    def forward_backward(self, batch: Batch) -> Tuple[List[mx.nd.NDArray], List[mx.nd.NDArray]]:
        """Forward + backward of this worker's part of `batch`; returns per-share (loss_sum, nll_sum) arrays,
        left on their devices (no host synchronization)."""
        losses, nlls = [], []
        shares = self.shares(batch)
        for k in range(self.accum_steps):
            micro = shares[k * len(self.ctxs):(k + 1) * len(self.ctxs)]
            with autograd.record():
                outs = [self.loss_block(*_to_ctx(share, ctx)) for share, ctx in zip(micro, self.ctxs)]
                heads = [loss.sum() for loss, _ in outs]
            autograd.backward(heads)
            losses += heads
            nlls += [nll.sum() for _, nll in outs]
        return losses, nlls

    def step(self, batch: Batch) -> Tuple[mx.nd.NDArray, mx.nd.NDArray, mx.nd.NDArray]:
        """One update on a global batch. Returns (loss_sum, nll_sum, grad_norm) as NDArrays on device 0."""
        losses, nlls = self.forward_backward(batch)
        self.trainer.allreduce_grads()
        norm = self.clip_global_norm(batch.num_tgt_tokens)
        self.trainer.update(batch.num_tgt_tokens)
        self.zero_grad()
        ctx0 = self.ctxs[0]
        loss = mx.nd.add_n(*[l.as_in_context(ctx0) for l in losses])
        nll = mx.nd.add_n(*[n.as_in_context(ctx0) for n in nlls])
        return loss, nll, norm

    def clip_global_norm(self, normalizer: int) -> mx.nd.NDArray:
        """Scale gradients so that the norm of (summed gradient / normalizer) is at most clip_norm.

        After allreduce every device holds the same summed gradient, so the norm is taken on device 0 and the
        scale (an NDArray, no host sync) is applied on every device."""
        ctx0 = self.ctxs[0]
        sq = [p.list_grad()[0].norm().square() for p in self.params]   # grads of device 0
        norm = mx.nd.add_n(*sq).sqrt() / float(normalizer)
        if self.clip_norm > 0:
            scale = mx.nd.minimum(mx.nd.ones((1,), ctx=ctx0), self.clip_norm / (norm + 1e-6))
            scales = {ctx0: scale}
            for p in self.params:
                for g in p.list_grad():
                    s = scales.get(g.context)
                    if s is None:
                        s = scales[g.context] = scale.as_in_context(g.context)
                    g *= s
        return norm


def _to_ctx(share: Batch, ctx: mx.Context):
    return (mx.nd.array(share.src, ctx=ctx, dtype="float32"), mx.nd.array(share.src_len, ctx=ctx, dtype="float32"),
            mx.nd.array(share.tgt_in, ctx=ctx, dtype="float32"), mx.nd.array(share.tgt_out, ctx=ctx, dtype="float32"),
            mx.nd.array(share.tgt_len, ctx=ctx, dtype="float32"))
