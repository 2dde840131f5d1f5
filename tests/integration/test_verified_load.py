"""nmt-translate and nmt-evaluate on a model directory whose best or latest checkpoint is damaged: exit 2 with the
file and what is wrong, no traceback; an intact directory translates."""
from __future__ import annotations

import json

import pytest

from nmt import checkpoint as ckpt
from nmt.cli_decode import evaluate_main, translate_main
from nmt.commands import shell_word
from nmt.train import train
from tests.synth import tiny_config, twin_of, write_task


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("verified")
    task = write_task(root / "task", n_train=300)
    cfg = tiny_config(root, task, max_steps=4, valid_every=2, keep_last=2)
    train(cfg, evaluate=False)
    return cfg.train.model_dir, task


@pytest.mark.parametrize("which, name", [("best", ckpt.PARAMS_BEST), ("4", ckpt.params_file(4))])   # (latest: the newest intact)
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
        assert f"{name} is truncated: {len(good) - 10} bytes, its manifest says {len(good)} (or another model's " \
            "file is in its place)" in err, err   # (a spm.en.model copied over from another model: "truncated")
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


def _new_best(model_dir, step: int) -> None:
    """What a training run does as a new best comes: params.best replaced by that step's, then its manifest."""
    import shutil
    from nmt import manifest
    shutil.copyfile(f"{model_dir}/{ckpt.params_file(step)}", f"{model_dir}/{ckpt.PARAMS_BEST}")
    manifest.write_manifest(model_dir, "best", [ckpt.PARAMS_BEST], step)


def test_scores_and_info_name_the_parameters_loaded_not_a_best_written_since(model, tmp_path, monkeypatch):
    """nmt-evaluate while a run wrote a new best recorded the loaded step's scores under the new step (it asked for
    the step after translating); nmt-serve's /info gave the new best's score as the loaded checkpoint's. A best
    replaced while it loads is loaded again."""
    import shutil
    from nmt import members
    from nmt.corpus import read_parallel
    from nmt.scoring import read_scores, score_test_set
    from nmt.shown_score import model_test_score
    from nmt.translate import Translator
    model_dir = tmp_path / "m"
    shutil.copytree(model[0], model_dir)
    _new_best(model_dir, 2)
    load, calls = members.load_member, []

    def load_member(*args):   # the first load races a training run that writes step 4 as its best
        calls.append(1)
        if len(calls) == 1:
            _new_best(model_dir, 4)
        return load(*args)
    monkeypatch.setattr("nmt.members.load_member", load_member)
    tr = Translator.from_dir(model_dir)
    assert len(calls) == 2 and tr.params_step == 4
    _new_best(model_dir, 2)   # and another after it loaded
    test = read_parallel(model[1]["test_src"], model[1]["test_tgt"], whole=True)
    entry, _, _ = score_test_set(tr, "t", test, save=True)
    # params.best is another step's now: the scores go under the step they are of, not over best's entry
    assert entry["step"] == 4 and list(read_scores(model_dir)["t"]) == ["4"]
    entry["step"] = 2
    (model_dir / ckpt.SCORES).write_text(json.dumps({"t": {"best": entry, "4": {**entry, "step": 4, "bleu": 1.5}}}))
    info = model_test_score(model_dir, "best", step=tr.params_step)
    assert (info["checkpoint"], info["bleu"], info["of_loaded_checkpoint"]) == ("4", 1.5, True)


