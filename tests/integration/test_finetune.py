"""Fine-tuning (`nmt-train --init-from`): a new run starts from a trained model's parameters with its settings,
languages and SentencePiece models, on other data, with a fresh optimizer; what does not fit is a clear error."""
from __future__ import annotations

import json
import shutil

import pytest

from nmt import checkpoint as ckpt, manifest
from nmt.cli import train_main
from nmt.commands import shell_word
from nmt.config import Config, ConfigError
from tests.synth import assert_same_params, list_params_files, load_params, params_of, task_files, write_task


@pytest.fixture(scope="module")
def parent(model_dir, tmp_path_factory):
    """The tiny trained model of the session (hidden size 48, 400 pieces) and another task of the same languages."""
    return model_dir, write_task(tmp_path_factory.mktemp("other"), n_train=400, seed=11)


def run_flags(other, model_dir) -> list:
    return [*task_files(other, "train", "dev"), "--model-dir", str(model_dir), "--no-progress", "--no-eval"]


@pytest.mark.parametrize("which", ["dir", "step"])
def test_a_run_starts_from_the_models_parameters_settings_and_vocabularies(parent, tmp_path, which):
    model, other = parent
    first = list_params_files(model)[0]
    init = model if which == "dir" else model / first
    run = tmp_path / "run"
    # A learning rate far too small to move a float32 weight: the run ends with the parameters it started from. Its
    # model flags are the defaults (256 wide, 2 layers ...), so only the model's own settings make them fit.
    assert train_main(run_flags(other, run) + ["--init-from", str(init), "--lr", "1e-30", "--max-steps", "2"]) == 0
    start = {k: v.asnumpy() for k, v in load_params(model, "best" if which == "dir" else first[7:]).items()}
    assert_same_params(params_of(run), start, rtol=0, atol=1e-25)
    for name in ("spm.ko.model", "spm.ko.vocab", "spm.en.model", "spm.en.vocab"):
        assert (run / name).read_bytes() == (model / name).read_bytes()
    mine, theirs = Config.load(run / ckpt.CONFIG), Config.load(model / ckpt.CONFIG)
    assert mine.model == theirs.model and mine.data.vocab_size == 400 and mine.optim.lr == 1e-30
    assert mine.model.hidden_size == 48 != Config().model.hidden_size
    state = ckpt.TrainState.load(run)
    assert state.step == 2 and state.init_from == str(ckpt.params_path(model, "best") if which == "dir" else init)
    assert f"fine-tuning: starting from {state.init_from}" in (run / ckpt.LOG).read_text(encoding="utf-8")


def test_the_python_api_fine_tunes_as_the_flag_does(parent, tmp_path):
    """`train(cfg, init=DIR)` (training.md: "init=Path(...) as the flags") said "DIR cannot be read (Is a
    directory)", and with a params file refused the model's parameters for cfg's default sizes; given sizes that
    fit, config.json recorded cfg's vocabulary size, not that of the SentencePiece models it copied."""
    from nmt.config import DataConfig, TrainConfig
    from nmt.train import train
    model, other = parent
    files = {k: other[k] for k in ("train_src", "train_tgt", "dev_src", "dev_tgt")}
    cfg = Config(data=DataConfig(recipe=None, **files),
                 train=TrainConfig(model_dir=str(tmp_path / "run"), max_steps=1, progress=False))
    cfg.model.dropout, cfg.optim.lr = 0.05, 5e-4
    result = train(cfg, evaluate=False, init=model)
    assert result.state.init_from == str(ckpt.params_path(model, "best")) and result.state.step == 1
    mine, theirs = Config.load(tmp_path / "run" / ckpt.CONFIG), Config.load(model / ckpt.CONFIG)
    assert mine.data.vocab_size == theirs.data.vocab_size == 400 and mine.model.hidden_size == 48
    assert mine.model.dropout == 0.05 and mine.optim.lr == 5e-4   # what shapes no parameter is the run's own
    cfg.data.vocab_size, cfg.train.model_dir = 300, str(tmp_path / "other")
    with pytest.raises(ConfigError, match=r"^data.vocab_size 300: --init-from .* has data.vocab_size 400"):
        train(cfg, evaluate=False, init=model)   # as the flag --vocab-size is
    cfg.data.vocab_size = Config().data.vocab_size
    cfg.model = Config.for_arch("transformer").model   # a Transformer asked of an LSTM: it trained the LSTM
    with pytest.raises(ConfigError, match=r'^model.arch "transformer": --init-from .* has model.arch "lstm"'):
        train(cfg, evaluate=False, init=model)


