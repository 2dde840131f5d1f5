"""Distributed training: the launcher's plans and ssh commands (unit tests), its watchdog on stand-in processes,
and real `dist_sync` jobs on loopback (1 scheduler + servers + 2 workers): same parameters as one process, a
killed worker ends the job with a clear error, and `--resume` continues it (servers and workers started through
the ssh code path, with a stand-in `ssh` that runs the remote script here in a clean environment)."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Tuple

import numpy as np
import pytest

from nmt import checkpoint as ckpt
from nmt import distributed as dist
from nmt import launch as launcher
from nmt import workers
from nmt.cli import build_train_parser, config_from_args, train_main, training_run
from nmt.config import Config, ConfigError
from nmt.distributed import Host, LaunchError, ProcSpec
from nmt.job import Job
from nmt.resume import rank0_settings
from nmt.train import create_trainer
from nmt.workers import WorkerGroup, _pack, _unpack
from tests.synth import assert_same_params, load_params, params_of, tiny_config, tiny_flags, write_task

REPO = Path(__file__).resolve().parents[2]

PY = sys.executable
ENV = dict(os.environ, OMP_NUM_THREADS="1")


# -- plans, host files, ssh commands -------------------------------------------------------------------------------
def test_hostfile_forms_and_errors(write_file):
    f = write_file("hosts", ["# two machines", "", "node1", "alice@node2:2222  # comment", "10.0.0.3"])
    hosts = dist.read_hostfile(f)
    assert [(h.address, h.name, h.ssh_port) for h in hosts] == [
        ("node1", "node1", None), ("alice@node2", "node2", 2222), ("10.0.0.3", "10.0.0.3", None)]
    for bad, line in ((["node1", "node2 slots=4"], 2), (["node1:ssh"], 1), (["n:0"], 1)):
        with pytest.raises(LaunchError, match=rf"hosts:{line}: .* is not `host`"):
            dist.read_hostfile(write_file("hosts", bad))
    with pytest.raises(LaunchError, match="no host"):
        dist.read_hostfile(write_file("hosts", ["# nothing"]))
    with pytest.raises(LaunchError, match="cannot read"):
        dist.read_hostfile(f.parent / "missing")


def test_plan_places_servers_and_workers_round_robin():
    hosts = [Host("alice@node1"), Host("node2", 2222)]
    specs = dist.plan_job(["python", "train.py"], 3, 2, hosts, "10.0.0.9", 9000, "/venv/bin/python")
    assert [(s.label, s.env["DMLC_ROLE"]) for s in specs] == [
        ("scheduler", "scheduler"), ("server 0 on alice@node1", "server"), ("server 1 on node2", "server"),
        ("worker 0 on alice@node1", "worker"), ("worker 1 on node2", "worker"), ("worker 2 on alice@node1", "worker")]
    assert specs[0].host is None and specs[0].argv == ["/venv/bin/python", "-c", dist.NODE_PROGRAM]
    assert specs[3].argv == ["python", "train.py"]
    for s in specs:
        assert s.env["DMLC_PS_ROOT_URI"] == "10.0.0.9" and s.env["DMLC_PS_ROOT_PORT"] == "9000"
        assert s.env["DMLC_NUM_SERVER"] == "2" and s.env["DMLC_NUM_WORKER"] == "3"
    assert specs[4].env["DMLC_NODE_HOST"] == "node2"   # without user@: what the other nodes connect to
    local = dist.plan_job(["x"], 2, 1)
    assert all(s.host is None and s.env.get("DMLC_NODE_HOST", "127.0.0.1") == "127.0.0.1" for s in local)
    with pytest.raises(LaunchError, match="at least one worker"):
        dist.plan_job(["x"], 0, 1)
    with pytest.raises(LaunchError, match="after `--`"):
        dist.plan_job([], 2, 1)


def test_ssh_command_is_exact():
    spec = dist.plan_job(["python", "scripts/train.py", "--model-dir", "my models/x"], 2, 1,
                         [Host("alice@node2", 2222)], "10.0.0.9", 9000)[2]
    argv = dist.ssh_argv(spec, "/home/alice/nmt", ["ssh", "-i", "key"], {"OMP_NUM_THREADS": "4"}, kill_after=20)
    assert argv[:3] == ["ssh", "-i", "key"]
    assert argv[3:-2] == ["-o", "BatchMode=yes", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4",
                          "-p", "2222"]
    assert argv[-2] == "alice@node2"
    sh, dash_c, script = shlex.split(argv[-1])
    assert (sh, dash_c) == ("sh", "-c")
    assert script.splitlines() == [
        "exec 3<&0", "cd /home/alice/nmt || exit 1", "unset PORT DMLC_RANK",
        "export DMLC_NODE_HOST=node2 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 DMLC_PS_ROOT_PORT=9000 "
        "DMLC_PS_ROOT_URI=10.0.0.9 DMLC_ROLE=worker OMP_NUM_THREADS=4",
        "python scripts/train.py --model-dir 'my models/x' 3<&- &", "pid=$!",
        "{ cat >/dev/null; kill -TERM $pid; sleep 20; kill -KILL $pid; } <&3 >/dev/null 2>&1 &",
        "watcher=$!", "wait $pid", "rc=$?", "kill $watcher 2>/dev/null", "exit $rc"]


def test_remote_script_passes_exit_code_and_stops_when_the_connection_ends(tmp_path):
    script = dist.remote_script(["sh", "-c", 'echo "$FOO" > out; exit 7'], {"FOO": "a 'b'"}, str(tmp_path))
    p = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE)   # stdin open: the connection is up
    try:
        assert p.wait(timeout=10) == 7
    finally:
        p.kill()
        p.stdin.close()
    assert (tmp_path / "out").read_text() == "a 'b'\n"
    trap = ("import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: print('TERM', flush=True))\n"
            "print('READY', flush=True)\ntime.sleep(60)")
    script = dist.remote_script([PY, "-c", trap], {}, str(tmp_path), kill_after=1)
    p = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "READY\n"   # the handler is in place (a loaded machine can take seconds)
        p.stdin.close()                       # what the remote side sees when ssh ends
        p.wait(timeout=15)
        out = p.stdout.read()
    finally:
        p.kill()
        p.stdout.close()
    assert out == "TERM\n" and p.returncode == 128 + signal.SIGKILL   # SIGTERM first, SIGKILL after kill_after


def test_forwarded_environment():
    env = {"OMP_NUM_THREADS": "2", "MXNET_ENGINE_TYPE": "X", "PS_VERBOSE": "1", "HOME": "/h", "SECRET": "s"}
    assert dist.forwarded_env(["HOME", "A=1 2"], env) == {
        "OMP_NUM_THREADS": "2", "MXNET_ENGINE_TYPE": "X", "PS_VERBOSE": "1", "HOME": "/h", "A": "1 2"}
    with pytest.raises(LaunchError, match="--env '1A'"):
        dist.forwarded_env(["1A"], env)
    # a name not set here (a typo of one) was dropped without a word
    with pytest.raises(LaunchError, match=r"^--env UNSET: UNSET is not set here.*give --env UNSET=VALUE"):
        dist.forwarded_env(["HOME", "UNSET"], env)


def test_main_dry_run_and_input_errors(write_file, capsys):
    hosts = write_file("hosts", ["127.0.0.1", "127.0.0.1:2222"])
    with socket.socket() as s:     # a port free now: a dry run checks that the scheduler could listen there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert launcher.main(["-n", "2", "-H", str(hosts), "--port", str(port), "--dry-run", "--", "python", "t.py"]) == 0
    out = capsys.readouterr().out
    assert out.count("# server") == 2 and out.count("# worker") == 2 and "DMLC_ROLE=scheduler" in out
    assert "-p 2222 127.0.0.1" in out and f"DMLC_PS_ROOT_PORT={port}" in out
    here = write_file("sub/.keep", "").parent   # a relative --workdir: sent to the hosts as this machine's path (the
    assert launcher.main(["-n", "2", "-H", str(hosts), "--port", str(port), "--workdir", os.path.relpath(here),
                          "--dry-run", "--", "python", "t.py"]) == 0   # remote shells start in their login's)
    assert f"cd {here}" in capsys.readouterr().out
    assert launcher.main(["-n", "2"]) == 2
    assert "after `--`" in capsys.readouterr().err
    remote = write_file("remote", ["192.0.2.7"])   # (another machine's address: TEST-NET-1)
    assert launcher.main(["-n", "1", "-H", str(remote), "--scheduler-host", "127.0.0.1", "--", "x"]) == 2
    assert "--scheduler-host 127.0.0.1 is a loopback address, so 192.0.2.7 cannot reach the scheduler" in \
        capsys.readouterr().err
    # a host named as this machine is in /etc/hosts (127.0.1.1 on Debian) beside another: its processes would be
    # given that address, which the other's cannot reach (the error blamed a --scheduler-host never given)
    mixed = write_file("mixed", ["localhost", "192.0.2.7"])
    for flags in ([], ["--scheduler-host", "127.0.0.1"]):
        assert launcher.main(["-n", "2", "-H", str(mixed), *flags, "--dry-run", "--", "x"]) == 2
        assert (f"-H {mixed}: host localhost is 127.0.0.1 here, a loopback address (a machine's own name often is, in "
                "/etc/hosts), which 192.0.2.7 cannot reach") in capsys.readouterr().err


@pytest.mark.parametrize("flags, says", [
    (["-n", "0"], "argument -n/--num-workers: must be >= 1 and <= 1024 (got 0)"),
    (["-n", "1", "-s", "0"], "argument -s/--num-servers: must be >= 1 and <= 1024 (got 0)"),
    (["-n", "1", "--port", "99999"], "argument --port: must be >= 1 and <= 65535 (got 99999)"),
    (["-n", "1", "--grace", "-1"], "argument --grace: must be >= 0 (got -1)"),
    (["-n", "1", "--finish-timeout", "0"], "argument --finish-timeout: must be > 0 (got 0)"),
    (["-n", "1", "--timeout", "nan"], "argument --timeout: 'nan' is not a finite number"),
])
def test_launcher_flags_out_of_range_are_refused(capsys, flags, says):
    with pytest.raises(SystemExit) as exit_:
        launcher.main([*flags, "--", "python", "t.py"])
    assert exit_.value.code == 2 and says in capsys.readouterr().err


# -- inside a worker, without a job --------------------------------------------------------------------------------
def test_kvstore_choice_errors(monkeypatch):
    for v in workers.JOB_ENV:
        monkeypatch.delenv(v, raising=False)
    assert workers.create_kvstore("local") == "local"
    with pytest.raises(ConfigError, match=r"DMLC_ROLE.*not set.*nmt-launch -n 2 -s 1 -- nmt-train"):
        workers.create_kvstore("dist_sync")
    with pytest.raises(ConfigError, match="asynchronous updates are not supported"):
        workers.create_kvstore("dist_async")
    monkeypatch.setenv("DMLC_ROLE", "worker")
    for v, value in zip(workers.JOB_ENV[1:], ("127.0.0.1", "9091", "1", "2")):
        monkeypatch.setenv(v, value)
    with pytest.raises(ConfigError, match="whose runs need --kvstore dist_sync .* its kvstore here is 'device'"):
        workers.create_kvstore("device")


def test_a_worker_role_left_without_a_job_is_said_so(monkeypatch):
    """DMLC_ROLE=worker left exported in a shell, without the job's other variables: nmt-train said the process
    "was started by the launcher as a distributed worker" and asked for --kvstore dist_sync, which then failed for
    want of the other variables; neither said to unset DMLC_ROLE."""
    for v in workers.JOB_ENV:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("DMLC_ROLE", "worker")
    monkeypatch.setenv("DMLC_NUM_WORKER", "2")
    with pytest.raises(ConfigError) as e:
        workers.create_kvstore("local")
    assert str(e.value) == ("DMLC_ROLE=worker is set, but not DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER: "
                            "this process is no job's worker (DMLC_ROLE left exported from one, or set by hand?); "
                            "unset DMLC_ROLE to train here alone (nmt-launch sets them all for the workers of a job)")


@pytest.mark.parametrize("role, others", [("wroker", True), ("", True), ("server", False)])
def test_a_role_other_than_worker_is_refused_before_mxnet_loads(tmp_path, task, role, others):
    """Any DMLC_ROLE but "worker" (a typo, or "" set to unset it) made MXNet's import start the command as a server
    or scheduler: with the job's other variables it waited for good, silently; without them, a C++ traceback."""
    env = {k: v for k, v in ENV.items() if not k.startswith("DMLC_")}
    env.update(DMLC_ROLE=role, **({"DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "2", "DMLC_PS_ROOT_URI": "127.0.0.1",
                                     "DMLC_PS_ROOT_PORT": str(free_port())} if others else {}))
    for argv in (["-m", "nmt.cli", *tiny_flags(task, tmp_path / "m"), "--max-steps", "1", "--kvstore", "dist_sync"],
                 ["scripts/translate.py", "--model-dir", str(tmp_path / "m")]):
        try:
            p = subprocess.run([PY, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"DMLC_ROLE={role!r}: {argv[:2]} waited as a node of a job")
        assert (p.returncode, p.stderr) == (2, f"error: DMLC_ROLE={role!r}: MXNet would start this process as a "
                                               "scheduler or server of a distributed job as it loads, instead of "
                                               "running nmt; nmt runs as a job's worker (DMLC_ROLE=worker, as "
                                               "nmt-launch sets it) or outside any job: unset DMLC_ROLE\n")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("role, others", [("wroker", False), ("server", True)])
def test_a_role_other_than_worker_is_refused_by_the_python_api_and_scripts(tmp_path, role, others):
    """The commands refused such a DMLC_ROLE, but the Python API (`from nmt.translate import Translator`) and the
    scripts that import MXNet themselves (scripts/benchmark_decode.py) gave MXNet's C++ traceback, or waited for
    good as a job's node: nmt's guard of MXNet's import refuses it there too, with the commands' line (worded for a
    Python caller too: it said "not run the command; an nmt command runs as ...")."""
    env = {k: v for k, v in ENV.items() if not k.startswith("DMLC_")}
    env.update(DMLC_ROLE=role, **({"DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "2", "DMLC_PS_ROOT_URI": "127.0.0.1",
                                     "DMLC_PS_ROOT_PORT": str(free_port())} if others else {}))
    said = (f"DMLC_ROLE={role!r}: MXNet would start this process as a scheduler or server of a distributed job as it "
            "loads, instead of running nmt; nmt runs as a job's worker (DMLC_ROLE=worker, as nmt-launch sets it) or "
            "outside any job: unset DMLC_ROLE")   # (from Python too: not "the command")
    api = "from nmt.translate import Translator; Translator.from_dir('m')"
    script = ["scripts/benchmark_decode.py", "--model-dir", str(tmp_path / "m"), "--output", str(tmp_path / "b.json")]
    runs = []
    for argv in (["-c", api], script):
        try:
            runs.append(subprocess.run([PY, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=60))
        except subprocess.TimeoutExpired:
            pytest.fail(f"DMLC_ROLE={role!r}: {argv[:2]} waited as a node of a job")
    assert (runs[0].returncode, runs[0].stderr.splitlines()[-1]) == (1, f"nmt.config_checks.ConfigError: {said}")
    assert (runs[1].returncode, runs[1].stderr) == (2, f"error: {said}\n")
    assert "MXNetError" not in runs[0].stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("code, leaves", [(143, 143), (2, 2), (None, 1)])
def test_a_worker_leaving_before_it_finished_keeps_its_commands_exit_code(code, leaves):
    """A worker stopped by Ctrl-C while it set up (exit 143) left with code 1, MXNet's barrier skipped: the launcher,
    which had asked for the stop, took it for a failed worker and exited 1. The command's own code is kept (an
    error's 2; 1 after a traceback)."""
    program = ("from nmt import commands, workers\n"
               "class Two:\n    num_workers, rank, type = 2, 0, 'dist_sync'\n"
               f"commands.exit_code = {code}\n"
               "workers.WorkerGroup(Two())\n")
    assert subprocess.run([PY, "-c", program], env=ENV, timeout=120).returncode == leaves


@pytest.mark.parametrize("rank, leaves", [(1, 0), (0, -signal.SIGTERM)])
def test_a_finished_worker_waits_for_rank_0_through_a_stop_of_the_job(rank, leaves):
    """Stopping the job while rank 0 scored the test sets (the other workers waiting for it at MXNet's exit barrier)
    killed those workers, and rank 0 then waited at that barrier for --grace (30 s) until the launcher killed it:
    "worker 1 still running ... killed". Past training, a worker other than rank 0 ignores the stop; rank 0 acts."""
    program = ("import atexit, os, signal\n"
               "atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))   # (after the group's own, at exit)\n"
               "from nmt import workers\n"
               f"class Two:\n    num_workers, rank, type = 2, {rank}, 'dist_sync'\n"
               "workers.WorkerGroup(Two()).finished()\n")
    assert subprocess.run([PY, "-c", program], env=ENV, timeout=120).returncode == leaves


def test_bytes_survive_the_float_packing():
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 3, 4, 1000):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert _unpack(_pack(data).astype(np.float32), n) == data


def test_one_worker_group_is_the_identity(tmp_path):
    g = WorkerGroup("local")
    assert (g.rank, g.num_workers, g.is_chief) == (0, 1, True)
    assert g.broadcast_bytes(b"x") == b"x"
    with g.shared_files(tmp_path, ["a"]) as where:
        assert where == tmp_path
    assert g.agree_stop("SIGTERM") == "SIGTERM" and g.agree_stop("") == ""


def test_every_wall_clock_stop_is_a_vote_of_the_workers():
    """--time-budget crashed every distributed job once reached: "unknown stop wish 'time_budget'"."""
    class OneOfTwo:   # worker 0's kvstore of a two-worker job whose other worker never wishes to stop
        num_workers, rank, type = 2, 0, "dist_sync"

        def init(self, key, value):
            pass

        def pushpull(self, key, value, out):
            value.copyto(out)
    for wish in ("SIGINT", "SIGTERM", "max_seconds", "time_budget"):
        g = WorkerGroup(OneOfTwo())
        g.finished()   # no exit barrier to leave through
        assert (g.agree_stop(wish), g.agree_stop("")) == ("", wish)   # decided one update later, for all
    assert g.sum([1.5, 2.0]) == [1.5, 2.0]   # (the other worker's parts: none here)


def test_check_same_names_what_differs_and_every_worker_stops(monkeypatch):
    """It named only the section ("in: train", some 20 flags), and only the worker that differed stopped: rank 0
    went on setting up until the launcher killed it, and left a half-made model directory (or the run --overwrite
    replaces set aside)."""
    g = WorkerGroup("local")
    g.rank = 1
    rank0 = {"batches": "abc", "model": {"dropout": 0.1}, "train": {"patience": 3, "seed": 1}}
    monkeypatch.setattr(g, "broadcast_json", lambda obj: rank0)
    g.check_same("training data and flags", rank0)
    with pytest.raises(ConfigError, match=r"^the training data and flags of worker rank 1 differ from rank 0's: "
                                          r'batches "xyz" \(rank 0: "abc"\); train.patience 5 \(rank 0: 3\); every'):
        g.check_same("training data and flags", {"batches": "xyz", "model": {"dropout": 0.1},
                                                 "train": {"patience": 5, "seed": 1}})
    g.rank = 0   # rank 0 agrees with itself, and learns from the sum that another worker does not
    monkeypatch.setattr(g, "agree", lambda objection: True)
    with pytest.raises(ConfigError, match=r"^the flags of another worker differ from rank 0's \(its error says"):
        g.check_same("flags", rank0)


def test_workers_agree_on_resume_devices_and_every_training_flag(tmp_path, task, monkeypatch):
    """Workers with other --patience hung for good (one stopped early, the other waited in the next sum); with other
    device counts they split each batch differently, and some sentences were never trained on (or twice); --resume
    on some workers only put rank 0's broadcasts out of step ("not a readable SentencePiece model"), and
    --init-from on some only was used or not by which worker became rank 0; a refused resume had already rewritten
    the run's config.json, which the next --resume then continued with."""
    seen = {}
    monkeypatch.setattr(WorkerGroup, "check_same", lambda self, what, values: seen.update({what: values}))
    cfg = tiny_config(tmp_path, task, "m", max_steps=1)
    cfg.train.cpu_devices, cfg.train.patience = 2, 7
    create_trainer(cfg).lock.release()
    assert list(seen) == ["flags", "training data and flags"]
    assert seen["flags"] == {"resume": False, "overwrite": False, "init_from": False, "devices": 2}
    train = seen["training data and flags"]["train"]
    # a fresh run compared the batches' lengths only: a file with other lines of the same lengths trained along
    trainer = create_trainer(cfg, overwrite=True)
    trainer.lock.release()
    assert seen["training data and flags"]["text sha256"] == {"training pairs": trainer.data.sums[0],
                                                              "dev pairs": trainer.data.sums[1],
                                                              "test pairs": trainer.data.sums[2]} != {}
    assert train["patience"] == 7 and train["valid_metric"] is None and "cpu_devices" not in train
    create_trainer(cfg, overwrite=True).fit()
    saved = (Path(cfg.train.model_dir) / ckpt.CONFIG).read_bytes()

    def refuse(self, what, values):
        if what == "training data and flags":
            raise ConfigError("differ")
    monkeypatch.setattr(WorkerGroup, "check_same", refuse)
    cfg.optim.lr = 1e-4
    with pytest.raises(ConfigError):
        create_trainer(cfg, resume=True)
    assert (Path(cfg.train.model_dir) / ckpt.CONFIG).read_bytes() == saved


# -- the watchdog, on stand-in processes ---------------------------------------------------------------------------
def stand_in(role: str, index: int, code: str) -> ProcSpec:
    return ProcSpec(role, index, [PY, "-c", code], {"DMLC_ROLE": role})


SLEEP = "import time; time.sleep(60)"


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_failing_worker_stops_the_job(capsys):
    job = Job([stand_in("scheduler", 0, SLEEP), stand_in("server", 0, SLEEP), stand_in("worker", 0, SLEEP),
               stand_in("worker", 1, "import time, sys; time.sleep(0.5); sys.exit(3)")])
    t0 = time.monotonic()
    assert job.run() == 3
    assert time.monotonic() - t0 < 10
    assert f"worker 1 (pid {job.procs[3].pid}) exited with code 3; stopping the other 3" in capsys.readouterr().err
    assert all(gone(p.pid) for p in job.procs)


def test_a_command_that_cannot_start_stops_the_job():
    job = Job([stand_in("scheduler", 0, SLEEP), ProcSpec("worker", 0, ["/nonexistent/python"], {})])
    with pytest.raises(LaunchError, match="cannot start worker 0: /nonexistent/python: No such file"):
        job.run()
    assert gone(job.procs[0].pid)


def test_a_lonely_worker_and_the_timeout_end_the_job(capsys):
    job = Job([stand_in("scheduler", 0, SLEEP), stand_in("worker", 0, "pass"), stand_in("worker", 1, SLEEP)],
              finish_timeout=1.0)
    assert job.run() == 1
    assert "worker 1 still running 1 s after another worker finished: stuck" in capsys.readouterr().err
    job = Job([stand_in("scheduler", 0, SLEEP), stand_in("worker", 0, SLEEP)], timeout=1.0)
    assert job.run() == 124 and "--timeout 1 s reached" in capsys.readouterr().err
    assert all(gone(p.pid) for p in job.procs)


def test_the_timeout_lets_the_workers_checkpoint_within_the_grace(tmp_path, capsys):
    """--timeout sent SIGTERM to every process at once, scheduler and servers too, and SIGKILL 3 s later, --grace
    aside: the workers' agreed stop, which needs the servers, never saved the checkpoint it announced."""
    worker = ("import signal, sys, time\n"
              f"def stop(*a): time.sleep(4); open({str(tmp_path / 'saved')!r}, 'w').close(); sys.exit(143)\n"
              "signal.signal(signal.SIGTERM, stop)\n"
              "time.sleep(60)")
    job = Job([stand_in("scheduler", 0, SLEEP), stand_in("worker", 0, worker)], timeout=2.0, grace=30.0)
    assert job.run() == 124
    assert (tmp_path / "saved").exists()
    assert "--timeout 2 s reached: asking the workers to checkpoint and stop (Ctrl-C to kill at once)" in \
        capsys.readouterr().err


def sigterm_to_a_launcher_of_two(tmp_path: Path, worker: str, *launcher_args: str,
                                 sig: int = signal.SIGTERM) -> Tuple[int, str]:
    """Launch two workers running the Python code `worker` (which touches ready.<pid> when it has started), send the
    launcher SIGTERM (or `sig`) once both have, and wait for it: (its exit code, its stderr)."""
    p = subprocess.Popen([PY, str(REPO / "scripts" / "launch.py"), "-n", "2", *launcher_args, "--", PY, "-c", worker],
                         cwd=tmp_path, env=ENV, stderr=open(tmp_path / "err", "w"), start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))   # (not nohup's SIG_IGN)
    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("ready.*"))) < 2:   # the launcher has started both, so it handles SIGTERM
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        p.send_signal(sig)
        p.wait(timeout=30)
    finally:
        finish(p, 0)
    return p.returncode, (tmp_path / "err").read_text()


