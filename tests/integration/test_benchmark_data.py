"""scripts/benchmark_data.py --synthetic-pairs on a small corpus: every stage measured, JSON written."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scripts.synthetic_corpus import write_corpus

REPO = Path(__file__).resolve().parents[2]


def test_synthetic_corpus_is_reproducible_and_has_duplicates_and_overlap(tmp_path):
    a, b = write_corpus(tmp_path / "a", 3000, seed=4), write_corpus(tmp_path / "b", 3000, seed=4)
    for key in ("train_src", "train_tgt", "dev_src"):
        assert open(a["files"][key], "rb").read() == open(b["files"][key], "rb").read()
    assert a["duplicates"] > 30
    lines = open(a["files"]["train_src"], encoding="utf-8").read().splitlines()
    assert len(lines) == 3000 and all(any("\uac00" <= c <= "\ud7a3" for c in x) for x in lines)


def test_benchmark_at_small_scale_writes_every_stage(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "benchmark_data.py"), "--synthetic-pairs", "3000",
                        "--vocab-size", "3000", "--work-dir", str(tmp_path / "work"), "--json", str(out)],
                       capture_output=True, text=True, timeout=600, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())   # the conditions every benchmark records (it wrote cpus, load_avg_at_start)
    assert {"cores", "OMP_NUM_THREADS", "load_average_at_start", "cpu", "commit"} <= set(res["machine"])
    assert set(res["stages"]) == {"read (3 splits)", "clean, dedup, test overlap", "SentencePiece training (ko, en)",
                                  "encode (cold: into the cache)", "encode (warm: rerun/resume)",
                                  "bucketing, first batch, first update"}
    assert res["stages"]["encode (warm: rerun/resume)"]["cache_hit"] is True
    assert res["stages"]["clean, dedup, test overlap"]["dropped"]["duplicate"] > 0
    assert 0 < res["peak_rss_gib"] < 4 and res["seconds_to_first_update"] > 0
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "benchmark_data.py"), "--synthetic-pairs", "10"],
                         capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert bad.returncode == 2 and "argument --synthetic-pairs: must be >= 1000 (got 10)" in bad.stderr
