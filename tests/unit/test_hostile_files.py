"""Hostile files and flags: binary, unreadable or misplaced configs, states and parameter files, contradictory batch
flags, symlinks and special files as output paths, absurd device counts. Each is one clear error naming the file, key
or flag (`error: ...`, exit code 2, no traceback), or is written where the user meant it."""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import stat
import threading
from pathlib import Path

import mxnet as mx
import pytest
from mxnet import gluon

from nmt import checkpoint as ckpt
from nmt import manifest
from nmt.atomic import atomic_write_text
from nmt.cli import build_train_parser, config_from_args, train_main, training_run
from nmt.commands import shell_word, user_errors
from nmt.config import ARCH_DEFAULTS, Config, ConfigError, TrainConfig
from nmt.jsonio import read_object
from nmt.parallel import MAX_CPU_DEVICES, DeviceError, parse_devices
from nmt.resume import resume_state

ROOT = os.geteuid() == 0
needs_non_root = pytest.mark.skipif(ROOT, reason="root reads files whatever their permissions")

BINARY = bytes(range(256)) * 4   # not UTF-8 (0x80.. are continuation bytes), with NULs


def cfg_of(argv):
    return config_from_args(build_train_parser().parse_args(argv))


def run_of(argv):
    return training_run(build_train_parser().parse_args(argv))


