"""Command line -> Config mapping, --help, --config files and bad flags."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
import os
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import pytest

from nmt.cli import build_train_parser, config_from_args, train_main
from nmt.config import LR_SCHEDULES, Config, ConfigError, OptimConfig
from nmt.export import build_export_parser
from nmt.manifest import write_manifest
from nmt.optim import learning_rate
from nmt.parallel import DeviceError, parse_devices
from nmt.preflight import settings_lines

REPO = Path(__file__).resolve().parents[2]


# COLUMNS for a test reading --help: argparse wraps it to the terminal's width, breaking after a hyphen or inside a
# long word, which joining its words again does not undo (at 50 or 130 columns); each flag's help on one line.
ONE_LINE = "1000"


def cfg_of(argv):
    return config_from_args(build_train_parser().parse_args(argv))


@pytest.mark.parametrize("argv, model_dir", [
    ([], "models/tatoeba-ko-en"), (["--src", "en", "--tgt", "ko"], "models/tatoeba-en-ko"),
    (["--arch", "transformer"], "models/tatoeba-ko-en-transformer"),
    (["--recipe", "all", "--arch", "lstm"], "models/all-ko-en"),
    (["--arch", "transformer", "--model-dir", "m"], "m")])
def test_the_default_model_dir_names_recipe_languages_and_a_non_lstm_arch(argv, model_dir):
    assert cfg_of(argv).train.model_dir == model_dir


def test_defaults_and_flags_map_onto_the_config():
    cfg = cfg_of([])
    assert cfg == dataclasses.replace(Config(), train=cfg.train) and cfg.train.model_dir == "models/tatoeba-ko-en"
    cfg = cfg_of(["--src", "en", "--tgt", "ko", "--batch-size", "60", "--accum-steps", "2", "--gpus", "4,5",
                  "--dropout", "0.3", "--attention", "general", "--no-progress", "--tie-weights", "--lr-schedule", "plateau"])
    assert (cfg.data.src_lang, cfg.data.tgt_lang, cfg.data.batch_size) == ("en", "ko", 60)
    assert (cfg.train.accum_steps, cfg.train.gpus, cfg.train.progress) == (2, "4,5", False)
    assert (cfg.model.dropout, cfg.model.attention, cfg.model.tie_weights) == (0.3, "general", True)
    assert cfg.optim.schedule == "plateau" and cfg.train.model_dir == "models/tatoeba-en-ko"
    assert cfg_of([]).model.lexical_model is True and cfg_of(["--no-lexical-model"]).model.lexical_model is False


def test_explicit_files_replace_the_recipe(monkeypatch):
    monkeypatch.setenv("COLUMNS", ONE_LINE)
    cfg = cfg_of(["--train-src", "a.ko", "--train-tgt", "a.en", "--dev-src", "d.ko", "--dev-tgt", "d.en"])
    assert cfg.data.recipe is None and cfg.train.model_dir == "models/custom-ko-en"
    help_text = " ".join(build_train_parser().format_help().split())   # --help said models/<recipe>-... for these too
    assert "models/<recipe>-<src>-<tgt> (models/custom-<src>-<tgt> for your own --train-src/--train-tgt files;" \
        in help_text
    assert "--batch-tokens BATCH_TOKENS global batch in padded target positions" in help_text
    # "(default: None)" for --data-dir, --cache-dir, --gpus ...; "(default: models/tatoeba-ko-en)" whatever --src
    assert "(default: None)" not in help_text and "(default: models/" not in help_text
    assert "--data-dir DATA_DIR offline mirror laid out like shared/data (default: $NMT_DATA_DIR, else download)" \
        in help_text and "(default: data/cache in a checkout, else ~/.cache/nmt)" in help_text


def test_config_file_then_flags_override(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model": {"hidden_size": 128}, "data": {"batch_size": 32}}))
    cfg = cfg_of(["--config", str(path), "--batch-size", "48"])
    assert cfg.model.hidden_size == 128 and cfg.data.batch_size == 48
    # a saved config.json round-trips, its model directory made absolute (as the data files are when given)
    cfg.save(tmp_path / "saved.json")
    absolute = dataclasses.replace(cfg.train, model_dir=os.path.abspath(cfg.train.model_dir))
    assert cfg.train.model_dir == "models/tatoeba-ko-en"
    assert Config.load(tmp_path / "saved.json") == dataclasses.replace(cfg, train=absolute)


def test_a_tilde_in_the_model_directory_is_the_home_directory(tmp_path, monkeypatch):
    """Not expanded by the shell after "=" (--model-dir=~/m) nor in a config file: the run went to ./~/m while
    config.json recorded $HOME/m."""
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cfg_of(["--model-dir=~/m"]).train.model_dir == str(tmp_path / "m")
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"train": {"model_dir": "~/n"}}))
    assert Config.load(path, complete=False).train.model_dir == str(tmp_path / "n")


def test_bad_config_file_is_a_clear_error(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model": {"hiden_size": 128}}))
    with pytest.raises(ConfigError, match="hiden_size"):
        cfg_of(["--config", str(path)])
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        cfg_of(["--config", str(path)])
    with pytest.raises(ConfigError, match="file not found"):
        cfg_of(["--config", str(tmp_path / "missing.json")])


@pytest.mark.parametrize("sections, message", [
    ({"train": {"max_steps": "ten"}}, 'train.max_steps must be an integer, got "ten"'),
    ({"optim": {"lr": None}}, "optim.lr must be a number, got null"),
    ({"data": {"vocab_size": True}}, "data.vocab_size must be an integer, got true"),
    ({"model": {"tie_weights": "yes"}}, 'model.tie_weights must be true or false, got "yes"'),
    ({"train": {"gpus": 2.5}}, "train.gpus must be a string or null, got 2.5"),
    ({"train": 5}, "section 'train' must be a JSON object, got 5"),
])
def test_a_config_value_of_the_wrong_json_type_is_named(tmp_path, sections, message):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(sections))
    with pytest.raises(ConfigError) as err:
        cfg_of(["--config", str(path)])
    assert str(err.value) == f"{path}: {message}"


def test_json_values_that_fit_their_fields_pass(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"optim": {"lr": 1}, "train": {"gpus": None, "tensorboard": None, "max_seconds": 5}}))
    cfg = cfg_of(["--config", str(path)])
    assert (cfg.optim.lr, cfg.train.gpus, cfg.train.max_seconds) == (1, None, 5)


def test_an_unknown_valid_metric_in_a_config_file_is_named(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"train": {"valid_metric": "ter"}}))
    with pytest.raises(ConfigError, match="--valid-metric 'ter': use bleu, chrf, ko-mecab or ppl"):
        cfg_of(["--config", str(path)])


def test_a_gpu_count_in_a_config_file_may_be_a_number(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"train": {"gpus": 2}}))
    assert cfg_of(["--config", str(path)]).train.gpus is None   # a valid value, of the machine it was written on
    path.write_text(json.dumps({"train": {"gpus": True}}))
    with pytest.raises(ConfigError, match="train.gpus must be a string or null, got true"):
        cfg_of(["--config", str(path)])


def test_help_is_grouped_with_defaults():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "train.py"), "--help"], capture_output=True,
                         text=True, check=True, env={**os.environ, "COLUMNS": ONE_LINE}).stdout
    for group in ("data:", "model:", "optimization:", "training:", "decoding:"):
        assert group in out
    assert "--batch-size BATCH_SIZE" in out and "(default: 32)" in out and "--gpus" in out


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["--src", "ko", "--tgt", "ko"], "--src and --tgt are both"),
    (["--src", "en"], "--src and --tgt are both 'en' (a side not given is its default, ko or en, a --config file's or "
                      "the run's): give --src ko --tgt en, or --src en --tgt ko"),   # (--tgt not given: said so)
    (["--accum-steps", "0"], "--accum-steps must be >= 1"),
    (["--gpus", "2"], "no GPU found. This MXNet is the CPU build: replace it with the CUDA build (pip uninstall -y "
                      "mxnet && pip install -r requirements/gpu.txt"),   # installing beside it breaks both
    (["--gpus", "x"], "give a count"),
    (["--cpu-devices", "0"], "--cpu-devices must be at least 1"),
    (["--resume", "--overwrite"], "contradict"),
    (["--train-src", "a.ko", "--train-tgt", "a.en", "--recipe", "all"],
     "--recipe all and --train-src/--train-tgt exclude each other"),
    (["--train-src", "a.ko", "--train-tgt", "a.en", "--upsample", "tatoeba=2"],
     "--upsample 'tatoeba=2' names corpora of a --recipe; --train-src/--train-tgt are one corpus, whose repeated "
     "pairs are dropped as duplicates, so it cannot be weighted"),   # it said to repeat lines, which dedup drops
    # a flag of another architecture was saved in config.json and changed nothing
    (["--arch", "transformer", "--hidden-size", "512"], "--hidden-size is an option of --arch lstm, not of --arch "
     "transformer, which would ignore it; the model flags of --arch transformer: --dropout, --word-dropout, "
     "--tie-weights, --encoder-layers, --decoder-layers, --model-size"),
    (["--arch", "transformer", "--no-lexical-model"], "--no-lexical-model is an option of --arch lstm, not of"),
    (["--heads", "4"], "--heads is an option of --arch transformer, not of --arch lstm"),
])
def test_bad_flags_give_one_clear_line(tmp_path, capsys, argv, message):
    code = train_main(argv + ["--model-dir", str(tmp_path / "m"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err


def test_the_model_flags_every_architecture_takes_pass():
    from nmt.cli import check_model_flags, given_keys
    for arch in ("lstm", "transformer"):
        args = build_train_parser().parse_args(["--arch", arch, "--dropout", "0.1", "--word-dropout", "0",
                                                "--no-tie-weights", "--shared-vocab"])
        check_model_flags(arch, given_keys(args))


def test_a_setting_of_another_architecture_is_refused_in_a_file_and_on_resume(tmp_path, capsys):
    """A --config file's settings of the other architecture were silently dropped (a Transformer "hidden_size": 64
    trained at 256; "heads": 4 for the LSTM), where their flags are refused; on --resume or --init-from, such a flag
    was said to differ from an unused default ("--embed-size 64 differs from 256, which this run was trained with")."""
    from nmt.cli import training_run
    path = tmp_path / "c.json"
    for model, message in (({"arch": "transformer", "hidden_size": 64}, "model.hidden_size 64 is a setting of --arch "
                            "lstm, not of --arch transformer, which would ignore it: leave it out of the file"),
                           ({"heads": 4}, "model.heads 4 is a setting of --arch transformer, not of --arch lstm")):
        path.write_text(json.dumps({"model": model}))
        for arch in ([], ["--arch", model.get("arch", "lstm")]):   # the file's own again (LSTM unless named): the same
            with pytest.raises(ConfigError, match=f"^{path}: {message}"):
                training_run(build_train_parser().parse_args(["--config", str(path), "--model-dir",
                                                              str(tmp_path / "m"), *arch]))
    lstm = Config().to_dict()   # a run's config.json: every field, the other architecture's at their defaults
    lstm["train"]["model_dir"], lstm["model"]["hidden_size"] = str(tmp_path / "n"), 64
    path.write_text(json.dumps(lstm))
    capsys.readouterr()
    cfg, _, _ = training_run(build_train_parser().parse_args(["--config", str(path), "--arch", "transformer",
                                                              "--model-dir", str(tmp_path / "m")]))
    assert cfg.model.arch == "transformer"   # --arch over the file: its LSTM settings are not read, and it says so
    assert "warning: --arch transformer does not read the --config file's model.hidden_size 64" in \
        capsys.readouterr().err
    assert cfg.model.hidden_size == Config().model.hidden_size   # its config.json takes the default, unread: a
    # --config of that file was refused ("model.hidden_size 64 is a setting of --arch lstm")
    run = tmp_path / "tf"
    run.mkdir()
    Config.from_dict({"model": {"arch": "transformer"}, "train": {"model_dir": str(run)}}).save(run / "config.json")
    (run / "params.best").write_bytes(b"x")
    write_manifest(run, "best", ["params.best"], 1)
    for argv, of in ((["--resume", "--model-dir", str(run), "--embed-size", "64"], "--arch transformer"),
                     (["--init-from", str(run), "--model-dir", str(tmp_path / "ft"), "--hidden-size", "128"],
                      f"the transformer model of --init-from {re.escape(str(run / 'params.best'))} \\(model.arch in ")):
        with pytest.raises(ConfigError, match=rf"^--(embed|hidden)-size is an option of --arch lstm, not of {of}"):
            training_run(build_train_parser().parse_args(argv))


def test_one_language_given_that_a_run_or_a_fine_tune_cannot_change_is_named(tmp_path):
    """`--resume --src en` of a ko-en run said "--src and --tgt are both 'en'" (the run's target kept), and only
    given both, that the languages cannot change within a run; so did --init-from of a ko-en model. One message
    now, the second; a side given as the run's passes."""
    from nmt.cli import training_run
    run = tmp_path / "m"
    run.mkdir()
    Config.from_dict({"train": {"model_dir": str(run)}}).save(run / "config.json")
    (run / "params.best").write_bytes(b"x")
    write_manifest(run, "best", ["params.best"], 1)
    for argv, says in ((["--resume", "--model-dir", str(run), "--src", "en"],
                        r"^--resume: --src \"en\" differs from \"ko\", which this run was trained with"),
                       (["--resume", "--model-dir", str(run), "--tgt", "ko"],
                        r"^--resume: --tgt \"ko\" differs from \"en\""),
                       (["--init-from", str(run), "--model-dir", str(tmp_path / "ft"), "--src", "en"],
                        r"^--src \"en\": --init-from .* has data.src_lang \"ko\" .*a fine-tuning run keeps its "
                        "model's settings, languages and vocabularies: drop --src$")):
        with pytest.raises(ConfigError, match=says):
            training_run(build_train_parser().parse_args(argv))
    cfg, _, _ = training_run(build_train_parser().parse_args(["--resume", "--model-dir", str(run), "--src", "ko"]))
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("ko", "en")
    one = tmp_path / "en.json"   # a --config file's language, as a flag's
    one.write_text(json.dumps({"data": {"src_lang": "en"}}))
    with pytest.raises(ConfigError, match=rf'^--resume: {re.escape(str(one))}: data.src_lang = "en" differs from "ko"'):
        training_run(build_train_parser().parse_args(["--resume", "--model-dir", str(run), "--config", str(one)]))


def test_argparse_rejects_bad_types_and_choices(capsys):
    with pytest.raises(SystemExit):
        build_train_parser().parse_args(["--batch-size", "many"])
    assert "invalid int value" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_train_parser().parse_args(["--attention", "cosine"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_train_parser().parse_args(["--bucketing", "sorted"])
    assert "argument --bucketing: invalid choice: 'sorted'" in capsys.readouterr().err


def test_device_parsing():
    assert parse_devices(None, 1) == [mx.cpu(0)]
    assert parse_devices(None, 2) == [mx.cpu(0), mx.cpu(1)]
    assert mx.context.num_gpus() == 0   # these machines have none; GPU parsing is checked by its errors
    with pytest.raises(DeviceError, match="only 0|no GPU found"):
        parse_devices("4,5,6,7")
    with pytest.raises(DeviceError, match="distinct"):
        parse_devices("1,1")
    with pytest.raises(DeviceError, match="distinct and >= 0"):
        parse_devices("-1,2")
    with pytest.raises(DeviceError, match=r"count of GPUs and must be >= 1 \(GPU 0 alone: --gpus 0,"):
        parse_devices("0")
    with pytest.raises(DeviceError, match="no GPU id given"):
        parse_devices(",")
    with pytest.raises(DeviceError, match="--gpus 2 and --cpu-devices 2 exclude each other"):
        parse_devices("2", 2)
    for empty in ("", " "):   # `--gpus "$NGPUS"` with the variable unset ran on the CPU
        with pytest.raises(DeviceError, match="--gpus is empty: give a count or ids of GPUs"):
            parse_devices(empty)


def test_a_config_written_by_an_earlier_version_is_refused(tmp_path):
    """Nothing was released: a model directory's config.json that lacks a key is refused with a clear message,
    while a --config file may give only some keys."""
    saved = Config().to_dict()
    del saved["model"]["word_dropout"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(saved))
    with pytest.raises(ConfigError, match=r"lacks 'model.word_dropout' \(1 of model missing\): an older nmt wrote it, "
                                          r"or it was edited \(own settings: nmt-train --config\); retrain it"):
        Config.load(path)
    del saved["model"]["attention"], saved["model"]["dropout"]   # (a hand-written one: several keys)
    path.write_text(json.dumps(saved))
    with pytest.raises(ConfigError, match=r"lacks 'model.attention' \(3 of model missing\): an older nmt"):
        Config.load(path)
    assert Config.load(path, complete=False).model.word_dropout == Config().model.word_dropout


@pytest.mark.parametrize("argv, message", [
    (["--lr", "0"], "--lr must be > 0"), (["--label-smoothing", "1"], "--label-smoothing must be in [0, 1)"),
    (["--max-epochs", "0"], "--max-epochs must be >= 1"), (["--keep-last", "0"], "--keep-last must be >= 1"),
    (["--vocab-size", "8"], "--vocab-size must be from 16 to 1000000"), (["--batch-tokens", "0"], "--batch-tokens must be >= 1"),
    (["--optimizer", "adamw"], "--optimizer 'adamw' is not supported"),
    (["--batch-size", "2", "--accum-steps", "4"], "--batch-size 2 is smaller than --accum-steps 4"),
    (["--subword-sampling", "1.5"], "--subword-sampling must be between 0 and 1"),
    (["--lr", "inf"], "--lr must be > 0 and finite"), (["--warmup-steps", "-1"], "--warmup-steps must be >= 0"),
    (["--weight-decay", "-0.1"], "--weight-decay must be >= 0"), (["--clip-norm", "nan"], "--clip-norm must be >= 0"),
    (["--max-seconds", "-1"], "--max-seconds must be finite, >= 0"), (["--time-budget", "-5"], "--time-budget must be"),
    (["--time-budget", "inf"], "--time-budget must be finite, >= 0 (0: none), got inf"),
    (["--patience", "-1"], "--patience must be >= 0"),
    (["--average-last", "-2"], "--average-last must be 0 (off) or >= 2"),
    (["--average-last", "1"], "--average-last must be 0 (off) or >= 2 (the average of one checkpoint is that"),
    (["--average-last", "5"], "--average-last 5 averages the last 5 of the checkpoints kept: give --keep-last 5"),
    (["--max-chars", "0"], "--max-chars must be >= 1, got 0"), (["--max-ratio", "nan"], "--max-ratio must be >= 1"),
    (["--max-ratio", "0.5"], "--max-ratio must be >= 1 (the longer side's UTF-8 bytes over the shorter's; inf: no "),
    (["--valid-beam", "0"], "--valid-beam must be from 1 to 999999"),
    (["--valid-max-sentences", "-1"], "--valid-max-sentences must be >= 1"),
    (["--num-buckets", "0"], "--num-buckets must be >= 1"),
    (["--beam-size", "0"], "--beam-size must be an integer from 1 to 999999 (got 0)"),
    (["--max-len-b", str(10 ** 20)], f"--max-len-b must be an integer from 0 to 999999 (got {10 ** 20})"),
    (["--length-penalty", "-0.5"], "--length-penalty must be a number from 0 to 10 (got -0.5)"),
    (["--length-penalty", "45"], "--length-penalty must be a number from 0 to 10 (got 45.0)"),   # (empty n-bests)
    (["--decode-batch-size", "0"], "--decode-batch-size must be an integer from 1 to 999999"),
    (["--max-len-a", "0", "--max-len-b", "0"], "--max-len-a 0.0 --max-len-b 0 allow no output token"),
    (["--seed", "-1"], "--seed must be between 0 and 2**32 - 1, got -1"),
])
def test_config_dataclasses_refuse_values_that_cannot_work(argv, message):
    with pytest.raises(ConfigError) as err:
        cfg_of(argv)
    assert message in str(err.value)


def test_a_config_file_is_checked_like_the_flags(tmp_path):
    """Values that bypass argparse's choices (a --config file, the Python API) meet the same checks."""
    from nmt.config import DataConfig, DecodeConfig, OptimConfig, TrainConfig
    with pytest.raises(ConfigError, match="--tgt 'fr': use one of ko, en"):
        DataConfig(tgt_lang="fr")
    for key, bad, choices in (("bucketing", "x", "padding, quantile"), ("spm_model_type", "char", "unigram, bpe")):
        path = tmp_path / f"{key}.json"   # was found after the tokenizers were trained, without the file's name
        path.write_text(json.dumps({"data": {key: bad}}))
        with pytest.raises(ConfigError, match=f"data.{key}: --{key.replace('_', '-')} '{bad}': use one of {choices}"):
            cfg_of(["--config", str(path)])
    with pytest.raises(ConfigError, match="--log-every must be >= 1"):
        TrainConfig(log_every=0)
    with pytest.raises(ConfigError, match=r"optim.beta1 and optim.beta2 must be in \[0, 1\), got 0.9, 1.0"):
        OptimConfig(beta2=1.0)
    with pytest.raises(ConfigError, match="optim.plateau_patience must be >= 1"):
        OptimConfig(plateau_patience=0)
    with pytest.raises(ConfigError, match="--nbest 6 is more than --beam-size 5"):
        DecodeConfig(nbest=6)
    with pytest.raises(ConfigError, match="--kvstore 'dist_async': use one of auto, local, device, dist_sync, "
                                          "dist_device_sync"):
        TrainConfig(kvstore="dist_async")
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"optim": {"lr_schedule": "cosine"}}))
    with pytest.raises(ConfigError, match="unknown key"):
        cfg_of(["--config", str(path)])
    path.write_text(json.dumps({"optim": {"schedule": "cosine"}}))
    with pytest.raises(ConfigError, match="--lr-schedule 'cosine': use inv_sqrt, plateau or constant"):
        cfg_of(["--config", str(path)])


