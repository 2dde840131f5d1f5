"""Verified checkpoints: every kind of checkpoint file truncated, flipped or deleted is found before MXNet reads it
(config.json, which people edit, is checked by its own validation); --resume falls back to the newest intact checkpoint; translation names the file."""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import mxnet as mx
import pytest

from nmt import checkpoint as ckpt
from nmt import manifest
from nmt import lost_best
from nmt.commands import shell_word
from nmt.lost_best import restore_best
from nmt.resume import check_kept_files, resume_state


class _Net:
    def __init__(self, value: float):
        self.value = value

    def save_parameters(self, path: str) -> None:
        mx.nd.save(path, {"w": mx.nd.full((64,), self.value)})


class _Trainer:
    def save_states(self, path: str) -> None:
        Path(path).write_bytes(b"adam moments " * 50)


def _model_dir(tmp_path: Path, steps=(10, 20, 30), best=20, record_best: bool = False) -> Path:
    """A model directory with config.json, two SentencePiece models and one checkpoint per step (with
    `record_best`, the training states name the best step as a run's do)."""
    d = tmp_path / "m"
    d.mkdir(parents=True)
    (d / ckpt.CONFIG).write_text('{"model": {}}\n')
    for lang in ("ko", "en"):
        (d / f"spm.{lang}.model").write_bytes(bytes(range(256)) * 4)
    state = ckpt.TrainState()
    for step in steps:
        state.step = step
        state.best_step = best if record_best and step >= best else state.best_step
        ckpt.save_checkpoint(d, _Net(float(step)), _Trainer(), state, keep_last=3, is_best=step == best)
    return d


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[:len(data) // 2])
    elif how == "flip":
        i = len(data) // 2
        path.write_bytes(data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:])
    else:
        path.unlink()


HOW = ("truncate", "flip", "delete")
NEWEST = (ckpt.params_file(30), ckpt.trainer_states_file(30), manifest.manifest_name("00000030"))


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("name", NEWEST)
def test_resume_falls_back_to_the_newest_intact_checkpoint(tmp_path, caplog, name, how):
    d = _model_dir(tmp_path)
    _damage(d / name, how)
    with caplog.at_level(logging.WARNING, logger="nmt.checkpoint"):
        state = resume_state(d)
    assert state.step == 20 and state.params_files[-1] == ckpt.params_file(20)
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert name in warning and "resuming from step 20" in warning
    assert ckpt.TrainState.load(d).step == 20   # `latest` names the intact checkpoint again


def test_a_refused_resumes_init_from_advice_names_where_a_resume_would_start(tmp_path):
    """A resume refused for --dropout or --optimizer advised --init-from DIR, whose params.best may be far behind the
    run; then state.json's newest file, which may be damaged (following the advice failed) or missing."""
    from nmt.config import Config, ConfigError
    from nmt.config_resume import resumed_config
    d = _model_dir(tmp_path, steps=(10, 20, 30))

    def advised(key: str, value) -> str:
        cfg = Config()
        setattr(getattr(cfg, key.split(".")[0]), key.split(".")[1], value)
        with pytest.raises(ConfigError) as e:
            resumed_config(Config(), cfg, {key: "--x"}, str(d / ckpt.CONFIG))
        return str(e.value)
    for key, value in (("model.dropout", 0.1), ("optim.optimizer", "sgd")):
        assert f"--init-from {shell_word(d / ckpt.params_file(30))}" in advised(key, value)
    _damage(d / ckpt.params_file(30), "flip")
    (d / ckpt.STATE).unlink()
    assert f"--init-from {shell_word(d / ckpt.params_file(20))}" in advised("model.dropout", 0.1)   # the newest intact


def test_a_resume_past_a_damaged_checkpoint_names_only_the_checkpoints_left(tmp_path):
    """Step 30's training state names steps 10, 20, 30 (--keep-last 3); step 40's save pruned step 10. Resumed past a
    damaged step 40, the state named step 10 still, and `--resume --average-last 3` failed on its missing manifest."""
    d = _model_dir(tmp_path, steps=(10, 20, 30, 40))
    _damage(d / ckpt.params_file(40), "truncate")
    state = resume_state(d)
    assert state.step == 30 and state.params_files == [ckpt.params_file(s) for s in (20, 30)]
    assert ckpt.TrainState.load(d).params_files == state.params_files


@pytest.mark.parametrize("how", HOW)
def test_a_damaged_state_json_does_not_stop_a_resume(tmp_path, how):
    d = _model_dir(tmp_path)
    _damage(d / ckpt.STATE, how)
    assert resume_state(d).step == 30


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("name", ("spm.ko.model", "spm.en.model"))
def test_damaged_model_files_leave_no_intact_checkpoint(tmp_path, name, how):
    d = _model_dir(tmp_path)
    _damage(d / name, how)
    with pytest.raises(ckpt.CheckpointError, match=r"no intact checkpoint .*" + name.replace(".", r"\.")):
        resume_state(d)


@pytest.mark.parametrize("how, what", [("truncate", "truncated"), ("flip", "corrupted"), ("delete", "missing")])
@pytest.mark.parametrize("which, name", [("best", ckpt.PARAMS_BEST), ("10", ckpt.params_file(10))])
def test_loading_names_the_file_and_what_is_wrong(tmp_path, which, name, how, what):
    d = _model_dir(tmp_path)
    _damage(d / name, how)
    with pytest.raises(ckpt.CheckpointError, match=f"{name}.*{what}" if how != "delete" else "not found"):
        ckpt.params_path(d, which)