def first_and_other_worker(first: str, other: str) -> str:
    """A stand-in worker's Python code for `sigterm_to_a_launcher_of_two`: the first of the two to start handles
    SIGTERM with the expression `first`, the other with `other`; both then wait."""
    return ("import os, signal, sys, time\n"
            "try:\n    os.close(os.open('first', os.O_CREAT | os.O_EXCL)); first = True\n"
            "except FileExistsError:\n    first = False\n"
            f"signal.signal(signal.SIGTERM, ({first}) if first else ({other}))\n"
            "open(f'ready.{os.getpid()}', 'w').close()\n"
            "time.sleep(60)")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_to_the_launcher_is_passed_to_the_workers(tmp_path, sig):
    """SIGHUP (the launcher's terminal closed) killed the launcher, and with it the workers, without a checkpoint;
    it stops the job as SIGTERM does, with its own exit code."""
    worker = ("import os, signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *a: (open('stopped', 'a').write('x'), sys.exit(143)))\n"
              "open(f'ready.{os.getpid()}', 'w').close()\n"
              "time.sleep(60)")
    code, err = sigterm_to_a_launcher_of_two(tmp_path, worker, sig=sig)
    assert code == 128 + sig, err
    assert f"{signal.Signals(sig).name}: asking the workers to checkpoint and stop" in err
    assert (tmp_path / "stopped").read_text() == "xx"       # both workers got it and exited on their own


