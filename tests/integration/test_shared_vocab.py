"""`--shared-vocab` end to end on the tiny synthetic task: one SentencePiece model of both languages in the model
directory, used as source and target tokenizer, loaded by `Translator.from_dir` from the directory alone, and the
Transformer's three-way tie (source embedding = target embedding = output layer) active."""
from __future__ import annotations

import shutil
from pathlib import Path

from nmt import checkpoint as ckpt
from nmt.config import Config
from nmt.tokenizer import JOINT, tokenizer_path
from nmt.train import create_trainer
from nmt.translate import Translator
from tests.synth import params_of, tiny_config, write_task


def test_one_joint_model_serves_both_sides_ties_three_ways_and_is_all_from_dir_needs(tmp_path):
    cfg = tiny_config(tmp_path, write_task(tmp_path / "synth"), "shared", "transformer", max_steps=4, valid_every=2)
    cfg.model.shared_vocab, cfg.model.tie_weights = True, True
    trainer = create_trainer(cfg)
    trainer.fit()
    d = Path(cfg.train.model_dir)
    assert sorted(p.name for p in d.glob("spm.*")) == ["spm.joint.model", "spm.joint.vocab"]
    src_tok, tgt_tok = trainer.data.src_tok, trainer.data.tgt_tok
    assert (src_tok.lang, tgt_tok.lang) == ("ko", "en") and src_tok.path == tgt_tok.path == tokenizer_path(d, JOINT)
    assert src_tok.vocab_size == tgt_tok.vocab_size == 400   # --vocab-size is the joint vocabulary's size
    # both languages' text is segmented by the one model: Korean and Latin pieces share one id space
    assert src_tok.encode(["가나"]) == tgt_tok.encode(["가나"]) and src_tok.encode(["ga"]) == tgt_tok.encode(["ga"])
    # three-way tie: one embedding matrix is source embedding, target embedding and output layer
    assert trainer.net.shares_source_embedding
    assert [k for k in params_of(d) if "embed" in k or "out_weight" in k] == ["tgt_embed_weight"]
    # the model directory alone: a copy of it translates, with the languages (not the file's name) for scoring
    copy = tmp_path / "copied"
    shutil.copytree(d, copy)
    tr = Translator.from_dir(copy)
    assert tr.src_tok.path.name == tr.tgt_tok.path.name == "spm.joint.model"
    assert (tr.src_lang, tr.tgt_lang) == ("ko", "en")
    out = tr.translate(["가 나", "", "다"])
    assert len(out) == 3 and out[1] == ""
    # and a resume reloads the joint model
    cfg.train.max_steps = 6
    state = create_trainer(cfg, resume=True).fit()
    assert state.step == 6 and Config.load(d / ckpt.CONFIG).model.shared_vocab


def test_fine_tuning_takes_the_joint_model_along(tmp_path, capsys):
    from nmt.cli import train_main
    from tests.synth import task_files
    cfg = tiny_config(tmp_path, write_task(tmp_path / "synth"), "shared", "transformer", max_steps=2)
    cfg.model.shared_vocab, cfg.model.tie_weights = True, True
    create_trainer(cfg).fit()
    other, run = write_task(tmp_path / "other", n_train=300, seed=11), tmp_path / "run"
    assert train_main([*task_files(other, "train", "dev"), "--init-from", cfg.train.model_dir, "--model-dir", str(run),
                       "--max-steps", "1", "--no-progress", "--no-eval"]) == 0
    assert sorted(p.name for p in run.glob("spm.*")) == ["spm.joint.model", "spm.joint.vocab"]
    assert (run / "spm.joint.model").read_bytes() == (Path(cfg.train.model_dir) / "spm.joint.model").read_bytes()
    assert Config.load(run / ckpt.CONFIG).model == cfg.model and Translator.from_dir(run).translate(["가 나"])
    capsys.readouterr()
    assert train_main([*task_files(other, "train", "dev"), "--init-from", cfg.train.model_dir, "--model-dir",
                       str(tmp_path / "dry"), "--dry-run"]) == 0   # one vocabulary, said once ("ko 400, en 400" before)
    assert f"vocabulary: ko+en (shared) {Translator.from_dir(run).src_tok.vocab_size}\n" in capsys.readouterr().out
