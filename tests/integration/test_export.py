"""`nmt-export` on the tiny trained model: the exported directory holds only what translating needs, translates as
the checkpoint it came from, carries that checkpoint's scores and step, and is refused where it would destroy
something."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nmt import checkpoint as ckpt
from nmt.cli import train_main
from nmt.cli_decode import evaluate_main, translate_main
from nmt.export import EXPORT, export_main
from nmt.finetune import init_params
from nmt.scoring import read_scores, record_scores
from nmt.translate import Translator
from tests.synth import as_trained_with_its_config, list_params_files, synth_file, twin_of
from tests.synth import run_command as run

REPO = Path(__file__).resolve().parents[2]


def q(path) -> str:
    """`path` as one word of a shell command line, as nmt's advice gives it (a checkout or $TMPDIR with a space)."""
    return shlex.quote(str(path))


@pytest.fixture
def model_copy(model_dir, tmp_path):
    """The tiny model with test scores recorded for its best and its first kept step (a copy: scores are added)."""
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    for which, bleu in (("best", 11.0), (str(ckpt.params_step(list_params_files(copy)[0])), 7.0)):
        record_scores(copy, "test", which, {"bleu": bleu, "chrf": 30.0, "checkpoint": which, "n": 3,
                                            "params_file": "x"})
    return copy


def test_the_export_holds_what_translating_needs_and_translates_the_same(model_dir, model_copy, tmp_path, capsys):
    out = tmp_path / "release" / "tiny"
    code, printed, err = run(export_main, ["--model-dir", model_copy, "--output", out], capsys)
    assert code == 0, err
    assert printed.startswith(f"exported checkpoint best of {model_copy} to {out} (")
    spm = sorted(p.name for p in model_copy.glob("spm.*"))
    assert sorted(p.name for p in out.iterdir()) == sorted(["config.json", "params.best", "manifest.best.json",
                                                            "scores.json", EXPORT, *spm])
    assert (out / "params.best").read_bytes() == (model_copy / "params.best").read_bytes()
    lines = synth_file(model_dir, "test.ko").read_text(encoding="utf-8").splitlines()[:20]
    a, b = Translator.from_dir(model_copy), Translator.from_dir(out)
    assert b.translate_nbest(lines, 3, beam_size=3) == a.translate_nbest(lines, 3, beam_size=3)
    best_step = ckpt.TrainState.load(model_copy).best_step
    made = json.loads((out / EXPORT).read_text())
    assert made["model_dir"] == str(model_copy.resolve()) and made["checkpoint"] == "best"
    assert made["step"] == best_step and made["params_file"] == "params.best"
    assert read_scores(out) == {"test": {"best": {**read_scores(model_copy)["test"]["best"],
                                                  "params_file": "params.best"}}}
    assert init_params(out) == out / "params.best"   # --init-from takes it
    from nmt.shown_score import model_test_score
    assert model_test_score(out, "best")["bleu"] == 11.0   # what nmt-serve's /info shows
    code, printed, err = run(evaluate_main, ["--model-dir", out, "--src-file", synth_file(model_dir, "test.ko"),
                                             "--ref-file", synth_file(model_dir, "test.en"), "--beam-size", "1",
                                             "--no-save"], capsys)
    assert code == 0 and f"checkpoint best (params.best, step {best_step})" in printed, err
    assert train_main(["--model-dir", str(out), "--resume", "--no-progress"]) == 2
    assert f"error: --model-dir {out} is an export (nmt-export: one checkpoint, no training state; its export.json " \
           f"names the directory it came from): resume that directory, or fine-tune from this one into a new " \
           f"directory with --init-from {q(out)}" in capsys.readouterr().err


def test_a_step_is_exported_as_the_best_of_the_export_with_its_scores(model_copy, tmp_path, capsys):
    first = list_params_files(model_copy)[0]
    step = ckpt.params_step(first)
    out = tmp_path / "step"
    assert run(export_main, ["--model-dir", model_copy, "--checkpoint", step, "--output", out], capsys)[0] == 0
    assert (out / "params.best").read_bytes() == (model_copy / first).read_bytes()
    assert json.loads((out / "manifest.best.json").read_text())["step"] == step
    assert read_scores(out)["test"]["best"]["bleu"] == 7.0 and read_scores(out)["test"]["best"]["checkpoint"] == "best"


