"""The `nmt-launch` command (scripts/launch.py): its flags, the scheduler's address, and a job planned by
`nmt.distributed` and run by `nmt.job` (or, with --dry-run, its commands printed)."""
from __future__ import annotations

import argparse
import errno
import os
import shlex
import socket
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from nmt.commands import (CommandParser, nonempty, number, standard_streams, threads_variable, usable_streams,
                          with_version)
from nmt.config import ConfigError
from nmt.distributed import (FORWARDED_ENV, FORWARDED_PREFIXES, Host, LaunchError, forwarded_env, ipv4, plan_job,
                             read_hostfile)
from nmt.job import Job
from nmt.storage import StorageError


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="nmt-launch", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s -n WORKERS [-s SERVERS] [-H HOSTFILE] [options] -- COMMAND ...",
        description="Start a distributed MXNet job (scheduler, servers, workers) and watch it: when any process "
                    "fails, all are stopped and the failing one is named.",
        epilog="Examples:\n"
               "  %(prog)s -n 2 -s 1 -- nmt-train --kvstore dist_sync --model-dir models/x\n"
               "  %(prog)s -n 2 -s 2 -H hosts -- nmt-train --gpus 4 --kvstore dist_device_sync ...\n")
    p.add_argument("-n", "--num-workers", type=number(int, 1, 1024), required=True, help="worker processes (one per "
                   "machine on GPUs; at most 1024)")
    p.add_argument("-s", "--num-servers", type=number(int, 1, 1024), help="server processes (default: 1, or one per "
                   "host with -H; at most 1024)")
    p.add_argument("-H", "--hostfile", type=nonempty(Path), help="run servers and workers over ssh, round-robin on "
                   "these hosts (one per line: host, user@host, host:sshport); without it everything runs here")
    p.add_argument("--scheduler-host", type=nonempty(), help="address of this machine that the hosts reach "
                   "(default: 127.0.0.1, or the address of the route to the first host)")
    p.add_argument("--port", type=number(int, 1, 65535), help="scheduler port (default: a free one)")
    p.add_argument("--python", default=sys.executable, type=nonempty(),
                   help="interpreter for scheduler and servers, the same path on every host (default: %(default)s)")
    p.add_argument("--ssh", type=nonempty(ssh_command), help="with -H: the ssh command, split into words as the "
                   "shell would, e.g. 'ssh -i ~/.ssh/key' (default: ssh)")
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


def scheduler_address(args: argparse.Namespace, hosts: Optional[List[Host]], addresses: Dict[str, str]
                      ) -> Tuple[str, int]:
    """The scheduler's address and port, checked: it runs here, where the launcher runs, the hosts must reach it and
    each other (`addresses`: each host's IPv4 address here), and it must be able to listen there (bind and close a
    socket as ps-lite will, SO_REUSEADDR); no --port: a free one."""
    sched = ipv4(args.scheduler_host, "--scheduler-host") if args.scheduler_host else "127.0.0.1"
    port = args.port
    near = [h.name for h in hosts or [] if addresses[h.name].startswith("127.")]
    remote = [h.name for h in hosts or [] if not addresses[h.name].startswith("127.")]
    if near and remote:   # each process is given its host's address: one of this machine's loopback ones is unreachable
        raise LaunchError(f"-H {args.hostfile}: host {near[0]} is {addresses[near[0]]} here, a loopback address (a "
                          f"machine's own name often is, in /etc/hosts), which {remote[0]} cannot reach; give "
                          f"{near[0]}'s address on the network the hosts share in the host file")
    if hosts and not args.scheduler_host:   # this machine's address on the route to the first host
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((hosts[0].name, 9))    # a UDP connect sends nothing
                sched = s.getsockname()[0]
        except OSError as e:
            raise LaunchError(f"-H {args.hostfile}: no route to {hosts[0].name} ({e.strerror}); check the host "
                              "name, or give --scheduler-host") from None
    if sched.startswith("127.") and remote:
        said = f"--scheduler-host {sched}" if args.scheduler_host else \
            f"{sched}, this machine's address on the route to {hosts[0].name},"
        raise LaunchError(f"{said} is a loopback address, so {remote[0]} cannot reach the scheduler; give "
                          "--scheduler-host, this machine's address on the network the hosts share")
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
    standard_streams()
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    parser = with_version(build_parser())
    args, extra = parser.parse_known_args(argv[:cut])
    if extra and cut == len(argv) and not extra[0].startswith("-"):   # (the usage line showed where it goes)
        own = argv[:-len(extra)] if argv[-len(extra):] == extra else ["-n", str(args.num_workers), "..."]
        parser.error(f"unrecognized arguments: {' '.join(extra)}: is it the worker command? It goes after `--`: "
                     f"nmt-launch {shlex.join([*own, '--', *extra])}")
    if extra:
        parser.error(parser.unrecognized(extra))
    command = argv[cut + 1:]
    try:
        if args.ssh is not None and not args.hostfile:
            raise LaunchError(f"--ssh {shlex.quote(shlex.join(args.ssh))} is used only with -H HOSTFILE (without it "
                              "every process runs on this machine): give -H HOSTFILE too, or leave --ssh out")
        hosts = read_hostfile(args.hostfile) if args.hostfile else None
        extra = forwarded_env(args.env)
        threads_variable(extra.get("OMP_NUM_THREADS", ""))   # (what every process of the job imports MXNet with)
        if not os.path.isdir(args.workdir):    # Popen's error for a missing cwd would name the program
            raise LaunchError(f"--workdir {args.workdir}: not a directory on this machine, where the scheduler "
                              "(without -H, every process of the job) runs in it")
        args.workdir = os.path.abspath(args.workdir)   # (the same path on every host: not the remote login's)
        addresses = {h.name: ipv4(h.name, f"-H {args.hostfile}: host") for h in hosts or []}
        sched, port = scheduler_address(args, hosts, addresses)
        specs = plan_job(command, args.num_workers, args.num_servers or (len(hosts) if hosts else 1), hosts,
                         sched, port, args.python, addresses)
        job = Job(specs, workdir=args.workdir, ssh=args.ssh or ["ssh"], extra_env=extra, timeout=args.timeout,
                  grace=args.grace, finish_timeout=args.finish_timeout)
        if not args.dry_run:
            return job.run()
        from nmt.cli_io import last_lines, reader_gone
        usable_streams(outputs=["-"])   # (the dry run's commands are its output)
        env = {spec.label: "" if spec.host else shlex.join(f"{k}={v}" for k, v in sorted(job.local_env(spec).items()))
               + " " for spec in specs}
        shown = last_lines(f"# {s.label}\n{env[s.label]}{shlex.join(job.argv(s))}" for s in specs)
        return 0 if shown else reader_gone()
    except (LaunchError, StorageError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":   # `python -m nmt.launch`: nmt-launch
    raise SystemExit(main())
