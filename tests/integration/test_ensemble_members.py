"""Which models may decode together as an ensemble (`nmt.members`): each member once. A directory given twice (by
its path or a link), a copy of one or an export of its checkpoint hold the same parameters, which the ensemble's mean
would count twice: refused, naming both directories and the checkpoint, by every command that takes --ensemble and
by `Translator.from_dir`. A checkpoint that several members lack is named in the first member given."""
from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from nmt import checkpoint as ckpt
from nmt.cli_decode import evaluate_main, translate_main
from nmt.cli_score import score_main
from nmt.export import export_main
from nmt.serve.cli import main as serve_main
from nmt.translate import Translator
from tests.synth import list_params_files, synth_file, twin_of
from tests.synth import run_command as run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def every_command(model_dir: Path, flags: list) -> list:
    """(command, argv) of each command that takes --ensemble, with `flags` (--model-dir, --ensemble, ...)."""
    src, ref = synth_file(model_dir, "test.ko"), synth_file(model_dir, "test.en")
    return [(translate_main, flags + ["--input", src]),
            (evaluate_main, flags + ["--src-file", src, "--ref-file", ref, "--no-save"]),
            (score_main, flags + ["--src-file", src, "--tgt-file", ref]),
            (serve_main, flags + ["--port", free_port()])]


@pytest.fixture(scope="module")
def exported(model_dir, tmp_path_factory):
    """Exports of the tiny model's best checkpoint and of a kept step that is not the best."""
    root = tmp_path_factory.mktemp("exports")
    other = next(s for s in map(ckpt.params_step, list_params_files(model_dir)) if s != ckpt.best_step(model_dir))
    for name, which in (("best", "best"), ("other", str(other))):
        assert export_main(["--model-dir", str(model_dir), "--checkpoint", which, "--output", str(root / name)]) == 0
    return root / "best", root / "other", other


def test_an_export_or_a_copy_of_a_member_is_refused_by_every_command(model_dir, exported, tmp_path, capsys):
    """`--model-dir M --ensemble EXPORT_OF_M` (or a copy of M) was accepted: the same parameters counted twice in
    the mean, which the check of a directory given twice (by path) is there to prevent."""
    export, _, _ = exported
    copy = tmp_path / "copy"
    shutil.copytree(model_dir, copy)
    step = ckpt.best_step(model_dir)
    for member in (export, copy):
        for main, argv in every_command(model_dir, ["--model-dir", model_dir, "--ensemble", member]):
            code, _, err = run(main, argv, capsys)
            assert code == 2 and "Traceback" not in err, (main, err)
            line = err.strip().splitlines()[-1]
            assert line.startswith(f"error: {member}: given twice in the ensemble (the first time as {model_dir}, "
                                   "the same parameters, sha256 "), (main, err)
            assert line.endswith(f"a copy or an export): its checkpoint best (params.best, step {step}) is "
                                 f"{model_dir}'s (params.best, step {step}), which the ensemble's mean would count "
                                 "twice; give each model once"), (main, err)
    with pytest.raises(ckpt.CheckpointError, match=rf"^{copy}: given twice in the ensemble \(the first time as "
                                                   rf"{export}, the same parameters"):   # (the Python API)
        Translator.from_dir(export, ensemble=[copy])


def test_another_checkpoint_of_the_same_run_is_another_member(model_dir, exported, capsys):
    """An export of step N joins its run at --checkpoint best (other parameters), not at --checkpoint N (the same)."""
    _, old, step = exported
    tr = Translator.from_dir(model_dir, ensemble=[old])
    assert tr.params_step == ckpt.best_step(model_dir) and tr.member_steps == [step]
    said = (rf"^{old}: given twice in the ensemble \(the first time as {model_dir}, the same parameters, sha256 "
            rf"[0-9a-f]{{12}}: a copy or an export\): its checkpoint {step} \(params.best, step {step}\) is "
            rf"{model_dir}'s \(params.{step:08d}, step {step}\)")
    with pytest.raises(ckpt.CheckpointError, match=said):
        Translator.from_dir(model_dir, which=str(step), ensemble=[old])


def test_the_same_directory_is_named_with_its_checkpoint(model_dir, tmp_path):
    (tmp_path / "link").symlink_to(model_dir)
    step = ckpt.best_step(model_dir)
    with pytest.raises(ckpt.CheckpointError, match=rf"^{tmp_path / 'link'}: given twice in the ensemble \(the first "
                                                   rf"time as {model_dir}, the same directory\): its checkpoint best "
                                                   rf"\(params.best, step {step}\) is {model_dir}'s"):
        Translator.from_dir(model_dir, ensemble=[tmp_path / "link"])


def test_a_checkpoint_no_member_has_is_named_in_the_first_member(model_dir, tmp_path, capsys):
    """`--model-dir A --ensemble B --checkpoint 30`, neither with step 30: the error named B's missing step, as the
    copy check looked B up first; the members are looked up in the order given, --model-dir first."""
    twin = twin_of(model_dir, tmp_path / "twin")
    code, _, err = run(translate_main, ["--model-dir", model_dir, "--ensemble", twin, "--checkpoint", "30",
                                        "--input", synth_file(model_dir, "test.ko")], capsys)
    assert code == 2 and "Traceback" not in err, err
    assert f"error: {model_dir / 'params.00000030'} not found in model directory {model_dir}; the steps kept there" \
        in err and str(twin) not in err, err
    with pytest.raises(ckpt.CheckpointError, match=rf"^{twin / 'params.00000030'} not found"):
        Translator.from_dir(twin, which="30", ensemble=[model_dir])
