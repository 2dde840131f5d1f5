"""nmt-translate and nmt-evaluate on a model directory whose best or latest checkpoint is damaged: exit 2 with the
file and what is wrong, no traceback; an intact directory translates."""
from __future__ import annotations

import pytest

from nmt import checkpoint as ckpt
from nmt.cli_decode import evaluate_main, translate_main
from nmt.train import train
from tests.synth import tiny_config, write_task


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("verified")
    task = write_task(root / "task", n_train=300)
    cfg = tiny_config(root, task, max_steps=4, valid_every=2, keep_last=2)
    train(cfg, evaluate=False)
    return cfg.train.model_dir, task


@pytest.mark.parametrize("which, name", [("best", ckpt.PARAMS_BEST), ("latest", ckpt.params_file(4))])
def test_translate_and_evaluate_name_the_damaged_file(model, tmp_path, capsys, which, name):
    model_dir, task = model
    path = f"{model_dir}/{name}"
    good = open(path, "rb").read()
    out = tmp_path / "out.en"
    assert translate_main(["--model-dir", model_dir, "--checkpoint", which, "--input", task["test_src"],
                           "--output", str(out)]) == 0
    try:
        open(path, "wb").write(good[:-10])
        assert translate_main(["--model-dir", model_dir, "--checkpoint", which, "--input", task["test_src"],
                               "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{name} is truncated: {len(good) - 10} bytes, its manifest says {len(good)}" in err, err
        assert "Traceback" not in err
        assert evaluate_main(["--model-dir", model_dir, "--checkpoint", which, "--src-file", task["test_src"],
                              "--ref-file", task["test_tgt"], "--no-save"]) == 2
        assert f"{name} is truncated" in capsys.readouterr().err
    finally:
        open(path, "wb").write(good)


@pytest.mark.parametrize("damage", ["params.best", "scores.json", "missing"])
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_resume_names_a_damaged_best_or_scores_file_before_training(model, tmp_path, capsys, damage, dry_run):
    """Found only at the end of the resumed run (after its training) by the test scoring; the dry run called the
    directory valid."""
    import shutil
    from nmt.cli import train_main
    d = tmp_path / "m"
    shutil.copytree(model[0], d)
    if damage == "missing":   # its manifest says there was one
        (d / "params.best").unlink()
    elif damage == "params.best":
        (d / damage).write_bytes((d / damage).read_bytes()[:1000])
    else:
        (d / damage).write_text("{ not json")
    steps = ckpt.TrainState.load(d).step
    code = train_main(["--model-dir", str(d), "--resume", "--max-steps", str(steps + 2), "--no-progress",
                       "--valid-every", "1000", *(["--dry-run"] if dry_run else [])])
    err = capsys.readouterr().err
    if damage == "scores.json":   # where the test scores go: refused before training
        assert code == 2 and "scores.json is not valid JSON" in err and ckpt.TrainState.load(d).step == steps, err
    else:   # also what a kill while saving a new best leaves (the resume saves it again): a warning first
        said = "params.best is truncated" if damage == "params.best" else "params.best is missing"
        again = "the run will write it again from params." if dry_run else "written again from params."
        assert code == 0 and said in err and again in err and "the same parameters" in err or dry_run, err
        assert dry_run or err.index(said) < err.index("resumed from step"), err
        if dry_run:   # (it writes nothing)
            assert not (d / "params.best").exists() if damage == "missing" else \
                (d / "params.best").stat().st_size == 1000
        else:
            ckpt.verify_params(d / "params.best")
