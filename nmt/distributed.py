"""Training on several machines with MXNet's parameter-server kvstore (`--kvstore dist_sync`).

A job is one scheduler, S servers and N workers, each a process that learns its role from DMLC_* environment
variables (scheduler and servers block inside `import mxnet` and exit when the workers are done). This module is
the launcher's plan: what to start where, here or over ssh (-H hostfile), with which environment. `nmt.job` starts
the processes, watches them, and ends the whole job with a message naming the process when any of them fails;
`nmt.launch` is the command line (`nmt-launch`, scripts/launch.py). The workers' side (joining the job, and what
they do together besides the gradient all-reduce) is `nmt.workers`.

MXNet's own tools/launch.py is not in the wheel and `dmlc_tracker` neither quotes arguments nor notices a dead
process, hence this small launcher on `subprocess`.
"""
from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence


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
    """Hosts, one per line: `host`, `user@host` or either with `:sshport`; blank lines and `#` comments skipped. A
    byte-order mark (Windows Notepad's) is no part of the first host: ssh was given it, which no name resolves. UTF-16
    (Notepad's "Unicode"; without its mark, NUL bytes that decode as UTF-8) is named, with the command converting it."""
    from nmt.textfile import iconv_command, wide_encoding
    try:
        data = Path(path).read_bytes()
        wide, sign = wide_encoding(data)
        lines = [] if wide else data.decode("utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise LaunchError(f"-H {path}: cannot read the host file ({e})") from None
    if wide:
        raise LaunchError(f"-H {path}: the host file is {wide} ({sign}), not UTF-8: convert it, "
                          f"`{iconv_command(path, wide, None, into=True)}`")
    hosts = []
    for no, line in enumerate(lines, 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        address, _, port = entry.partition(":")
        if " " in entry or "\t" in entry or not address or (port and not (port.isdecimal() and 0 < int(port) < 65536)):
            raise LaunchError(f"{path}:{no}: {line.strip()!r} is not `host`, `user@host` or `host:sshport`")
        hosts.append(Host(address, int(port) if port else None))
    if not hosts:
        raise LaunchError(f"-H {path}: no host in the host file")
    return hosts


def ipv4(name: str, what: str) -> str:
    """The IPv4 address of host `name`: ps-lite binds to DMLC_NODE_HOST as given (a host name fails: "bind failed")
    and speaks IPv4 only; a LaunchError naming `what` when there is none."""
    import socket
    try:
        return socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0]
    except socket.gaierror as e:
        raise LaunchError(f"{what} {name}: no IPv4 address ({e.strerror}); MXNet's parameter server reaches the "
                          "processes of a job over IPv4 only") from None


# What the scheduler and servers run: `import mxnet` (their role runs inside it), its failure (a broken MXNet) said in
# one line naming the role and the interpreter (--python), as the workers' commands say theirs, not with a traceback
NODE_PROGRAM = ("import os, sys; sys.excepthook = lambda t, e, tb: print(f\"error: {os.getenv('DMLC_ROLE')}: import "
                "mxnet failed in {sys.executable} ({t.__name__}: {str(e).strip().partition(chr(10))[0]})\", "
                "file=sys.stderr); import mxnet")


def plan_job(command: Sequence[str], num_workers: int, num_servers: int, hosts: Optional[List[Host]] = None,
             scheduler_host: str = "127.0.0.1", port: int = 9091, python: str = sys.executable,
             addresses: Optional[Dict[str, str]] = None) -> List[ProcSpec]:
    """The processes of a job: the scheduler here, servers and workers here (no `hosts`) or round-robin over
    `hosts`. Servers and the scheduler run `import mxnet` (NODE_PROGRAM); workers run `command`. `addresses`: the
    hosts' IPv4 addresses by name (`ipv4`), which the processes bind to (ssh is given the names)."""
    if num_workers < 1 or num_servers < 1:
        raise LaunchError(f"need at least one worker and one server, got -n {num_workers} -s {num_servers}")
    if not command:
        raise LaunchError("no worker command: put it after `--`, e.g. -- nmt-train --kvstore dist_sync")
    common = {"DMLC_PS_ROOT_URI": scheduler_host, "DMLC_PS_ROOT_PORT": str(port),
              "DMLC_NUM_SERVER": str(num_servers), "DMLC_NUM_WORKER": str(num_workers)}
    server_argv = [python, "-c", NODE_PROGRAM]
    specs = [ProcSpec("scheduler", 0, server_argv, dict(common, DMLC_ROLE="scheduler"))]
    for role, count, argv in (("server", num_servers, server_argv), ("worker", num_workers, list(command))):
        for i in range(count):
            host = hosts[i % len(hosts)] if hosts else None
            # the address the other nodes reach this one at; without it ps-lite picks the first non-loopback NIC
            node = (addresses or {}).get(host.name, host.name) if host else scheduler_host
            env = dict(common, DMLC_ROLE=role, DMLC_NODE_HOST=node)
            specs.append(ProcSpec(role, i, argv, env, host))
    return specs


FORWARDED_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONPATH", "DMLC_INTERFACE")
FORWARDED_PREFIXES = ("MXNET_", "PS_", "NMT_")


def refused_env(name: str) -> Optional[str]:
    """Why --env may not set `name` (None: it may): ps-lite reads these, and the launcher sets them per process."""
    if name == "PORT":
        return ("ps-lite takes PORT as a process's own port, the same one for every process of the job; leave it out "
                "(each process picks a free port, and --port sets the scheduler's)")
    if name.startswith("DMLC_") and name not in FORWARDED_ENV:   # DMLC_INTERFACE is the job's to choose
        return ("the launcher sets the job's DMLC_* variables for each process itself; leave it out (-n, -s, "
                "--scheduler-host and --port set them)")
    return None


def forwarded_env(extra: Sequence[str] = (), environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Variables of this environment that remote processes get too: FORWARDED_ENV, FORWARDED_PREFIXES and
    `extra` entries (`NAME` = its value here, `NAME=VALUE` = that value; not PORT or DMLC_*, see refused_env)."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if k in FORWARDED_ENV or k.startswith(FORWARDED_PREFIXES)}
    for item in extra:
        name, eq, value = item.partition("=")
        if not name.isidentifier():
            raise LaunchError(f"--env {item!r}: expected NAME or NAME=VALUE")
        why = refused_env(name)
        if why:
            raise LaunchError(f"--env {item!r}: {why}")
        if not eq and name not in environ:   # (a typo in the name, or a variable meant to be set first)
            raise LaunchError(f"--env {name}: {name} is not set here, which has its value sent to every process; "
                              f"set it, or give --env {name}=VALUE")
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