# -- 1. config files: binary, a directory, unreadable ----------------------------------------------------------------
def test_a_binary_config_is_a_config_error_naming_the_file(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_bytes(BINARY)
    for read in (lambda: read_object(path, ConfigError), lambda: Config.load(path), lambda: cfg_of(["--config", str(path)])):
        with pytest.raises(ConfigError, match=rf"^{path}: not valid JSON \('utf-8' codec can't decode byte 0x80") \
                as e:
            read()
        assert str(e.value).endswith(")") and "iconv" not in str(e.value)   # (bytes of no text: nothing to convert)
    assert train_main(["--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: not valid JSON") and "Traceback" not in err


def test_a_config_file_with_a_byte_order_mark_is_read(tmp_path):
    """Windows editors start UTF-8 with a byte-order mark: "not valid JSON (Unexpected UTF-8 BOM (decode using
    utf-8-sig) ...)"."""
    path = tmp_path / "c.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"train": {"max_steps": 5}}).encode())
    assert cfg_of(["--config", str(path), "--model-dir", "m"]).train.max_steps == 5


def test_a_config_file_in_utf16_or_cp949_is_named_with_the_command_converting_it(tmp_path):
    """A config saved by Notepad as "Unicode" (UTF-16) or by a Korean Windows editor (CP949, a Korean path in it) was
    "not valid JSON ('utf-8' codec can't decode byte 0xff ...)" alone, where a corpus file in either encoding is named
    as such with the iconv command that converts it."""
    import subprocess
    text = json.dumps({"data": {"train_src": "학습.ko"}}, ensure_ascii=False)
    for encoding, said in (("utf-16", "; it is UTF-16: convert it, `iconv -f UTF-16 -t UTF-8 "),
                           ("cp949", "; Korean legacy text is often CP949: `iconv -f CP949 -t UTF-8 ")):
        path = tmp_path / f"{encoding}.json"
        path.write_bytes(text.encode(encoding))
        with pytest.raises(ConfigError) as e:
            read_object(path, ConfigError)
        assert str(e.value).startswith(f"{path}: not valid JSON ('utf-8' codec can't decode") and said in str(e.value)
        subprocess.run(re.search("`(iconv .*)`$", str(e.value))[1], shell=True, check=True)
        assert read_object(tmp_path / f"{encoding}.utf8.json", ConfigError)["data"]["train_src"] == "학습.ko"


def test_a_config_file_in_utf16_without_its_byte_order_mark_is_named_so(tmp_path):
    """UTF-16 without a byte-order mark (Python's "utf-16-le", .NET's UnicodeEncoding(false, false)) of an ASCII
    config decodes as UTF-8, its NUL bytes and all, and was "not valid JSON (Expecting property name enclosed in
    double quotes: line 1 column 2 (char 1))" alone, as nmt-serve's UTF-16 request bodies were before it named them."""
    import subprocess
    text = json.dumps({"train": {"max_steps": 5}})
    for encoding in ("UTF-16LE", "UTF-16BE"):
        path = tmp_path / f"{encoding}.json"
        path.write_bytes(text.encode(encoding))
        with pytest.raises(ConfigError) as e:
            read_object(path, ConfigError)
        assert f"; it is {encoding}: convert it, `iconv -f {encoding} -t UTF-8 " in str(e.value), str(e.value)
        subprocess.run(re.search("`(iconv .*)`$", str(e.value))[1], shell=True, check=True)
        assert read_object(tmp_path / f"{encoding}.utf8.json", ConfigError) == {"train": {"max_steps": 5}}
    (tmp_path / "bad.json").write_text('{"train": {"max_steps": 5,}}')   # plain bad JSON: said as it was
    with pytest.raises(ConfigError, match=r"not valid JSON \(Expecting property name .*\(char 26\)\)$"):
        read_object(tmp_path / "bad.json", ConfigError)


def test_a_directory_for_a_config_is_a_config_error_naming_it(tmp_path):
    (tmp_path / "config.json").mkdir()
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'config.json'}: cannot be read \(Is a directory\)$"):
        Config.load(tmp_path / "config.json")
    with pytest.raises(ConfigError, match=rf"^--config {tmp_path}: a directory, not a file$"):
        cfg_of(["--config", str(tmp_path)])


@needs_non_root
def test_an_unreadable_config_is_a_config_error_naming_it(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{}")
    path.chmod(0)
    with pytest.raises(ConfigError, match=rf"^{path}: cannot be read \(Permission denied\)$"):
        cfg_of(["--config", str(path)])


# -- 2. state.json ----------------------------------------------------------------------------------------------------
def test_a_binary_or_misplaced_state_json_is_a_checkpoint_error_naming_it(tmp_path):
    state = tmp_path / ckpt.STATE
    state.write_bytes(BINARY)
    with pytest.raises(ckpt.CheckpointError, match=rf"^{state} is not a valid training state \('utf-8' codec"):
        ckpt.TrainState.load(tmp_path)
    state.unlink()
    state.mkdir()
    with pytest.raises(ckpt.CheckpointError, match=rf"^{state} cannot be read \(Is a directory\)$"):
        ckpt.TrainState.load(tmp_path)


@needs_non_root
def test_an_unreadable_state_json_is_a_checkpoint_error_naming_it(tmp_path):
    ckpt.TrainState(step=3).save(tmp_path)
    (tmp_path / ckpt.STATE).chmod(0)
    with pytest.raises(ckpt.CheckpointError, match=r"state.json cannot be read \(Permission denied\)"):
        ckpt.TrainState.load(tmp_path)


# -- 3. unreadable parameter files of a directory with manifests ----------------------------------------------------
class _Net:
    def save_parameters(self, path: str) -> None:
        mx.nd.save(path, {"w": mx.nd.ones((3,))})


class _Trainer:
    def save_states(self, path: str) -> None:
        Path(path).write_bytes(b"states")


def _checkpointed(model_dir: Path) -> Path:
    """A model directory with one checkpoint (step 5, also the best) and its manifests."""
    ckpt.save_checkpoint(model_dir, _Net(), _Trainer(), ckpt.TrainState(step=5), keep_last=2, is_best=True)
    return model_dir


def _denied(path: Path):
    """`nmt.manifest`'s sha256 as it fails on a file the user may not read (root may read any)."""
    def sha256_of(p):
        if Path(p) == path:
            raise PermissionError(13, "Permission denied", str(p))
        return real(p)
    real = manifest.sha256_of
    return sha256_of


def test_an_unreadable_parameter_file_is_a_checkpoint_error_naming_it(tmp_path, monkeypatch):
    model_dir = _checkpointed(tmp_path)
    best = model_dir / ckpt.PARAMS_BEST
    monkeypatch.setattr(manifest, "sha256_of", _denied(best))
    for check in (lambda: ckpt.verify_params(best), lambda: ckpt.params_path(model_dir, "best")):
        with pytest.raises(ckpt.CheckpointError, match=rf"^checkpoint params.best of {model_dir} cannot be used: "
                                                       rf"{best} cannot be read \(Permission denied\)$"):
            check()
    monkeypatch.setattr(manifest, "sha256_of", _denied(model_dir / ckpt.params_file(5)))
    with pytest.raises(ckpt.CheckpointError, match=r"^--resume: .*params.00000005 cannot be read \(Permission denied"):
        resume_state(model_dir)


@needs_non_root
def test_a_parameter_file_without_read_permission_is_a_checkpoint_error(tmp_path):
    model_dir = _checkpointed(tmp_path)
    best = model_dir / ckpt.PARAMS_BEST
    best.chmod(0)
    st = best.stat()
    os.utime(best, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))   # not the sha256 cached when it was written
    with pytest.raises(ckpt.CheckpointError, match=r"params.best cannot be read \(Permission denied\)"):
        ckpt.params_path(model_dir, "best")


# -- 4. a truncated parameter file, in a directory without manifests ------------------------------------------------
def _dense(in_units: int = 100) -> gluon.nn.Dense:
    net = gluon.nn.Dense(64, in_units=in_units)
    net.initialize(ctx=mx.cpu())
    return net


def test_a_truncated_parameter_file_is_said_to_be_one_not_a_traceback(tmp_path):
    path = tmp_path / ckpt.PARAMS_BEST
    _dense().save_parameters(str(path))
    path.write_bytes(path.read_bytes()[:10000])   # `head -c 10000`
    with pytest.raises(ckpt.CheckpointError) as err:
        ckpt.load_parameters(_dense(), path, mx.cpu(), tmp_path / ckpt.CONFIG)
    assert str(err.value) == (f"{path}: not a complete MXNet parameter file (truncated, damaged or another kind of "
                              "file: Check failed: fi->Read(data): Invalid NDArray file format)")


def test_parameters_of_another_model_keep_the_message_shape_with_mxnets_reason(tmp_path):
    path = tmp_path / ckpt.PARAMS_BEST
    _dense(in_units=50).save_parameters(str(path))
    with pytest.raises(ckpt.CheckpointError, match=rf"^{path}: cannot load these parameters into the model described "
                                                   r"by .*config.json \(.*shape") as err:
        ckpt.load_parameters(_dense(), path, mx.cpu(), tmp_path / ckpt.CONFIG)
    assert "Traceback" not in str(err.value)


def test_a_directory_for_a_parameter_file_is_said_to_be_unreadable(tmp_path):
    (tmp_path / ckpt.PARAMS_BEST).mkdir()
    with pytest.raises(ckpt.CheckpointError, match=r"params.best cannot be read \(Is a directory\)$"):
        ckpt.load_parameters(_dense(), tmp_path / ckpt.PARAMS_BEST, mx.cpu(), tmp_path / ckpt.CONFIG)


# -- 5. bad values in a config file name the file (and the key); the command line's stay as they were -------------
@pytest.mark.parametrize("sections, says", [
    ({"model": {"hidden_size": -5}}, "model.hidden_size: --hidden-size must be a positive integer (got -5)"),
    ({"model": {"arch": "transformer", "dropout": 1.5}}, "model.dropout: --dropout must be in [0, 1) (got 1.5)"),
    ({"data": {"vocab_size": -3}}, "data.vocab_size: --vocab-size must be from 16 to 1000000, got -3"),
    ({"decode": {"beam_size": 0}}, "decode.beam_size: --beam-size must be an integer from 1 to 999999 (got 0)"),
    ({"optim": {"schedule": "cosine"}}, "optim.schedule: --lr-schedule 'cosine': use inv_sqrt, plateau or constant"),
    ({"decode": {"batch_size": 0}}, "decode.batch_size: --decode-batch-size must be an integer from 1 to 999999 (got "
                                    "0)"),   # (the key was named only where the flag is named after it)
    ({"data": {"tgt_lang": "fr"}}, "data.tgt_lang: --tgt 'fr': use one of ko, en"),
    ({"data": {"batch_size": 2}, "train": {"accum_steps": 4}}, "--batch-size 2 is smaller than --accum-steps 4"),
])
def test_a_bad_value_in_a_config_file_names_the_file_and_key(tmp_path, sections, says):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(sections))
    for load in (lambda: Config.load(path, complete=False), lambda: cfg_of(["--config", str(path)])):
        with pytest.raises(ConfigError) as err:
            load()
        assert str(err.value) == f"{path}: {says}"