def test_a_latest_pruned_while_it_loads_is_loaded_again(model, tmp_path, monkeypatch):
    """A training run saved a new step and pruned the one Translator.from_dir("latest") was loading: "params.N
    cannot be read (No such file or directory)" instead of loading the new latest."""
    import shutil
    from nmt import manifest
    from nmt.translate import Translator
    d = tmp_path / "m"
    shutil.copytree(model[0], d)
    load = ckpt.load_parameters

    def load_parameters(net, path, *args):   # the first load races a run that saves step 5 and prunes step 4
        if path.name == ckpt.params_file(4) and not (d / ckpt.params_file(5)).exists():
            state = manifest.read_manifest(d, "00000004")["state"]
            for old, new in ((ckpt.params_file(4), ckpt.params_file(5)),
                             (ckpt.trainer_states_file(4), ckpt.trainer_states_file(5))):
                shutil.copyfile(d / old, d / new)
            manifest.write_manifest(d, "00000005", [ckpt.params_file(5), ckpt.trainer_states_file(5)], 5,
                                    {**state, "step": 5, "params_files": [ckpt.params_file(2), ckpt.params_file(5)]})
            for name in (manifest.manifest_name("00000004"), ckpt.params_file(4), ckpt.trainer_states_file(4)):
                (d / name).unlink()
        return load(net, path, *args)
    monkeypatch.setattr(ckpt, "load_parameters", load_parameters)
    tr = Translator.from_dir(d, which="latest")
    assert (tr.params_file.name, tr.params_step) == (ckpt.params_file(5), 5)


def test_what_a_load_takes_instead_of_the_checkpoint_asked_for_is_said_once_per_directory(model, tmp_path, caplog):
    """A load looked its checkpoint up several times (before and after, once per device, the ensemble's copy check):
    a process-wide set of lines already said hid them from the next load in the same process (a notebook, a
    server loading again). Each load says it once per directory, and each load says it."""
    import shutil
    import mxnet as mx
    from nmt.translate import Translator
    dirs = [tmp_path / "a", tmp_path / "b"]
    shutil.copytree(model[0], dirs[0])
    twin_of(model[0], dirs[1])   # (another model: a copy, the same one, is refused)
    for d in dirs:
        (d / ckpt.params_file(4)).write_bytes((d / ckpt.params_file(4)).read_bytes()[:-10])
    for _ in range(2):
        caplog.clear()
        with caplog.at_level("WARNING", logger="nmt.checkpoint"):
            tr = Translator.from_dir(dirs[0], which="latest", ensemble=dirs[1:], ctx=[mx.cpu(0), mx.cpu(1)])
        assert tr.params_step == 2
        for d in dirs:
            assert caplog.text.count(f"{d}: the newest checkpoint is damaged (step 4: ") == 1, caplog.text


def test_info_tells_another_runs_scores_of_the_same_step_from_the_loaded_ones(model, tmp_path):
    """`nmt-train --overwrite` on a served directory: the new run stopped at the step the server had loaded, and
    /info gave the new run's test score as the loaded checkpoint's (scores were told apart by step alone) while the
    server translated with the old run's parameters; /info did not say which step it served. Entries record the
    parameters' sha256, and /info gives the loaded step."""
    import shutil
    import mxnet as mx
    from nmt import manifest
    from nmt.corpus import read_parallel
    from nmt.scoring import read_scores, score_test_set
    from nmt.shown_score import model_test_score
    from nmt.serve.api import Model
    from nmt.translate import Translator
    d = tmp_path / "m"
    shutil.copytree(model[0], d)
    tr = Translator.from_dir(d)
    assert tr.params_sha256 == manifest.read_manifest(d, "best")["files"][ckpt.PARAMS_BEST]["sha256"]
    score_test_set(tr, "t", read_parallel(model[1]["test_src"], model[1]["test_tgt"], whole=True), save=True)
    entry = read_scores(d)["t"]["best"]
    assert entry["params_sha256"] == tr.params_sha256
    info = Model(tr, batcher=None).info()
    assert (info["step"], info["best_test_score"]["of_loaded_checkpoint"]) == (tr.params_step, True)
    other = mx.nd.load(str(d / ckpt.PARAMS_BEST))   # the new run's best, of the same step
    mx.nd.save(str(d / ckpt.PARAMS_BEST), {k: v + 1 for k, v in other.items()})
    manifest.write_manifest(d, "best", [ckpt.PARAMS_BEST], tr.params_step)
    new = ckpt.params_sha256(d / ckpt.PARAMS_BEST)
    (d / ckpt.SCORES).write_text(json.dumps({"t": {"best": {**entry, "bleu": 0.5, "params_sha256": new}}}))
    info = Model(tr, batcher=None).info()
    assert (info["step"], info["best_test_score"]["bleu"]) == (tr.params_step, 0.5)
    assert info["best_test_score"]["of_loaded_checkpoint"] is False
    assert model_test_score(d, "best", step=tr.params_step)["of_loaded_checkpoint"] is True   # by step alone