def test_transformer_defaults_apply_where_nothing_was_given(tmp_path, monkeypatch):
    """--arch transformer starts from its own dropout, word dropout, lr and warm-up; the LSTM's are unchanged, and
    a --config file or a flag still wins."""
    def shared_fields(cfg):
        return cfg.model.dropout, cfg.model.word_dropout, cfg.optim.lr, cfg.optim.warmup_steps
    assert shared_fields(cfg_of([])) == (0.4, 0.2, 2e-3, 400)
    transformer = cfg_of(["--arch", "transformer"])
    assert shared_fields(transformer) == (0.3, 0.1, 1e-3, 1000)
    assert (transformer.model.heads, transformer.model.ff_size, transformer.optim.schedule) == (2, 512, "inv_sqrt")
    assert transformer == dataclasses.replace(Config.for_arch("transformer"), train=transformer.train)
    assert shared_fields(cfg_of(["--arch", "transformer", "--dropout", "0.2", "--lr", "5e-4"]))[:3] == (0.2, 0.1, 5e-4)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model": {"arch": "transformer", "word_dropout": 0.0}}))
    assert shared_fields(cfg_of(["--config", str(path)])) == (0.3, 0.0, 1e-3, 1000)
    assert shared_fields(cfg_of(["--config", str(path), "--arch", "lstm"])) == (0.4, 0.0, 2e-3, 400)
    assert Config.load(path, complete=False).model.dropout == 0.3
    monkeypatch.setenv("COLUMNS", ONE_LINE)
    help_text = build_train_parser().format_help()
    assert re.search(r"\(default: 0\.4;[^)]* with --arch transformer: 0\.3\)", " ".join(help_text.split()))