def test_python_fine_tuning_takes_a_dropout_given_at_its_default(parent, tmp_path):
    """`train(cfg, init=...)` took a setting as given only where it differed from the architecture's default: a
    dict asking for the default dropout 0.4 fine-tuned at the model's 0.1, without a word (the flag takes it)."""
    from nmt.finetune import for_init
    model, _ = parent
    default = Config().model
    theirs = Config.load(model / ckpt.CONFIG).model
    assert (theirs.dropout, theirs.word_dropout) != (default.dropout, default.word_dropout)
    asked = {"dropout": default.dropout, "word_dropout": default.word_dropout}
    tuned, _ = for_init(Config.from_dict({"model": asked, "train": {"model_dir": str(tmp_path / "a")}}), model)
    assert (tuned.model.dropout, tuned.model.word_dropout) == (default.dropout, default.word_dropout)
    kept, _ = for_init(Config.from_dict({"train": {"model_dir": str(tmp_path / "b")}}), model)   # not given
    assert (kept.model.dropout, kept.model.word_dropout) == (theirs.dropout, theirs.word_dropout)
    with pytest.raises(ConfigError, match=r'^model.hidden_size 256: --init-from .* has model.hidden_size 48'):
        for_init(Config.from_dict({"model": {"hidden_size": 256}, "train": {"model_dir": str(tmp_path / "c")}}),
                 model)   # a default size given is refused as the flag is
    # through train(), on one's own files (which drop the default recipe: a new Config, which forgot the dict)
    from nmt.train import train
    files = {k: parent[1][k] for k in ("train_src", "train_tgt", "dev_src", "dev_tgt")}
    cfg = Config.from_dict({"data": files, "model": asked, "train": {"model_dir": str(tmp_path / "d"), "max_steps": 1,
                                                                      "progress": False}})
    train(cfg, evaluate=False, init=model)
    tuned = Config.load(tmp_path / "d" / ckpt.CONFIG).model
    assert (tuned.dropout, tuned.word_dropout) == (default.dropout, default.word_dropout)


def test_dropout_may_change_and_is_otherwise_the_models(parent, tmp_path):
    """`--init-from` refused --dropout and --word-dropout, which shape no parameter."""
    model, other = parent
    theirs = Config.load(model / ckpt.CONFIG).model
    flags = ["--init-from", str(model), "--max-steps", "1"]
    assert train_main(run_flags(other, tmp_path / "tuned") + flags + ["--dropout", "0.05", "--word-dropout", "0"]) == 0
    tuned = Config.load(tmp_path / "tuned" / ckpt.CONFIG).model
    assert (tuned.dropout, tuned.word_dropout) == (0.05, 0.0) != (theirs.dropout, theirs.word_dropout)
    assert tuned.hidden_size == theirs.hidden_size
    assert train_main(run_flags(other, tmp_path / "kept") + flags) == 0
    assert Config.load(tmp_path / "kept" / ckpt.CONFIG).model == theirs
    default = Config().model.dropout   # given as the flag, though it is the default: kept (it fell back to theirs)
    assert theirs.dropout != default
    assert train_main(run_flags(other, tmp_path / "dflt") + flags + ["--dropout", str(default)]) == 0
    assert Config.load(tmp_path / "dflt" / ckpt.CONFIG).model.dropout == default


