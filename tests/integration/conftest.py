"""Fixtures of the service tests: one tiny trained ko->en model per session (the synthetic reverse task, with its
test score recorded in scores.json as training records it), its test sentences and its Translator."""
from __future__ import annotations

from pathlib import Path

import pytest

from nmt import checkpoint as ckpt

STEPS = 500


@pytest.fixture(scope="session")
def serve_model(tmp_path_factory) -> Path:
    """A tiny ko->en model directory with scores.json; trained once per session (~10 s on CPU)."""
    from nmt.train import train
    from tests.synth import write_task
    from tests.synth import tiny_config
    root = tmp_path_factory.getbasetemp() / "tiny-serve"
    model = root / "model"
    if not (model / ckpt.SCORES).exists():
        cfg = tiny_config(root, write_task(root / "synth"), "model", max_steps=STEPS, max_epochs=100)
        cfg.decode.beam_size = 4
        train(cfg, overwrite=True, evaluate=True)
    return model


@pytest.fixture(scope="session")
def serve_sentences(serve_model) -> list:
    """Korean test sentences of the model's synthetic task."""
    return (serve_model.parent / "synth" / "test.ko").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="session")
def translator(serve_model):
    from nmt.translate import Translator
    return Translator.from_dir(serve_model)
