"""nmt-launch on bad input: an `error: ...` naming the flag (exit 2) before anything starts, never a traceback or a
message blaming something else; and --env reaches the processes of a job on this machine too. The real jobs here
run stand-ins (`--python` true for scheduler and server, a one-line worker): no MXNet, well under a second."""
from __future__ import annotations

import shutil
import socket
import sys

import pytest

from nmt import distributed as dist
from nmt.distributed import Job, LaunchError, ProcSpec

PY = sys.executable
TRUE = shutil.which("true")


def launch(capsys, *argv):
    """dist.main in-process: (exit code, stdout, stderr)."""
    try:
        code = dist.main(list(argv))
    except SystemExit as e:      # argparse: a bad value of a flag
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def listening_socket(reuse: bool = False) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


# -- --ssh ---------------------------------------------------------------------------------------------------------
def test_ssh_with_an_unbalanced_quote_is_refused_naming_the_flag(capsys):
    code, _, err = launch(capsys, "-n", "1", "--ssh", "ssh -i 'key", "--dry-run", "--", "x")
    assert code == 2 and "Traceback" not in err
    assert """argument --ssh: "ssh -i 'key": No closing quotation; balance the quotes as in a shell""" in err


def test_ssh_is_split_as_the_shell_would(capsys, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1\n")
    code, out, _ = launch(capsys, "-n", "1", "-H", str(hosts), "--ssh", "ssh -i '/my keys/id'", "--dry-run", "--",
                          "x")
    assert code == 0 and "\nssh -i '/my keys/id' -o BatchMode=yes" in out
    assert dist.build_parser().parse_args(["-n", "1"]).ssh == ["ssh"]


# -- --port --------------------------------------------------------------------------------------------------------
def test_a_port_in_use_is_refused_naming_the_flag(capsys):
    with listening_socket() as s:
        port = s.getsockname()[1]
        code, _, err = launch(capsys, "-n", "1", "--port", str(port), "--dry-run", "--", "x")
        assert code == 2 and err == (f"error: --port {port}: the scheduler cannot listen on 127.0.0.1:{port} (Address "
                                     "already in use); give another --port, or leave it out to take a free one\n")
        code, _, err = launch(capsys, "-n", "1", "--scheduler-host", "127.0.0.1", "--port", str(port), "--", "x")
        assert code == 2 and err.startswith(f"error: --scheduler-host 127.0.0.1 --port {port}: the scheduler cannot")


def test_a_free_port_is_taken_and_one_in_time_wait_too(capsys):
    """The check binds as the scheduler will (SO_REUSEADDR): the port of an earlier job's scheduler (ZeroMQ sets
    SO_REUSEADDR too), with a connection just closed, is no conflict for it."""
    with listening_socket(reuse=True) as srv:
        port = srv.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            conn, _ = srv.accept()
            conn.close()     # this side closes first: its end waits in TIME_WAIT (a plain bind there fails)
    code, out, err = launch(capsys, "-n", "1", "--port", str(port), "--dry-run", "--", "x")
    assert code == 0 and out.count(f"DMLC_PS_ROOT_PORT={port} ") == 3, err


# -- --workdir -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dry_run", [["--dry-run"], []])
def test_a_missing_workdir_is_named(capsys, tmp_path, dry_run):
    (tmp_path / "file").write_text("")
    for workdir in (tmp_path / "nonexist" / "dir", tmp_path / "file"):
        code, out, err = launch(capsys, "-n", "1", "--workdir", str(workdir), "--python", TRUE, *dry_run, "--",
                                PY, "-c", "pass")
        assert code == 2 and out == "" and "started" not in err   # nothing was started
        assert err == (f"error: --workdir {workdir}: not a directory on this machine, where the scheduler (without "
                       "-H, every process of the job) runs in it\n")


def test_a_job_whose_directory_vanished_names_the_directory(tmp_path):
    missing = tmp_path / "gone"
    job = Job([ProcSpec("scheduler", 0, [PY, "-c", "pass"], {})], workdir=str(missing))
    with pytest.raises(LaunchError, match=f"cannot start scheduler: {missing}: No such file or directory"):
        job.run()


# -- --env ---------------------------------------------------------------------------------------------------------
def test_env_applies_to_a_job_on_this_machine(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("NMT_TEST_FOO", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    worker = ("import os; open('env.out', 'w')"
              ".write(os.environ.get('NMT_TEST_FOO', '-') + os.environ['OMP_NUM_THREADS'])")
    code, _, err = launch(capsys, "-n", "1", "--env", "NMT_TEST_FOO=a b", "--env", "OMP_NUM_THREADS=1", "--python",
                          TRUE, "--workdir", str(tmp_path), "--timeout", "30", "--", PY, "-c", worker)
    assert code == 0, err
    assert (tmp_path / "env.out").read_text() == "a b1"
    code, out, _ = launch(capsys, "-n", "1", "--env", "NMT_TEST_FOO=a b", "--dry-run", "--", "x")
    assert code == 0 and out.count("'NMT_TEST_FOO=a b' ") == 3   # the dry run shows it for every process
    assert "OMP_NUM_THREADS" not in out            # what the processes inherit unchanged is not repeated


def test_env_applies_with_a_host_file_to_remote_and_local_processes(capsys, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1\n")
    code, out, _ = launch(capsys, "-n", "1", "-H", str(hosts), "--env", "NMT_TEST_FOO=bar", "--dry-run", "--", "x")
    scheduler, server, worker = out.split("\n# ")
    assert code == 0 and "NMT_TEST_FOO=bar " in scheduler        # the scheduler runs here
    assert "NMT_TEST_FOO=bar" in server and "NMT_TEST_FOO=bar" in worker


def test_a_bad_env_name_is_refused_without_a_host_file_too(capsys):
    code, _, err = launch(capsys, "-n", "1", "--env", "1bad name", "--dry-run", "--", "x")
    assert code == 2 and err == "error: --env '1bad name': expected NAME or NAME=VALUE\n"


# -- the scheduler's address ---------------------------------------------------------------------------------------
def test_a_host_without_a_route_is_named(capsys, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("nosuchhost.invalid\n")
    code, _, err = launch(capsys, "-n", "1", "-H", str(hosts), "--dry-run", "--", "x")
    assert code == 2 and err.startswith(f"error: -H {hosts}: no route to nosuchhost.invalid (")
    assert err.endswith("); check the host name, or give --scheduler-host\n")
