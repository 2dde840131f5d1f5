"""scripts/reproduce_results.sh's control flow: which runs it trains, resumes, scores and ensembles, and what it
leaves alone on a second pass. The real trainer takes 30 minutes a run; here $PYTHON is a recorder that stands in
for scripts/train.py, evaluate.py and results_table.py (writing the state.json and scores.json they would) and
hands every other call (the script's own `-c` JSON helpers) to the real interpreter."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

RECORDER = r'''
import json, os, sys
args = sys.argv[1:]
if args and args[0] == "-c":
    os.execv(REAL, [REAL] + args)
with open(LOG, "a") as f:
    f.write(json.dumps(args) + "\n")
def arg(name):
    return args[args.index(name) + 1] if name in args else None
script = os.path.basename(args[0])
if script == "train.py":
    d = arg("--model-dir")
    os.makedirs(d, exist_ok=True)
    stop = os.environ.get("FAKE_STOP_" + os.path.basename(d).replace("-", "_"), "time_budget")
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


def run_script(tmp_path: Path, *names: str, **env) -> list:
    log = tmp_path / "calls.jsonl"
    log.unlink(missing_ok=True)
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!{sys.executable}\nREAL = {sys.executable!r}\nLOG = {str(log)!r}\n" + RECORDER)
    fake.chmod(0o755)
    environ = {**os.environ, "PYTHON": str(fake), "MODELS": str(tmp_path / "models"),
               "NMT_DATA_DIR": str(tmp_path / "data"), "OMP_NUM_THREADS": "1", **env}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "reproduce_results.sh"), *names], env=environ,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


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
    tables = calls_of(calls, "results_table.py")
    assert any(str(tmp_path / "models" / "ens15-seed1") in c for c in tables)

    calls = run_script(tmp_path, *members)   # third pass: all done, only the tables are regenerated
    assert {c[0] for c in calls} == {"scripts/results_table.py"}


def test_an_unknown_run_name_is_an_error(tmp_path):
    proc = subprocess.run(["bash", str(REPO / "scripts" / "reproduce_results.sh"), "no-such-run"],
                          env={**os.environ, "MODELS": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "unknown run no-such-run" in proc.stderr