def test_latest_and_the_best_named_by_its_step_carry_their_scores(model_copy, tmp_path, capsys):
    """Scores are recorded under a step's number (latest is its step) and the best's under best: the export looked
    for the key "latest" (none), and for the best's step only under its number."""
    latest = ckpt.params_step(list_params_files(model_copy)[-1])
    record_scores(model_copy, "test", str(latest), {"bleu": 9.0, "checkpoint": str(latest), "params_file": "x"})
    assert run(export_main, ["--model-dir", model_copy, "--checkpoint", "latest", "--output", tmp_path / "l"],
               capsys)[0] == 0
    assert read_scores(tmp_path / "l")["test"]["best"]["bleu"] == 9.0
    best, scores = ckpt.best_step(model_copy), read_scores(model_copy)
    del scores["test"][str(best)]   # the best's scores only as best's
    (model_copy / ckpt.SCORES).write_text(json.dumps(scores))
    assert run(export_main, ["--model-dir", model_copy, "--checkpoint", best, "--output", tmp_path / "b"],
               capsys)[0] == 0
    assert read_scores(tmp_path / "b")["test"]["best"]["bleu"] == 11.0


def test_a_copy_holding_only_the_best_checkpoint_says_so(model_copy, tmp_path, capsys):
    """An export without its export.json (or a copy made to translate: config, SentencePiece, params.best and its
    manifest) asked for its latest checkpoint was "no intact checkpoint (no checkpoint manifest); restore the files
    from a backup or start a new run with --overwrite", advice that fits neither."""
    out = tmp_path / "out"
    assert run(export_main, ["--model-dir", model_copy, "--output", out], capsys)[0] == 0
    (out / EXPORT).unlink()
    (tmp_path / "in.ko").write_text("리 니\n", encoding="utf-8")
    code, _, err = run(translate_main, ["--model-dir", out, "--checkpoint", "latest", "--input", tmp_path / "in.ko"],
                       capsys)
    assert code == 2 and f"error: {out} holds no step checkpoint, only its best one: use --checkpoint best; " \
        f"training cannot resume from it (--init-from {q(out)} fine-tunes it in a new run)" in err, err
    code, _, err = run(train_main, ["--model-dir", out, "--resume", "--dry-run"], capsys)   # (said: start anew)
    assert code == 2 and f"; --init-from {q(out)} fine-tunes its params.best in a new run)" in err, err


def test_an_export_into_a_read_only_directory_is_one_line(model_copy, tmp_path, capsys, monkeypatch):
    def read_only(self, *args, **kwargs):
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(Path, "mkdir", read_only)
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", model_copy.parent / "rel"], capsys)
    assert code == 2 and f"cannot write in its directory {model_copy.parent} (Read-only file system)" in err, err


def test_an_export_into_the_current_directory_or_a_mount_point_is_one_line(model_copy, tmp_path, capsys,
                                                                            monkeypatch):
    """`cd release && nmt-export --output .` assembled the copy inside the output itself (Path(".").parent is ".")
    and ended in a traceback (EBUSY renaming it onto "."); an empty mount point did the same."""
    here = tmp_path / "release"
    here.mkdir()
    monkeypatch.chdir(here)
    for output in (".", "./"):
        code, _, err = run(export_main, ["--model-dir", model_copy, "--output", output], capsys)
        assert code == 2 and "error: --output . is the current directory, which an export cannot replace (it is " \
            "assembled beside its directory and renamed into place): give a new directory inside it, e.g. --output " \
            "model" in err and "Traceback" not in err, err
    assert os.listdir(here) == [] and sorted(os.listdir(tmp_path)) == sorted([here.name, model_copy.name])
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", "/proc"], capsys)
    assert code == 2 and "--output /proc is a mount point, which an export cannot replace" in err, err
    (here / "sub").mkdir()
    monkeypatch.chdir(here / "sub")
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", ".."], capsys)
    assert code == 2 and "--output .. is a directory holding the current one, which an export" in err, err
    (here / "sub").rmdir()   # a shell in a deleted directory: the check of the current one failed in a traceback
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", tmp_path / "ok"], capsys)
    assert code == 0 and (tmp_path / "ok" / EXPORT).is_file(), err
    monkeypatch.chdir(tmp_path)
    busy = Path.rename   # a bind mount of the same disk, which os.path.ismount cannot tell: EBUSY as it is renamed

    def rename(self, target):
        if Path(target).name == "mounted":
            raise OSError(16, "Device or resource busy")
        return busy(self, target)
    monkeypatch.setattr(Path, "rename", rename)
    (tmp_path / "mounted").mkdir()
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", tmp_path / "mounted"], capsys)
    assert code == 2 and f"--output {tmp_path / 'mounted'} is a mount point (or in use), which an export cannot " \
        "replace" in err and "Traceback" not in err, err