@pytest.mark.parametrize("how, what", [("truncate", "truncated"), ("flip", "corrupted"), ("delete", "missing")])
def test_latest_past_a_damaged_newest_checkpoint_is_the_newest_intact_one_named_in_a_warning(tmp_path, caplog,
                                                                                              how, what):
    d = _model_dir(tmp_path)
    _damage(d / ckpt.params_file(30), how)
    with caplog.at_level("WARNING", logger="nmt.checkpoint"):
        assert ckpt.params_path(d, "latest").name == ckpt.params_file(20)
    assert re.search(rf"{d}: the newest checkpoint is damaged \(step 30: .*{ckpt.params_file(30)}.*{what}.*\); the "
                     r"latest is the newest intact one, step 20", caplog.text), caplog.text


@pytest.mark.parametrize("which", ["best", "latest"])
def test_a_model_directory_without_a_checkpoint_says_so(tmp_path, which):
    """A run's directory before its first checkpoint (config.json, tokenizers): `--checkpoint latest` said that
    state.json was missing and to "start without --resume", to nmt-translate, which has no such flag."""
    (tmp_path / ckpt.CONFIG).write_text("{}")
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.params_path(tmp_path, which)
    assert str(e.value) == (f"{tmp_path} holds no checkpoint (no state.json, no params.best): its run ended before it "
                            "saved one; start it again with the command that started it, --overwrite added")


def test_a_directory_without_a_checkpoint_says_a_run_goes_on_only_while_one_holds_its_lock(tmp_path):
    """A directory with no checkpoint was said to hold "no checkpoint yet ...: nmt-train writes the first at its first
    validation" whether or not a run was training it (tests/integration/test_storage.py: one whose first checkpoint
    met a full disk). That is said only while another process holds train.lock; its run's ended one otherwise."""
    import fcntl
    import socket
    (tmp_path / ckpt.CONFIG).write_text("{}")
    (tmp_path / ckpt.LOG).write_text("")
    (tmp_path / ckpt.LOCK).write_text(json.dumps({"host": socket.gethostname(), "pid": 1}))   # (left by a run)
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.params_path(tmp_path, "best")
    assert str(e.value) == (f"{tmp_path} holds no checkpoint (no state.json, no params.best): its run ended before it "
                            f"saved one ({tmp_path / ckpt.LOG} says how far it got, and ends with its error unless "
                            "it was killed); start it again with the command that started it, --overwrite added")
    with open(tmp_path / ckpt.LOCK) as held:   # a trainer's lock (process 1's, as the file says)
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ckpt.CheckpointError) as e:
            ckpt.params_path(tmp_path, "latest")
    assert str(e.value) == (f"{tmp_path} holds no checkpoint yet (no state.json, no params.best): the run training it "
                            "(it holds train.lock) writes the first at its first validation (--valid-every) or when "
                            "stopped with Ctrl-C")


def test_a_directory_a_run_prepares_its_data_in_is_not_said_to_be_none_of_nmt_train(tmp_path):
    """A run reading, tokenizing and encoding its data (minutes on millions of pairs) holds train.lock and has written
    train.log but no config.json yet: nmt-translate, nmt-evaluate, nmt-serve and the Python API said "config.json not
    found; give a directory written by nmt-train", results_table "not a model directory written by nmt-train" (a real
    run stopped there with SIGSTOP), and so after a kill there. While a process holds the lock, they say that its run
    writes it; after, that the run ended, as nmt-train says of it ("stopped before its first checkpoint")."""
    import fcntl
    import socket
    from scripts.runs import ResultsError, load_run
    (tmp_path / ckpt.LOG).write_text("")
    (tmp_path / ckpt.LOCK).write_text(json.dumps({"host": socket.gethostname(), "pid": 1}))
    coming = ("the run training it (it holds train.lock) writes it once it has read and encoded its data, before its "
              "first update, and its first checkpoint at its first validation (--valid-every): wait for that")
    with open(tmp_path / ckpt.LOCK) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ckpt.CheckpointError) as e:
            ckpt.config_of(tmp_path, "--model-dir")
        assert str(e.value) == f"--model-dir {tmp_path}: config.json not found; {coming}"
        with pytest.raises(ResultsError) as e:
            load_run(tmp_path)
        assert str(e.value) == f"{tmp_path}: no config.json: {coming}"
    with pytest.raises(ckpt.CheckpointError) as e:   # no process holds it: the run ended (killed) before it
        ckpt.config_of(tmp_path, "--model-dir")
    assert str(e.value) == (f"--model-dir {tmp_path}: config.json not found; its run ended before it wrote it (its "
                            f"error output says why; {tmp_path / ckpt.LOG} how far it got): start it again with the "
                            "command that started it, --overwrite added")
    (tmp_path / ckpt.STATE).write_text("{}")   # a trained run's config.json deleted: not one to --overwrite
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.config_of(tmp_path, "--model-dir")
    assert str(e.value) == f"--model-dir {tmp_path}: config.json not found; give a directory written by nmt-train"
    (tmp_path / ckpt.STATE).unlink()
    (tmp_path / ckpt.LOCK).unlink()   # no train.lock: no directory of nmt-train's
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.config_of(tmp_path, "--model-dir")
    assert str(e.value) == f"--model-dir {tmp_path}: config.json not found; give a directory written by nmt-train"


