"""Bad input and hostile surroundings of the decoding commands (`nmt-translate`, `nmt-evaluate`, `nmt-score`) on the
tiny trained model, each found by trying them as a user would: a full disk, a reader that goes away, a model
directory that cannot be written, lone surrogates in JSON input, a beam too wide for MXNet's indices, control characters, files
with a sentence missing on one side. Each is one clear line (an error, or a warning where the work goes on), never a
traceback."""
from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.cli_decode import evaluate_main, translate_main
from nmt.cli_score import score_main
from nmt.translate import Translator
from tests.synth import synth_file
from tests.synth import run_command as run

REPO = Path(__file__).resolve().parents[2]
FULL = Path("/dev/full")   # every write fails with ENOSPC


@pytest.fixture(scope="module")
def test_files(model_dir, tmp_path_factory):
    """A test set of the model's language pair, copied where it is not the model's own (scored under its path)."""
    home = tmp_path_factory.mktemp("set")
    return tuple(Path(shutil.copy(synth_file(model_dir, f"test.{lang}"), home / f"set.{lang}"))
                 for lang in ("ko", "en"))


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize("main", [translate_main, score_main])
def test_a_full_disk_on_the_output_is_an_error_naming_it(model_dir, test_files, capsys, main):
    src, ref = test_files
    argv = (["--input", src, "--beam-size", "1"] if main is translate_main else ["--src-file", src, "--tgt-file", ref])
    code, _, err = run(main, ["--model-dir", model_dir, *argv, "--output", FULL], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"error: cannot write {FULL}: No space left on device [errno ENOSPC]" in err
    assert "is a device, not a file on a disk" in err and " free" not in err, err   # (it said "11.8 GiB free")


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize("script", ["translate.py", "evaluate.py"])
def test_a_full_disk_on_standard_output_is_an_error(model_dir, test_files, script):
    src, ref = test_files
    args = ["--input", src] if script == "translate.py" else ["--src-file", src, "--ref-file", ref, "--no-save"]
    with open(FULL, "w") as full:
        p = subprocess.run([sys.executable, str(REPO / "scripts" / script), "--model-dir", str(model_dir),
                            *map(str, args), "--beam-size", "1"], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr
    assert "error: cannot write the standard output: No space left on device" in p.stderr


def test_an_evaluation_whose_reader_went_away_ends_quietly(model_dir, test_files, tmp_path):
    """`nmt-evaluate ... | head -1` gave a BrokenPipeError traceback; then its --json FILE, which does not depend on
    stdout, was not written."""
    src, ref = test_files
    p = subprocess.Popen([sys.executable, str(REPO / "scripts" / "evaluate.py"), "--model-dir", str(model_dir),
                          "--src-file", str(src), "--ref-file", str(ref), "--no-save", "--beam-size", "1",
                          "--json", str(tmp_path / "r.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()   # gone before the first line
    err = p.stderr.read()
    assert p.wait(timeout=300) == 141, err[-2000:]
    assert "Traceback" not in err and "Exception ignored" not in err
    assert json.loads((tmp_path / "r.json").read_text())["results"][str(src)]["n"] == len(src.read_text().splitlines())


@pytest.mark.parametrize("output", ["/dev/stdout", "fifo"])
def test_a_reader_gone_from_the_output_file_ends_quietly(model_dir, test_files, tmp_path, output):
    """`--output /dev/stdout | head -1` (or a named pipe whose reader went away) gave a BrokenPipeError traceback,
    exit 1: the output file, closed after the error, failed again on the rest of its buffer."""
    src, _ = test_files
    many = tmp_path / "many.ko"
    many.write_text(src.read_text(encoding="utf-8") * 5, encoding="utf-8")
    if output == "fifo":
        os.mkfifo(tmp_path / "fifo")
        output = str(tmp_path / "fifo")
        reader = subprocess.Popen(["head", "-c", "1", output], stdout=subprocess.DEVNULL)
    p = subprocess.Popen([sys.executable, str(REPO / "scripts" / "translate.py"), "--model-dir", str(model_dir),
                          "--input", str(many), "--beam-size", "1", "--chunk-lines", "5", "--output", output],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if output == "/dev/stdout":
        p.stdout.read(1)
        p.stdout.close()   # the reader gone after its first byte
    else:
        reader.wait(timeout=300)
    err = p.stderr.read()
    assert p.wait(timeout=300) == 141, err[-2000:]
    assert "Traceback" not in err and "Exception ignored" not in err, err


def _closed(fd: int, argv: list, **kw) -> subprocess.CompletedProcess:
    """A command run with its standard stream `fd` closed, as `<&-`, `>&-` or `2>&-` start it."""
    streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    return subprocess.run([sys.executable, *map(str, argv)], **streams, preexec_fn=lambda: os.close(fd), text=True,
                          timeout=300, **kw)


@pytest.mark.parametrize("script", ["translate.py", "score.py"])
def test_an_unbuffered_output_written_short_is_an_error(model_dir, test_files, tmp_path, script):
    """With PYTHONUNBUFFERED=1 (as many Docker and CI images set) standard output wrote straight through: a write cut
    short (the reader of `| head` gone after the first 64 KiB of a chunk, `ulimit -f`) dropped the rest unsaid, and
    the command exited 0 as if all was written."""
    import resource
    src, ref = test_files
    many = tmp_path / "many.ko"
    many.write_text(src.read_text(encoding="utf-8") * 40, encoding="utf-8")   # one chunk, more than 64 KiB out
    args = (["--input", many, "--nbest", "2", "--beam-size", "2", "--chunk-lines", "100000"]
            if script == "translate.py" else
            ["--src-file", many, "--tgt-file", tmp_path / "many.en", "--output-format", "json"])
    (tmp_path / "many.en").write_text(ref.read_text(encoding="utf-8") * 40, encoding="utf-8")
    cmd = [sys.executable, str(REPO / "scripts" / script), "--model-dir", str(model_dir), *map(str, args)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    p.stdout.read(10)
    p.stdout.close()   # (the reader gone: the rest of the chunk's write fails)
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141, err[-2000:]
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))   # noqa: E731
    with open(tmp_path / "out", "w") as out:
        p = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=limit, timeout=300)
    assert p.returncode == 2 and "error: cannot write the standard output: File too large [errno EFBIG]; the file " \
                                 "would pass a size limit" in p.stderr, p.stderr[-2000:]


def test_a_closed_stderr_keeps_log_lines_out_of_the_output(model_dir, test_files, tmp_path):
    """With `2>&-`, Python's sys.stderr is None and the log lines went to stdout: among the translations, and into
    `nmt-evaluate --json -`'s report (exit 0). With an ASCII stdout, a test set's Korean name broke the report."""
    src, ref = test_files
    named = tmp_path / "시험.ko"
    named.write_bytes(src.read_bytes())
    p = _closed(2, [REPO / "scripts" / "translate.py", "--model-dir", model_dir, "--input", src, "--beam-size", "1"])
    assert p.returncode == 0 and p.stdout.splitlines() == Translator.from_dir(model_dir).translate(
        src.read_text(encoding="utf-8").splitlines(), beam_size=1)
    p = _closed(2, [REPO / "scripts" / "evaluate.py", "--model-dir", model_dir, "--src-file", named, "--ref-file",
                    ref, "--no-save", "--beam-size", "1", "--json", "-"], env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert p.returncode == 0 and list(json.loads(p.stdout)["results"]) == [str(named)]


@pytest.mark.parametrize("fd, argv, says", [
    (1, ["translate.py", "--input", "SRC"], "standard output is closed (the command was started with >&-): redirect"),
    (0, ["translate.py"], "standard input is closed (the command was started with <&-): give the input as a file")])
def test_a_closed_stdin_or_stdout_is_an_error_before_the_work(model_dir, test_files, fd, argv, says):
    """`nmt-translate --input F >&-` translated everything, then ended in an AttributeError traceback (exit 1);
    `<&-` did at once."""
    argv = [REPO / "scripts" / argv[0], "--model-dir", model_dir, *[test_files[0] if a == "SRC" else a for a in argv[1:]]]
    p = _closed(fd, argv)
    assert p.returncode == 2 and f"error: {says}" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "loaded" not in p.stderr   # (before the model loads)


@pytest.mark.parametrize("main, closed, argv, says", [
    (evaluate_main, "stdout", ["--src-file", "SRC", "--ref-file", "REF"], "output is closed"),
    (score_main, "stdout", ["--src-file", "SRC", "--tgt-file", "REF"], "output is closed"),
    (score_main, "stdin", ["--src-file", "/dev/stdin", "--tgt-file", "REF", "--output", "OUT"], "input is closed"),
    (translate_main, "stdin", ["--input", "/dev/stdin", "--output", "OUT"], "input is closed"),
    (translate_main, "stdout", ["--input", "SRC", "--output", "/dev/stdout"], "output is closed"),
    (translate_main, "stderr", ["--input", "SRC", "--output", "/dev/stderr"], "error is closed"),   # (exit 0, none)
    (score_main, "stderr", ["--src-file", "SRC", "--tgt-file", "REF", "--output", "/dev/fd/2"], "error is closed"),
    (evaluate_main, "stderr", ["--src-file", "SRC", "--ref-file", "REF", "--no-save", "--json", "/dev/stderr"],
     "error is closed")])
def test_a_closed_stream_named_by_a_file_flag_is_refused_before_the_work(model_dir, test_files, tmp_path, capsys,
                                                                         monkeypatch, main, closed, argv, says):
    """nmt-evaluate and nmt-score with stdout closed; `--input /dev/stdin <&-` translated nothing and `--output
    /dev/stdout >&-` wrote nowhere, both with exit code 0 (the closed descriptors are /dev/null now)."""
    monkeypatch.setattr("nmt.commands.CLOSED", {closed})
    files = {"SRC": test_files[0], "REF": test_files[1], "OUT": tmp_path / "out"}
    code, _, err = run(main, ["--model-dir", model_dir, *[files.get(a, a) for a in argv]], capsys)
    assert code == 2 and err.startswith(f"error: standard {says} (the command was started with "), err
    assert not (tmp_path / "out").exists()


def test_summaries_of_commands_started_with_stdout_closed_or_ascii_go_nowhere_or_in_utf8(model_dir, tmp_path):
    """nmt-export (and nmt-train) with `>&-` did all their work and then failed on their last line, exit 2; under
    PYTHONIOENCODING=ascii, a Korean directory name was a UnicodeEncodeError after the export was written."""
    p = _closed(1, [REPO / "scripts" / "export.py", "--model-dir", model_dir, "--output", tmp_path / "a"])
    assert p.returncode == 0 and (tmp_path / "a" / "params.best").is_file(), p.stderr
    p = subprocess.run([sys.executable, REPO / "scripts" / "export.py", "--model-dir", model_dir, "--output",
                        tmp_path / "모델"], capture_output=True, env={**os.environ, "PYTHONIOENCODING": "ascii"},
                       timeout=300)
    assert p.returncode == 0 and "모델" in p.stdout.decode("utf-8"), p.stderr


def test_the_launcher_started_with_stderr_closed_keeps_its_errors_off_stdout(tmp_path):
    p = _closed(2, [REPO / "scripts" / "launch.py", "--workdir", tmp_path / "nothing", "-n", "1", "--", "nmt-train"])
    assert p.returncode == 2 and p.stdout == ""


def test_an_output_named_gz_is_gzip_compressed_and_other_compressions_are_refused(model_dir, test_files, tmp_path,
                                                                                  capsys):
    """`--output out.en.gz` wrote plain text under a name zcat refuses (--input reads such files by their bytes).
    bzip2 and xz cannot be flushed as they go: a stopped run lost every translation, so such names are refused."""
    src, ref = test_files
    argv = ["--model-dir", model_dir, "--input", src, "--beam-size", "1"]
    assert run(translate_main, [*argv, "--output", tmp_path / "out.gz"], capsys)[0] == 0
    assert run(translate_main, argv, capsys)[1] == gzip.open(tmp_path / "out.gz", "rt", encoding="utf-8").read()
    for name in ("out.xz", "out.BZ2", "out.zst"):
        code, _, err = run(translate_main, [*argv, "--output", tmp_path / name], capsys)
        assert code == 2 and f"--output {tmp_path / name}: an output is written compressed only with gzip" in err
        assert not (tmp_path / name).exists()
    assert run(evaluate_main, ["--model-dir", model_dir, "--src-file", src, "--ref-file", ref, "--no-save",
                               "--beam-size", "1", "--json", tmp_path / "r.json.gz"], capsys)[0] == 0
    assert json.loads(gzip.open(tmp_path / "r.json.gz").read())["results"][str(src)]["n"] > 0


@pytest.mark.parametrize("script, signum", [("translate.py", "SIGTERM"), ("translate.py", "SIGHUP"),
                                            ("score.py", "SIGTERM")])
def test_sigterm_closes_a_gz_output_whole_with_what_is_done(model_dir, test_files, tmp_path, script, signum):
    """SIGTERM (or SIGHUP: the terminal closed) killed nmt-translate and nmt-score: a .gz output lost its end
    ("unexpected end of file"). They end as Ctrl-C does, exit 143 (129), the file closed whole."""
    import signal
    import time
    out, src = tmp_path / "out.gz", test_files[0]
    for i, f in enumerate(test_files):   # nmt-score reads its files whole: long ones, to signal it as it scores
        (tmp_path / f"many{i}").write_bytes(f.read_bytes() * 5000)
    files = ["--input", "/dev/stdin"] if script == "translate.py" else ["--src-file", tmp_path / "many0",
                                                                         "--tgt-file", tmp_path / "many1"]
    p = subprocess.Popen([sys.executable, str(REPO / "scripts" / script), "--model-dir", str(model_dir), *map(
        str, files), "--output", str(out)], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))   # (under nohup, as CI may run, ignored)
    if script == "translate.py":
        p.stdin.write(src.read_bytes())
        p.stdin.flush()   # (left open: the command waits for more, its chunk written)
    deadline = time.time() + 120
    while (not out.exists() or out.stat().st_size < 30) and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(getattr(signal, signum))
    try:
        err = p.communicate(timeout=60)[1].decode()
    finally:
        p.kill()
    assert p.returncode == 128 + getattr(signal, signum) and "Traceback" not in err, err
    lines = gzip.open(out, "rt", encoding="utf-8").read().splitlines()   # whole: no EOFError
    assert lines and (script != "translate.py" or len(lines) == len(src.read_text().splitlines()))


def test_more_closed_streams_and_compression_names(model_dir, test_files, tmp_path, capsys, monkeypatch):
    """The dry runs' reports went nowhere with stdout closed (exit 0); "-" is standard input to nmt-score too, here
    closed; .lz, .zstd, .Z and .br outputs were written as plain text."""
    from nmt.cli import train_main
    monkeypatch.setattr("nmt.commands.CLOSED", {"stdout", "stdin"})
    assert train_main(["--train-src", str(test_files[0]), "--train-tgt", str(test_files[1]), "--dry-run"]) == 2
    assert "error: standard output is closed (the command was started with >&-)" in capsys.readouterr().err
    code, _, err = run(score_main, ["--model-dir", model_dir, "--src-file", "-", "--tgt-file", test_files[1],
                                    "--output", tmp_path / "s"], capsys)
    assert code == 2 and "error: standard input is closed (the command was started with <&-)" in err, err
    monkeypatch.setattr("nmt.commands.CLOSED", set())
    for suffix in (".lz", ".zstd", ".Z", ".br", ".tbz2"):
        code, _, err = run(translate_main, ["--model-dir", model_dir, "--input", test_files[0], "--output",
                                            tmp_path / f"o{suffix}"], capsys)
        assert code == 2 and "an output is written compressed only with gzip" in err, suffix


def test_a_model_directory_that_cannot_be_written_is_still_evaluated(model_dir, test_files, tmp_path, capsys,
                                                                      monkeypatch):
    """Someone else's model (or a read-only disk): the scores are printed, with a word on why they are not recorded;
    evaluating it used to end in a PermissionError on scores.json.lock after all the decoding. Root may write
    anywhere, so the directory's answer to "may I write?" is set here."""
    import nmt.scoring
    before = (Path(model_dir) / "scores.json").read_bytes() if (Path(model_dir) / "scores.json").exists() else None
    real_access = os.access
    monkeypatch.setattr(nmt.scoring.os, "access", lambda path, mode: mode != os.W_OK and real_access(path, mode))
    src, ref = test_files
    code, out, err = run(evaluate_main, ["--model-dir", model_dir, "--src-file", src, "--ref-file", ref,
                                         "--beam-size", "1"], capsys)
    assert code == 0 and "BLEU" in out
    assert f"{model_dir} is not writable (another user's, or a read-only disk): the scores are printed but not " \
           "recorded in its scores.json" in err
    assert f"not recorded in {Path(model_dir) / 'scores.json'}: {model_dir} is not writable" in err
    after = (Path(model_dir) / "scores.json").read_bytes() if (Path(model_dir) / "scores.json").exists() else None
    assert after == before


def test_a_full_disk_at_scores_json_still_prints_and_keeps_the_scores(model_dir, test_files, tmp_path, capsys,
                                                                      monkeypatch):
    """The model directory's disk full: nmt-evaluate translated the whole set, then printed only the error of
    scores.json (exit 2): no BLEU, no --json report, an empty --hyp-dir; training's test scoring died the same way.
    As for a directory it cannot write: the scores are printed and kept, with a word on why they are not recorded."""
    import errno
    import nmt.scoring
    from nmt.storage import write_failure

    def full(path, text):
        raise write_failure(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), len(text))
    src, ref = test_files
    scores, report = Path(model_dir) / "scores.json", tmp_path / "report.json"
    before = scores.read_bytes() if scores.exists() else None   # an entry against other references, which stays:
    data = json.loads(before) if before else {}                 # no word of its replacement
    data.setdefault(str(Path(src).resolve()), {})["best"] = {"bleu": 1.0, "ref_file": "/elsewhere.en"}
    scores.write_text(json.dumps(data))
    monkeypatch.setattr(nmt.scoring, "atomic_write_text", full)
    code, out, err = run(evaluate_main, ["--model-dir", model_dir, "--src-file", src, "--ref-file", ref, "--json",
                                         report, "--hyp-dir", tmp_path / "hyp"], capsys)
    assert code == 0 and "BLEU" in out and "bleu" in json.loads(report.read_text())["results"][str(Path(src))], err
    assert list((tmp_path / "hyp").iterdir())
    assert f"not recorded in {scores}: cannot write {scores}: No space left on device [errno ENOSPC]" in err
    assert "scores recorded in" not in err and "is replaced by this one" not in err
    scores.write_bytes(before) if before is not None else scores.unlink()


def test_a_lone_surrogate_in_json_input_names_the_line_and_field(model_dir, tmp_path, capsys):
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "리 니"}\n{"text": "리 \\ud800니"}\n', encoding="utf-8")
    code, out, err = run(translate_main, ["--model-dir", model_dir, "--json-input", "--input", path,
                                          "--beam-size", "1"], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"error: {path}:2: field 'text' has a lone surrogate U+D800 at character 2" in err
    assert len(out.splitlines()) == 1   # the line before it translated and written


def test_a_beam_too_wide_for_mxnets_indices_names_the_flags(model_dir, test_files, capsys, monkeypatch):
    """--beam-size 100000 ended in an MXNetError from a reshape (int32 overflow); on the tiny model it takes 24 GB
    before that: a search reached here fails the test at once."""
    def searched(*args, **kwargs):
        raise AssertionError("the search ran")
    monkeypatch.setattr(Translator, "search_ids", searched)
    code, _, err = run(translate_main, ["--model-dir", model_dir, "--input", test_files[0], "--beam-size", "100000"],
                       capsys)
    assert code == 2 and "Traceback" not in err
    assert "error: --beam-size 100000 x decode.batch_size 64 hypotheses x" in err
    assert "more than MXNet's 32-bit indices reach (2**31): lower --beam-size or decode.batch_size (decode.*: " in err


def test_a_beam_too_wide_in_the_models_config_names_the_file(model_dir, test_files, tmp_path, capsys, monkeypatch):
    """A config.json's beam too wide for MXNet's indices was named as --beam-size, a flag not given."""
    import json
    import shutil
    monkeypatch.setattr(Translator, "search_ids", lambda *a, **k: pytest.fail("the search ran"))
    copy = shutil.copytree(model_dir, tmp_path / "m")
    cfg = json.loads((copy / "config.json").read_text())
    cfg["decode"]["beam_size"] = 100000
    (copy / "config.json").write_text(json.dumps(cfg))
    code, _, err = run(translate_main, ["--model-dir", copy, "--input", test_files[0]], capsys)
    assert code == 2 and "Traceback" not in err
    assert "error: decode.beam_size 100000 x decode.batch_size 64 hypotheses x" in err
    assert err.endswith(f"(decode.*: {copy / 'config.json'}'s; --beam-size and --decode-batch-size override it)\n")
    code, _, err = run(translate_main, ["--model-dir", copy, "--input", test_files[0], "--decode-batch-size", "64"],
                       capsys)
    assert code == 2 and "error: decode.beam_size 100000 x --decode-batch-size 64 hypotheses x" in err, err
    monkeypatch.undo()   # what runs no beam search is not refused: sampling, and nmt-score's forced scoring
    code, out, err = run(translate_main, ["--model-dir", copy, "--input", test_files[0], "--sample", "3"], capsys)
    assert code == 0 and len(out.splitlines()) == len(Path(test_files[0]).read_text().splitlines()), err
    code, out, err = run(score_main, ["--model-dir", copy, "--src-file", test_files[0], "--tgt-file", test_files[1]],
                         capsys)
    assert code == 0 and out, err


def test_control_characters_are_removed_with_a_warning(model_dir, tmp_path, capsys):
    """The service says so; the command line removed them without a word."""
    path = tmp_path / "in.ko"
    path.write_text("리\x00 니\x1b\n차\n", encoding="utf-8")
    code, out, err = run(translate_main, ["--model-dir", model_dir, "--input", path, "--beam-size", "1"], capsys)
    assert code == 0
    assert out.splitlines() == Translator.from_dir(model_dir, decode=None).translate(["리 니", "차"], beam_size=1)
    assert f"{path}:1: 2 control character(s) removed before translating" in err
    assert f"{path}:2:" not in err and "; 1 with control characters removed" in err


@pytest.mark.parametrize("main, flag", [(evaluate_main, "--ref-file"), (score_main, "--tgt-file")])
def test_a_line_blank_on_one_side_only_is_a_warning(model_dir, test_files, tmp_path, capsys, main, flag):
    """Usually a sentence missing from one of the files, which shifts every line after it."""
    src = test_files[0].read_text(encoding="utf-8").splitlines()[:6]
    ref = test_files[1].read_text(encoding="utf-8").splitlines()[:6]
    src[2], ref[4] = "", "  "
    (tmp_path / "s.ko").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "r.en").write_text("\n".join(ref) + "\n", encoding="utf-8")
    code, _, err = run(main, ["--model-dir", model_dir, "--src-file", tmp_path / "s.ko", flag, tmp_path / "r.en"]
                       + (["--no-save", "--beam-size", "1"] if main is evaluate_main else []), capsys)
    assert code == 0
    assert f"--src-file {tmp_path / 's.ko'} and {flag} {tmp_path / 'r.en'}: 2 line(s) blank on one side only " \
           "(line 3, 5): are the files misaligned" in err


@pytest.mark.parametrize("main, flag", [(evaluate_main, "--ref-file"), (score_main, "--tgt-file")])
def test_a_blank_last_line_on_one_side_is_the_same_warning(model_dir, test_files, tmp_path, capsys, main, flag):
    """nmt-evaluate dropped a file's blank last lines alone, then refused "--src-file has 3 lines but --ref-file has
    2" of two 3-line files; a line over 20,000 characters was refused, where nmt-translate cuts it (as it reads it,
    at its input guard, then to --max-input-tokens: both said)."""
    src = test_files[0].read_text(encoding="utf-8").splitlines()[:3] + ["리 " * 12000]
    ref = test_files[1].read_text(encoding="utf-8").splitlines()[:3] + [""]
    (tmp_path / "s.ko").write_text("\n".join(src) + "\n\n", encoding="utf-8")   # and a blank line on both sides
    (tmp_path / "r.en").write_text("\n".join(ref) + "\n\n", encoding="utf-8")
    code, _, err = run(main, ["--model-dir", model_dir, "--src-file", tmp_path / "s.ko", flag, tmp_path / "r.en"]
                       + (["--no-save", "--beam-size", "1"] if main is evaluate_main else []), capsys)
    assert code == 0, err
    assert "1 line(s) blank on one side only (line 4)" in err
    # nmt-score writes a score for every line pair, a blank one too
    assert ("ignored 1 blank line(s) at the end" in err) == (main is evaluate_main)
    assert f"{tmp_path / 's.ko'}: 1 line(s) longer than the input guard (16000 bytes: --max-input-tokens x 64), cut " \
           "there while reading (any length said next is the cut line's): line 4" in err, err
    assert "input line 4 has 2000 subword tokens; truncated to 250 (--max-input-tokens)" in err, err


@pytest.mark.parametrize("main, flag", [(evaluate_main, "--ref-file"), (score_main, "--tgt-file")])
def test_a_carriage_return_inside_a_test_line_is_refused_as_nmt_translate_does(model_dir, tmp_path, capsys, main,
                                                                                flag):
    (tmp_path / "s.ko").write_text("리 니\n차\r리\n", encoding="utf-8")
    (tmp_path / "r.en").write_text("ni ri\nri\n", encoding="utf-8")
    code, _, err = run(main, ["--model-dir", model_dir, "--src-file", tmp_path / "s.ko", flag, tmp_path / "r.en"],
                       capsys)
    assert code == 2 and f"error: {tmp_path / 's.ko'}:2: a carriage return (CR) splits the line into 2" in err, err


@pytest.mark.parametrize("encoding, named", [("utf-16", "UTF-16"), ("utf-16-le", "UTF-16LE"), ("utf-16-be", "UTF-16BE"),
                                             ("utf-32", "UTF-32")])
def test_utf16_input_to_translate_is_named_as_such(model_dir, tmp_path, capsys, encoding, named):
    """It was "invalid UTF-8 ... often CP949" with a byte-order mark, and without one translated with its NULs
    removed, one output line more than the input's. UTF-32 was named UTF-16."""
    path = tmp_path / "in.en"
    path.write_bytes("Thank you.\nGood weather.\n".encode(encoding))
    code, out, err = run(translate_main, ["--model-dir", model_dir, "--input", path], capsys)
    assert code == 2 and out == "" and f"error: {path}: the input is {named} (" in err
    assert f"`iconv -f {named} -t UTF-8 {shlex.quote(str(path))}`" in err
    packed = tmp_path / "in.en.gz"   # (the advice gave iconv the compressed file)
    packed.write_bytes(gzip.compress(path.read_bytes()))
    code, out, err = run(translate_main, ["--model-dir", model_dir, "--input", packed], capsys)
    assert code == 2 and f"`zcat {shlex.quote(str(packed))} | iconv -f {named} -t UTF-8`" in err


@pytest.mark.parametrize("data, flags, said", [
    ("Thank you.\n".encode("utf-16"), [], "the input is UTF-16 ("),
    (gzip.compress("Thank you.\n".encode("utf-16")), [], "the input is UTF-16 ("),
    (b"PK\x03\x04" + bytes(60), [], "zip archive, not text"),
    ("고마워요.\n리 니\n".encode("cp949"), [], ":1: invalid UTF-8 (byte 0xb0"),
    ('{"txt": "리 니"}\n'.encode(), ["--json-input"], ":1: unknown field 'txt'"),
], ids=["utf16", "utf16-gz", "zip", "cp949", "json"])
@pytest.mark.parametrize("piped", [False, True], ids=["file", "stdin"])
def test_an_input_refused_at_its_start_leaves_the_output_file_as_it_was(model_dir, tmp_path, capsys, monkeypatch,
                                                                         data, flags, said, piped):
    """`nmt-translate --input u16.ko --output existing.en` emptied existing.en, then refused the input: the user's
    file was lost. The output is now opened once a first line is read well (or the input ends): what is refused at
    its start (an encoding, an archive, line 1) leaves it as it was; a missing --input was refused before already."""
    import io
    path, out = tmp_path / "in.ko", tmp_path / "existing.en"
    path.write_bytes(data)
    out.write_text("the user's own file\n", encoding="utf-8")
    if piped:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))
    code, _, err = run(translate_main, ["--model-dir", model_dir, *([] if piped else ["--input", path]), *flags,
                                        "--output", out], capsys)
    assert code == 2 and said in err and "Traceback" not in err, err
    assert out.read_text(encoding="utf-8") == "the user's own file\n"
    code, _, err = run(translate_main, ["--model-dir", model_dir, "--input", tmp_path / "gone.ko", "--output", out],
                       capsys)
    assert code == 2 and "--input" in err and out.read_text(encoding="utf-8") == "the user's own file\n", err
    if said.startswith(":1:"):   # the same line refused after a line read well: that line's translation is written
        path.write_bytes(('{"text": "리 니"}' if flags else "리 니").encode() + b"\n" + data)
        code, _, err = run(translate_main, ["--model-dir", model_dir, "--input", path, *flags, "--output", out], capsys)
        assert code == 2 and ":2: " in err and out.read_text(encoding="utf-8") == \
            Translator.from_dir(model_dir).translate(["리 니"])[0] + "\n", err
    path.write_bytes(b"")   # an empty input still makes an empty output
    code, _, err = run(translate_main, ["--model-dir", model_dir, "--input", path, "--output", out], capsys)
    assert code == 0 and out.read_text(encoding="utf-8") == "", err