def test_an_export_is_refused_where_it_would_destroy_something(model_copy, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", out], capsys)
    assert code == 2 and f"error: --output {out} exists and is not empty: give a new directory, or --overwrite" in err
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", out, "--overwrite"], capsys)
    assert code == 2 and f"--overwrite replaces only an earlier export, and {out} has no {EXPORT}" in err
    assert (out / "notes.txt").read_text() == "mine"
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", model_copy, "--overwrite"], capsys)
    assert code == 2 and f"error: --output {model_copy} is the model directory" in err
    code, _, err = run(export_main, ["--model-dir", model_copy, "--checkpoint", "soon", "--output", tmp_path / "x"],
                       capsys)
    assert code == 2 and "unknown checkpoint 'soon'" in err and not (tmp_path / "x").exists()
    code, _, err = run(export_main, ["--model-dir", model_copy, "--checkpoint", "\u00b2", "--output", tmp_path / "x"],
                       capsys)   # a digit to str.isdigit, not to int()
    assert code == 2 and "unknown checkpoint '\u00b2'" in err, err
    (tmp_path / "afile").write_text("mine")
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", tmp_path / "afile" / "x"], capsys)
    assert code == 2 and f"cannot make its directory {tmp_path / 'afile'} (a file is in its path)" in err, err
    assert not list(tmp_path.glob(".*export*"))   # nothing half-made left beside the outputs


def test_a_config_json_that_builds_no_model_for_the_checkpoint_is_not_exported(model_copy, tmp_path, capsys):
    """A config.json edited by hand into another model ("hidden_size" changed) was exported, exit 0, and the export
    failed at its first translation."""
    cfg = json.loads((model_copy / ckpt.CONFIG).read_text())
    for edit, said in (({"tie_weights": True}, f"{model_copy / ckpt.CONFIG}: --tie-weights needs"),
                       ({"hidden_size": cfg["model"]["hidden_size"] * 2}, "cannot load these parameters into the "
                                                                          "model described by")):
        (model_copy / ckpt.CONFIG).write_text(json.dumps({**cfg, "model": {**cfg["model"], **edit}}))
        code, _, err = run(export_main, ["--model-dir", model_copy, "--output", tmp_path / "x"], capsys)
        if "hidden_size" in edit:   # a model the config builds, not the checkpoint's: its manifest says so first
            hidden = cfg["model"]["hidden_size"]
            assert code == 2 and f"model.hidden_size {2 * hidden} (saved with {hidden})" in err, err
            as_trained_with_its_config(model_copy)
            code, _, err = run(export_main, ["--model-dir", model_copy, "--output", tmp_path / "x"], capsys)
        assert code == 2 and said in err and not (tmp_path / "x").exists(), err


def test_overwrite_replaces_an_earlier_export(model_dir, model_copy, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(export_main, ["--model-dir", model_copy, "--output", out], capsys)[0] == 0
    step = ckpt.params_step(list_params_files(model_copy)[0])
    assert run(export_main, ["--model-dir", model_copy, "--output", out, "--checkpoint", step, "--overwrite"],
               capsys)[0] == 0
    assert json.loads((out / EXPORT).read_text())["step"] == step
    # what no export writes (a model card, a training run copied inside) was deleted with it, without a word
    code, _, err = run(evaluate_main, ["--model-dir", out, "--src-file", synth_file(model_dir, "test.ko"),
                                       "--ref-file", synth_file(model_dir, "test.en"), "--name", "mine"], capsys)
    assert code == 0 and (out / "scores.json.lock").exists(), err   # (nmt-evaluate's scores and their lock)
    again = ["--model-dir", model_copy, "--output", out, "--overwrite"]   # the same parameters: its scores kept
    assert run(export_main, again + ["--checkpoint", step], capsys)[0] == 0 and "mine" in read_scores(out)
    best_is_step = ckpt.params_sha256(model_copy / ckpt.PARAMS_BEST) == ckpt.params_sha256(out / ckpt.PARAMS_BEST)
    assert run(export_main, again, capsys)[0] == 0 and ("mine" in read_scores(out)) == best_is_step   # (others': gone)
    (out / "README.md").write_text("model card")
    shutil.copytree(model_copy, out / "run")
    code, _, err = run(export_main, ["--model-dir", out / "run", "--output", out, "--overwrite"], capsys)
    assert code == 2 and f"--overwrite replaces --output {out} whole, and it holds what no export writes: README.md, " \
        "run; move them out of the directory first" in err, err
    assert (out / "README.md").is_file() and (out / "run" / ckpt.CONFIG).is_file()
    assert json.loads((out / EXPORT).read_text())["step"] == step


def test_an_overwrite_keeps_the_same_parameters_scores_at_the_models_decoding_only(model_copy, tmp_path, capsys):
    """Three ways an export's scores went wrong on --overwrite: an earlier export's scores at beam 5 were kept with a
    config.json now at beam 3 (/info showed them as the served model's); an ensemble's entry it recorded was lost
    though the parameters were the same bytes; a damaged scores.json there stopped the export that would replace
    it ("is not valid JSON ... move it away to record new scores")."""
    out, sha = tmp_path / "out", ckpt.params_sha256(model_copy / ckpt.PARAMS_BEST)
    again = ["--model-dir", model_copy, "--output", out, "--overwrite"]
    assert run(export_main, ["--model-dir", model_copy, "--output", out], capsys)[0] == 0
    record_scores(out, "mine", "ensemble-best:other", {"bleu": 3.0, "params_sha256": "of both", "beam_size": 5})
    record_scores(out, "mine", "best", {"bleu": 4.0, "params_sha256": sha, "beam_size": 5})
    assert run(export_main, again, capsys)[0] == 0   # the same parameters: all its entries kept
    assert set(read_scores(out)["mine"]) == {"ensemble-best:other", "best"}
    cfg = json.loads((model_copy / ckpt.CONFIG).read_text())
    cfg["decode"]["beam_size"] = 3   # (the model's settings changed: its own entries at beam 5 too)
    (model_copy / ckpt.CONFIG).write_text(json.dumps(cfg))
    record_scores(model_copy, "test", "best", {"bleu": 11.0, "checkpoint": "best", "beam_size": 5})
    step = str(ckpt.params_step(list_params_files(model_copy)[0]))   # (an entry recording no beam: made at beam 5)
    record_scores(model_copy, "test", step, {"bleu": 7.0, "checkpoint": step, "beam_size": 3})
    assert run(export_main, again, capsys)[0] == 0
    kept = read_scores(out)   # none made at beam 5; the step's, made at beam 3, stays
    assert "mine" not in kept and kept["test"]["best"]["bleu"] == 7.0, kept
    (out / ckpt.SCORES).write_text("[1, 2]")
    code, _, err = run(export_main, again, capsys)
    assert code == 0 and "is not a scores file" in err and "the export it replaces keeps no test scores" in err \
        and "move it away" not in err, err


def test_a_link_as_output_is_replaced_on_overwrite_and_its_target_kept(model_copy, tmp_path, capsys):
    """`current -> v1` (a deployment's layout), exported over with --overwrite: the link went aside to
    .current.replaced-PID, which rmtree(ignore_errors=True) did not remove (nor the next export), and a later command
    took it for an export stopped half-way."""
    v1, current = tmp_path / "deploy" / "v1", tmp_path / "deploy" / "current"
    assert run(export_main, ["--model-dir", model_copy, "--output", v1], capsys)[0] == 0
    before = sorted(p.name for p in v1.iterdir())
    current.symlink_to("v1")
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", current], capsys)
    assert code == 2 and f"--output {current} is a symbolic link (to v1): --overwrite replaces the link" in err
    for _ in range(2):
        assert run(export_main, ["--model-dir", model_copy, "--output", current, "--overwrite"], capsys)[0] == 0
        assert sorted(p.name for p in v1.parent.iterdir()) == ["current", "v1"]   # nothing left beside them
    assert current.is_dir() and not current.is_symlink() and (current / EXPORT).is_file()
    assert sorted(p.name for p in v1.iterdir()) == before


def test_a_link_loop_as_output_or_on_its_path_is_one_line(model_copy, tmp_path, capsys):
    """A symbolic link that links back (`loop -> loop`) as --output, or on its path (loop/x), ended in Python's
    RuntimeError "Symlink loop" traceback from resolving the output; nmt-train names such a link. A loop as the
    output is a link like any other (--overwrite replaces it); one on its path, or a link to nowhere, is named."""
    loop, nowhere = tmp_path / "loop", tmp_path / "dangling"
    loop.symlink_to("loop")
    nowhere.symlink_to("missing")
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", loop], capsys)
    assert code == 2 and f"--output {loop} is a symbolic link (to loop): --overwrite replaces the link" in err, err
    for link, target in ((loop, "loop"), (nowhere, "missing")):
        code, _, err = run(export_main, ["--model-dir", model_copy, "--output", link / "x"], capsys)
        assert code == 2 and err == (f"error: --output {link / 'x'}: {link} is a symbolic link to {target}, which "
                                     "leads nowhere (missing, or links back: a loop): mend the link, or give another "
                                     "--output\n"), err
    assert run(export_main, ["--model-dir", model_copy, "--output", loop, "--overwrite"], capsys)[0] == 0
    assert loop.is_dir() and not loop.is_symlink() and (loop / EXPORT).is_file()


def test_a_damaged_export_is_told_to_be_exported_again(model_copy, tmp_path, capsys):
    """A damaged params.best of an export was "lost: use --checkpoint latest or a kept step, or train again", none of
    which an export has; and an export (or a training directory) without a tokenizer had its parameters called
    lost, where they were fine."""
    out = tmp_path / "out"
    assert run(export_main, ["--model-dir", model_copy, "--output", out], capsys)[0] == 0
    spm = next(out.glob("spm.*.model"))
    saved = spm.read_bytes()
    spm.unlink()
    code, _, err = run(export_main, ["--model-dir", out, "--output", tmp_path / "again"], capsys)
    assert code == 2 and f"{spm} is missing" in err and "lost" not in err and "export it again" not in err, err
    spm.write_bytes(saved)
    damaged = bytearray((out / ckpt.PARAMS_BEST).read_bytes())
    damaged[-100] ^= 0xFF
    (out / ckpt.PARAMS_BEST).write_bytes(bytes(damaged))
    code, _, err = run(translate_main, ["--model-dir", out, "--input", os.devnull], capsys)
    assert code == 2 and "params.best is corrupted" in err and "--keep-last" not in err, err
    assert err.rstrip().endswith("export it again (nmt-export --overwrite) from the model directory its export.json "
                                 "names"), err
    (out / ckpt.PARAMS_BEST).unlink()   # gone: it said "holds no checkpoint yet ... nmt-train writes the first"
    code, _, err = run(translate_main, ["--model-dir", out, "--input", os.devnull], capsys)
    assert code == 2 and "params.best not found" in err and "step None" not in err, err
    assert err.rstrip().endswith("export it again (nmt-export --overwrite) from the model directory its export.json "
                                 "names"), err


def test_the_script_runs_from_a_checkout(model_dir, tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "export.py"), "--model-dir", str(model_dir),
                        "--output", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "out" / "params.best").read_bytes() == (model_dir / "params.best").read_bytes()


@pytest.mark.parametrize("field, value, said", [
    ("step", "ten", 'field \'step\' is a JSON string ("ten"), where an integer or null belongs'),
    ("step", True, "field 'step' is a JSON true/false (true), where an integer or null belongs"),
    ("checkpoint", 5, "field 'checkpoint' is a JSON number (5), where a string belongs"),
    ("model_dir", ["m"], 'field \'model_dir\' is a JSON array (["m"]), where a string belongs'),
    ("test_sum", True, "field 'test_sum' is a JSON true/false (true), where a string belongs")])
def test_an_export_json_edited_to_another_type_is_named_with_its_field(model_copy, tmp_path, capsys, field, value,
                                                                       said):
    """export.json with a value of another JSON type than nmt-export writes (a hand edit): `--checkpoint latest` of
    the export said "(checkpoint 5 of ['m'])", "(step ten)" as they were, results_table "exported from ['m']", and a
    test_sum of true was taken for a sum ("True"), which no test files have. One line naming the file and field."""
    out = tmp_path / "out"
    assert run(export_main, ["--model-dir", model_copy, "--output", out], capsys)[0] == 0
    made = json.loads((out / EXPORT).read_text())
    made[field] = value
    (out / EXPORT).write_text(json.dumps(made))
    line = (f"error: {out / EXPORT}: {said}, as nmt-export writes it: export the model again (nmt-export "
            "--overwrite)\n")
    assert run(translate_main, ["--model-dir", out, "--checkpoint", "latest", "--input", os.devnull], capsys)[:3:2] \
        == (2, line)
    data = json.loads((out / ckpt.CONFIG).read_text())["data"]   # its own test files: checked with test_sum
    assert run(evaluate_main, ["--model-dir", out, "--src-file", data["test_src"], "--ref-file", data["test_tgt"]],
               capsys)[:3:2] == (2, line)
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "results_table.py"), str(out)], capture_output=True,
                       text=True, timeout=120)
    assert (r.returncode, r.stderr) == (2, line)


