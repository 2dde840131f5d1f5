"""Data parallelism: one object that runs one update over any number of devices; one device is one share.

Each update:
  1. the global batch is split into `accum_steps x num_devices` equal shares (x num_workers in a distributed job),
     each cut to the columns its longest sentence needs (`share_width`: few graph shapes),
  2. each device runs forward + loss under `autograd.record` and backward for each of its micro-batches;
     gradients are written (one micro-step) or accumulated (grad_req="add", zeroed after every update),
  3. `trainer.allreduce_grads()` sums the gradients over devices and workers (the kvstore: `device` on GPUs,
     `local` on CPU contexts, dist_sync across machines),
  4. the global norm of the summed gradient over N is computed with `multi_sum_sq` and read on the host, and
  5. `trainer.update` divides by N = the target tokens of the global batch and multiplies by the clip factor
     min(1, clip_norm / norm): the clipped gradient of the mean per-token loss, however the batch was split.
"""
from __future__ import annotations

import ctypes
import logging
import math
import os
import platform
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from nmt.batching import Batch, split_batch
from nmt.config import ConfigError

logger = logging.getLogger("nmt.parallel")

# Tensors per multi-tensor kernel call (MXNet 1.9.1's multi-tensor kernels crash above ~50 inputs).
_FUSED_CHUNK = 24
# Share widths: exact up to this length, then rounded up to a multiple of _LEN_STEP (few graph shapes).
_EXACT_LEN, _LEN_STEP = 16, 8

Loaded = Tuple[mx.nd.NDArray, ...]


def openmp_threads() -> int:
    """OpenMP threads each CPU operator uses in this process (MXNet sets them from OMP_NUM_THREADS at import)."""
    try:
        return int(ctypes.CDLL("libgomp.so.1").omp_get_max_threads())
    except (OSError, AttributeError):
        return int(os.environ.get("OMP_NUM_THREADS", "1") or 1)


def cpu_name() -> str:
    """This machine's CPU model as /proc/cpuinfo names it (else what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_hardware(ctxs: Sequence[mx.Context], num_workers: int = 1) -> str:
    """What a run trains on, as the results tables show it: the CPU, the devices and, on CPU, the OpenMP threads
    of each device's operators, e.g. "2-core CPU (Intel Xeon), cpu(0), 1 OpenMP thread(s)"."""
    text = f"{os.cpu_count()}-core CPU ({cpu_name()}), {', '.join(str(c) for c in ctxs)}"
    if all(c.device_type == "cpu" for c in ctxs):
        text += f", {openmp_threads()} OpenMP thread(s)"
    return text + (f", x {num_workers} workers" if num_workers > 1 else "")


def hardware_of(ctxs: Sequence[mx.Context], num_workers: int = 1, before: str = "", trains: bool = True) -> str:
    """`describe_hardware`, with a warning when a resumed run's devices (`before`: its state.json's hardware) were
    others: devices are each command's, not the run's (a run of --gpus 4 resumed without it trains on the CPU).
    `before` itself when the run `trains` no more (a resume at its limit, to average or validate)."""
    if before and not trains:
        return before
    old, now = re.findall(r"\b[cg]pu\(\d+\)", before), [str(c) for c in ctxs]
    if old and old != now:
        logging.getLogger("nmt.train").warning(
            "the run trained on %s until now and goes on on %s: devices are each command's, not the run's (give "
            "--gpus or --cpu-devices again to keep them)", ", ".join(old), ", ".join(now))
    return describe_hardware(ctxs, num_workers)


class DeviceError(ValueError):
    """--gpus / --cpu-devices asks for devices this machine does not have."""


# Most CPU contexts --cpu-devices gives: they share this machine's cores and exist to test the multi-device (GPU) code
# path, which 2-4 do; each holds its own copy of the model and its buffers (1000 took 24 GB of memory).
MAX_CPU_DEVICES = 64


def check_gpus(ctxs: Sequence[mx.Context]) -> None:
    """DeviceError if one of the GPU contexts in `ctxs` is not a GPU this process can use (`parse_devices` checks the
    command line's the same way, naming --gpus); TypeError for one that is not an mx.Context (the Python API's)."""
    wrong = next((c for c in ctxs if not isinstance(c, mx.Context)), None)
    if wrong is not None:
        raise TypeError(f"ctx must be an mx.Context, such as mx.cpu() or mx.gpu(0), or a list of them; got {wrong!r}")
    ids = [c.device_id for c in ctxs if c.device_type == "gpu"]
    found = mx.context.num_gpus() if ids else 0
    if ids and max(ids) >= found:   # (the first missing named: gpu(0) of [gpu(0), gpu(1)] on a CPU machine)
        raise DeviceError(f"{mx.gpu(min(i for i in ids if i >= found))}: {found} GPU(s) found here" + (
            "" if found else "; using GPUs needs the CUDA build of MXNet (pip install -r requirements/gpu.txt) and a "
            "visible NVIDIA GPU"))


