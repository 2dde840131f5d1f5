"""The figures the benchmark scripts derive from their measured rounds (no benchmark is run here)."""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _script(monkeypatch, name: str):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    return __import__(name)


def test_the_time_per_update_against_one_device_is_the_median_of_the_rounds_ratios(monkeypatch):
    """It was 1 / the median of the per-round speed-ups: of two rounds (0.944 and 1.266 the time of one device) the
    published 1.08x, where the rounds' median, and the ms/update beside it, say 1.11x."""
    bench = _script(monkeypatch, "benchmark_train")

    def run(seconds):
        return {"windows": [{"seconds": s, "updates": 10, "sentences": 640, "src_tokens": 6400, "tgt_tokens": 6400}
                            for s in seconds], "num_devices": 2, "batch_size": 64, "accum_steps": 1,
                "omp_num_threads": 2, "batches_per_epoch": 60, "bucket_shapes": [], "real_positions": 0.9}
    one, two = run([4.0, 5.0]), run([4.0 * 0.944, 5.0 * 1.266])
    row = bench.summarize(two, one)
    assert row["time_vs_1_device"] == pytest.approx((0.944 + 1.266) / 2)
    assert row["speedup"] == pytest.approx((1 / 0.944 + 1 / 1.266) / 2)
    assert bench.summarize(one, one)["time_vs_1_device"] == 1.0


def test_every_benchmark_report_records_its_conditions(monkeypatch):
    """The reports lacked the commit, the date and the load the docs quoted from them ("load average 0.7", commits
    48d52ba/124ae57); scripts/conditions.py gives them to every benchmark."""
    conditions = _script(monkeypatch, "conditions")
    m = conditions.machine([1.0, 2.0, 3.0])
    assert {"cpu", "cores", "commit", "date", "load_average_at_start", "load_average_at_end", "mxnet",
            "OMP_NUM_THREADS"} <= set(m) and m["load_average_at_start"] == [1.0, 2.0, 3.0]
    for script, uses in (("benchmark_train", 1), ("benchmark_arch", 1), ("benchmark_decode", 1),
                         ("benchmark_translate", 1), ("benchmark_serve", 1), ("benchmark_data", 2), ("benchmark_ab", 1)):
        text = (REPO / "scripts" / f"{script}.py").read_text()   # (benchmark_data: both its modes' reports)
        assert text.count("conditions.machine(") + text.count("conditions.run_conditions(") + \
            text.count("conditions.commit_of(REPO)") >= uses, script