def test_workers_still_running_after_the_grace_are_named_as_killed(tmp_path):
    """When --grace ran out the launcher killed the workers without a word: the checkpoint may be missing."""
    worker = ("import os, signal, time\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"   # (a worker deaf to it: MXNet's kvstore wait)
              "open(f'ready.{os.getpid()}', 'w').close()\n"
              "time.sleep(60)")
    code, err = sigterm_to_a_launcher_of_two(tmp_path, worker, "--grace", "1")
    assert code == 143, err
    assert "worker 0, worker 1 still running --grace 1 s after SIGTERM: killed (the checkpoint of the stop may be " \
           "missing" in err, err


def test_workers_left_waiting_by_one_that_stopped_are_killed_without_the_grace(tmp_path):
    """Ctrl-C as the job set up: a worker in Python code left at once (143), the other, waiting for it in a
    collective (deaf to SIGTERM in MXNet's wait), was killed only when --grace ran out, named as if a checkpoint
    might be missing. It is killed LEFT_WAIT seconds after the first left."""
    worker = first_and_other_worker("signal.SIG_IGN", "signal.SIG_DFL")   # the first to start is deaf to SIGTERM
    t0 = time.monotonic()
    code, err = sigterm_to_a_launcher_of_two(tmp_path, worker, "--grace", "25")
    assert code == 143 and time.monotonic() - t0 < 20, err
    assert re.search(r"worker \d still running 5 s after worker \d left as SIGTERM stopped the job: killed "
                     r"\(waiting for it in a collective: a stop before training, with nothing to save\)", err), err
    assert "--grace" not in err