def _another_run(model_dir, step: int) -> None:
    """What `nmt-train --overwrite` leaves as it reaches `step`: other parameters, in that step's file and params.best,
    with their manifests."""
    import mxnet as mx
    from nmt import manifest
    for name, key in ((ckpt.params_file(step), manifest.step_key(step)), (ckpt.PARAMS_BEST, "best")):
        params = mx.nd.load(str(model_dir / name))
        mx.nd.save(str(model_dir / name), {k: v * 0.5 for k, v in params.items()})
        body = manifest.read_manifest(model_dir, key)
        manifest.write_manifest(model_dir, key, [n for n in body["files"] if n.startswith(("params", "trainer"))],
                                step, body.get("state"))


def test_an_ensembles_scores_after_a_member_was_trained_again_are_not_the_loaded_ones(model, tmp_path):
    """An ensemble's scores.json entries recorded the first member's sha256 alone: after `nmt-train --overwrite` of
    the second member, /info took the new ensemble's scores for those of the one it served."""
    import shutil
    from nmt.corpus import read_parallel
    from nmt.members import members_sha256
    from nmt.scoring import score_test_set
    from nmt.serve.api import Model
    from nmt.translate import Translator
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        shutil.copytree(model[0], d)
    _another_run(b, 4)   # (not a copy of a)
    served = Translator.from_dir(a, ensemble=[b])
    assert served.params_sha256 == members_sha256([ckpt.params_sha256(d / ckpt.PARAMS_BEST) for d in (a, b)])
    test = read_parallel(model[1]["test_src"], model[1]["test_tgt"], whole=True)
    score_test_set(served, "t", test, save=True)
    assert Model(served, batcher=None).info()["best_test_score"]["of_loaded_checkpoint"] is True
    _another_run(b, 4)
    score_test_set(Translator.from_dir(a, ensemble=[b]), "t", test, save=True)   # the new ensemble's
    assert Model(served, batcher=None).info()["best_test_score"]["of_loaded_checkpoint"] is False


def test_scores_of_parameters_another_run_replaced_are_neither_recorded_nor_exported(model, tmp_path, capsys):
    """An nmt-evaluate that outlasted an `nmt-train --overwrite` recorded the old run's scores in the new run's
    scores.json ("scores recorded"), and nmt-export shipped them with the new parameters."""
    import shutil
    from nmt.cli_decode import evaluate_main
    from nmt.export import export_model
    from nmt.scoring import read_scores, record_scores
    d = tmp_path / "m"
    shutil.copytree(model[0], d)
    from nmt.translate import Translator
    translate = Translator.translate

    def overwritten_meanwhile(self, *args, **kwargs):   # as it translates, a new run reaches the step it loaded
        if not (tmp_path / "done").exists():
            (tmp_path / "done").touch()
            _another_run(d, 4)
        return translate(self, *args, **kwargs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Translator, "translate", overwritten_meanwhile)
        code = evaluate_main(["--model-dir", str(d), "--checkpoint", "4", "--src-file", model[1]["test_src"],
                              "--ref-file", model[1]["test_tgt"], "--name", "t"])
    err = capsys.readouterr().err
    assert code == 0 and "the directory holds another run's step 4 now" in err and "scores recorded" not in err, err
    assert "t" not in read_scores(d)
    record_scores(d, "t", "best", {"bleu": 9.0, "step": 4, "params_sha256": "0" * 64})   # (the old run's, say)
    out = export_model(d, tmp_path / "x")
    assert not (out / ckpt.SCORES).exists()