def parse_devices(gpus: Optional[str], cpu_devices: int = 1) -> List[mx.Context]:
    """Contexts from the command line: "2" = the first two visible GPUs, "4,5,6,7" = exactly those ids
    (ids as CUDA numbers them after CUDA_VISIBLE_DEVICES), None = `cpu_devices` CPU contexts cpu(0)..cpu(N-1)."""
    if gpus is not None and str(gpus).strip() == "":   # `--gpus "$N"` with N unset: not a request for the CPU
        raise DeviceError("--gpus is empty: give a count or ids of GPUs (--gpus 2, --gpus 4,5,6,7), or omit --gpus "
                          "to run on the CPU")
    if gpus is None:
        if cpu_devices < 1:
            raise DeviceError(f"--cpu-devices must be at least 1, got {cpu_devices}")
        if cpu_devices > MAX_CPU_DEVICES:
            raise DeviceError(f"--cpu-devices {cpu_devices} is more than {MAX_CPU_DEVICES}: CPU contexts share this "
                              f"machine's {os.cpu_count()} cores, so more make nothing faster, and each holds its own "
                              "copy of the model; they exist to test the multi-device (GPU) code path, which 2-4 do")
        return [mx.cpu(i) for i in range(cpu_devices)]
    spec = str(gpus).strip()
    if cpu_devices != 1:
        raise DeviceError(f"--gpus {spec} and --cpu-devices {cpu_devices} exclude each other: give --gpus to run on "
                          "GPUs, or --cpu-devices alone for CPU contexts")
    try:
        if "," in spec:
            ids = [int(x) for x in spec.split(",") if x.strip() != ""]
        else:   # a count: listed within reason (--gpus 10000000000 filled the memory before any check)
            ids = list(range(int(spec))) if int(spec) <= MAX_CPU_DEVICES else [0, int(spec) - 1]
        asked = len(ids) if "," in spec else int(spec)
    except ValueError:
        raise DeviceError(f"--gpus {spec!r}: give a count (--gpus 2 = first two GPUs) or a comma-separated "
                          "list of ids (--gpus 4,5,6,7; --gpus 3, = only GPU 3)") from None
    if not ids and "," not in spec:
        raise DeviceError(f"--gpus {spec!r} is a count of GPUs and must be >= 1 (GPU 0 alone: --gpus 0, with "
                          "the comma; to run on the CPU, omit --gpus)")
    if not ids:
        raise DeviceError(f"--gpus {spec!r}: no GPU id given")
    if min(ids) < 0 or len(set(ids)) != len(ids):
        raise DeviceError(f"--gpus {spec!r}: GPU ids must be distinct and >= 0")
    found = mx.context.num_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
    if found == 0:
        cuda = mx.runtime.Features().is_enabled("CUDA")
        raise DeviceError(f"--gpus {spec}: no GPU found{where}. " + (
            "No NVIDIA GPU is visible to this CUDA build of MXNet" if cuda else "This MXNet is the CPU build: replace "
            "it with the CUDA build (pip uninstall -y mxnet && pip install -r requirements/gpu.txt; the two builds "
            "write one package, so never install both)") + "; omit --gpus to run on the CPU")
    if max(ids) >= found:
        raise DeviceError(f"--gpus {spec} asks for GPU id {max(ids)} ({asked} GPUs) but only {found} "
                          f"GPU(s) were found{where}: valid ids are 0..{found - 1}")
    return [mx.gpu(i) for i in ids]


def default_kvstore(ctxs: Sequence[mx.Context], requested: str = "auto") -> str:
    """kvstore `device` on GPUs (reduction on the GPUs, P2P where possible), `local` on CPU contexts."""
    if requested != "auto":
        return requested
    return "device" if ctxs[0].device_type == "gpu" else "local"


def check_amp_devices(ctxs: Sequence[mx.Context]) -> None:
    """ConfigError unless every device is a GPU: automatic mixed precision runs float16 kernels there."""
    if not ctxs or any(c.device_type != "gpu" for c in ctxs):
        raise ConfigError("--amp needs --gpus: automatic mixed precision runs float16 kernels on GPUs "
                          f"(devices here: {', '.join(str(c) for c in ctxs) or 'none'}); drop --amp to train on CPU")


def init_amp(ctxs: Sequence[mx.Context]) -> None:
    """Turn on MXNet's automatic mixed precision (float16 compute where safe, float32 master weights); call it
    once, before the model is built. ConfigError unless every device is a GPU. Untested here: no GPU on the
    machine this was written on."""
    check_amp_devices(ctxs)
    from mxnet.contrib import amp
    amp.init()