def test_a_worker_that_fails_as_the_job_stops_is_named_at_once(tmp_path):
    """A worker whose stop failed (its checkpoint on a full disk: exit 1) was not named: the launcher waited the
    whole --grace for the other, which waited for it in vain, then named that one as still running and exited 143."""
    worker = first_and_other_worker("lambda *a: sys.exit(1)", "signal.SIG_IGN")   # the first fails its stop
    t0 = time.monotonic()
    code, err = sigterm_to_a_launcher_of_two(tmp_path, worker, "--grace", "20")
    assert code == 1 and "exited with code 1 as the job stopped (SIGTERM)" in err, err
    assert "still running" not in err and time.monotonic() - t0 < 15, err


def test_host_names_are_given_to_the_job_as_ipv4_addresses(tmp_path, capsys):
    """ps-lite binds to DMLC_NODE_HOST and DMLC_PS_ROOT_URI as given: with a host name (-H localhost,
    --scheduler-host localhost) its servers failed with "bind failed", a traceback; and it speaks no IPv6."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost\n")
    assert launcher.main(["-n", "1", "-H", str(hosts), "--scheduler-host", "localhost", "--port", "9", "--dry-run",
                          "--", "x"]) == 0
    out = capsys.readouterr().out
    assert "DMLC_NODE_HOST=127.0.0.1" in out and "DMLC_PS_ROOT_URI=127.0.0.1" in out and "localhost" in out, out
    assert "DMLC_NODE_HOST=localhost" not in out
    assert launcher.main(["-n", "1", "--scheduler-host", "::1", "--dry-run", "--", "x"]) == 2
    assert "error: --scheduler-host ::1: no IPv4 address" in capsys.readouterr().err


# -- real dist_sync jobs on loopback -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("synth"))


def launch(tmp_path: Path, launcher_args, command, name: str, **env) -> subprocess.Popen:
    """Start the launcher in its own process group; its output goes to NAME.out/.err."""
    argv = [PY, str(REPO / "scripts" / "launch.py"), *launcher_args, "--timeout", "120", "--", PY, *command]
    return subprocess.Popen(argv, cwd=tmp_path, env=dict(ENV, **env), stdout=open(tmp_path / f"{name}.out", "w"),
                            stderr=open(tmp_path / f"{name}.err", "w"), start_new_session=True)


def finish(p: subprocess.Popen, timeout: float) -> int:
    try:
        return p.wait(timeout=timeout)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)    # the launcher's children die with it (PDEATHSIG)
            p.wait()


def started_pids(err: str) -> dict:
    return {m[0]: int(m[1]) for m in re.findall(r"started (\w+(?: \d)?) \(pid (\d+)\)", err)}


def load_dump(path: Path) -> dict:
    import mxnet as mx
    return {k: v.asnumpy() for k, v in mx.nd.load(str(path)).items()}


def test_two_workers_match_one_process(tmp_path, task):
    # plain SGD, no clipping: the update is linear in the gradient, so any error in how the workers' shares are
    # summed and normalized shows (Adam would hide a constant factor)
    cfg = tiny_config(tmp_path, task, "dist", max_steps=5)
    cfg.optim.optimizer, cfg.optim.lr, cfg.optim.warmup_steps, cfg.optim.clip_norm = "sgd", 0.5, 1, 0.0
    cfg.save(tmp_path / "cfg.json")
    worker = [str(REPO / "tests" / "dist_worker.py"), str(tmp_path), "--config", "cfg.json", "--kvstore", "dist_sync"]
    p = launch(tmp_path, ["-n", "2", "-s", "1"], worker, "job")
    assert finish(p, 90) == 0, (tmp_path / "job.err").read_text()[-3000:]
    w0, w1 = load_dump(tmp_path / "params.rank0"), load_dump(tmp_path / "params.rank1")
    assert_same_params(w0, w1, rtol=0, atol=0)
    assert_same_params(w0, params_of(cfg.train.model_dir), rtol=0, atol=0)    # rank 0 wrote the checkpoint
    rows = (Path(cfg.train.model_dir) / ckpt.METRICS).read_text().splitlines()
    assert len(rows) == 1        # only rank 0 validated (once, at the end) and logged
    single = tiny_config(tmp_path, task, "single", max_steps=5)
    single.optim = cfg.optim
    create_trainer(single).fit()
    assert_same_params(params_of(single.train.model_dir), w0, rtol=1e-5, atol=1e-7)
    # the training loss of the row is every worker's (rank 0 divided its own part's by the whole batches' tokens)
    one = json.loads((Path(single.train.model_dir) / ckpt.METRICS).read_text().splitlines()[0])
    two = json.loads(rows[0])
    assert abs(one["train_loss"] - two["train_loss"]) < 1e-4 and abs(one["train_nll"] - two["train_nll"]) < 1e-4, \
        (one, two)


def test_a_job_resumes_at_the_end_of_an_epoch_a_signal_stopped_on(tmp_path, task):
    """A stop agreed on an epoch's last update, between validations: its resume as a job reached the epoch's end
    before any update, where rank 0, which alone had taken the checkpoint's loss since the last validation, summed it
    over the workers and the other worker, with none, went on to the checkpoint's collective: both waited for good.
    It ends as one process resuming it does, at the parameters of one process that never stopped."""
    runs, end = {}, 400
    for name in ("part", "full"):
        cfg = tiny_config(tmp_path, task, name, max_steps=400 if name == "part" else end + 2, valid_every=0)
        cfg.optim.optimizer, cfg.optim.lr, cfg.optim.warmup_steps, cfg.optim.clip_norm = "sgd", 0.5, 1, 0.0
        trainer = create_trainer(cfg)
        end, step = len(trainer.data.sampler), trainer.train_step

        def train_step(batch, trainer=trainer, step=step, name=name, end=end):   # SIGTERM on the last update
            step(batch)
            trainer.signal_name = "SIGTERM" if name == "part" and trainer.state.step == end else trainer.signal_name
        trainer.train_step = train_step
        runs[name] = (cfg, trainer.fit())
    cfg, state = runs["part"]
    assert runs["full"][1].step == end + 2
    assert state.stopped == "SIGTERM" and state.step == end and state.since_valid[-1] > 0
    worker = [str(REPO / "tests" / "dist_worker.py"), str(tmp_path), "--model-dir", cfg.train.model_dir, "--resume",
              "--max-steps", str(end + 2), "--kvstore", "dist_sync", "--no-progress"]
    p = launch(tmp_path, ["-n", "2", "-s", "1"], worker, "job")
    assert finish(p, 90) == 0, (tmp_path / "job.err").read_text()[-3000:]
    assert_same_params(load_dump(tmp_path / "params.rank0"), load_dump(tmp_path / "params.rank1"), rtol=0, atol=0)
    assert_same_params(params_of(runs["full"][0].train.model_dir), load_dump(tmp_path / "params.rank0"), rtol=1e-5,
                       atol=1e-7)


def test_two_workers_fine_tune_like_one_process(tmp_path, task):
    """--init-from in a dist_sync job: rank 0 loads the model and its tokenizers, the other worker takes both from
    it; both end where one process fine-tuning alone ends (plain SGD, as above)."""
    create_trainer(tiny_config(tmp_path, task, "parent", max_steps=3)).fit()
    cfg = tiny_config(tmp_path, task, "dist", max_steps=4)
    cfg.optim.optimizer, cfg.optim.lr, cfg.optim.warmup_steps, cfg.optim.clip_norm = "sgd", 0.5, 1, 0.0
    cfg.save(tmp_path / "cfg.json")
    worker = [str(REPO / "tests" / "dist_worker.py"), str(tmp_path), "--config", "cfg.json", "--kvstore", "dist_sync",
              "--init-from", str(tmp_path / "parent")]
    p = launch(tmp_path, ["-n", "2", "-s", "1"], worker, "job")
    assert finish(p, 90) == 0, (tmp_path / "job.err").read_text()[-3000:]
    w0, w1 = load_dump(tmp_path / "params.rank0"), load_dump(tmp_path / "params.rank1")
    assert_same_params(w0, w1, rtol=0, atol=0)
    single = tiny_config(tmp_path, task, "single", max_steps=4)
    single.optim = cfg.optim
    create_trainer(single, init=ckpt.params_path(tmp_path / "parent", "best")).fit()
    assert_same_params(params_of(single.train.model_dir), w0, rtol=1e-5, atol=1e-7)
    scratch = tiny_config(tmp_path, task, "scratch", max_steps=4)   # the same run without the model: elsewhere
    scratch.optim = cfg.optim
    create_trainer(scratch).fit()
    with pytest.raises(AssertionError):
        assert_same_params(params_of(scratch.train.model_dir), w0, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("init", ["with", "without"])
def test_the_first_gradients_are_taken_at_rank_0s_parameters(tmp_path, init):
    """gluon.Trainer shares rank 0's parameters only in the first allreduce_grads, after the first backward pass:
    a worker that started from other parameters sums a gradient taken at its own. WorkerGroup.init_trainer shares
    them before (and this test shows the difference, so it fails if the workaround stops working or is dropped)."""
    p = launch(tmp_path, ["-n", "2", "-s", "1"], [str(REPO / "tests" / "dist_init_worker.py"), init], "job")
    assert finish(p, 60) == 0, (tmp_path / "job.err").read_text()[-3000:]
    # the two verdicts by name: the workers' lines may still interleave in the launcher's output
    verdicts = set(re.findall(r"rank [01]: (same|different)", (tmp_path / "job.out").read_text()))
    assert verdicts == ({"same"} if init == "with" else {"different"})


def test_an_exception_in_a_worker_ends_the_job(tmp_path, task):
    # rank 0 raises at its first checkpoint; without leaving at once it would wait in MXNet's exit barrier for
    # the other worker, which waits for it in a collective: a hang instead of an error
    tiny_config(tmp_path, task, "dist", max_steps=100, valid_every=2, valid_max_sentences=5).save(tmp_path / "cfg.json")
    worker = [str(REPO / "tests" / "dist_worker.py"), str(tmp_path), "--config", "cfg.json", "--kvstore", "dist_sync"]
    p = launch(tmp_path, ["-n", "2"], worker, "job", FAIL_ON_SAVE="0")
    t0 = time.monotonic()
    code = finish(p, 60)
    err = (tmp_path / "job.err").read_text()
    assert code == 1 and time.monotonic() - t0 < 45, err[-3000:]
    assert "RuntimeError: injected failure in worker rank 0" in err
    assert re.search(r"nmt-launch: worker [01] \(pid \d+\) exited with code 1; stopping the other 3 processes", err)
    assert all(gone(pid) for pid in started_pids(err).values())


def test_a_worker_told_another_number_of_workers_is_refused(tmp_path, task, capfd, monkeypatch):
    """A worker started by hand with DMLC_NUM_WORKER=3 in a job of 2 took a third of each batch as rank 0 and
    trained a wrong model to its end, exit 0, while the other waited for good."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    command = [PY, "-m", "nmt.cli", *tiny_flags(task, tmp_path / "m"), "--max-steps", "4", "--kvstore", "dist_sync"]
    specs = dist.plan_job(command, 2, 1, port=free_port())
    specs[-1].env["DMLC_NUM_WORKER"] = "3"
    job = Job(specs, workdir=str(tmp_path), timeout=90, grace=5)
    assert job.run() == 2
    err = capfd.readouterr().err
    assert "reached" not in err   # (not stopped by the --timeout)
    told = re.search(r"rank (\d) of 3", err)[1]
    # the first worker to exit stops the job (as a launcher does): the one told 3 says so, or the other that another
    # worker was told another number; either one comes first (check_count's own test has each worker's verdict)
    wrong = (f"error: DMLC_NUM_WORKER=3 of this worker (rank {told}), but the job's servers sum over 2 workers; "
             "every worker, server and the scheduler need the same DMLC_NUM_WORKER (nmt-launch sets it)\n")
    other = ("error: another worker of the job was told another number of workers than this one's DMLC_NUM_WORKER=2 "
             "(its error says so); every worker, server and the scheduler need the same DMLC_NUM_WORKER")
    assert wrong in err or other in err, err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("rank, told, counted, others_wrong, said", [
    (1, 3, 2, 0, "^DMLC_NUM_WORKER=3 of this worker \\(rank 1\\), but the job's servers sum over 2 workers; every"),
    (0, 1, 2, 1, "^DMLC_NUM_WORKER=1 of this worker \\(rank 0\\), but the job's servers sum over 2 workers; every"),
    (0, 2, 2, 1, "^another worker of the job was told another number of workers than this one's DMLC_NUM_WORKER=2 "),
    (2, 2, 3, 0, "^DMLC_NUM_WORKER=2 of this worker, but the job's scheduler gave it rank 2; every worker"),
    (1, 2, 2, 0, None)])