def _parse_with(build, required):
    return lambda argv: build().parse_args([*required, *argv])


def _empty_flag_cases():
    """command -> (parse, flags that take a name, a path or an address)"""
    from nmt import cli_decode, cli_score, launch
    from nmt.serve import cli as serve_cli
    m = ["--model-dir", "m"]
    return {
        "nmt-train": (_parse_with(build_train_parser, []),
                      ["--config", "--init-from", "--recipe", "--data-dir", "--cache-dir", "--train-src", "--train-tgt",
                       "--dev-src", "--dev-tgt", "--test-src", "--test-tgt", "--upsample", "--optimizer",
                       "--model-dir", "--gpus"]),
        "nmt-translate": (_parse_with(cli_decode.build_translate_parser, m),
                          ["--model-dir", "--checkpoint", "--ensemble", "--gpus", "--input", "--output",
                           "--plot-attention"]),
        "nmt-evaluate": (_parse_with(cli_decode.build_evaluate_parser, m),
                         ["--src-file", "--ref-file", "--name", "--data-dir", "--json", "--hyp-dir"]),
        "nmt-score": (_parse_with(cli_score.build_score_parser, [*m, "--src-file", "a", "--tgt-file", "b"]),
                      ["--src-file", "--tgt-file", "--output"]),
        "nmt-serve": (lambda argv: serve_cli.parse_args([*m, *argv]), ["--model-dir", "--host", "--ensemble",
                                                                       "--checkpoint"]),
        "nmt-launch": (lambda argv: launch.build_parser().parse_args(["-n", "1", *argv, "--", "echo"]),
                       ["--hostfile", "--scheduler-host", "--python", "--ssh", "--workdir"]),
        "nmt-export": (_parse_with(build_export_parser, [*m, "--output", "out"]), ["--model-dir", "--output"]),
    }


@pytest.mark.parametrize("command", ["nmt-train", "nmt-translate", "nmt-evaluate", "nmt-score", "nmt-serve",
                                     "nmt-launch", "nmt-export"])
def test_an_empty_value_is_refused_naming_the_flag(command, capsys):
    """`--data-dir "$DIR"` with DIR unset: '' meant the current directory (--model-dir, --hyp-dir: files written
    there), nothing (--data-dir, --upsample: silently ignored) or a later, vaguer error."""
    parse, flags = _empty_flag_cases()[command]
    for flag in flags:
        for empty in ("", "  "):
            with pytest.raises(SystemExit):
                parse([flag, empty])
            assert f"{flag}: is empty (an unset shell variable?)" in capsys.readouterr().err, flag


def test_standard_input_is_no_corpus_file(capsys):
    """`--train-src -` (standard input to the decoding commands) became ./- and "file not found; check the path"."""
    from nmt.config import CORPUS_FILES
    for field in CORPUS_FILES:
        flag = "--" + field.replace("_", "-")
        with pytest.raises(SystemExit):
            build_train_parser().parse_args([flag, " -"])
        assert f"{flag}: - (standard input) cannot be a corpus file: training reads" in capsys.readouterr().err


def test_a_config_files_key_meeting_a_flag_is_named_as_the_files_where_nmt_train_has_no_such_flag(tmp_path):
    """A --config file's decode.nbest 2 with --beam-size 1 was refused as "--nbest 2 is more than --beam-size 1":
    nmt-train has no --nbest (it is nmt-translate's), so the user looked for a flag they had not given."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"decode": {"nbest": 2}, "optim": {"clip_norm": 1.0}}))
    with pytest.raises(ConfigError) as e:
        cfg_of(["--config", str(path), "--beam-size", "1"])
    assert str(e.value) == (f"{path}: decode.nbest 2 is more than --beam-size 1: beam search keeps only beam-size "
                            "hypotheses; raise --beam-size")
    path.write_text(json.dumps({"decode": {"beam_size": 3}}))   # a flag nmt-train has keeps its name
    with pytest.raises(ConfigError, match=r"^--nbest 6 is more than --beam-size 3"):
        config_from_args(argparse.Namespace(config=str(path), **{"decode.nbest": 6}))


def test_standard_input_is_no_corpus_file_in_a_config_file(tmp_path, capsys):
    """A --config file's "train_src": "-" read ./- ("file not found"), naming neither the file nor the key."""
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"data": {"train_src": "-", "train_tgt": "t.en"}}))
    assert train_main(["--config", str(path), "--model-dir", str(tmp_path / "m"), "--dry-run"]) == 2
    assert (f'error: {path}: data.train_src is "-" (standard input), which cannot be a corpus file: training reads '
            "its files more than once; give the file's path") in capsys.readouterr().err


@pytest.mark.parametrize("build", ["build_translate_parser", "build_evaluate_parser", "build_score_parser"])
def test_a_second_model_dir_is_refused_pointing_to_ensemble(build, capsys):
    """Sockeye's and Marian's -m take several models as an ensemble; a second --model-dir replaced the first."""
    from nmt import cli_decode, cli_score
    with pytest.raises(SystemExit):
        getattr(cli_score if build == "build_score_parser" else cli_decode, build)().parse_args(
            ["--model-dir", "a", "--model-dir", "b", "--src-file", "s", "--tgt-file", "t"])
    assert "--model-dir is given twice: give one, and the models that decode with it as an ensemble after " \
           "--ensemble" in capsys.readouterr().err


def test_another_arch_over_a_config_file_warns_of_the_settings_chosen_for_its_own(tmp_path, capsys):
    """`--config run/config.json --arch transformer` silently kept the LSTM run's dropout, learning rate and
    warm-up, where a bare --arch transformer gets the Transformer's defaults."""
    from nmt.cli import training_run
    config = tmp_path / "lstm.json"
    config.write_text(json.dumps({"model": {"arch": "lstm", "dropout": 0.4}, "optim": {"lr": 0.002}}))

    def run(*flags):
        training_run(build_train_parser().parse_args(["--config", str(config), "--model-dir", str(tmp_path / "m"),
                                                      *flags]))
        return capsys.readouterr().err
    assert run("--arch", "transformer") == (
        f"warning: --arch transformer over --config {config} (arch lstm): its model.dropout 0.4, optim.lr 0.002 were "
        "chosen for lstm and stay (transformer's defaults: 0.3, 0.001); give them as flags to change them\n")
    assert "its optim.lr 0.002 was chosen for lstm and stays (transformer's default: 0.001); give it as a flag to " \
        "change it\n" in run(
        "--arch", "transformer", "--dropout", "0.2")
    config.write_text(json.dumps({"model": {"arch": "lstm", "dropout": 0.3}, "optim": {"lr": 0.002}}))
    assert "model.dropout" not in run("--arch", "transformer")   # 0.3 is the Transformer's own: nothing to say
    assert run("--arch", "lstm") == run() == run("--arch", "transformer", "--dropout", "0.2", "--lr", "1e-3") == ""
    config.write_text(json.dumps({"optim": {"lr": 0.0005, "warmup_steps": 4000}}))   # names no arch: one's own
    assert run("--arch", "transformer") == ""   # (it said "chosen for lstm" of a Transformer's schedule)