def test_what_a_fine_tune_may_change_is_the_architectures_own_list(parent, tmp_path, monkeypatch):
    """The settings --init-from may change were a list in nmt/finetune.py: a new architecture's own dropout could
    not be tuned unless that file was edited too (architecture.md said only its own files change)."""
    from nmt.finetune import init_config
    from nmt.models import ARCHITECTURES
    model, _ = parent
    cfg = Config.load(model / ckpt.CONFIG)
    word = 0.25 if cfg.model.word_dropout != 0.25 else 0.3   # (other values than the model's)
    cfg.model.dropout, cfg.model.word_dropout, cfg.train.model_dir = 0.05, word, str(tmp_path / "tuned")
    given = {"model.dropout": "--dropout", "model.word_dropout": "--word-dropout"}
    tuned = init_config(cfg, given, model / ckpt.PARAMS_BEST).model
    assert (tuned.dropout, tuned.word_dropout) == (0.05, word)
    monkeypatch.setattr(ARCHITECTURES["lstm"], "tunable_fields", ("dropout",))   # an architecture that lists one
    with pytest.raises(ConfigError, match=rf"^--word-dropout {word}: --init-from .* has model.word_dropout "):
        init_config(cfg, given, model / ckpt.PARAMS_BEST)
    assert ARCHITECTURES["transformer"].tunable_fields == ("dropout", "word_dropout", "attention_dropout",
                                                           "activation_dropout")


def test_it_goes_on_from_what_the_model_learned(parent, tmp_path):
    """4 updates on the other task from the model, and from scratch with the model's settings given as flags: the
    first is close to translating the task already, the second still near chance."""
    model, other = parent
    same = tmp_path / "same.json"   # the model's settings, for the run from scratch
    same.write_text(json.dumps({"model": Config.load(model / ckpt.CONFIG).to_dict()["model"],
                                "data": {"vocab_size": 400}}))
    assert train_main(run_flags(other, tmp_path / "ft") + ["--init-from", str(model), "--max-steps", "4",
                                                            "--valid-every", "4"]) == 0
    assert train_main(run_flags(other, tmp_path / "scratch") + ["--config", str(same), "--max-steps", "4",
                                                                 "--valid-every", "4"]) == 0
    ft, fresh = (json.loads((tmp_path / d / ckpt.METRICS).read_text().splitlines()[-1]) for d in ("ft", "scratch"))
    assert ft["dev_ppl"] < 0.1 * fresh["dev_ppl"] and ft["dev_bleu"] > 50 > fresh["dev_bleu"], (ft, fresh)


def test_a_dry_run_loads_the_parameters(parent, tmp_path, capsys):
    model, other = parent
    assert train_main(run_flags(other, tmp_path / "run") + ["--init-from", str(model), "--dry-run",
                                                             "--hidden-size", "48"]) == 0   # the model's own value
    out = capsys.readouterr().out
    assert f"start from: {ckpt.params_path(model, 'best')} (fine-tuning" in out and "vocabulary: ko" in out
    assert not (tmp_path / "run").exists()


