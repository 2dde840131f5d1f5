"""scripts/benchmark_arch.py and scripts/benchmark_train.py refuse bad arguments before they read any data (their
runs on the real corpora are in tests/system)."""
import importlib
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _script(monkeypatch, name: str):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    return importlib.import_module(name)


def test_benchmark_arch_refuses_bad_arguments(monkeypatch):
    from nmt.config import ConfigError
    with pytest.raises(ConfigError, match="--repeats, --batch-size and --sgemm-size must be >= 1"):
        _script(monkeypatch, "benchmark_arch").main(["--repeats", "0"])


@pytest.mark.parametrize("name, argv, said", [
    ("benchmark_arch", ["--repeats", "0"], "--repeats, --batch-size and --sgemm-size must be >= 1, --warmup and "
                                           "--updates >= 0"),
    ("benchmark_train", ["--amp"], "--amp needs --gpus: automatic mixed precision is a GPU feature (float16 kernels)"),
    ("benchmark_train", ["--devices", "2"], "--devices must include 1: every count is compared with one device"),
    ("benchmark_train", ["--devices", "1,2", "--gpus", "0"], "--devices asks for 2 GPUs but --gpus lists 1")])
def test_a_bad_flag_of_benchmark_arch_or_train_exits_with_2(monkeypatch, capsys, name, argv, said):
    """These ended with exit code 1 (a SystemExit of the message), where the scripts' other bad flags, as the
    commands', give one `error:` line and exit code 2."""
    from nmt.commands import run_cli
    bench = _script(monkeypatch, name)
    assert run_cli(lambda: bench.main(argv)) == 2
    assert capsys.readouterr().err == f"error: {said}\n"


def test_benchmark_serve_refuses_a_wait_the_server_would_refuse(monkeypatch, capsys):
    """--max-wait-ms was checked only by the server it starts, after the model and sentences were loaded."""
    bench = _script(monkeypatch, "benchmark_serve")
    for wait, said in (("60000", "--max-wait-ms 60000 is not shorter than the server's timeout of 60 s"),
                       ("-1", "argument --max-wait-ms: must be >= 0")):
        with pytest.raises(SystemExit) as e:
            bench.parse_args(["--model-dir", "m", "--max-wait-ms", wait])
        assert e.value.code == 2 and said in capsys.readouterr().err
    assert bench.parse_args(["--model-dir", "m", "--max-wait-ms", "59999"]).max_wait_ms == 59999


def test_benchmark_train_refuses_bad_arguments(monkeypatch, capsys):
    bench = _script(monkeypatch, "benchmark_train")
    from nmt.config import ConfigError
    with pytest.raises(ConfigError, match="--devices must include 1"):
        bench.main(["--devices", "2"])
    with pytest.raises(ConfigError, match="--amp needs --gpus"):
        bench.main(["--amp"])
    for flag, value in (("--repeats", "0"), ("--updates", "-1"), ("--warmup", "-1")):   # (a median of nothing, a
        with pytest.raises(SystemExit):                                                  # division by 0, at the end)
            bench.main([flag, value])
        assert f"argument {flag}: must be >= " in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--batch-sizes", "0"])
    assert "expected comma-separated positive integers" in capsys.readouterr().err


def test_benchmark_train_refuses_a_plot_in_no_image_format(monkeypatch, capsys, tmp_path):
    """--plot times.txt ended the benchmark, after its measurement, in matplotlib's traceback ("Format 'txt' is not
    supported"), the figures lost unless --json was given."""
    from nmt.commands import run_cli
    bench = _script(monkeypatch, "benchmark_train")
    assert run_cli(lambda: bench.main(["--plot", str(tmp_path / "times.txt")])) == 2
    assert capsys.readouterr().err.startswith(f"error: --plot {tmp_path / 'times.txt'}: no image format is named "
                                              "'.txt'; give one of .eps, .jpeg, .jpg, .pdf, .png, ")