def test_check_count_refuses_every_worker_of_a_job_told_other_counts(monkeypatch, rank, told, counted, others_wrong,
                                                                     said):
    """Each worker sees the count the servers sum over and whether any worker found its own wrong: the worker told
    another number names both, and a worker told the right one is refused too when another was not (else it went on
    alone into the next collective and waited there for good, under a launcher other than nmt-launch). A rank past
    the count told is refused before any sum."""
    g = WorkerGroup("local")
    g.kv, g.rank, g.num_workers = object(), rank, told   # (a distributed kvstore's view, summed by stand-ins below)
    sums = iter([counted, None])

    def summed(key, values):   # 1st: the servers' sum of ones; 2nd: of the verdicts, this worker's and the others'
        total = next(sums)
        total = float(values[0]) + others_wrong if total is None else total
        return SimpleNamespace(asnumpy=lambda: np.array([total], np.float32))
    monkeypatch.setattr(g, "_sum", summed)
    if said is None:
        g.check_count()
    else:
        with pytest.raises(ConfigError, match=said):
            g.check_count()
    WorkerGroup("local").check_count()   # (no job: nothing to count, no kvstore to ask)


def test_a_job_refused_at_the_start_leaves_no_temporary_files(tmp_path, task):
    """Rank 0 refused the model directory (it exists) while the other worker waited for rank 0's tokenizers in a
    directory it had made: the launcher stopped it there, and every failed launch left a /tmp/nmt-worker1-*."""
    tiny_config(tmp_path, task, "dist", max_steps=2).save(tmp_path / "cfg.json")
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "notes.txt").write_text("mine")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    train = [str(REPO / "scripts" / "train.py"), "--config", "cfg.json", "--kvstore", "dist_sync", "--no-eval"]
    p = launch(tmp_path, ["-n", "2", "-s", "1"], train, "refused", TMPDIR=str(tmp))
    code = finish(p, 60)
    err = (tmp_path / "refused.err").read_text()
    assert code != 0 and "already exists and holds files, but no run" in err, err[-3000:]
    assert list(tmp.iterdir()) == [], err[-3000:]