@pytest.mark.parametrize("sections, says", [
    ({"data": {"train_src": "", "train_tgt": "t.en"}}, "data.train_src: --train-src is empty: give a path, or leave "
                                                       "it out"),   # (it trained on the Tatoeba recipe instead)
    ({"data": {"data_dir": ""}}, "data.data_dir: --data-dir is empty: give a path, or leave it out"),
    ({"data": {"max_src_tokens": 0}}, "data.max_src_tokens: --max-src-tokens must be >= 1, got 0"),   # (all dropped)
    ({"data": {"batch_size": 64, "batch_tokens": 500}}, "data.batch_size: --batch-size 64 and --batch-tokens 500 "
                                                        "contradict each other: "),   # (batch_size was dropped)
])
def test_a_value_a_flag_refuses_is_refused_in_a_config_file_too(tmp_path, sections, says):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(sections))
    with pytest.raises(ConfigError) as err:
        cfg_of(["--config", str(path)])
    assert str(err.value).startswith(f"{path}: {says}"), err.value
    with pytest.raises(ConfigError):   # (the Python API's Config.from_dict took batch_size beside batch_tokens)
        Config.from_dict(sections)


def test_a_models_own_config_json_with_a_blank_path_loads_as_without_it(tmp_path):
    """A model trained from a --config file with "data_dir": "" had it saved in its config.json; refusing blank
    paths in files made every command refuse that model, with advice to give a --data-dir nmt-translate has not."""
    saved = Config().to_dict()
    saved["data"].update(data_dir="", cache_dir="", test_src="")
    (tmp_path / ckpt.CONFIG).write_text(json.dumps(saved))
    d = Config.load(tmp_path / ckpt.CONFIG).data
    assert (d.data_dir, d.cache_dir, d.test_src) == (None, None, None)


def test_a_flag_of_one_kind_of_batch_overrides_a_files_other_and_a_models_own_config_loads(tmp_path):
    """5539b49 refused `--config bs.json --batch-tokens 500` where the file gives batch_size 64 ("flags override
    it"), and every command refused a model whose config.json an earlier Config.from_dict saved with both (its run
    batched by tokens)."""
    path = tmp_path / "bs.json"
    path.write_text(json.dumps({"data": {"batch_size": 64}}))
    d = cfg_of(["--config", str(path), "--batch-tokens", "500"]).data
    assert (d.batch_tokens, d.batch_size) == (500, 32)
    saved = Config().to_dict()
    saved["data"].update(batch_size=64, batch_tokens=500)
    (tmp_path / ckpt.CONFIG).write_text(json.dumps(saved))
    d = Config.load(tmp_path / ckpt.CONFIG).data
    assert (d.batch_tokens, d.batch_size) == (500, 32)


def test_a_config_given_as_a_pipe_is_said_to_be_one(tmp_path):
    """`--config /dev/stdin` (read twice: to find the run's directory, then its settings) said "file not found"."""
    read, write = os.pipe()
    try:
        with pytest.raises(ConfigError, match=rf"^--config /dev/fd/{read}: not a file \(a pipe\?\): give it as a file"):
            cfg_of(["--config", f"/dev/fd/{read}"])
    finally:
        os.close(read)
        os.close(write)


def test_a_config_file_given_twice_is_refused_naming_both(tmp_path, capsys):
    """The second --config replaced the first without a word (its learning rate lost)."""
    with pytest.raises(SystemExit):
        build_train_parser().parse_args(["--config", "a.json", "--config", "b.json"])
    assert "--config is given twice (a.json and b.json): give it once" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--train-src", "--train-tgt", "--dev-src", "--dev-tgt", "--test-src", "--test-tgt"])
