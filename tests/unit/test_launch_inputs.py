"""nmt-launch on bad input: an `error: ...` naming the flag (exit 2) before anything starts, never a traceback or a
message blaming something else; --env reaches the processes of a job on this machine too; and a scheduler or server
that fails after the workers fails the job. The real jobs here run stand-ins (`--python` true for scheduler and
server, one-line workers): no MXNet, a second or two."""
from __future__ import annotations

import re
import shutil
import signal
import socket
import sys
import time

import pytest

from nmt import launch as launcher
from nmt.distributed import Host, LaunchError, ProcSpec, read_hostfile
from nmt.job import Job

PY = sys.executable
TRUE = shutil.which("true")


def launch(capsys, *argv):
    """launcher.main in-process: (exit code, stdout, stderr)."""
    try:
        code = launcher.main(list(argv))
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


@pytest.mark.parametrize("flag", ["-n", "-s"])
def test_process_counts_are_bounded(capsys, flag):
    """`-n 99999999` (a typo) planned 99,999,999 processes without a word (with --dry-run: past 90 s)."""
    code, _, err = launch(capsys, "-n", "1", flag, "99999999", "--dry-run", "--", "x")
    assert code == 2 and "must be >= 1 and <= 1024 (got 99999999)" in err


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
    code, out, _ = launch(capsys, "-n", "1", "-H", str(hosts), "--dry-run", "--", "x")
    assert code == 0 and "\nssh -o BatchMode=yes" in out     # no --ssh: plain ssh


@pytest.mark.parametrize("dry_run", [["--dry-run"], []])
def test_ssh_without_a_host_file_is_refused(capsys, dry_run):
    """Without -H every process runs here and --ssh has nothing to do: a given one is a forgotten -H."""
    code, out, err = launch(capsys, "-n", "1", "--ssh", "ssh -i key", "--python", TRUE, *dry_run, "--", PY, "-c",
                            "pass")
    assert code == 2 and out == "" and "started" not in err
    assert err == ("error: --ssh 'ssh -i key' is used only with -H HOSTFILE (without it every process runs on this "
                   "machine): give -H HOSTFILE too, or leave --ssh out\n")


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


PORT_REFUSED = ("ps-lite takes PORT as a process's own port, the same one for every process of the job; leave it out "
                "(each process picks a free port, and --port sets the scheduler's)")
DMLC_REFUSED = ("the launcher sets the job's DMLC_* variables for each process itself; leave it out (-n, -s, "
                "--scheduler-host and --port set them)")


@pytest.mark.parametrize("item, why", [
    ("PORT=9000", PORT_REFUSED),
    ("PORT", PORT_REFUSED),
    ("DMLC_ROLE=worker", DMLC_REFUSED),
    ("DMLC_NUM_WORKER", DMLC_REFUSED),
    ("DMLC_PS_ROOT_PORT=9000", DMLC_REFUSED),
])
@pytest.mark.parametrize("dry_run", [["--dry-run"], []])
def test_env_that_ps_lite_reads_is_refused(capsys, monkeypatch, item, why, dry_run):
    monkeypatch.setenv("PORT", "8080")         # a NAME alone is refused whether it is set here or not
    monkeypatch.delenv("DMLC_NUM_WORKER", raising=False)
    code, out, err = launch(capsys, "-n", "1", "--env", item, "--python", TRUE, *dry_run, "--", PY, "-c", "pass")
    assert code == 2 and out == "" and "started" not in err
    assert err == f"error: --env {item!r}: {why}\n"


def test_env_may_choose_the_jobs_network_interface(capsys):
    code, out, err = launch(capsys, "-n", "1", "--env", "DMLC_INTERFACE=eth9", "--dry-run", "--", PY, "-c", "pass")
    assert code == 0 and out.count("DMLC_INTERFACE=eth9") == 3, err   # scheduler, server and worker


# -- the scheduler's address ---------------------------------------------------------------------------------------
def test_a_host_without_an_address_is_named(capsys, tmp_path):
    """(Each host is resolved before the scheduler's route to the first is looked up: an unknown name is one.)"""
    hosts = tmp_path / "hosts"
    hosts.write_text("nosuchhost.invalid\n")
    code, _, err = launch(capsys, "-n", "1", "-H", str(hosts), "--dry-run", "--", "x")
    assert code == 2 and err.startswith(f"error: -H {hosts}: host nosuchhost.invalid: no IPv4 address (")


def test_a_host_file_saved_by_notepad_names_its_hosts_without_the_byte_order_mark(capsys, tmp_path):
    """A host file with a UTF-8 byte-order mark and CRLF line ends (Windows Notepad's): the mark was read as part of
    the first host's name, which the address lookup took, but ssh was given it ('\ufeff127.0.0.1'), and the job
    failed on a host name that looked right."""
    hosts = tmp_path / "hosts"
    hosts.write_bytes(b"\xef\xbb\xbf127.0.0.1\r\n")
    code, out, err = launch(capsys, "-n", "1", "-H", str(hosts), "--dry-run", "--", "x")
    assert code == 0 and "\ufeff" not in out and "# server 0 on 127.0.0.1\n" in out, err