def test_killed_worker_ends_the_job_then_resume_over_ssh_and_stop_by_sigterm(tmp_path, task):
    # Adam (its states must reach every worker on resume) with always-active clipping by the global norm
    cfg = tiny_config(tmp_path, task, "dist", max_steps=100000, valid_every=2, keep_last=2, valid_max_sentences=5)
    cfg.optim.clip_norm = 0.1
    cfg.save(tmp_path / "cfg.json")
    model_dir = Path(cfg.train.model_dir)
    train = [str(REPO / "scripts" / "train.py"), "--config", "cfg.json", "--kvstore", "dist_sync", "--no-eval"]
    tmp = tmp_path / "tmp"   # the workers' temporary files: none may outlive a killed worker
    tmp.mkdir()
    p = launch(tmp_path, ["-n", "2", "-s", "1"], train, "killed", TMPDIR=str(tmp))
    try:
        deadline = time.monotonic() + 60
        while not (model_dir / ckpt.STATE).exists():
            assert p.poll() is None and time.monotonic() < deadline, (tmp_path / "killed.err").read_text()[-3000:]
            time.sleep(0.1)
        pids = started_pids((tmp_path / "killed.err").read_text())
        os.kill(pids["worker 1"], signal.SIGKILL)
        t_kill = time.monotonic()
        code = finish(p, 30)
    finally:
        finish(p, 0)
    err = (tmp_path / "killed.err").read_text()
    assert code == 128 + signal.SIGKILL and time.monotonic() - t_kill < 20, err[-3000:]
    assert f"worker 1 (pid {pids['worker 1']}) was killed by SIGKILL; stopping the other 3 processes" in err
    assert set(pids) == {"scheduler", "server 0", "worker 0", "worker 1"} and all(gone(x) for x in pids.values())
    step = ckpt.TrainState.load(model_dir).step
    assert step >= 2 and load_params(model_dir, "latest")     # the last checkpoint stays loadable
    assert not list(tmp.iterdir()), "a killed worker left its copy of rank 0's files"

    # resume, with both workers and two servers started through the ssh path (a stand-in ssh runs the remote
    # script here, in an environment holding only what the launcher forwards); then SIGTERM to the launcher: the
    # workers get it at different updates, agree on one, and both stop there with a checkpoint
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text('#!/bin/sh\nfor last; do :; done\nexec env -i PATH="$PATH" sh -c "$last"\n')
    fake_ssh.chmod(0o755)
    (tmp_path / "hosts").write_text("127.0.0.1\n127.0.0.1:2222\n")
    p = launch(tmp_path, ["-n", "2", "-H", "hosts", "--ssh", str(fake_ssh), "--scheduler-host", "127.0.0.1"],
               [str(REPO / "tests" / "dist_worker.py"), str(tmp_path), "--config", "cfg.json", "--kvstore",
                "dist_sync", "--resume"], "resumed")
    try:
        deadline = time.monotonic() + 60
        while ckpt.TrainState.load(model_dir).step <= step:    # a checkpoint after the resume
            assert p.poll() is None and time.monotonic() < deadline, (tmp_path / "resumed.err").read_text()[-3000:]
            time.sleep(0.1)
        p.send_signal(signal.SIGTERM)
        code = finish(p, 60)
    finally:
        finish(p, 0)
    err = (tmp_path / "resumed.err").read_text()
    assert code == 128 + signal.SIGTERM and "resumed from step" in err, err[-3000:]
    assert err.count("started server") == 2 and err.count(" on 127.0.0.1 (pid") == 4
    # rank 1 says it too, as a log line naming the rank (Python's last-resort handler printed its warnings bare)
    said = [x for x in err.splitlines() if "SIGTERM received: saving a checkpoint" in x]
    assert len(said) == 2 and any(x.startswith("rank 1 ") and "WARNING nmt.signals" in x for x in said), said
    state = ckpt.TrainState.load(model_dir)
    assert state.stopped == "SIGTERM" and state.step > step and state.params_files[-1] == ckpt.params_file(state.step)
    w0, w1 = load_dump(tmp_path / "params.rank0"), load_dump(tmp_path / "params.rank1")
    assert_same_params(w0, w1, rtol=0, atol=0)
    assert_same_params(w0, params_of(model_dir), rtol=0, atol=0)
    single = tiny_config(tmp_path, task, "single", max_steps=state.step, valid_every=2, keep_last=2,
                         valid_max_sentences=5)
    single.optim = cfg.optim
    create_trainer(single).fit()
    assert_same_params(params_of(single.train.model_dir), w0, rtol=1e-5, atol=1e-7)