def test_what_does_not_fit_is_a_clear_error(parent, tmp_path, capsys):
    model, other = parent
    damaged, intact, old = tmp_path / "damaged", tmp_path / "intact", tmp_path / "old"
    shutil.copytree(model, damaged)
    shutil.copytree(model, intact)
    shutil.copytree(model, old)   # as an earlier version wrote it: without manifests
    for m in old.glob("manifest.*.json"):
        m.unlink()
    step_file = list_params_files(model)[0]
    for name in (ckpt.PARAMS_BEST, step_file):
        with open(damaged / name, "r+b") as f:
            f.seek(-4, 2)
            f.write(b"\0\0\0\0")
    best = ckpt.params_path(model, "best")
    lost_best = tmp_path / "lost_best"   # its step's own copy kept: nmt-train has no --checkpoint, which it advised
    shutil.copytree(model, lost_best)
    (lost_best / ckpt.PARAMS_BEST).write_bytes(b"\0" * 100)
    best_file = ckpt.params_file(ckpt.best_step(model))
    pruned = tmp_path / "pruned"   # its best step's own copy gone as well (deleted: the run keeps that step)
    shutil.copytree(lost_best, pruned)
    (pruned / best_file).unlink()
    kept_file = ckpt.params_file(max(ckpt.params_step(p.name) for p in pruned.glob("params.0*")))
    tied = tmp_path / "tied.json"
    tied.write_text('{"model": {"tie_weights": true}}')
    null = tmp_path / "null"   # its config.json's model section null (a TypeError in the fine-tuning's settings)
    shutil.copytree(model, null)
    (null / ckpt.CONFIG).write_text(json.dumps({**json.loads((model / ckpt.CONFIG).read_text()), "model": None}))
    lost_best_file = shell_word(lost_best / best_file)   # (a command's word: quoted where needed)
    for flags, says in [
            (["--init-from", str(lost_best)], "is truncated: 100 bytes, its manifest says "),
            (["--init-from", str(lost_best)], f"; use --init-from {lost_best_file}, the same parameters"),
            (["--init-from", str(lost_best / ckpt.PARAMS_BEST)], f"; use --init-from {lost_best_file}, the "),
            (["--init-from", str(pruned)], f"was deleted (not by --keep-last: the run keeps that step), so the best "
                                           f"parameters are lost: use --init-from {shell_word(pruned / kept_file)} "
                                           "(a kept step), "
                                           "or train again"),
            (["--init-from", str(model), "--hidden-size", "32"],
             f"--hidden-size 32: --init-from {best} has model.hidden_size 48 ({model / ckpt.CONFIG}); a fine-tuning "
             "run keeps its model's settings, languages and vocabularies: drop --hidden-size"),
            (["--init-from", str(model), "--src", "en", "--tgt", "ko"], '--src "en": --init-from'),
            (["--init-from", str(model), "--heads", "4"],   # the model's architecture, not an --arch flag given
             f"--heads is an option of --arch transformer, not of the lstm model of --init-from {best} (model.arch in "
             f"{model / ckpt.CONFIG}), which would ignore it; the model flags a fine-tuning run of it may change: "
             "--dropout, --word-dropout\n"),
            (["--init-from", str(model), "--tie-weights"],   # (the untied model's "--no-tie-weights false" read
             f"--tie-weights (model.tie_weights true): --init-from {best} has model.tie_weights false"),   # as off)
            (["--init-from", str(model), "--config", str(tied)],   # a file's key: its value, and no flag to drop
             f"{tied}: model.tie_weights = true: --init-from {best} has model.tie_weights false"),
            (["--init-from", str(model), "--config", str(tied)], "vocabularies: remove model.tie_weights from " +
             str(tied)),
            (["--init-from", str(model), "--vocab-size", "300"], "--vocab-size 300: --init-from"),
            (["--init-from", str(null)], f"{null / ckpt.CONFIG}: section 'model' must be a JSON object, got null"),
            (["--init-from", str(model), "--resume"], "--init-from starts a new run from a trained model and --resume"),
            (["--init-from", str(tmp_path / "nothing")], "nothing: no such model directory or parameter file"),
            (["--init-from", str(tmp_path)], f"{tmp_path / ckpt.CONFIG} not found; give a model directory"),
            (["--init-from", str(model / ckpt.CONFIG)], "not a parameter file"),
            (["--init-from", str(model / ckpt.params_file(99))], "params.00000099: no such model directory or"),
            (["--init-from", str(damaged)], f"{damaged / ckpt.PARAMS_BEST}"),
            (["--init-from", str(damaged / step_file)], f"checkpoint {step_file} of {damaged} cannot be used"),
            (["--init-from", str(old)], f"{old} has no checkpoint manifests"),
            (["--init-from", str(old / ckpt.PARAMS_BEST), "--dry-run"], f"{old} has no checkpoint manifests"),
            (["--init-from", str(intact), "--model-dir", str(intact), "--overwrite"],
             f"--init-from {intact} is the --model-dir of this run")]:
        code = train_main(run_flags(other, tmp_path / "run") + flags)
        err = capsys.readouterr().err
        assert code == 2 and says in err and "Traceback" not in err, (flags, err)
        assert not (tmp_path / "run").exists()
    assert (intact / ckpt.PARAMS_BEST).read_bytes() == (model / ckpt.PARAMS_BEST).read_bytes()   # not overwritten