def test_an_export_of_the_average_is_no_steps_checkpoint(model_copy, tmp_path, capsys):
    """Exported, params.avg carried the step of the last checkpoint in it, so `--checkpoint 6048` on the export
    translated with the average, logged as "step 6048 is the best checkpoint"."""
    files = [f for f in list_params_files(model_copy)][-2:]
    ckpt.average_checkpoints(model_copy, files)
    out = tmp_path / "avg"
    assert run(export_main, ["--model-dir", model_copy, "--checkpoint", "avg", "--output", out], capsys)[0] == 0
    made = json.loads((out / EXPORT).read_text())
    assert made["checkpoint"] == "avg" and made["step"] is None and (out / "params.best").read_bytes() == \
        (model_copy / ckpt.PARAMS_AVG).read_bytes()
    # the same bytes have no step where they came from either (/info's `step` was the last averaged step there)
    assert Translator.from_dir(model_copy, "avg").params_step is None is Translator.from_dir(out).params_step
    record_scores(model_copy, "test", "avg", {"bleu": 5.0, "checkpoint": "avg", "step": 600})
    assert run(export_main, ["--model-dir", model_copy, "--checkpoint", "avg", "--output", out, "--overwrite"],
               capsys)[0] == 0
    assert read_scores(out)["test"]["best"]["step"] is None   # the score, without the last averaged step
    step = ckpt.params_step(files[-1])
    code = translate_main(["--model-dir", str(out), "--checkpoint", str(step), "--input", "/dev/null"])
    assert code == 2 and f"{step}" in capsys.readouterr().err


