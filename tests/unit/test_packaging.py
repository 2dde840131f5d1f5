"""The CPU/GPU switch: each variant resolves to exactly one MXNet build, never both."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def resolve(req_file: Path) -> list:
    """All requirement lines reachable from a requirements file, following `-r` includes."""
    out = []
    for line in req_file.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r"):
            out += resolve(req_file.parent / line[2:].strip())
        elif line:
            out.append(line)
    return out


def mxnet_builds(reqs: list) -> list:
    return [r for r in reqs if re.match(r"^mxnet(-cu\d+)?\s*[=<>~!]", r)]


def test_requirement_variants_pick_one_mxnet_each():
    req = REPO / "requirements"
    assert mxnet_builds(resolve(req / "cpu.txt")) == ["mxnet==1.9.1"]
    assert mxnet_builds(resolve(req / "gpu.txt")) == ["mxnet-cu112==1.9.1"]
    assert mxnet_builds(resolve(req / "dev.txt")) == ["mxnet==1.9.1"]
    assert mxnet_builds(resolve(req / "common.txt")) == []
    assert "numpy>=1.21,<1.24" in resolve(req / "common.txt")


def test_setup_extras_match_the_requirement_files():
    code = ("import setuptools, sys, json\n"
            "captured = {}\n"
            "setuptools.setup = lambda **kw: captured.update(kw)\n"
            "import runpy\n"
            "runpy.run_path('setup.py', run_name='__main__')\n"
            "print(json.dumps({'install': captured['install_requires'], 'extras': captured['extras_require']}))")
    import json
    out = json.loads(subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                    check=True).stdout)
    assert mxnet_builds(out["install"]) == []
    assert mxnet_builds(out["extras"]["cpu"]) == ["mxnet==1.9.1"]
    assert mxnet_builds(out["extras"]["gpu"]) == ["mxnet-cu112==1.9.1"]


def test_two_mxnet_builds_are_refused_in_one_line(tmp_path):
    """A fake second build's metadata on sys.path: loading a model fails with a message saying what to uninstall
    and install; a command says it in one line, exit 2 (it was a traceback of `import nmt` in every command, --help
    too, advising requirements files that an installed package does not have)."""
    dist = tmp_path / "mxnet_cu112-1.9.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mxnet-cu112\nVersion: 1.9.1\n")

    def run(code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL)
    r = run("import nmt.models")
    said = ("Several MXNet builds are installed at once (mxnet, mxnet-cu112); they write the same `mxnet` package "
            "and break each other. Uninstall them all, `pip uninstall -y mxnet mxnet-cu112`, then install exactly one")
    assert r.returncode != 0 and said in r.stderr
    r = run("import sys; from nmt.cli_decode import translate_main; sys.exit(translate_main(['--model-dir', 'm']))")
    assert r.returncode == 2 and r.stderr.startswith(f"error: {said}") and len(r.stderr.splitlines()) == 1, r.stderr
    r = run("import sys; from nmt.cli import train_main; sys.exit(train_main(['--help']))")
    assert r.returncode == 0 and "usage: nmt-train" in r.stdout
    # another package missing is said as itself (every import error was reported as the two builds), MXNet's own
    # import error as the two builds
    r = run("from nmt.commands import import_failure as f\nfor name in ('sacrebleu', 'mxnet'): "
            "print(f(ModuleNotFoundError(f'No module named {name!r}', name=name)))")
    other, own = r.stdout.splitlines()
    assert other.startswith("No module named 'sacrebleu', a package nmt needs") and own.startswith(said), r.stdout


def test_the_commands_import_no_framework_before_they_run():
    """Each console command's module loads without MXNet (seconds to import), so that --help is quick and Ctrl-C
    while the framework loads is the command's own "interrupted" (exit 130), not a traceback of the import. nmt-serve
    imported MXNet with its module (3.6 s; found by a check of Ctrl-C during start-up)."""
    setup = (REPO / "setup.py").read_text()
    modules = sorted(set(re.findall(r'"nmt-[a-z]+=([\w.]+):\w+"', setup)))
    assert "nmt.serve" in modules and len(modules) == 6
    code = (f"import sys\nbefore = set(sys.modules)\nfor m in {modules!r}: __import__(m)\n"   # (nor any other
            "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names) - "
            "{'nmt'}))")   # package: see the tqdm test)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(REPO)})
    assert r.returncode == 0 and r.stdout == "[]\n", (r.stdout, r.stderr)


def test_the_pip_commands_in_messages_pin_what_the_requirements_pin():
    """The errors and log lines that name a pip command for an optional part give the versions
    requirements/common.txt pins: a command of other versions could pull packages that break the install."""
    from nmt.commands import MXNET_PIP
    from nmt.evaluate import MECAB_PIP
    from nmt.tensorboard import TENSORBOARD_PIP
    pinned = {line.split("#")[0].strip() for name in ("common.txt", "cpu.txt")
              for line in (REPO / "requirements" / name).read_text().splitlines()} - {""}
    for command in (MECAB_PIP, TENSORBOARD_PIP, MXNET_PIP):
        named = re.findall(r"'([^']+)'", command)
        assert named and set(named) <= pinned, (command, pinned)


@pytest.mark.parametrize("fault", ["import warnings\nwarnings.warn('In the future `np.bool` will be defined as the "   # (as
                                   "corresponding NumPy scalar.', FutureWarning)\n"   # numpy 1.24 says it first)
                                   "raise AttributeError(\"module 'numpy' has no attribute 'bool'\")",
                                   "raise ModuleNotFoundError(\"No module named 'mxnet'\", name='mxnet')",
                                   "raise OSError('libcudart.so.11.0: cannot open shared object file: No such file "
                                   "or directory')"])   # (mxnet-cu112 on a machine without CUDA 11.2: a traceback)
def test_a_command_without_a_working_mxnet_helps_and_says_what_to_install(tmp_path, fault):
    """With numpy 1.24 or later (or no MXNet) every command's --help printed its help, then a 43-66 line traceback,
    exit 1 (the error handler imports MXNet as argparse exits); a real run, a traceback."""
    from nmt.commands import MXNET_PIP
    (tmp_path / "mxnet").mkdir()
    (tmp_path / "mxnet" / "__init__.py").write_text(fault + "\n")   # an MXNet whose import fails as those do
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    for script in ("train.py", "translate.py", "evaluate.py", "score.py", "export.py"):
        p = subprocess.run([sys.executable, REPO / "scripts" / script, "--help"], env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0 and p.stdout.startswith("usage:") and "Traceback" not in p.stderr, (script, p.stderr)
    for script in ("translate.py", "serve.py"):   # (nmt-serve has its own main)
        p = subprocess.run([sys.executable, REPO / "scripts" / script, "--model-dir", tmp_path], env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and p.stderr.startswith("error: MXNet cannot be imported (") and \
            MXNET_PIP in p.stderr and len(p.stderr.splitlines()) == 1, (script, p.stderr)


def test_a_command_without_tqdm_helps_and_says_what_to_install(tmp_path):
    """tqdm, imported with the command modules (by nmt.log and nmt.download), made every --help a traceback when it
    was missing; the other packages nmt needs are imported as a command runs, where the error is one line."""
    (tmp_path / "tqdm").mkdir()
    (tmp_path / "tqdm" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tqdm'\", name='tqdm')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    for script in ("train.py", "translate.py", "evaluate.py", "score.py", "export.py", "launch.py"):
        p = subprocess.run([sys.executable, REPO / "scripts" / script, "--help"], env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0 and p.stdout.startswith("usage:") and "Traceback" not in p.stderr, (script, p.stderr)
    p = subprocess.run([sys.executable, REPO / "scripts" / "translate.py", "--model-dir", tmp_path], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("error: No module named 'tqdm'") and \
        "pip install 'tqdm" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr


def test_a_missing_package_under_a_directory_named_mxnet_is_not_taken_for_mxnet(tmp_path):
    """A checkout under ~/mxnet/ (or a venv named so) made any missing package "MXNet cannot be imported"."""
    import shutil
    src = tmp_path / "mxnet" / "src"
    for part in ("nmt", "scripts"):
        shutil.copytree(REPO / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "fake" / "sentencepiece").mkdir(parents=True)
    (tmp_path / "fake" / "sentencepiece" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'sentencepiece'\", name='sentencepiece')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(src)])}
    p = subprocess.run([sys.executable, src / "scripts" / "translate.py", "--model-dir", tmp_path], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "pip install 'sentencepiece==" in p.stderr and "MXNet" not in p.stderr, p.stderr


def test_the_source_distribution_builds_and_installs_its_pins(tmp_path):
    """The sdist left out requirements/*.txt, which setup.py reads: `pip install nmt-0.1.0.tar.gz` failed with
    FileNotFoundError as it built the wheel."""
    import shutil
    import tarfile
    src = tmp_path / "src"   # (a copy: building writes nmt.egg-info beside setup.py)
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", "venv", "__pycache__", "*.egg-info",
                                                             "build", "dist", "models", "runs", "data"))
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")], cwd=src, check=True,
                   capture_output=True, timeout=300)
    (sdist,) = (tmp_path / "dist").glob("nmt-*.tar.gz")
    names = tarfile.open(sdist).getnames()
    assert {f"{sdist.name[:-7]}/requirements/{n}" for n in ("common.txt", "cpu.txt", "gpu.txt")} <= set(names)
    unpacked = tmp_path / "unpacked"
    tarfile.open(sdist).extractall(unpacked, filter="data")
    p = subprocess.run([sys.executable, "setup.py", "-q", "egg_info"],   # what pip asks first of an sdist
                       cwd=unpacked / sdist.name[:-7], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    requires = (unpacked / sdist.name[:-7] / "nmt.egg-info" / "requires.txt").read_text()
    assert "numpy<1.24" in requires and "mxnet==1.9.1" in requires


def test_only_a_package_nmt_requires_is_named_with_its_pin():
    from nmt.commands import missing_package
    assert missing_package(ModuleNotFoundError("No module named 'swagger_ui_bundle'", name="swagger_ui_bundle")) == \
        "No module named 'swagger_ui_bundle', a package nmt needs (installed with it): pip install " \
        "'swagger-ui-bundle==1.1.0'"
    assert missing_package(ModuleNotFoundError("x", name="no_such_thing")) == "" == missing_package(ImportError("x"))


def test_every_command_tells_its_version():
    """Sockeye and fairseq users ask a command for --version: "unrecognized arguments" here."""
    import nmt
    from nmt.cli import train_main
    from nmt.cli_decode import evaluate_main, translate_main
    from nmt.cli_score import score_main
    from nmt.export import export_main
    from nmt.launch import main as launch_main
    from nmt.serve.cli import main as serve_main
    for main in (train_main, translate_main, evaluate_main, score_main, export_main, launch_main, serve_main):
        with pytest.raises(SystemExit) as done:
            main(["--version"])
        assert done.value.code == 0, main
    p = subprocess.run([sys.executable, REPO / "scripts" / "train.py", "--version"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and p.stdout == f"nmt-train (nmt) {nmt.__version__}\n"


def test_every_command_says_a_flag_error_in_one_line(capsys):
    """A flag value argparse's type refused (`--chunk-lines 0`), a flag unknown or missing, printed argparse's usage
    block (a dozen lines) before "nmt-translate: error: ...", where every other error of a flag (`--batch-size 0`,
    checked with the settings) is one "error: ..." line: now all are that line, exit code 2 as before."""
    from nmt.cli import train_main
    from nmt.cli_decode import evaluate_main, translate_main
    from nmt.cli_score import score_main
    from nmt.export import export_main
    from nmt.launch import main as launch_main
    from nmt.serve.cli import main as serve_main
    for main, argv, said in (
            (train_main, ["--num-buckets", "x"], "argument --num-buckets: invalid int value: 'x'"),
            (translate_main, ["--model-dir", "m", "--chunk-lines", "0"], "argument --chunk-lines: must be >= 1 (got 0)"),
            (evaluate_main, ["--model-dir", "m", "--prefix-words", "0"], "argument --prefix-words: must be >= 1 (got 0)"),
            (score_main, ["--model-dir", "m"], "the following arguments are required: --src-file, --tgt-file"),
            (export_main, ["--model-dir", "m", "--output", "o", "--nosuch"], "unrecognized arguments: --nosuch"),
            (launch_main, ["-n", "0", "--", "true"], "argument -n/--num-workers: must be >= 1 and <= 1024 (got 0)"),
            (serve_main, ["--model-dir", "m", "--port", "0"], "argument --port: must be >= 1 and <= 65535 (got 0)"),
            (serve_main, ["--model-dir", "m", "--max-sentences", "9", "--max-queue", "8"],
             "--max-sentences 9 is more than --max-queue 8: ")):
        with pytest.raises(SystemExit) as done:
            main(argv)
        out, err = capsys.readouterr()
        assert done.value.code == 2 and out == "" and err.startswith(f"error: {said}") and err.count("\n") == 1, \
            (main, err)


def test_an_unknown_argument_says_where_the_flags_are_and_a_worker_command_before_dashes_where_it_goes(capsys):
    """The usage block that a flag error lost showed the flags (a misspelt one: `--modle-dir`) and, for nmt-launch,
    that the worker command goes after `--` (`nmt-launch -n 2 nmt-train ...` said "unrecognized arguments:
    nmt-train ..." alone): the one line now points to --help, and gives nmt-launch's command line with the `--`."""
    from nmt.cli_decode import translate_main
    from nmt.launch import main as launch_main
    for main, argv, said in (
            (translate_main, ["--model-dir", "m", "--modle-dir", "y"],
             "error: unrecognized arguments: --modle-dir y (`nmt-translate --help` lists the flags)\n"),
            (launch_main, ["-n", "2", "--bogus", "--", "true"],
             "error: unrecognized arguments: --bogus (`nmt-launch --help` lists the flags)\n"),
            (launch_main, ["-n", "2", "-s", "1", "nmt-train", "--max-steps", "3"],
             "error: unrecognized arguments: nmt-train --max-steps 3: is it the worker command? It goes after `--`: "
             "nmt-launch -n 2 -s 1 -- nmt-train --max-steps 3\n")):
        with pytest.raises(SystemExit) as done:
            main(argv)
        out, err = capsys.readouterr()
        assert done.value.code == 2 and out == "" and err == said, (argv, err)


def test_each_command_module_run_with_python_m_is_that_command():
    """`python -m nmt.cli --model-dir ...` did nothing and exited 0 (only `python -m nmt.serve` ran its command): a
    training that never ran, said by nothing. nmt.cli_decode holds two commands, and says so."""
    import nmt
    for module, command in (("nmt.cli", "nmt-train"), ("nmt.cli_score", "nmt-score"), ("nmt.export", "nmt-export"),
                            ("nmt.launch", "nmt-launch"), ("nmt.serve", "nmt-serve"), ("nmt.serve.cli", "nmt-serve")):
        p = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120,
                           cwd=REPO)
        assert p.returncode == 0 and p.stdout == f"{command} (nmt) {nmt.__version__}\n", (module, p.stdout, p.stderr)
    where = Path(sysconfig.get_path("scripts"))   # (pip's console scripts: named where they are not on the PATH)
    elsewhere = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != where)
    lost = (where / "nmt-translate").is_file() and not shutil.which("nmt-translate", path=elsewhere)
    named = f" (not on the PATH: {where / 'nmt-translate'}, {where / 'nmt-evaluate'})" if lost else ""
    for path, named in ((f"{where}{os.pathsep}{elsewhere}", ""), (elsewhere, named)):
        p = subprocess.run([sys.executable, "-m", "nmt.cli_decode", "--version"], capture_output=True, text=True,
                           timeout=120, cwd=REPO, env={**os.environ, "PATH": path})
        assert p.returncode == 2 and p.stderr == ("error: nmt.cli_decode holds two commands: run nmt-translate or "
                                                  f"nmt-evaluate{named}\n"), (p.stdout, p.stderr)


@pytest.mark.parametrize("module, command", [
    ("nmt.cli", "nmt-train"), ("nmt.cli_decode", None), ("nmt.cli_score", "nmt-score"), ("nmt.export", "nmt-export"),
    ("nmt.launch", "nmt-launch"), ("nmt.serve", "nmt-serve"), ("nmt.serve.cli", "nmt-serve")])
def test_python_m_of_a_command_module_answers_as_the_installed_command(module, command):
    """`python -m nmt.cli_decode` exited 1 where every installed command exits 2 for a usage error (its text, given to
    SystemExit, made it 1), and `python -m nmt.serve.cli` did nothing, exit 0, after a RuntimeWarning of runpy's. Each
    module answers no arguments (nmt-train's: a bad flag, not a training), --help and a flag error as its command
    does, with the same exit code, output and errors; nmt.cli_decode, which holds two, refuses with exit code 2."""
    script = Path(sysconfig.get_path("scripts")) / (command or "")
    if command and not script.is_file():
        pytest.skip(f"{command} is not installed here ({script}): pip install -e .")
    env = {**os.environ, "COLUMNS": "1000"}   # no wrapping, inside the interpreter's path (spaces, hyphens) either
    for argv in ([] if command != "nmt-train" else ["--num-buckets", "x"]), ["--help"], ["--no-such-flag"]:
        p = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=120,
                           cwd=REPO, env=env)
        if command is None:
            assert p.returncode == 2 and p.stdout == "" and p.stderr.startswith(
                "error: nmt.cli_decode holds two commands: run nmt-translate or nmt-evaluate"), (argv, p.stderr)
            continue
        want = subprocess.run([str(script), *argv], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)

        def same(text: str) -> str:
            """nmt-launch's help names the interpreter running it (python, or python3), a path that may hold spaces,
            on one line at COLUMNS=1000: compare the words, with the interpreter's path as one."""
            return " ".join(re.sub(r"\(default: [^\n]*?python[\d.]*\)", "(default: the python)", text).split())
        assert (p.returncode, same(p.stdout), p.stderr) == (want.returncode, same(want.stdout), want.stderr), \
            (module, argv)
        assert p.returncode == (0 if argv == ["--help"] else 2), (module, argv, p.stderr)