def test_a_run_killed_as_it_saved_its_first_checkpoint_is_not_said_to_have_none(tmp_path):
    """A run killed after its first step checkpoint (params, trainer states, manifest) and before params.best and
    state.json was said to hold "no checkpoint yet ... nmt-train writes the first at its first validation", and
    `--checkpoint latest` was refused, while --resume goes on from that checkpoint."""
    d = _model_dir(tmp_path, steps=(10,), best=10, record_best=True)
    for name in (ckpt.STATE, ckpt.PARAMS_BEST, manifest.manifest_name("best")):
        (d / name).unlink()
    assert ckpt.params_path(d, "latest").name == ckpt.params_file(10)
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.params_path(d, "best")
    assert str(e.value) == (f"{d / ckpt.PARAMS_BEST} not found in model directory {d}; it held step 10, the best on "
                            f"dev: use --checkpoint 10, the same parameters (nmt-train --resume writes params.best "
                            f"again from {ckpt.params_file(10)})")
    (d / manifest.manifest_name(manifest.step_key(10))).unlink()   # (the step's files without what makes them whole)
    (d / ckpt.params_file(10)).unlink()
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.params_path(d, "best")
    assert "holds no checkpoint (no state.json, no params.best): its run ended" in str(e.value)


@pytest.mark.parametrize("how", HOW)
def test_a_damaged_manifest_is_named(tmp_path, how):
    d = _model_dir(tmp_path)
    _damage(d / manifest.manifest_name("best"), how)
    with pytest.raises(ckpt.CheckpointError, match=r"manifest\.best\.json (is damaged|is missing)"):
        ckpt.params_path(d, "best")


def test_averaging_verifies_its_inputs_and_writes_a_manifest(tmp_path):
    d = _model_dir(tmp_path)
    ckpt.average_checkpoints(d, [ckpt.params_file(20), ckpt.params_file(30)])
    assert mx.nd.load(str(ckpt.params_path(d, "avg")))["w"].asnumpy()[0] == 25.0
    # params.avg renamed into place, its manifest not yet written (a kill between): what mends it is said
    (d / ckpt.PARAMS_AVG).write_bytes((d / ckpt.params_file(30)).read_bytes())
    with pytest.raises(ckpt.CheckpointError, match=r"params.avg is corrupted: .*; nmt-train --resume --average-last N "
                                                   "averages the last N kept checkpoints into it again"):
        ckpt.verify_params(d / ckpt.PARAMS_AVG)
    (d / manifest.manifest_name("avg")).unlink()   # the first averaging's: no manifest yet
    with pytest.raises(ckpt.CheckpointError, match=r"manifest.avg.json is missing, .*; nmt-train --resume "
                                                   "--average-last N averages"):
        ckpt.verify_params(d / ckpt.PARAMS_AVG)
    _damage(d / ckpt.params_file(20), "flip")
    with pytest.raises(ckpt.CheckpointError, match="params.00000020 is corrupted"):
        ckpt.average_checkpoints(d, [ckpt.params_file(20), ckpt.params_file(30)])


def test_no_intact_checkpoint_is_a_clear_error(tmp_path):
    d = _model_dir(tmp_path / "a b")   # (named as a shell word: the advice is a command)
    for step in (10, 20, 30):
        _damage(d / ckpt.params_file(step), "truncate")
    with pytest.raises(ckpt.CheckpointError, match="no intact checkpoint.*step 30.*step 20.*step 10") as e:
        resume_state(d)
    # its best parameters are intact: the advice was "restore the files from a backup or start a new run with
    # --overwrite", which deletes them (and they translate; a fine-tune goes on from them)
    assert str(e.value).endswith(f"; restore the files from a backup; its best parameters still translate, and "
                                 f"--init-from '{d}' goes on from them in a new --model-dir; --overwrite starts a new "
                                 "run there, deleting them")
    _damage(d / ckpt.PARAMS_BEST, "flip")   # (damaged too: no such advice)
    with pytest.raises(ckpt.CheckpointError, match=r"\); restore the files from a backup; --overwrite starts a new "
                                                   "run there, deleting them$"):
        resume_state(d)


def test_manifest_lists_sizes_and_hashes_and_pruning_removes_old_ones(tmp_path):
    d = _model_dir(tmp_path, steps=(10, 20, 30, 40))
    assert manifest.step_keys(d) == [40, 30, 20]   # keep_last=3
    body = json.loads((d / manifest.manifest_name("00000040")).read_text())
    assert set(body["files"]) == {ckpt.params_file(40), ckpt.trainer_states_file(40), "spm.en.model", "spm.ko.model"}
    assert body["state"]["step"] == 40 and len(body["files"]["spm.ko.model"]["sha256"]) == 64
    assert not (d / ckpt.params_file(10)).exists() and not (d / ckpt.trainer_states_file(10)).exists()


def test_a_directory_without_manifests_is_refused_not_loaded_unverified(tmp_path):
    """A directory whose manifests were deleted (or one an earlier version wrote) was loaded unverified: a damaged
    params.best translated and resumed without a word. Every load refuses it now, saying what to do."""
    d = _model_dir(tmp_path)
    for p in d.glob("manifest.*.json"):
        p.unlink()
    says = rf"^{d} has no checkpoint manifests \(manifest.\*.json, .*; restore them from a copy, or train it again$"
    for load in (resume_state, lambda d: ckpt.params_path(d, "best"), lambda d: ckpt.params_path(d, "latest"),
                 lambda d: ckpt.params_path(d, "30")):
        with pytest.raises(ckpt.CheckpointError, match=says):
            load(d)
    (d / ckpt.EXPORT).write_text("{}")
    with pytest.raises(ckpt.CheckpointError, match=r"restore them from a copy, or export it again \(nmt-export"):
        ckpt.params_path(d, "best")



