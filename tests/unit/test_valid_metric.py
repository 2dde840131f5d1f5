"""--valid-metric's default follows the target language: a run with Korean output chooses params.best and stops early
by ko-mecab BLEU (13a BLEU splits Korean only at spaces: docs/evaluation.md), any other by 13a BLEU, however the run
is configured; a value given is kept, and a run keeps the metric its config.json records. Unset, config.json records
null (the target language's): a run's file serves a run of the other direction too."""
from __future__ import annotations

import json

import pytest

from nmt.cli import build_train_parser, config_for_resume, config_from_args, training_run
from nmt.config import Config, ConfigError, DataConfig, TrainConfig
from nmt.config_resume import as_command_line
from nmt.preflight import checked_config, settings_lines

EN_KO, KO_EN = {"src_lang": "en", "tgt_lang": "ko"}, {"src_lang": "ko", "tgt_lang": "en"}


def from_flags(argv, tmp_path) -> Config:
    return training_run(build_train_parser().parse_args([*argv, "--model-dir", str(tmp_path / "m")]))[0]


def recorded(cfg: Config, tmp_path):
    """The metric a run of `cfg` records in its config.json (where a resume reads it): None, the target's."""
    cfg.save(tmp_path / "config.json")
    return json.loads((tmp_path / "config.json").read_text())["train"]["valid_metric"]


def written(tmp_path, settings: dict):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(settings))
    return str(path)


def hand_set(langs: dict) -> Config:
    cfg = Config()   # the languages set on the dataclass after it was made (training.md: "set by hand")
    cfg.data.src_lang, cfg.data.tgt_lang = langs["src_lang"], langs["tgt_lang"]
    return cfg


WAYS = {   # each way a run is configured: its configuration for the language pair `langs`
    "flags": lambda langs, tmp: from_flags(["--src", langs["src_lang"], "--tgt", langs["tgt_lang"]], tmp),
    "config file": lambda langs, tmp: from_flags(["--config", written(tmp, {"data": langs})], tmp),
    "config file and --tgt": lambda langs, tmp: from_flags(
        ["--config", written(tmp, {"data": {"src_lang": langs["src_lang"]}}), "--tgt", langs["tgt_lang"]], tmp),
    "recipe": lambda langs, tmp: from_flags(["--recipe", "all", "--src", langs["src_lang"], "--tgt",
                                             langs["tgt_lang"]], tmp),
    "Config.from_dict": lambda langs, tmp: Config.from_dict({"data": langs}),
    "dataclasses": lambda langs, tmp: Config(data=DataConfig(**langs), train=TrainConfig()),
    "set by hand": lambda langs, tmp: hand_set(langs),
    "train(cfg)'s checks": lambda langs, tmp: checked_config(Config.from_dict({"data": langs}), "train"),
}


@pytest.mark.parametrize("way", WAYS)
def test_the_default_valid_metric_follows_the_target_language(way, tmp_path):
    """It was 13a BLEU whatever the target: an en->ko run kept params.best and stopped early by a score that
    docs/evaluation.md calls unsuitable for Korean, though ko-mecab BLEU was computed at every validation."""
    korean, english = WAYS[way](EN_KO, tmp_path), WAYS[way](KO_EN, tmp_path)
    assert (recorded(korean, tmp_path), recorded(english, tmp_path)) == (None, None)
    assert (korean.valid_metric, english.valid_metric) == ("ko-mecab", "bleu")
    assert "by dev ko-mecab (beam 1)" in settings_lines(korean)[-1]   # the log's and --dry-run's line
    assert "by dev bleu (beam 1)" in settings_lines(english)[-1]