def test_a_corpus_file_given_twice_is_refused_naming_both(flag, capsys):
    """`--train-src a.ko --train-tgt a.en --train-src b.ko --train-tgt b.en` trained on b alone, without a word (a
    Marian user's repeated --train-sets adds corpora up)."""
    with pytest.raises(SystemExit):
        build_train_parser().parse_args([flag, "a", flag, "b"])
    assert f"{flag} is given twice (a and b): give it once" in capsys.readouterr().err
    cfg = cfg_of(["--train-src", "a.ko", "--train-tgt", "a.en"])   # once: taken, and nothing else with it
    assert (Path(cfg.data.train_src).name, Path(cfg.data.train_tgt).name, cfg.data.recipe) == ("a.ko", "a.en", None)


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_a_corpus_file_on_a_closed_stdin_is_said_to_be_one(tmp_path, capsys, monkeypatch, dry_run):
    """`nmt-train --dev-src /dev/stdin <&-` said the dev file was empty (the closed descriptor is /dev/null), where
    the decoding commands say standard input is closed."""
    from nmt.cli import train_main
    monkeypatch.setattr("nmt.commands.CLOSED", {"stdin"})
    files = [tmp_path / n for n in ("t.ko", "t.en", "d.en")]
    code = train_main(["--train-src", str(files[0]), "--train-tgt", str(files[1]), "--dev-src", "/dev/stdin",
                       "--dev-tgt", str(files[2]), "--model-dir", str(tmp_path / "m"), *dry_run])
    assert code == 2 and capsys.readouterr().err.startswith("error: standard input is closed (the command was "
                                                             "started with <&-)")
    assert not (tmp_path / "m").exists()


def test_a_models_config_json_with_a_bad_value_names_it(tmp_path):
    saved = Config().to_dict()
    saved["model"]["hidden_size"] = -5
    (tmp_path / ckpt.CONFIG).write_text(json.dumps(saved))
    with pytest.raises(ConfigError) as err:
        Config.load(ckpt.config_of(tmp_path))
    assert str(err.value) == f"{tmp_path / ckpt.CONFIG}: model.hidden_size: --hidden-size must be a positive integer " \
                             "(got -5)"


def test_a_new_options_default_of_0_passes_the_files_range_check(tmp_path, monkeypatch):
    """A model option named like a size ("window_size", 0 = off) was refused as "must be a positive integer (got 0)"
    in every config.json the trainer wrote with it: a file's sizes were checked by their names alone."""
    from nmt.config import ModelConfig
    monkeypatch.setattr(ModelConfig, "ff_size", 0)   # an option whose default is 0
    saved = Config().to_dict()
    saved["model"]["ff_size"] = 0
    (tmp_path / ckpt.CONFIG).write_text(json.dumps(saved))
    assert Config.load(tmp_path / ckpt.CONFIG).model.ff_size == 0
    saved["model"]["ff_size"] = -1
    (tmp_path / ckpt.CONFIG).write_text(json.dumps(saved))
    with pytest.raises(ConfigError, match=r"model.ff_size: --ff-size must be a positive integer \(got -1\)"):
        Config.load(tmp_path / ckpt.CONFIG)


@pytest.mark.parametrize("model, says", [
    ({"arch": "LSTM"}, f"model.arch: --arch must be one of {', '.join(sorted(ARCH_DEFAULTS))} (got 'LSTM')"),
    ({"attention": "bahdanau"}, "model.attention: --attention must be one of dot, general, mlp (got 'bahdanau')"),
    ({"arch": "transformer", "model_size": 250, "heads": 3}, "model.model_size: --model-size 250 must be divisible "
                                                             "by --heads 3"),
])
def test_a_model_value_the_architecture_refuses_names_the_config_file_before_any_data(tmp_path, model, says):
    path = tmp_path / "c.json"   # these were said after the data was read (and SentencePiece trained), as flags
    path.write_text(json.dumps({"model": model}))
    with pytest.raises(ConfigError) as err:
        run_of(["--config", str(path), "--train-src", str(tmp_path / "none.ko"), "--train-tgt", str(tmp_path / "x")])
    assert str(err.value).startswith(f"{path}: {says}")
    with pytest.raises(ConfigError, match=r"^--tie-weights needs --embed-size == --hidden-size"):   # a flag's: as is
        run_of(["--embed-size", "128", "--train-src", str(tmp_path / "none.ko"), "--train-tgt", str(tmp_path / "x")])


@pytest.mark.parametrize("d, says", [
    (None, "config: a configuration is a dict of sections (data, model, ...), got NoneType"),
    ([], "config: a configuration is a dict of sections (data, model, ...), got list"),
    ({"model": "transformer"}, "config: section 'model' must be a JSON object, got \"transformer\""),
    ({"model": None}, "config: section 'model' must be a JSON object, got null"),
    ({"data": {"recipe": "all"}, "train": None}, "config: section 'train' must be a JSON object, got null"),
    ({"model": {"arch": ["lstm"]}}, "config: model.arch must be a string, got [\"lstm\"]"),   # (TypeError: unhashable)
    ({"model": {"arch": {}}}, "config: model.arch must be a string, got {}"),
])
def test_config_from_dict_names_what_is_no_dict(d, says):
    """Config.from_dict (the Python API's way to a configuration) raised AttributeError: '...' has no 'get'; a null
    section was taken as an empty one, every setting of it silently at its default."""
    with pytest.raises(ConfigError) as err:
        Config.from_dict(d)
    assert str(err.value) == says


