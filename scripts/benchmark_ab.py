#!/usr/bin/env python
"""Training throughput of two checkouts of this repository, side by side: each checkout's own
`scripts/benchmark_train.py` runs one device at one global batch, the two taking turns round by round (A, B, A, B ...),
so a change of load on a shared machine hits both alike. Reports tokens/s per round and the per-round ratio B / A.

    python scripts/benchmark_ab.py --a ../baseline --b . --rounds 4 --json results/benchmark_ab.json \\
        -- --data-dir ../shared/data --batch-sizes 64

Arguments after `--` go to both benchmark scripts (a flag one of them lacks makes it fail: pass only shared flags),
run in the directory this one runs in, so relative paths name the same files for both. Each run uses its checkout's
code (PYTHONPATH) and `OMP_NUM_THREADS` as set (default 1: one core each).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List

import conditions   # (scripts/, beside this one)
from nmt.signals import deferred


def stop_group(proc: subprocess.Popen, sig: int) -> None:
    """`sig` to the process group of `proc` (a run in its own session: it and the workers it spawned), unless the group
    is gone: a run that ended as the stop came (Popen.wait, interrupted, waits 0.25 s more and reaps it) left
    nothing."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _started(cmd: List[str], env: dict) -> subprocess.Popen:
    """`cmd` started in its own session (its errors on stderr); SystemExit naming what could not be started (the
    interpreter gone, e.g. its virtual environment removed, or not executable) rather than Popen's traceback."""
    try:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        raise SystemExit(f"error: cannot start {cmd[0]} (the interpreter this script runs with, which runs both "
                         f"checkouts' benchmarks) on {cmd[1]}: {e.strerror}") from None


def run_once(checkout: Path, shared: List[str], json_path: Path) -> float:
    """tokens/s (source + target) of one device in `checkout`'s own training benchmark."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, str(checkout / "scripts" / "benchmark_train.py"), "--devices", "1", "--repeats", "1",
           "--json", str(json_path), *shared]
    proc = None
    try:
        # a stop as it starts (a second one too) acts once `proc` is known: raised in Popen, it left the run going
        with deferred(second_at_once=False):
            proc = _started(cmd, env)
        code = proc.wait()
    except BaseException:   # Ctrl-C, SIGTERM: it and the workers it spawned stop too (they were left training)
        if proc is None:   # (it did not start)
            raise
        stop_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            stop_group(proc, signal.SIGKILL)
        raise
    if code:
        raise SystemExit(f"error: {checkout / 'scripts' / 'benchmark_train.py'} failed (exit {code}; its error is "
                         "above)")
    return float(json.loads(json_path.read_text())["train"][0]["tok_per_s"])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    shared = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", type=Path, required=True, help="the reference checkout")
    p.add_argument("--b", type=Path, required=True, help="the checkout compared with it")
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds, each A then B (default 3)")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(own)
    conditions.check_outputs(json=args.json)
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    mine = ("--json", "--devices", "--repeats", "--plot")   # (a prefix too: an older checkout's argparse takes one)
    own_flags = [f.split("=")[0] for f in shared if len(f.split("=")[0]) > 3 and f.startswith("--") and
                 any(m.startswith(f.split("=")[0]) for m in mine)]
    if own_flags:
        flag = next(m for m in mine if m.startswith(own_flags[0]))
        p.error(f"{own_flags[0]} after --: " + ("the two runs would write one plot over the other: leave it out"
                                                if flag == "--plot" else "this script sets it for both runs" +
                                                (" (give --json before --)" if flag == "--json" else "")))
    a, b = args.a.resolve(), args.b.resolve()
    for name, path in (("--a", a), ("--b", b)):
        if not (path / "scripts" / "benchmark_train.py").is_file():
            p.error(f"{name} {path}: no scripts/benchmark_train.py there (give a checkout of this repository)")
    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            ta = run_once(a, shared, Path(tmp) / f"a{r}.json")
            tb = run_once(b, shared, Path(tmp) / f"b{r}.json")
            rows.append({"round": r + 1, "a_tok_per_s": ta, "b_tok_per_s": tb, "b_over_a": tb / ta})
            print(f"round {r + 1}: A {ta:8.0f} tok/s  B {tb:8.0f} tok/s  B/A {tb / ta:.3f}", flush=True)
    ratio = statistics.median(x["b_over_a"] for x in rows)
    print(f"median B/A over {len(rows)} rounds: {ratio:.3f}")
    if args.json:
        report = {**conditions.run_conditions(load_before), "a": str(a), "b": str(b),
                  "a_commit": conditions.commit_of(a), "b_commit": conditions.commit_of(b), "shared_args": shared,
                  "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "1"),
                  "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "when": time.strftime("%Y-%m-%d"),
                  "rounds": rows, "median_b_over_a": ratio}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    from nmt.commands import run_cli
    sys.exit(run_cli(main))   # bad input: one line, exit 2
