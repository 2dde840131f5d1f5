"""Data parallelism, MXNet Gluon's recipe: one object that runs forward/backward per device share.

A single device is the same code with one share. Each update:
  1. the global batch is split into `accum_steps x num_devices` equal shares (x num_workers in a distributed job,
     where each worker keeps its own `accum_steps x num_devices`); each share is cut to the columns its longest
     sentence needs (rounded up to a short ladder of lengths, so the number of graph shapes stays small),
  2. per micro-step, each device (from its own Python thread) runs forward + loss under `autograd.record` and its
     own backward (CPU contexts side by side: each context's engine thread bound to a core of its own);
     gradients are written (one micro-step) or accumulated in place (grad_req="add", zeroed after every update),
  3. `trainer.allreduce_grads()` sums gradients over devices (and workers, for dist kvstores); CPU contexts of
     one process (which share the same cores and memory) instead sum each parameter into one replica, its
     owner (owners balanced by size), which alone updates it and copies it to the others,
  4. the global norm of the summed gradient is computed once, with one fused kernel per owner, and read on
     the host (the only synchronization of an update; the device runs the update while Python queues the next
     batch), and
  5. `trainer.update` divides by N = the number of target tokens of the global batch (over all workers) and
     multiplies by the clip factor min(1, clip_norm / norm), so the update is the clipped gradient of the mean
     per-token loss, independent of how the batch was split.
"""
from __future__ import annotations

import ctypes
import logging
import math
import os
import platform
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

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


class DeviceError(ValueError):
    """--gpus / --cpu-devices asks for devices this machine does not have."""


def cpu_contexts(n: int, spare_cpu0: bool = False) -> List[mx.Context]:
    """`n` CPU contexts: cpu(0)..cpu(n-1), or with `spare_cpu0` (decoding on several) cpu(1)..cpu(n).

    MXNet's engine runs two kinds of small operations on cpu(0)'s worker, whatever context they serve: every wait
    for an array (`asnumpy`, `wait_to_read`: `WaitForVar`) and every copy from a host array (`from_numpy` arrays
    live on cpu(0)) to another CPU context. That worker's queue is first in, first out. The search reads its
    "done" flags every step, so decoding on cpu(0) and cpu(1), each of cpu(1)'s steps waited behind cpu(0)'s
    operators: cpu(1) did 16 of 38 batches and its engine thread sat idle 40% of the time; on cpu(1) and cpu(2),
    19 each and 1,341-1,367 against 1,208-1,257 sentences/s (2,400 sentences, beam 4, Zen 5 host). Training
    waits once per update, and there cpu(0)'s shares need no copy at all: 70.6 against 72.1 ms per update at
    batch 64 for cpu(0), cpu(1) against cpu(1), cpu(2) (medians of 4 alternating runs each), so it keeps cpu(0)."""
    first = 1 if spare_cpu0 and n > 1 else 0
    return [mx.cpu(i) for i in range(first, first + n)]


def parse_devices(gpus: Optional[str], cpu_devices: int = 1, spare_cpu0: bool = False) -> List[mx.Context]:
    """Contexts from the command line: "2" = the first two visible GPUs, "4,5,6,7" = exactly those ids
    (ids as CUDA numbers them after CUDA_VISIBLE_DEVICES), None = `cpu_devices` CPU contexts (`cpu_contexts`;
    `spare_cpu0` for decoding)."""
    if gpus is None or str(gpus).strip() == "":
        if cpu_devices < 1:
            raise DeviceError(f"--cpu-devices must be at least 1, got {cpu_devices}")
        return cpu_contexts(cpu_devices, spare_cpu0)
    spec = str(gpus).strip()
    try:
        if "," in spec:
            ids = [int(x) for x in spec.split(",") if x.strip() != ""]
        else:
            ids = list(range(int(spec)))
    except ValueError:
        raise DeviceError(f"--gpus {spec!r}: give a count (--gpus 2 = first two GPUs) or a comma-separated "
                          "list of ids (--gpus 4,5,6,7; --gpus 3, = only GPU 3)") from None
    if not ids and "," not in spec:
        raise DeviceError(f"--gpus {spec!r} is a count of GPUs and must be >= 1 (GPU 0 alone: --gpus 0, ; "
                          "to train on the CPU, omit --gpus)")
    if not ids:
        raise DeviceError(f"--gpus {spec!r}: no GPU id given")
    if min(ids) < 0 or len(set(ids)) != len(ids):
        raise DeviceError(f"--gpus {spec!r}: GPU ids must be distinct and >= 0")
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


