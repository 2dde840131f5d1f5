"""A worker of a distributed job (started by `nmt.distributed`'s launcher): joining the job (`create_kvstore`), and
what the workers do together besides the gradient all-reduce: rank 0's files and training state to everyone, an
agreed stop, and the kvstore's start. Keeping them in lockstep is what makes `dist_sync` work:
every worker must run the same updates, and every collective call must be made by all of them."""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np

from nmt.atomic import atomic_write_bytes
from nmt.config import ConfigError
from nmt.signals import INTERRUPTS

JOB_ENV = ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER")
SYNC_KVSTORES = ("dist_sync", "dist_device_sync")


def create_kvstore(name: str):
    """--kvstore NAME -> the kvstore of this distributed job for dist_* (needs the launcher's environment), else
    NAME unchanged (gluon creates local kvstores itself)."""
    check_kvstore(name)
    if not name.startswith("dist"):
        return name
    import mxnet as mx
    print(f"nmt: joining the job at its scheduler {os.environ['DMLC_PS_ROOT_URI']}:{os.environ['DMLC_PS_ROOT_PORT']} "
          "(MXNet waits for it and for every worker, and no signal but SIGKILL stops that wait)", file=sys.stderr,
          flush=True)
    kv = mx.kv.create(name)
    # every worker says who it is: the launcher's numbering is not the kvstore's, and rank 0 writes the model dir
    print(f"nmt: kvstore {name} rank {kv.rank} of {kv.num_workers} on {socket.gethostname()} (pid {os.getpid()})",
          file=sys.stderr, flush=True)
    return kv


def check_kvstore(name: str) -> None:
    """ConfigError unless --kvstore NAME fits this process: dist_* only inside a job of the launcher, whose workers
    use nothing else (`--dry-run` checks it too)."""
    in_job = os.environ.get("DMLC_ROLE") == "worker"
    missing = [v for v in JOB_ENV if not os.environ.get(v)]
    if not name.startswith("dist"):
        if in_job and missing:   # (no launcher's worker: a variable left exported in a shell, or set by hand)
            raise ConfigError(f"DMLC_ROLE=worker is set, but not {', '.join(missing)}: this process is no job's "
                              "worker (DMLC_ROLE left exported from one, or set by hand?); unset DMLC_ROLE to train "
                              "here alone (nmt-launch sets them all for the workers of a job)")
        if in_job:
            raise ConfigError(f"this process was started by the launcher as a distributed worker (DMLC_ROLE=worker), "
                              "whose runs need --kvstore dist_sync (dist_device_sync on GPUs), a --resume too (a run's "
                              f"--kvstore is each command's own, not its config.json's); its kvstore here is {name!r}")
        return
    if name not in SYNC_KVSTORES:
        raise ConfigError(f"--kvstore {name}: use dist_sync or dist_device_sync (asynchronous updates are not "
                          "supported: every worker must apply the same update)")
    if missing or not in_job:
        why = f"{', '.join(missing)} not set" if missing else f"DMLC_ROLE is {os.environ['DMLC_ROLE']!r}"
        raise ConfigError(f"--kvstore {name} runs only inside a job started by the launcher ({why}): "
                          f"nmt-launch -n 2 -s 1 -- nmt-train --kvstore {name} ...")
    check_job_env()


def check_job_env() -> None:
    """ConfigError naming the variable unless the DMLC_* counts and port are numbers and the scheduler's host
    resolves: MXNet's kvstore otherwise waits for its scheduler forever, deaf to Ctrl-C and SIGTERM."""
    for var, top in (("DMLC_NUM_WORKER", None), ("DMLC_NUM_SERVER", None), ("DMLC_PS_ROOT_PORT", 65535)):
        value = os.environ[var]
        if not re.fullmatch(r"\s*[0-9]+\s*", value) or int(value) < 1 or top and int(value) > top:
            raise ConfigError(f"{var}={value!r}: must be a whole number from 1{f' to {top}' if top else ''} "
                              "(nmt-launch sets it for each process of a job)")
    host = os.environ["DMLC_PS_ROOT_URI"]
    try:   # (ps-lite, MXNet's parameter server, speaks IPv4 only)
        socket.getaddrinfo(host, None, socket.AF_INET)
    except socket.gaierror as e:
        raise ConfigError(f"DMLC_PS_ROOT_URI={host!r}: the scheduler's host has no IPv4 address ({e.strerror}); "
                          "MXNet's parameter server reaches it over IPv4 only") from None