def test_compressed_standard_input_is_read_as_an_input_file_is(model_dir, capsys, monkeypatch, tmp_path):
    """`cat in.ko.gz | nmt-translate` said "invalid UTF-8 ... often CP949", then that the input is gzip data, to be
    given with --input (as `--input /dev/stdin`, which read it; nmt-score and nmt-evaluate read it on stdin): gzip,
    bzip2 and xz on standard input are read as --input reads them; a zip archive is refused."""
    import bz2
    import io
    import lzma
    import zipfile
    text = "리 니\n\n니\n".encode()
    (tmp_path / "in.ko").write_bytes(text)
    code, plain, _ = run(translate_main, ["--model-dir", model_dir, "--input", tmp_path / "in.ko"], capsys)
    assert code == 0 and len(plain.splitlines()) == 3
    for compress in (gzip.compress, bz2.compress, lzma.compress):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(compress(text)))))
        code, out, err = run(translate_main, ["--model-dir", model_dir], capsys)
        assert (code, out) == (0, plain), err
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as z:
        z.writestr("in.ko", text)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(packed.getvalue()))))
    code, out, err = run(translate_main, ["--model-dir", model_dir], capsys)
    assert code == 2 and out == "" and "the input is a zip archive, not text: extract or decompress it first" in err
    bad = tmp_path / "bad.ko.gz"   # a bad byte in a gzip file: the hint pipes it through zcat, as nmt-score's does
    cp949 = "고마워요.\n".encode("cp949")
    bad.write_bytes(gzip.compress(b"ok\n" + cp949))   # (after UTF-8 Korean: a stray line, to correct instead)
    code, out, err = run(translate_main, ["--model-dir", model_dir, "--input", bad], capsys)
    assert code == 2 and f"`zcat {shlex.quote(str(bad))} | iconv -f CP949 -t UTF-8`" in err, err
    for name, data, cat in [("bad.txt", gzip.compress(cp949), "zcat "), ("bad.gz", cp949, "")]:
        path = tmp_path / name   # by what the file holds, not by its name (it was "iconv" alone, and zcat for bad.gz)
        path.write_bytes(data)
        code, out, err = run(translate_main, ["--model-dir", model_dir, "--input", path], capsys)
        assert code == 2 and f"`{cat}{shlex.quote(str(path))} | iconv -f CP949 -t UTF-8`" in err if cat else \
            f"`iconv -f CP949 -t UTF-8 {shlex.quote(str(path))}`" in err, err