@pytest.mark.parametrize("schedule", LR_SCHEDULES)
def test_every_lr_schedule_is_a_choice_with_a_learning_rate_and_a_description(schedule):
    """The schedules are named once (config.LR_SCHEDULES); the flag, the learning rate and the training log's
    settings each follow that list, so a schedule added there and not to one of them fails here, not in a run."""
    cfg = cfg_of(["--lr-schedule", schedule, "--warmup-steps", "4", "--lr", "1.0"])
    assert cfg.optim.schedule == schedule
    rates = [learning_rate(step, cfg.optim) for step in (0, 3, 100)]
    assert rates[0] == 0.25 and rates[1] == 1.0 and 0 < rates[2] <= 1.0
    assert any(line.startswith(f"optimizer: {cfg.optim.optimizer}, lr 1 after 4 warm-up updates, then ")
               for line in settings_lines(cfg))


def test_a_schedule_without_a_learning_rate_is_an_error_not_a_constant_rate():
    o = OptimConfig(warmup_steps=4)
    o.schedule = "cosine"   # as if added to LR_SCHEDULES and not to learning_rate
    with pytest.raises(ValueError, match="no learning rate for schedule 'cosine'"):
        learning_rate(100, o)


def test_a_resume_finds_the_corpora_where_the_run_did_unless_told_otherwise(tmp_path, monkeypatch):
    """--data-dir was saved as typed (relative: wrong from any other directory) and a resume without it dropped it:
    an offline resume of a recipe run then tried to download its corpora."""
    from nmt.config import Config
    from nmt.config_resume import resumed_config
    monkeypatch.chdir(tmp_path)
    saved = Config.from_dict({"data": {"recipe": "tatoeba", "data_dir": "mirror", "cache_dir": "cache"}})
    assert (saved.data.data_dir, saved.data.cache_dir) == (str(tmp_path / "mirror"), str(tmp_path / "cache"))
    again = Config.from_dict({"data": {"recipe": "tatoeba"}})
    merged, changes = resumed_config(saved, again, {}, "config.json")
    assert (merged.data.data_dir, merged.data.cache_dir, changes) == (saved.data.data_dir, saved.data.cache_dir, [])
    elsewhere = Config.from_dict({"data": {"recipe": "tatoeba", "data_dir": "/other/mirror"}})
    merged, _ = resumed_config(saved, elsewhere, {"data.data_dir": "--data-dir"}, "config.json")
    assert merged.data.data_dir == "/other/mirror" and merged.data.cache_dir == saved.data.cache_dir


def test_a_resume_refusing_what_a_fine_tune_may_change_names_init_from(tmp_path):
    """`--resume --dropout 0.1` said only "drop it, or train into a new --model-dir": a fine-tune (--init-from) goes on
    from the run's parameters with it, as the optimizer's error said; a model size it cannot change."""
    from nmt.commands import shell_word
    from nmt.config import Config
    from nmt.config_resume import resumed_config
    saved, source = Config(), str(tmp_path / "m" / "config.json")
    for key, flag, value, tunable in (("dropout", "--dropout", 0.1, True), ("hidden_size", "--hidden-size", 64, False)):
        cfg = Config()
        setattr(cfg.model, key, value)
        with pytest.raises(ConfigError) as e:
            resumed_config(saved, cfg, {f"model.{key}": flag}, source)
        assert str(e.value).startswith(f"--resume: {flag} {value} differs from")
        assert str(e.value).endswith(f"or train into a new --model-dir (to go on from this run's parameters, fine-tune "
                                     f"with --init-from {shell_word(tmp_path / 'm')}, giving its data and training "
                                     "flags again: --init-from takes a model's own settings, not its data, batch or "
                                     "schedule)") \
            == tunable, str(e.value)


def test_a_resume_compares_upsample_by_the_corpora_it_repeats(tmp_path):
    """`--resume --upsample tatoeba-manythings=2` of a run begun with "tatoeba-manythings=2,jhe-dev=1" (a corpus
    once: not repeated) was refused as "differs from", and so was the same setting in another order: compared as text."""
    from nmt.config_resume import resumed_config
    saved, source = Config.from_dict({"data": {"recipe": "all", "upsample": "tatoeba-manythings=2,jhe-dev=1"}}), \
        str(tmp_path / "config.json")
    for same in ("tatoeba-manythings=2", "jhe-dev=1,tatoeba-manythings=2", " tatoeba-manythings = 02 "):
        cfg = Config.from_dict({"data": {"recipe": "all", "upsample": same}})
        merged, changes = resumed_config(saved, cfg, {"data.upsample": "--upsample"}, source)
        assert (merged.data.upsample, changes) == (saved.data.upsample, [])   # the run's own: the same pairs
    for other in ("tatoeba-manythings=3", "jhe-dev=2,tatoeba-manythings=2", "jhe-dev=1", "python-docs-ko=2"):
        cfg = Config.from_dict({"data": {"recipe": "all", "upsample": other}})
        with pytest.raises(ConfigError, match=f'^--resume: --upsample "{other}" differs from "tatoeba-manythings=2,'):
            resumed_config(saved, cfg, {"data.upsample": "--upsample"}, source)
    cfg = Config.from_dict({"data": {"recipe": "all", "upsample": "tatoeba=2"}})
    with pytest.raises(ConfigError, match="^--upsample 'tatoeba=2': 'tatoeba' is not a training corpus of recipe all"):
        resumed_config(saved, cfg, {"data.upsample": "--upsample"}, source)


def test_a_mirror_named_by_nmt_data_dir_is_recorded_as_data_dir_is(tmp_path, monkeypatch):
    """A run trained with $NMT_DATA_DIR saved data_dir null: its evaluation (--recipe-tests) and its resume without
    the variable then tried to download the corpora."""
    from nmt.cli import training_run
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    monkeypatch.setenv("NMT_DATA_DIR", str(mirror))
    args = build_train_parser().parse_args(["--model-dir", str(tmp_path / "m")])
    assert training_run(args)[0].data.data_dir == str(mirror.resolve())
    monkeypatch.delenv("NMT_DATA_DIR")
    assert training_run(args)[0].data.data_dir is None


def test_a_fine_tuning_run_is_named_and_checked_with_its_models_languages_and_architecture(tmp_path):
    """Its default directory was named after the command line's defaults: models/tatoeba-ko-en for an en -> ko
    Transformer (the quick start's model, refused or with --overwrite deleted); and --valid-metric ko-mecab was
    refused as "this model translates into 'en'" for a model translating into Korean."""
    model = tmp_path / "m"
    model.mkdir()
    saved = Config.for_arch("transformer")
    saved.data.src_lang, saved.data.tgt_lang = "en", "ko"
    saved.save(model / "config.json")
    cfg = cfg_of(["--init-from", str(model), "--recipe", "tatoeba", "--valid-metric", "ko-mecab"])
    assert cfg.train.model_dir == "models/tatoeba-en-ko-transformer"
    assert (cfg.data.src_lang, cfg.data.tgt_lang, cfg.model.arch) == ("en", "ko", "transformer")
    assert cfg_of(["--init-from", str(model / "params.best")]).train.model_dir == "models/tatoeba-en-ko-transformer"
    with pytest.raises(ConfigError, match=r'^--src "ko": --init-from .* has data.src_lang "en"'):   # (the first)
        cfg_of(["--init-from", str(model), "--src", "ko", "--tgt", "en"])


def test_a_config_file_brings_no_devices(tmp_path, caplog):
    """A GPU run's config.json as --config on a CPU machine: "--gpus 2: no GPU found ... omit --gpus", and no flag
    could undo it (nor its "amp": true). Devices are each command line's, as on --resume, with a warning."""
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"train": {"gpus": "2", "amp": True, "kvstore": "device", "valid_every": 7}}))
    with caplog.at_level("WARNING", logger="nmt"):
        cfg = cfg_of(["--config", str(path), "--model-dir", str(tmp_path / "m")])
    assert (cfg.train.gpus, cfg.train.amp, cfg.train.kvstore, cfg.train.valid_every) == (None, False, "auto", 7)
    assert f'--config {path}: train.gpus = "2", train.kvstore = "device", train.amp = true not taken' in caplog.text
    assert cfg_of(["--config", str(path), "--model-dir", "m", "--cpu-devices", "2"]).train.cpu_devices == 2


