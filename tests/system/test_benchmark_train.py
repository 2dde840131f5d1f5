"""scripts/benchmark_train.py on the real Tatoeba data with a tiny model: device counts take turns window by
window on the same batches, the per-round comparison with one device, and a worker's error reaching the user.
Nothing here is timed."""
import json

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]



def _bench(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))   # also for its spawned workers, which import it again
    import benchmark_train
    return benchmark_train


TINY = ["--embed-size", "16", "--hidden-size", "16", "--num-layers", "1", "--devices", "1,2", "--batch-sizes", "16",
        "--updates", "3", "--warmup", "2", "--repeats", "2"]


def test_device_counts_take_turns_and_are_compared_per_round(shared_data, tmp_path, capsys, monkeypatch):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = ["--data-dir", str(shared_data), "--vocab-size", "1200", *TINY, "--json", str(out), "--plot", str(png)]
    assert _bench(monkeypatch).main(argv) == 0
    rows = json.loads(out.read_text())["train"]
    assert [(r["num_devices"], r["batch_size"]) for r in rows] == [(1, 16), (2, 16)]
    one, two = rows
    assert two["raw"]["devices"] == ["cpu(0)", "cpu(1)"] and two["omp_num_threads"] is not None
    for r in rows:
        assert [w["updates"] for w in r["raw"]["windows"]] == [3, 3] and r["raw"]["warmup_updates"] == 2
        assert r["tok_per_s"] > 0
    # the same seed gives both the same batches, so their windows saw the same sentences
    assert [w["sentences"] for w in one["raw"]["windows"]] == [w["sentences"] for w in two["raw"]["windows"]]
    ratios = sorted(a["seconds"] / b["seconds"] for a, b in zip(one["raw"]["windows"], two["raw"]["windows"]))
    assert one["time_vs_1_device"] == 1.0 and two["speedup"] == pytest.approx(sum(ratios) / 2)
    assert "time/update x" in capsys.readouterr().out and png.stat().st_size > 0


def test_a_worker_error_stops_the_benchmark_with_its_message(shared_data, monkeypatch):
    with pytest.raises(SystemExit, match=r"benchmark worker for 1 device\(s\): VocabTooSmall: --vocab-size 300 is too "
                                         r"small for both tokenizers"):
        _bench(monkeypatch).main(["--data-dir", str(shared_data), "--vocab-size", "300", *TINY])