def test_invalid_utf8_in_a_test_set_offers_no_skipping(model_dir, test_files, tmp_path, capsys):
    """--skip-invalid-utf8 is a training flag: a test set with lines dropped would be another test set."""
    bad = tmp_path / "bad.ko"
    bad.write_bytes("리 니\n".encode() + "고양이".encode("cp949") + b"\n")
    (tmp_path / "r.en").write_text("ni ri\nri\n", encoding="utf-8")
    for main, flag in ((evaluate_main, "--ref-file"), (score_main, "--tgt-file")):
        code, _, err = run(main, ["--model-dir", model_dir, "--src-file", bad, flag, tmp_path / "r.en"], capsys)
        assert code == 2 and f"error: {bad}:2: invalid UTF-8" in err and "iconv" in err
        assert "--skip-invalid-utf8" not in err


def test_json_input_may_start_with_a_byte_order_mark(model_dir, tmp_path, capsys):
    """Plain input has its BOM stripped; a JSON-lines file saved with one was "not JSON"."""
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "리 니"}\n{"text": "차"}\n', encoding="utf-8-sig")
    code, out, err = run(translate_main, ["--model-dir", model_dir, "--json-input", "--input", path,
                                          "--beam-size", "1"], capsys)
    assert code == 0, err
    assert out.splitlines() == Translator.from_dir(model_dir).translate(["리 니", "차"], beam_size=1)


