"""`nmt-serve`'s flags: bad values and an address it cannot listen on are one-line errors naming the flag, given
before any model loads."""
from __future__ import annotations

import re
import shutil
import socket

import pytest

from nmt.commands import shell_word
from nmt.serve.cli import main, parse_args


@pytest.mark.parametrize("flag, value, says", [
    ("--port", "99999", "must be >= 1 and <= 65535"),
    ("--port", "0", "must be >= 1"),
    ("--max-batch", "0", "must be >= 1"),
    ("--max-queue", "-3", "must be >= 1"),
    ("--max-sentences", "many", "is not an integer"),
    ("--max-beam-size", "0", "must be >= 1"),
    ("--max-body-bytes", "0", "must be >= 1"),
    ("--max-wait-ms", "-5", "must be >= 0"),
    ("--max-wait-ms", "inf", "is not a finite number"),
    ("--timeout", "0", "must be > 0"),
    ("--timeout", "nan", "is not a finite number"),
    ("--log-level", "loud", "invalid choice"),
])
def test_a_bad_flag_value_is_refused_naming_the_flag(capsys, flag, value, says):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--model-dir", "m", flag, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: " in err and says in err


def test_good_values_pass():
    args = parse_args(["--model-dir", "m", "--port", "65535", "--max-wait-ms", "0", "--timeout", "0.5",
                       "--log-level", "debug"])
    assert (args.port, args.max_wait_ms, args.timeout, args.log_level, args.max_batch) == (65535, 0.0, 0.5, "debug",
                                                                                          None)