def concurrent_devices_safe(ctxs: Sequence[mx.Context]) -> bool:
    """Whether each device may be driven from its own thread (training shares, decoding batches). Not for CPU
    contexts whose operators run several OpenMP threads: MXNet's bundled OpenBLAS (0.3.13, OpenMP build, behind
    `batch_dot`) livelocks when two engine threads enter its threaded path at once (seen: 4 CPU contexts stuck at
    100% of one core in `exec_blas`). With OMP_NUM_THREADS = cores / contexts every call stays on its own thread
    and the contexts run side by side; otherwise they run one after another (logged)."""
    if len(ctxs) < 2 or all(c.device_type != "cpu" for c in ctxs):
        return True
    threads = openmp_threads()
    if threads == 1:
        return True
    logger.info("%d CPU contexts with %d OpenMP threads each: the contexts run one after another (set "
                "OMP_NUM_THREADS=%d, cores / contexts, to run them side by side)", len(ctxs), threads,
                max(1, (os.cpu_count() or 1) // len(ctxs)))
    return False


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


def to_device(a: np.ndarray, ctx: mx.Context) -> mx.nd.NDArray:
    """A float32 copy of `a` on `ctx`. A fresh numpy copy wrapped zero-copy does not wait for the operations already
    queued (as `mx.nd.array` would), so the host prepares the next batch or step while the device computes."""
    host = mx.nd.from_numpy(np.array(a, dtype=np.float32, order="C", copy=True), zero_copy=True)
    return host if host.context == ctx else host.as_in_context(ctx)


def load_share(share: Batch, ctx: mx.Context) -> Loaded:
    """(src, src_len, tgt_in, tgt_out, tgt_len) float32 NDArrays on `ctx`."""
    return tuple(to_device(a, ctx) for a in (share.src, share.src_len, share.tgt_in, share.tgt_out, share.tgt_len))


def warn_empty_shares(sentences: int, devices: int, accum_steps: int, workers: int) -> None:
    """Warn when a global batch of `sentences` (--batch-size; 0: --batch-tokens) has fewer sentences than shares:
    correct, but the shares without one compute on padding (also said by --dry-run)."""
    shares = devices * accum_steps * workers
    if 0 < sentences < shares:
        logger.warning("--batch-size %d is split into %d shares (%d devices x %d micro-batches x %d workers): %d "
                       "of them get no sentence and compute on padding; raise --batch-size, or use fewer devices",
                       sentences, shares, devices, accum_steps, workers, shares - sentences)


class DataParallel:
    """Runs one update of `loss_block` over `ctxs`, accumulating `accum_steps` micro-batches per device."""

    def __init__(self, loss_block: gluon.HybridBlock, params: gluon.ParameterDict, trainer: gluon.Trainer,
                 ctxs: Sequence[mx.Context], accum_steps: int = 1, clip_norm: float = 0.0,
                 num_workers: int = 1, rank: int = 0, amp: bool = False, sentences: int = 0):
        self.loss_block = loss_block
        self.params = [p for p in params.values() if p.grad_req != "null"]
        self.trainer = trainer
        self.ctxs = list(ctxs)
        self.accum_steps = accum_steps
        self.clip_norm = clip_norm
        self.num_workers = num_workers
        self.rank = rank
        self.amp = amp
        if amp:   # a dynamic loss scaler on the Trainer: scaled backward, unscaled update, overflow skips
            check_amp_devices(self.ctxs)   # AMP itself was turned on (`init_amp`) before the model was built
            from mxnet.contrib import amp as mx_amp
            mx_amp.init_trainer(trainer)
        # One micro-step writes its gradients; several accumulate and are zeroed after every update.
        self._accumulate = accum_steps > 1
        for p in self.params:
            p.grad_req = "add" if self._accumulate else "write"
        self.zero_grad()
        # MXNet's fused RNN operator holds the Python thread that pushes it until it has run: one thread per
        # device lets the devices compute at once.
        self._pool = (ThreadPoolExecutor(len(self.ctxs), thread_name_prefix="nmt-device")
                      if len(self.ctxs) > 1 and concurrent_devices_safe(self.ctxs) else None)
        self._graphs_built = False
        self.last_grad_norm = float("nan")   # of the latest update, as read for clipping (for logs)
        self.last_share = 1.0                # this worker's part of the latest batch's target tokens
        warn_empty_shares(sentences, len(self.ctxs), accum_steps, num_workers)

    @property
    def num_shares(self) -> int:
        return self.accum_steps * len(self.ctxs)

    def zero_grad(self) -> None:
        """Zero every gradient, one fused kernel per chunk of parameters and device."""
        for k in range(len(self.ctxs)):
            grads = [p.list_grad()[k] for p in self.params]
            for i in range(0, len(grads), _FUSED_CHUNK):
                chunk = grads[i:i + _FUSED_CHUNK]
                mx.nd.reset_arrays(*chunk, num_arrays=len(chunk))

    def shares(self, batch: Batch) -> List[Batch]:
        """This worker's shares of a global batch: `accum_steps * num_devices` pieces of equal row count,
        each cut to the columns it needs."""
        pieces = split_batch(batch, self.num_workers * self.num_shares)
        mine = pieces[self.rank * self.num_shares:(self.rank + 1) * self.num_shares]
        return [trim_batch(p) for p in mine]

    def forward_backward(self, batch: Batch) -> Tuple[List[mx.nd.NDArray], List[mx.nd.NDArray]]:
        """Forward + backward of this worker's part of `batch`; returns per-share (loss_sum, nll_sum) arrays,
        left on their devices (no host synchronization)."""
        shares = self.shares(batch)
        self.last_share = sum(s.num_tgt_tokens for s in shares) / max(batch.num_tgt_tokens, 1)
        n = len(self.ctxs)
        per_device = [[shares[k * n + i] for k in range(self.accum_steps)] for i in range(n)]
        if self._pool is None or not self._graphs_built:
            # Gluon builds a block's graph under a name scope that is not thread-safe: the first pass runs in turn.
            results = [self._device_pass(micro, ctx) for micro, ctx in zip(per_device, self.ctxs)]
            self._graphs_built = True
        else:
            results = list(self._pool.map(self._device_pass, per_device, self.ctxs))
        losses = [loss for res in results for loss in res[0]]
        nlls = [nll for res in results for nll in res[1]]
        return losses, nlls

    def _device_pass(self, micro: List[Batch], ctx: mx.Context) -> Tuple[List[mx.nd.NDArray], List[mx.nd.NDArray]]:
        """Forward + backward of one device's micro-batches, in order (autograd recording is per thread)."""
        losses, nlls = [], []
        for share in micro:
            inputs = load_share(share, ctx)
            with autograd.record():
                loss, nll = self.loss_block(*inputs)
                head = loss.sum()
                scaled = self._scaled(head)
            autograd.backward(scaled)
            losses.append(head)
            nlls.append(nll.sum())
        return losses, nlls

    def _scaled(self, head: mx.nd.NDArray) -> mx.nd.NDArray:
        if not self.amp:
            return head
        from mxnet.contrib import amp as mx_amp
        with mx_amp.scale_loss(head, self.trainer) as scaled:   # also sets the Trainer's unscaling factor
            return scaled

    def step(self, batch: Batch) -> Tuple[mx.nd.NDArray, mx.nd.NDArray, mx.nd.NDArray]:
        """One update on a global batch. Returns (loss_sum, nll_sum, grad_norm) as NDArrays on device 0.

        The clip factor joins the 1/N of `trainer.update`, so clipping costs no pass over the gradients. An update
        whose gradient norm is not finite is skipped with a warning (with AMP: the loss scaler skips it and lowers
        its scale)."""
        losses, nlls = self.forward_backward(batch)
        self.trainer.allreduce_grads()
        if self.amp:   # MXNet's documented way to read true gradients (for clipping) under loss scaling
            from mxnet.contrib import amp as mx_amp
            mx_amp.unscale(self.trainer)
        norm = self.global_norm(batch.num_tgt_tokens)
        value = self.last_grad_norm = float(norm.asscalar())
        if math.isfinite(value):
            scale = min(1.0, self.clip_norm / (value + 1e-6)) if self.clip_norm > 0 else 1.0
            self.trainer.update(batch.num_tgt_tokens / scale)   # gradient * scale / N
        elif self.amp:   # float16 overflow: the Trainer's loss scaler skips this update and lowers the scale
            self.trainer.update(batch.num_tgt_tokens)
        else:
            logger.warning("gradient norm is %s: update skipped", value)
        if self._accumulate:
            self.zero_grad()
        ctx0 = self.ctxs[0]
        loss = mx.nd.add_n(*[l.as_in_context(ctx0) for l in losses])
        nll = mx.nd.add_n(*[n.as_in_context(ctx0) for n in nlls])
        return loss, nll, norm

    def global_norm(self, normalizer: int) -> mx.nd.NDArray:
        """Norm of (summed gradient / normalizer), shape (1,), from device 0's copy (after the all-reduce every
        device holds the same sum)."""
        grads = [p.list_grad()[0] for p in self.params]
        sums_sq = [mx.nd.multi_sum_sq(*grads[i:i + _FUSED_CHUNK], num_arrays=len(grads[i:i + _FUSED_CHUNK]))
                   for i in range(0, len(grads), _FUSED_CHUNK)]
        total = mx.nd.concat(*sums_sq, dim=0) if len(sums_sq) > 1 else sums_sq[0]
        return total.sum().sqrt().reshape((1,)) / float(normalizer)