def test_an_ensemble_led_by_an_export_of_the_average_is_recorded_as_the_averages(model_copy, tmp_path, capsys):
    """`nmt-evaluate --model-dir EXPORT_OF_AVG --ensemble RUN --checkpoint avg` was recorded as "ensemble-best:RUN"
    (the export's avg is its params.best), and the ensemble of the bests then replaced it without a word."""
    ckpt.average_checkpoints(model_copy, list_params_files(model_copy)[-2:])
    out = tmp_path / "avg"
    assert run(export_main, ["--model-dir", model_copy, "--checkpoint", "avg", "--output", out], capsys)[0] == 0
    model_copy = twin_of(model_copy, tmp_path / "twin")   # (the run itself at avg: the same parameters, refused)
    src = Path(json.loads((model_copy / ckpt.CONFIG).read_text())["data"]["test_src"])
    files = ["--src-file", src, "--ref-file", src.with_suffix(".en"), "--name", "t"]
    for which in ("avg", "best"):
        assert run(evaluate_main, ["--model-dir", out, "--ensemble", model_copy, "--checkpoint", which, *files],
                   capsys)[0] == 0
    assert sorted(k.split(":")[0] for k in read_scores(out)["t"]) == ["ensemble-avg", "ensemble-best"]


def test_an_export_killed_leaves_nothing_after_the_next(model_copy, tmp_path, capsys):
    """A SIGTERM mid-export left .NAME.export-PID (a 19 MB copy) for good: only this very process id's was removed.
    The next export beside it removes those of processes that are gone, not of running ones."""
    import subprocess
    gone = subprocess.Popen(["true"])   # a process id no longer in use
    gone.wait()
    dead, live = tmp_path / f".out.export-{gone.pid}", tmp_path / f".out.export-{os.getppid()}"
    for d in (dead, live):
        d.mkdir()
        (d / "params.best").write_bytes(b"x")
    assert run(export_main, ["--model-dir", model_copy, "--output", tmp_path / "out"], capsys)[0] == 0
    assert not dead.exists() and live.exists()