def test_a_warning_before_the_logging_is_set_up_says_it_is_one(tmp_path, capsys, monkeypatch):
    """The --config file's devices "not taken" (and its time limits) were warned of before the command set up its
    logging: Python's last resort wrote the bare message, without the "warning:" of every other."""
    monkeypatch.setattr(logging.getLogger("nmt"), "handlers", [])   # (as in a new process: no earlier test's)
    monkeypatch.setattr(logging.getLogger("nmt"), "propagate", True)
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"train": {"gpus": "1"}}))
    assert train_main(["--config", str(path), "--model-dir", str(tmp_path / "m"), "--batch-size", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f'warning: --config {path}: train.gpus = "1" not taken: the devices are this command line\'s '
                      "(--gpus, --cpu-devices, --kvstore, --amp)") and err[1].startswith("error: "), err
    assert not any(type(h).__name__ == "EarlyWarnings" for h in logging.getLogger("nmt").handlers)   # (left after)


@pytest.fixture
def fresh_logging(monkeypatch):
    """The `nmt` and `sacrebleu` loggers as in a new process, put back after the test."""
    for name in ("nmt", "sacrebleu"):
        for attr, value in (("handlers", []), ("propagate", True), ("level", logging.NOTSET)):
            monkeypatch.setattr(logging.getLogger(name), attr, value)


@pytest.mark.parametrize("distributed", [False, True], ids=["one-process", "distributed-worker"])
def test_warnings_before_the_logging_go_into_the_log(tmp_path, capsys, monkeypatch, fresh_logging, distributed):
    """They were printed, and not in train.log; a distributed job's every worker printed them, unnamed. They are
    written into the log file, printed once on the console, and a worker's are held until its rank names them."""
    from nmt.commands import early_warnings
    from nmt.log import setup_logging
    if distributed:
        monkeypatch.setenv("DMLC_ROLE", "worker")
    early = early_warnings()
    logging.getLogger("nmt.cli").warning("--config c.json: train.gpus not taken")
    assert capsys.readouterr().err == ("" if distributed else "warning: --config c.json: train.gpus not taken\n")
    setup_logging(tmp_path / "train.log", prefix="rank 1 " if distributed else "")
    early.say_held()   # (what the command does as it ends: nothing is left to print)
    logged = (tmp_path / "train.log").read_text(encoding="utf-8")
    err = capsys.readouterr().err
    assert logged.count("WARNING nmt.cli: --config c.json: train.gpus not taken") == 1, logged
    assert err.count("train.gpus not taken") == distributed and early not in logging.getLogger("nmt").handlers
    assert logged.startswith("rank 1 ") == distributed and err.startswith("rank 1 ") == distributed


def test_a_workers_held_warnings_are_said_if_it_stops_before_its_logging(tmp_path, capsys, monkeypatch, fresh_logging):
    monkeypatch.setenv("DMLC_ROLE", "worker")
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"train": {"gpus": "1"}}))
    assert train_main(["--config", str(path), "--model-dir", str(tmp_path / "m"), "--batch-size", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: ") and err[1].startswith(f'warning: --config {path}: train.gpus = "1" not taken')


def test_a_runs_config_json_says_it_brings_the_runs_time_limit(tmp_path, caplog):
    """A run's config.json holds its --max-seconds and --time-budget: as --config of a new run, that run stopped as
    early, unsaid (the quick start's --time-budget 1800 in a run of all the data)."""
    run = tmp_path / "run"
    run.mkdir()
    saved = Config()
    saved.train.max_seconds, saved.train.time_budget, saved.train.model_dir = 3600.0, 1800.0, str(run)
    saved.save(run / "config.json")
    (run / "train.log").write_text("")
    own = tmp_path / "mine.json"   # a file of one's own names its limit knowingly
    own.write_text(json.dumps({"train": {"max_seconds": 60, "time_budget": 60}}))
    for args, limits, said in ((["--config", str(run / "config.json")], (3600, 1800), (True, True)),
                               (["--config", str(run / "config.json"), "--max-seconds", "0"], (0, 1800), (False, True)),
                               (["--config", str(run / "config.json"), "--time-budget", "0"], (3600, 0), (True, False)),
                               (["--config", str(own)], (60, 60), (False, False))):
        caplog.clear()
        with caplog.at_level("WARNING", logger="nmt"):
            cfg = cfg_of([*args, "--model-dir", str(tmp_path / "new")])
        assert (cfg.train.max_seconds, cfg.train.time_budget) == limits
        assert ("train.max_seconds = 3600.0 taken from that run: this run stops after 3600.0 s too (--max-seconds 0"
                in caplog.text, "train.time_budget = 1800.0 taken from that run: this run stops after 1800.0 s too "
                "(--time-budget 0: no time limit)" in caplog.text) == said, (args, caplog.text)


def test_a_resume_says_once_that_a_config_files_devices_are_not_taken(tmp_path, caplog):
    """`--resume --config FILE` read the file twice (to find the run's directory, then over its settings) and said
    each time that its devices were not taken."""
    from nmt.cli import config_for_resume
    d = tmp_path / "m"
    d.mkdir()
    cfg = Config()
    cfg.train.model_dir = str(d)
    cfg.save(d / "config.json")
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"train": {"cpu_devices": 2, "patience": 3}}))
    with caplog.at_level("WARNING", logger="nmt"):
        resumed, changes = config_for_resume(build_train_parser().parse_args(
            ["--model-dir", str(d), "--resume", "--config", str(path)]))
    assert caplog.text.count("train.cpu_devices = 2 not taken") == 1, caplog.text
    assert (resumed.train.cpu_devices, resumed.train.patience) == (1, 3)


def test_a_huge_gpu_count_is_named_without_listing_it(monkeypatch):
    """--gpus 10000000000 made a list of every id first: gigabytes, then a MemoryError traceback."""
    monkeypatch.setattr(mx.context, "num_gpus", lambda: 8)
    with pytest.raises(DeviceError, match=r"--gpus 10000000000 asks for GPU id 9999999999 \(10000000000 GPUs\) but "
                                          r"only 8 GPU\(s\) were found"):
        parse_devices("10000000000")
    with pytest.raises(DeviceError, match=r"asks for GPU id 8 \(9 GPUs\) but only 8"):
        parse_devices("9")
    assert parse_devices("2") == [mx.gpu(0), mx.gpu(1)]


def _run_keeping(tmp_path, keep_last: int):
    """A run directory whose config.json keeps `keep_last` checkpoints (and the defaults otherwise)."""
    run = tmp_path / "run"
    run.mkdir()
    saved = Config()
    saved.train.model_dir, saved.train.keep_last = str(run), keep_last
    saved.save(run / "config.json")
    return run


def test_a_resume_checks_a_config_file_over_the_runs_own_settings(tmp_path):
    """`--resume --config F` with {"train": {"average_last": 5}} was refused as "give --keep-last 5 or more (got
    3)" for a run that keeps 5: the file was checked over the defaults; the flag --average-last 5 was taken."""
    from nmt.cli import config_for_resume
    run = _run_keeping(tmp_path, 5)
    path = tmp_path / "avg5.json"
    path.write_text(json.dumps({"train": {"average_last": 5}}))
    parse = build_train_parser().parse_args
    cfg, changes = config_for_resume(parse(["--model-dir", str(run), "--resume", "--config", str(path)]))
    assert (cfg.train.average_last, cfg.train.keep_last) == (5, 5) and changes == [f"{path}: train.average_last: 0 -> 5"]
    path.write_text(json.dumps({"train": {"average_last": 6}}))   # more than the run keeps: refused, naming the file
    with pytest.raises(ConfigError, match=rf"{path}: .*give --keep-last 6 or more \(got 5\)"):
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--config", str(path)]))


def test_a_resume_lowering_keep_last_under_the_runs_average_last_says_it_is_the_runs(tmp_path):
    """`--resume --keep-last 1` of a run resumed once with --average-last 3 was refused with "give --keep-last 3 or
    more (got 1)" alone: not that the 3 is the run's saved setting, nor that --average-last 0 lifts it. Python's
    train(cfg, resume=True) said the same; an --average-last given by the command says nothing more."""
    from nmt.cli import config_for_resume
    from nmt.config_resume import as_command_line
    run = tmp_path / "run"
    run.mkdir()
    saved = Config()
    saved.train.model_dir, saved.train.average_last, saved.train.keep_last = str(run), 3, 4
    saved.save(run / "config.json")
    parse = build_train_parser().parse_args
    told = (rf"^--average-last 3 averages the last 3 of the checkpoints kept: give --keep-last 3 or more \(got {{}}\); "
            rf"--average-last 3 is this run's saved setting \({re.escape(str(run / 'config.json'))}\), not this "
            r"command's: --average-last 0 \(no params.avg\){} lifts it$")
    with pytest.raises(ConfigError, match=told.format(1, "")):
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--keep-last", "1"]))
    with pytest.raises(ConfigError, match=told.format(2, " or 2")):
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--keep-last", "2", "--dry-run"]))
    path = tmp_path / "keep1.json"
    path.write_text(json.dumps({"train": {"keep_last": 1}}))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: " + told.format(1, "")[1:]):
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--config", str(path)]))
    python = Config()
    python.train.model_dir, python.train.keep_last = str(run), 1
    with pytest.raises(ConfigError, match=told.format(1, "")):
        as_command_line(python, resume=True)
    assert config_for_resume(parse(["--model-dir", str(run), "--resume", "--keep-last", "1", "--average-last",
                                    "0"]))[0].train.average_last == 0
    with pytest.raises(ConfigError, match=r"^--average-last 3 averages .* \(got 1\)$"):   # given here: the flag's
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--keep-last", "1", "--average-last", "3"]))


def test_the_keep_last_clash_is_known_by_its_kind_not_its_words(tmp_path):
    """`config_resume.run_clash` knew the clash of --average-last over --keep-last by looking for "--keep-last N or
    more" in Config's message: a reworded message would have lost the run's advice without a failing check. The
    clash is a `TooFewKept`, kept as such through a --config file's prefix and a resume; the messages are the same."""
    from nmt.cli import config_for_resume
    from nmt.config_checks import SettingsClash, TooFewKept
    from nmt.config_resume import run_clash
    told = r"--average-last 5 averages the last 5 of the checkpoints kept: give --keep-last 5 or more \(got 3\)$"
    with pytest.raises(TooFewKept, match="^" + told):
        Config.from_dict({"train": {"average_last": 5}})
    path = tmp_path / "avg5.json"
    path.write_text(json.dumps({"train": {"average_last": 5}}))
    with pytest.raises(TooFewKept, match=rf"^{re.escape(str(path))}: {told}"):
        cfg_of(["--config", str(path)])
    with pytest.raises(SettingsClash) as other:   # another clash is no TooFewKept
        cfg_of(["--batch-size", "2", "--accum-steps", "4"])
    assert not isinstance(other.value, TooFewKept)
    run = tmp_path / "run"
    run.mkdir()
    saved = Config()
    saved.train.model_dir, saved.train.average_last, saved.train.keep_last = str(run), 3, 4
    saved.save(run / "config.json")
    with pytest.raises(TooFewKept, match=r"\(got 1\); --average-last 3 is this run's saved setting"):
        config_for_resume(build_train_parser().parse_args(["--model-dir", str(run), "--resume", "--keep-last", "1"]))
    source, given, train = str(run / "config.json"), {"train.keep_last": "--keep-last"}, {"average_last": 3,
                                                                                          "keep_last": 1}
    assert run_clash(SettingsClash("give --keep-last 3 or more (got 1)"), saved, train, given, source) == \
        "give --keep-last 3 or more (got 1)"   # (the words alone make no TooFewKept)
    assert run_clash(TooFewKept("reworded"), saved, train, given, source).startswith(
        "reworded; --average-last 3 is this run's saved setting")


