"""Training on several machines with MXNet's parameter-server kvstore (`--kvstore dist_sync`).

A job is one scheduler, S servers and N workers, each a process that learns its role from DMLC_* environment
variables (scheduler and servers block inside `import mxnet` and exit when the workers are done). This module is
the launcher `main` (`nmt-launch`, scripts/launch.py): it starts the processes here or over ssh (-H hostfile),
watches them, and ends the whole job with a message naming the process when any of them fails. The workers' side
(joining the job, and what they do together besides the gradient all-reduce) is `nmt.workers`.

MXNet's own tools/launch.py is not in the wheel and `dmlc_tracker` neither quotes arguments nor notices a dead
process, hence this small launcher on `subprocess`.
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from nmt.cli import nonempty, number


# -- the launcher: what to start where ----------------------------------------------------------------------------
class LaunchError(RuntimeError):
    """Bad launcher input (host file, counts, command) or a failed job; the message names what and where."""


@dataclass
class Host:
    address: str                 # what ssh connects to ("user@node1" or "node1")
    ssh_port: Optional[int] = None

    @property
    def name(self) -> str:       # what the other nodes connect to
        return self.address.rsplit("@", 1)[-1]


@dataclass
class ProcSpec:
    role: str                    # scheduler, server or worker
    index: int                   # launch index within the role (not the kvstore rank, which the scheduler assigns)
    argv: List[str]
    env: Dict[str, str]          # job variables for this process (added to the inherited environment)
    host: Optional[Host] = None  # None: on this machine

    @property
    def label(self) -> str:
        where = f" on {self.host.address}" if self.host else ""
        return ("scheduler" if self.role == "scheduler" else f"{self.role} {self.index}") + where


def read_hostfile(path: Path) -> List[Host]:
    """Hosts, one per line: `host`, `user@host` or either with `:sshport`; blank lines and `#` comments skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise LaunchError(f"-H {path}: cannot read the host file ({e})") from None
    hosts = []
    for no, line in enumerate(lines, 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        address, _, port = entry.partition(":")
        if " " in entry or "\t" in entry or not address or (port and not (port.isdigit() and 0 < int(port) < 65536)):
            raise LaunchError(f"{path}:{no}: {line.strip()!r} is not `host`, `user@host` or `host:sshport`")
        hosts.append(Host(address, int(port) if port else None))
    if not hosts:
        raise LaunchError(f"-H {path}: no host in the host file")
    return hosts


def plan_job(command: Sequence[str], num_workers: int, num_servers: int, hosts: Optional[List[Host]] = None,
             scheduler_host: str = "127.0.0.1", port: int = 9091, python: str = sys.executable) -> List[ProcSpec]:
    """The processes of a job: the scheduler here, servers and workers here (no `hosts`) or round-robin over
    `hosts`. Servers and the scheduler run `python -c "import mxnet"`; workers run `command`."""
    if num_workers < 1 or num_servers < 1:
        raise LaunchError(f"need at least one worker and one server, got -n {num_workers} -s {num_servers}")
    if not command:
        raise LaunchError("no worker command: put it after `--`, e.g. -- python scripts/train.py --kvstore dist_sync")
    common = {"DMLC_PS_ROOT_URI": scheduler_host, "DMLC_PS_ROOT_PORT": str(port),
              "DMLC_NUM_SERVER": str(num_servers), "DMLC_NUM_WORKER": str(num_workers)}
    server_argv = [python, "-c", "import mxnet"]
    specs = [ProcSpec("scheduler", 0, server_argv, dict(common, DMLC_ROLE="scheduler"))]
    for role, count, argv in (("server", num_servers, server_argv), ("worker", num_workers, list(command))):
        for i in range(count):
            host = hosts[i % len(hosts)] if hosts else None
            # the address the other nodes reach this one at; without it ps-lite picks the first non-loopback NIC
            env = dict(common, DMLC_ROLE=role, DMLC_NODE_HOST=host.name if host else scheduler_host)
            specs.append(ProcSpec(role, i, argv, env, host))
    return specs


FORWARDED_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONPATH", "DMLC_INTERFACE")
FORWARDED_PREFIXES = ("MXNET_", "PS_", "NMT_")


def forwarded_env(extra: Sequence[str] = (), environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Variables of this environment that remote processes get too: FORWARDED_ENV, FORWARDED_PREFIXES and
    `extra` entries (`NAME` = its value here, `NAME=VALUE` = that value)."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if k in FORWARDED_ENV or k.startswith(FORWARDED_PREFIXES)}
    for item in extra:
        name, eq, value = item.partition("=")
        if not name.isidentifier():
            raise LaunchError(f"--env {item!r}: expected NAME or NAME=VALUE")
        if eq or name in environ:
            env[name] = value if eq else environ[name]
    return env


def remote_script(argv: Sequence[str], env: Dict[str, str], workdir: str, kill_after: float = 30.0) -> str:
    """POSIX sh script run on a remote host: cd, export, run `argv`, exit with its code. When the ssh connection
    ends (the launcher stops the job or is gone) the command gets SIGTERM, then SIGKILL `kill_after` s later."""
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return "\n".join([
        "exec 3<&0",    # background jobs get /dev/null as stdin: keep the ssh channel's stdin as fd 3
        f"cd {shlex.quote(workdir)} || exit 1",
        "unset PORT DMLC_RANK",   # ps-lite takes them as this node's port and a restarted node's rank
        f"export {exports}" if exports else ":",
        f"{shlex.join(argv)} 3<&- &", "pid=$!",
        f"{{ cat >/dev/null; kill -TERM $pid; sleep {kill_after:g}; kill -KILL $pid; }} <&3 >/dev/null 2>&1 &",
        "watcher=$!",
        "wait $pid", "rc=$?",
        "kill $watcher 2>/dev/null",   # the command is done: its pid must not be signalled any more
        "exit $rc",
    ])


def ssh_argv(spec: ProcSpec, workdir: str, ssh: Sequence[str] = ("ssh",), extra_env: Optional[Dict] = None,
             kill_after: float = 30.0) -> List[str]:
    """The local command that starts `spec` on its host. `sh -c` makes the script independent of the login shell;
    ServerAlive* make ssh exit (and the launcher notice) when the host stops answering for about a minute."""
    opts = ["-o", "BatchMode=yes", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
    port = ["-p", str(spec.host.ssh_port)] if spec.host.ssh_port else []
    script = remote_script(spec.argv, {**(extra_env or {}), **spec.env}, workdir, kill_after)
    return [*ssh, *opts, *port, spec.host.address, "sh -c " + shlex.quote(script)]


# -- the launcher: running and watching ----------------------------------------------------------------------------
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


@dataclass
class Job:
    """Starts the processes of `specs`, watches them, and ends the job as soon as one of them fails."""
    specs: List[ProcSpec]
    workdir: str = field(default_factory=os.getcwd)
    ssh: Sequence[str] = ("ssh",)
    extra_env: Dict[str, str] = field(default_factory=dict)   # every process gets these (forwarded_env)
    timeout: float = 0.0          # whole-job wall-clock limit in seconds (0 = none)
    grace: float = 30.0           # after a forwarded SIGINT/SIGTERM: time to checkpoint and exit before SIGKILL
    finish_timeout: float = 120.0  # workers leave together (ps-lite's exit barrier); one alone this long = stuck
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
        old = {s: signal.signal(s, lambda signum, _frame: self._signals.append(signum))
               for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
            return self.watch()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.kill_all()

    def watch(self) -> int:
        t0, first_done, stop_deadline = time.monotonic(), None, None
        workers = [i for i, s in enumerate(self.specs) if s.role == "worker"]
        while True:
            codes, now = [p.poll() for p in self.procs], time.monotonic()
            if self._signals:
                name = signal.Signals(self._signals[0]).name
                if stop_deadline is None:
                    self.log(f"{name}: asking the workers to checkpoint and stop (again to kill at once)")
                    stop_deadline = now + self.grace
                    for i in workers:
                        self.ask_to_stop(i)
                if all(codes[i] is not None for i in workers) or len(self._signals) > 1 or now > stop_deadline:
                    return 128 + self._signals[0]
            else:
                failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    i = failed[0]
                    self.log(f"{self.specs[i].label} (pid {self.procs[i].pid}) {describe_exit(codes[i])}; "
                             f"stopping the other {sum(c is None for c in codes)} processes of the job")
                    return 128 - codes[i] if codes[i] < 0 else codes[i]   # killed by signal S: 128 + S
                if all(codes[i] == 0 for i in workers):
                    self.wait_servers()
                    return 0
                if first_done is None and any(codes[i] == 0 for i in workers):
                    first_done = now
                if first_done is not None and now - first_done > self.finish_timeout:
                    late = [self.specs[i].label for i in workers if codes[i] is None]
                    self.log(f"{', '.join(late)} still running {self.finish_timeout:.0f} s after another worker "
                             "finished: stuck (did every worker run with --kvstore dist_sync and the same data?)")
                    return 1
                if self.timeout and now - t0 > self.timeout:
                    self.log(f"--timeout {self.timeout:.0f} s reached; stopping the job")
                    return 124
            time.sleep(0.1)

    def wait_servers(self, seconds: float = 30.0) -> None:
        """Workers are done: scheduler and servers exit by themselves, or get killed."""
        deadline = time.monotonic() + seconds
        while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        for spec, p in zip(self.specs, self.procs):
            if p.poll() is None:
                self.log(f"{spec.label} still running {seconds:.0f} s after all workers finished; killing it")

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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nmt-launch", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s -n WORKERS [-s SERVERS] [-H HOSTFILE] [options] -- COMMAND ...",
        description="Start a distributed MXNet job (scheduler, servers, workers) and watch it: when any process "
                    "fails, all are stopped and the failing one is named.",
        epilog="Examples:\n"
               "  %(prog)s -n 2 -s 1 -- python scripts/train.py --kvstore dist_sync --model-dir models/x\n"
               "  %(prog)s -n 2 -s 2 -H hosts -- python scripts/train.py --gpus 4 --kvstore dist_device_sync ...\n")
    p.add_argument("-n", "--num-workers", type=number(int, 1), required=True, help="worker processes (one per "
                   "machine on GPUs)")
    p.add_argument("-s", "--num-servers", type=number(int, 1), help="server processes (default: 1, or one per host "
                   "with -H)")
    p.add_argument("-H", "--hostfile", type=nonempty(Path), help="run servers and workers over ssh, round-robin on "
                   "these hosts (one per line: host, user@host, host:sshport); without it everything runs here")
    p.add_argument("--scheduler-host", type=nonempty(), help="address of this machine that the hosts reach "
                   "(default: 127.0.0.1, or the address of the route to the first host)")
    p.add_argument("--port", type=number(int, 1, 65535), help="scheduler port (default: a free one)")
    p.add_argument("--python", default=sys.executable, type=nonempty(),
                   help="interpreter for scheduler and servers, the same path on every host (default: %(default)s)")
    p.add_argument("--ssh", default="ssh", type=nonempty(ssh_command),
                   help="ssh command, split into words as the shell would, e.g. 'ssh -i ~/.ssh/key' (default: ssh)")
    p.add_argument("--workdir", default=os.getcwd(), type=nonempty(), help="directory the commands run in, the same "
                   "path here (the scheduler runs in it) and on every host (default: the current one)")
    p.add_argument("--env", action="append", default=[], metavar="NAME[=VALUE]", help="set this variable in every "
                   "process of the job (repeatable; NAME alone: its value here, for remote processes); remote ones "
                   f"always get {', '.join(FORWARDED_ENV)} and {'*, '.join(FORWARDED_PREFIXES)}*")
    p.add_argument("--timeout", type=number(float, 0), default=0.0, help="time limit of the job in seconds (0 = none)")
    p.add_argument("--grace", type=number(float, 0), default=30.0, help="seconds for workers to checkpoint and "
                   "exit after Ctrl-C/SIGTERM before they are killed (default: %(default)s)")
    p.add_argument("--finish-timeout", type=number(float, 0, low_open=True), default=120.0, help="a worker still "
                   "running this long after another one finished is taken as stuck (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    return p


def ssh_command(text: str) -> List[str]:
    """An argparse type: --ssh split into words as the shell would; argparse names the flag in its error."""
    try:
        return shlex.split(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}; balance the quotes as in a shell") from None


def scheduler_address(args: argparse.Namespace, hosts: Optional[List[Host]]) -> Tuple[str, int]:
    """The scheduler's address and port, checked: it runs here, where the launcher runs, the hosts must reach it, and
    it must be able to listen there (bind and close a socket as ps-lite will, SO_REUSEADDR); no --port: a free one."""
    sched, port, loopback = args.scheduler_host or "127.0.0.1", args.port, ("127.", "localhost")
    if hosts and not args.scheduler_host:   # this machine's address on the route to the first host
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((hosts[0].name, 9))    # a UDP connect sends nothing
                sched = s.getsockname()[0]
        except OSError as e:
            raise LaunchError(f"-H {args.hostfile}: no route to {hosts[0].name} ({e.strerror}); check the host "
                              "name, or give --scheduler-host") from None
    remote = [h.name for h in hosts or [] if not h.name.startswith(loopback)]
    if sched.startswith(loopback) and remote:
        raise LaunchError(f"--scheduler-host {sched} is a loopback address, so {remote[0]} cannot reach the "
                          "scheduler; give this machine's address on the network the hosts share")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(bool(port)))
        try:
            s.bind((sched, port or 0))
        except OSError as e:
            if port and e.errno in (errno.EADDRINUSE, errno.EACCES):
                flags = f"--scheduler-host {sched} --port {port}" if args.scheduler_host else f"--port {port}"
                raise LaunchError(f"{flags}: the scheduler cannot listen on {sched}:{port} ({e.strerror}); "
                                  "give another --port, or leave it out to take a free one") from None
            raise LaunchError(f"--scheduler-host {sched}: not an address of this machine ({e}); the scheduler "
                              "runs where the launcher runs") from None
        return sched, s.getsockname()[1]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`nmt-launch [options] -- COMMAND ...`; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, command = build_parser().parse_args(argv[:cut]), argv[cut + 1:]
    try:
        hosts = read_hostfile(args.hostfile) if args.hostfile else None
        extra = forwarded_env(args.env)
        if not os.path.isdir(args.workdir):    # Popen's error for a missing cwd would name the program
            raise LaunchError(f"--workdir {args.workdir}: not a directory on this machine, where the scheduler "
                              "(without -H, every process of the job) runs in it")
        sched, port = scheduler_address(args, hosts)
        specs = plan_job(command, args.num_workers, args.num_servers or (len(hosts) if hosts else 1), hosts,
                         sched, port, args.python)
        job = Job(specs, workdir=args.workdir, ssh=args.ssh, extra_env=extra, timeout=args.timeout,
                  grace=args.grace, finish_timeout=args.finish_timeout)
        if not args.dry_run:
            return job.run()
        for spec in specs:
            env = "" if spec.host else shlex.join(f"{k}={v}" for k, v in sorted(job.local_env(spec).items())) + " "
            print(f"# {spec.label}\n{env}{shlex.join(job.argv(spec))}")
        return 0
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
