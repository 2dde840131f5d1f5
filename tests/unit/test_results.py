"""scripts/runs.py and scripts/results_table.py on a tiny trained model directory."""
from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.commands import shell_word
from nmt.corpus import read_parallel
from scripts.runs import (ResultsError, ablation_table, config_diff, example_indices, load_run, markdown_table,
                         results_rows)
from nmt.scoring import score_test_set
from nmt.translate import Translator
from tests.synth import as_trained_with_its_config, synth_file, tiny_model, twin_of

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scored_dirs(tmp_path_factory):
    """Two copies of the tiny model, each scored on the synthetic test set, the second with another config."""
    src = tiny_model(tmp_path_factory)
    root = tmp_path_factory.mktemp("results")
    a, b = root / "base", root / "variant"
    shutil.copytree(src, a)
    shutil.copytree(src, b)
    cfg = json.loads((b / "config.json").read_text())
    cfg["model"]["dropout"] = 0.25
    (b / "config.json").write_text(json.dumps(cfg))
    as_trained_with_its_config(b)
    pairs = read_parallel(synth_file(src, "test.ko"), synth_file(src, "test.en"))
    for d in (a, b):
        score_test_set(Translator.from_dir(d, which="latest"), "synth-test", pairs)
    return a, b


def test_rows_come_from_the_model_directory(scored_dirs):
    a, _ = scored_dirs
    run = load_run(a)
    rows = results_rows([run])
    assert len(rows) == 1
    row = rows[0]
    recorded = json.loads((a / "scores.json").read_text())["synth-test"]
    entry = next(iter(recorded.values()))
    assert row["bleu"] == entry["bleu"] and row["chrf"] == entry["chrf"]
    assert row["direction"] == "ko→en" and row["updates"] == [run.state.step]
    table = markdown_table(rows, "test machine")
    assert f"{entry['bleu']:.2f}" in table and entry["bleu_signature"] in table and run.state.hardware in table


