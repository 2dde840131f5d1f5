"""scripts/reproduce_results.sh's control flow: which runs it trains, resumes, scores and ensembles, and what it
leaves alone on a second pass. The real trainer takes 30 minutes a run; here $PYTHON is a recorder that stands in
for scripts/train.py, evaluate.py and results_table.py (writing the state.json and scores.json they would) and
hands every other call (the script's own `-c` JSON helpers) to the real interpreter."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

RECORDER = r'''
import json, os, sys
args = sys.argv[1:]
if args and args[0] == "-c":
    os.execv(REAL, [REAL] + args)
with open(LOG, "a") as f:   # one line per call: its arguments, who called (the queue's shell), with how many threads
    f.write(json.dumps({"args": args, "caller": [os.getppid(), os.environ.get("OMP_NUM_THREADS")]}) + "\n")
def arg(name):
    return args[args.index(name) + 1] if name in args else None
script = os.path.basename(args[0])
if script == "train.py":
    d = arg("--model-dir")
    os.makedirs(d, exist_ok=True)
    stop = os.environ.get("FAKE_STOP_" + os.path.basename(d).replace("-", "_"), "time_budget")
    if os.environ.get("FAKE_TRAIN_SECONDS"):   # train until the time is up or SIGTERM, like the trainer
        import signal, time
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(json.dump(
            {"step": 1, "elapsed": 1.0, "stopped": "SIGTERM"}, open(os.path.join(d, "state.json"), "w")) or 143))
        time.sleep(float(os.environ["FAKE_TRAIN_SECONDS"]))
    json.dump({"step": 1, "elapsed": 60.0, "stopped": stop}, open(os.path.join(d, "state.json"), "w"))
    open(os.path.join(d, "params.avg"), "w").close()
elif script == "evaluate.py" and "--no-save" not in args:
    d = arg("--model-dir")
    path = os.path.join(d, "scores.json")
    scores = json.load(open(path)) if os.path.exists(path) else {}
    key = arg("--checkpoint") or "best"
    if "--ensemble" in args:
        members = args[args.index("--ensemble") + 1:args.index("--checkpoint")]
        key = "ensemble-%s:%s" % (key, "+".join(os.path.basename(m) for m in members))
    scores.setdefault("tatoeba-test", {})[key] = {"bleu": 1.0}
    json.dump(scores, open(path, "w"))
'''


def script_env(tmp_path: Path, **env) -> dict:
    """The environment that makes the script call the recorder instead of Python; the log starts empty."""
    log = tmp_path / "calls.jsonl"
    log.unlink(missing_ok=True)
    fake = tmp_path / "fake-python"
    # started by sh, which runs the interpreter (a "#!" line cannot name a path with a space), as pip's scripts are
    fake.write_text(f"#!/bin/sh\n'''exec' {shlex.quote(sys.executable)} \"$0\" \"$@\"\n' '''\n"
                    f"REAL = {sys.executable!r}\nLOG = {str(log)!r}\n" + RECORDER)
    fake.chmod(0o755)
    return {**os.environ, "PYTHON": str(fake), "MODELS": str(tmp_path / "models"),
            "NMT_DATA_DIR": str(tmp_path / "data"), "OMP_NUM_THREADS": "1", **env}


def recorded(tmp_path: Path, with_callers: bool = False) -> list:
    """The recorded calls' arguments, in order; with `with_callers`, (arguments, [caller pid, OMP threads])."""
    log = tmp_path / "calls.jsonl"
    entries = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [(e["args"], e["caller"]) if with_callers else e["args"] for e in entries]