def test_json_scores_go_to_a_device_without_a_file_made_beside_it(model_dir, test_files):
    """`--json /dev/stdout` is written as it is (nmt.atomic). Its directory may not take a new file, as /dev for any
    user but root: the check that the output can be written tried that, and refused. /proc/self/fd refuses even
    root."""
    src, ref = test_files
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "evaluate.py"), "--model-dir", str(model_dir),
                        "--src-file", str(src), "--ref-file", str(ref), "--no-save", "--beam-size", "1", "--json",
                        "/proc/self/fd/1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    scores = json.loads(p.stdout[p.stdout.index("{"):])["results"][str(src)]
    assert scores["bleu"] > 0 and scores["n"] == len(src.read_text(encoding="utf-8").splitlines())


def test_json_scores_to_a_redirected_stdout_keep_what_the_file_holds(model_dir, test_files, tmp_path):
    """`--json /dev/stdout >> app.txt` replaced app.txt through the link with the JSON alone (its earlier lines and
    the report printed just before gone), and `--json /dev/stdout | head -1` ended in a BrokenPipeError traceback."""
    src, ref = test_files
    cmd = [sys.executable, str(REPO / "scripts" / "evaluate.py"), "--model-dir", str(model_dir), "--src-file",
           str(src), "--ref-file", str(ref), "--no-save", "--beam-size", "1", "--json", "/dev/stdout"]
    app = tmp_path / "app.txt"
    app.write_text("previous\n")
    with open(app, "a") as out:
        p = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True, timeout=300)
    text = app.read_text()
    assert p.returncode == 0 and text.startswith("previous\n") and "BLEU" in text, (p.stderr, text)
    assert json.loads(text[text.index("{"):])["results"][str(src)]["n"] > 0
    head = subprocess.run(f"{' '.join(map(shlex.quote, cmd))} | head -1", shell=True, executable="/bin/bash",
                          stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, timeout=300)
    assert "Traceback" not in head.stderr and head.stdout.count("\n") == 1, head.stderr
    # another descriptor (it was "cannot create a file in /dev/fd"), and nmt-translate's and nmt-score's --output
    # (re-opened, the file was emptied: "previous" lost, or written over from its start)
    for script, args in (("evaluate.py", [*cmd[2:-1], "/dev/fd/3"]),
                         ("translate.py", ["--model-dir", str(model_dir), "--input", str(src), "--output", "/dev/fd/3"]),
                         ("score.py", ["--model-dir", str(model_dir), "--src-file", str(src), "--tgt-file", str(ref),
                                       "--output", "/dev/fd/3"])):
        app.write_text("previous\n")
        line = " ".join(map(shlex.quote, [sys.executable, str(REPO / "scripts" / script), *args]))
        p = subprocess.run(f"{line} 3>>{shlex.quote(str(app))}", shell=True, executable="/bin/bash",
                           stderr=subprocess.PIPE, text=True, timeout=300)
        text = app.read_text()
        assert p.returncode == 0 and text.startswith("previous\n") and len(text.splitlines()) > 2, (script, p.stderr)