def test_a_transformer_is_fine_tuned_with_the_transformers_optimizer_defaults(tmp_path):
    """The command line fills in the default architecture's (the LSTM's) learning rate and warm-up; fine-tuning a
    Transformer kept them unless --arch transformer was given again: twice its peak rate, without a word."""
    from nmt.config import ARCH_DEFAULTS
    from nmt.finetune import for_init, init_config
    model = tmp_path / "tf"
    model.mkdir()
    Config.from_dict({"model": {"arch": "transformer"}}).save(model / ckpt.CONFIG)
    cfg = Config.from_dict({"train": {"model_dir": str(tmp_path / "run")}})
    assert cfg.optim.lr != ARCH_DEFAULTS["transformer"]["optim"]["lr"]
    tuned, theirs = init_config(cfg, {}, model / ckpt.PARAMS_BEST), ARCH_DEFAULTS["transformer"]["optim"]
    assert (tuned.model.arch, tuned.optim.lr, tuned.optim.warmup_steps) == ("transformer", theirs["lr"],
                                                                            theirs["warmup_steps"])
    cfg.optim.lr = 5e-5
    assert init_config(cfg, {"optim.lr": "--lr"}, model / ckpt.PARAMS_BEST).optim.lr == 5e-5   # given: kept
    # train(cfg, init=...) applies it again (finetune.for_init): the command line's --lr 5e-5 and --warmup-steps 50
    # over a Transformer were lost to its defaults there, and a Python config's LSTM dropouts were taken
    (model / ckpt.PARAMS_BEST).write_bytes(b"x")   # (verified by its manifest, not loaded)
    manifest.write_manifest(model, "best", [ckpt.PARAMS_BEST], 1)
    cli = init_config(cfg, {"optim.lr": "--lr", "optim.warmup_steps": "--warmup-steps"}, model / ckpt.PARAMS_BEST)
    cli.optim.warmup_steps = 50
    again, _ = for_init(cli, model)
    assert (again.optim.lr, again.optim.warmup_steps) == (5e-5, 50) and again.model == cli.model
    python, _ = for_init(Config.from_dict({"train": {"model_dir": str(tmp_path / "run")}}), model)
    assert (python.model.dropout, python.optim.lr) == (Config.for_arch("transformer").model.dropout, theirs["lr"])


def test_a_fine_tuned_runs_settings_as_config_say_they_hold_no_init_from(parent, tmp_path, capsys):
    """`--config child/config.json` of a fine-tuned run started from scratch without a word: config.json does not
    hold --init-from (state.json does), the most telling setting of such a run."""
    model, other = parent
    child = tmp_path / "child"
    assert train_main(run_flags(other, child) + ["--init-from", str(model), "--max-steps", "1"]) == 0
    says = f"that run was fine-tuned from {ckpt.params_path(model, 'best')}, which its settings do not hold"
    capsys.readouterr()
    for init in ([], ["--init-from", str(model)]):
        assert train_main(["--config", str(child / ckpt.CONFIG), "--model-dir", str(tmp_path / "new"), "--dry-run",
                           *init]) == 0
        err = capsys.readouterr().err
        assert (says in err) == (not init), err


def test_a_relative_init_from_is_recorded_absolute(parent, tmp_path, monkeypatch):
    """state.json kept --init-from as typed ("ex1/params.best") while config.json keeps paths absolute."""
    model, other = parent
    monkeypatch.chdir(model.parent)
    run = tmp_path / "rel"
    assert train_main(run_flags(other, run) + ["--init-from", model.name, "--max-steps", "1"]) == 0
    assert ckpt.TrainState.load(run).init_from == str(ckpt.params_path(model, "best"))
