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


def test_the_fraction_of_sgemm_is_taken_per_round_and_one_above_it_is_warned_about(monkeypatch):
    """The sgemm rate was measured once, after the windows: measured under other load, it made the useful FLOP/s
    more than 100% of it. It is measured after each round now, and the fraction is the median of the rounds' ratios;
    one above 100% comes with a warning."""
    from nmt.config import Config
    bench = _script(monkeypatch, "benchmark_arch")
    model = dict(vars(Config.for_arch("lstm").model))
    windows = [{"seconds": s, "updates": 10, "sentences": 320, "src_tokens": 3500, "tgt_tokens": 3100}
               for s in (2.0, 2.0, 4.0)]           # the third round under load
    res = {"arch": "lstm", "parameters": 5e6, "batch_size": 32, "src_vocab": 2000, "tgt_vocab": 2000,
           "windows": windows}
    row = bench.summarize(res, model, res, [80.0, 40.0, 40.0])   # the 2nd sgemm under load the window did not meet
    flops = row["flops_per_token"]
    useful = [(3500 * flops["src_train_flops"] + 3100 * flops["tgt_train_flops"]) / s / 1e9 for s in (2.0, 2.0, 4.0)]
    assert row["fraction_of_sgemm"] == pytest.approx(sorted([useful[0] / 80, useful[1] / 40, useful[2] / 40])[1])
    assert row["sgemm_gflops"] == 40.0 and row["sgemm_gflops_per_round"] == [80.0, 40.0, 40.0]
    assert bench.above_sgemm(row) == ""
    fast = bench.summarize(res, model, res, [x / 2e3 for x in useful])   # the useful rate 2000x the sgemm's
    assert bench.above_sgemm(fast) == (
        f"warning: lstm: 200000% of sgemm is more than a model can reach: the sgemm rate ("
        f"{', '.join(f'{x / 2e3:.1f}' for x in useful)} GFLOP/s after the rounds) was measured under load that the "
        "training windows did not meet (rerun on an otherwise idle machine), or with an --sgemm-size too small to "
        "reach it (rerun with a larger one)")
