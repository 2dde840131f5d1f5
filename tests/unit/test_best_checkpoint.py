"""Which validation is a gain: the best checkpoint, early stopping and the plateau schedule all follow
`nmt.evaluate.improves`, whose exact ties of --valid-metric go to the lower dev perplexity."""
from __future__ import annotations

import json

import pytest

from nmt import checkpoint as ckpt
from nmt.evaluate import improves


@pytest.mark.parametrize("metric", ["bleu", "chrf", "ko-mecab"])
@pytest.mark.parametrize("value, ppl, gain", [
    (0.0, 50.0, True),     # a tie of the metric with a lower dev perplexity: the better model
    (0.0, 250.0, False),   # a tie with a higher perplexity
    (0.0, 100.0, False),   # a tie of both
    (0.5, 900.0, True),    # strictly better, whatever the perplexity
    (-0.5, 10.0, False),   # strictly worse, whatever the perplexity
])
def test_a_tie_of_a_score_goes_to_the_lower_dev_perplexity(metric, value, ppl, gain):
    """Early in a run dev BLEU is 0.00 at several validations while the perplexity falls 5x: the first of them
    stayed the best checkpoint, --patience stopped the run and --lr-schedule plateau halved the learning rate."""
    assert improves(metric, value, 0.0, ppl, 100.0) is gain


@pytest.mark.parametrize("value, ppl, gain", [(100.0, 1.0, False), (99.0, 500.0, True), (101.0, 1.0, False)])
def test_with_perplexity_itself_as_the_metric_nothing_breaks_a_tie(value, ppl, gain):
    assert improves("ppl", value, 100.0, ppl, 100.0) is gain


def test_the_first_validation_is_a_gain_and_an_unknown_perplexity_breaks_no_tie():
    assert improves("bleu", 0.0, None) and improves("bleu", 0.0, None, 80.0, None)
    assert not improves("bleu", 0.0, 0.0, 80.0, None)   # the best of a run saved before best_ppl was kept
    assert not improves("bleu", 0.0, 0.0)


def test_a_state_written_before_best_ppl_loads_without_it(tmp_path):
    """state.json (and a checkpoint's manifest) of an earlier run has no best_ppl: it loads, and a tie waits for
    the next better score to record one."""
    old = {k: v for k, v in vars(ckpt.TrainState(step=30, best_bleu=7.5, best_step=20)).items() if k != "best_ppl"}
    (tmp_path / ckpt.STATE).write_text(json.dumps(old))
    state = ckpt.TrainState.load(tmp_path)
    assert state.best_ppl is None and state.best_score == 7.5
    state.best_ppl = 12.5
    state.save(tmp_path)
    assert ckpt.TrainState.load(tmp_path).best_ppl == 12.5


def test_scores_of_a_replaced_best_or_average_are_retired(tmp_path):
    """A resumed run wrote a new params.best (or params.avg), and scores.json kept the old one's test scores under
    best (avg): results tables, /info and nmt-export showed them as the new parameters' (chrF 7.39 for 0.00)."""
    from nmt.scoring import read_scores, record_scores, retire_scores
    entries = {"best": {"bleu": 5.0, "step": 60, "checkpoint": "best", "params_file": "params.best"},
               "avg": {"bleu": 6.0, "step": 60, "checkpoint": "avg"}, "40": {"bleu": 4.0, "step": 40},
               "ensemble-best:b": {"bleu": 7.0, "step": 60}, "ensemble-avg:b": {"bleu": 8.0, "step": 60}}
    for key, entry in entries.items():
        record_scores(tmp_path, "test", key, entry)
    record_scores(tmp_path, "other", "best", {"bleu": 1.0, "step": 40})   # that step has its own entry: dropped
    record_scores(tmp_path, "other", "40", {"bleu": 2.0, "step": 40})
    retire_scores(tmp_path, "best")
    got = read_scores(tmp_path)
    assert got["test"] == {"avg": entries["avg"], "40": entries["40"], "ensemble-avg:b": entries["ensemble-avg:b"],
                           "60": {**entries["best"], "checkpoint": "60", "params_file": ckpt.params_file(60)}}
    assert got["other"] == {"40": {"bleu": 2.0, "step": 40}}
    retire_scores(tmp_path, "avg")
    assert set(read_scores(tmp_path)["test"]) == {"40", "60"}
    record_scores(tmp_path, "ens", "ensemble-best:b", {"bleu": 3.0})   # a set of an ensemble's entry alone: gone
    retire_scores(tmp_path, "best")                                     # with it (it stayed, an empty object)
    assert "ens" not in read_scores(tmp_path) and set(read_scores(tmp_path)["test"]) == {"40", "60"}
    retire_scores(tmp_path / "none", "best")   # no scores.json: nothing to do
    (tmp_path / ckpt.SCORES).write_text("{")   # a damaged one: left for evaluation to name, training goes on
    retire_scores(tmp_path, "best")
    assert (tmp_path / ckpt.SCORES).read_text() == "{"


def test_the_best_step_is_its_manifests(model_dir, tmp_path):
    """A run killed between writing params.best's manifest and state.json left state.json naming the old best's
    step: evaluation printed and recorded "params.best, step 40" for step 60's parameters, and an export said step
    40 beside step 60's sha256. The manifest is written with the file; a damaged one falls back to state.json."""
    import shutil
    from nmt.scoring import checkpoint_info
    d = tmp_path / "m"
    shutil.copytree(model_dir, d)
    real = json.loads((d / "manifest.best.json").read_text())["step"]
    state = json.loads((d / ckpt.STATE).read_text())
    state["best_step"] = real - 1
    (d / ckpt.STATE).write_text(json.dumps(state))
    assert ckpt.best_step(d) == real and checkpoint_info(d, "best")["step"] == real
    (d / "manifest.best.json").write_text("{")
    assert ckpt.best_step(d) == real - 1


def test_a_plateau_halving_is_logged(caplog):
    """The plateau schedule halved the learning rate without a line in train.log (metrics.jsonl's lr showed it)."""
    from nmt.evaluate import track_best
    state = ckpt.TrainState()
    with caplog.at_level("INFO", logger="nmt"):
        for step, bleu in ((10, 5.0), (20, 4.0), (30, 4.0), (40, 3.0), (50, 2.0)):
            state.step = step
            track_best(state, {"dev_bleu": bleu, "dev_ppl": 50.0}, "bleu", halve_every=2)
    assert state.lr_scale == 0.25
    assert [r.getMessage() for r in caplog.records] == [
        "plateau: 2 validations without gain: learning rate halved, to 0.5 of --lr",
        "plateau: 4 validations without gain: learning rate halved, to 0.25 of --lr"]


def test_the_log_line_says_what_a_validation_does_to_patience():
    """A validation at a stop (not counted toward --patience) that was not a gain was logged ", 0 without gain",
    and so was a scheduled one that beat the scheduled ones' best but not a best made at a stop."""
    from nmt.evaluate import patience_note, track_best
    state = ckpt.TrainState()
    said = []
    for bleu, scheduled in ((5.0, True), (4.0, True), (9.0, False), (3.0, False), (6.0, True), (2.0, True)):
        state.step += 10
        improved = track_best(state, {"dev_bleu": bleu, "dev_ppl": 100.0 - bleu}, "bleu", scheduled)
        said.append(patience_note(state, improved, scheduled))
    assert said == ["", ", 1 without gain", "", ", at a stop: not counted toward --patience",
                    ", better than the scheduled validations' best: --patience starts again", ", 1 without gain"]