def test_scores_of_a_best_replaced_since_it_loaded_do_not_replace_best_s_entry(model, tmp_path):
    """An evaluation that outlasted an --overwrite (whose new run had not reached the loaded step yet) replaced
    the new run's `best` entry with the old run's scores, and nmt-export then had none to ship."""
    import shutil
    from nmt.corpus import read_parallel
    from nmt.scoring import read_scores, record_scores, score_test_set
    from nmt.translate import Translator
    d = tmp_path / "m"
    shutil.copytree(model[0], d)
    tr = Translator.from_dir(d)
    from nmt import manifest
    _another_run(d, 4)   # params.best another run's now, whose step 4 is not there yet (it is at its step 2)
    for name in (manifest.manifest_name(manifest.step_key(4)), ckpt.params_file(4), ckpt.trainer_states_file(4)):
        (d / name).unlink()
    mine = {"bleu": 7.0, "step": 4, "params_sha256": ckpt.params_sha256(d / ckpt.PARAMS_BEST)}
    record_scores(d, "t", "best", mine)   # the new run's own test score
    score_test_set(tr, "t", read_parallel(model[1]["test_src"], model[1]["test_tgt"], whole=True))
    scores = read_scores(d)["t"]
    assert scores["best"] == mine and scores["4"]["params_sha256"] == tr.params_sha256   # under the step it is of


def test_model_settings_edited_in_config_json_are_refused_and_decoding_ones_taken(model, tmp_path, capsys):
    """A config.json whose model settings were edited by hand loaded the parameters into the model it now
    described wherever no shape changed (a Transformer's heads 2 -> 4), which translated otherwise without a word,
    and nmt-evaluate recorded its scores; a decoding default (decode.beam_size) may be edited."""
    import shutil
    model_dir, task = model
    copy = shutil.copytree(model_dir, tmp_path / "m")
    config = json.loads((copy / ckpt.CONFIG).read_text())
    dropout = config["model"]["dropout"]
    config["model"]["dropout"], config["decode"]["beam_size"] = dropout + 0.05, 2
    (copy / ckpt.CONFIG).write_text(json.dumps(config))
    translate = ["--model-dir", str(copy), "--input", task["test_src"], "--output", str(tmp_path / "out")]
    for which in ("best", "4"):
        assert translate_main([*translate, "--checkpoint", which]) == 2
        err = capsys.readouterr().err
        assert (f"{copy / ckpt.CONFIG} has model.dropout {json.dumps(dropout + 0.05)} (saved with {json.dumps(dropout)})"
                ": the model settings its parameters were trained with") in err, err
        assert "describe them and cannot be edited; put them back" in err and "Traceback" not in err
    config["model"]["dropout"] = dropout
    data = dict(config["data"])   # the language pair swapped (another model's config.json copied in): the source
    config["data"]["src_lang"], config["data"]["tgt_lang"] = data["tgt_lang"], data["src_lang"]   # read with the
    (copy / ckpt.CONFIG).write_text(json.dumps(config))   # target's SentencePiece model, garbage with exit code 0
    assert translate_main(translate) == 2
    err = capsys.readouterr().err
    assert f"{copy / ckpt.CONFIG} has data.src_lang \"{data['tgt_lang']}\" (saved with \"{data['src_lang']}\"), " \
        f"data.tgt_lang \"{data['src_lang']}\" (saved with \"{data['tgt_lang']}\"): the model settings" in err, err
    from nmt.cli import train_main   # a resume said the dev pairs were not the run's, and advised --init-from
    for dry in ([], ["--dry-run"]):
        assert train_main(["--model-dir", str(copy), "--resume", "--max-steps", "6", "--no-progress", "--no-eval",
                           *dry]) == 2
        err = capsys.readouterr().err
        assert f"{copy / ckpt.CONFIG} has data.src_lang" in err and "dev pairs" not in err, (dry, err)
    config["data"] = data
    (copy / ckpt.CONFIG).write_text(json.dumps(config))
    assert translate_main(translate) == 0
    assert translate_main([*translate, "--nbest", "3"]) == 2   # the edited beam is the default taken
    assert "more than --beam-size 2" in capsys.readouterr().err


