"""`nmt-train --dry-run`: validates configuration, data and model directory and says what it would train, without
training or writing to the model directory; every problem is a clear error naming the file or flag."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from nmt import checkpoint as ckpt
from nmt.cli import train_main
from tests.synth import write_task


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("synth"), n_train=300)


def args_for(task, model_dir: Path, *extra: str):
    files = [(f"--{k.replace('_', '-')}", task[k]) for k in ("train_src", "train_tgt", "dev_src", "dev_tgt",
                                                              "test_src", "test_tgt")]
    return [*(a for flag, path in files if flag not in extra for a in (flag, path)),   # (a file flag is given once)
            "--model-dir", str(model_dir), "--vocab-size", "400", "--embed-size", "16", "--hidden-size", "16",
            "--num-layers", "1", "--batch-size", "8", "--no-progress", "--no-eval", *extra]


def test_dry_run_describes_the_run_and_writes_nothing(tmp_path, task, capsys, monkeypatch):
    """It makes no model directory, and leaves nothing in the system's temporary directory, where it trains the
    tokenizers and encodes the corpus: what a dry run killed there left (kill -9 left it for good) it removes, not what
    a live dry run holds."""
    import fcntl
    import os
    import tempfile
    d, temp = tmp_path / "m", tmp_path / "temp"
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    killed, live = temp / "nmt-dry-run-killed01.tmp", temp / "nmt-dry-run-livelive.tmp"
    for left in (killed, live):
        left.mkdir(parents=True)
        (left / "spm.ko.model").write_bytes(b"x")
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)   # (its process goes on)
    try:
        assert train_main(args_for(task, d, "--dry-run")) == 0
    finally:
        os.close(held)
    assert [p.name for p in temp.iterdir()] == [live.name]
    out, err = capsys.readouterr()
    assert "train.en: kept 300 of 300 training pairs" in err   # each filter's drops, as training logs them
    for expected in ("model directory: ", "(new, writable, ", "300 training pairs", "40 dev pairs", "test (40)",
                     "vocabulary: ko ", "model: lstm, ", " parameters", "devices: cpu(0)", "batches per epoch: 41",
                     "nothing was trained"):
        assert expected in out, (expected, out)
    # the settings that decide what the run learns, which the dry run left out (and the training log too)
    for expected in ("model settings (lstm): embed_size 16, hidden_size 16, num_layers 1, attention dot, dropout 0.4",
                     "optimizer: adam, lr 0.002 after 400 warm-up updates, then inverse square root; label smoothing",
                     "batch: 8 sentences, seed 1", "validation: every 500 updates and at each epoch end, by dev bleu "
                     "(beam 1); early stop after 10 without gain; limits: max_epochs 60"):
        assert expected in out, (expected, out)
    assert not d.exists()
    assert train_main(args_for(task, d, "--dry-run", "--cpu-devices", "2", "--accum-steps", "3")) == 0
    assert "batch: 8 sentences in 3 micro-batches per device, seed 1" in capsys.readouterr().out   # (6 in all)
    assert train_main(args_for(task, d, "--max-steps", "1", "--lr-schedule", "plateau", "--patience", "0",
                               "--valid-max-sentences", "10")) == 0
    log = (d / "train.log").read_text(encoding="utf-8")
    assert "dev BLEU and chrF: on the first 10 of the 40 dev pairs (--valid-max-sentences); the loss on all" in log
    assert "INFO nmt.train: model settings (lstm): embed_size 16" in log
    assert "then halved after every 2 validations without gain" in log and "no early stop; limits: max_steps 1" in log


def test_a_temporary_directory_without_room_for_the_encoded_corpus_names_tmpdir(tmp_path, task, capsys, monkeypatch):
    """A dry run encodes the corpus in its temporary directory in $TMPDIR: without room there, the error said
    "--model-dir /tmp/nmt-dry-run-....tmp: ...; choose another --model-dir", a flag that does not choose it."""
    import tempfile
    from nmt import storage
    temp, free_bytes = tmp_path / "temp", storage.free_bytes
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr(storage, "free_bytes",
                        lambda path: 1000 if str(path).startswith(str(temp)) else free_bytes(path))
    assert train_main(args_for(task, tmp_path / "m", "--dry-run")) == 2
    err = capsys.readouterr().err
    found = re.search(r"\nerror: the temporary directory (.+?)/nmt-dry-run-\w+\.tmp: 1000 bytes free, too little for "
                      r"the encoded training corpus's arrays \(encoded\.[0-9a-f]{16}\.\*\.npy\) \(about ([\d.]+) KiB "
                      r"needed\); free some space there or set TMPDIR to a directory with about ([\d.]+) KiB free\n", err)
    assert found and "--model-dir" not in err.split("\nerror: ")[1], err
    assert found[1] == str(temp) and float(found[3]) > float(found[2])   # (room for the tokenizers written there too)
    assert not list(temp.iterdir()) and not (tmp_path / "m").exists()


def test_a_temporary_directory_too_full_for_the_tokenizers_names_tmpdir(tmp_path, task, capsys, monkeypatch):
    """A dry run publishes its tokenizers into its temporary directory in $TMPDIR: a full disk there said "cannot
    write .../nmt-dry-run-....tmp/spm.en.vocab: No space left on device ...; free some space or choose a directory on
    another disk" (on a 200 KiB tmpfs), the advice of a flag's directory, where TMPDIR alone chooses it."""
    import errno
    import os
    import tempfile
    from nmt import tokenizer
    from nmt.atomic import atomic_open
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))

    def full(src, dst):   # (the copy's write refused, as the disk fills)
        with atomic_open(dst, "wb"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(tokenizer, "atomic_copy", full)
    assert train_main(args_for(task, tmp_path / "m", "--dry-run")) == 2
    err = capsys.readouterr().err.split("\nerror: ")[-1]
    assert re.fullmatch(rf"the temporary directory {re.escape(str(temp))}/nmt-dry-run-\w+\.tmp: [\d.]+ \w+ free, too "
                        r"little for the tokenizers and, meanwhile, their training text; free some space there or set "
                        r"TMPDIR to a directory with more room\n", err), err
    assert not list(temp.iterdir()) and not (tmp_path / "m").exists()


def test_a_disk_as_large_as_the_dry_run_says_holds_the_run(tmp_path, task, capsys, monkeypatch):
    """The dry run's "about N needed" counted the checkpoints only, not the tokenizers and encoded corpus a run writes
    into the model directory first: on a disk of that size the dry run passed and the run was refused."""
    from nmt import preflight, storage
    d, reports, describe, free_bytes = tmp_path / "m", [], preflight.describe, storage.free_bytes
    monkeypatch.setattr(preflight, "describe", lambda report: reports.append(dict(report)) or describe(report))
    assert train_main(args_for(task, d, "--dry-run")) == 0 and not d.exists()
    size = reports[0]["disk_needed"]   # a disk of that size: what the run wrote is no longer free
    monkeypatch.setattr(storage, "free_bytes", lambda path: size - sum(
        f.stat().st_blocks * 512 for f in d.rglob("*") if f.is_file()) if str(path).startswith(str(d)) else
        free_bytes(path))
    capsys.readouterr()
    assert train_main(args_for(task, d, "--max-steps", "1")) == 0, capsys.readouterr().err
    monkeypatch.setattr(storage, "free_bytes", lambda path: size - 1 if str(path).startswith(str(tmp_path / "n")) else
                        free_bytes(path))   # (and one byte less is refused, naming what it is for)
    assert train_main(args_for(task, tmp_path / "n", "--dry-run")) == 2
    assert re.search(r"checkpoints of [\d.]+ KiB each .*, with the tokenizers, encoded corpus and small files "
                     r"\([\d.]+ MiB\) need about", capsys.readouterr().err)


def test_the_dry_runs_room_counts_every_data_file_a_run_writes_and_says_that_figure(tmp_path, task, capsys,
                                                                                     monkeypatch):
    """The 1 MiB the dry run adds for a run's small files hid a count of the tokenizers and encoded corpus that left
    them out, or counted them by their bytes (or half their blocks) rather than the blocks they take: the tiny task's
    fit in that 1 MiB, a real corpus's (tens of MiB encoded) do not, and the run is refused where the dry run passed.
    The figure the refusal says for them is that count; a resume's dry run counts none (they are there)."""
    from nmt import preflight, storage
    from nmt.storage import human_bytes
    counted, check, free_bytes = [], preflight.check_checkpoint_room, storage.free_bytes
    monkeypatch.setattr(preflight, "check_checkpoint_room",
                        lambda *a, **kw: counted.append(kw.get("data_bytes", 0)) or check(*a, **kw))
    assert train_main(args_for(task, tmp_path / "dry", "--dry-run")) == 0 and len(counted) == 1
    d = tmp_path / "m"
    assert train_main(args_for(task, d, "--max-steps", "1")) == 0, capsys.readouterr().err
    data = [f for f in d.iterdir() if f.is_file() and f.name.startswith(("spm.", "encoded."))]
    written = sum(f.stat().st_blocks * 512 for f in data)   # what the run wrote before its checkpoints
    assert len(data) >= 6 and counted[0] - (1 << 20) >= written, (counted, written, [f.name for f in data])
    counted.clear()   # a resume's dry run: those files are there already, and it writes them no more
    assert train_main(["--model-dir", str(d), "--resume", "--max-steps", "2", "--dry-run"]) == 0, \
        capsys.readouterr().err
    assert counted == [0]
    monkeypatch.setattr(storage, "free_bytes", lambda path: 1 if str(path).startswith(str(tmp_path / "n")) else
                        free_bytes(path))
    capsys.readouterr()
    assert train_main(args_for(task, tmp_path / "n", "--dry-run")) == 2
    err = capsys.readouterr().err
    assert f", with the tokenizers, encoded corpus and small files ({human_bytes(counted[-1])}) need about" in err, \
        (err, counted)


def test_a_run_on_relative_paths_resumes_and_evaluates_from_elsewhere(tmp_path, task, capsys, monkeypatch):
    """The data files' paths were saved as given, relative to where the run started: a resume or `nmt-evaluate
    --dev-set` from another directory said "train.ko: file not found"."""
    from nmt.cli_decode import evaluate_main
    from nmt.config import Config
    data = Path(task["train_src"]).parent
    relative = {k: Path(v).name for k, v in task.items() if k.endswith(("_src", "_tgt"))}
    monkeypatch.chdir(data)
    d = tmp_path / "m"
    assert train_main(args_for(relative, d, "--max-steps", "2", "--valid-every", "2")) == 0
    assert Config.load(d / ckpt.CONFIG).data.dev_src == str(data / relative["dev_src"])
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert train_main(["--model-dir", str(d), "--resume", "--max-steps", "4", "--no-progress", "--no-eval"]) == 0
    err = capsys.readouterr().err   # epochs counted one way: fractional from 0, the 1-based one named as such
    assert "resumed from step 2, epoch 0.05 (batch 2 of 41 of epoch 1)" in err
    validated = re.search(r"validation step 4 epoch ([\d.]+):", err).group(1)
    assert re.search(r"training stopped \(max_steps\) at step 4, epoch ([\d.]+);", err).group(1) == validated
    assert evaluate_main(["--model-dir", str(d), "--dev-set", "--no-save", "--max-sentences", "5"]) == 0
    assert "dev: 5 sentences" in capsys.readouterr().out


def test_dev_set_scores_only_the_pairs_the_run_validated_on(tmp_path, task, capsys):
    """After the run's files changed (a helper appended lines to the training files a dev set was held out of: 120 of
    its 500 pairs were new, 41 of them trained on), `nmt-evaluate --dev-set` scored the pairs drawn again as the run's
    dev set, without a word."""
    import shutil
    from nmt.cli_decode import evaluate_main
    files = {k: str(shutil.copy(v, tmp_path / Path(v).name)) for k, v in task.items()}
    d = tmp_path / "m"
    assert train_main(args_for(files, d, "--max-steps", "2", "--valid-every", "2")) == 0
    assert evaluate_main(["--model-dir", str(d), "--dev-set", "--no-save", "--max-sentences", "5"]) == 0
    capsys.readouterr()
    lines = Path(files["dev_src"]).read_text(encoding="utf-8").splitlines()
    Path(files["dev_src"]).write_text("\n".join(lines[1:] + lines[:1]) + "\n", encoding="utf-8")   # reordered
    assert evaluate_main(["--model-dir", str(d), "--dev-set", "--no-save", "--max-sentences", "5"]) == 2
    assert "--dev-set: the dev pairs read again from the model's data are not those its run validated on" in \
        capsys.readouterr().err


def test_a_held_out_dev_set_changed_by_the_test_files_names_them(tmp_path, capsys):
    """A held-out dev set leaves out pairs of the test set: after an edit of the test files alone, --resume and
    --dev-set blamed "the dev pairs (held out of the training files) ... they changed" and "its training or dev
    files", files the user never touched."""
    from nmt.cli_decode import evaluate_main
    files = write_task(tmp_path / "data", n_train=1100)   # (500 held out)
    d = tmp_path / "m"
    argv = [a for k in ("train_src", "train_tgt", "test_src", "test_tgt") for a in (f"--{k.replace('_', '-')}",
                                                                                  files[k])]
    assert train_main([*argv, "--model-dir", str(d), "--vocab-size", "400", "--embed-size", "16", "--hidden-size",
                       "16", "--num-layers", "1", "--batch-size", "8", "--no-progress", "--no-eval",
                       "--max-steps", "2", "--valid-every", "2"]) == 0
    train = [Path(files[k]).read_text(encoding="utf-8").splitlines() for k in ("train_src", "train_tgt")]
    for k, lines in zip(("test_src", "test_tgt"), train):   # the first test pair: a training pair now
        test = Path(files[k]).read_text(encoding="utf-8").splitlines()
        Path(files[k]).write_text("\n".join([lines[0], *test[1:]]) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert train_main(["--model-dir", str(d), "--resume", "--max-steps", "4", "--no-progress", "--no-eval"]) == 2
    assert ("the dev pairs (held out of the training files) are not those the run validated on until now: they, or "
            "the training or test files they are drawn from (a held-out dev set leaves out pairs of the test set), "
            "changed since it started") in capsys.readouterr().err
    assert evaluate_main(["--model-dir", str(d), "--dev-set", "--no-save"]) == 2
    assert "its training, dev or test files (a held-out dev set leaves out pairs of the test set)" in \
        capsys.readouterr().err


def test_a_resume_on_too_few_pairs_to_hold_out_dev_is_refused_as_other_data(tmp_path, capsys):
    """A run on training files alone holds 500 dev pairs out of them; `--resume --train-src small.ko --train-tgt
    small.en` (100 pairs) was refused as "100 training pairs after cleaning, too few to hold out 500 for dev; give a
    dev set with --dev-src/--dev-tgt", which a resume cannot do, before the check that they are not the run's data."""
    files = write_task(tmp_path / "data", n_train=1100)   # (500 held out)
    d = tmp_path / "m"
    assert train_main(["--train-src", files["train_src"], "--train-tgt", files["train_tgt"], "--model-dir", str(d),
                       "--vocab-size", "400", "--embed-size", "16", "--hidden-size", "16", "--num-layers", "1",
                       "--batch-size", "8", "--no-progress", "--no-eval", "--max-steps", "1", "--valid-every", "1"]) == 0
    small = {}
    for k in ("train_src", "train_tgt"):
        small[k] = tmp_path / f"small.{files[k].rsplit('.', 1)[1]}"
        small[k].write_text("".join(Path(files[k]).read_text(encoding="utf-8").splitlines(True)[:100]),
                            encoding="utf-8")
    capsys.readouterr()
    for dry in ([], ["--dry-run"]):
        assert train_main(["--model-dir", str(d), "--resume", "--no-progress", "--train-src", str(small["train_src"]),
                           "--train-tgt", str(small["train_tgt"]), *dry]) == 2
        err = capsys.readouterr().err
        assert (f"--resume: the training pairs ({small['train_src']} and {small['train_tgt']}) are not those the run "
                "trained on until now (100 after cleaning: the run had 1001 or more): they, or the dev or test files")\
            in err and "too few to hold out" not in err, err
    assert ckpt.TrainState.load(d).step == 1


def test_a_vocabulary_too_small_for_both_languages_names_both_needs(tmp_path, task, capsys):
    """--vocab-size 300 was "too small for the en tokenizer: ... need at least 334", and 334 then "too small for the
    ko tokenizer: ... need at least 1203": one size for both languages, asked one language at a time."""
    assert train_main(args_for(task, tmp_path / "m", "--dry-run", "--vocab-size", "20")) == 2
    err = capsys.readouterr().err
    needs = re.search(r"--vocab-size 20 is too small for both tokenizers: their characters and the 256 byte-fallback "
                      r"pieces need at least (\d+) \(ko\) and (\d+) \(en\); raise --vocab-size to at least (\d+)",
                      err)
    assert needs and int(needs[3]) == max(int(needs[1]), int(needs[2])), err
    assert train_main(args_for(task, tmp_path / "m", "--dry-run", "--vocab-size", needs[3])) == 0


@pytest.mark.parametrize("shared", [False, True])
def test_a_vocabulary_too_small_for_one_tokenizer_says_the_flag(tmp_path, task, capsys, shared):
    """One side too small said "vocab_size N is too small", the Python argument's name, where both sides said
    --vocab-size, the flag the user gave."""
    flags = ["--shared-vocab"] if shared else []
    assert train_main(args_for(task, tmp_path / "m", "--dry-run", "--vocab-size", "20", *flags)) == 2
    both = re.search(r"need at least (\d+) \(ko\) and (\d+) \(en\)", capsys.readouterr().err)
    size = str(min(int(both[1]), int(both[2])) if not shared else 20)   # (one side's need: the other's too small)
    assert train_main(args_for(task, tmp_path / "m", "--dry-run", "--vocab-size", size, *flags)) == 2
    which = "joint (ko and en, --shared-vocab)" if shared else "ko" if int(both[1]) > int(both[2]) else "en"
    need = re.search(rf"^error: --vocab-size {size} is too small for the {re.escape(which)} tokenizer: its characters "
                     r"and the 256 byte-fallback pieces need at least (\d+); raise --vocab-size to at least (\d+)\n",
                     capsys.readouterr().err, re.M)
    assert need and need[1] == need[2], need
    assert train_main(args_for(task, tmp_path / "m", "--dry-run", "--vocab-size", need[1], *flags)) == 0


def test_a_dev_set_that_is_the_test_set_is_warned_of(tmp_path, task, capsys):
    """The same files as --dev-src/--dev-tgt and --test-src/--test-tgt (a first-day slip) trained without a word,
    the best checkpoint and early stopping chosen on the test sentences."""
    assert train_main(args_for(task, tmp_path / "m", "--dry-run")) == 0
    assert "share a side with pairs of the test set" not in capsys.readouterr().err
    same = ["--test-src", task["dev_src"], "--test-tgt", task["dev_tgt"]]
    assert train_main(args_for(task, tmp_path / "m", "--dry-run", *same)) == 0
    assert (f"--dev-src {task['dev_src']} / --dev-tgt {task['dev_tgt']}: 40 of the 40 dev pairs share a side with "
            "pairs of the test set: the best checkpoint and early stopping are chosen on its sentences, so its scores "
            "overstate the model") in capsys.readouterr().err


def test_a_batch_smaller_than_its_shares_is_warned_of_by_the_dry_run(tmp_path, task, capsys):
    """--batch-size 2 --cpu-devices 3: the dry run said the run was valid, and the run itself then warned that a
    share computes on padding."""
    assert train_main(args_for(task, tmp_path / "m", "--dry-run", "--batch-size", "2", "--cpu-devices", "3")) == 0
    assert ("--batch-size 2 is split into 3 shares (3 devices x 1 micro-batches x 1 workers): 1 of them get no "
            "sentence and compute on padding") in capsys.readouterr().err


def test_a_resume_without_the_runs_config_json_is_refused_before_anything(tmp_path, task, capsys):
    """--resume in a directory whose config.json is gone: the dry run checked the default recipe instead of the
    run's data and called it valid; the run failed later on the missing file. A directory in its place is said to
    be one, as nmt-translate says it (it was "not found", and results_table's "no config.json")."""
    d = tmp_path / "m"
    assert train_main(args_for(task, d, "--max-steps", "2", "--valid-every", "2")) == 0
    (d / ckpt.CONFIG).unlink()
    capsys.readouterr()
    for dry in (["--dry-run"], []):
        assert train_main(["--model-dir", str(d), "--resume", "--no-progress", *dry]) == 2
        assert f"error: --resume: {d / ckpt.CONFIG} not found: a run resumes with the settings it was started " \
               "with" in capsys.readouterr().err
    (d / ckpt.CONFIG).mkdir()   # a directory in its place was "not found" too (nmt-translate says what it is)
    for dry in (["--dry-run"], []):
        assert train_main(["--model-dir", str(d), "--resume", "--no-progress", *dry]) == 2
        assert f"error: --resume: {d / ckpt.CONFIG} is a directory, not a file: a run resumes with the settings it " \
               "was started with" in capsys.readouterr().err
    from scripts.runs import ResultsError, load_run   # and results_table said "no config.json"
    with pytest.raises(ResultsError, match="its config.json is a directory, not the file of the run's settings"):
        load_run(d)


def test_dry_run_checks_the_model_directory(tmp_path, task, capsys):
    d = tmp_path / "m"
    assert train_main(args_for(task, d, "--max-steps", "4", "--valid-every", "2")) == 0
    capsys.readouterr()
    assert train_main(args_for(task, d, "--dry-run")) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert train_main(args_for(task, d, "--dry-run", "--resume")) == 0
    out = capsys.readouterr().out   # (said valid, and the resume made no update)
    assert "resume from step 4" in out and "warning: the run has already reached its max_steps limit: a resume " \
        "makes no update; give a higher --max-steps to train on\ndry run: " in out
    assert train_main(args_for(task, d, "--dry-run", "--resume", "--max-steps", "6")) == 0
    assert "already reached" not in capsys.readouterr().out
    (d / ckpt.params_file(4)).write_bytes(b"torn")
    assert train_main(args_for(task, d, "--dry-run", "--resume")) == 0
    out = capsys.readouterr().out
    assert "resume from step 2" in out and "params.00000004 is truncated" in out and "already reached" not in out
    assert (d / ckpt.params_file(4)).read_bytes() == b"torn"   # a dry run repairs nothing either


def test_overwrite_deletes_only_a_model_directory_and_nothing_the_run_reads(tmp_path, task, capsys):
    parent = tmp_path / "models"   # e.g. --model-dir models instead of models/run2: the other models stay
    (parent / "run1").mkdir(parents=True)
    (parent / "run1" / ckpt.PARAMS_BEST).write_bytes(b"weights")
    d = tmp_path / "m"
    assert train_main(args_for(task, d, "--max-steps", "2", "--valid-every", "0")) == 0
    own = d / "train.ko"   # the run's own training file, kept in its model directory
    own.write_bytes(Path(task["train_src"]).read_bytes())
    settings = d / "settings.json"   # a settings file of the user's, kept there too
    settings.write_text('{"train": {"max_steps": 2}}')
    for extra in (["--dry-run"], []):
        assert train_main(args_for(task, d, "--overwrite", "--config", str(settings), *extra)) == 2
        err = capsys.readouterr().err
        assert f"--config {settings} is inside --model-dir {d}, which --overwrite deletes" in err, err
        assert train_main(args_for(task, parent, "--overwrite", *extra)) == 2
        err = capsys.readouterr().err
        assert (f"--overwrite deletes a model directory, and --model-dir {parent} is not one: it has no train.log or "
                "checkpoint but holds run1" in err and "Traceback" not in err), err
        assert train_main(args_for(task, d, "--overwrite", "--train-src", str(own), *extra)) == 2
        err = capsys.readouterr().err
        assert f"--train-src {own} is inside --model-dir {d}, which --overwrite deletes" in err, err
    assert (parent / "run1" / ckpt.PARAMS_BEST).read_bytes() == b"weights" and own.exists()
    assert (d / ckpt.STATE).exists() and settings.exists()
    # what no run writes (the user's settings, data, notes, an export made inside it) is named, not deleted
    (d / "release").mkdir()
    (d / "release" / "export.json").write_text("{}")
    for extra in (["--dry-run"], []):
        assert train_main(args_for(task, d, "--overwrite", "--valid-every", "0", *extra)) == 2
        assert (f"--overwrite deletes --model-dir {d} whole, and it holds what no run writes: release, settings.json, "
                "train.ko; move them out of the directory first") in capsys.readouterr().err
    for name in ("release", "settings.json", "train.ko"):
        shutil.move(d / name, tmp_path / name)
    # the run's own config.json goes with the run it holds
    assert train_main(args_for(task, d, "--overwrite", "--config", str(d / "config.json"), "--valid-every", "0")) == 0
    assert ckpt.TrainState.load(d).step == 2 and (tmp_path / "release" / "export.json").exists()


@pytest.mark.parametrize("extra, message", [
    (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["--train-src", "/nonexistent/train.ko"], "/nonexistent/train.ko"),
    (["--model-dir", "/proc/version/m"], "/proc/version is a file, not a directory"),
    (["--keep-last", "100000000"], "free, but --keep-last 100000000 checkpoints"),
    # said valid by the dry run, refused by the run
    (["--amp"], "--amp needs --gpus: automatic mixed precision runs float16 kernels on GPUs"),
    (["--kvstore", "dist_sync"], "--kvstore dist_sync runs only inside a job started by the launcher"),
    # passed by the dry run, then a traceback after training (or at the first validation, or none: a hang)
    (["--beam-size", "200000"], "--beam-size 200000 x --decode-batch-size 64 hypotheses x 400 target pieces"),
    (["--valid-beam", "99999999999"], "--valid-beam must be from 1 to 999999, got 99999999999"),
    (["--valid-beam", "90000"], "--valid-beam 90000 x --decode-batch-size 64 hypotheses x 400 target pieces"),
    (["--num-layers", "99999999"], "the model's fused LSTM would hold up to 614,399,993,856 values in one array"),
    (["--embed-size", "99999999", "--hidden-size", "99999999"], "more than MXNet's 32-bit indices reach (2**31): "
                                                               "lower --embed-size, --hidden-size, --num-layers"),
    (["--vocab-size", "2147483648"], "--vocab-size must be from 16 to 1000000, got 2147483648"),
    (["--keep-last", "-1"], "--keep-last must be >= 1, got -1"),   # was blamed on --average-last 0
])
def test_dry_run_names_what_is_wrong(tmp_path, task, capsys, extra, message):
    assert train_main(args_for(task, tmp_path / "m", "--dry-run", *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_a_transformer_of_millions_of_layers_is_refused_at_once(tmp_path, task, capsys):
    """It hung, building layer after layer while its memory grew."""
    argv = [a for a in args_for(task, tmp_path / "m", "--dry-run")
            if a not in ("--embed-size", "--hidden-size", "--num-layers", "16", "1")]
    assert train_main([*argv, "--arch", "transformer", "--encoder-layers", "99999999"]) == 2
    assert "more than 2**31 (8 GB of float32): lower --model-size, --ff-size, --encoder-layers" in \
        capsys.readouterr().err


def test_a_run_stopped_before_its_first_validation_says_so(tmp_path, task):
    """Stopped by Ctrl-C before any validation, the run logged "best dev BLEU -1.00 at step 0", and translating
    with its "best" checkpoint silently used the latest."""
    import logging
    from nmt.cli import build_train_parser, config_from_args
    from nmt.train import create_trainer
    from nmt.translate import Translator
    d = tmp_path / "m"
    cfg = config_from_args(build_train_parser().parse_args(args_for(task, d, "--max-steps", "50")))
    trainer = create_trainer(cfg)
    trainer.signal_name = "SIGINT"   # as the handler sets it: stop before the next update
    state = trainer.fit()
    assert state.step == 0 and not (d / ckpt.PARAMS_BEST).exists()
    assert "training stopped (SIGINT) at step 0, epoch 0.00; no validation yet" in (d / ckpt.LOG).read_text()
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logging.getLogger("nmt").addHandler(handler)
    try:
        tr = Translator.from_dir(d)
    finally:
        logging.getLogger("nmt").removeHandler(handler)
    assert tr.checkpoint == "best" and f"{d}: no checkpoint validated yet (no params.best, the run stopped before " \
        "its first validation): using the latest, params.00000000" in [r.getMessage() for r in records]


def test_a_dry_run_of_a_resume_on_changed_data_fails_as_the_resume_would(tmp_path, task, capsys):
    """The dry run of a resume read the data but not the batch position it resumes from: it said "valid" where the
    resume then failed on training data that had changed since."""
    import shutil
    mine = {k: str(tmp_path / Path(v).name) for k, v in task.items() if k.endswith(("_src", "_tgt"))}
    for k, v in mine.items():
        shutil.copy(task[k], v)
    d = tmp_path / "m"
    assert train_main(args_for(mine, d, "--max-steps", "2", "--valid-every", "2")) == 0
    for side, line in (("train_src", "새 문장 {} 입니다"), ("train_tgt", "new sentence {} here")):   # other batches
        with open(mine[side], "a", encoding="utf-8") as f:
            f.write("".join(line.format(i) + "\n" for i in range(20)))
    capsys.readouterr()
    resume = ["--model-dir", str(d), "--resume", "--max-steps", "4", "--no-progress", "--no-eval"]
    assert train_main(resume + ["--dry-run"]) == 2
    dry = capsys.readouterr().err
    assert train_main(resume) == 2
    assert "--resume: the training pairs (" in dry and "are not those the run trained on until now" in dry
    assert dry.strip().splitlines()[-1] in capsys.readouterr().err


def test_a_dry_run_of_a_resume_past_a_damaged_checkpoint_writes_nothing(tmp_path, task, capsys):
    """The dry run read the resume's batch position through the resume's own reading of the state, which, past a
    damaged newest checkpoint, writes state.json anew (and verifies every checkpoint file a second time)."""
    d = tmp_path / "m"
    assert train_main(args_for(task, d, "--max-steps", "4", "--valid-every", "2", "--keep-last", "3")) == 0
    damaged = d / ckpt.params_file(4)
    damaged.write_bytes(damaged.read_bytes()[:100])
    state = (d / ckpt.STATE).read_bytes()
    capsys.readouterr()
    assert train_main(["--model-dir", str(d), "--resume", "--max-steps", "6", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "resume from step 2 (damaged newer checkpoints:" in out, out
    assert (d / ckpt.STATE).read_bytes() == state


@pytest.mark.parametrize("var, value, says", [
    ("DMLC_NUM_WORKER", "x", "DMLC_NUM_WORKER='x': must be a whole number from 1 (nmt-launch sets it"),
    ("DMLC_NUM_SERVER", "0", "DMLC_NUM_SERVER='0': must be a whole number from 1 (nmt-launch sets it"),
    ("DMLC_PS_ROOT_PORT", "abc", "DMLC_PS_ROOT_PORT='abc': must be a whole number from 1 to 65535"),
    ("DMLC_PS_ROOT_PORT", "70000", "DMLC_PS_ROOT_PORT='70000': must be a whole number from 1 to 65535"),
    ("DMLC_PS_ROOT_URI", "no.such.host.invalid", "DMLC_PS_ROOT_URI='no.such.host.invalid': the scheduler's host "
                                                 "has no IPv4 address"),
    ("DMLC_PS_ROOT_URI", "::1", "DMLC_PS_ROOT_URI='::1': the scheduler's host has no IPv4 address"),   # (hung too)
    ("DMLC_PS_ROOT_PORT", "\u0669\u0660\u0669\u0661", "DMLC_PS_ROOT_PORT='\u0669\u0660\u0669\u0661': must be a whole number"),
])
def test_a_job_environment_that_cannot_work_is_named_by_the_dry_run(tmp_path, task, capsys, monkeypatch, var, value,
                                                                     says):
    """A worker given DMLC_PS_ROOT_PORT=abc (or a worker count x, a host that does not resolve) was called valid by
    the dry run; the run then waited in MXNet's kvstore forever, printing nothing, deaf to Ctrl-C and SIGTERM."""
    env = {"DMLC_ROLE": "worker", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9091", "DMLC_NUM_SERVER": "1",
           "DMLC_NUM_WORKER": "2", var: value}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert train_main(args_for(task, tmp_path / "m", "--dry-run", "--kvstore", "dist_sync")) == 2
    assert f"error: {says}" in capsys.readouterr().err


def test_a_worker_of_a_job_without_a_distributed_kvstore_is_told_why(tmp_path, task, capsys, monkeypatch):
    """`nmt-launch ... -- nmt-train --model-dir M --resume` said "--kvstore is 'local'", a value nobody typed: the
    resumed run's --kvstore is not its config.json's."""
    for var, value in (("DMLC_ROLE", "worker"), ("DMLC_PS_ROOT_URI", "127.0.0.1"), ("DMLC_PS_ROOT_PORT", "9091"),
                       ("DMLC_NUM_SERVER", "1"), ("DMLC_NUM_WORKER", "2")):   # (the launcher's worker: all set)
        monkeypatch.setenv(var, value)
    assert train_main(args_for(task, tmp_path / "m", "--dry-run")) == 2
    err = capsys.readouterr().err
    assert "whose runs need --kvstore dist_sync (dist_device_sync on GPUs), a --resume too" in err, err
    assert "its kvstore here is 'local'" in err


def test_a_distributed_dry_run_counts_the_jobs_workers_in_the_shares(tmp_path, task, capsys, monkeypatch):
    """Inside a job of two workers, --batch-size 3 --cpu-devices 2 makes 4 shares; the dry run counted one worker
    and said nothing, and the run then warned."""
    for var, value in (("DMLC_ROLE", "worker"), ("DMLC_PS_ROOT_URI", "127.0.0.1"), ("DMLC_PS_ROOT_PORT", "9"),
                       ("DMLC_NUM_SERVER", "1"), ("DMLC_NUM_WORKER", "2")):
        monkeypatch.setenv(var, value)
    assert train_main(args_for(task, tmp_path / "m", "--dry-run", "--batch-size", "3", "--cpu-devices", "2",
                               "--kvstore", "dist_sync")) == 0
    assert ("--batch-size 3 is split into 4 shares (2 devices x 1 micro-batches x 2 workers): 1 of them get no "
            "sentence and compute on padding") in capsys.readouterr().err


def test_an_optimizer_without_a_learning_rate_is_warned_of_by_the_dry_run(tmp_path, task, capsys):
    """--optimizer adadelta: the run warned that --lr and its schedule do not reach it, and how --weight-decay acts;
    its dry run only said "which takes no learning rate" in the settings. The warning is given once."""
    assert train_main(args_for(task, tmp_path / "m", "--dry-run", "--optimizer", "adadelta")) == 0
    assert capsys.readouterr().err.count("--optimizer adadelta takes no learning rate (MXNet's update has none)") == 1