def test_a_host_file_in_utf16_is_named_so_with_the_command_converting_it(capsys, tmp_path):
    """Notepad's "Unicode" (UTF-16 with its byte-order mark) host file was "cannot read the host file ('utf-8' codec
    can't decode byte 0xff in position 0 ...)", and one without the mark was read, NUL bytes and all, into hosts
    named "1\x002\x007..." that no lookup found ("host  1 0 . 0 . 0 . 2 : no IPv4 address")."""
    import subprocess
    for encoding, said in (("utf-16", "UTF-16 (it starts with a UTF-16 byte-order mark)"),
                           ("utf-16-le", "UTF-16LE (or not text: NUL bytes fill its start)")):
        hosts = tmp_path / f"hosts.{encoding}"
        hosts.write_bytes("127.0.0.1\r\n10.0.0.2\r\n".encode(encoding))
        code, out, err = launch(capsys, "-n", "1", "-H", str(hosts), "--dry-run", "--", "x")
        assert code == 2 and f"-H {hosts}: the host file is {said}, not UTF-8: convert it, `iconv " in err, err
        assert "\x00" not in err
        command = re.search("`(iconv [^`]*> ([^`]*))`", err)
        subprocess.run(command[1], shell=True, check=True)
        assert read_hostfile(command[2]) == [Host("127.0.0.1", None), Host("10.0.0.2", None)]


# -- the scheduler and servers after the workers ---------------------------------------------------------------------
WAIT_FOR_THE_WORKERS = "import glob, time\nwhile len(glob.glob('done.*')) < 2: time.sleep(0.05)\ntime.sleep(0.3)\n"


@pytest.mark.parametrize("index, failing, code, exit_", [
    (0, "import sys; sys.exit(3)", 3, "exited with code 3"),
    (1, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9, "was killed by SIGKILL"),
])
def test_a_scheduler_or_server_failing_after_the_workers_fails_the_job(capsys, tmp_path, index, failing, code, exit_):
    """Both workers exit 0 first (each leaves a file); then the scheduler (index 0) or the server fails: the job
    fails with its code (128 + S for signal S), and the launcher names it."""
    fine = "import time; time.sleep(60)"      # the other one lingers, as ps-lite's do: killed, no failure
    specs = [ProcSpec("scheduler", 0, [PY, "-c", fine], {}), ProcSpec("server", 0, [PY, "-c", fine], {}),
             *(ProcSpec("worker", i, [PY, "-c", f"open('done.{i}', 'w').close()"], {}) for i in range(2))]
    specs[index].argv = [PY, "-c", WAIT_FOR_THE_WORKERS + failing]
    job = Job(specs, workdir=str(tmp_path))
    t0 = time.monotonic()
    assert job.run() == code
    assert time.monotonic() - t0 < 20        # the failure ends the wait for the other one at once
    err = capsys.readouterr().err
    label = specs[index].label
    assert f"{label} (pid {job.procs[index].pid}) {exit_} after all workers finished; stopping the other 1 " in err


def test_a_scheduler_still_running_after_the_workers_is_killed_and_the_job_succeeds(capsys, tmp_path):
    job = Job([ProcSpec("scheduler", 0, [PY, "-c", "import time; time.sleep(60)"], {}),
               ProcSpec("server", 0, [PY, "-c", WAIT_FOR_THE_WORKERS], {}),
               *(ProcSpec("worker", i, [PY, "-c", f"open('done.{i}', 'w').close()"], {}) for i in range(2))],
              workdir=str(tmp_path), server_wait=2.0)
    assert job.run() == 0
    assert "scheduler still running 2 s after all workers finished; killing it" in capsys.readouterr().err
    assert job.procs[0].returncode == -signal.SIGTERM and job.procs[1].returncode == 0


def test_a_broken_mxnet_is_one_line_per_scheduler_or_server_not_a_traceback(capfd, tmp_path, monkeypatch):
    """An MXNet whose import fails (here a stand-in `mxnet` package first on PYTHONPATH): the scheduler's and
    servers' `python -c "import mxnet"` printed a traceback each; now each says it in one line naming its role, the
    interpreter and the error, and the launcher names the process that failed first."""
    (tmp_path / "site" / "mxnet").mkdir(parents=True)
    (tmp_path / "site" / "mxnet" / "__init__.py").write_text("raise ImportError('libmxnet.so: cannot open shared "
                                                             "object file\\nmore lines of advice')")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    code = launcher.main(["-n", "1", "-s", "2", "--workdir", str(tmp_path), "--timeout", "30", "--",
                          PY, "-c", "import time; time.sleep(30)"])
    err = capfd.readouterr().err
    assert code == 1 and "Traceback" not in err
    *errors, last = [line for line in err.splitlines() if not line.startswith("nmt-launch: started ")]
    failed = re.fullmatch(r"nmt-launch: (scheduler|server) [01 ]*\(pid \d+\) exited with code 1; .*", last)
    said = {role: f"error: {role}: import mxnet failed in {PY} (ImportError: libmxnet.so: cannot open shared object "
                  "file)" for role in ("scheduler", "server")}
    assert failed and said[failed[1]] in errors and set(errors) <= set(said.values())   # (and the others stopped)


def test_a_dry_run_with_stdout_closed_is_refused(capsys, monkeypatch):
    """`nmt-launch --dry-run ... >&-` printed the job's commands into nothing, exit 0: they are its output."""
    monkeypatch.setattr("nmt.commands.CLOSED", {"stdout"})
    assert launcher.main(["-n", "1", "--dry-run", "--", sys.executable, "-c", "1"]) == 2
    assert capsys.readouterr().err == ("error: standard output is closed (the command was started with >&-): "
                                       "redirect it to a file, or to /dev/null\n")