def test_a_standard_output_or_descriptor_that_cannot_take_the_output_is_refused_first(model_dir, test_files,
                                                                                       tmp_path):
    """A descriptor not open, or open for reading only (`--output /dev/fd/3 3<file`), ended in a traceback after all
    the decoding; standard output appended to a model's file (`>> m/config.json`) or, with `--json FILE`, to
    nmt-evaluate's --ref-file was written into: the model unusable, the references one report longer."""
    src, ref = test_files
    model = tmp_path / "m"
    shutil.copytree(model_dir, model)
    (tmp_path / "ro.txt").write_text("keep\n")
    def q(path) -> str:   # (one word of the line: the checkout or $TMPDIR may hold a space)
        return shlex.quote(str(path))
    script = {name: f"{q(sys.executable)} {q(REPO / 'scripts' / name)} --model-dir {q(model)}"
              for name in ("translate.py", "evaluate.py", "score.py")}
    for line, says in (
            (f"{script['translate.py']} --input {q(src)} --output /dev/fd/3 3<{q(tmp_path / 'ro.txt')}",
             "--output /dev/fd/3: descriptor 3 is open for reading only"),
            (f"{script['evaluate.py']} --src-file {q(src)} --ref-file {q(ref)} --no-save --json /dev/fd/7",
             "--json /dev/fd/7: descriptor 7 is not open"),
            (f"{script['translate.py']} --input {q(src)} >> {q(model / 'config.json')}",
             f"standard output is a file of the model directory {model}"),
            (f"{script['evaluate.py']} --src-file {q(src)} --ref-file {q(ref)} --no-save --json "
             f"{q(tmp_path / 'o.json')} >> {q(ref)}", "standard output is the --ref-file file")):
        before = (model / "config.json").read_bytes(), ref.read_bytes()
        p = subprocess.run(line, shell=True, executable="/bin/bash", stderr=subprocess.PIPE, text=True, timeout=300)
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, (line, p.stderr)
        assert ((model / "config.json").read_bytes(), ref.read_bytes()) == before