def test_the_best_checkpoints_step_finds_params_best_after_its_own_file_was_pruned(tmp_path):
    """`--checkpoint 20` said "params.00000020 not found" although params.best holds step 20."""
    d = _model_dir(tmp_path, steps=(10, 20, 30, 40, 50), best=20)   # keep_last=3 pruned step 20's own file
    state = ckpt.TrainState.load(d)
    state.best_step = 20
    state.save(d)
    assert not (d / ckpt.params_file(20)).exists()
    assert ckpt.params_path(d, "20").name == ckpt.PARAMS_BEST
    from nmt.scoring import checkpoint_info   # what nmt-evaluate records its scores under
    assert checkpoint_info(d, "20") == {"params_file": ckpt.PARAMS_BEST, "step": 20,
                                        "sha256": manifest.sha256_of(d / ckpt.PARAMS_BEST)}
    with pytest.raises(ckpt.CheckpointError, match=r"params.00000010 not found .*the steps kept there: 30, 40, 50$"):
        ckpt.params_path(d, "10")


def test_a_deleted_best_with_its_manifest_is_not_replaced_by_the_latest(tmp_path, caplog):
    """With params.best and manifest.best.json both gone, the latest checkpoint was loaded, scored and recorded as
    "best", with the warning "no checkpoint validated yet (... stopped before its first validation)", where the
    training state names the best of step 20; a resume warned of nothing. Now an error says what to use instead, and
    a resume writes params.best again from its step's checkpoint. The advice had been to copy that step's files and
    manifest, whose manifest names them, not params.best: the best broke once --keep-last pruned the step."""
    d = _model_dir(tmp_path, steps=(10, 20, 30), best=20)
    state = ckpt.TrainState.load(d)
    state.best_step = 20
    state.save(d)
    best = (d / ckpt.PARAMS_BEST).read_bytes()
    (d / ckpt.PARAMS_BEST).unlink()
    (d / manifest.manifest_name("best")).unlink()
    advice = "use --checkpoint 20, the same parameters (nmt-train --resume writes params.best again from " \
             "params.00000020)"
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.params_path(d, "best")
    assert str(e.value).endswith(f"params.best not found in model directory {d}; it held step 20, the best on dev: "
                                 f"{advice}")
    with caplog.at_level("WARNING", logger="nmt.checkpoint"):
        check_kept_files(d)
    assert f"--resume: {d / ckpt.PARAMS_BEST} is missing; written again from params.00000020, the same parameters" \
        in caplog.text
    assert (d / ckpt.PARAMS_BEST).read_bytes() == best and ckpt.params_path(d, "best").name == ckpt.PARAMS_BEST
    (d / manifest.manifest_name("best")).unlink()   # the manifest alone: no advice was given
    with pytest.raises(ckpt.CheckpointError, match=f"manifest.best.json is missing, .*; {re.escape(advice)}$"):
        ckpt.params_path(d, "best")
    check_kept_files(d)
    for name in (ckpt.params_file(20), manifest.manifest_name(manifest.step_key(20))):   # deleted by hand (the run
        (d / name).unlink()   # keeps step 20: --keep-last did not prune it)
    assert ckpt.params_path(d, "best").name == ckpt.PARAMS_BEST   # its own manifest: unharmed
    (d / ckpt.PARAMS_BEST).unlink()   # now nothing to write it from, which the advice says
    with pytest.raises(ckpt.CheckpointError, match="it held step 20, the best on dev: params.00000020, the step's own "
                                                   r"copy, was deleted \(not by --keep-last: the run keeps that step\), so "
                                                   "the best parameters are lost: use --checkpoint latest or a kept step, "
                                                   "or train again$"):
        ckpt.params_path(d, "best")
    caplog.clear()
    with caplog.at_level("WARNING", logger="nmt.checkpoint"):
        check_kept_files(d)
    assert "scoring its best at the end will fail: params.00000020, the step's own copy, was deleted (not by" \
        in caplog.text


def test_a_lost_bests_own_copy_is_said_as_what_became_of_it(tmp_path, caplog):
    """params.best lost, and its step's own copy too: the advice said "no longer kept (--keep-last)" also when that
    copy was deleted by hand, the run keeping the step (within --keep-last, or keeping all it saved). Each case is
    now said as it is: pruned by --keep-last, deleted by other means, damaged, or (no training state) missing."""
    d = _model_dir(tmp_path, steps=(10, 20, 30, 40, 50), best=20, record_best=True)   # --keep-last 3: 30, 40, 50
    (d / ckpt.PARAMS_BEST).unlink()
    assert "params.00000020, the step's own copy, is no longer kept (--keep-last), so the best parameters are " \
        "lost: use --checkpoint 50 (a kept step)" in restore_best(d, 20, lambda s: f"--checkpoint {s}")
    (d / ckpt.params_file(40)).unlink()   # a step the run keeps: deleted by hand
    assert restore_best(d, 40).startswith("params.00000040, the step's own copy, was deleted (not by --keep-last: "
                                          "the run keeps that step), so the best parameters are lost")
    (d / ckpt.STATE).write_text("{}")   # state.json no help: the newest checkpoint's state tells the same
    assert lost_best.own_copy(d, 40) == "was deleted (not by --keep-last: the run keeps that step)"
    assert lost_best.own_copy(d, 20) == "is no longer kept (--keep-last)"
    for name in d.glob("manifest.000*.json"):   # nothing tells which steps the run keeps
        name.unlink()
    assert lost_best.own_copy(d, 40) == "is missing" and lost_best.own_copy(d, 20) == "is missing"
    _damage(d / ckpt.params_file(50), "flip")
    assert lost_best.own_copy(d, 50) == "is damaged"
    d = _model_dir(tmp_path / "resumed", steps=(10, 20, 30, 40), best=10, record_best=True)   # keeps 20, 30, 40
    (d / ckpt.PARAMS_BEST).write_bytes((d / ckpt.params_file(30)).read_bytes())   # (intact, of step 30)
    manifest.write_manifest(d, "best", [ckpt.PARAMS_BEST], 30)
    state = ckpt.TrainState.load(d)
    state.best_step = 20   # the run's best: step 20, which it keeps (20, 30, 40)
    state.save(d)
    (d / ckpt.params_file(20)).unlink()
    with caplog.at_level("WARNING", logger="nmt.checkpoint"):
        check_kept_files(d, state=state)
    assert ("params.00000020 was deleted (not by --keep-last: the run keeps that step), so params.best stays, with "
            "step 30's parameters") in caplog.text, caplog.text


