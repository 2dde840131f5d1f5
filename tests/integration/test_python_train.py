"""`nmt.train.train` called from Python as nmt-train runs its flags: a Config's values set by hand taken as
`Config.from_dict` takes them, a resume given only the changes, a copied model directory's config.json naming the
copy, and the settings the architecture does not read refused ($NMT_DATA_DIR recorded: tests/system)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from nmt import checkpoint as ckpt
from nmt.config import Config, ConfigError
from nmt.train import create_trainer, train
from tests.synth import as_trained_with_its_config, tiny_config, write_task


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("synth"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, task):
    """A tiny run stopped at step 4, to resume (copy it first)."""
    root = tmp_path_factory.mktemp("trained")
    train(tiny_config(root, task, max_steps=4), evaluate=False)
    return root / "model"


def test_values_set_by_hand_are_taken_as_from_dict_takes_them(tmp_path, task, monkeypatch):
    """A "~" made a directory named "~" in the working directory (from_dict and --model-dir expand it), a relative
    corpus path was saved relative (a resume from elsewhere did not find it), and numpy's numbers (a sweep over
    np.arange) ended in "Object of type int64 is not JSON serializable"."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    shutil.copy(task["train_src"], tmp_path / "sub" / "t.src")
    cfg = tiny_config(tmp_path, task)
    cfg.train.model_dir, cfg.data.train_src = "~/run", "sub/t.src"
    cfg.train.max_steps, cfg.optim.lr = np.arange(2, 4)[0], np.float32(0.005)
    cfg.model.lexical_model = np.array([True, False])[0]   # (a numpy boolean: "must be true or false, got True")
    train(cfg, evaluate=False)
    assert not (tmp_path / "~").exists()
    saved = json.loads((tmp_path / "home" / "run" / ckpt.CONFIG).read_text())
    assert saved["train"]["model_dir"] == str(tmp_path / "home" / "run")
    assert saved["data"]["train_src"] == str(tmp_path / "sub" / "t.src")
    assert saved["train"]["max_steps"] == 2 and saved["optim"]["lr"] == pytest.approx(0.005)


@pytest.mark.parametrize("section", ["model", "data"])
def test_a_section_that_is_no_config_is_named(tmp_path, task, section):
    cfg = tiny_config(tmp_path, task)
    setattr(cfg, section, {"hidden_size": 32} if section == "model" else None)
    kind = "ModelConfig, got dict" if section == "model" else "DataConfig, got NoneType"
    with pytest.raises(TypeError, match=rf"^train: cfg.{section} must be a {kind}$"):
        train(cfg)


def test_a_setting_the_architecture_does_not_read_is_refused(tmp_path, task):
    """A Transformer's config with hidden_size 512 and num_layers 4 trained without a word, and its config.json
    then failed `nmt-train --config` ("model.hidden_size 512 is a setting of --arch lstm")."""
    cfg = tiny_config(tmp_path, task, arch="transformer", max_steps=1)
    cfg.model.hidden_size = 512
    with pytest.raises(ConfigError, match=r"^train: cfg model.hidden_size 512 is a setting of --arch lstm, not of "
                                          r"--arch transformer, which would ignore it: leave it at its default \(256\)"):
        train(cfg)
    assert not (tmp_path / "model").exists()
    lstm = tiny_config(tmp_path, task, max_steps=1)
    lstm.model.heads = 4
    with pytest.raises(ConfigError, match=r"model.heads 4 is a setting of --arch transformer, not of --arch lstm"):
        train(lstm)


