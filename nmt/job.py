"""Running a job planned by `nmt.distributed`: `Job` starts its processes (here, or over ssh), watches them, and
ends the whole job with a message naming the process when any of them fails; when the launcher gets SIGINT, SIGTERM
or SIGHUP (unless ignored, as under nohup) it asks the workers to checkpoint and stop. Every child dies with the
launcher (Linux)."""
from __future__ import annotations

import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Sequence

from nmt.distributed import LaunchError, ProcSpec, ssh_argv
from nmt.signals import leave_hung_up_terminal, stopping_signals


def _die_with_parent() -> None:
    """Runs in each child before exec: SIGKILL when the launcher dies (Linux), so nothing outlives a killed launcher."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))   # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def describe_exit(code: int) -> str:
    """Popen.returncode in words; a shell (or ssh) reports a command killed by signal S as 128 + S."""
    def name(sig: int) -> str:
        try:
            return signal.Signals(sig).name
        except ValueError:
            return f"signal {sig}"
    if code < 0:
        return f"was killed by {name(-code)}"
    return f"exited with code {code}" + (f" (128 + {name(code - 128)}?)" if 128 < code < 160 else "")


# A worker's exit codes of a stop the launcher asked for (SIGTERM, or the signal itself), as it or a shell report it.
# Seconds the other workers get to leave after one left by a stop (they leave together, through MXNet's barrier)
LEFT_WAIT = 5.0
_STOPPED = tuple(c for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP) for c in (128 + sig, -sig))


@dataclass
class Job:
    """Starts the processes of `specs`, watches them, and ends the job as soon as one of them fails."""
    specs: List[ProcSpec]
    workdir: str = field(default_factory=os.getcwd)
    ssh: Sequence[str] = ("ssh",)
    extra_env: Dict[str, str] = field(default_factory=dict)   # every process gets these (forwarded_env)
    timeout: float = 0.0          # whole-job wall-clock limit in seconds (0 = none)
    grace: float = 30.0           # after a stopping signal: time to checkpoint and exit before SIGKILL
    finish_timeout: float = 120.0  # workers leave together (ps-lite's exit barrier); one alone this long = stuck
    server_wait: float = 30.0     # after the workers: time for the scheduler and servers to exit before they are killed
    procs: List[subprocess.Popen] = field(default_factory=list)
    _signals: List[int] = field(default_factory=list)

    def log(self, msg: str) -> None:
        print(f"nmt-launch: {msg}", file=sys.stderr, flush=True)

    def local_env(self, spec: ProcSpec) -> Dict[str, str]:
        """What a process on this machine gets on top of the launcher's environment: --env and the job's variables."""
        return {**{k: v for k, v in self.extra_env.items() if os.environ.get(k) != v}, **spec.env}

    def argv(self, spec: ProcSpec) -> List[str]:
        if spec.host is None:
            return list(spec.argv)
        return ssh_argv(spec, self.workdir, self.ssh, self.extra_env, kill_after=self.grace)

    def start(self) -> None:
        # ps-lite takes PORT as the node's own port, and a DMLC_RANK as a restarted node's
        base = {k: v for k, v in os.environ.items() if k not in ("PORT", "DMLC_RANK")}
        if "PORT" in os.environ:
            self.log("PORT is set here; the job's processes do not get it (ps-lite would take it as their own port)")
        for spec in self.specs:
            env = dict(base, **self.local_env(spec)) if spec.host is None else base
            argv = self.argv(spec)
            try:
                p = subprocess.Popen(argv, env=env, cwd=self.workdir, start_new_session=True,
                                     stdin=subprocess.PIPE if spec.host else subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
            except OSError as e:
                raise LaunchError(f"cannot start {spec.label}: {e.filename or argv[0]}: {e.strerror}") from None
            self.procs.append(p)
            what = shlex.join(spec.argv) if spec.role == "worker" else "python -c 'import mxnet'"
            self.log(f"started {spec.label} (pid {p.pid}): {what}")

    def run(self) -> int:
        """Start, watch, clean up; the exit code is 0, the failed process's code, or 128 + the stopping signal."""
        def on_signal(signum, _frame):
            self._signals.append(signum)
            leave_hung_up_terminal(signum)
        old = {s: signal.signal(s, on_signal) for s in stopping_signals()}
        try:
            self.start()
            return self.watch()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.kill_all()

    def watch(self) -> int:
        t0 = time.monotonic()
        first_done = stop_deadline = left_at = None   # the first worker finished; a forwarded signal kills; one left
        workers = [i for i, s in enumerate(self.specs) if s.role == "worker"]
        timed_out = False   # --timeout stops the job as a SIGTERM to the launcher does, with --grace to checkpoint
        while True:
            codes = [p.poll() for p in self.procs]
            now = time.monotonic()
            if self._signals or timed_out:
                name = f"--timeout {self.timeout:.0f} s" if timed_out else signal.Signals(self._signals[0]).name
                again = len(self._signals) > (0 if timed_out else 1)   # a signal after it: kill at once
                if stop_deadline is None:
                    self.log(f"{name}{' reached' if timed_out else ''}: asking the workers to checkpoint and stop "
                             f"({'Ctrl-C' if timed_out else 'again'} to kill at once)")
                    stop_deadline = now + self.grace
                    for i in workers:
                        self.ask_to_stop(i)
                failed = [i for i in workers if codes[i] not in (None, 0, *_STOPPED)]   # (its error, not the stop)
                if failed:   # the others wait for it in vain: named now, not as "still running" after the grace
                    return self.failed(failed[0], f" as the job stopped ({name})")
                done = all(codes[i] is not None for i in workers)
                left = [i for i in workers if codes[i] in _STOPPED]   # one that left by the stop ends every collective:
                left_at = left_at or (now if left else None)          # the others, waiting in one, never return
                stopped = 124 if timed_out else 128 + self._signals[0]
                if not done and not again:
                    late = ", ".join(self.specs[i].label for i in workers if codes[i] is None)
                    if left and left_at + LEFT_WAIT < now < stop_deadline:
                        self.log(f"{late} still running {LEFT_WAIT:g} s after {self.specs[left[0]].label} left as "
                                 f"{name} stopped the job: killed (waiting for it in a collective: a stop before "
                                 "training, with nothing to save)")
                        return stopped
                    if now > stop_deadline:
                        self.log(f"{late} still running --grace {self.grace:g} s after {name}: killed (the checkpoint "
                                 "of the stop may be missing: --resume takes the last one saved)")
                if done or again or now > stop_deadline:
                    return stopped
            else:
                failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    return self.failed(failed[0])
                if all(codes[i] == 0 for i in workers):
                    return self.wait_servers()
                if first_done is None and any(codes[i] == 0 for i in workers):
                    first_done = now
                if first_done is not None and now - first_done > self.finish_timeout:
                    late = [self.specs[i].label for i in workers if codes[i] is None]
                    self.log(f"{', '.join(late)} still running {self.finish_timeout:.0f} s after another worker "
                             "finished: stuck (did every worker run with --kvstore dist_sync and the same data?)")
                    return 1
                timed_out = bool(self.timeout) and now - t0 > self.timeout
                if timed_out:
                    continue
            time.sleep(0.1)

    def failed(self, i: int, when: str = "") -> int:
        """Process i exited with an error: name it and how (`when` is added), and return the launcher's exit code,
        the process's code, or 128 + S for a process killed by signal S (as a shell reports it)."""
        code, running = self.procs[i].returncode, sum(p.poll() is None for p in self.procs)
        rest = f"; stopping the other {running} processes of the job" if running else ""
        self.log(f"{self.specs[i].label} (pid {self.procs[i].pid}) {describe_exit(code)}{when}{rest}")
        return 128 - code if code < 0 else code

    def wait_servers(self) -> int:
        """Workers are done: scheduler and servers exit by themselves, or get killed after `server_wait` seconds
        (ps-lite's may linger: no failure). One that exits with an error fails the job: its exit code."""
        deadline = time.monotonic() + self.server_wait
        while True:
            codes = [p.poll() for p in self.procs]
            failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                return self.failed(failed[0], " after all workers finished")
            if None not in codes or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for spec, code in zip(self.specs, codes):
            if code is None:
                self.log(f"{spec.label} still running {self.server_wait:.0f} s after all workers finished; killing it")
        return 0

    def ask_to_stop(self, i: int) -> None:
        """SIGTERM to worker i. A remote one gets it from its script when its ssh stdin closes; the connection stays
        up until the worker has saved and exited, so its exit code still arrives."""
        if self.specs[i].host is None:
            self.signal(i, signal.SIGTERM)
        elif self.procs[i].stdin:
            self.procs[i].stdin.close()

    def signal(self, i: int, sig: int) -> None:
        """Signal the process group of process i (a shell command's children too). For a remote process that is the
        local ssh client: the connection ends, and the remote script passes a SIGTERM on."""
        try:
            os.killpg(self.procs[i].pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self, patience: float = 3.0) -> None:
        """SIGTERM, then SIGKILL after `patience` seconds, to every process group still there; reap them all."""
        for i, p in enumerate(self.procs):
            if p.poll() is None:
                self.signal(i, signal.SIGTERM)
        deadline = time.monotonic() + patience
        while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        for i, p in enumerate(self.procs):
            self.signal(i, signal.SIGKILL)     # also members of a group whose leader already exited
            p.wait()
            if p.stdin:
                p.stdin.close()