def test_benchmark_ab_refuses_no_rounds(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        _script(monkeypatch, "benchmark_ab").main(["--a", str(REPO), "--b", str(REPO), "--rounds", "0"])
    assert "--rounds must be >= 1, got 0" in capsys.readouterr().err


def test_benchmark_ab_runs_both_where_it_runs_and_keeps_its_own_flags(monkeypatch, capsys, tmp_path):
    """`-- --data-dir data` was looked up in each checkout (the worker's traceback, then benchmark_ab's), and `-- --json
    out.json` went into checkout A, then a FileNotFoundError: relative paths are the caller's, --json is refused after
    --, and a failing run is one line naming it. Each checkout's commit is recorded."""
    import subprocess
    import sys
    bench = _script(monkeypatch, "benchmark_ab")
    with pytest.raises(SystemExit):
        bench.main(["--a", str(REPO), "--b", str(REPO), "--", "--json", "x.json"])
    assert "--json after --: this script sets it for both runs" in capsys.readouterr().err
    with pytest.raises(SystemExit):   # (an older checkout's benchmark_train took the prefix for --json)
        bench.main(["--a", str(REPO), "--b", str(REPO), "--", "--js=x.json"])
    assert "--js after --: this script sets it for both runs (give --json before --)" in capsys.readouterr().err
    with pytest.raises(SystemExit):   # a flag benchmark_ab does not take: not "give it before --"
        bench.main(["--a", str(REPO), "--b", str(REPO), "--", "--repeats", "1"])
    assert capsys.readouterr().err.endswith("--repeats after --: this script sets it for both runs\n")
    with pytest.raises(SystemExit):   # (it passes no --plot: "sets it" was wrong)
        bench.main(["--a", str(REPO), "--b", str(REPO), "--", "--plot", "x.png"])
    assert capsys.readouterr().err.endswith("--plot after --: the two runs would write one plot over the other: "
                                            "leave it out\n")
    with pytest.raises(SystemExit):   # an abbreviation of it is no flag of benchmark_train's
        _script(monkeypatch, "benchmark_train").parse_args(["--js", "x.json"])
    assert "unrecognized arguments: --js x.json" in capsys.readouterr().err
    p = subprocess.run([sys.executable, REPO / "scripts" / "benchmark_ab.py", "--a", str(REPO), "--b", str(REPO),
                        "--rounds", "1", "--", "--data-dir", "data"], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert p.returncode == 1 and f"--data-dir {tmp_path / 'data'}: no such directory" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr   # (the worker's, and benchmark_ab's CalledProcessError)
    assert p.stderr.splitlines()[-1] == f"error: {REPO / 'scripts' / 'benchmark_train.py'} failed (exit 1; its " \
        "error is above)"
    conditions = _script(monkeypatch, "conditions")
    assert conditions.commit_of(tmp_path) == "" and len(conditions.commit_of(REPO).rstrip("+")) in (0, 40)


def test_benchmark_ab_stopped_stops_the_benchmark_and_its_workers(tmp_path):
    """SIGTERM to benchmark_ab left benchmark_train's spawned worker training at 95% CPU, an orphan of PID 1:
    benchmark_ab's child was killed before it could end its workers. A checkout whose benchmark spawns a worker that
    sleeps stands for it here: both are gone within seconds of the signal."""
    import os
    import signal
    import subprocess
    import sys
    import time
    fake = tmp_path / "checkout" / "scripts"
    fake.mkdir(parents=True)
    (fake / "benchmark_train.py").write_text(
        "import subprocess, sys, time\n"
        f"w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(tmp_path / 'worker')!r}, 'w').write(str(w.pid))\n"
        "time.sleep(300)\n")
    ab = subprocess.Popen([sys.executable, str(REPO / "scripts" / "benchmark_ab.py"), "--a", str(fake.parent), "--b",
                           str(fake.parent), "--rounds", "1"], stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            if (tmp_path / "worker").is_file() and (tmp_path / "worker").read_text():
                break
            time.sleep(0.1)
        worker = int((tmp_path / "worker").read_text())
        ab.send_signal(signal.SIGTERM)
        assert ab.wait(timeout=60) != 0
        for _ in range(100):   # (reaped by init once its parent is gone)
            if not os.path.exists(f"/proc/{worker}") or "Z" in open(f"/proc/{worker}/stat").read().split()[2]:
                break
            time.sleep(0.1)
        else:
            os.kill(worker, signal.SIGKILL)
            raise AssertionError("the benchmark's worker outlived benchmark_ab")
    finally:
        ab.kill()


def test_benchmark_ab_stopped_as_it_starts_a_run_stops_that_run(monkeypatch, tmp_path):
    """A SIGTERM that came while benchmark_ab was still in subprocess.Popen (its child started: under load that child
    had spawned its worker by then) raised before run_once knew the child, which was left running with its worker,
    and the test above failed once ("the benchmark's worker outlived benchmark_ab"). A Popen stopped just before it
    returns stands for that moment: the run it started is stopped too."""
    import signal
    import subprocess
    import sys
    from nmt.commands import Terminated
    from nmt.signals import terminated_as_interrupt
    ab, real, started = _script(monkeypatch, "benchmark_ab"), subprocess.Popen, []

    def stopped_popen(cmd, **kw):   # (a child that sleeps stands for benchmark_train)
        started.append(real([sys.executable, "-c", "import time; time.sleep(300)"], **kw))
        signal.raise_signal(signal.SIGTERM)   # (its handler runs before this returns)
        return started[-1]
    monkeypatch.setattr(subprocess, "Popen", stopped_popen)
    try:
        with pytest.raises(Terminated), terminated_as_interrupt():
            ab.run_once(tmp_path, [], tmp_path / "a.json")
        assert started[0].poll() == -signal.SIGTERM, "the run benchmark_ab was starting outlived it"
    finally:
        started[0].kill()
        started[0].wait()


def test_benchmark_ab_stopped_twice_as_it_starts_a_run_stops_that_run(monkeypatch, tmp_path):
    """As above, with a second signal (Ctrl-C pressed twice, or SIGTERM then SIGINT) while Popen still runs: the
    second acted at once there, raised before run_once knew the child, and the run was left going."""
    import signal
    import subprocess
    import sys
    from nmt.commands import Terminated
    from nmt.signals import terminated_as_interrupt
    ab, real, started = _script(monkeypatch, "benchmark_ab"), subprocess.Popen, []

    def stopped_popen(cmd, **kw):
        started.append(real([sys.executable, "-c", "import time; time.sleep(300)"], **kw))
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
        return started[-1]
    monkeypatch.setattr(subprocess, "Popen", stopped_popen)
    try:
        with pytest.raises(KeyboardInterrupt) as e, terminated_as_interrupt():
            ab.run_once(tmp_path, [], tmp_path / "a.json")
        assert isinstance(e.value, Terminated)   # (the first signal's)
        assert started[0].wait(timeout=10) == -signal.SIGTERM, "the run benchmark_ab was starting outlived it"
    finally:
        started[0].kill()
        started[0].wait()


def test_benchmark_ab_whose_run_cannot_start_raises_why(monkeypatch, tmp_path):
    """A run that could not start (Popen's OSError: fork's EAGAIN under a process limit, an interpreter gone) is that
    error; stopping the run it did not start (stop_group of no process) was an AttributeError in its place."""
    import subprocess
    ab = _script(monkeypatch, "benchmark_ab")

    def failing(cmd, **kw):
        raise BlockingIOError(11, "Resource temporarily unavailable")
    monkeypatch.setattr(subprocess, "Popen", failing)
    with pytest.raises(SystemExit, match="cannot start .*: Resource temporarily unavailable$"):
        ab.run_once(tmp_path, [], tmp_path / "a.json")


def test_benchmark_ab_starts_each_run_in_its_own_session_without_its_output(monkeypatch, capfd, tmp_path):
    """`_started` (what benchmark_ab runs each checkout's benchmark with) keeps the run's stdout out of the rounds it
    prints (only its errors, on stderr, come through) and starts it in its own session, whose group a stop ends."""
    import sys
    import time
    bench = _script(monkeypatch, "benchmark_ab")
    ready = tmp_path / "ready"
    proc = bench._started([sys.executable, "-c", "import sys, time; print('figures', flush=True); "
                           f"print('why', file=sys.stderr, flush=True); open({str(ready)!r}, 'w').close(); "
                           "time.sleep(60)"], dict(os.environ))
    try:
        assert os.getsid(proc.pid) == proc.pid and os.getpgid(proc.pid) == proc.pid
        deadline = time.monotonic() + 30
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        bench.stop_group(proc, 15)
        if proc.poll() is None and os.getpgid(proc.pid) != proc.pid:   # (not in a group of its own: only it)
            proc.kill()
        proc.wait(timeout=30)
    out, err = capfd.readouterr()
    assert ready.exists() and "figures" not in out and "why" in err


@pytest.mark.parametrize("lost", ["removed", "not executable"])
def test_benchmark_ab_whose_interpreter_is_lost_says_what_it_could_not_start(tmp_path, lost):
    """The interpreter benchmark_ab runs every checkout's benchmark with, gone (its virtual environment removed
    between two runs) or no longer executable, was Popen's FileNotFoundError or PermissionError: a traceback, exit 1.
    Checkout A's benchmark does that to the interpreter here; B's run then cannot start."""
    import shutil
    import subprocess
    import sys
    python = tmp_path / "venv" / "python"   # (a copy: its mode is its own, not the system's interpreter's)
    python.parent.mkdir()
    shutil.copy(os.path.realpath(sys.executable), python)
    lose = f"os.unlink({str(python)!r})" if lost == "removed" else f"os.chmod({str(python)!r}, 0o644)"
    (tmp_path / "a" / "scripts").mkdir(parents=True)
    (tmp_path / "a" / "scripts" / "benchmark_train.py").write_text(
        f"import json, os, sys\n{lose}\n"
        "open(sys.argv[sys.argv.index('--json') + 1], 'w').write(json.dumps({'train': [{'tok_per_s': 1.0}]}))\n")
    (tmp_path / "b").mkdir()
    shutil.copytree(tmp_path / "a" / "scripts", tmp_path / "b" / "scripts")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), *sys.path[1:]]))   # (this one's packages)
    p = subprocess.run([str(python), REPO / "scripts" / "benchmark_ab.py", "--a", str(tmp_path / "a"), "--b",
                        str(tmp_path / "b"), "--rounds", "1"], capture_output=True, text=True, timeout=120, env=env)
    why = "No such file or directory" if lost == "removed" else "Permission denied"
    assert p.returncode == 1 and p.stderr == (
        f"error: cannot start {python} (the interpreter this script runs with, which runs both checkouts' "
        f"benchmarks) on {tmp_path / 'b' / 'scripts' / 'benchmark_train.py'}: {why}\n"), p.stderr