def test_config_from_dict_takes_paths_as_their_strings(tmp_path):
    """A Path for a directory made the error message itself fail (PosixPath is not JSON serializable)."""
    cfg = Config.from_dict({"train": {"model_dir": tmp_path / "m"}, "data": {"data_dir": tmp_path}})
    assert (cfg.train.model_dir, cfg.data.data_dir) == (str(tmp_path / "m"), str(tmp_path))
    cfg.save(tmp_path / "c.json")
    assert Config.load(tmp_path / "c.json").train.model_dir == str(tmp_path / "m")


def test_a_bad_flag_is_not_blamed_on_the_config_file_or_the_runs_config(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"decode": {"beam_size": 4}}))
    with pytest.raises(ConfigError) as err:
        cfg_of(["--config", str(path), "--beam-size", "0"])
    assert str(err.value) == "--beam-size must be an integer from 1 to 999999 (got 0)"
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    Config().save(model_dir / ckpt.CONFIG)
    with pytest.raises(ConfigError) as err:
        run_of(["--model-dir", str(model_dir), "--resume", "--lr", "-1"])
    assert str(err.value) == "--lr must be > 0 and finite, got -1.0"


def test_a_key_given_twice_in_a_config_file_is_refused_naming_it(tmp_path, capsys):
    path = tmp_path / "c.json"   # json.loads would keep 900 without a word
    path.write_text('{"data": {"vocab_size": 800, "vocab_size": 900}}')
    says = f"{path}: key 'vocab_size' is given twice in one object; give each key once"
    for load in (lambda: Config.load(path, complete=False), lambda: cfg_of(["--config", str(path)])):
        with pytest.raises(ConfigError) as err:
            load()
        assert str(err.value) == says
    assert train_main(["--config", str(path), "--dry-run"]) == 2
    assert capsys.readouterr().err == f"error: {says}\n"
    (tmp_path / ckpt.CONFIG).write_text('{"data": {}, "data": {}}')   # a model's own config.json
    with pytest.raises(ConfigError, match="key 'data' is given twice"):
        Config.load(ckpt.config_of(tmp_path))


def test_json_nested_past_the_parsers_recursion_is_named_as_bad_json(tmp_path):
    """A RecursionError traceback, from a config file and from a --json-input line."""
    from nmt.corpus import CorpusError
    from nmt.json_input import parse_json_line
    deep = "[" * 100_000 + "]" * 100_000
    path = tmp_path / "c.json"
    path.write_text('{"data": ' + deep + "}")
    with pytest.raises(ConfigError, match=rf"^{path}: not valid JSON \(arrays and objects nested too deeply"):
        Config.load(path, complete=False)
    with pytest.raises(CorpusError, match=r"^in.jsonl:3: not JSON \(arrays and objects nested too deeply"):
        parse_json_line(deep, 3, "in.jsonl")


def test_a_runs_config_json_as_config_does_not_make_that_run_the_new_runs_directory(tmp_path, capsys):
    run = tmp_path / "run"   # a trained model's config.json, the natural --config, names its own directory
    run.mkdir()
    (run / ckpt.LOG).write_text("")   # (a run's: it writes its log first)
    dataclasses.replace(Config(), train=dataclasses.replace(TrainConfig(), model_dir=str(run))).save(run / ckpt.CONFIG)
    argv = ["--config", str(run / ckpt.CONFIG)]
    with pytest.raises(ConfigError) as err:
        run_of(argv)
    assert str(err.value) == (f"--config {run / ckpt.CONFIG}: its train.model_dir is the directory of the run whose "
                              "settings it holds; give the new run's --model-dir (or --resume to continue that run)")
    assert train_main([*argv, "--dry-run"]) == 2 and "--overwrite" not in capsys.readouterr().err
    assert run_of([*argv, "--model-dir", str(tmp_path / "new")])[0].train.model_dir == str(tmp_path / "new")
    assert run_of([*argv, "--resume"])[0].train.model_dir == str(run)
    other = tmp_path / "c.json"   # a config file elsewhere that names a directory: that is the run's directory
    other.write_text(json.dumps({"train": {"model_dir": str(run)}}))
    assert run_of(["--config", str(other), "--overwrite"])[0].train.model_dir == str(run)
    # a copy of the run's config.json, or a file naming it, without --overwrite: said to hold a run (it was "already
    # exists ... --overwrite to delete it", and --overwrite then replaced the run the copy was made from)
    with pytest.raises(ConfigError, match=rf"^--config {other}: its train.model_dir, {run}, holds a run \(the file may "
                                          r"be a copy of that run's settings\): give --model-dir"):
        run_of(["--config", str(other)])
    assert run_of(["--config", str(other), "--model-dir", str(tmp_path / "new")])[0].train.model_dir == \
        str(tmp_path / "new")
    other.write_text(json.dumps({"train": {"model_dir": " "}}))
    with pytest.raises(ConfigError, match=r"train.model_dir is empty; give --model-dir$"):
        run_of(["--config", str(other)])
    other.write_text(json.dumps({"data": {"src_lang": "en", "tgt_lang": "ko"}}))   # none named: as without --config
    assert run_of(["--config", str(other)])[0].train.model_dir == str(Path("models") / "tatoeba-en-ko")


