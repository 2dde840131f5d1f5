"""--valid-metric's default by target language in runs that train: a run whose config.json records 13a BLEU (as every
en->ko run did before Korean output defaulted to ko-mecab BLEU) goes on by it when resumed, and a fine-tuning run
from it, en->ko by its model, takes ko-mecab. The defaults themselves: tests/unit/test_valid_metric.py."""
from __future__ import annotations

import json

import pytest

from nmt import checkpoint as ckpt
from nmt.cli import build_train_parser, train_main, training_run
from nmt.config import Config
from nmt.log import read_metrics
from tests.synth import task_files, tiny_flags, write_task


def en_ko(task: dict) -> dict:
    """The synthetic task's files the other way round: English-like sources, Korean targets."""
    return {f"{split}_{a}": task[f"{split}_{b}"] for split in ("train", "dev")
            for a, b in (("src", "tgt"), ("tgt", "src"))}


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("synth"), n_train=400)


@pytest.fixture(scope="module")
def bleu_run(task, tmp_path_factory):
    """A tiny en->ko run that chose by 13a BLEU, as one begun before the default followed the target language: its
    config.json says "bleu", as theirs do."""
    model_dir = tmp_path_factory.mktemp("old") / "enko"
    flags = tiny_flags(en_ko(task), model_dir) + ["--src", "en", "--tgt", "ko", "--valid-every", "3"]
    assert train_main(flags + ["--valid-metric", "bleu", "--max-steps", "6"]) == 0
    return model_dir


def test_a_run_recorded_with_bleu_goes_on_by_bleu_when_resumed(bleu_run, capsys):
    """By nmt-train --resume, train(resume=True) and create_trainer(cfg, resume=True), the metric unset in each: the
    last went on by ko-mecab BLEU (against a best score of 13a BLEU) and wrote null into config.json."""
    from nmt.train import create_trainer, train
    assert train_main(["--model-dir", str(bleu_run), "--resume", "--max-steps", "9"]) == 0   # no --valid-metric
    train(Config.from_dict({"data": {"src_lang": "en", "tgt_lang": "ko"},
                            "train": {"model_dir": str(bleu_run), "max_steps": 12, "progress": False}}),
          resume=True, evaluate=False)
    unset = Config.load(bleu_run / ckpt.CONFIG)   # the run's settings, the metric left unset, 3 steps more
    unset.train.valid_metric, unset.train.max_steps = None, 15
    trainer = create_trainer(unset, resume=True)
    try:
        assert trainer.cfg.valid_metric == "bleu"
        trainer.fit()
    finally:
        trainer.lock.release()
    assert json.loads((bleu_run / ckpt.CONFIG).read_text())["train"]["valid_metric"] == "bleu"
    rows = [r for r in read_metrics(bleu_run / ckpt.METRICS) if "dev_bleu" in r]
    assert [(r["step"], r.get("valid_metric")) for r in rows] == [(s, "bleu") for s in (3, 6, 9, 12, 15)]
    best = max(rows, key=lambda r: (r["dev_bleu"], -r["dev_ppl"]))
    state = ckpt.TrainState.load(bleu_run)
    assert (state.step, state.best_step, state.best_score) == (15, best["step"], best["dev_bleu"])
    assert f"best dev BLEU {best['dev_bleu']:.2f} at step" in capsys.readouterr().err


def test_a_run_that_recorded_null_keeps_it_resumed_by_create_trainer_naming_its_metric(task, tmp_path):
    """create_trainer(cfg, resume=True) with the metric a run's null stands for (ko-mecab, en->ko) went on by it but
    wrote "ko-mecab" into config.json, which then refused to serve as the --config of a ko->en run."""
    from nmt.train import create_trainer
    model_dir = tmp_path / "enko"
    flags = tiny_flags(en_ko(task), model_dir) + ["--src", "en", "--tgt", "ko", "--valid-every", "3"]
    assert train_main(flags + ["--max-steps", "3"]) == 0
    named = Config.load(model_dir / ckpt.CONFIG)
    named.train.valid_metric, named.train.max_steps = "ko-mecab", 6
    trainer = create_trainer(named, resume=True)
    try:
        trainer.fit()
    finally:
        trainer.lock.release()
    assert json.loads((model_dir / ckpt.CONFIG).read_text())["train"]["valid_metric"] is None
    rows = [r for r in read_metrics(model_dir / ckpt.METRICS) if "dev_bleu" in r]
    assert [(r["step"], r["valid_metric"]) for r in rows] == [(3, "ko-mecab"), (6, "ko-mecab")]


def test_a_fine_tuning_run_from_it_takes_the_korean_default(bleu_run, task, tmp_path, capsys):
    """The run takes its model's languages (en->ko; the command line's default is ko->en), and with them the default
    metric of Korean output, not the metric its model chose by; a --valid-metric given is kept."""
    from nmt.finetune import for_init
    files = task_files(en_ko(task), "train", "dev")
    flags = [*files, "--init-from", str(bleu_run), "--no-progress", "--max-steps", "2"]
    parse = build_train_parser().parse_args
    cfg, _, init = training_run(parse(flags + ["--model-dir", str(tmp_path / "ft")]))
    assert (cfg.data.tgt_lang, cfg.valid_metric, init) == ("ko", "ko-mecab", ckpt.params_path(bleu_run, "best"))
    python = Config.from_dict({"data": dict(zip(("train_src", "train_tgt", "dev_src", "dev_tgt"), files[1::2])),
                               "train": {"model_dir": str(tmp_path / "py")}})
    assert for_init(python, bleu_run)[0].valid_metric == "ko-mecab"
    assert train_main(flags + ["--model-dir", str(tmp_path / "dry"), "--dry-run"]) == 0
    assert "at each epoch end, by dev ko-mecab (beam 1)" in capsys.readouterr().out
    cfg, _, _ = training_run(parse(flags + ["--model-dir", str(tmp_path / "ft"), "--valid-metric", "chrf"]))
    assert cfg.train.valid_metric == "chrf"