def test_a_best_or_average_written_after_an_edit_keeps_the_models_own_settings(model, tmp_path, capsys):
    """A --resume that wrote params.best again from its step's checkpoint (its best lost) recorded config.json's
    edited model settings (heads 2 -> 4) as the checkpoint's: the edited model then loaded the parameters without a
    word, and with the setting put back, as the error had said, params.best was refused. An average made after an
    edit did the same."""
    import shutil
    from nmt.cli import train_main
    model_dir, task = model
    copy = shutil.copytree(model_dir, tmp_path / "m")
    config = json.loads((copy / ckpt.CONFIG).read_text())
    dropout = config["model"]["dropout"]
    config["model"]["dropout"] = dropout + 0.05
    (copy / ckpt.CONFIG).write_text(json.dumps(config))
    for name in (ckpt.PARAMS_BEST, "manifest.best.json"):   # (a run killed between best's files and its step's)
        (copy / name).unlink()
    assert train_main(["--model-dir", str(copy), "--resume", "--no-progress", "--max-steps", "6"]) == 2
    assert "params.best is missing; written again from" in capsys.readouterr().err
    ckpt.average_checkpoints(copy, [ckpt.params_file(2), ckpt.params_file(4)])
    translate = ["--model-dir", str(copy), "--input", task["test_src"], "--output", str(tmp_path / "out")]
    for which in ("best", "avg"):
        assert translate_main([*translate, "--checkpoint", which]) == 2
        assert f"has model.dropout {json.dumps(dropout + 0.05)} (saved with {json.dumps(dropout)})" in \
            capsys.readouterr().err
    config["model"]["dropout"] = dropout   # put back, as the error says
    (copy / ckpt.CONFIG).write_text(json.dumps(config))
    for which in ("best", "avg"):
        assert translate_main([*translate, "--checkpoint", which]) == 0, capsys.readouterr().err


def test_an_average_of_a_damaged_checkpoint_says_what_to_do(model, tmp_path, capsys):
    """A kept checkpoint older than the newest, damaged (its manifest deleted): the resume trained, then its
    --average-last ended in the file's error alone (exit 2), and every resume after it in the same: no word that
    params.avg was not written, nor that averaging the checkpoints after it (a lower N) goes without the file."""
    import shutil
    from nmt.cli import train_main
    model_dir, _ = model
    copy = shutil.copytree(model_dir, tmp_path / "m")
    (copy / "manifest.00000002.json").unlink()
    assert train_main(["--model-dir", str(copy), "--resume", "--no-progress", "--no-eval", "--average-last", "2"]) == 2
    err = capsys.readouterr().err
    assert f"{copy / 'manifest.00000002.json'} is missing, so the checkpoint cannot be verified; params.avg is not " \
           "written: restore the file from a backup\n" in err, err
    with pytest.raises(ckpt.CheckpointError) as e:   # (with checkpoints after it to average)
        ckpt.average_checkpoints(copy, [ckpt.params_file(s) for s in (2, 4, 4)])
    assert str(e.value).endswith("params.avg is not written: restore the file from a backup, or leave it out, with N "
                                 "at most 2 (the checkpoints after it); average the last N checkpoints into it with "
                                 f"`nmt-train --model-dir {shell_word(copy)} --resume --average-last N`"), e.value
    assert not (copy / ckpt.PARAMS_AVG).exists()
