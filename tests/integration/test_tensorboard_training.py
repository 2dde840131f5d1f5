"""TensorBoard curves of real training runs on the synthetic task: what the loop logs, and a resumed run continuing
the same curves."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nmt import checkpoint as ckpt
from nmt.tensorboard import TENSORBOARD_DIR, tensorboard_problem
from nmt.train import create_trainer
from tests.synth import tiny_config, write_task
from tests.tb_events import read_tensorboard

pytestmark = pytest.mark.skipif(bool(tensorboard_problem()), reason="tensorboardX is not installed")
TRAIN_TAGS = ("train/loss", "train/nll", "train/learning_rate", "train/grad_norm", "train/tokens_per_s")


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("synth"))


def _same_curve(got, want, rel: float) -> bool:
    """The same steps, in order, and the same values to `rel`."""
    return [s for s, _ in got] == [s for s, _ in want] and [v for _, v in got] == pytest.approx([v for _, v in want],
                                                                                             rel=rel)


def _config(tmp_path, task, name, max_steps, **kw):
    return tiny_config(tmp_path, task, name, max_steps=max_steps, valid_every=4, log_every=2, tensorboard=True, **kw)


def test_training_logs_train_and_dev_curves_and_samples(tmp_path, task):
    cfg = _config(tmp_path, task, "full", 12)
    create_trainer(cfg).fit()
    model_dir = Path(cfg.train.model_dir)
    scalars, texts = read_tensorboard(model_dir / TENSORBOARD_DIR)
    for tag in TRAIN_TAGS:
        assert [s for s, _ in scalars[tag]] == [2, 4, 6, 8, 10, 12], tag
        assert all(math.isfinite(v) for _, v in scalars[tag]), tag
    assert all(v > 0 for _, v in scalars["train/tokens_per_s"] + scalars["train/grad_norm"])
    assert _same_curve(scalars["train/nll"], scalars["train/loss"], rel=1e-6)   # no label smoothing: the same loss
    rows = [json.loads(x) for x in (model_dir / ckpt.METRICS).read_text().splitlines()]
    for tag, key in (("dev/bleu", "dev_bleu"), ("dev/chrf", "dev_chrf"), ("dev/loss", "dev_nll"),
                     ("dev/perplexity", "dev_ppl")):
        assert _same_curve(scalars[tag], [(r["step"], r[key]) for r in rows], rel=1e-6), tag
    assert [s for s, _ in texts["dev/samples"]] == [r["step"] for r in rows] == [4, 8, 12]
    first_source = Path(task["dev_src"]).read_text(encoding="utf-8").splitlines()[0]
    assert first_source in texts["dev/samples"][-1][1]


def test_the_training_nll_is_logged_beside_the_label_smoothed_loss(tmp_path, task):
    """train/loss is the label-smoothed loss training minimizes, dev/loss the plain NLL: dev looked better than
    training. train/nll is the training loss to compare with dev/loss."""
    cfg = _config(tmp_path, task, "smoothed", 12)
    cfg.optim.label_smoothing = 0.2
    create_trainer(cfg).fit()
    scalars, _ = read_tensorboard(Path(cfg.train.model_dir) / TENSORBOARD_DIR)
    loss, nll = scalars["train/loss"], scalars["train/nll"]
    assert [s for s, _ in nll] == [s for s, _ in loss] == [2, 4, 6, 8, 10, 12]
    assert all(n < x for (_, n), (_, x) in zip(nll, loss)), (nll, loss)


def test_a_resumed_run_continues_the_same_curves(tmp_path, task):
    full = _config(tmp_path, task, "full", 12)
    create_trainer(full).fit()
    part = _config(tmp_path, task, "part", 8)   # stops at a validation, as the uninterrupted run validates there
    create_trainer(part).fit()
    part.train.max_steps = 12
    create_trainer(part, resume=True).fit()
    want, _ = read_tensorboard(Path(full.train.model_dir) / TENSORBOARD_DIR)
    got, texts = read_tensorboard(Path(part.train.model_dir) / TENSORBOARD_DIR)
    for tag in ("train/loss", "train/nll", "train/learning_rate", "train/grad_norm", "dev/bleu", "dev/loss"):
        # one point per step (no step written twice) and the values of the uninterrupted run (exact resume)
        assert _same_curve(got[tag], want[tag], rel=1e-5), tag
    assert [s for s, _ in texts["dev/samples"]] == [4, 8, 12]


def test_no_tensorboard_writes_nothing(tmp_path, task):
    cfg = tiny_config(tmp_path, task, "off", max_steps=2, tensorboard=False)
    create_trainer(cfg).fit()
    assert not (Path(cfg.train.model_dir) / TENSORBOARD_DIR).exists()