def test_a_resume_raising_average_last_over_the_runs_keep_last_says_it_is_the_runs(tmp_path):
    """`nmt-train --resume --average-last 6` in a run that keeps 5 checkpoints said "give --keep-last 6 or more (got
    5)" without saying that the 5 is the run's saved --keep-last, not anything this command gave."""
    from nmt.cli import config_for_resume
    run = _run_keeping(tmp_path, 5)
    parse = build_train_parser().parse_args
    source = re.escape(str(run / "config.json"))
    with pytest.raises(ConfigError, match=r"^--average-last 6 averages the last 6 of the checkpoints kept: give "
                                          rf"--keep-last 6 or more \(got 5\); 5 is this run's saved --keep-last "
                                          rf"\({source}\), not this command's: give --keep-last 6 or more with "
                                          r"--average-last 6, or --average-last 2 to 5$"):
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--average-last", "6"]))
    path = tmp_path / "avg6.json"   # a --config file's, the same
    path.write_text(json.dumps({"train": {"average_last": 6}}))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: .*\(got 5\); 5 is this run's saved --keep-last"):
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--config", str(path)]))
    with pytest.raises(ConfigError, match=r"\(got 4\)$"):   # both given here: nothing is the run's
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--average-last", "6", "--keep-last", "4"]))
    assert config_for_resume(parse(["--model-dir", str(run), "--resume", "--average-last", "6", "--keep-last",
                                    "6"]))[0].train.average_last == 6


def test_a_settings_clash_names_a_config_file_only_where_it_gives_one_of_its_values(tmp_path):
    """`--config lr.json --average-last 5` ({"optim": {"lr": ...}}) was "lr.json: --average-last 5 averages ... (got
    3)", as if the file gave a value of the clash: it gives neither; the 3 is the default (a new run) or the run's
    saved --keep-last (a resume, whose advice then said so after the file's name). So were the other clashes of
    flags (--batch-size under --accum-steps, --valid-metric ko-mecab, --src and --tgt). A file giving one is named."""
    from nmt.cli import config_for_resume
    lr, keep = tmp_path / "lr.json", tmp_path / "keep3.json"
    lr.write_text(json.dumps({"optim": {"lr": 0.001}}))
    keep.write_text(json.dumps({"train": {"keep_last": 3}}))
    told = r"--average-last 5 averages the last 5 of the checkpoints kept: give --keep-last 5 or more \(got 3\)"
    with pytest.raises(ConfigError, match=rf"^{told}$"):
        cfg_of(["--config", str(lr), "--average-last", "5"])
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(keep))}: {told}$"):   # (the file's 3)
        cfg_of(["--config", str(keep), "--average-last", "5"])
    for flags, said in ((["--batch-size", "2", "--accum-steps", "4"], "--batch-size 2 is smaller"),   # other clashes
                        (["--valid-metric", "ko-mecab"], "--valid-metric ko-mecab scores Korean output"),
                        (["--src", "en"], "--src and --tgt are both 'en'")):
        with pytest.raises(ConfigError, match=f"^{said}"):
            cfg_of(["--config", str(lr), *flags])
    accum = tmp_path / "accum4.json"
    accum.write_text(json.dumps({"train": {"accum_steps": 4}}))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(accum))}: --batch-size 2 is smaller"):
        cfg_of(["--config", str(accum), "--batch-size", "2"])
    for data, flags, said in (   # a file giving the clash's other value: each of a clash's keys names the file
            ({"data": {"batch_size": 2}}, ["--accum-steps", "4"], "--batch-size 2 is smaller"),
            ({"data": {"tgt_lang": "en"}}, ["--valid-metric", "ko-mecab"], "--valid-metric ko-mecab scores Korean"),
            ({"data": {"tgt_lang": "ko"}}, ["--src", "ko"], "--src and --tgt are both 'ko'"),
            ({"data": {"src_lang": "en"}}, [], "--src and --tgt are both 'en'")):
        path = tmp_path / "other.json"
        path.write_text(json.dumps(data))
        with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: {said}"):
            cfg_of(["--config", str(path), *flags])
    run = tmp_path / "run"
    run.mkdir()
    saved = Config()
    saved.train.model_dir, saved.train.average_last = str(run), 3
    saved.save(run / "config.json")
    parse = build_train_parser().parse_args
    with pytest.raises(ConfigError, match=rf"^{told}; 3 is this run's saved --keep-last"):
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--config", str(lr), "--average-last", "5"]))
    with pytest.raises(ConfigError, match=r"^--average-last 3 averages .* \(got 2\); --average-last 3 is this run's"):
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--config", str(lr), "--keep-last", "2"]))


def test_a_resume_given_corpus_files_the_run_did_not_have_names_the_flag(tmp_path):
    """`--resume --train-src a.ko --train-tgt a.en` of a recipe run (or --dev-src/--dev-tgt of a run whose dev set is
    held out of its training files) was taken as files moved since, and refused only as their pairs were compared:
    "the dev pairs (of the recipe's corpora) are not those the run validated on", of pairs the user's own files
    gave. A run moves only the files it has; others are a change of its data, refused as the flag's."""
    from nmt.cli import config_for_resume
    run = tmp_path / "run"
    run.mkdir()
    for ko, en in (("a.ko", "a.en"), ("dev.ko", "dev.en"), ("tr.ko", "tr.en")):
        (tmp_path / ko).write_text("안녕.\n", encoding="utf-8")
        (tmp_path / en).write_text("Hi.\n", encoding="utf-8")
    parse = build_train_parser().parse_args
    saved = Config()   # the tatoeba recipe's
    saved.train.model_dir = str(run)
    saved.save(run / "config.json")
    with pytest.raises(ConfigError, match=r'^--resume: --train-src ".*a\.ko" differs from null, which this run was '
                                          r"trained with .*the data.* cannot change within a run"):
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--train-src", str(tmp_path / "a.ko"),
                                 "--train-tgt", str(tmp_path / "a.en")]))
    saved = Config.from_dict({"data": {"recipe": None, "train_src": str(tmp_path / "tr.ko"),
                                       "train_tgt": str(tmp_path / "tr.en")}, "train": {"model_dir": str(run)}})
    saved.save(run / "config.json")
    with pytest.raises(ConfigError, match=r'^--resume: --dev-src ".*dev\.ko" differs from null'):
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--dev-src", str(tmp_path / "dev.ko"),
                                 "--dev-tgt", str(tmp_path / "dev.en")]))
    (tmp_path / "moved").mkdir()   # files the run has, given where they are now: taken (their pairs compared)
    for name in ("tr.ko", "tr.en"):
        (tmp_path / name).rename(tmp_path / "moved" / name)
    cfg, _ = config_for_resume(parse(["--model-dir", str(run), "--resume", "--train-src", str(tmp_path / "moved" /
                                      "tr.ko"), "--train-tgt", str(tmp_path / "moved" / "tr.en")]))
    assert cfg.data.train_src == str(tmp_path / "moved" / "tr.ko")


def test_a_config_files_average_last_is_judged_with_the_keep_last_of_the_flags(tmp_path):
    """A --config file's {"train": {"average_last": 4}} was judged over the default keep_last 3 before the flags:
    refused with --keep-last 5 too, "give --keep-last 4 or more (got 3)" (nothing mended it but editing the file);
    its keep_last 1 under --average-last 3 was refused without naming the file (naming a key of the run, of the
    flag's, where the file's was at fault)."""
    path = tmp_path / "avg4.json"
    path.write_text(json.dumps({"train": {"average_last": 4}}))
    cfg = cfg_of(["--config", str(path), "--keep-last", "5"])
    assert (cfg.train.average_last, cfg.train.keep_last) == (4, 5)
    for load in (lambda: cfg_of(["--config", str(path)]), lambda: Config.load(path, complete=False)):
        with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: --average-last 4 averages the last 4 of the "
                                              r"checkpoints kept: give --keep-last 4 or more \(got 3\)$"):
            load()   # (as the other values of two keys that clash: the file, and both values, named)
    path.write_text(json.dumps({"train": {"keep_last": 1, "average_last": 2}}))
    assert cfg_of(["--config", str(path), "--keep-last", "2"]).train.average_last == 2
    assert cfg_of(["--config", str(path), "--average-last", "0"]).train.keep_last == 1
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: --average-last 3 averages the last 3 of the "
                                          r"checkpoints kept: give --keep-last 3 or more \(got 1\)$"):
        cfg_of(["--config", str(path), "--average-last", "3"])
    with pytest.raises(ConfigError, match=r"^--average-last 5 averages the last 5 of the checkpoints kept: give "
                                          r"--keep-last 5 or more \(got 3\)$"):   # (flags alone, and Python's)
        cfg_of(["--average-last", "5"])
    with pytest.raises(ConfigError, match=r"^--average-last 5 averages .* \(got 3\)$"):
        Config.from_dict({"train": {"average_last": 5}})


def test_a_recipe_flag_overrides_a_config_files_own_files(tmp_path):
    """--config of a run on its own files with --recipe tatoeba was refused as "--recipe tatoeba and
    --train-src/--train-tgt exclude each other", flags the user had not given (a recipe config with --train-src
    was taken)."""
    path = tmp_path / "files.json"
    path.write_text(json.dumps({"data": {"recipe": None, "train_src": "a.ko", "train_tgt": "a.en", "dev_src": "d.ko",
                                         "dev_tgt": "d.en"}}))
    cfg = cfg_of(["--config", str(path), "--model-dir", "m", "--recipe", "tatoeba"])
    assert cfg.data.recipe == "tatoeba" and cfg.data.train_src is None and cfg.data.dev_src is None
    with pytest.raises(ConfigError, match="exclude each other"):
        cfg_of(["--config", str(path), "--model-dir", "m", "--recipe", "tatoeba", "--train-src", "b.ko"])


def test_a_repeated_upsample_adds_its_corpora(tmp_path):
    """--upsample tatoeba-manythings=4 --upsample jhe-dev=2 kept the last alone, silently dropping the first
    weighting (34,017 pairs where the two together give 47,402)."""
    cfg = cfg_of(["--recipe", "all", "--upsample", "tatoeba-manythings=4", "--upsample", "jhe-dev=2"])
    assert cfg.data.upsample == "tatoeba-manythings=4,jhe-dev=2"
    from nmt.recipes import RECIPES, parse_upsample
    with pytest.raises(ConfigError, match="tatoeba-manythings is given twice"):
        parse_upsample(cfg_of(["--recipe", "all", "--upsample", "tatoeba-manythings=4", "--upsample",
                               "tatoeba-manythings=2"]).data.upsample, RECIPES["all"])