class _Killed(BaseException):
    """A SIGKILL at that line, as far as the files are concerned."""


def test_an_overwrite_killed_as_it_deletes_the_earlier_export_leaves_the_new_one(model_copy, tmp_path, capsys,
                                                                                monkeypatch):
    """--overwrite deleted the earlier export and only then renamed the new one into place: killed in between (the
    deletion takes a while), nothing was left under the name."""
    out = tmp_path / "out"
    assert run(export_main, ["--model-dir", model_copy, "--output", out], capsys)[0] == 0
    step = ckpt.params_step(list_params_files(model_copy)[0])

    def killed(path, *args, **kwargs):
        if Path(path).name.startswith(".out.replaced-"):
            raise _Killed()
        return shutil.rmtree(path, *args, **kwargs)
    monkeypatch.setattr("nmt.export.shutil", type("S", (), {"rmtree": staticmethod(killed)}))
    with pytest.raises(_Killed):
        export_main(["--model-dir", str(model_copy), "--output", str(out), "--checkpoint", str(step), "--overwrite"])
    monkeypatch.undo()
    assert json.loads((out / EXPORT).read_text())["step"] == step and Translator.from_dir(out)
    assert run(export_main, ["--model-dir", model_copy, "--output", out, "--overwrite"], capsys)[0] == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []   # the next one removes it


def test_an_overwrite_killed_between_its_renames_names_what_it_left(model_copy, tmp_path, capsys, monkeypatch):
    """Killed between the rename of the earlier export aside and that of the new one into place, --overwrite left
    only the hidden .NAME.export-PID and .NAME.replaced-PID: nmt-translate said "no such directory; give a directory
    written by nmt-train". It names them and what to do; the next export removes both."""
    out = tmp_path / "[out]"   # (a name that is a glob pattern)
    assert run(export_main, ["--model-dir", model_copy, "--output", out], capsys)[0] == 0
    rename = Path.rename

    def killed(self, target):
        if self.name.startswith(".[out].export-"):
            raise _Killed()
        return rename(self, target)
    monkeypatch.setattr(Path, "rename", killed)
    monkeypatch.setattr("nmt.export.shutil", type("S", (), {"rmtree": staticmethod(lambda *a, **k: None)}))
    with pytest.raises(_Killed):   # (a SIGKILL runs no clean-up)
        export_main(["--model-dir", str(model_copy), "--output", str(out), "--overwrite"])
    monkeypatch.undo()
    pid = os.getpid()   # (the process that was "killed" is this one: it is taken for gone only as another's)
    for kind in ("export", "replaced"):
        (tmp_path / f".[out].{kind}-{pid}").rename(tmp_path / f".[out].{kind}-999999999")
    code, _, err = run(translate_main, ["--model-dir", out, "--input", "/dev/null"], capsys)
    assert code == 2 and f"--model-dir {out}: no such directory; an nmt-export stopped as it replaced it left the " \
        f"new export in {tmp_path / '.[out].export-999999999'} and the one it replaced in " \
        f"{tmp_path / '.[out].replaced-999999999'}: move the new one to {out} (or export again, which removes both)" \
        in err, err
    assert run(export_main, ["--model-dir", model_copy, "--output", out, "--overwrite"], capsys)[0] == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".[out].")] == []