def test_the_best_step_is_found_with_state_json_and_the_bests_manifest_damaged(tmp_path, caplog):
    """manifest.best.json gone and state.json emptied: neither told the best step, so decoding advised "restore it
    from a copy" and --resume did not write params.best again, though the checkpoints' manifests name it."""
    d = _model_dir(tmp_path, record_best=True)
    (d / manifest.manifest_name("best")).unlink()
    (d / ckpt.STATE).write_text("{}")
    assert ckpt.best_step(d) == 20
    with pytest.raises(ckpt.CheckpointError, match="use --checkpoint 20, the same parameters"):
        ckpt.params_path(d, "best")
    with caplog.at_level("WARNING", logger="nmt.checkpoint"):
        resume_state(d)
    assert "written again from params.00000020, the same parameters" in caplog.text
    assert "--checkpoint" not in caplog.text   # (nmt-train's own warning advised a flag nmt-train has not)
    assert ckpt.params_path(d, "best").read_bytes() == (d / ckpt.params_file(20)).read_bytes()


def test_a_best_older_than_the_resumed_checkpoints_is_written_again(tmp_path, caplog):
    """Killed after a new best's step manifest, before params.best: the resume kept the old params.best (step 20)
    where its checkpoint (step 30) names step 30 the best."""
    d = _model_dir(tmp_path, record_best=True)
    state = ckpt.TrainState(**manifest.read_manifest(d, "00000030")["state"])
    state.best_step = 30
    manifest.write_manifest(d, "00000030", [ckpt.params_file(30), ckpt.trainer_states_file(30)], 30, vars(state))
    with caplog.at_level("WARNING", logger="nmt.checkpoint"):
        assert resume_state(d).step == 30
    assert "params.best is of step 20, not of step 30, the best where the run resumes at step 30" in caplog.text
    assert (d / ckpt.PARAMS_BEST).read_bytes() == (d / ckpt.params_file(30)).read_bytes() and ckpt.best_step(d) == 30


def test_a_best_written_past_the_resumed_checkpoint_is_written_again(tmp_path, caplog):
    """A run killed between a new best's files and its step's manifest left a params.best (and manifest) of step 40
    where the run resumes from step 30 with its best at step 20: the resume kept it, scored it as the best and
    nmt-export shipped it as step 40's."""
    d = _model_dir(tmp_path, record_best=True)
    (d / ckpt.PARAMS_BEST).write_bytes((d / ckpt.params_file(30)).read_bytes())   # (other parameters)
    manifest.write_manifest(d, "best", [ckpt.PARAMS_BEST], 40)
    with caplog.at_level("WARNING", logger="nmt.checkpoint"):
        assert resume_state(d).step == 30
    assert "params.best is of step 40, not of step 20, the best where the run resumes at step 30" in caplog.text
    assert (d / ckpt.PARAMS_BEST).read_bytes() == (d / ckpt.params_file(20)).read_bytes() and ckpt.best_step(d) == 20


def test_a_best_past_a_damaged_newest_checkpoint_is_kept_and_said_so(tmp_path, caplog):
    """The newest checkpoint (step 40, also params.best) damaged, the run's best before it (step 10) pruned: the
    resume said "a run killed while saving" and that scoring its best at the end "will fail", advising
    --checkpoint 40, the damaged step; params.best (intact, step 40's) was then scored as the best."""
    d = _model_dir(tmp_path, steps=(10, 20, 30, 40), best=10, record_best=True)   # keeps 20, 30, 40
    (d / ckpt.PARAMS_BEST).write_bytes((d / ckpt.params_file(40)).read_bytes())
    manifest.write_manifest(d, "best", [ckpt.PARAMS_BEST], 40)
    _damage(d / ckpt.params_file(40), "truncate")
    with caplog.at_level("WARNING", logger="nmt.checkpoint"):
        assert resume_state(d).step == 30
    assert ("params.best is of step 40, not of step 10, the best where the run resumes at step 30 (a run killed while "
            "saving, or a newer checkpoint damaged); params.00000010 is no longer kept (--keep-last), so params.best "
            "stays, with step 40's parameters, until the run finds a new best") in caplog.text
    assert "will fail" not in caplog.text and ckpt.best_step(d) == 40
    assert "use --checkpoint 30 (a kept step)" in restore_best(d, 10, lambda s: f"--checkpoint {s}")