# CPU context id -> the core its engine thread is bound to (for the rest of the process; `pin_context_threads`).
_pinned: Dict[int, int] = {}


def side_by_side(ctxs: Sequence[mx.Context]) -> bool:
    """Whether each device is driven from its own thread (`concurrent_devices_safe`); CPU contexts that are get
    their engine threads bound to a core each first (`pin_context_threads`)."""
    if not concurrent_devices_safe(ctxs):
        return False
    pin_context_threads(ctxs)
    return True


def pin_context_threads(ctxs: Sequence[mx.Context]) -> Optional[Dict[int, int]]:
    """Bind the engine thread of each CPU context in `ctxs` to a core of its own (the native `nmt_pin_thread`,
    run on that context), the contexts in id order on the process's allowed cores in order, when the contexts
    take every core the process may use (all of a 2-core machine for 2 contexts; on a larger one, `taskset -c`
    gives a run its cores). Returns {context id: core}, or None when nothing is bound: fewer than 2 contexts, not
    all CPU, more than one OpenMP thread per operator (a bound thread's OpenMP team would share its one core) or
    MXNet worker thread per context (MXNET_CPU_WORKER_NTHREADS), allowed cores not one per context (with spare
    cores the scheduler spreads the threads itself, and two jobs binding to the same first cores would collide),
    no native kernels, or NMT_PIN_THREADS=0.

    Why: unbound, Linux often queues both contexts' threads on one core while the other idles (an operator that
    completes on one context wakes the thread of the other, which waits for it, on its own core): training on 2
    contexts, each engine thread spent 35-41% of its time runnable but not running while the machine was 20% idle.
    Bound, an update at batch 64 took 191.5 instead of 208.7 ms (medians of 8 epochs each, bound and unbound
    alternating in one process). NMT_PIN_THREADS=0 leaves the threads unbound (e.g. when other jobs are bound to
    the same cores)."""
    if (len(ctxs) < 2 or any(c.device_type != "cpu" for c in ctxs) or not hasattr(os, "sched_getaffinity")
            or os.environ.get("NMT_PIN_THREADS", "1").strip() == "0" or openmp_threads() != 1
            or os.environ.get("MXNET_CPU_WORKER_NTHREADS", "1").strip() not in ("", "1")):
        return None
    ids = sorted({c.device_id for c in ctxs})
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) != len(ids) or not hasattr(mx.nd, "nmt_pin_thread"):
        return None
    wanted = dict(zip(ids, allowed))
    for dev, core in wanted.items():
        if _pinned.get(dev) == core:
            continue
        status = int(mx.nd.nmt_pin_thread(mx.nd.zeros((1,), ctx=mx.cpu(dev)), cores=str(core)).asscalar())
        if status:
            logger.warning("could not bind the engine thread of cpu(%d) to core %d (%s); it and the next "
                           "contexts' threads stay unbound", dev, core, os.strerror(status))
            return None
        _pinned[dev] = core
    logger.info("engine threads bound to a core each: %s",
                ", ".join(f"cpu({d}) -> core {c}" for d, c in wanted.items()))
    return wanted


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
                 num_workers: int = 1, rank: int = 0, trim: bool = True, amp: bool = False):
        self.loss_block = loss_block
        self.params = [p for p in params.values() if p.grad_req != "null"]
        self.trainer = trainer
        self.ctxs = list(ctxs)
        self.accum_steps = accum_steps
        self.clip_norm = clip_norm
        self.num_workers = num_workers
        self.rank = rank
        self.trim = trim
        self.amp = amp
        if amp:   # a dynamic loss scaler on the Trainer: scaled backward, unscaled update, overflow skips
            check_amp_devices(self.ctxs)   # AMP itself was turned on (`init_amp`) before the model was built
            from mxnet.contrib import amp as mx_amp
            mx_amp.init_trainer(trainer)
        # One micro-step writes its gradients; several accumulate and are zeroed after every update.
        self._accumulate = accum_steps > 1
        # CPU contexts share the same cores and memory: the kvstore's reduce-and-broadcast and one optimizer
        # update per replica would be pure overhead there, so gradients are summed into replica 0, which alone
        # is updated and then copied to the others.
        self._cpu_replicas = num_workers == 1 and len(self.ctxs) > 1 and all(c.device_type == "cpu"
                                                                               for c in self.ctxs)
        for p in self.params:
            p.grad_req = "add" if self._accumulate else "write"
        # CPU replicas: each parameter is summed, updated and copied out by one replica, its owner, the work
        # balanced by size, so every context's engine thread (and core) takes a share of it.
        self._owners = self._balanced_owners() if self._cpu_replicas else [0] * len(self.params)
        # On CPU contexts the gradient sum and norm run on nmt.native's kernel when it loads (one pass, vectorized:
        # 5.5x as fast as MXNet's elemwise_add + multi_sum_sq at 5.8M parameters, 2-3.7x multi_sum_sq alone).
        self._native = all(c.device_type == "cpu" for c in self.ctxs) and hasattr(mx.nd, "nmt_add_sumsq")
        self.zero_grad()
        self._pool = (ThreadPoolExecutor(len(self.ctxs), thread_name_prefix="nmt-device")
                      if len(self.ctxs) > 1 and side_by_side(self.ctxs) else None)
        self._graphs_built = False

    def _balanced_owners(self) -> List[int]:
        """Owner replica of each parameter: largest first to the least loaded replica."""
        load = [0] * len(self.ctxs)
        owners = [0] * len(self.params)
        for i in sorted(range(len(self.params)), key=lambda i: -int(np.prod(self.params[i].shape))):
            k = load.index(min(load))
            owners[i] = k
            load[k] += int(np.prod(self.params[i].shape))
        return owners

    def _by_owner(self) -> List[Tuple[int, List[gluon.Parameter]]]:
        """(owner replica, the parameters it owns) for each owner, in replica order (one owner, 0, except for
        CPU replicas)."""
        return [(k, [p for p, o in zip(self.params, self._owners) if o == k]) for k in sorted(set(self._owners))]

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
        left on their devices (no host synchronization).

        With several devices each one is driven from its own Python thread (see `side_by_side`):
        MXNet's fused RNN operator holds the thread that pushes it until it has run, so one thread pushing every
        device's graph in turn runs the devices' LSTMs one after another."""
        shares = self.shares(batch)
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
                scaled = self._scaled([head])
            autograd.backward(scaled)
            losses.append(head)
            nlls.append(nll.sum())
        return losses, nlls

    def _scaled(self, heads: List[mx.nd.NDArray]) -> List[mx.nd.NDArray]:
        if not self.amp:
            return heads
        from mxnet.contrib import amp as mx_amp
        with mx_amp.scale_loss(heads, self.trainer) as scaled:   # also sets the Trainer's unscaling factor
            return list(scaled)

    def step(self, batch: Batch) -> Tuple[mx.nd.NDArray, mx.nd.NDArray, mx.nd.NDArray]:
        """One update on a global batch. Returns (loss_sum, nll_sum, grad_norm) as NDArrays on device 0.

        The global norm is read on the host (the one synchronization of an update): clipping then costs no pass
        over the gradients, as the clip factor joins the 1/N of `trainer.update`, and the device runs the
        parameter update while Python queues the next batch. An update whose gradient norm is not finite is
        skipped with a warning."""
        losses, nlls = self.forward_backward(batch)
        sums_sq = None
        if self._cpu_replicas:
            sums_sq = self._reduce_to_owners()
        else:
            self.trainer.allreduce_grads()
        loss_scale = self.trainer._amp_loss_scaler.loss_scale if self.amp else 1.0
        norm = self.global_norm(batch.num_tgt_tokens * loss_scale, sums_sq)
        value = float(norm.asscalar())
        if math.isfinite(value):
            scale = min(1.0, self.clip_norm / (value + 1e-6)) if self.clip_norm > 0 else 1.0
            if self._cpu_replicas:
                self._update_owners_and_copy(batch.num_tgt_tokens / scale)
            else:
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

    # -- CPU replicas ---------------------------------------------------------------------------------------------
    def _reduce_to_owners(self) -> Optional[List[mx.nd.NDArray]]:
        """Sum every replica's gradient into its owner's, in place. CPU contexts share one memory, and MXNet's
        CPU operators read an input of another CPU context directly: no copy (measured at 5.8M parameters:
        17 ms vs 42 ms for copy-then-add, which also allocates a fresh buffer per parameter). An operator runs on
        its first input's context, so the owners' engine threads share the work. With nmt.native, one kernel per
        owner also returns the sum of squares of its summed gradients (shape (1,), on the owner), for the norm;
        else None."""
        if self._native:
            sums_sq = []
            for k, owned in self._by_owner():
                mine = [p.list_grad() for p in owned]
                others = [grads[j] for j in range(len(self.ctxs)) if j != k for grads in mine]
                sums_sq.append(mx.nd.nmt_add_sumsq(*[grads[k] for grads in mine], *others, num_arrays=len(mine),
                                                   num_replicas=len(self.ctxs)))
            return sums_sq
        for p, k in zip(self.params, self._owners):
            grads = p.list_grad()
            for j, g in enumerate(grads):
                if j != k:
                    mx.nd.elemwise_add(grads[k], g, out=grads[k])
        return None

    def _update_owners_and_copy(self, batch_size: float) -> None:
        """`trainer.update(batch_size)` applied to each parameter's owner replica (by the Trainer's first updater,
        which holds the optimizer state that `save_states` writes; a state lives on its owner's context), then
        the new weights copied to the other replicas; returns once both are done."""
        tr = self.trainer
        if not tr._kv_initialized:
            tr._init_kvstore()
        if tr._params_to_init:
            tr._init_params()
        tr._check_and_rescale_grad(tr._scale / batch_size)
        indices = [tr._param2idx[p.name] for p in self.params]
        tr._updaters[0](indices, [p.list_grad()[k] for p, k in zip(self.params, self._owners)],
                        [p.list_data()[k] for p, k in zip(self.params, self._owners)])
        for p, k in zip(self.params, self._owners):
            weights = p.list_data()
            for j, w in enumerate(weights):
                if j != k:
                    weights[k].copyto(w)
        # Let the update and the copy-out finish before the next batch's passes are queued: overlapped with them,
        # the contexts' engine threads interleave the two updates' work and an update took 1.2x as long
        # (2 contexts, batch 64: 204-212 ms against 168-180 with this wait).
        for p in self.params:
            for w in p.list_data():
                w.wait_to_read()

    # -- gradient norm ------------------------------------------------------------------------------------------------
    def global_norm(self, normalizer: int, sums_sq: Optional[List[mx.nd.NDArray]] = None) -> mx.nd.NDArray:
        """Norm of (summed gradient / normalizer), shape (1,), on device 0, from `sums_sq` (partial sums of
        squares, as `_reduce_to_owners` returns) when given. Else the summed gradient of a parameter is read where
        it is: on every device after an allreduce (device 0's copy), on its owner for CPU replicas (one fused
        kernel per owner, on the owner's context)."""
        ctx0 = self.ctxs[0]
        if sums_sq is None:
            sums_sq = []
            for k, owned in self._by_owner():
                grads = [p.list_grad()[k] for p in owned]
                if self._native:
                    sums_sq.append(mx.nd.nmt_add_sumsq(*grads, num_arrays=len(grads), num_replicas=1))
                else:
                    sums_sq += [mx.nd.multi_sum_sq(*grads[i:i + _FUSED_CHUNK],
                                                   num_arrays=len(grads[i:i + _FUSED_CHUNK]))
                                for i in range(0, len(grads), _FUSED_CHUNK)]
        sums = [s.as_in_context(ctx0) for s in sums_sq]
        total = mx.nd.concat(*sums, dim=0) if len(sums) > 1 else sums[0]
        return total.sum().sqrt().reshape((1,)) / float(normalizer)