def test_a_damaged_scores_json_is_exported_without_scores_and_a_warning(model_copy, tmp_path, capsys, caplog):
    """A damaged scores.json stopped the export ("move it away to record new scores"): an export's scores are
    optional."""
    (model_copy / ckpt.SCORES).write_text("")
    code, out, err = run(export_main, ["--model-dir", model_copy, "--output", tmp_path / "out"], capsys)
    assert code == 0 and not (tmp_path / "out" / ckpt.SCORES).exists()
    assert f"{model_copy / ckpt.SCORES} is not valid JSON" in caplog.text and "the export holds no test scores" in \
        caplog.text


def test_the_export_carries_its_own_steps_scores_not_another_steps_recorded_as_best(model_copy, tmp_path, capsys):
    """scores.json's "best" entry can be another step's (recorded by nmt-evaluate as a training run wrote a new best,
    or before a resume wrote params.best again): the export took it as its own, before its step's own entry. An
    entry that is not an object was a TypeError traceback."""
    best = ckpt.best_step(model_copy)
    entry = {"bleu": 11.0, "chrf": 30.0, "n": 3, "params_file": "params.best"}
    (model_copy / ckpt.SCORES).write_text(json.dumps({
        "test": {"best": {**entry, "step": best - 1, "bleu": 99.0}, str(best): {**entry, "step": best}},
        "other": {"best": 5}}))
    assert run(export_main, ["--model-dir", model_copy, "--output", tmp_path / "out"], capsys)[0] == 0
    assert read_scores(tmp_path / "out") == {"test": {"best": {**entry, "step": best, "checkpoint": "best"}}}


def test_a_stdout_gone_or_full_after_the_work_loses_only_the_last_lines(model_dir, tmp_path):
    """`nmt-export ... | true` and `nmt-train ... | true` ended, after their work, in a BrokenPipeError traceback
    with exit code 1 (a `set -o pipefail` script failed a run that had succeeded), `> /dev/full` likewise."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    export = (f"{q(sys.executable)} {q(REPO / 'scripts' / 'export.py')} --model-dir {q(model_dir)} --output "
              f"{q(tmp_path / 'ex')}")
    files = " ".join(f"--{split}-{side} {q(synth_file(model_dir, f'{split}.{lang}'))}"
                     for split in ("train", "dev", "test") for side, lang in (("src", "ko"), ("tgt", "en")))
    train = (f"{q(sys.executable)} {q(REPO / 'scripts' / 'train.py')} {files} --model-dir {q(tmp_path / 't')} "
             "--vocab-size 400 --embed-size 16 --hidden-size 16 --num-layers 1 --max-steps 2 --no-progress")
    for line, code in ((f"{export} | true; exit ${{PIPESTATUS[0]}}", 141),
                       (f"{train} | true; exit ${{PIPESTATUS[0]}}", 141),
                       (f"{train.replace(q(tmp_path / 't'), q(tmp_path / 'dry'))} --dry-run | true; "
                        "exit ${PIPESTATUS[0]}", 141),   # (the dry run's report too)
                       (f"rm -r {q(tmp_path / 'ex')}; {export} > /dev/full", 2)):
        p = subprocess.run(line, shell=True, executable="/bin/bash", stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True, env=env, timeout=300)
        assert p.returncode == code and "Traceback" not in p.stderr, (line, p.stderr[-2000:])
        assert code == 141 or "error: cannot write the standard output: No space left on device" in p.stderr
    assert (tmp_path / "ex" / ckpt.PARAMS_BEST).is_file() and (tmp_path / "t" / ckpt.SCORES).is_file()
    p = subprocess.run(f"{train.replace(str(tmp_path / 't'), str(tmp_path / 'ex'))} --overwrite", shell=True,
                       executable="/bin/bash", stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    assert p.returncode == 2 and f"--model-dir {tmp_path / 'ex'} is an export (nmt-export" in p.stderr, p.stderr
    assert (tmp_path / "ex" / ckpt.PARAMS_BEST).is_file()


def test_a_size_limit_names_the_output_not_its_temporary_copy(model_dir, tmp_path):
    """Under `ulimit -f`, the error named ".ex.export-<pid>/params.best", a directory removed as it was said."""
    import resource
    limit = (model_dir / ckpt.PARAMS_BEST).stat().st_size // 2
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "export.py"), "--model-dir", str(model_dir),
                        "--output", str(tmp_path / "ex")], stderr=subprocess.PIPE, text=True, env=env, timeout=300,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert p.returncode == 2 and f"cannot write {tmp_path / 'ex' / ckpt.PARAMS_BEST}: File too large" in p.stderr, \
        p.stderr
    assert ".export-" not in p.stderr and "Traceback" not in p.stderr and os.listdir(tmp_path) == []


def test_a_best_replaced_by_training_during_the_export_is_exported_with_its_own_step(model_copy, tmp_path, capsys,
                                                                                    monkeypatch):
    """nmt-export of best while the run trained read params.best's step and hash, then copied the file a new best
    had replaced since: the export named one step and held another's parameters (3 of 50 exports of a live run)."""
    import nmt.export
    from nmt import manifest
    best = ckpt.TrainState.load(model_copy).best_step
    first = next(f for f in list_params_files(model_copy) if ckpt.params_step(f) != best)
    new_best = ckpt.params_step(first)
    real = nmt.export._translates

    def a_new_best_meanwhile(model_dir, cfg, params):   # what training does as it validates a new best
        real(model_dir, cfg, params)
        shutil.copyfile(model_copy / first, model_copy / ckpt.PARAMS_BEST)
        manifest.write_manifest(model_copy, "best", [ckpt.PARAMS_BEST], new_best)
    monkeypatch.setattr(nmt.export, "_translates", a_new_best_meanwhile)
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", tmp_path / "out"], capsys)
    assert code == 0, err
    made = json.loads((tmp_path / "out" / EXPORT).read_text())
    assert (tmp_path / "out" / ckpt.PARAMS_BEST).read_bytes() == (model_copy / first).read_bytes()
    assert made["step"] == new_best and json.loads((tmp_path / "out" / "manifest.best.json").read_text())["step"] \
        == new_best
    assert made["params_sha256"] == manifest.sha256_of(model_copy / first)