def test_a_resume_removes_the_temporary_files_a_killed_save_left(tmp_path, caplog):
    """A run killed while writing a checkpoint's parameters left .params.000000NN.tmp (as large as a checkpoint) that
    no later run removed: a resume never saves that step again, and pruning deletes named files only."""
    d = _model_dir(tmp_path, steps=(10, 20, 30), best=20)
    left = [".params.00000040.tmp", ".trainer.00000040.states.tmp", ".params.best.tmp",
            ".manifest.00000040.json.0a1b2c3d.tmp", ".state.json.deadbeef.tmp", ".config.json.5c4c52bf.tmp",
            ".metrics.jsonl.0a1b2c3d.tmp"]   # (the last two a resume's rewrites: kept for good too)
    kept = [".scores.json.0a1b2c3d.tmp", ".notes.tmp", "params.00000040.tmp"]   # not (only) a trainer's
    for name in left + kept:
        (d / name).write_bytes(b"x")
    with caplog.at_level("INFO", logger="nmt.checkpoint"):
        assert resume_state(d).step == 30
    assert sorted(p.name for p in d.iterdir() if p.name in left + kept) == sorted(kept)
    assert "--resume: removed 7 temporary file(s) a run killed while saving left" in caplog.text


def test_a_resume_removes_a_killed_cache_writes_temporary_files_but_not_a_live_ones(tmp_path, caplog):
    """A run killed (kill -9) while writing the encoded corpus left .encoded.*.tmp files (as large as the arrays) that
    no resume removed. A --dry-run --resume writes the cache without the directory's lock, so a file its writer
    holds stays, and so does an empty one made a moment ago (its writer's, before it locks it)."""
    import os
    import numpy as np
    from nmt.atomic import JUST_MADE
    from nmt.encoded import _written
    d = _model_dir(tmp_path, steps=(10, 20), best=20)
    killed, young = (d / f".encoded.0123456789abcdef.{name}.tmp" for name in ("src.ids.npy.0a1b2c3d", "json.1a2b3c4d"))
    killed.write_bytes(b"x" * 100)   # (killed a moment ago: a resume started at once removes it too)
    young.write_bytes(b"")
    with _written(d / "encoded.fedcba9876543210.tgt.ids.npy", 80) as f:   # a live writer's, written to, not new
        np.save(f, np.arange(10, dtype=np.int32))
        f.flush()
        [live] = [p for p in d.glob(".encoded.fedcba9876543210.*.tmp")]
        os.utime(live, (os.path.getmtime(live) - 2 * JUST_MADE,) * 2)
        with caplog.at_level("INFO", logger="nmt.checkpoint"):
            assert resume_state(d).step == 20
        assert live.exists() and young.exists() and not killed.exists()
    assert np.load(d / "encoded.fedcba9876543210.tgt.ids.npy").tolist() == list(range(10))   # (renamed into place)
    assert f"--resume: removed 1 temporary file(s) a run killed while saving left: {killed.name}" in caplog.text


def test_a_directory_without_its_training_state_takes_its_latest_from_the_manifests(tmp_path):
    """With state.json deleted (or not copied), `nmt-translate --checkpoint latest` said "holds no checkpoint to
    resume from; start without --resume", a flag nmt-translate does not have; then that there was no latest, where
    --resume found it in the checkpoints' manifests. Without manifests either, the directory is refused."""
    d = _model_dir(tmp_path, steps=(10, 20, 30), best=20)
    state = (d / ckpt.STATE).read_text()
    for damaged in ("{}", state[:40]):   # a damaged one too ("the training state names no checkpoint file")
        (d / ckpt.STATE).write_text(damaged)
        assert ckpt.params_path(d, "latest").name == ckpt.params_file(30)
    (d / ckpt.STATE).unlink()
    _damage(d / ckpt.params_file(30), "flip")   # the newest intact, as --resume takes it
    assert ckpt.params_path(d, "latest").name == ckpt.params_file(20) and not (d / ckpt.STATE).exists()
    for m in d.glob("manifest.*.json"):
        m.unlink()
    for state in (None, "{}"):
        if state:
            (d / ckpt.STATE).write_text(state)
        with pytest.raises(ckpt.CheckpointError, match=f"^{d} has no checkpoint manifests"):
            ckpt.params_path(d, "latest")


def _exported(tmp_path, made: str) -> Path:
    """A model directory of steps 10, 20, 30 (best 20) made into what nmt-export writes: params.best, its manifest and
    an export.json holding `made`."""
    d = _model_dir(tmp_path, steps=(10, 20, 30), best=20)
    for p in list(d.glob("params.0*")) + list(d.glob("trainer.*")) + list(d.glob("manifest.0*")) + [d / ckpt.STATE]:
        p.unlink()
    (d / ckpt.EXPORT).write_text(made)
    return d


def test_an_export_has_no_latest_checkpoint_and_knows_the_step_of_its_own(tmp_path):
    """`nmt-translate --checkpoint latest` on an nmt-export directory said "holds no checkpoint to resume from;
    start without --resume", a flag nmt-translate does not have; `--checkpoint avg` to make one with --resume."""
    d = _exported(tmp_path, "{}")
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.params_path(d, "latest")
    ensembles = " (an ensemble's members: export each from the same checkpoint)"
    assert str(e.value) == (f"{d} was written by nmt-export: it holds one checkpoint, params.best, and no latest; "
                            "use --checkpoint best" + ensembles)
    with pytest.raises(ckpt.CheckpointError) as e:   # (it said to average into it with `nmt-train --resume`)
        ckpt.params_path(d, "avg")
    assert str(e.value) == (f"{d} was written by nmt-export: it holds one checkpoint, params.best, and no avg; "
                            "use --checkpoint best" + ensembles)
    # an export of an average is that average: --checkpoint avg of an ensemble of it and a training directory
    (d / ckpt.EXPORT).write_text('{"checkpoint": "avg", "model_dir": "/runs/b"}')
    assert ckpt.params_path(d, "avg") == d / ckpt.PARAMS_BEST
    with pytest.raises(ckpt.CheckpointError, match=r"holds one checkpoint, params.best \(checkpoint avg of /runs/b\), "
                                                   "and no latest; "):
        ckpt.params_path(d, "latest")
    assert ckpt.params_path(d, "20").name == ckpt.PARAMS_BEST