def test_a_settings_file_inside_the_directory_it_names_is_not_called_a_run(tmp_path, monkeypatch):
    """exp1/settings.json naming exp1, before any run: it was refused as "the directory of the run whose settings it
    holds ... (or --resume to continue that run)", and --resume then found nothing to resume."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp1").mkdir()
    (tmp_path / "exp1" / "settings.json").write_text(json.dumps({"train": {"model_dir": "exp1"}}))
    for name in ("settings.json", "config.json"):   # (named as a run's own, but no run wrote it)
        (tmp_path / "exp1" / name).write_text(json.dumps({"train": {"model_dir": "exp1"}}))
        with pytest.raises(ConfigError, match=rf"^--config exp1/{name}: its train.model_dir is the directory the "
                                              r"file is in, and a model directory holds only its run's files: keep the "
                                              r"file elsewhere, or give --model-dir$"):
            run_of(["--config", f"exp1/{name}"])
        (tmp_path / "exp1" / name).unlink()
    (tmp_path / "exp1" / "settings.json").write_text(json.dumps({"train": {"model_dir": "exp1"}}))
    assert run_of(["--config", "exp1/settings.json", "--model-dir", "m"])[0].train.model_dir == "m"


def test_a_runs_config_json_names_its_directory_from_any_working_directory(tmp_path, monkeypatch, capsys):
    """config.json kept train.model_dir as typed ("rel2") while it kept the data files absolute: `--config
    ../rel2/config.json` from another directory started a new run in ./rel2 instead of being refused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rel2").mkdir()
    (tmp_path / "rel2" / ckpt.LOG).write_text("")   # (a run's directory)
    (tmp_path / "other").mkdir()
    config = tmp_path / "rel2" / ckpt.CONFIG
    dataclasses.replace(Config(), train=dataclasses.replace(TrainConfig(), model_dir="rel2")).save(config)
    assert read_object(config, ConfigError)["train"]["model_dir"] == str(tmp_path / "rel2")   # absolute, as the data
    monkeypatch.chdir(tmp_path / "other")
    says = ("--config ../rel2/config.json: its train.model_dir is the directory of the run whose settings it holds; "
            "give the new run's --model-dir (or --resume to continue that run)")
    saved = json.loads(config.read_text())
    for model_dir in (str(tmp_path / "rel2"), "rel2"):   # as saved now, and relative as earlier versions saved it
        saved["train"]["model_dir"] = model_dir
        config.write_text(json.dumps(saved))
        with pytest.raises(ConfigError) as err:
            run_of(["--config", "../rel2/config.json"])
        assert str(err.value) == says
        assert train_main(["--config", "../rel2/config.json", "--dry-run"]) == 2
        assert capsys.readouterr().err == f"error: {says}\n"
    assert not (tmp_path / "other" / "rel2").exists()
    assert run_of(["--config", "../rel2/config.json", "--model-dir", "new"])[0].train.model_dir == "new"
    monkeypatch.chdir(tmp_path / "other")
    (tmp_path / "other" / "rel2").mkdir()   # a run of that name here: --resume took it, not the file's own
    saved["train"]["model_dir"] = "rel2"
    config.write_text(json.dumps(saved))
    assert run_of(["--config", "../rel2/config.json", "--resume"])[0].train.model_dir == str(tmp_path / "rel2")
    (tmp_path / "rel2" / ckpt.LOG).unlink()   # no run there (with one, the file is of a moved run: refused)
    saved["train"]["model_dir"] = "elsewhere"   # a relative directory that is not the file's: the run's own
    config.write_text(json.dumps(saved))
    assert run_of(["--config", "../rel2/config.json"])[0].train.model_dir == "elsewhere"


def test_the_config_json_of_a_moved_run_does_not_start_resume_or_overwrite_where_the_run_was(tmp_path, capsys):
    """`mv runA runB` (or a copy): runB/config.json still names runA. `--config runB/config.json` started a new run in
    runA, resumed runA with --resume, and with --overwrite replaced the run trained there."""
    old, run = tmp_path / "runA", tmp_path / "runB"
    run.mkdir()
    dataclasses.replace(Config(), train=dataclasses.replace(TrainConfig(), model_dir=str(old))).save(run / ckpt.CONFIG)
    (run / ckpt.STATE).write_text("{}")
    run_says = (f"--config {run / ckpt.CONFIG}: the settings of the run in {run}, whose train.model_dir names another "
                f"directory, {old} (the run was moved or copied): give --model-dir, a new directory to start a run (or "
                f"{run} with --resume to continue this one)")
    export_says = (f"--config {run / ckpt.CONFIG}: the settings of the export in {run}, whose train.model_dir names "
                   f"the run it came from, {old}: give --model-dir, a new directory to start a run (or fine-tune the "
                   f"export there with --init-from {shell_word(run)})")
    for beside, says in ((ckpt.STATE, run_says), (ckpt.EXPORT, export_says)):   # an export's names its run, too
        for name in (ckpt.STATE, ckpt.EXPORT):
            (run / name).unlink(missing_ok=True)
        (run / beside).write_text("{}")
        for more in ([], ["--resume"], ["--overwrite"]):
            with pytest.raises(ConfigError) as err:
                run_of(["--config", str(run / ckpt.CONFIG), *more])
            assert str(err.value) == says
            assert train_main(["--config", str(run / ckpt.CONFIG), *more, "--dry-run"]) == 2
            assert capsys.readouterr().err == f"error: {says}\n"
    assert not old.exists()
    assert run_of(["--config", str(run / ckpt.CONFIG), "--model-dir", str(run), "--resume"])[0].train.model_dir == str(
        run)