def test_a_worker_without_the_model_directory_resumes_a_run_that_recorded_bleu(tmp_path, task):
    """An en->ko run whose config.json records "bleu" (as every one begun before Korean output defaulted to ko-mecab
    does), resumed as a job with its flags, --valid-metric not among them: the worker on a machine without a copy of
    the model directory read its metric as the flags' (null), and the job stopped with "train.valid_metric null
    (rank 0: "bleu")" unless every worker was given --valid-metric bleu. It goes on by 13a BLEU, as rank 0 does."""
    files = {f"{split}_{a}": task[f"{split}_{b}"] for split in ("train", "dev") for a, b in (("src", "tgt"),
                                                                                           ("tgt", "src"))}
    flags = [*tiny_flags(files, "enko"), "--src", "en", "--tgt", "ko", "--valid-every", "3"]   # (in tmp_path)
    assert train_main([*flags, "--model-dir", str(tmp_path / "enko"), "--valid-metric", "bleu", "--max-steps",
                       "3"]) == 0
    worker = [str(REPO / "tests" / "dist_worker.py"), str(tmp_path), *flags, "--resume", "--max-steps", "6",
              "--kvstore", "dist_sync"]
    p = launch(tmp_path, ["-n", "2", "-s", "1"], worker, "job", NO_COPY_RANK="1")
    assert finish(p, 90) == 0, (tmp_path / "job.err").read_text()[-3000:]
    assert not list((tmp_path / "elsewhere").iterdir())   # (rank 1 read its flags there: no run)
    model_dir = tmp_path / "enko"
    assert json.loads((model_dir / ckpt.CONFIG).read_text())["train"]["valid_metric"] == "bleu"
    rows = [json.loads(line) for line in (model_dir / ckpt.METRICS).read_text().splitlines()]
    assert [(r["step"], r["valid_metric"]) for r in rows] == [(3, "bleu"), (6, "bleu")]


def test_a_worker_without_the_model_directory_takes_rank_0s_settings(tmp_path, task):
    """A resume that changed --patience recorded it in config.json, which a worker on a machine without a copy of the
    model directory did not read: given the run's first flags again, it stopped the job with "train.patience 10
    (rank 0: 5)" unless every change of every resume since was given to it too. It takes rank 0's recorded settings,
    with the flags it is given on top (the run's own, and a new --max-steps)."""
    assert train_main([*tiny_flags(task, tmp_path / "run"), "--max-steps", "2"]) == 0
    assert train_main(["--model-dir", str(tmp_path / "run"), "--resume", "--patience", "5", "--max-steps", "3"]) == 0
    worker = [str(REPO / "tests" / "dist_worker.py"), str(tmp_path), *tiny_flags(task, "run"), "--resume",
              "--max-steps", "5", "--kvstore", "dist_sync"]
    p = launch(tmp_path, ["-n", "2", "-s", "1"], worker, "job", NO_COPY_RANK="1")
    assert finish(p, 90) == 0, (tmp_path / "job.err").read_text()[-3000:]
    assert not list((tmp_path / "elsewhere").iterdir())   # (rank 1 read its flags there: no run)
    model_dir = tmp_path / "run"
    assert ckpt.TrainState.load(model_dir).step == 5
    assert json.loads((model_dir / ckpt.CONFIG).read_text())["train"]["patience"] == 5
    w0, w1 = load_dump(tmp_path / "params.rank0"), load_dump(tmp_path / "params.rank1")
    assert_same_params(w0, w1, rtol=0, atol=0)
    assert_same_params(w0, params_of(model_dir), rtol=0, atol=0)


def test_a_worker_without_the_model_directory_refuses_its_own_other_model_flags(tmp_path, task):
    """Such a worker's flags go over rank 0's settings: a training flag is its own (the workers then compare them),
    a model or data flag that differs from rank 0's is refused as rank 0 refuses it, naming the worker."""
    tiny_config(tmp_path, task, "run").save(tmp_path / "config.json")
    saved = Config.load(tmp_path / "config.json")   # (as rank 0's config.json reaches the worker)

    def worker(*flags: str) -> Config:   # its flags in a directory without the run
        return config_from_args(build_train_parser().parse_args(["--model-dir", "run", "--resume", *flags]))
    cfg = rank0_settings(saved, worker("--patience", "7"), 1)
    assert cfg.train.patience == 7 and cfg.model == saved.model and cfg.data == saved.data
    assert cfg.optim == saved.optim and cfg.train.seed == saved.train.seed and cfg.train.model_dir.endswith("run")
    with pytest.raises(ConfigError, match=r"^worker rank 1, which has no \S+config.json on its machine and resumes "
                                          r"with rank 0's settings and its own flags on top: --resume: "
                                          r"model.hidden_size = 32 differs from 48, which this run was trained with"):
        rank0_settings(saved, worker("--hidden-size", "32"), 1)