def test_the_hardware_column_is_what_each_run_recorded(scored_dirs, tmp_path):
    a, _ = scored_dirs
    run = load_run(a)
    assert "cpu(0)" in run.state.hardware and "OpenMP thread(s)" in run.state.hardware
    table = markdown_table(results_rows([run]), "the label")
    assert f"| {run.state.hardware} |" in table and "the label" not in table
    # a run trained before the trainer recorded it: the label given
    old = tmp_path / "old"
    shutil.copytree(a, old)
    state = json.loads((old / "state.json").read_text())
    del state["hardware"]
    (old / "state.json").write_text(json.dumps(state))
    assert "| the label |" in markdown_table(results_rows([load_run(old)]), "the label")
    # without one, the table said this machine's CPU, whatever machine trained it (an ablation table regenerated
    # elsewhere labelled the runs of the results table with another CPU)
    out = subprocess.run([sys.executable, str(REPO / "scripts/results_table.py"), str(old)], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0 and out.stdout.splitlines()[2].endswith("| not recorded |"), out.stdout + out.stderr


def test_an_ensemble_led_by_a_run_gets_its_own_row(scored_dirs, tmp_path, tmp_path_factory):
    a, b = scored_dirs
    lead, member = tmp_path / "lead", tmp_path / "variant"
    shutil.copytree(a, lead)
    twin_of(b, member)   # (another model: a copy's is the same, refused)
    state = json.loads((member / "state.json").read_text())
    state.update(step=state["step"] + 7, elapsed=1800.0)
    (member / "state.json").write_text(json.dumps(state))
    src = tiny_model(tmp_path_factory)
    pairs = read_parallel(synth_file(src, "test.ko"), synth_file(src, "test.en"))
    entry, _, _ = score_test_set(Translator.from_dir(lead, which="latest", ensemble=[member]), "synth-test", pairs)
    # both directories moved elsewhere together: the member's own training time and updates, read beside the lead
    moved = tmp_path / "moved"
    moved.mkdir()
    for d in (lead, member):
        shutil.move(str(d), moved / d.name)
    rows = results_rows([load_run(moved / "lead")])
    assert [r["run"] for r in rows] == ["lead", "lead + variant (ensemble)"]
    # --checkpoint: the ensembles of that checkpoint only (a best-checkpoint ensemble was listed under "latest")
    assert [r["run"] for r in results_rows([load_run(moved / "lead")], "latest")][-1] == "lead + variant (ensemble)"
    assert "lead + variant (ensemble)" not in [r["run"] for r in results_rows([load_run(moved / "lead")], "best")]
    lead_updates, lead_hours = rows[0]["updates"][0], rows[0]["hours"][0]
    assert rows[1]["bleu"] == entry["bleu"]
    assert rows[1]["updates"] == [lead_updates, state["step"]] and rows[1]["hours"] == [lead_hours, 0.5]
    assert f"| {lead_hours * 60:.0f} + 30 min | {lead_updates} + {state['step']} |" in markdown_table(rows, "m")
    # a member found neither where it was nor beside the lead: its time is unknown, not another member's
    shutil.rmtree(moved / "variant")
    rows = results_rows([load_run(moved / "lead")])
    assert rows[1]["updates"] == [lead_updates, None] and rows[1]["hours"] == [lead_hours, None]
    assert f"| {lead_hours * 60:.0f} + ? min | {lead_updates} + ? |" in markdown_table(rows, "m")


def test_ablation_names_what_differs(scored_dirs):
    a, b = scored_dirs
    base, variant = load_run(a), load_run(b)
    assert config_diff(base.config, variant.config) == {"model.dropout": 0.25}
    variant.config.train.tensorboard, variant.config.train.cpu_devices = None, 2   # (each invocation's: not a setting)
    assert config_diff(base.config, variant.config) == {"model.dropout": 0.25}
    variant.config.train.amp = True   # (but mixed precision changes the numerics)
    assert config_diff(base.config, variant.config) == {"model.dropout": 0.25, "train.amp": True}
    variant.config.train.amp = False
    # a run that recorded its metric and one that left it unset (null: the target language's) choose alike
    base.config.train.valid_metric = base.config.valid_metric
    assert variant.config.train.valid_metric is None and base.config.train.valid_metric is not None
    assert config_diff(base.config, variant.config) == {"model.dropout": 0.25}
    assert list(config_diff(variant.config, base.config)) == ["model.dropout"]
    variant.config.train.valid_metric = "chrf"
    assert config_diff(base.config, variant.config) == {"model.dropout": 0.25, "train.valid_metric": "chrf"}
    base.config.train.valid_metric = variant.config.train.valid_metric = None
    table = ablation_table(base, [base, variant], "synth-test")
    step = next(iter(base.scores["synth-test"]))   # scored at the latest step, not as the best: said so
    assert step.isdecimal() and f"dropout=0.25 (test scores of step {step})" in table, table
    assert f"(base) (test scores of step {step})" in table
    assert table.count("\n") == 4   # header, rule, two runs


def test_ablation_across_architectures_names_only_the_settings_each_row_reads():
    """An LSTM row against a Transformer base listed ff_size=512 and heads=2, settings no LSTM reads (their
    defaults, left in its config.json), as if the ablation had changed them."""
    from nmt.config import Config
    base, lstm = Config.for_arch("transformer"), Config.for_arch("lstm")
    base.model.ff_size, base.model.heads, lstm.model.hidden_size = 1024, 4, 512
    assert config_diff(base, lstm) == {"model.arch": "lstm", "model.hidden_size": 512, "model.dropout": 0.4,
                                       "model.word_dropout": 0.2, "optim.lr": 0.002, "optim.warmup_steps": 400}
    assert config_diff(lstm, base) == {"model.arch": "transformer", "model.dropout": 0.3, "model.word_dropout": 0.1,
                                       "model.ff_size": 1024, "model.heads": 4, "optim.lr": 0.001,
                                       "optim.warmup_steps": 1000}   # (the base's hidden_size: not the row's)


def test_ablation_keeps_shared_vocab_and_every_setting_of_an_architecture_that_names_none(monkeypatch):
    """Of a row's model settings, those its architecture reads, and --shared-vocab (read by the run, not the model);
    an architecture that names none (`config_fields` empty) shows every one, as the command line checks them."""
    from nmt.config import Config
    from nmt.models import ARCHITECTURES
    base, lstm = Config.for_arch("lstm"), Config.for_arch("lstm")
    lstm.model.shared_vocab, lstm.model.ff_size = True, 2048   # (ff_size: no LSTM reads it)
    assert config_diff(base, lstm) == {"model.shared_vocab": True}
    monkeypatch.setattr(ARCHITECTURES["lstm"], "config_fields", ())
    assert config_diff(base, lstm) == {"model.shared_vocab": True, "model.ff_size": 2048}


def test_ablation_lists_the_base_once_marks_unfinished_runs_and_adds_decoding_rows(scored_dirs, tmp_path):
    a, b = scored_dirs
    running = tmp_path / "running"
    shutil.copytree(b, running)
    state = json.loads((running / "state.json").read_text())
    state["stopped"], state["best_bleu"] = "", -1.0   # (and not validated yet: its best was shown as -1.00)
    (running / "state.json").write_text(json.dumps(state))
    base = load_run(a)
    rec = dict(next(iter(base.scores["synth-test"].values())))
    report = {"results": {"synth-test": {**rec, "beam_size": 1, "bleu": 12.345, "checkpoint": "best"}}}
    base.scores["synth-test"]["avg"] = {**rec, "bleu": 23.456, "checkpoint": "avg"}
    table = ablation_table(base, [load_run(a), load_run(running)], "synth-test", [report])
    lines = table.splitlines()
    assert sum(line.startswith("| base |") for line in lines) == 3   # the run, its averaged checkpoint, beam 1
    running_row = next(line for line in lines if line.startswith("| running |"))
    assert re.search(r"\| — \| \d+ min \(unfinished\) \|", running_row), running_row   # best dev BLEU: none yet
    assert f"({base.state.stopped.replace('_', ' ')})" in lines[2]   # why the base run stopped (not its budget)
    assert "decoding: beam_size=1 (best checkpoint) | 12.35" in table
    assert "| base | the averaged checkpoint (params.avg) | 23.46" in table   # (it has no manifest here)


def test_examples_of_a_run_without_a_test_set_say_what_results_table_can_do(scored_dirs, tmp_path):
    """--examples over a run trained on its own files said nmt-evaluate's "--recipe-tests: the model's data config
    names no known recipe (None) and no test files; give --src-file and --ref-file instead" (and "if they moved, give
    them as --src-file and --ref-file"): flags this script has not. Now in its own terms."""
    a, _ = scored_dirs
    run = tmp_path / "own"
    shutil.copytree(a, run)
    cfg = json.loads((run / "config.json").read_text())
    argv = [sys.executable, str(REPO / "scripts/results_table.py"), str(run), "--examples", "2"]
    for test_src, test_tgt in ((str(tmp_path / "moved.ko"), cfg["data"]["test_tgt"]), (None, None)):
        cfg["data"].update(test_src=test_src, test_tgt=test_tgt)
        (run / "config.json").write_text(json.dumps(cfg))
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and "--recipe-tests" not in out.stderr and "--src-file" not in out.stderr, out.stderr
        if test_src:
            assert out.stderr.startswith(f"error: --examples: the test files of {run} (data.test_src, data.test_tgt of "
                                         f"its config.json): ") and str(tmp_path / "moved.ko") in out.stderr
            assert out.stderr.endswith("; put them back where its config.json says, or leave --examples out\n")
    assert out.stderr == (f"error: --examples: {run} has no test set to take examples from (it names no test files, "
                          "data.test_src, data.test_tgt of its config.json, and no known recipe, None): leave "
                          "--examples out, or leave this run out of the table\n")


def test_examples_are_translated_by_the_checkpoint_given(scored_dirs, tmp_path, monkeypatch, capsys):
    """--examples translated with the best checkpoint whatever --checkpoint said: the table's scores were of one
    checkpoint, its example translations of another. They are of the one given (and say which); the best else."""
    from scripts import results_table
    a, _ = scored_dirs
    run = tmp_path / "run"
    shutil.copytree(a, run)   # (its config.json names the synthetic test files)
    loaded, real = [], Translator.from_dir.__func__

    def from_dir(cls, path, which="best", *args, **kwargs):
        loaded.append(which)
        return real(cls, path, which, *args, **kwargs)
    monkeypatch.setattr(Translator, "from_dir", classmethod(from_dir))
    assert results_table.main([str(run), "--examples", "2", "--checkpoint", "latest"]) == 0
    out = capsys.readouterr().out
    assert loaded == ["latest"] and "beam 5, checkpoint latest):" in out, (loaded, out)
    assert results_table.main([str(run), "--examples", "2"]) == 0
    assert loaded == ["latest", "best"] and "checkpoint" not in capsys.readouterr().out.split("**run**")[1]


def test_examples_of_unreadable_test_files_in_place_are_not_said_to_be_moved(scored_dirs, tmp_path):
    """--examples over a run whose test files are where its config.json says but differ in line count (or are
    UTF-16) said the files' own error, "... and fix the files.", then "; put them back where its config.json says":
    advice for moved files, after a full stop. Where the files are there, their error is said with --examples'."""
    a, _ = scored_dirs
    run = tmp_path / "own"
    shutil.copytree(a, run)
    (tmp_path / "t.ko").write_text("하나\n둘\n셋\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("one\ntwo\n", encoding="utf-8")
    cfg = json.loads((run / "config.json").read_text())
    cfg["data"].update(test_src=str(tmp_path / "t.ko"), test_tgt=str(tmp_path / "t.en"))
    (run / "config.json").write_text(json.dumps(cfg))
    out = subprocess.run([sys.executable, str(REPO / "scripts/results_table.py"), str(run), "--examples", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "line counts differ" in out.stderr, out.stderr
    assert "put them back" not in out.stderr and ".;" not in out.stderr
    assert out.stderr.endswith("and fix the files; or leave --examples out\n"), out.stderr


def test_examples_are_spread_over_the_test_set():
    assert example_indices(2400, 5) == [0, 600, 1200, 1799, 2399]
    assert example_indices(3, 5) == [0, 1, 2] and example_indices(10, 0) == []


def test_a_report_that_is_not_one_is_named(scored_dirs, tmp_path):
    a, _ = scored_dirs
    bad = tmp_path / "beam1.json"
    bad.write_text('{"model_dir": "x"}')
    out = subprocess.run([sys.executable, str(REPO / "scripts/results_table.py"), str(a), "--ablation-base", str(a),
                          "--decode-ablations", str(bad)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and str(bad) in out.stderr and "Traceback" not in out.stderr


def test_script_writes_table_json_and_curves(scored_dirs, tmp_path):
    a, b = scored_dirs
    out = subprocess.run([sys.executable, str(REPO / "scripts/results_table.py"), str(a), str(b),
                          "--markdown", str(tmp_path / "r.md"), "--json", str(tmp_path / "r.json"),
                          "--curves", str(tmp_path / "c.png"), "--ablation-base", str(a),
                          "--ablation-test", "synth-test"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert len(json.loads((tmp_path / "r.json").read_text())) == 2
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "dropout=0.25" in (tmp_path / "r.md").read_text()


def test_not_a_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ResultsError, match="no config.json"):
        load_run(tmp_path)
    out = subprocess.run([sys.executable, str(REPO / "scripts/results_table.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "error:" in out.stderr and str(tmp_path) in out.stderr
    (tmp_path / "export.json").write_text('{"model_dir": "/runs/m"}')   # an export: "not ... written by train.py?"
    with pytest.raises(ResultsError, match=r"an export \(nmt-export\), which holds no training run: give the model "
                                           r"directory it was exported from, /runs/m$"):
        load_run(tmp_path)


def test_a_run_before_its_first_checkpoint_is_said_to_have_none_yet(scored_dirs, tmp_path):
    """A run stopped (or still) before its first checkpoint has config.json, its tokenizers and train.log, but no
    state.json: it was called "no state.json (not a model directory written by scripts/train.py?)", which it is.
    It is told in one line, as the other commands tell it, naming the directory and what it lacks."""
    a, _ = scored_dirs
    early = tmp_path / "early"
    early.mkdir()
    for name in ("config.json", "spm.ko.model", "spm.en.model", "train.log"):
        shutil.copy(a / name, early / name)
    said = (f"{early} holds no checkpoint (no state.json, no params.best): its run ended before it saved one "
            f"({early / 'train.log'} says how far it got, and ends with its error unless it was killed); start it "
            "again with the command that started it, --overwrite added")
    with pytest.raises(ResultsError, match=f"^{re.escape(said)}$"):
        load_run(early)
    out = subprocess.run([sys.executable, str(REPO / "scripts/results_table.py"), str(a), str(early), "--json",
                          str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stderr, out.stdout) == (2, f"error: {said}\n", "")
    assert not (tmp_path / "r.json").exists()
    with pytest.raises(ResultsError, match=f"^{re.escape(str(tmp_path / 'gone'))}: no such directory"):
        load_run(tmp_path / "gone")


def test_a_model_copied_without_its_training_state_is_not_said_to_have_no_checkpoint(scored_dirs, tmp_path):
    """A model directory copied as --init-from reads it (config.json, the tokenizers, a parameter file and its
    manifest: what a distributed worker is told to copy) holds a checkpoint but no state.json: it was said to hold
    "no checkpoint yet (no state.json, no params.best)", params.best being there."""
    a, _ = scored_dirs
    for kept in (["params.best", "manifest.best.json"], [p.name for p in a.glob("params.0*")][:1]):
        copy = tmp_path / kept[0]
        copy.mkdir()
        for name in ["config.json", "spm.ko.model", "spm.en.model", *kept]:
            shutil.copy(a / name, copy / name)
        said = (f"{copy}: no state.json, which a results table reads (the run's steps and dev scores), though it "
                f"holds {kept[0]}: a run killed as it saved a checkpoint (nmt-train --resume goes on from it), or a "
                "model copied without its training state?")
        with pytest.raises(ResultsError, match=f"^{re.escape(said)}$"):
            load_run(copy)


@pytest.mark.parametrize("name", ["scores.json", "state.json"])
def test_corrupt_file_is_named(scored_dirs, tmp_path, name):
    a, _ = scored_dirs
    broken = tmp_path / "broken"
    shutil.copytree(a, broken)
    (broken / name).write_text("{not json")
    out = subprocess.run([sys.executable, str(REPO / "scripts/results_table.py"), str(broken)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert str(broken / name) in out.stderr


def test_the_docs_page_is_assembled_from_the_results_tables(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "results.md").write_text("| test set | BLEU |\n|---|---:|\n| t | 1.23 |\n", encoding="utf-8")
    (results / "ablation.md").write_text("| run | BLEU |\n|---|---:|\n| abl-x | 4.56 |\n", encoding="utf-8")
    (results / "curves.png").write_bytes(b"png")
    page = tmp_path / "docs" / "results.md"
    out = subprocess.run([sys.executable, str(REPO / "scripts/results_table.py"), "--docs", str(page),
                          "--results-dir", str(results)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# Results") and "| t | 1.23 |" in text and "| abl-x | 4.56 |" in text
    assert "](../results/curves.png)" in text and "ablation-curves.png" not in text
    assert "## The Transformer" not in text   # no results/transformer.md: no section
    (results / "transformer.md").write_text("| run | BLEU |\n|---|---:|\n| tf-x | 7.89 |\n", encoding="utf-8")
    (results / "transformer-ablation.md").write_text("| run | BLEU |\n|---|---:|\n| tf-abl-y | 6.54 |\n",
                                                      encoding="utf-8")
    assert subprocess.run([sys.executable, str(REPO / "scripts/results_table.py"), "--docs", str(page),
                           "--results-dir", str(results)], capture_output=True, timeout=120).returncode == 0
    text = page.read_text(encoding="utf-8")
    assert text.index("| abl-x | 4.56 |") < text.index("## The Transformer") < text.index("| tf-x | 7.89 |") \
        < text.index("| tf-abl-y | 6.54 |")
    missing = subprocess.run([sys.executable, str(REPO / "scripts/results_table.py"), "--docs", str(page),
                              "--results-dir", str(tmp_path / "none")], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "results.md not found" in missing.stderr


def test_the_committed_docs_page_matches_the_results_tables():
    """docs/results.md is what the script makes of the committed results/ (regenerate it when they change)."""
    page = REPO / "docs" / "results.md"
    assert page.is_file()
    main_table = (REPO / "results" / "results.md").read_text(encoding="utf-8").strip()
    assert main_table in page.read_text(encoding="utf-8")


def test_a_runs_row_is_its_own_latest_step_never_an_ensembles(scored_dirs, tmp_path):
    """The row took the first key in text order: an ensemble's score as the run's own (the run alone never
    scored), a lower step before the latest ("5922" < "6048"); and --checkpoint latest found nothing."""
    from scripts.runs import _best_record
    run = load_run(scored_dirs[0])
    rec = dict(next(iter(run.scores["synth-test"].values())))
    latest = ckpt_latest(run)
    run.scores["synth-test"] = {"ensemble-latest:x": {**rec, "bleu": 50.0}, "1": {**rec, "bleu": 1.0},
                                str(latest): {**rec, "bleu": 2.0}}
    assert _best_record(run, "synth-test", None)["bleu"] == 2.0
    assert _best_record(run, "synth-test", "latest")["bleu"] == 2.0
    assert _best_record(run, "synth-test", "1")["bleu"] == 1.0 and _best_record(run, "synth-test", "best") is None
    run.scores["synth-test"] = {"ensemble-best:x": {**rec, "bleu": 50.0}}
    assert _best_record(run, "synth-test", None) is None


def ckpt_latest(run) -> int:
    from nmt import checkpoint as ckpt
    return ckpt.latest_step(run.state)


def test_decoding_rows_name_every_setting_that_differs_and_a_part_of_the_set(scored_dirs):
    """Other length limits and a --max-sentences part were "decoding: same as base"."""
    base = load_run(scored_dirs[0])
    rec = dict(next(iter(base.scores["synth-test"].values())))
    two = rec["bleu_signature"].replace("nrefs:1", "nrefs:2")   # two references: another set, "same as base" too
    reports = [{"results": {"synth-test": {**rec, "max_len_b": 2, "bleu": 1.0}}},
               {"results": {"synth-test": {**rec, "n": 3, "bleu": 2.0}}},
               {"results": {"synth-test": {**rec, "bleu_signature": two, "bleu": 3.0}}}]
    table = ablation_table(base, [base], "synth-test", reports)
    assert "decoding: max_len_b=2 (" in table and f"decoding: 3 of {rec['n']} sentences (" in table, table
    assert "decoding: nrefs=2 (" in table, table


def test_decoding_rows_are_the_base_runs_own_and_say_ensemble(scored_dirs, tmp_path, capsys):
    """A report of another model (even of the other direction) became a row "base, decoding: same as base", an
    ensemble's a row of the base alone, and --decode-ablations without --ablation-base was ignored."""
    from scripts.results_table import main
    a, b = scored_dirs
    base = load_run(a)
    rec = dict(next(iter(base.scores["synth-test"].values())))
    ensemble = {**rec, "ensemble": [str(a), str(b)], "bleu": 3.0}
    assert f"decoding: ensemble with {b.name} (" in ablation_table(base, [base], "synth-test",
                                                                    [{"results": {"synth-test": ensemble}}])
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"model_dir": str(b), "checkpoint": "best", "results": {"synth-test": rec}}))
    assert main([str(a), "--ablation-base", str(a), "--decode-ablations", str(other)]) == 2
    assert f"{other}: a report of --model-dir {b}, not of the ablation base {a}" in capsys.readouterr().err
    assert main([str(a), "--decode-ablations", str(other)]) == 2
    assert "give --ablation-base too" in capsys.readouterr().err
    other.write_text(json.dumps({"model_dir": str(a), "checkpoint": "best", "results": {"synth-test": rec}}))
    assert main([str(a), "--ablation-base", str(a), "--ablation-test", "synth-test", "--decode-ablations",
                 str(other)]) == 0


def test_the_ko_mecab_signature_is_listed_with_the_others(scored_dirs):
    """A Korean-output row showed its ko-mecab BLEU without the signature scores.json records for it."""
    run = load_run(scored_dirs[0])
    for rec in run.scores["synth-test"].values():
        rec.update(extra={"bleu_ko_mecab": 12.2},
                   extra_signatures={"bleu_ko_mecab": "nrefs:1|tok:ko-mecab-0.996/ko-0.9.2-KO|version:2.4.3"})
    table = markdown_table(results_rows([run]), "m")
    assert "| 12.20 |" in table and "`nrefs:1|tok:ko-mecab-0.996/ko-0.9.2-KO|version:2.4.3`" in table, table


def test_a_run_without_test_scores_is_named_not_left_out_silently(scored_dirs, tmp_path):
    """A run trained with --no-eval has no test set's scores: the table left it out, and a table of such runs alone
    was empty, exit 0. Each is named with the command that scores it; alone, they are an error."""
    a, _ = scored_dirs
    unscored = tmp_path / "unscored"
    shutil.copytree(a, unscored)
    (unscored / "scores.json").unlink()
    said = (f"has no test set's scores (trained with --no-eval?), so no row: score it first, e.g. nmt-evaluate "
            f"--model-dir {shell_word(unscored)} --recipe-tests")
    table = [sys.executable, str(REPO / "scripts/results_table.py")]
    out = subprocess.run([*table, str(a), str(unscored)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr == f"warning: {unscored} {said}\n", out.stderr
    assert "base" in out.stdout and "unscored" not in out.stdout, out.stdout   # (the scored run's row alone)
    out = subprocess.run([*table, str(unscored), "--json", str(tmp_path / "r.json")], capture_output=True, text=True,
                         timeout=120)
    assert (out.returncode, out.stderr, out.stdout) == (2, f"error: {unscored} {said}\n", "")
    assert not (tmp_path / "r.json").exists()
    # a run with no test set of its own (no test files, no recipe) was sent to --recipe-tests, which refuses it
    cfg = json.loads((unscored / "config.json").read_text())
    cfg["data"].update(test_src=None, test_tgt=None, recipe=None)
    (unscored / "config.json").write_text(json.dumps(cfg))
    out = subprocess.run([*table, str(unscored)], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stderr) == (2, f"error: {unscored} has no test set's scores (it names no test files "
                                               "and no recipe, so its training had no test set to score), so no row: "
                                               f"score it on test files first, e.g. nmt-evaluate --model-dir "
                                               f"{unscored} --src-file SRC --ref-file REF\n"), out.stderr
