"""Optional CPU acceleration of the search: a one-pass per-row top-k (`row_topk.cc`) in place of MXNet's `topk`,
which sorts every whole row of a step's (N, vocabulary) log-probabilities.

The core never needs this package: it decodes with `nmt.search.RowTopK` (MXNet's operators, the reference this
kernel is tested against) when the package is absent, turned off or fails to build. The one hook is
`nmt.search.set_row_topk`: `install()` swaps in `NativeRowTopK`, `uninstall()` puts `RowTopK` back. The search
calls `install()` itself before its first CPU beam search unless `NMT_ACCEL=0` (or `nmt-translate --no-accel`);
GPUs always run MXNet's operators.

The kernel is compiled once per machine with the system C++ compiler (`$CXX`, else g++ or c++; -march=native)
against the headers MXNet ships, cached under `$NMT_CACHE_DIR` (default `$XDG_CACHE_HOME/nmt` or `~/.cache/nmt`)
by a hash of everything that goes into the build, and loaded with `mx.library.load`. Without a compiler, or when
the build or load fails, one line is logged and the search keeps MXNet's operators (same results, slower).
"""
from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Optional

import mxnet as mx
from mxnet import gluon

logger = logging.getLogger("nmt.accel")

SOURCE = Path(__file__).with_name("row_topk.cc")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-std=c++11", "-shared", "-fPIC")
BUILD_TIMEOUT = 300   # seconds; the build takes ~10 s

_lock = threading.Lock()
_status: Optional[str] = None   # None: not tried yet; "" when loaded; else why not


class NativeRowTopK(gluon.HybridBlock):
    """The k best tokens of every row of log-probabilities (N,V): values and ids (N,k), best first, the lower id
    first among equal values: `nmt.search.RowTopK` on the `nmt_row_topk` kernel (CPU, float32, no backward)."""

    def __init__(self, k: int, **kwargs):
        super().__init__(**kwargs)
        self._k = k

    def hybrid_forward(self, F, log_probs):
        return F.nmt_row_topk(log_probs, k=self._k)


def cache_dir() -> Path:
    """Where the built library is kept: $NMT_CACHE_DIR, else $XDG_CACHE_HOME/nmt, else ~/.cache/nmt."""
    if os.environ.get("NMT_CACHE_DIR"):
        return Path(os.environ["NMT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nmt"


def _compiler() -> Optional[str]:
    """$CXX, else g++ or c++, as a path; None when none is found."""
    for name in ([os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++"]):
        found = shutil.which(name)
        if found:
            return found
    return None


def _cpu_signature() -> str:
    """The CPU's model and feature flags (what -march=native builds for), part of the cache key."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags"))}))
    except OSError:
        return platform.processor() or platform.machine()


def _build(cxx: str) -> Path:
    """The library for this machine, built unless the cache has it; RuntimeError (with the end of the compiler's
    message) when the build fails."""
    mx_root = Path(mx.__file__).parent
    lib_api, include = mx_root / "src" / "lib_api.cc", mx_root / "include"
    if not lib_api.exists():
        raise RuntimeError(f"this MXNet build ships no {lib_api} to build operator libraries with")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), lib_api.read_bytes(), (include / "mxnet" / "lib_api.h").read_bytes(),
                 " ".join(FLAGS).encode(), mx.__version__.encode(), cxx.encode(), version.encode(),
                 _cpu_signature().encode()):
        key.update(hashlib.sha256(part).digest())
    path = cache_dir() / f"nmt-accel-{key.hexdigest()[:16]}.so"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")   # concurrent builds
    logger.info("building the CPU top-k kernel with %s (once per machine) into %s", cxx, path)
    try:
        done = subprocess.run([cxx, *FLAGS, str(SOURCE), str(lib_api), "-I", str(include), "-o", str(tmp)],
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"{cxx} failed with exit status {done.returncode}: {last}")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def _load() -> str:
    """"" once the kernel is loaded into MXNet, else why it is not."""
    cxx = _compiler()
    if cxx is None:
        return "no C++ compiler found (set CXX, or install g++)"
    try:
        mx.library.load(str(_build(cxx)), verbose=False)
    except (OSError, RuntimeError, subprocess.SubprocessError, mx.base.MXNetError) as err:
        return f"build or load failed: {err}"
    return ""


def status() -> str:
    """"loaded", or why the kernel is not used (building and loading it at the first call)."""
    global _status
    with _lock:
        if _status is None:
            _status = _load()
            if _status:
                logger.warning("nmt.accel not used: %s; beam search on CPU uses MXNet's topk (same results, "
                               "slower)", " ".join(_status.split()))
    return _status or "loaded"


def install() -> bool:
    """Make CPU beam search use `NativeRowTopK` (building the kernel at the first call); False, with the
    search left on MXNet's operators, when the kernel cannot be built or loaded."""
    from nmt import search
    if status() != "loaded":
        search.set_row_topk(search.RowTopK)
        return False
    search.set_row_topk(NativeRowTopK)
    return True


def uninstall() -> None:
    """Put the search back on MXNet's operators (`nmt.search.RowTopK`)."""
    from nmt import search
    search.set_row_topk(search.RowTopK)
