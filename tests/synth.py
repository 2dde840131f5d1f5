"""Tiny synthetic Korean->English task for integration tests: no downloads, fixed seed.

Source sentences are 2-6 Korean "words" of one or two syllables; the target is their romanization
(가 -> ga, 초 -> cho, ...) with the word order reversed. The words cover the subword vocabulary (a real
corpus does too), and a small model learns the task to high accuracy in well under a minute on CPU.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from nmt import checkpoint as ckpt
from nmt.config import Config, DataConfig, ModelConfig, OptimConfig, TrainConfig

_ONSETS = [("ㄱ", "g"), ("ㄴ", "n"), ("ㄷ", "d"), ("ㄹ", "r"), ("ㅁ", "m"), ("ㅂ", "b"), ("ㅅ", "s"), ("ㅈ", "j"),
           ("ㅊ", "ch"), ("ㅋ", "k"), ("ㅌ", "t"), ("ㅍ", "p"), ("ㅎ", "h")]
_VOWELS = [(0, "a"), (8, "o"), (13, "u"), (20, "i")]   # ㅏ ㅗ ㅜ ㅣ as jamo indices
_CHOSEONG = "ㄱㄲㄴㄷㄸㄹㅁㅂㅃㅅㅆㅇㅈㅉㅊㅋㅌㅍㅎ"


def syllables() -> List[Tuple[str, str]]:
    """(Hangul syllable, romanization) pairs, composed arithmetically from jamo."""
    out = []
    for onset, rom_c in _ONSETS:
        for v, rom_v in _VOWELS:
            code = 0xAC00 + (_CHOSEONG.index(onset) * 21 + v) * 28
            out.append((chr(code), rom_c + rom_v))
    return out


def make_pairs(n: int, seed: int, min_len: int = 2, max_len: int = 6, reverse: bool = True) -> List[Tuple[str, str]]:
    rng = random.Random(seed)
    syl = syllables()
    pairs = []
    for _ in range(n):
        words = []
        for _ in range(rng.randint(min_len, max_len)):
            parts = [rng.choice(syl) for _ in range(rng.randint(1, 2))]
            words.append(("".join(k for k, _ in parts), "".join(r for _, r in parts)))
        tgt = [r for _, r in (reversed(words) if reverse else words)]
        pairs.append((" ".join(k for k, _ in words), " ".join(tgt)))
    return pairs


def write_task(root: Path, n_train: int = 1200, n_dev: int = 40, n_test: int = 40, seed: int = 7,
               reverse: bool = True) -> Dict[str, str]:
    """Write train/dev/test .ko/.en files under `root`; returns the DataConfig fields pointing at them."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, n, s in (("train", n_train, seed), ("dev", n_dev, seed + 1), ("test", n_test, seed + 2)):
        pairs = make_pairs(n, s, reverse=reverse)
        for side, lang, col in (("src", "ko", 0), ("tgt", "en", 1)):
            path = root / f"{split}.{lang}"
            path.write_text("".join(p[col] + "\n" for p in pairs), encoding="utf-8")
            files[f"{split}_{side}"] = str(path)
    return files


# -- the trainer's tiny configuration and parameter comparisons, shared by the integration tests -----------
ARCHS = ("lstm", "transformer")


def tiny_model_config(arch: str = "lstm") -> ModelConfig:
    """A model of `arch` small enough for the integration tests, without dropout (runs are comparable)."""
    if arch not in ARCHS:   # a new architecture's tests would otherwise train an LSTM
        raise ValueError(f"no tiny {arch!r} model: add one here, its optimizer to tiny_config, and its task to TASK_OF "
                         "in tests/integration/test_train.py (docs/architecture.md)")
    if arch == "transformer":
        return ModelConfig(arch="transformer", encoder_layers=1, decoder_layers=1, model_size=64, ff_size=128, heads=4,
                           dropout=0.0, word_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                           tie_weights=False)
    return ModelConfig(embed_size=32, hidden_size=48, num_layers=1, dropout=0.0, word_dropout=0.0, attention="dot",
                       tie_weights=False)


def tiny_config(tmp_path: Path, files: dict, name: str = "model", arch: str = "lstm", **train_kw) -> Config:
    data = DataConfig(recipe=None, vocab_size=400, batch_size=16, num_buckets=3, **files)
    # The Transformer learns the task fastest with a decaying rate (a constant one leaves it hovering; measured on
    # the copy task: dev BLEU 89 after 608 updates at 3e-3, inverse square root after 100, against 76 at 700 with a
    # constant 5e-3 at width 32).
    optim = (OptimConfig(lr=3e-3, warmup_steps=100, schedule="inv_sqrt", label_smoothing=0.0) if arch == "transformer"
             else OptimConfig(lr=5e-3, warmup_steps=20, schedule="constant", label_smoothing=0.0))
    t = dict(model_dir=str(tmp_path / name), max_epochs=200, valid_every=0, seed=3, progress=False,
             valid_max_sentences=40, patience=0)
    t.update(train_kw)
    return Config(data=data, model=tiny_model_config(arch), optim=optim, train=TrainConfig(**t))