@pytest.mark.parametrize("script, package, pin", [("translate.py", "matplotlib", "matplotlib==3.10.*"),
                                                  ("translate.py", "koreanize_matplotlib", "koreanize-matplotlib=="),
                                                  ("serve.py", "fastapi", "fastapi==")])
def test_a_package_nmt_needs_uninstalled_is_named_with_its_pip_command(model_dir, test_files, tmp_path, script,
                                                                       package, pin):
    """Without matplotlib, `nmt-translate --plot-attention` translated everything and then ended in a traceback;
    without fastapi (uvicorn, swagger-ui-bundle) nmt-serve was a traceback: one line naming the pinned pip command,
    before any work."""
    fake = tmp_path / "site" / package
    fake.mkdir(parents=True)
    if package == "koreanize_matplotlib":   # found by its spec, without importing it: a package without its font
        fake.rmdir()
    else:
        (fake / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{package}'\", "
                                          f"name='{package}')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    if package == "koreanize_matplotlib":   # hide the installed one: a module of that name that finds nothing
        (tmp_path / "site" / "sitecustomize.py").write_text(
            "import importlib.util as u\nfind = u.find_spec\n"
            "u.find_spec = lambda name, *a: None if name == 'koreanize_matplotlib' else find(name, *a)\n")
    args = (["--input", test_files[0], "--output", tmp_path / "out", "--plot-attention", tmp_path / "plots"]
            if script == "translate.py" else ["--port", "9"])   # (never bound: the import fails first)
    p = subprocess.run([sys.executable, REPO / "scripts" / script, "--model-dir", model_dir, *args], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].startswith("error: No module named ") and \
        f"a package nmt needs (installed with it): pip install '{pin}" in p.stderr and "Traceback" not in p.stderr, \
        p.stderr[-3000:]
    assert not (tmp_path / "out").exists() or not (tmp_path / "out").read_text()   # before the translating