def test_the_quick_start_is_unchanged_and_help_says_the_default(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")   # (the help on one line a flag, as argparse breaks "ko-mecab" when narrow)
    cfg = training_run(build_train_parser().parse_args([]))[0]
    assert (cfg.train.model_dir, cfg.valid_metric, recorded(cfg, tmp_path)) == ("models/tatoeba-ko-en", "bleu", None)
    with pytest.raises(SystemExit):
        build_train_parser().parse_args(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert ("(default: ko-mecab, BLEU on morphemes, for Korean output, --tgt ko, which 13a BLEU reads poorly; bleu, "
            "13a BLEU, otherwise; a resumed run keeps its own)") in shown


@pytest.mark.parametrize("metric", ["bleu", "chrf", "ppl"])
def test_a_valid_metric_given_is_kept_for_korean_output(metric, tmp_path):
    """The user's choice is never replaced by the target language's default (ko-mecab, without it)."""
    assert from_flags(["--src", "en", "--tgt", "ko"], tmp_path).valid_metric == "ko-mecab"   # (not given)
    given = [from_flags(["--src", "en", "--tgt", "ko", "--valid-metric", metric], tmp_path),
             from_flags(["--config", written(tmp_path, {"data": EN_KO, "train": {"valid_metric": metric}})], tmp_path),
             Config.from_dict({"data": EN_KO, "train": {"valid_metric": metric}}),
             checked_config(Config(data=DataConfig(**EN_KO), train=TrainConfig(valid_metric=metric)), "t")]
    assert [(c.valid_metric, recorded(c, tmp_path)) for c in given] == [(metric, metric)] * 4
    with pytest.raises(ConfigError, match="--valid-metric ko-mecab scores Korean output, and this model translates "
                                          "into 'en'"):
        from_flags(["--valid-metric", "ko-mecab"], tmp_path)


def test_null_is_the_target_languages_metric_and_another_value_is_refused(tmp_path):
    """A file's null (a config.json's where none was given) or Python's None: the target language's metric; a value of
    another type names the file and key."""
    path = written(tmp_path, {"data": EN_KO, "train": {"valid_metric": None}})
    assert from_flags(["--config", path], tmp_path).valid_metric == "ko-mecab"
    Config.from_dict({"data": EN_KO}).save(tmp_path / "config.json")
    assert Config.load(tmp_path / "config.json").valid_metric == "ko-mecab"
    assert Config(data=DataConfig(**EN_KO), train=TrainConfig(valid_metric=None)).valid_metric == "ko-mecab"
    bad = written(tmp_path, {"train": {"valid_metric": 3}})
    with pytest.raises(ConfigError, match=f"^{bad}: .*valid_metric.* 3"):
        from_flags(["--config", bad], tmp_path)


def test_a_run_keeps_the_metric_it_began_with_when_resumed(tmp_path):
    """An en->ko run begun before the default followed the target language recorded "bleu": resumed without the
    flag, by nmt-train or train(resume=True), it goes on by 13a BLEU (its best score is one); a new run of the same
    settings takes ko-mecab. A run that recorded null goes on by its target's, which --valid-metric may name; asking
    another metric of either is refused, naming the one the run chooses by."""
    run, new = tmp_path / "run", tmp_path / "new"
    run.mkdir(), new.mkdir()
    python = Config.from_dict({"data": EN_KO, "train": {"model_dir": str(run), "max_steps": 9}})
    assert python.valid_metric == "ko-mecab"   # a new run of these settings
    Config.from_dict({"data": EN_KO, "train": {"model_dir": str(run), "valid_metric": "bleu"}}).save(
        run / "config.json")
    Config.from_dict({"data": EN_KO, "train": {"model_dir": str(new)}}).save(new / "config.json")
    parse = build_train_parser().parse_args
    resumed, _ = config_for_resume(parse(["--model-dir", str(run), "--resume", "--max-steps", "9"]))
    assert (resumed.valid_metric, resumed.train.max_steps) == ("bleu", 9)
    assert as_command_line(checked_config(python, "train"), resume=True).valid_metric == "bleu"
    with pytest.raises(ConfigError, match=r'^--resume: --valid-metric "ko-mecab" differs from "bleu", which this run '
                                          r"was trained with .*the --valid-metric cannot change within a run"):
        config_for_resume(parse(["--model-dir", str(run), "--resume", "--valid-metric", "ko-mecab"]))
    python.train.valid_metric = "ko-mecab"
    with pytest.raises(ConfigError, match=r'^--resume: train.valid_metric = "ko-mecab" differs from "bleu"'):
        as_command_line(checked_config(python, "train"), resume=True)
    named, _ = config_for_resume(parse(["--model-dir", str(new), "--resume", "--valid-metric", "ko-mecab"]))
    assert (named.train.valid_metric, named.valid_metric) == (None, "ko-mecab")
    with pytest.raises(ConfigError, match=r'^--resume: --valid-metric "bleu" differs from "ko-mecab", which this run '
                                          r"was trained with"):
        config_for_resume(parse(["--model-dir", str(new), "--resume", "--valid-metric", "bleu"]))


def test_a_fine_tuning_run_takes_the_default_of_its_models_target_language(tmp_path):
    """--init-from a model translating into Korean (whatever its own run chose by) with the command line's default
    languages, ko->en: the run is en->ko, and chooses by ko-mecab BLEU unless told."""
    model = tmp_path / "enko"
    model.mkdir()
    Config.from_dict({"data": EN_KO, "train": {"valid_metric": "bleu"}}).save(model / "config.json")
    args = build_train_parser().parse_args(["--init-from", str(model), "--model-dir", str(tmp_path / "ft")])
    cfg = config_from_args(args)   # (the parameters' part: tests/integration/test_valid_metric_runs.py)
    assert (cfg.data.tgt_lang, cfg.valid_metric) == ("ko", "ko-mecab")


def test_a_runs_config_json_for_the_other_direction_takes_that_directions_default(tmp_path):
    """A run's config.json records null where no metric was given: as the --config of a run the other way round
    (docs/training.md: "a run's settings, for a new run"), each direction takes its own; a metric the run was given
    (chrf) and a --valid-metric flag are kept, and ko-mecab given for English output is refused."""
    def saved(name: str, langs: dict, **train) -> str:   # a config.json as a run writes it: every setting
        (tmp_path / name).mkdir()
        Config.from_dict({"data": langs, "train": train}).save(tmp_path / name / "config.json")
        return str(tmp_path / name / "config.json")
    enko, koen, chrf = saved("enko", EN_KO), saved("koen", KO_EN), saved("chrf", EN_KO, valid_metric="chrf")
    to_en, to_ko = ["--src", "ko", "--tgt", "en"], ["--src", "en", "--tgt", "ko"]
    assert [from_flags(argv, tmp_path).valid_metric for argv in (
        ["--config", enko, *to_en], ["--config", koen, *to_ko], ["--config", enko], ["--config", koen, *to_en],
        ["--config", chrf, *to_en], ["--config", koen, *to_ko, "--valid-metric", "bleu"])] == [
        "bleu", "ko-mecab", "ko-mecab", "bleu", "chrf", "bleu"]
    with pytest.raises(ConfigError, match="--valid-metric ko-mecab scores Korean output"):   # (given: kept)
        from_flags(["--config", written(tmp_path, {"data": EN_KO, "train": {"valid_metric": "ko-mecab"}}), *to_en],
                   tmp_path)