def test_a_resume_given_only_its_changes_continues_the_run(tmp_path, trained):
    """train(Config.from_dict({"train": {"model_dir": ..., "max_steps": 8}}), resume=True) blamed the keys it never
    gave: "model.embed_size = 256 differs from 32, which this run was trained with ... drop it"."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    result = train(Config.from_dict({"train": {"model_dir": str(run), "max_steps": 8}}), resume=True, evaluate=False)
    assert result.state.step == 8
    saved = Config.load(run / ckpt.CONFIG)
    assert saved.model == Config.load(trained / ckpt.CONFIG).model and saved.train.max_steps == 8
    with pytest.raises(ConfigError, match=r"^--resume: model.embed_size = 24 differs from 32, which this run was "
                                          r"trained with"):   # a key it gives is still compared
        train(Config.from_dict({"model": {"embed_size": 24}, "train": {"model_dir": str(run)}}), resume=True)


def test_a_copied_model_directorys_config_names_the_copy(tmp_path, trained):
    """Config.load of a copy's config.json named the original's directory (config.json records it absolute), so
    `train(Config.load("backup/config.json"), resume=True)` trained the original, replacing its checkpoints."""
    original, backup = tmp_path / "original", tmp_path / "backup"
    shutil.copytree(trained, original)
    shutil.copytree(original, backup)
    cfg = Config.load(backup / ckpt.CONFIG)
    assert Path(cfg.train.model_dir) == backup
    cfg.train.max_steps = 6
    train(cfg, resume=True, evaluate=False)
    assert ckpt.TrainState.load(backup).step == 6 and ckpt.TrainState.load(original).step == 4


def test_create_trainer_works_in_the_directory_it_locks(tmp_path, task, monkeypatch):
    """create_trainer checked a rebuilt Config but built the run from the caller's: "~/run" was locked in
    $HOME/run and written in ./~/run, and numpy numbers failed as "int64 is not JSON serializable"."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    cfg = tiny_config(tmp_path, task)
    cfg.train.model_dir, cfg.train.max_steps = "~/run", np.int64(2)
    create_trainer(cfg).fit()
    assert not (tmp_path / "~").exists() and ckpt.TrainState.load(tmp_path / "home" / "run").step == 2


def test_create_trainer_refuses_unread_settings_and_drops_the_recipe_for_files(tmp_path, task):
    """create_trainer, called alone, took a Transformer's hidden_size 64 (config.json saved it), and a run on its
    own files recorded the default recipe beside them: nmt-evaluate --recipe-tests then scored Tatoeba as its test."""
    cfg = tiny_config(tmp_path, task, arch="transformer", max_steps=1)
    cfg.model.hidden_size = 64
    with pytest.raises(ConfigError, match=r"^create_trainer: cfg model.hidden_size 64 is a setting of --arch lstm"):
        create_trainer(cfg)
    files = Config.from_dict({"data": {k: v for k, v in task.items() if k.startswith(("train_", "dev_"))},
                              "model": {"embed_size": 8, "hidden_size": 8, "num_layers": 1},
                              "train": {"model_dir": str(tmp_path / "f"), "max_steps": 1, "progress": False}})
    assert files.data.recipe == "tatoeba"
    create_trainer(files).fit()
    assert Config.load(tmp_path / "f" / ckpt.CONFIG).data.recipe is None


def test_a_run_whose_config_holds_an_unread_setting_resumes(tmp_path, trained):
    """A new run from Python refuses a setting its architecture does not read; a run saved with one before (its
    config.json) was refused as it resumed, from Python and from nmt-train alike: it resumes as it was."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    config = json.loads((run / ckpt.CONFIG).read_text())
    config["model"]["heads"] = 4   # (an LSTM run: a Transformer's setting, never read)
    (run / ckpt.CONFIG).write_text(json.dumps(config))
    as_trained_with_its_config(run)
    cfg = Config.load(run / ckpt.CONFIG)
    cfg.train.max_steps = 6
    assert train(cfg, resume=True, evaluate=False).state.step == 6
    from nmt.cli import build_train_parser, training_run
    from nmt.train import run_training
    again, _, _ = training_run(build_train_parser().parse_args(["--model-dir", str(run), "--resume", "--max-steps", "8"]))
    assert run_training(again, resume=True, evaluate=False).state.step == 8   # (nmt-train's road)


def test_a_run_on_its_own_files_ignores_nmt_data_dir(tmp_path, task, monkeypatch):
    """$NMT_DATA_DIR, recorded for a recipe's run, was read before the files replaced the default recipe: a stale
    one stopped a run on its own files ("NMT_DATA_DIR ...: no such directory"), a valid one was recorded."""
    monkeypatch.setenv("NMT_DATA_DIR", str(tmp_path / "nowhere"))
    cfg = Config.from_dict({"data": {k: v for k, v in task.items() if k.startswith(("train_", "dev_"))},
                            "model": {"embed_size": 8, "hidden_size": 8, "num_layers": 1},
                            "train": {"model_dir": str(tmp_path / "m"), "max_steps": 1, "progress": False}})
    train(cfg, evaluate=False)
    assert Config.load(tmp_path / "m" / ckpt.CONFIG).data.data_dir is None


def test_a_python_resume_names_the_other_kind_of_batch(tmp_path, trained):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    with pytest.raises(ConfigError, match=r"^--resume: data.batch_tokens = 500 asks for batches of tokens, and this "
                                          r"run was trained with --batch-size 16 .*drop data.batch_tokens, or train"):
        train(Config.from_dict({"data": {"batch_tokens": 500}, "train": {"model_dir": str(run)}}), resume=True)