def run_script(tmp_path: Path, *names: str, **env) -> list:
    proc = subprocess.run(["bash", str(REPO / "scripts" / "reproduce_results.sh"), *names],
                          env=script_env(tmp_path, **env), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return recorded(tmp_path)


def calls_of(calls: list, script: str) -> list:
    return [c for c in calls if c[0] == f"scripts/{script}"]


def test_trains_scores_and_ensembles_each_run_once(tmp_path):
    members = ["ens15-seed1", "ens15-seed2", "ens15-seed3", "ens15-seed4"]
    calls = run_script(tmp_path, *members, FAKE_STOP_ens15_seed3="SIGTERM")
    train = calls_of(calls, "train.py")
    assert [c[c.index("--model-dir") + 1] for c in train] == [str(tmp_path / "models" / m) for m in members]
    for seed, c in enumerate(train, 1):
        flags = " ".join(c)
        assert "--time-budget 900" in flags and "--patience 0" in flags and f"--seed {seed}" in flags
        assert "--resume" not in c
        # the runs were made with the quantile buckets, before --bucketing; every flag is the trainer's
        from nmt.cli import build_train_parser
        assert build_train_parser().parse_args(c[1:]).__dict__["data.bucketing"] == "quantile"
    # best and averaged checkpoints of every finished run are scored; the interrupted one is not, and the
    # ensemble waits for it
    evaluate = calls_of(calls, "evaluate.py")
    scored = sorted((Path(c[c.index("--model-dir") + 1]).name, "--checkpoint" in c) for c in evaluate)
    assert scored == sorted((m, avg) for m in members if m != "ens15-seed3" for avg in (False, True))
    assert not [c for c in evaluate if "--ensemble" in c]

    # second pass: the interrupted run resumes; nothing finished is trained or scored again; the ensemble is
    # decoded once, from the averaged checkpoints, in the first member's directory; the tables list its lead
    calls = run_script(tmp_path, *members)
    train = calls_of(calls, "train.py")
    assert len(train) == 1 and "ens15-seed3" in train[0][train[0].index("--model-dir") + 1] and "--resume" in train[0]
    ensembles = [c for c in calls_of(calls, "evaluate.py") if "--ensemble" in c]
    assert len(ensembles) == 1
    ens = ensembles[0]
    assert Path(ens[ens.index("--model-dir") + 1]).name == "ens15-seed1" and ens[ens.index("--checkpoint") + 1] == "avg"
    assert [Path(p).name for p in ens[ens.index("--ensemble") + 1:ens.index("--checkpoint")]] == members[1:]
    tables = calls_of(calls, "results_table.py")   # named runs: their table on the console, once, no file
    assert len(tables) == 1 and tables[0][1:4] == [str(tmp_path / "models" / m) for m in ("ens15-seed1", "ens15-seed2",
                                                                                        "ens15-seed3")]
    assert not {"--markdown", "--json", "--docs", "--curves"} & set(tables[0])

    calls = run_script(tmp_path, *members)   # third pass: all done, only their table is printed
    assert {c[0] for c in calls} == {"scripts/results_table.py"}


def test_every_en_ko_run_chooses_by_13a_bleu_as_its_published_run_did(tmp_path):
    """docs/results.md's en->ko runs chose params.best and stopped early by 13a BLEU, the default of then for every
    target language; Korean output now defaults to ko-mecab BLEU, so the script pins theirs (else a run reproduces
    another model). Its ko->en runs take the default, 13a BLEU too."""
    import re
    from nmt.cli import build_train_parser, config_from_args
    proc = subprocess.run(["bash", str(REPO / "scripts" / "reproduce_results.sh"), "--help"],
                          env=script_env(tmp_path), capture_output=True, text=True, timeout=60)
    runs = re.search(r"^Runs: (.*)$", proc.stdout, re.M)[1].split()
    en_ko = [n for n in runs if "en-ko" in n]
    assert len(en_ko) >= 7 and "tatoeba-ko-en" in runs, runs
    train = calls_of(run_script(tmp_path, *en_ko, "tatoeba-ko-en"), "train.py")
    configs = {Path(c[c.index("--model-dir") + 1]).name: config_from_args(build_train_parser().parse_args(c[1:]))
               for c in train}
    assert sorted(configs) == sorted(en_ko + ["tatoeba-ko-en"])
    assert {n: (c.data.tgt_lang, c.valid_metric) for n, c in configs.items()} == {
        n: ("en", "bleu") if n == "tatoeba-ko-en" else ("ko", "bleu") for n in configs}


def test_a_run_with_only_dev_scores_gets_its_test_scores(tmp_path):
    """A finished run whose scores.json held only "dev" (nmt-evaluate --dev-set) was taken for scored: its test sets
    were never scored and its row was missing from the tables without a word."""
    run = tmp_path / "models" / "ens15-seed1"
    run.mkdir(parents=True)
    (run / "state.json").write_text(json.dumps({"step": 1, "elapsed": 60.0, "stopped": "time_budget"}))
    (run / "scores.json").write_text(json.dumps({"dev": {"best": {"bleu": 1.0}}}))
    evaluate = calls_of(run_script(tmp_path, "ens15-seed1"), "evaluate.py")
    assert [c for c in evaluate if "--checkpoint" not in c and "--recipe-tests" in c], evaluate
    assert not calls_of(run_script(tmp_path, "ens15-seed1"), "evaluate.py")   # (then scored: not again)


def test_a_named_runs_table_holds_the_runs_named_alone(tmp_path):
    """The table of `reproduce_results.sh abl-ls0` listed every finished ensemble an earlier run had left."""
    run_script(tmp_path, *(m for pair in HEADLINE[:1] for m in pair))   # an ensemble, finished
    tables = calls_of(run_script(tmp_path, "abl-ls0"), "results_table.py")
    assert [c[1:-2] for c in tables] == [[str(tmp_path / "models" / "abl-ls0")]]


def test_an_unknown_run_name_is_an_error(tmp_path):
    proc = subprocess.run(["bash", str(REPO / "scripts" / "reproduce_results.sh"), "no-such-run"],
                          env={**os.environ, "MODELS": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "unknown run no-such-run (groups: headline transformer; runs: abl-batch64 " \
        "abl-dropout0.2 " in proc.stderr   # (the runs sorted, and the transformer group, which the list left out)
    assert " tf-tatoeba-ko-en; --help says more)" in proc.stderr


def test_help_gives_the_usage_and_every_name_and_trains_nothing(tmp_path):
    """`--help` was taken for a run's name (an error listing ~50 names in hash order); a 15-hour job should say what it
    does and which names it takes."""
    proc = subprocess.run(["bash", str(REPO / "scripts" / "reproduce_results.sh"), "--help"],
                          env=script_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("Reproduce docs/results.md: train every run below"), proc
    assert "Groups: headline transformer\nRuns: abl-batch64 " in proc.stdout and " tf-tatoeba-ko-en " in proc.stdout
    assert recorded(tmp_path) == [] and not (tmp_path / "models").exists()
    proc = subprocess.run(["bash", str(REPO / "scripts" / "reproduce_results.sh"), "abl-vocab8k", "--help"],
                          env=script_env(tmp_path), capture_output=True, text=True, timeout=60)   # (after a name too)
    assert proc.returncode == 0 and proc.stdout.startswith("Reproduce docs/results.md") and recorded(tmp_path) == []


HEADLINE = [("abl-worddrop0.2-lex", "abl-worddrop0.2-lex-seed2"), ("all-ko-en-up4-lex", "all-ko-en-up4-lex-seed2"),
            ("all-en-ko-up4-lex", "all-en-ko-up4-lex-seed2")]


def test_headline_trains_two_queues_side_by_side_then_ensembles_once(tmp_path):
    run_script(tmp_path, "headline", OMP_NUM_THREADS="2")
    calls = recorded(tmp_path, with_callers=True)
    train = [(Path(c[c.index("--model-dir") + 1]).name, caller) for c, caller in calls if c[0] == "scripts/train.py"]
    queues = {}
    for name, (queue, threads) in train:
        assert threads == "1", (name, threads)   # one core each, whatever the invoking shell said
        queues.setdefault(queue, []).append(name)
    # two queues (two shells), each the members of one side of the pairs, in order
    assert sorted(queues.values()) == sorted([[a for a, _ in HEADLINE], [b for _, b in HEADLINE]])
    assert all("--lexical-model" in c for c, _ in calls if c[0] == "scripts/train.py")
    # every run's checkpoints scored by its queue; each ensemble once, by neither queue, with the invoking threads
    ensembles = [(c, caller) for c, caller in calls if c[0] == "scripts/evaluate.py" and "--ensemble" in c]
    assert sorted(Path(c[c.index("--model-dir") + 1]).name for c, _ in ensembles) == sorted(a for a, _ in HEADLINE)
    assert all(caller[0] not in queues and caller[1] == "2" for _, caller in ensembles)
    tables = [(c, caller) for c, caller in calls if c[0] == "scripts/results_table.py"]
    assert tables and all(caller[0] not in queues for _, caller in tables)
    # headline's runs are some of the page's: their table is printed (the ensembles'); results/ is left alone (its
    # ablation table wanted a base run headline does not train: the script ended with exit 2 after 5 hours)
    assert len(tables) == 1 and not {"--markdown", "--json", "--docs", "--ablation-base"} & set(tables[0][0])
    assert [Path(d).name for d in tables[0][0][1:4]] == [a for a, _ in HEADLINE]
    # runs without a hardware record trained in one-core queues, whatever the regenerating shell's thread count
    hardware = [c[c.index("--hardware") + 1] for c, _ in tables if "--hardware" in c]
    assert hardware and all("1 OpenMP thread" in h for h in hardware)
    assert (tmp_path / "models" / "queue-1.log").exists() and (tmp_path / "models" / "queue-2.log").exists()


def test_sigterm_stops_both_queues_and_their_trainers_with_a_checkpoint(tmp_path):
    env = script_env(tmp_path, FAKE_TRAIN_SECONDS="60")
    proc = subprocess.Popen(["bash", str(REPO / "scripts" / "reproduce_results.sh"), "headline"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 30
        while len(calls_of(recorded(tmp_path), "train.py")) < 2 and time.time() < deadline:
            time.sleep(0.2)
        assert len(calls_of(recorded(tmp_path), "train.py")) == 2, "the two queues did not start"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 143 and "run the script again to resume" in err
        for name in HEADLINE[0]:
            state = json.loads((tmp_path / "models" / name / "state.json").read_text())
            assert state["stopped"] == "SIGTERM", name
        time.sleep(1)
        assert len(calls_of(recorded(tmp_path), "train.py")) == 2   # no queue went on to its next run
    finally:   # whatever failed, no stand-in trainer outlives the test
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def test_headline_does_not_mix_with_run_names(tmp_path):
    proc = subprocess.run(["bash", str(REPO / "scripts" / "reproduce_results.sh"), "headline", "all-ko-en"],
                          env={**os.environ, "MODELS": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "headline stands alone" in proc.stderr


def test_only_a_run_of_every_run_rewrites_the_results_and_transformer_its_own_then_the_page(tmp_path):
    """The page is regenerated from results/ by a run of every run (its tables) and by `transformer` (its tables,
    which the page includes: it wrote them and never the page)."""
    calls = run_script(tmp_path)
    tables = calls_of(calls, "results_table.py")
    assert any("--markdown" in c and "results/results.md" in c for c in tables)
    assert any("--ablation-base" in c and str(tmp_path / "models" / "tatoeba-ko-en") in c for c in tables)
    assert tables[-1][1:] == ["--docs", "docs/results.md"]
    (tmp_path / "tf").mkdir()
    calls = run_script(tmp_path / "tf", "transformer")
    tables = calls_of(calls, "results_table.py")
    assert any("results/transformer.md" in c for c in tables) and tables[-1][1:] == ["--docs", "docs/results.md"]
    assert not any("results/results.md" in c for c in tables)