def test_a_worker_without_the_model_directory_names_its_flag_and_rank_0s_files(monkeypatch, tmp_path):
    """Such a worker refused `--train-src a.ko` of a recipe run as "data.train_src = ..." (a key it was not given by)
    and advised "fine-tune with --init-from run", a directory that is not on its machine (its manifest unread: not
    even the checkpoint's file). It names its flag, and rank 0's parameter file as rank 0's, to copy."""
    monkeypatch.chdir(tmp_path)   # (no run here)
    saved = Config()   # rank 0's: the tatoeba recipe's corpora
    saved.train.model_dir = str(tmp_path / "run")
    for name in ("a.ko", "a.en"):
        (tmp_path / name).write_text("x\n", encoding="utf-8")

    def worker(*flags: str) -> Config:   # as nmt-train makes it (`cfg.labels`: how each key was given)
        return training_run(build_train_parser().parse_args(["--model-dir", "run", "--resume", "--kvstore",
                                                             "dist_sync", *flags]))[0]
    rank0 = re.escape(f"run/{ckpt.params_file(40)} (rank 0's: its run is on rank 0's machine, not this one, and a "
                      "fine-tuning job reads the model of --init-from at the same path on every machine: copy the "
                      "model directory run from rank 0's machine to run on this one first)")
    with pytest.raises(ConfigError, match=r"^worker rank 1, which has no run/config.json on its machine .*: --resume: "
                                          r'--train-src ".*a\.ko" differs from null, which this run was trained with '
                                          rf".*fine-tune with --init-from {rank0}, giving its data"):
        rank0_settings(saved, worker("--train-src", "a.ko", "--train-tgt", "a.en"), 1, 40)
    with pytest.raises(ConfigError, match=r": --resume: --optimizer \"sgd\" differs from \"adam\".* with --init-from "
                                          rf"{rank0}$"):
        rank0_settings(saved, worker("--optimizer", "sgd"), 1, 40)


def test_a_worker_without_the_model_directory_is_told_rank_0s_checkpoint_step(monkeypatch, tmp_path):
    """resumed_state passes such a worker the step of rank 0's newest checkpoint, which its advice names (its own
    machine has no manifest to read it from): without it the advice fell back to "--init-from run", a directory,
    not said to be rank 0's, and only rank0_settings called by hand with the step was tested."""
    from nmt.resume import resumed_state
    saved = Config()
    saved.train.model_dir = str(tmp_path / "run")   # rank 0's, as its workers read it
    (tmp_path / "run").mkdir()
    saved.save(tmp_path / "run" / ckpt.CONFIG)
    rank0 = ckpt.TrainState(step=40, params_files=[ckpt.params_file(20), ckpt.params_file(40)])

    class Rank1:   # (a worker of two, on a machine without the run)
        is_chief, rank, num_workers = False, 1, 2
        lacks = WorkerGroup.lacks
        broadcast_json = staticmethod(lambda mine: vars(rank0))
        read_shared = staticmethod(lambda model_dir, name, load: load(tmp_path / "run" / name))
    monkeypatch.chdir(tmp_path / "run")   # (no run/run here)
    cfg = training_run(build_train_parser().parse_args(["--model-dir", "run", "--resume", "--kvstore", "dist_sync",
                                                        "--optimizer", "sgd"]))[0]
    with pytest.raises(ConfigError, match=rf"^worker rank 1, .*--init-from run/{ckpt.params_file(40)} \(rank 0's: "):
        resumed_state(cfg, Rank1())


def _worker(is_chief: bool) -> SimpleNamespace:
    """A stand-in for a `WorkerGroup` of rank 0 (`is_chief`) or another, with its own `lacks`."""
    worker = SimpleNamespace(is_chief=is_chief)
    worker.lacks = WorkerGroup.lacks.__get__(worker)
    return worker


def test_a_worker_without_the_model_directory_names_rank_0s_run_where_its_pairs_are_others(tmp_path, task):
    """Such a worker of a run on its own files, given other files (moved files are compared by their pairs), was
    refused as "the training pairs (...) are not those the run trained on until now ...: fine-tune it into another
    --model-dir with --init-from run", a directory that is not on its machine, not said to be rank 0's. It is said,
    as the refusal of a flag says it (`rank0_settings`); rank 0's own refusal is as before."""
    from nmt.data import build_data
    other = tiny_config(tmp_path, task, "run")   # (a checksum of other pairs is the run's)
    few = tiny_config(tmp_path, {**task, "train_src": task["dev_src"], "train_tgt": task["dev_tgt"], "dev_src": None,
                                 "dev_tgt": None}, "run")   # 40 pairs: too few to hold a dev set out of
    run = Path(other.train.model_dir)
    rank0 = re.escape(f"--init-from {run} (rank 0's: its run is on rank 0's machine, not this one, and a fine-tuning "
                      "job reads the model of --init-from at the same path on every machine: copy the model directory "
                      f"{run} from rank 0's machine to {run} on this one first)")
    for cfg, how in ((other, ""), (few, r" \(40 after cleaning: the run had 1001 or more\)")):
        plain = f"--init-from {re.escape(str(run))}"   # (rank 0 itself: its own machine's run, as without workers)
        for worker, said in ((_worker(is_chief=False), rank0), (None, plain), (_worker(is_chief=True), plain)):
            with pytest.raises(ConfigError, match=rf"^--resume: the training pairs .* until now{how}: .*{said}$"):
                build_data(cfg, run, True, worker, ("0" * 64, "", ""))


@pytest.mark.parametrize("flags, said", [
    (["--average-last", "5"], r"--average-last 5 averages the last 5 of the checkpoints kept: give --keep-last 5 or "
                              r"more \(got \d+\)"),
    (["--valid-metric", "ko-mecab"], r"--valid-metric ko-mecab scores Korean output, and this model translates into "
                                     r"'en'"),
    (["--heads", "4"], r"--heads is an option of --arch transformer, not of --arch lstm")])
def test_a_worker_without_the_model_directory_says_its_flags_were_checked_alone(monkeypatch, tmp_path, flags, said):
    """Flags rank 0 takes with the run's settings (a Transformer's --heads alone, --average-last 5 alone in a run that
    keeps 5 checkpoints) are checked by themselves, over the defaults, on a worker without the model directory: it
    learns the run's settings from rank 0 only once the job has started. The error said "(got 3)" or "not of --arch
    lstm" of a run that keeps 5 checkpoints, or is a Transformer, without a word of why."""
    monkeypatch.chdir(tmp_path)   # (no run here)
    with pytest.raises(ConfigError, match=rf"^{said}.* \(run/config.json is not on this machine, so these flags were "
                                          r"checked by themselves, over the defaults rather than a run's settings: a "
                                          r"worker of a distributed job .* needs the flags these depend on too"):
        training_run(build_train_parser().parse_args(["--model-dir", "run", "--resume", "--kvstore", "dist_sync",
                                                      *flags]))
    with pytest.raises(ConfigError) as alone:   # one process: a missing run is "nothing to resume", no worker's
        training_run(build_train_parser().parse_args(["--model-dir", "run", "--resume", *flags]))
    assert re.match(said, str(alone.value)) and "distributed" not in str(alone.value)
    if flags[0] == "--heads":   # a new run of a distributed job (no --resume) has no run's settings to learn
        with pytest.raises(ConfigError) as new:
            training_run(build_train_parser().parse_args(["--model-dir", "run", "--kvstore", "dist_sync", *flags]))
        assert re.match(said, str(new.value)) and "not on this machine" not in str(new.value), new.value