# -- 6. --batch-size and --batch-tokens -------------------------------------------------------------------------------
def test_batch_size_and_batch_tokens_on_one_command_line_contradict_each_other(tmp_path, capsys):
    says = ("--batch-size 16 and --batch-tokens 500 contradict each other: a batch is counted in sentences "
            "(--batch-size) or in padded target positions (--batch-tokens); give one of them")
    with pytest.raises(ConfigError) as err:
        cfg_of(["--batch-size", "16", "--batch-tokens", "500"])
    assert str(err.value) == says
    assert train_main(["--batch-size", "16", "--batch-tokens", "500", "--model-dir", str(tmp_path / "m"),
                       "--dry-run"]) == 2
    assert capsys.readouterr().err == f"error: {says}\n"


def test_a_config_file_may_hold_both_and_a_flag_overrides_its_kind_of_batch(tmp_path):
    path = tmp_path / "c.json"
    saved = Config().to_dict()   # a model's config.json: batch_size 32 always, here with batch_tokens too
    saved["data"]["batch_tokens"] = 500
    path.write_text(json.dumps(saved))
    assert (cfg_of(["--config", str(path)]).data.batch_tokens, cfg_of(["--config", str(path)]).data.batch_size) == \
        (500, 32)
    by_flag = cfg_of(["--config", str(path), "--batch-size", "16"]).data   # sentences, as the command line says
    assert (by_flag.batch_size, by_flag.batch_tokens) == (16, None)
    by_flag = cfg_of(["--config", str(path), "--batch-tokens", "300"]).data
    assert (by_flag.batch_size, by_flag.batch_tokens) == (32, 300)


@pytest.mark.parametrize("trained, flags, says", [
    ({}, ["--batch-tokens", "500"], "--resume: --batch-tokens 500 asks for batches of tokens, and this run was "
                                    "trained with --batch-size 32"),   # ("differs from null")
    ({"batch_tokens": 500}, ["--batch-size", "32"], "--resume: --batch-size 32 asks for batches of sentences, and "
                                                    "this run was trained with --batch-tokens 500"),
])
def test_resume_refuses_the_other_kind_of_batch(tmp_path, trained, flags, says):
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    saved = Config().to_dict()
    saved["data"].update(trained)
    (model_dir / ckpt.CONFIG).write_text(json.dumps(saved))
    with pytest.raises(ConfigError, match=r"^" + says.replace("(", r"\(")):
        run_of(["--model-dir", str(model_dir), "--resume", *flags])


@pytest.mark.parametrize("trained, given, says", [
    ({}, {"batch_tokens": 500}, "data.batch_tokens = 500 asks for batches of tokens, and this run was trained with "
                                "--batch-size 32"),   # ("differs from null")
    ({"batch_tokens": 500}, {"batch_size": 16}, "data.batch_size = 16 asks for batches of sentences, and this run "
                                                "was trained with --batch-tokens 500"),
])
def test_resume_refuses_a_config_files_other_kind_of_batch(tmp_path, trained, given, says):
    model_dir, path = tmp_path / "m", tmp_path / "c.json"
    model_dir.mkdir()
    saved = Config().to_dict()
    saved["data"].update(trained)
    (model_dir / ckpt.CONFIG).write_text(json.dumps(saved))
    path.write_text(json.dumps({"data": given}))
    with pytest.raises(ConfigError) as err:
        run_of(["--model-dir", str(model_dir), "--resume", "--config", str(path)])
    assert str(err.value).startswith(f"--resume: {path}: {says} ({model_dir / ckpt.CONFIG}); the data cannot change "
                                     f"within a run: drop data.{next(iter(given))} from {path}, or train into a new "
                                     "--model-dir")
    path.write_text(json.dumps(saved))   # the run's own config.json, batch_size beside its batch_tokens: the same
    assert run_of(["--model-dir", str(model_dir), "--resume", "--config", str(path)])
    other = Config().to_dict()   # another run's config.json (batch_size 32, batch_tokens null): both keys to drop
    path.write_text(json.dumps(other))
    if trained:
        with pytest.raises(ConfigError, match=r"drop data.batch_size and data.batch_tokens from .*c.json, or train"):
            run_of(["--model-dir", str(model_dir), "--resume", "--config", str(path)])


@pytest.mark.parametrize("flag, value", [("--valid-beam", "5"), ("--valid-max-sentences", "20"),
                                         ("--max-len-b", "3"), ("--max-len-a", "0.5"), ("--max-input-tokens", "9")])
def test_resume_refuses_another_way_of_translating_the_dev_set(tmp_path, flag, value):
    """A resume with --valid-max-sentences 20 (or --valid-beam 5, --max-len-b 3) compared the dev scores of 20
    sentences (of translations cut at 3 tokens) with a best measured on 500, for params.best, patience and the
    plateau's halvings, as --valid-metric, refused, would. With --valid-metric ppl no translation is scored."""
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / ckpt.CONFIG).write_text(json.dumps(Config().to_dict()))
    with pytest.raises(ConfigError, match=rf"^--resume: {flag} {value} differs from [\d.]+, which this run was "
                                          r"trained with .*the dev translations whose --valid-metric chooses the best "
                                          r"checkpoint are made with it"):
        run_of(["--model-dir", str(model_dir), "--resume", flag, value])
    assert run_of(["--model-dir", str(model_dir), "--resume", "--beam-size", "7"])   # the test sets' beam may change
    assert run_of(["--model-dir", str(model_dir), "--resume", "--length-penalty", "1.0"])   # (greedy dev: not used)
    saved = Config().to_dict()
    saved["train"]["valid_metric"] = "ppl"
    (model_dir / ckpt.CONFIG).write_text(json.dumps(saved))
    assert run_of(["--model-dir", str(model_dir), "--resume", flag, value])