def test_benchmark_ab_stopped_as_its_run_ends_says_interrupted(monkeypatch, tmp_path):
    """A Ctrl-C (or SIGTERM) that came as the run was ending: subprocess's Popen.wait, interrupted, waits 0.25 s more
    for the child, which ended and was reaped in that time (its process group gone), and benchmark_ab's
    os.killpg(run, SIGTERM) then failed, a ProcessLookupError traceback and exit 1 instead of "interrupted"."""
    import signal
    import subprocess
    import threading
    ab, real = _script(monkeypatch, "benchmark_ab"), subprocess.Popen
    # (a child that ends 0.1 s after the interrupt stands for a run that was about to end)
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, **kw: real(["sleep", "0.15"], **kw))
    timer = threading.Timer(0.05, signal.raise_signal, (signal.SIGINT,))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            ab.run_once(tmp_path, [], tmp_path / "a.json")
    finally:
        timer.cancel()


def test_benchmark_data_refuses_bad_arguments_and_names_bad_data_in_one_line(monkeypatch, capsys, tmp_path):
    """--repeats 0 was statistics.median of nothing; --synthetic-pairs 0 ran the recipe's benchmark instead; an
    unknown recipe or a missing --data-dir were tracebacks."""
    import subprocess
    import sys
    bench = _script(monkeypatch, "benchmark_data")
    for flag, value, says in (("--repeats", "0", ">= 1"), ("--synthetic-pairs", "0", ">= 1000")):
        with pytest.raises(SystemExit):
            bench.main([flag, value])
        assert f"argument {flag}: must be {says} (got {value})" in capsys.readouterr().err
    with pytest.raises(SystemExit):   # ignored without a word
        bench.main(["--synthetic-pairs", "1500", "--work-dir", str(tmp_path), "--json", str(tmp_path / "x.json"),
                    "--recipe=no-such-recipe"])   # (--json: were the check gone, results/ would be written)
    assert "--recipe is a setting of the recipe's benchmark, not of --synthetic-pairs" in capsys.readouterr().err
    with pytest.raises(SystemExit):   # (--rec, an abbreviation, slipped past the check)
        bench.main(["--synthetic-pairs", "1500", "--work-dir", str(tmp_path), "--json", str(tmp_path / "x.json"),
                    "--rec", "x"])
    assert "unrecognized arguments: --rec x" in capsys.readouterr().err
    p = subprocess.run([sys.executable, REPO / "scripts" / "benchmark_data.py", "--recipe", "bogus", "--data-dir",
                        str(tmp_path), "--repeats", "1"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("error: --recipe 'bogus': unknown recipe"), p.stderr


def test_benchmark_data_refuses_a_work_dir_in_a_model_directory(monkeypatch, tmp_path):
    """--work-dir in a model directory (or inside one) was written into: its corpus then stopped `nmt-train
    --overwrite` on the directory ("it holds what no run writes: 1000"). A run's directory (its train.log, state.json
    or a checkpoint), an export, also through a symbolic link, is refused before anything is written."""
    from nmt.config import ConfigError
    bench = _script(monkeypatch, "benchmark_data")
    run, export, other = tmp_path / "run", tmp_path / "export", tmp_path / "other"
    for d, names in ((run, ("train.log", "train.lock")), (export, ("export.json", "params.best")),
                     (other, ("config.json",))):   # (a config alone: yours)
        d.mkdir()
        for name in names:
            (d / name).write_text("")
    (tmp_path / "link").symlink_to(run)
    for work, said in ((run, f"{run} is a model directory"), (run / "sub", f"is inside {run}, a model directory"),
                       (tmp_path / "link" / "sub", f"is inside {tmp_path / 'link'}, a model directory"),
                       (export, f"{export} is an export (nmt-export)")):
        with pytest.raises(ConfigError, match="would stop --overwrite from replacing it") as e:
            bench.main(["--synthetic-pairs", "1500", "--work-dir", str(work), "--json", str(tmp_path / "x.json")])
        assert f"--work-dir {work} " in str(e.value) and said in str(e.value), e.value
    assert sorted(p.name for p in run.iterdir()) == ["train.lock", "train.log"] and not (tmp_path / "x.json").exists()
    from scripts import conditions
    conditions.check_work_dir("--work-dir", other / "sub")   # (no run there)
    (run / "sub").mkdir()
    (tmp_path / "deep").symlink_to(run / "sub")   # (a link to a directory inside a run: its parents are the run's)
    with pytest.raises(ConfigError, match=f"--work-dir {tmp_path / 'deep' / 'x'} is inside {run}, a model directory"):
        conditions.check_work_dir("--work-dir", tmp_path / "deep" / "x")
    with pytest.raises(ConfigError, match=f"--work-dir {other} is a model directory"):   # (a run's log alone: itself)
        (other / "train.log").write_text("")
        conditions.check_work_dir("--work-dir", other)


def test_benchmark_data_takes_a_work_dir_below_a_log_that_no_run_wrote(tmp_path):
    """`nmt-train ... | tee train.log` in a project directory (or $TMPDIR) made every --work-dir below it "inside
    a model directory", the default /tmp/nmt-bench-data too: above the work directory only what nmt alone writes (a
    run's train.lock, a checkpoint, an export.json beside params.best) tells a model directory."""
    from scripts import conditions
    project = tmp_path / "project"
    project.mkdir()
    for name in ("train.log", "state.json", "export.json", "config.json"):   # (other programs' files too)
        (project / name).write_text("")
    conditions.check_work_dir("--work-dir", project / "nmt-bench-data")
    conditions.check_work_dir("--work-dir", project / "bench" / "deeper")


def test_results_table_refuses_a_negative_example_count(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        _script(monkeypatch, "results_table").main(["some-dir", "--examples", "-1"])
    assert "argument --examples: must be >= 0 (got -1)" in capsys.readouterr().err



def test_results_table_refuses_a_checkpoint_or_test_set_no_run_has(tmp_path, capsys, monkeypatch):
    """--checkpoint bogus printed an empty table and --ablation-test with a typo a column of dashes, exit 0."""
    import json
    from nmt.config import Config
    run = tmp_path / "run"
    run.mkdir()
    Config().save(run / "config.json")
    (run / "state.json").write_text(json.dumps({"step": 10, "elapsed": 60.0, "stopped": "max_steps"}))
    (run / "scores.json").write_text(json.dumps({"tatoeba-test": {"best": {"bleu": 1.0, "chrf": 2.0}}}))
    table = _script(monkeypatch, "results_table")
    assert table.main([str(run)]) == 0
    capsys.readouterr()
    assert table.main([str(run), "--checkpoint", "500"]) == 2
    assert "error: --checkpoint 500: no run has its scores (test sets scored: tatoeba-test)" in capsys.readouterr().err
    (run / "scores.json").write_text(json.dumps({"tatoeba-test": {"best": {"bleu": 1.0, "chrf": 2.0, "step": 500}}}))
    assert table.main([str(run), "--checkpoint", "500"]) == 0   # the best's step: its scores are under "best"
    assert "| 1.00 |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:   # (not "no run has its scores": no run could have)
        table.main([str(run), "--checkpoint", "bogus"])
    assert e.value.code == 2
    assert "argument --checkpoint: 'bogus': use best, latest, avg or a step number" in capsys.readouterr().err
    assert table.main([str(run), "--ablation-base", str(run), "--ablation-test", "tatoeba-tset"]) == 2
    assert "error: --ablation-test tatoeba-tset: no run has scores of that test set" in capsys.readouterr().err


def test_results_table_names_a_decoding_report_it_cannot_read(tmp_path, capsys, monkeypatch):
    """A missing --decode-ablations file was told as "error: [Errno 2] No such file or directory: '...'", a file
    not in UTF-8 by the codec's words alone, neither naming the flag."""
    from nmt.config import Config
    run = tmp_path / "run"
    run.mkdir()
    Config().save(run / "config.json")
    (run / "state.json").write_text('{"step": 10, "elapsed": 60.0, "stopped": "max_steps"}')
    (run / "scores.json").write_text('{"tatoeba-test": {"best": {"bleu": 1.0, "chrf": 2.0}}}')
    (tmp_path / "latin1.json").write_bytes(b"{\"model_dir\": \"caf\xe9\"}")
    table = _script(monkeypatch, "results_table")
    for name, why in (("missing.json", "No such file or directory"), ("latin1.json", "'utf-8' codec can't decode")):
        argv = [str(run), "--ablation-base", str(run), "--decode-ablations", str(tmp_path / name)]
        assert table.main(argv) == 2
        assert capsys.readouterr().err.startswith(f"error: --decode-ablations {tmp_path / name}: cannot read it ({why}")


def test_results_table_writes_curves_in_the_format_their_suffix_names(tmp_path, capsys, monkeypatch):
    """--curves curves.svg wrote PNG bytes into the .svg file, --curves curves.txt too (exit 0)."""
    from nmt.config import Config
    run = tmp_path / "run"
    run.mkdir()
    Config().save(run / "config.json")
    (run / "state.json").write_text('{"step": 10, "elapsed": 60.0, "stopped": "max_steps"}')
    (run / "scores.json").write_text('{"tatoeba-test": {"best": {"bleu": 1.0, "chrf": 2.0}}}')
    (run / "metrics.jsonl").write_text('{"step": 10, "elapsed": 60.0, "train_loss": 5.0, "dev_bleu": 1.0}\n')
    table = _script(monkeypatch, "results_table")
    assert table.main([str(run), "--curves", str(tmp_path / "curves.svg")]) == 0
    assert b"<svg" in (tmp_path / "curves.svg").read_bytes()[:1000]
    assert table.main([str(run), "--curves", str(tmp_path / "curves.txt")]) == 2
    assert capsys.readouterr().err.startswith(f"error: --curves {tmp_path / 'curves.txt'}: no image format is named "
                                              "'.txt'; give one of .eps, .jpeg, .jpg, .pdf, .png, ")
    assert not (tmp_path / "curves.txt").exists()


@pytest.mark.parametrize("name", ["rows.json.gz", "rows.json.xz"])
def test_a_report_named_as_compressed_is_refused(tmp_path, capsys, monkeypatch, name):
    """results_table.py --json rows.json.gz (as every script's report) wrote plain JSON under the .gz name, which
    zcat then refused."""
    table = _script(monkeypatch, "results_table")
    assert table.main([str(tmp_path / "no-run"), "--json", str(tmp_path / name)]) == 2
    assert capsys.readouterr().err == (f"error: --json {tmp_path / name}: a report is written uncompressed; give a "
                                       f"name without {name[-3:]} (and compress the file afterwards)\n")
    assert not (tmp_path / name).exists()


def test_benchmark_serve_refuses_counts_that_measure_nothing(monkeypatch, capsys):
    """--seconds 0 wrote figures of zero (by default over the tracked results/benchmark_serve.json); --clients 0
    ended after the offline rounds with an error naming a flag the script has not."""
    bench = _script(monkeypatch, "benchmark_serve")
    for flag, value, says in (("--seconds", "0", "> 0"), ("--clients", "0", ">= 1"), ("--rounds", "0", ">= 1"),
                              ("--beam-size", "0", ">= 1")):   # (0 was the model's beam; -3 a traceback)
        with pytest.raises(SystemExit):
            bench.main(["--model-dir", "m", flag, value])
        assert f"argument {flag}: must be {says} (got {value})" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["benchmark_decode.py", "--model-dir", "M", "--output", "{file}/d.json"],
    ["benchmark_train.py", "--json", "{file}/t.json"], ["benchmark_train.py", "--plot", "{file}/t.png"],
    ["benchmark_serve.py", "--model-dir", "M", "--json", "{file}/s.json"],
    ["benchmark_arch.py", "--json", "{file}/a.json"], ["benchmark_data.py", "--json", "{file}/d.json"],
    ["benchmark_ab.py", "--a", str(REPO), "--b", str(REPO), "--json", "{file}/x.json"],
    ["benchmark_data.py", "--synthetic-pairs", "1000", "--work-dir", "{file}"],
    ["benchmark_translate.py", "--model-dir", "M", "--json", "{file}/t.json"]])
def test_a_report_that_cannot_be_written_is_named_before_measuring(argv, tmp_path):
    """Seven benchmarks made their report's directory after the measurement (minutes of it): a path through a file
    (or /proc) ended them in a traceback, and the figures were lost."""
    import os
    import subprocess
    import sys
    (tmp_path / "afile").write_text("")
    argv = [a.replace("{file}", str(tmp_path / "afile")) for a in argv]
    p = subprocess.run([sys.executable, str(REPO / "scripts" / argv[0]), *argv[1:]], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert p.returncode == 2 and p.stderr.startswith(f"error: {argv[-2]} {tmp_path / 'afile'}") and "Traceback" \
        not in p.stderr, p.stderr   # (the flag named, each argv's last but one)


def test_benchmark_translate_refuses_a_negative_warm_up(monkeypatch, capsys):
    """--warmup -1 warmed up on all sentences but one (lines[:-1]), changing what each configuration's time holds."""
    with pytest.raises(SystemExit):
        _script(monkeypatch, "benchmark_translate").main(["--model-dir", "m", "--warmup", "-1"])
    assert "argument --warmup: must be >= 0 (got -1)" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["benchmark_decode.py", "--model-dir", "{run}", "--output", "{run}/config.json"],
    ["benchmark_decode.py", "--model-dir", "M", "--other-model-dir", "{run}", "--output", "{run}/params.best"],
    ["benchmark_decode.py", "--model-dir", "M", "--src-file", "{run}/in.ko", "--output", "{run}/in.ko"],
    ["benchmark_serve.py", "--model-dir", "{run}", "--json", "{run}/metrics.jsonl"],
    ["benchmark_translate.py", "--model-dir", "{run}", "--json", "{run}/scores.json"],
    ["results_table.py", "{run}", "--markdown", "{run}/state.json"],
    ["results_table.py", "M", "--ablation-base", "{run}", "--curves", "{run}/params.best"],
    ["benchmark_train.py", "--json", "{run}/t.json", "--plot", "{run}/t.json"]])