# stop reasons that may reach workers at different updates (signals, wall-clock limits: `Trainer.should_stop`)
STOP_WISHES = (*INTERRUPTS, "max_seconds", "time_budget")
# kvstore keys of our collectives: above gluon.Trainer's 0..num_params-1, and small enough that MXNet's key-to-server
# hash (key * 9973, a C int) does not overflow: each holds one size (a sum, a vote, a verdict of `check_same`, a
# length), and one key per power-of-two payload size
_SUM_KEY, _VOTE_KEY, _SIZE_KEY, _PAYLOAD_KEY, _SAME_KEY = 99_999, 100_000, 100_001, 100_002, 99_998
_COUNT_KEY = 99_997   # (`check_count`)


class WorkerGroup:
    """The workers of a job as one worker sees them. Every method is a collective: all workers must call it at the
    same point of the run (a call that only some make blocks the others forever). With one worker it is free.

    Each collective is a kvstore push-pull that sums over workers; a worker issues the next one on a key only after
    it has the result of the previous one, so the server never mixes two rounds of a key."""

    def __init__(self, kv=None):
        self.kv = kv if hasattr(kv, "num_workers") else None
        self.rank = self.kv.rank if self.kv is not None else 0
        self.num_workers = self.kv.num_workers if self.kv is not None else 1
        self.is_chief = self.rank == 0
        self._ready = set()          # keys initialized on the kvstore
        self._vote = None            # the stop vote in flight (its result is read at the next call)
        self._finished = False
        if self.num_workers > 1:
            atexit.register(self._leave)

    def dropout_seed(self, seed: int, step: int) -> int:
        """MXNet's seed of update `step`'s dropout masks on this worker. MXNet seeds each device's generator from it
        and the device's number, the same on every machine (cpu(0), gpu(0)): without the rank every worker drew the
        others' masks. Rank 0's seed is a single process's; MXNet keeps 32 bits."""
        return (seed * 100003 + step + self.rank * 0x9E3779B1) % 2 ** 32

    def finished(self) -> None:
        """This worker is through with collectives: it may leave through MXNet's exit barrier, with the others."""
        self._finished = True

    def _leave(self) -> None:
        """At exit before `finished` (an error, or a stop before training): leave at once, with the command's exit
        code (1 if it returned none: a traceback), which tells the launcher an error from a stop it asked for.
        MXNet's kvstore destructor would first wait for transfers in flight and for every worker at a barrier, which
        workers blocked in a collective with this one never reach: the job would hang instead of failing."""
        if not self._finished:
            from nmt import commands
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(commands.exit_code or 1)
        if self.num_workers > 1 and not self.is_chief:   # it waits for rank 0 (scoring the test sets) at the barrier:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):   # a stop of the job is rank 0's to act on
                signal.signal(sig, signal.SIG_IGN)   # (killed, it left rank 0 waiting there for --grace, then killed)

    def _sum(self, key: int, values: np.ndarray):
        """Start summing `values` (float32) over workers on `key`; returns the output NDArray (read it to wait)."""
        import mxnet as mx
        if key not in self._ready:
            self.kv.init(key, mx.nd.zeros(values.shape))
            self._ready.add(key)
        out = mx.nd.zeros(values.shape)
        self.kv.pushpull(key, mx.nd.array(values, dtype="float32"), out=out)
        return out

    def check_count(self) -> None:
        """ConfigError on every worker unless each was told the number of workers the job's servers sum over
        (DMLC_NUM_WORKER): a worker told another took another share of every batch (1 / its count) and another rank's
        part of the work, so the job trained a wrong model, or waited for good. Counted on the servers (a sum of ones;
        this runs even where the worker was told 1)."""
        if self.kv is None:
            return
        if self.rank >= self.num_workers:   # (told fewer as rank 0, nobody learns it: all wait at MXNet's barrier)
            raise ConfigError(f"DMLC_NUM_WORKER={self.num_workers} of this worker, but the job's scheduler gave it "
                              f"rank {self.rank}; every worker, server and the scheduler need the same DMLC_NUM_WORKER "
                              "(nmt-launch sets it)")
        counted = round(float(self._sum(_COUNT_KEY, np.ones(1, np.float32)).asnumpy()[0]))
        wrong = counted != self.num_workers
        if self._sum(_SAME_KEY, np.array([float(wrong)], np.float32)).asnumpy()[0] > 0 and not wrong:
            raise ConfigError(f"another worker of the job was told another number of workers than this one's "
                              f"DMLC_NUM_WORKER={self.num_workers} (its error says so); every worker, server and the "
                              "scheduler need the same DMLC_NUM_WORKER (nmt-launch sets it)")
        if wrong:
            raise ConfigError(f"DMLC_NUM_WORKER={self.num_workers} of this worker (rank {self.rank}), but the job's "
                              f"servers sum over {counted} workers; every worker, server and the scheduler need the "
                              "same DMLC_NUM_WORKER (nmt-launch sets it)")

    def sum(self, values: Sequence[float]) -> List[float]:
        """Each of `values` summed over the workers (float32: about 7 significant digits)."""
        if self.num_workers == 1:
            return list(values)
        return self._sum(_SUM_KEY, np.array(values, dtype=np.float32)).asnumpy().astype(float).tolist()

    def agree(self, objection: bool) -> bool:
        """Whether any worker objects."""
        if self.num_workers == 1:
            return objection
        return bool(self._sum(_SAME_KEY, np.array([float(objection)], dtype=np.float32)).asnumpy()[0])

    def broadcast_bytes(self, data: Optional[bytes]) -> Optional[bytes]:
        """Rank 0's `data` (None = absent) on every worker; the other workers' argument is ignored."""
        if self.num_workers == 1:
            return data
        n = len(data) + 1 if self.is_chief and data is not None else 0      # 0 = absent
        head = np.array([n >> 24, n & 0xFFFFFF] if self.is_chief else [0, 0], dtype=np.float32)
        head = self._sum(_SIZE_KEY, head).asnumpy()         # the others add zeros: exact
        n = (int(head[0]) << 24) | int(head[1])
        if n == 0:
            return None
        words = -(-(n - 1) // 3)
        size = 1 << max(0, (words - 1).bit_length())       # a few fixed shapes: one key per power of two
        body = np.zeros(size, np.float32)
        if self.is_chief:
            body[:words] = _pack(data)[:words]
        body = self._sum(_PAYLOAD_KEY + size.bit_length(), body).asnumpy()
        return _unpack(body[:words], n - 1)

    def broadcast_json(self, obj):
        """Rank 0's JSON-serializable `obj` on every worker."""
        return json.loads(self.broadcast_bytes(json.dumps(obj).encode("utf-8") if self.is_chief else None))

    def check_same(self, what: str, values: Dict[str, Any]) -> None:
        """ConfigError on every worker when any worker's `values` differ from rank 0's (different data files or
        flags on another machine would give other batches, or another number of them: wrong updates or a hang at
        the epoch end); all of them learn it (a sum), so that none goes on alone to be killed half-way."""
        mine, theirs = _flat(json.loads(json.dumps(values))), _flat(self.broadcast_json(values))   # as JSON sees them
        differ = [f"{k} {json.dumps(mine.get(k))} (rank 0: {json.dumps(theirs.get(k))})"
                  for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
        if self.agree(bool(differ)) and not differ:
            raise ConfigError(f"the {what} of another worker differ from rank 0's (its error says which); every "
                              "machine needs the same code, data files and flags")
        if differ:
            raise ConfigError(f"the {what} of worker rank {self.rank} differ from rank 0's: {'; '.join(differ)}; "
                              "every machine needs the same code, data files and flags")

    @contextlib.contextmanager
    def shared_files(self, src_dir: Path, names: Sequence[str]) -> Iterator[Path]:
        """A directory holding rank 0's `src_dir/name` files while the `with` block reads them: `src_dir` on rank 0,
        a private temporary copy on the others (no shared filesystem and no write access to the model directory
        needed), deleted as the block ends, so that a worker killed later leaves nothing behind. Files missing on
        rank 0 are missing in the copy too, so every worker fails alike."""
        if self.is_chief:
            for name in names if self.num_workers > 1 else ():   # one worker: nobody to send them to
                path = Path(src_dir) / name
                self.broadcast_bytes(path.read_bytes() if path.is_file() else None)
            yield Path(src_dir)
            return
        datas = [self.broadcast_bytes(None) for _ in names]   # first: a worker stopped while it waits leaves nothing
        with tempfile.TemporaryDirectory(prefix=f"nmt-worker{self.rank}-") as copy:
            for name, data in zip(names, datas):
                if data is not None:
                    atomic_write_bytes(Path(copy) / name, data)
            yield Path(copy)

    def lacks(self, path: Path) -> bool:
        """Whether this worker, not rank 0, has no `path` of rank 0's on its machine: a run's config.json, which a
        worker resuming without the model directory takes from rank 0 (`nmt.resume.rank0_settings`), and whose
        advice then names the run's files as rank 0's."""
        return not self.is_chief and not Path(path).is_file()

    def read_shared(self, src_dir: Path, name: str, read: Callable[[Path], Any]) -> Any:
        """`read(path)` of rank 0's file `src_dir/name` (see `shared_files`)."""
        with self.shared_files(src_dir, (name,)) as where:
            return read(where / name)

    def init_trainer(self, trainer) -> None:
        """Initialize `trainer`'s kvstore now (every worker gets rank 0's parameters) and wait for it.

        Works around a gluon.Trainer bug (MXNet 1.9.1, update_on_kvstore=False): the kvstore is initialized lazily,
        in the first `allreduce_grads`, after the first backward pass, so a worker whose parameters differ from
        rank 0's sums a first gradient taken at its own (tests/integration/test_distributed.py shows it), and the
        parameter pull can reach the server after the first gradient round and return the summed gradient in place
        of the parameters. Gluon offers no public call to initialize it earlier: this is the one place that uses
        its private members."""
        if self.kv is None:
            return
        import mxnet as mx
        if not trainer._kv_initialized:
            trainer._init_kvstore()
        if trainer._params_to_init:
            trainer._init_params()
        if trainer._params_to_init:
            raise RuntimeError("parameters with deferred initialization cannot be shared before the first update: "
                               f"{[p.name for p in trainer._params_to_init]}; give their layers input sizes")
        mx.nd.waitall()

    def agree_stop(self, wish: str) -> str:
        """This worker's wish to stop (one of STOP_WISHES, or "") -> the reason all workers stop for, or "".

        Workers vote at every call; the outcome of a vote is read at the next call, one update later, so that the
        loop never waits for it. Every worker gets the same answer at the same call, whoever wished first."""
        if self.num_workers == 1:
            return wish
        if wish and wish not in STOP_WISHES:
            raise ValueError(f"unknown stop wish {wish!r}; expected one of {STOP_WISHES}")
        counts = self._vote.asnumpy() if self._vote is not None else np.zeros(len(STOP_WISHES))
        self._vote = self._sum(_VOTE_KEY, np.array([float(w == wish) for w in STOP_WISHES], dtype=np.float32))
        return next((w for w, c in zip(STOP_WISHES, counts) if c > 0), "")


def _flat(values: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """`values` with its dicts' keys joined by dots ({"train": {"patience": 3}} -> {"train.patience": 3})."""
    out: Dict[str, Any] = {}
    for k, v in values.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _pack(data: bytes) -> np.ndarray:
    """Bytes -> float32 words of 3 bytes each (integers < 2**24 are exact in float32; kvstores carry only floats)."""
    b = np.frombuffer(data + b"\0" * (-len(data) % 3), dtype=np.uint8).reshape(-1, 3).astype(np.uint32)
    words = ((b[:, 0] << 16) | (b[:, 1] << 8) | b[:, 2]).astype(np.float32)
    return words if len(words) else np.zeros(1, np.float32)


def _unpack(words: np.ndarray, n: int) -> bytes:
    w = np.rint(words).astype(np.uint32)
    return np.stack([w >> 16, (w >> 8) & 255, w & 255], axis=1).astype(np.uint8).tobytes()[:n]