def task_files(task: dict, *splits: str) -> list:
    """The command line's flags of a task's files (`write_task`): --train-src FILE --train-tgt FILE ..."""
    return [x for s in splits for side in ("src", "tgt") for x in (f"--{s}-{side}", task[f"{s}_{side}"])]


def tiny_flags(task: dict, model_dir) -> list:
    """The tiny task's run as flags: model, data and optimizer all off their defaults, so that a resume (or a
    fine-tuning run) that did not take them from the run would train another model on other batches."""
    return [*task_files(task, "train", "dev"), "--model-dir", str(model_dir), "--vocab-size", "400", "--embed-size",
            "16", "--hidden-size", "16", "--num-layers", "1", "--dropout", "0", "--word-dropout", "0", "--batch-size",
            "8", "--lr", "0.005", "--valid-every", "0", "--no-progress", "--no-eval", "--seed", "5"]


def load_params(model_dir, which: str = "latest") -> dict:
    """The parameters of a checkpoint (`which` as `nmt.checkpoint.params_path` takes it): name -> NDArray."""
    import mxnet as mx
    return mx.nd.load(str(ckpt.params_path(Path(model_dir), which)))


def list_params_files(model_dir) -> List[str]:
    """The params.<step> files of a model directory, oldest first."""
    return sorted(p.name for p in Path(model_dir).glob("params.*") if ckpt.params_step(p.name) is not None)


def params_of(model_dir) -> dict:
    return {k: v.asnumpy() for k, v in load_params(model_dir, "latest").items()}


def assert_same_params(a: dict, b: dict, rtol=1e-5, atol=1e-6):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


TINY_MODEL_STEPS = 600


def tiny_model(tmp_path_factory) -> Path:
    """A tiny ko->en model of the synthetic reverse task, trained once per test session (~12 s) and shared by
    test_translate, test_evaluate and test_notebooks. Its directory also holds the task files under synth/."""
    from nmt.train import train
    root = tmp_path_factory.getbasetemp() / "tiny-translate"
    model = root / "model"
    done = (model / ckpt.STATE).exists() and ckpt.TrainState.load(model).stopped == "max_steps"
    if not done:
        files = write_task(root / "synth")
        cfg = tiny_config(root, files, "model", max_steps=TINY_MODEL_STEPS, max_epochs=100)
        train(cfg, overwrite=True, evaluate=False)
    return model


def as_trained_with_its_config(model_dir: Path) -> None:
    """Write every checkpoint manifest of `model_dir` again, as if its checkpoints had been saved with its current
    config.json (edited by a test into a variant run, which the manifests' model settings would refuse)."""
    import json
    from nmt import manifest
    for path in Path(model_dir).glob("manifest.*.json"):
        body = json.loads(path.read_text())
        key = path.name[len("manifest."):-len(".json")]
        names = [n for n in body["files"] if not n.startswith("spm.")]
        manifest.write_manifest(Path(model_dir), key, names, body["step"], body.get("state"))


def twin_of(model_dir: Path, twin: Path) -> Path:
    """A copy of `model_dir` at `twin` whose every parameter file differs in one value by one float32 step: an
    ensemble member that decodes as the original does, which the ensemble's check of a model given twice (the same
    parameters' sha256, as a plain copy's) lets join the original."""
    import shutil
    import mxnet as mx
    import numpy as np
    shutil.copytree(model_dir, twin)
    for path in Path(twin).glob("params.*"):
        arrays = mx.nd.load(str(path))
        name = sorted(arrays)[0]
        values = arrays[name].asnumpy()
        values.flat[0] = np.nextafter(values.flat[0], np.float32(np.inf))
        arrays[name] = mx.nd.array(values, dtype=values.dtype)
        path.unlink()   # (a new file: never a hard link's other name written through)
        mx.nd.save(str(path), arrays)
    as_trained_with_its_config(twin)
    return twin


def run_command(main, argv, capsys):
    """Exit code, stdout and stderr of a command's main on `argv` (argparse's errors exit with 2, as on the command
    line)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def synth_file(model: Path, name: str) -> Path:
    return model.parent / "synth" / name


def non_canonical_split(tok):
    """(pieces, the text they write) of a word split into two pieces of the vocabulary that SentencePiece, splitting
    the text, would write as one: what a search may write."""
    vocab = {tok.piece(i) for i in range(tok.vocab_size)}
    for whole in sorted(vocab):
        for k in range(2, len(whole)):
            if whole.startswith("\u2581") and {whole[:k], whole[k:]} <= vocab:
                return [whole[:k], whole[k:]], whole[1:]
    raise AssertionError("the vocabulary has no piece whose split is in it")


def damaged(data: bytes, at: int = 100) -> bytes:
    """Compressed `data` with 60 bytes from `at` inverted: bad deflate data in a gzip file ("invalid distance too far
    back", a zlib.error)."""
    return data[:at] + bytes(x ^ 0xFF for x in data[at:at + 60]) + data[at + 60:]