def test_small_messages_say_what_was_given(tmp_path):
    """--valid-every 0 was "validation: every 0 updates and at each epoch end"; a --config file's heads 3 was named
    as "--model-size 256 must be divisible by --heads 3", flags nobody gave."""
    from nmt.cli import training_run
    from nmt.preflight import settings_lines
    assert any(line.startswith("validation: at each epoch end, by dev bleu") for line in
               settings_lines(cfg_of(["--valid-every", "0"])))
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model": {"arch": "transformer", "heads": 3}}))
    with pytest.raises(ConfigError, match=rf"^{path}: model.heads: --model-size 256 must be divisible by --heads 3"):
        training_run(build_train_parser().parse_args(["--config", str(path), "--model-dir", str(tmp_path / "m")]))


def test_a_tilde_reaches_every_command_and_the_resume(tmp_path, monkeypatch):
    """Only nmt-train expanded "~": `nmt-translate --model-dir=~/m` found no directory, and `--resume
    --model-dir=~/m` missed the run's config.json, resuming with the defaults (lr 0.002 for its 0.0005)."""
    from nmt.cli import config_for_resume
    from nmt.cli_decode import build_translate_parser
    monkeypatch.setenv("HOME", str(tmp_path))
    assert build_translate_parser().parse_args(["--model-dir=~/m"]).model_dir == tmp_path / "m"
    assert build_train_parser().parse_args(["--init-from=~/m"]).init_from == tmp_path / "m"
    (tmp_path / "m").mkdir()
    saved = Config()
    saved.train.model_dir, saved.optim.lr = str(tmp_path / "m"), 5e-4
    saved.save(tmp_path / "m" / "config.json")
    cfg, changes = config_for_resume(build_train_parser().parse_args(["--resume", "--model-dir=~/m"]))
    assert cfg.optim.lr == 5e-4 and changes == []


def test_a_tilde_in_the_decoding_commands_file_flags_is_the_home_directory(tmp_path, monkeypatch):
    """`nmt-translate --input=~/in.ko` (the shell leaves "~" after "=") was "no such file": the decoding commands'
    files were kept as typed, where every directory flag expanded "~"; "-" stays standard input or output."""
    from nmt.cli_decode import build_evaluate_parser, build_translate_parser
    from nmt.cli_score import build_score_parser
    monkeypatch.setenv("HOME", str(tmp_path))
    home = str(tmp_path)
    args = build_translate_parser().parse_args(["--model-dir=m", "--input=~/in", "--output=~/out"])
    assert (args.input, args.output) == (f"{home}/in", f"{home}/out")
    assert build_translate_parser().parse_args(["--model-dir=m", "--input=-", "--output=-"]).input == "-"
    args = build_evaluate_parser().parse_args(["--model-dir=m", "--src-file=~/s", "--ref-file", "~/r1", "~/r2",
                                               "--json=~/j", "--data-dir=~/d"])
    assert (args.src_file, args.ref_file, args.json, args.data_dir) == (
        f"{home}/s", [f"{home}/r1", f"{home}/r2"], f"{home}/j", f"{home}/d")
    args = build_score_parser().parse_args(["--model-dir=m", "--src-file=~/s", "--tgt-file=~/t", "--output=~/o"])
    assert (args.src_file, args.tgt_file, args.output) == (f"{home}/s", f"{home}/t", f"{home}/o")


def test_a_fine_tuning_run_whose_default_directory_is_its_models_says_so(tmp_path, monkeypatch):
    """The quick start's model fine-tuned on the Tatoeba recipe without --model-dir was told "is the --model-dir of
    this run", a flag nobody gave."""
    from nmt.cli import training_run
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "models" / "tatoeba-ko-en"
    model.mkdir(parents=True)
    Config().save(model / "config.json")
    (model / "params.best").write_bytes(b"x")
    write_manifest(model, "best", ["params.best"], 1)
    with pytest.raises(ConfigError, match=r"is the --model-dir of this run \(the default, named after the data"):
        training_run(build_train_parser().parse_args(["--init-from", str(model)]))


@pytest.mark.parametrize("body, says", [({"train": 5}, "section 'train' must be a JSON object, got 5"),
                                        ({"data": 3}, "section 'data' must be a JSON object, got 3"),
                                        ({"train": {"model_dir": None}}, "train.model_dir must be a string, got null")])
def test_a_resume_with_a_malformed_config_file_is_one_error(tmp_path, body, says):
    """7e2448f read a --config file's sections unchecked to find the run to resume: a traceback ('int' object does
    not support item assignment) where a new run says what is wrong."""
    from nmt.cli import config_for_resume
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(body))
    with pytest.raises(ConfigError, match=rf"^{path}: {re.escape(says)}"):
        config_for_resume(build_train_parser().parse_args(["--resume", "--model-dir", str(tmp_path),
                                                           "--config", str(path)]))


def test_a_repeated_reference_or_ensemble_flag_adds_up():
    """`--ref-file a.en --ref-file b.en` scored against b.en alone (nrefs:1, and recorded so), and `--ensemble B
    --ensemble C` decoded without B: argparse kept the last; they add up, as Marian's repeated options do."""
    from nmt.cli_decode import build_evaluate_parser, build_translate_parser
    from nmt.serve.cli import parse_args
    args = build_evaluate_parser().parse_args(["--model-dir", "m", "--src-file", "s", "--ref-file", "a", "--ref-file",
                                               "b", "c", "--ensemble", "B", "--ensemble", "C"])
    assert args.ref_file == ["a", "b", "c"] and args.ensemble == [Path("B"), Path("C")]
    assert build_translate_parser().parse_args(["--model-dir", "m", "--ensemble", "B", "--ensemble", "C"]).ensemble \
        == [Path("B"), Path("C")]
    assert parse_args(["--model-dir", "m", "--ensemble", "B", "--ensemble", "C"]).ensemble == [Path("B"), Path("C")]
    assert build_translate_parser().parse_args(["--model-dir", "m"]).ensemble == []   # the default list untouched


def test_ctrl_c_while_mxnet_is_imported_is_an_interruption(monkeypatch, capsys):
    """Ctrl-C during a command's `import mxnet` (seconds on a loaded host) gave two tracebacks ending in "NameError:
    name 'type_check' is not defined": run_cli imported mxnet again, half-imported, to list the errors it catches."""
    from nmt.commands import Terminated, run_cli
    monkeypatch.setitem(sys.modules, "nmt.parallel", None)   # an import cut short: importing it again fails

    def main():
        raise KeyboardInterrupt
    assert run_cli(main) == 130 and capsys.readouterr().err == "interrupted\n"

    def terminated():   # SIGTERM outside the training loop (nmt.signals): the signal's own exit code
        raise Terminated
    assert run_cli(terminated) == 143 and capsys.readouterr().err == "interrupted\n"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_sigterm_from_a_commands_start_is_an_interruption(sig, capsys):
    """SIGTERM or SIGHUP while a command imported MXNet, loaded its model or read standard input killed it without a
    word (exit -15): only its translating or scoring loop took them. From its start they are Ctrl-C's interruption,
    with their own exit codes (143, 129)."""
    import signal
    import time
    from nmt.commands import run_cli
    signum = getattr(signal, sig)

    def default(*_):   # (what the signal's default would do: end the process, here the test)
        raise AssertionError(f"{sig} was not taken")

    def starting():
        assert signal.getsignal(signum) is not default
        os.kill(os.getpid(), signum)
        time.sleep(5)   # (the handler raises here)
        return 0
    old = signal.signal(signum, default)
    try:
        assert run_cli(starting) == 128 + signum
        assert signal.getsignal(signum) is default   # put back as the command ends
    finally:
        signal.signal(signum, old)
    assert capsys.readouterr().err.endswith("interrupted\n")


def test_a_config_file_with_a_recipe_and_files_is_refused(tmp_path):
    """A --config file giving both "recipe" and "train_src" trained on the files without a word (the same as flags
    is refused); a --train-src flag over a file's recipe replaces it, as --recipe replaces a file's files."""
    from nmt.cli import training_run
    path = tmp_path / "c.json"
    files = {"train_src": "t.ko", "train_tgt": "t.en"}
    path.write_text(json.dumps({"data": {"recipe": "all", **files}}))
    with pytest.raises(ConfigError, match=rf"^{path}: data.recipe all and --train-src/--train-tgt exclude each other"):
        training_run(build_train_parser().parse_args(["--config", str(path), "--model-dir", str(tmp_path / "m")]))
    path.write_text(json.dumps({"data": {"recipe": "all"}}))
    cfg, _, _ = training_run(build_train_parser().parse_args(["--config", str(path), "--train-src", "t.ko",
                                                              "--train-tgt", "t.en", "--model-dir", str(tmp_path / "m")]))
    assert cfg.data.recipe is None and cfg.data.train_src.endswith("t.ko")


def test_a_config_file_of_one_language_takes_the_other_from_a_flag(tmp_path):
    """{"data": {"src_lang": "en"}} with --tgt ko was refused: the file was checked alone, its tgt_lang the default
    en ("--src and --tgt are both 'en' ... give --src en --tgt ko", which the user had). The pair is checked merged."""
    from nmt.cli import training_run
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"data": {"src_lang": "en"}}))
    cfg, _, _ = training_run(build_train_parser().parse_args(["--config", str(path), "--tgt", "ko", "--model-dir",
                                                              str(tmp_path / "m")]))
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("en", "ko")
    with pytest.raises(ConfigError, match="--src and --tgt are both 'en'"):   # (alone, the default en is its pair)
        training_run(build_train_parser().parse_args(["--config", str(path), "--model-dir", str(tmp_path / "m")]))
    # so are the checks of several sections: ko-mecab needs a Korean target, --accum-steps a batch to split
    for settings, flags, error in (({"train": {"valid_metric": "ko-mecab"}}, ["--src", "en", "--tgt", "ko"],
                                    "--valid-metric ko-mecab scores Korean output"),
                                   ({"train": {"accum_steps": 64}}, ["--batch-size", "128"],
                                    "--batch-size 32 is smaller than --accum-steps 64")):
        path.write_text(json.dumps(settings))
        args = ["--config", str(path), "--model-dir", str(tmp_path / "m")]
        training_run(build_train_parser().parse_args(args + flags))
        with pytest.raises(ConfigError, match=f"^{path}: {error}"):   # (the file named: its values, the defaults')
            training_run(build_train_parser().parse_args(args))