# -- 7. atomic writes through a symbolic link and into a named pipe ------------------------------------------------
def test_an_atomic_write_to_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    (tmp_path / "real").mkdir()
    target, link = tmp_path / "real" / "scores.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(Path("real") / "scores.json")   # relative, as `ln -s` makes them
    atomic_write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(Path("real") / "scores.json")
    assert target.read_text() == "new" and sorted(os.listdir(tmp_path / "real")) == ["scores.json"]
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "real" / "new.json")
    atomic_write_text(dangling, "created")
    assert dangling.is_symlink() and (tmp_path / "real" / "new.json").read_text() == "created"


@pytest.mark.parametrize("through_a_link", [False, True])   # a link: like /dev/stdout when a shell pipes it
def test_an_atomic_write_to_a_fifo_writes_into_it_and_keeps_it(tmp_path, through_a_link):
    fifo, link = tmp_path / "pipe", tmp_path / "out.json"
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    atomic_write_text(link if through_a_link else fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["out.json", "pipe"]   # no temporary file


# -- 8. --cpu-devices ------------------------------------------------------------------------------------------------
def test_an_absurd_cpu_device_count_is_refused_before_any_context_exists(tmp_path, capsys):
    assert len(parse_devices(None, 4)) == 4 and len(parse_devices(None, MAX_CPU_DEVICES)) == MAX_CPU_DEVICES
    with pytest.raises(DeviceError, match=rf"^--cpu-devices 1000 is more than {MAX_CPU_DEVICES}: CPU contexts share"):
        parse_devices(None, 1000)
    assert DeviceError in user_errors()
    assert train_main(["--cpu-devices", "1000", "--model-dir", str(tmp_path / "m"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --cpu-devices 1000 is more than 64") and "Traceback" not in err


def test_a_config_made_in_python_checks_its_types_and_takes_numpys_numbers():
    """`TrainConfig(max_steps="100")` raised "'>=' not supported between 'str' and 'int'", naming no field;
    `DataConfig(max_src_tokens="80")` and `TrainConfig(cpu_devices="1")` passed and failed deep in training, and
    `progress="yes"` or `recipe=5` were taken; numpy's numbers (a sweep over np.arange) were refused with "must be
    an integer ... (got 3)"."""
    import numpy as np
    from nmt.config import DataConfig, DecodeConfig, ModelConfig
    for make, says in ((lambda: TrainConfig(max_steps="100"), "TrainConfig.max_steps must be an integer, got '100'"),
                       (lambda: DataConfig(max_src_tokens="80"), "DataConfig.max_src_tokens must be an integer"),
                       (lambda: DataConfig(recipe=5), "DataConfig.recipe must be a string, got 5 (int)"),
                       (lambda: TrainConfig(progress="yes"), "TrainConfig.progress must be true or false"),
                       (lambda: ModelConfig(hidden_size=2.5), "ModelConfig.hidden_size must be an integer")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            make()
    d = DecodeConfig(beam_size=np.int64(3), length_penalty_alpha=np.float32(1.0))
    assert (d.beam_size, d.length_penalty_alpha) == (3, 1.0) and type(d.beam_size) is int
    d.beam_size = np.int64(4)   # set by hand, as a Translator's decode is: checked again before decoding
    d.check()
    assert TrainConfig(model_dir=Path("m"), progress=np.bool_(False)).progress is False
    made = Config.from_dict({"optim": {"lr": np.float32(1e-3)}, "decode": {"beam_size": np.int64(3)}})   # (it raised
    assert made.decode.beam_size == 3 and type(made.optim.lr) is float   # "float32 is not JSON serializable")
    with pytest.raises(ConfigError, match=r"^f.json: decode.beam_size must be an integer, got \"2.0\""):
        Config.from_dict({"decode": {"beam_size": np.float32(2)}}, source="f.json")


def test_an_existing_output_on_a_read_only_file_system_is_said_as_such(tmp_path, monkeypatch):
    """An existing --output file is written in place: one that cannot be opened for writing is said before any work,
    with why. os.access answered "permission denied" for a file of a read-only mount, where no permission would help
    (and root, who may write any file, got no error at all for one that cannot be written). The file is opened for
    writing (not emptied) to ask; EROFS stands in for the mount, which a test cannot make."""
    from nmt.cli_io import refuse_overwriting
    out = tmp_path / "out.en"
    out.write_text("kept\n")
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if os.fspath(path) == str(out) and flags & os.O_ACCMODE != os.O_RDONLY:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_open(path, flags, *args, **kwargs)
    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(ConfigError, match=rf"^--output {re.escape(str(out))}: cannot write it \(read-only file "
                                          r"system\)$"):
        refuse_overwriting("--output", str(out), {"--input": "-"})
    assert out.read_text() == "kept\n"


def test_a_json_line_with_a_long_run_of_spaces_is_read_in_linear_time():
    """What a plain line loses around a --json-input line's object was found with a regex anchored at the line's end,
    tried again at each character of every run of spaces within the line: 40,000 spaces inside a string value (a
    line the input guard lets through at the default --max-input-tokens) took 40 s to read, 20,000 took 10 s."""
    import time
    from nmt.json_input import parse_json_line
    line = '{"text": "' + " " * 40_000 + 'a", "target_prefix": "' + "\u3000" * 20_000 + 'b"}'
    started = time.perf_counter()
    assert parse_json_line(" \ufeff" + line + "\u200b ", 1, "in.jsonl") == (" " * 40_000 + "a", "\u3000" * 20_000 + "b")
    assert time.perf_counter() - started < 2