def test_two_exports_to_one_new_output_do_not_both_succeed(model_copy, tmp_path, capsys, monkeypatch):
    """Two nmt-export runs to the same new --output (no --overwrite) both exited 0, the second renaming the first's
    finished export aside and deleting it: a deploy script was told "exported latest" of a directory holding best."""
    import nmt.export
    out = tmp_path / "release"
    real = nmt.export._translates

    def another_export_finishes(model_dir, cfg, params):
        real(model_dir, cfg, params)
        monkeypatch.setattr(nmt.export, "_translates", real)
        assert export_main(["--model-dir", str(model_copy), "--output", str(out), "--checkpoint", "latest"]) == 0
    monkeypatch.setattr(nmt.export, "_translates", another_export_finishes)
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", out], capsys)
    assert code == 2 and f"--output {out}: another nmt-export wrote it as this one ran; nothing replaced" in err, err
    assert json.loads((out / EXPORT).read_text())["checkpoint"] == "latest"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_step_pruned_during_the_export_is_read_again(model_copy, tmp_path, capsys, monkeypatch):
    """nmt-export --checkpoint latest while the run trained with --keep-last 1: the step read was pruned before
    its copy, and the export ended in a FileNotFoundError traceback (6 of 20 exports); it reads the checkpoint again."""
    import nmt.export
    real, calls = nmt.export.atomic_copy, []

    def pruned_once(src, dst):
        calls.append(Path(src).name)
        if Path(src).name.startswith("params.") and calls.count(Path(src).name) == 1:
            raise FileNotFoundError(2, "No such file or directory", str(src))
        real(src, dst)
    monkeypatch.setattr(nmt.export, "atomic_copy", pruned_once)
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", tmp_path / "out", "--checkpoint",
                                     "latest"], capsys)
    latest = ckpt.params_file(ckpt.TrainState.load(model_copy).step)
    assert code == 0 and calls.count(latest) == 2, err
    assert (tmp_path / "out" / ckpt.PARAMS_BEST).read_bytes() == (model_copy / latest).read_bytes()


def test_outputs_of_long_names_and_names_mxnet_cannot_open(model_copy, tmp_path, capsys):
    """A legal name of 245 bytes was refused ("cannot write in its directory ... File name too long": the export's
    working copy beside it has a longer name); a directory whose name is not UTF-8 was exported, exit 0, and then
    loaded by nothing (MXNet opens files by UTF-8 names): refused now, naming its bytes."""
    long_name = tmp_path / ("e" * 245)
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", long_name], capsys)
    assert code == 0 and (long_name / EXPORT).is_file() and sorted(p.name for p in tmp_path.iterdir()) == \
        sorted(["model", long_name.name]), err
    legacy = tmp_path / os.fsdecode("자료".encode("cp949")) / "exp"
    code, _, err = run(export_main, ["--model-dir", model_copy, "--output", legacy], capsys)
    assert code == 2 and "\\xc0\\xda\\xb7\\xe1/exp: MXNet opens files by UTF-8 names" in err and not legacy.exists()