def test_a_busy_port_is_named_before_the_models_load(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        # the model directory does not exist: the port's error coming first shows nothing was loaded
        assert main(["--model-dir", str(tmp_path / "nowhere"), "--port", str(port), "--log-level", "error"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --host 127.0.0.1 --port") and "give another --port" in err   # as every command
    assert f"--port {port}: cannot listen there" in err and "nowhere" not in err


def test_an_unknown_host_is_named(tmp_path, capsys):
    assert main(["--model-dir", str(tmp_path / "nowhere"), "--host", "nowhere.invalid", "--log-level", "error"]) == 2
    assert "error: --host nowhere.invalid: cannot be resolved" in capsys.readouterr().err


def test_a_batch_wait_as_long_as_the_timeout_is_refused(capsys):
    """--max-wait-ms 1e12 was taken, and every request then timed out (504) waiting for its batch."""
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--model-dir", "m", "--max-wait-ms", "1e12"])
    assert exit_.value.code == 2
    assert "--max-wait-ms 1e+12 is not shorter than --timeout 60 s: every request would time out" in \
        capsys.readouterr().err
    assert parse_args(["--model-dir", "m", "--max-wait-ms", "500", "--timeout", "0.6"]).max_wait_ms == 500


def test_a_beam_limit_too_wide_for_mxnets_indices_is_refused(model_dir):
    """--max-beam-size 100000 was taken; a request asking for it got a plain-text 500 and an MXNet traceback."""
    from nmt.config import ConfigError
    from nmt.serve.cli import build_app
    with pytest.raises(ConfigError, match=r"--max-beam-size 100000 x --max-batch 64 hypotheses x \d+ target pieces is "
                                          r".* more than MXNet's 32-bit indices reach"):
        build_app(parse_args(["--model-dir", str(model_dir), "--max-beam-size", "100000"]))


def test_a_beam_limit_below_the_models_beam_is_refused(model_dir):
    """The server started, then refused every request without a beam_size (the model's 5 is over the limit 2),
    naming a field the client had not sent; so did the page's first Translate."""
    from nmt.config import ConfigError
    from nmt.serve.cli import build_app
    with pytest.raises(ConfigError, match=r"--max-beam-size 2 is below the beam size of --model-dir .* \(5, its "
                                          r"config.json's decode.beam_size\).*give --max-beam-size 5 or more"):
        build_app(parse_args(["--model-dir", str(model_dir), "--max-beam-size", "2"]))
    build_app(parse_args(["--model-dir", str(model_dir), "--max-beam-size", "5"]))


def test_two_models_of_one_pair_are_named_before_any_loads(tmp_path):
    """Two --model-dir of one language pair (a fairseq user's way to give an ensemble) were refused only after both
    had loaded, by a message naming neither; they are named now, before loading (these directories hold config.json
    and the SentencePiece models only, so a load would fail otherwise), with the --ensemble that decodes them
    together when their vocabularies allow it (it was advised for any two, and then refused)."""
    from nmt.config import Config, ConfigError
    from nmt.serve.cli import build_app
    from nmt.tokenizer import train_tokenizer
    words = {"ko": "나는 학교에 갑니다 오늘 날씨가 좋네요 우리 친구와".split(), "en": "I go to school today we".split()}
    for name, n_words in (("a", 6), ("b", 6), ("c", 4)):   # (c: trained on other text)
        (tmp_path / name).mkdir()
        Config().save(tmp_path / name / "config.json")
        for lang in ("ko", "en"):
            lines = [" ".join(words[lang][(i + k) % n_words] for k in range(i % 5 + 1)) for i in range(200)]
            train_tokenizer(lines, tmp_path / name, lang, 300)
    a, b, c = (str(tmp_path / n) for n in "abc")
    ensemble = re.escape(f"--model-dir {shell_word(a)} --ensemble {shell_word(b)}")   # (a command: quoted paths)
    with pytest.raises(ConfigError, match=f"--model-dir {re.escape(a)} and --model-dir {re.escape(b)} both translate "
                                          f"ko-en; .* {ensemble}"):
        build_app(parse_args(["--model-dir", a, "--model-dir", b]))
    with pytest.raises(ConfigError, match=r"one model per language pair \(they cannot decode together, as an "
                                          r"ensemble: their vocabularies differ\)"):
        build_app(parse_args(["--model-dir", a, "--model-dir", c]))
    (tmp_path / "c" / "spm.en.model").unlink()   # (unreadable: loading it names the file, not "vocabularies differ")
    with pytest.raises(ConfigError, match=r"one model per language pair$"):
        build_app(parse_args(["--model-dir", a, "--model-dir", c]))
    with pytest.raises(ConfigError, match=f"--model-dir {a} is given twice"):
        build_app(parse_args(["--model-dir", a, "--model-dir", a + "/"]))


def test_a_queue_smaller_than_one_request_is_refused(capsys):
    """--max-queue 100 with the default --max-sentences 256 was taken, and a request of 101-256 sentences then got 503
    "queue is full (0 of 100 sentences waiting)" on every retry, even on an idle server."""
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--model-dir", "m", "--max-queue", "100"])
    assert exit_.value.code == 2
    assert "error: --max-sentences 256 is more than --max-queue 100: a request of more than 100 sentences would get " \
           "503" in capsys.readouterr().err
    assert parse_args(["--model-dir", "m", "--max-queue", "100", "--max-sentences", "100"]).max_queue == 100


def test_a_tilde_in_the_model_directories_is_the_home_directory(tmp_path, monkeypatch):
    """`nmt-serve --model-dir=~/m` (the shell leaves "~" after "=") was "no such directory", as in every command."""
    monkeypatch.setenv("HOME", str(tmp_path))
    args = parse_args(["--model-dir=~/m", "--ensemble", "~/e"])
    assert args.model_dir == [tmp_path / "m"] and args.ensemble == [tmp_path / "e"]


def test_a_port_taken_while_the_models_load_is_named(capsys):
    """Two servers started at once on one port both passed the early check; the second one's uvicorn then exited
    with its own code 3 after loading its models, and no line of ours."""
    import uvicorn
    from nmt.config import ConfigError
    from nmt.serve.cli import run_server

    async def app(scope, receive, send):   # (never called: nothing connects)
        raise AssertionError(scope)
    with socket.socket() as busy:   # taken after the check, before uvicorn listens
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical",
                                               lifespan="off"))
        with pytest.raises(ConfigError, match=rf"--host 127.0.0.1 --port {port}: cannot listen there .*give another"):
            run_server(server)


def test_a_model_directory_mxnet_cannot_open_is_one_line(model_dir, tmp_path, capsys):
    """nmt-serve was the one command whose main handled errors its own way: a model directory named in CP949 bytes
    (which MXNet cannot open; the other commands refuse it in one line) ended it in a StorageError traceback."""
    import os
    legacy = tmp_path / os.fsdecode("자료".encode("cp949"))
    shutil.copytree(model_dir, legacy)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["--model-dir", str(legacy), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "MXNet opens files by UTF-8 names" in err and "Traceback" not in err, err


def test_two_model_dirs_of_the_same_parameters_are_not_advised_as_an_ensemble(model_dir, tmp_path):
    """Two --model-dir of one pair sharing vocabularies were told to decode together as `--model-dir A --ensemble
    B`, also when B is a copy (or an export) of A, which that ensemble then refuses (the same parameters); they are
    told to give one of them. A checkpoint at which they differ (a twin, one float32 step away) keeps the advice."""
    from nmt.config import ConfigError
    from nmt.serve.cli import build_app
    from tests.synth import twin_of
    copy, twin = tmp_path / "copy", twin_of(model_dir, tmp_path / "twin")
    shutil.copytree(model_dir, copy)
    with pytest.raises(ConfigError, match=rf"--model-dir {re.escape(str(model_dir))} and --model-dir "
                                          rf"{re.escape(str(copy))} both translate ko-en; .* "
                                          r"\(their --checkpoint best holds the same parameters, sha256 [0-9a-f]{12}: "
                                          r"a copy or an export; give one of them\)$"):
        build_app(parse_args(["--model-dir", str(model_dir), "--model-dir", str(copy)]))
    ensemble = f"--model-dir {shell_word(model_dir)} --ensemble {shell_word(twin)}"
    with pytest.raises(ConfigError, match=re.escape(ensemble)):
        build_app(parse_args(["--model-dir", str(model_dir), "--model-dir", str(twin)]))


@pytest.mark.parametrize("role", ["server", ""])
def test_a_dmlc_role_other_than_worker_is_refused_before_a_model_loads(tmp_path, capsys, monkeypatch, role):
    """nmt-serve checks DMLC_ROLE as the other commands do: under DMLC_ROLE=server (or "", set to unset it) MXNet's
    import made the server a node of a distributed job, which waited for good or failed with a C++ traceback."""
    import mxnet  # noqa: F401  (loaded first: were the check skipped, the import would not wait as a job's node here)
    monkeypatch.setenv("DMLC_ROLE", role)
    assert main(["--model-dir", str(tmp_path / "nowhere")]) == 2   # (refused before the directory is looked at)
    assert capsys.readouterr().err == (f"error: DMLC_ROLE={role!r}: MXNet would start this process as a scheduler or "
                                       "server of a distributed job as it loads, instead of running nmt; nmt runs as "
                                       "a job's worker (DMLC_ROLE=worker, as nmt-launch sets it) or outside any job: "
                                       "unset DMLC_ROLE\n")