def test_a_report_over_a_model_file_an_input_or_another_report_is_refused(argv, tmp_path):
    """The benchmarks and results_table.py wrote their report over any file it named: a file of the model directory
    they read (`benchmark_decode.py --model-dir M --output M/config.json` left M unloadable) or their --src-file,
    which the commands refuse; benchmark_train.py's --json and --plot on one file ended in a traceback after the
    measurement."""
    import subprocess
    import sys
    run = tmp_path / "run"
    run.mkdir()
    files = {name: f"{name} of the run\n" for name in ("config.json", "params.best", "metrics.jsonl", "scores.json",
                                                       "state.json", "in.ko")}
    for name, text in files.items():
        (run / name).write_text(text)
    argv = [a.replace("{run}", str(run)) for a in argv]
    p = subprocess.run([sys.executable, str(REPO / "scripts" / argv[0]), *argv[1:]], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert p.returncode == 2 and p.stderr.startswith(f"error: {argv[-2]} {argv[-1]} is ") and "Traceback" \
        not in p.stderr, p.stderr
    assert {name: (run / name).read_text() for name in files} == files


def test_a_report_inside_a_model_directory_is_refused(monkeypatch, capsys, tmp_path):
    """A report written into a model directory (or an export, or a directory below one) that was not one of its files
    was accepted, and the stray file then made nmt-train --overwrite refuse the run ("it holds what no run writes").
    The directory is judged as benchmark_data.py judges one above its --work-dir: a project directory with a
    `tee train.log` of its own is not a run."""
    from nmt.commands import run_cli
    from nmt.config import ConfigError
    from nmt.dirlock import check_model_dir
    from scripts import conditions
    run, export, project = tmp_path / "run", tmp_path / "export", tmp_path / "project"
    for d, names in ((run, ("train.log", "train.lock")), (export, ("export.json", "params.best")),
                     (project, ("train.log", "state.json"))):
        d.mkdir()
        for name in names:
            (d / name).write_text("")
    (run / "tensorboard").mkdir()
    for report, where, what in ((run / "bench.json", run, "a model directory"),
                                (run / "tensorboard" / "plots" / "t.png", run, "a model directory"),
                                (export / "bench.json", export, "an export (nmt-export)")):
        with pytest.raises(ConfigError, match="would stop --overwrite from replacing it") as e:
            conditions.check_outputs(plot=report)
        assert str(e.value).startswith(f"--plot {report} is inside {where}, {what}: "), e.value
    table = _script(monkeypatch, "results_table")
    assert run_cli(lambda: table.main([str(run), "--json", str(run / "rows.json")])) == 2
    assert capsys.readouterr().err == (f"error: --json {run / 'rows.json'} is inside {run}, a model directory: a "
                                       "report there would stop --overwrite from replacing it; write it outside any "
                                       "model directory\n")
    assert sorted(p.name for p in run.iterdir()) == ["tensorboard", "train.lock", "train.log"]
    check_model_dir(run, resume=False, overwrite=True)   # (what a report there would have stopped)
    conditions.check_outputs(json=tmp_path / "bench.json", plot=project / "t.png")   # beside a run; no run there


def test_results_tables_docs_page_is_checked_as_its_reports_are(monkeypatch, capsys, tmp_path):
    """results_table.py --docs was written unchecked, alone or after the tables: into a model directory (whose
    --overwrite it then stopped, as any report there), and over a file of one, its config.json replaced by the page."""
    from nmt.commands import run_cli
    table = _script(monkeypatch, "results_table")
    run, results = tmp_path / "run", tmp_path / "results"
    for d in (run, results):
        d.mkdir()
    files = {"train.lock": "", "config.json": "{}"}
    for name, text in files.items():
        (run / name).write_text(text)
    (results / "results.md").write_text("| run | BLEU |\n")
    for runs in ([], [str(run)]):
        for page in (run / "config.json", run / "notes.md"):
            argv = [*runs, "--docs", str(page), "--results-dir", str(results)]
            assert run_cli(lambda: table.main(argv)) == 2, argv
            err = capsys.readouterr().err
            assert err.startswith(f"error: --docs {page} is ") and "\n" not in err.rstrip("\n"), err
    assert {p.name: p.read_text() for p in run.iterdir()} == files
    assert run_cli(lambda: table.main(["--docs", str(tmp_path / "results.md"), "--results-dir", str(results)])) == 0


def test_benchmark_train_writes_its_plot_where_it_is_named(monkeypatch, tmp_path):
    """--plot times (no suffix) was checked as "times" (check_outputs: not a model's file, not --json's) but
    matplotlib's savefig added ".png" and wrote times.png, over a --json times.png it was not compared with; an
    explicit format writes the file named, PNG without a suffix as check_image says."""
    bench = _script(monkeypatch, "benchmark_train")
    rows = [{"batch_size": 64, "num_devices": n, "ms_per_update": 10.0 / n, "speedup": float(n)} for n in (1, 2)]
    for name in ("times", "times.svg"):
        bench.plot(rows, tmp_path / name, "title")
    assert sorted(os.listdir(tmp_path)) == ["times", "times.svg"]
    assert (tmp_path / "times").read_bytes().startswith(b"\x89PNG") and b"<svg" in (tmp_path / "times.svg").read_bytes()


def test_a_report_named_dash_is_refused_not_written_as_a_file(monkeypatch, capsys, tmp_path):
    """check_outputs let "-" through unchecked, as if it were standard output, but no script writes a report there:
    results_table.py --json - wrote a file named "-" in the current directory (and --json - --markdown - one over
    the other)."""
    from nmt.commands import run_cli
    monkeypatch.chdir(tmp_path)
    table = _script(monkeypatch, "results_table")
    assert run_cli(lambda: table.main([str(tmp_path / "run"), "--json", "-"])) == 2
    assert capsys.readouterr().err == "error: --json -: a report is written to a file, not to standard output; give " \
                                      "a file name\n"
    assert not os.listdir(tmp_path)


def test_a_report_that_is_a_loop_of_links_is_refused_not_a_traceback(monkeypatch, capsys, tmp_path):
    """check_outputs compared the reports by Path.resolve, which raises RuntimeError on a link to itself: a traceback
    (results_table.py --json loop.json), where every other unwritable report is a one-line error."""
    from nmt.commands import run_cli
    (tmp_path / "loop.json").symlink_to("loop.json")
    table = _script(monkeypatch, "results_table")
    assert run_cli(lambda: table.main([str(tmp_path / "run"), "--json", str(tmp_path / "loop.json")])) == 2
    assert capsys.readouterr().err == f"error: --json {tmp_path / 'loop.json'}: a symbolic link in a loop of links; " \
                                      "give another file\n"


def test_benchmark_decode_limits_lengths_as_nmt_translate_does(monkeypatch):
    """make_batches computed the longest output of a batch itself, ceil(a x source length + b) in floating point:
    with --max-len-a 1.1 a 50-token source (EOS included) got 56 steps, where nmt-translate's search
    (`nmt.search.length_limits`, exact since d7873de) gives 55."""
    from types import SimpleNamespace

    import mxnet as mx
    bench = _script(monkeypatch, "benchmark_decode")
    for a, b, tokens, limit in ((1.1, 0, 49, 55), (2.2, 0, 44, 99), (1.5, 10, 6, 21)):
        tr = SimpleNamespace(source_ids=lambda lines, n=tokens: [[5] * n for _ in lines], ctx=mx.cpu(),
                             decode=SimpleNamespace(max_len_a=a, max_len_b=b))
        assert [m for _, _, m in bench.make_batches(tr, ["x", "y"], 2)] == [limit], (a, b, tokens)


def test_results_tables_docs_page_is_not_written_over_the_tables_it_is_made_of(monkeypatch, capsys, tmp_path):
    """--docs results/results.md (the page's usual name, docs/results.md, in the wrong directory) or any other file of
    --results-dir the page is assembled from was replaced by the page, exit 0: the table, or the ablation table, gone
    (a next call then nested the page in itself). A table this call writes with --markdown stays the page's input."""
    from nmt.commands import run_cli
    table = _script(monkeypatch, "results_table")
    results, run = tmp_path / "results", tmp_path / "run"
    results.mkdir()
    tables = {name: "| run | BLEU |\n" for name in ("results.md", "ablation.md", "transformer.md",
                                                      "transformer-ablation.md")}
    for name, text in tables.items():
        (results / name).write_text(text)
    for runs in ([], [str(run)]):
        for name in tables:
            argv = [*runs, "--docs", str(results / name), "--results-dir", str(results)]
            assert run_cli(lambda: table.main(argv)) == 2, argv
            err = capsys.readouterr().err
            assert err == (f"error: --docs {results / name} is the --results-dir {results / name} file: writing it "
                           "would destroy what this command reads; write it elsewhere\n"), err
    assert {p.name: p.read_text() for p in results.iterdir()} == tables


def test_benchmark_ab_records_the_conditions_the_docs_say_every_report_does(monkeypatch, tmp_path):
    """docs/performance.md: every report records CPU, cores, threads, load at the start and the end, date and
    commit; benchmark_ab's report had no cores (`conditions.run_conditions` lacked them)."""
    bench = _script(monkeypatch, "benchmark_ab")
    monkeypatch.setattr(bench, "run_once", lambda checkout, shared, path: 1000.0)
    out = tmp_path / "ab.json"
    assert bench.main(["--a", str(REPO), "--b", str(REPO), "--rounds", "1", "--json", str(out)]) == 0
    import json
    report = json.loads(out.read_text(encoding="utf-8"))
    assert {"cpu", "cores", "omp_num_threads", "load_average_at_start", "load_average_at_end", "date", "commit",
            "a_commit", "b_commit"} <= set(report), sorted(report)
    assert report["cores"] == os.cpu_count() and report["median_b_over_a"] == 1.0


def test_benchmark_data_refuses_a_work_dir_without_synthetic_pairs(monkeypatch, capsys, tmp_path):
    """--work-dir belongs to --synthetic-pairs: the recipe's benchmark ignored it without a word (and read the
    recipe's corpora, here a --data-dir that is not there)."""
    bench = _script(monkeypatch, "benchmark_data")
    for given in (["--work-dir", str(tmp_path)], [f"--work-dir={tmp_path}"]):
        with pytest.raises(SystemExit):
            bench.main([*given, "--recipe", "tatoeba", "--data-dir", str(tmp_path / "none"), "--repeats", "1"])
        assert "--work-dir is where --synthetic-pairs keeps its corpus" in capsys.readouterr().err