def test_another_step_of_an_export_names_the_one_it_holds(tmp_path):
    """`nmt-translate --model-dir M --checkpoint 400 --ensemble EXPORT` (an export of step 600) said "params.00000400
    not found ...; it keeps no step's parameters", as if no step would do, when its step 600 (or best) does."""
    d = _exported(tmp_path, '{"checkpoint": "best", "model_dir": "/runs/a", "step": 20}')
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.params_path(d, "30")
    assert str(e.value) == (f"{d} was written by nmt-export: it holds one checkpoint, params.best (checkpoint best of "
                            "/runs/a), and no step 30; use --checkpoint best (step 20) (an ensemble's members: export "
                            "each from the same checkpoint)")
    assert ckpt.params_path(d, "20") == ckpt.params_path(d, "best") == d / ckpt.PARAMS_BEST
    (d / "manifest.best.json").write_text("{broken")   # its own step, of a damaged manifest: that is what is said
    for which in ("20", "best"):   # (not "no step 20; use --checkpoint best (step 20)")
        with pytest.raises(ckpt.CheckpointError, match=r"manifest\.best\.json is damaged"):
            ckpt.params_path(d, which)


class _Killed(BaseException):
    """A SIGKILL at that line, as far as the files are concerned."""


def test_a_run_killed_before_the_new_bests_manifest_keeps_the_best_in_its_steps_files(tmp_path, monkeypatch):
    """params.best was replaced before its step's own files had their manifest: killed before manifest.best.json
    (with --keep-last 1 having pruned the old best's step), the best parameters were "lost"; a resume went on from
    the step before. The step's checkpoint now comes first: the advice names it, and a resume writes params.best
    again from it."""
    from nmt.resume import check_kept_files
    d = _model_dir(tmp_path, steps=(10, 15), best=10, record_best=True)
    for name in (ckpt.params_file(10), ckpt.trainer_states_file(10), manifest.manifest_name("00000010")):
        (d / name).unlink()   # pruned by --keep-last 1
    state = ckpt.TrainState(**manifest.read_manifest(d, "00000015")["state"])
    state.step, state.best_step, write = 20, 20, manifest.write_manifest

    def killed(model_dir, key, *args, **kwargs):
        if key == "best":
            raise _Killed()
        return write(model_dir, key, *args, **kwargs)
    monkeypatch.setattr(manifest, "write_manifest", killed)
    with pytest.raises(_Killed):
        ckpt.save_checkpoint(d, _Net(20.0), _Trainer(), state, keep_last=1, is_best=True)
    monkeypatch.undo()
    with pytest.raises(ckpt.CheckpointError, match=r"params.best .*; use --checkpoint 20, the same parameters"):
        ckpt.params_path(d, "best")
    resumed = resume_state(d)
    assert resumed.step == 20
    check_kept_files(d, state=resumed)
    assert ckpt.params_path(d, "best").name == ckpt.PARAMS_BEST and ckpt.best_step(d) == 20


def test_a_lost_best_whose_step_is_gone_too_is_not_said_to_be_an_older_step(tmp_path):
    """params.best damaged, and its step's checkpoint (the newest) deleted or damaged too: the advice named the best
    the older intact checkpoint had known, "use --checkpoint 20, the same parameters", which were not (params.best
    held step 30's). A run killed as it wrote params.best still gets its new best's step (the test above)."""
    d = _model_dir(tmp_path, steps=(10, 20), best=20, record_best=True)
    state = ckpt.TrainState(**manifest.read_manifest(d, "00000020")["state"])
    state.step, state.best_step = 30, 30   # a new best, after step 20's (whose state names best 20)
    ckpt.save_checkpoint(d, _Net(30.0), _Trainer(), state, keep_last=3, is_best=True)
    _damage(d / ckpt.PARAMS_BEST, "flip")
    _damage(d / manifest.manifest_name("00000030"), "delete")
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.params_path(d, "best")
    assert str(e.value).endswith("params.00000030, the step's own copy, is damaged, so the best parameters are lost: "
                                 "use --checkpoint latest or a kept step, or train again"), str(e.value)
    _damage(d / ckpt.params_file(30), "delete")   # (by hand: the run keeps step 30)
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.params_path(d, "best")
    assert str(e.value).endswith("params.00000030, the step's own copy, was deleted (not by --keep-last: the run keeps "
                                 "that step), so the best parameters are lost: use --checkpoint latest or a kept step, "
                                 "or train again")
    assert ckpt.best_step(d) == ckpt.best_step(d, newest=True) == 30


def test_latest_is_the_newest_intact_checkpoint_as_a_resume_takes_it(tmp_path):
    """Killed between a step's manifest and state.json (written last), `--checkpoint latest` took the step before
    from state.json, where --resume goes on from the newer step, intact in its manifest."""
    d = _model_dir(tmp_path)
    ckpt.TrainState(**manifest.read_manifest(d, "00000020")["state"]).save(d)   # as before step 30's save
    assert ckpt.params_path(d, "latest").name == ckpt.params_file(30)
    assert resume_state(d).step == 30


