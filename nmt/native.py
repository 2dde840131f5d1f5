"""Native CPU kernels (`native_ops.cc`): for the search step a fused LSTM cell, attention, a one-pass row
top-k, the search update after it, and matrix products that leave out the rows of finished hypotheses; for training the gradient sum of CPU
replicas fused with the gradient norm, and Adam's update (`nmt.optim.NativeAdam`); and the binding of a CPU
context's engine thread to a core (`nmt.parallel.pin_context_threads`).

They are compiled once per machine with the system C++ compiler (`$CXX`, else g++ or c++; flags tuned to the CPU,
`-march=native`, or the target named by `$NMT_NATIVE_MARCH`, which this CPU must be able to run: e.g. `haswell`
builds the AVX2 kernel, `nmt_masked_fc`, on an AVX-512 machine, where the tests use it), cached under
`$NMT_CACHE_DIR` (default `$XDG_CACHE_HOME/nmt` or `~/.cache/nmt`) by a hash of everything that goes into the build,
and loaded into MXNet as an operator library (`mx.library.load`). The search, the data-parallel step and the
optimizer use them on CPU contexts when they load; otherwise (no compiler, a failed build, `NMT_NATIVE_OPS=0`, or a
GPU) they run the same computation on MXNet's own operators, with the same result, more slowly (logged once).
"""
from __future__ import annotations

import contextlib
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

logger = logging.getLogger("nmt.native")

SOURCE = Path(__file__).with_name("native_ops.cc")
FLAGS = ("-O3", "-fno-math-errno", "-fno-trapping-math", "-fopenmp", "-std=c++11", "-shared", "-fPIC")
BUILD_TIMEOUT = 300

_lock = threading.Lock()
_status: Optional[str] = None      # None: not tried yet; "" when loaded; else why not
_local = threading.local()         # .off: `turned_off()` in this thread


def cache_dir() -> Path:
    """Where built libraries are kept: $NMT_CACHE_DIR, else $XDG_CACHE_HOME/nmt, else ~/.cache/nmt."""
    if os.environ.get("NMT_CACHE_DIR"):
        return Path(os.environ["NMT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nmt"


def _compiler() -> Optional[str]:
    for name in ([os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++"]):
        found = shutil.which(name)
        if found:
            return found
    return None


def _cpu_signature() -> str:
    """The CPU's model and feature flags (what -march=native builds for)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags"))}))
    except OSError:
        return platform.processor() or platform.machine()


def _march() -> str:
    """$NMT_NATIVE_MARCH, "" when unset."""
    return os.environ.get("NMT_NATIVE_MARCH", "").strip()


def _flags() -> tuple:
    """The compiler flags: FLAGS and -march=$NMT_NATIVE_MARCH (default native)."""
    return (*FLAGS, f"-march={_march() or 'native'}")


def _build(cxx: str) -> Path:
    """The library for this machine, built unless the cache has it; RuntimeError (with the compiler's message)
    when the build fails."""
    mx_root = Path(mx.__file__).parent
    lib_api, include = mx_root / "src" / "lib_api.cc", mx_root / "include"
    if not lib_api.exists():
        raise RuntimeError(f"this MXNet build ships no {lib_api} to build operator libraries with")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    key, flags = hashlib.sha256(), _flags()
    for part in (SOURCE.read_bytes(), lib_api.read_bytes(), (include / "mxnet" / "lib_api.h").read_bytes(),
                 " ".join(flags).encode(), mx.__version__.encode(), version.encode(), _cpu_signature().encode()):
        key.update(hashlib.sha256(part).digest())
    path = cache_dir() / f"nmt-native-ops-{key.hexdigest()[:16]}.so"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = str(path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp"))   # concurrent builds: own files
    logger.info("building the native CPU kernels with %s (once per machine, ~10 s) into %s", cxx, path)
    try:
        done = subprocess.run([cxx, *flags, str(SOURCE), str(lib_api), "-I", str(include), "-o", tmp],
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        if done.returncode != 0:
            march = (f" with NMT_NATIVE_MARCH={_march()} (a -march this compiler knows, e.g. haswell)"
                     if _march() else "")
            raise RuntimeError(f"{cxx} failed ({done.returncode}){march}: {done.stderr.strip()[-800:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _load() -> str:
    if os.environ.get("NMT_NATIVE_OPS", "1").strip() == "0":
        return "turned off (NMT_NATIVE_OPS=0)"
    cxx = _compiler()
    if cxx is None:
        return "no C++ compiler found (set CXX, or install g++)"
    try:
        path = _build(cxx)
        mx.library.load(str(path), verbose=False)
    except (OSError, RuntimeError, subprocess.SubprocessError, mx.base.MXNetError) as err:
        return f"build or load failed: {err}"
    return ""


def available() -> bool:
    """Whether the native kernels are loaded into MXNet (building and loading them at the first call), and not
    turned off in this thread (`turned_off`)."""
    global _status
    with _lock:
        if _status is None:
            _status = _load()
            if _status:
                (logger.info if _status.startswith("turned off") else logger.warning)(
                    "native CPU kernels not used: %s; decoding, the gradient sum and norm and Adam's update on CPU "
                    "run on MXNet's operators (same results, slower)", _status)
    return _status == "" and not getattr(_local, "off", False)


def has_op(name: str) -> bool:
    """Whether the native kernels are `available` and include operator `name` (`nmt_masked_fc` is built only
    for CPUs with AVX2 and FMA and without AVX-512, where oneDNN's products are wider)."""
    return available() and hasattr(mx.nd, name)


@contextlib.contextmanager
def turned_off():
    """Within this block, in this thread, the search (and a `DataParallel` built here) runs on MXNet's operators
    only (benchmarks and tests time and compare both)."""
    before = getattr(_local, "off", False)
    _local.off = True
    try:
        yield
    finally:
        _local.off = before


def status() -> str:
    """"loaded", or why the native kernels are not used."""
    available()
    return _status or "loaded"