def test_a_repeated_file_or_checkpoint_flag_is_refused(capsys):
    """`nmt-evaluate --src-file a.ko --ref-file a.en --src-file b.ko --ref-file b.en` scored b.ko against both files
    of references (nrefs:2, recorded): argparse keeps the last --src-file, now that --ref-file adds up."""
    from nmt.cli_decode import build_evaluate_parser, build_translate_parser
    from nmt.cli_score import build_score_parser
    from types import SimpleNamespace
    from nmt.serve.cli import parse_args
    serve_parser = SimpleNamespace(parse_args=parse_args)   # nmt-serve's, as a parser's
    for build, argv in ((build_evaluate_parser, ["--src-file", "a", "--ref-file", "r", "--src-file", "b"]),
                        (build_translate_parser, ["--input", "a", "--input", "b"]),
                        (build_translate_parser, ["--checkpoint", "best", "--checkpoint", "avg"]),
                        (build_score_parser, ["--src-file", "a", "--tgt-file", "t", "--tgt-file", "u"]),
                        (build_score_parser, ["--src-file", "a", "--tgt-file", "t", "--output-format", "json",
                                              "--output-format", "score"]),
                        (build_evaluate_parser, ["--max-sentences", "2", "--max-sentences", "3"]),
                        (build_evaluate_parser, ["--data-dir", "x", "--data-dir", "y"]),
                        (build_translate_parser, ["--on-invalid-utf8", "replace", "--on-invalid-utf8", "error"]),
                        (lambda: serve_parser, ["--checkpoint", "10", "--checkpoint", "best"]),
                        (lambda: serve_parser, ["--port", "8081", "--port", "8082"])):
        with pytest.raises(SystemExit):
            build().parse_args(["--model-dir", "m", *argv])
        assert "is given twice (" in capsys.readouterr().err
    args = build_evaluate_parser().parse_args(["--model-dir", "m", "--src-file", "a", "--ref-file", "r", "--json"])
    assert (args.src_file, args.json, args.checkpoint) == ("a", "-", "best")


def test_a_config_files_recipe_on_resume_of_a_run_on_files_is_refused(tmp_path):
    """`--resume --config f.json` with {"data": {"recipe": "tatoeba"}} over a run on its own files dropped the
    recipe without a word, where `--resume --recipe tatoeba` is refused."""
    from nmt.cli import config_for_resume
    run = tmp_path / "m"
    run.mkdir()
    saved = Config.from_dict({"data": {"train_src": "t.ko", "train_tgt": "t.en", "recipe": None},
                              "train": {"model_dir": str(run)}})
    saved.save(run / "config.json")
    path = tmp_path / "rec.json"
    path.write_text(json.dumps({"data": {"recipe": "tatoeba"}}))
    with pytest.raises(ConfigError, match=r"^--resume: .*data.recipe = \"tatoeba\" differs from null"):
        config_for_resume(build_train_parser().parse_args(["--resume", "--model-dir", str(run), "--config",
                                                           str(path)]))


def test_every_flag_is_the_one_its_config_key_names():
    """A --config file's bad value is named by its key where the error names the key's flag (`config.flag_name`): a
    flag renamed here and not there would leave its key unnamed again."""
    from nmt.flags import GROUPS
    from nmt.config import FLAG_NAMES, flag_name
    flags = {(f.section, f.field): f.flag for _, group in GROUPS for f in group if not f.negate}
    assert {key: flag_name(*key) for key in flags} == flags
    assert set(FLAG_NAMES) <= set(flags)


def test_nmt_score_help_says_what_a_long_translation_gets(monkeypatch):
    """nmt-score's --help said "longer inputs are truncated with a warning", the help of nmt-translate's flag, where a
    translation longer than that is an error naming its line (docs/translation.md)."""
    from nmt.cli_decode import build_translate_parser
    from nmt.cli_score import build_score_parser
    monkeypatch.setenv("COLUMNS", ONE_LINE)
    score = " ".join(build_score_parser().format_help().split())
    assert "longer source sentences are truncated with a warning; a translation longer than 3 x (this + the " \
        "search's most for such a source) is an error naming its line" in score
    assert "longer inputs are truncated with a warning" in " ".join(build_translate_parser().format_help().split())


@pytest.mark.parametrize("path", ["models/m", "my model", "-dash", "../모델 A/tensorboard", "it's"])
def test_paths_in_advice_paste_back_into_a_shell(path, tmp_path):
    """Commands given as advice named paths unquoted: `nmt-train --model-dir my model --resume ...` pasted back gave
    "unrecognized arguments: model", and a directory named -dash "expected one argument"."""
    import shlex
    from nmt.checkpoint import CheckpointError, params_path
    from nmt.commands import shell_word
    assert shlex.split(f"nmt-train --model-dir {shell_word(path)} --resume") == \
        ["nmt-train", "--model-dir", path if not path.startswith("-") else f"./{path}", "--resume"]
    model = tmp_path / path
    model.mkdir(parents=True)
    with pytest.raises(CheckpointError) as e:
        params_path(model, "avg")
    assert f"`nmt-train --model-dir {shell_word(model)} --resume --average-last N`" in str(e.value)


@pytest.mark.parametrize("stopped, said", [("max_seconds", "max_seconds"), ("SIGTERM", "SIGTERM"), ("", "a kill"),
                                           ("early_stop", None)])
def test_the_advice_to_average_a_run_stopped_by_its_time_makes_no_update(stopped, said, tmp_path):
    """A run stopped by --max-seconds (or a signal, or killed) was told to `--resume --average-last N`, which trains
    on (the time limit is each invocation's) and replaced params.best: it is given its step as --max-steps."""
    from nmt.checkpoint import CheckpointError, TrainState, params_path
    from nmt.commands import shell_word
    TrainState(step=141, stopped=stopped).save(tmp_path)
    with pytest.raises(CheckpointError) as e:
        params_path(tmp_path, "avg")
    run = f"`nmt-train --model-dir {shell_word(tmp_path)} --resume --average-last N"
    assert (f"{run} --max-steps 141` (it stopped by {said} at step 141: without --max-steps the resume would train "
            "on; it then becomes the run's limit: a later resume gives a higher one)" if said else f"{run}`") \
        in str(e.value), str(e.value)


def test_thread_counts_mxnet_takes_and_refuses(monkeypatch, capsys):
    """MXNet reads OMP_NUM_THREADS as a C int: "+4" and 2147483647 run (they were refused), 2147483648, " " and an
    NBSP before a digit aborted the process (they passed); --help and --version load no MXNet and are not refused,
    and nmt-launch checks what its processes will get."""
    from nmt.commands import threads_variable
    from nmt.launch import main as launch_main
    for value, fine in (("+4", True), ("", True), ("-1", True), (" 2 ", True), ("2147483647", True), ("0004", True),
                        ("2147483648", False), ("\u0664", False), ("4,2", False), ("+", False), (" ", False),
                        ("\t", False), ("\xa02", False)):
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        if fine:
            threads_variable()
        else:
            with pytest.raises(ConfigError, match=re.escape(f"OMP_NUM_THREADS={value!r}")):
                threads_variable()
    monkeypatch.setenv("OMP_NUM_THREADS", "abc")
    with pytest.raises(SystemExit) as done:
        train_main(["--help"])
    assert done.value.code == 0 and "usage: nmt-train" in capsys.readouterr().out
    assert launch_main(["-n", "1", "--dry-run", "--", "true"]) == 2
    assert "error: OMP_NUM_THREADS='abc'" in capsys.readouterr().err
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert launch_main(["-n", "1", "--dry-run", "--env", "OMP_NUM_THREADS=4,2", "--", "true"]) == 2
    assert "error: OMP_NUM_THREADS='4,2'" in capsys.readouterr().err


@pytest.mark.parametrize("script", ["translate.py", "serve.py"])
def test_a_thread_count_that_is_no_number_is_one_clear_error(script, tmp_path):
    """OMP_NUM_THREADS=abc (or an OpenMP list, 4,2) ended every command inside MXNet's import with a C++ exception,
    exit 134; "" and -1 run as before."""
    env = dict(os.environ, OMP_NUM_THREADS="4,2", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(REPO / "scripts" / script), "--model-dir", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (2, "error: OMP_NUM_THREADS='4,2': MXNet reads it as a whole number of "
                                                 "threads per operator; set it to one (e.g. OMP_NUM_THREADS=2, or "
                                                 "cores / devices) or unset it\n")


def test_a_name_too_long_for_the_file_system_is_one_clear_error(tmp_path, capsys, monkeypatch):
    """A --model-dir (or --output, or any path) with a name over 255 bytes ended in an OSError traceback (File name
    too long), --dry-run too; JSON text given to --config was taken for a file name the same way."""
    from nmt.export import export_main
    from nmt.serve.cli import main as serve_main
    long_name = str(tmp_path / ("모델" * 45))   # (270 bytes)
    (tmp_path / "t.ko").write_text("가\n")
    (tmp_path / "t.en").write_text("a\n")
    for main, argv in ((train_main, ["--model-dir", long_name, "--dry-run", "--train-src", str(tmp_path / "t.ko"),
                                     "--train-tgt", str(tmp_path / "t.en")]),
                       (export_main, ["--model-dir", long_name, "--output", str(tmp_path / "e")]),
                       (serve_main, ["--model-dir", long_name])):   # (it said "[Errno 36] File name too long")
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {long_name}") and err.endswith(": longer than a file system takes (255 bytes "
                                                                       "a name in the path, 4096 the path)\n"), err
    assert train_main(["--config", '{"data": {"src_lang": "en"}}', "--dry-run"]) == 2
    assert "--config takes the name of a JSON file, not JSON text" in capsys.readouterr().err
    (tmp_path / "{lstm}.json").write_text('{"data": {"src_lang": "en"}}')   # (a file whose name starts with "{")
    monkeypatch.chdir(tmp_path)
    assert train_main(["--config", "{lstm}.json", "--dry-run", "--model-dir", str(tmp_path / "m")]) == 2
    assert "--src and --tgt are both 'en'" in capsys.readouterr().err