def test_a_best_written_again_moves_the_scores_recorded_as_best_to_their_step(tmp_path):
    """A resume that wrote params.best again from the best step's checkpoint left the old best's test scores as
    best's: an export of the new best then carried them."""
    from nmt.scoring import read_scores, record_scores
    d = _model_dir(tmp_path, record_best=True)
    record_scores(d, "t", "best", {"bleu": 3.0, "step": 20, "checkpoint": "best", "params_file": ckpt.PARAMS_BEST})
    state = ckpt.TrainState(**manifest.read_manifest(d, "00000030")["state"])
    state.best_step = 30
    manifest.write_manifest(d, "00000030", [ckpt.params_file(30), ckpt.trainer_states_file(30)], 30, vars(state))
    resume_state(d)
    assert list(read_scores(d)["t"]) == ["20"] and ckpt.best_step(d) == 30


def test_latest_past_a_checkpoint_being_saved_is_no_warning(tmp_path, caplog):
    """Beside a training run, `--checkpoint latest` warned "the newest checkpoint is damaged" whenever the run was
    between a step's parameters and its manifest (hundreds of times a minute): a line of information, while a live
    process holds the directory's lock; with none, it is damaged. Quiet, neither. The lock is judged by its flock,
    not by the host and process train.lock names, which stay after a kill: a directory copied from another host (or
    a reused process id) said "being saved" of a save that would never end."""
    import json
    import os
    import subprocess
    import sys
    d = _model_dir(tmp_path)
    (d / ckpt.params_file(40)).write_bytes((d / ckpt.params_file(30)).read_bytes())
    hold = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(d / ckpt.LOCK)], stdout=subprocess.PIPE, text=True)
    try:
        for held, says in ((True, f"{d}: step 40 is being saved; the latest is step 30"),
                           (False, f"{d}: the newest checkpoint is damaged (step 40: ")):
            caplog.clear()
            if held:
                assert holder.stdout.readline() == "held\n"
            else:   # killed; its train.lock names another host, or a live process of this one
                holder.kill()
                holder.wait()
            for host, pid in ((("gpu-node-7", 12345), ("localhost", os.getppid())) if not held else [(None, None)]):
                if host:
                    (d / ckpt.LOCK).write_text(json.dumps({"host": host, "pid": pid, "since": "now"}))
                with caplog.at_level("INFO", logger="nmt.checkpoint"):
                    for quiet in (True, False):
                        assert ckpt.params_path(d, "latest", quiet=quiet).name == ckpt.params_file(30)
                assert caplog.text.count(says) == 1 and ("WARNING" in caplog.text) != held, caplog.text
                caplog.clear()
    finally:
        holder.kill()
        holder.wait()
    (d / ckpt.LOCK).unlink()
    with caplog.at_level("INFO", logger="nmt.checkpoint"):
        assert ckpt.params_path(d, "latest").name == ckpt.params_file(30)
    assert "the newest checkpoint is damaged" in caplog.text


def test_a_resume_prunes_what_a_save_killed_before_its_state_left(tmp_path, caplog):
    """A run killed after its newest checkpoint's manifest, before its state.json and pruning, kept a checkpoint
    more than --keep-last for good: a resume that makes no update saves nothing that would prune it."""
    d = _model_dir(tmp_path, steps=(10, 20, 30), best=20)
    names = [ckpt.params_file(10), ckpt.trainer_states_file(10), "manifest.00000010.json", ckpt.STATE]
    before = {name: (d / name).read_bytes() for name in names}
    state = ckpt.TrainState.load(d)
    state.step = 40
    ckpt.save_checkpoint(d, _Net(40.0), _Trainer(), state, keep_last=3, is_best=False)   # prunes step 10
    for name, data in before.items():   # as the kill left it: step 10's files, state.json naming 10, 20 and 30
        (d / name).write_bytes(data)
    stop = [ckpt.params_file(25), ckpt.trainer_states_file(25), "manifest.00000025.json"]   # a stop's, between
    for name, like in zip(stop, [ckpt.params_file(20), ckpt.trainer_states_file(20), "manifest.00000020.json"]):
        (d / name).write_bytes((d / like).read_bytes())
    with caplog.at_level("INFO", logger="nmt.checkpoint"):
        assert resume_state(d).step == 40
    assert not any((d / name).exists() for name in names[:3] + stop) and (d / ckpt.params_file(20)).exists()
    assert ckpt.TrainState.load(d).params_files == [ckpt.params_file(s) for s in (20, 30, 40)]   # (saved first)
    assert "--resume: removed the checkpoint(s) of step 10, 25, which --keep-last no longer keeps" in caplog.text


def test_a_run_killed_as_it_wrote_its_first_checkpoint_is_said_so(tmp_path):
    """Its params.N and optimizer states, without a manifest or state.json: --resume said the manifests "were
    deleted, or an earlier version of nmt wrote the directory ... restore them from a copy"."""
    d = _model_dir(tmp_path, steps=(10,), best=10)
    for p in [*d.glob("manifest.*.json"), d / ckpt.STATE]:
        p.unlink()
    with pytest.raises(ckpt.CheckpointError, match=r"the run stopped as it wrote its first checkpoint \(step 10: its "
                                                   r"files, without their manifest\), so there is nothing to resume"):
        resume_state(d)
