"""scripts/benchmark_train.py on the real Tatoeba data with a tiny model: device counts interleaved window by
window, the per-round comparison with one device, the native kernel's A/B, and a worker's error reaching the
user."""
import json

import pytest

from conftest import REPO


def _bench(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))   # also for its spawned workers, which import it again
    import benchmark_train
    return benchmark_train


TINY = ["--embed-size", "16", "--hidden-size", "16", "--num-layers", "1", "--devices", "1,2", "--batch-sizes", "16",
        "--updates", "3", "--warmup", "2", "--repeats", "2", "--no-peak"]


def test_device_counts_take_turns_and_are_compared_per_round(shared_data, tmp_path, capsys, monkeypatch):
    out = tmp_path / "bench.json"
    assert _bench(monkeypatch).main(["--data-dir", str(shared_data), "--vocab-size", "1200", *TINY, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["train"]
    assert [(r["num_devices"], r["batch_size"]) for r in rows] == [(1, 16), (2, 16)]
    one, two = rows
    assert two["raw"]["devices"] == ["cpu(0)", "cpu(1)"] and two["omp_num_threads"] is not None
    for r in rows:
        assert [w["updates"] for w in r["raw"]["windows"]] == [3, 3] and r["raw"]["warmup_updates"] == 2
    # the same seed gives both the same batches, so their windows saw the same sentences
    assert [w["sentences"] for w in one["raw"]["windows"]] == [w["sentences"] for w in two["raw"]["windows"]]
    ratios = sorted(a["seconds"] / b["seconds"] for a, b in zip(one["raw"]["windows"], two["raw"]["windows"]))
    assert one["time_vs_1_device"] == 1.0 and two["speedup"] == pytest.approx(sum(ratios) / 2)
    assert "time/update x" in capsys.readouterr().out


def test_native_ab_times_both_gradient_paths_on_the_same_batches(shared_data, tmp_path, capsys, monkeypatch):
    import mxnet as mx
    if not hasattr(mx.nd, "nmt_add_sumsq"):
        pytest.skip("no native training kernels registered")
    out = tmp_path / "bench.json"
    argv = ["--data-dir", str(shared_data), "--vocab-size", "1200", *TINY, "--only-extras", "--native-ab", "4",
            "--json", str(out)]
    assert _bench(monkeypatch).main(argv) == 0
    report = json.loads(out.read_text())
    assert report["train"] == [] and [(r["devices"], r["batch_size"]) for r in report["native_ab"]] == [(1, 16), (2, 16)]
    for r in report["native_ab"]:
        assert r["batches"] == 4 and r["rounds"] == 2
        assert r["native_ms_per_update"] > 0 and r["mxnet_ops_ms_per_update"] > 0 and r["speedup"] > 0
    assert "with the native training kernels" in capsys.readouterr().out


def test_bucketing_schemes_take_turns_and_are_compared_per_round(shared_data, tmp_path, capsys, monkeypatch):
    out = tmp_path / "bench.json"
    argv = ["--data-dir", str(shared_data), "--vocab-size", "1200", *TINY, "--devices", "1",
            "--bucketing", "padding,quantile", "--json", str(out)]
    assert _bench(monkeypatch).main(argv) == 0
    rows = json.loads(out.read_text())["train"]
    assert [(r["bucketing"], r["num_devices"]) for r in rows] == [("padding", 1), ("quantile", 1)]
    padding, quantile = rows
    assert padding["tok_per_s_vs_first_bucketing"] == 1.0 and quantile["tok_per_s_vs_first_bucketing"] > 0
    assert padding["real_positions"] > quantile["real_positions"]   # Tatoeba's long tail (see nmt.batching)
    assert padding["bucket_shapes"] != quantile["bucket_shapes"] and len(padding["bucket_shapes"]) <= 8
    assert "padding:" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--bucketing takes a comma-separated list of padding, quantile"):
        _bench(monkeypatch).main(["--data-dir", str(shared_data), "--bucketing", "sorted", *TINY])


def test_side_by_side_processes_share_the_cores_as_the_contexts_do(shared_data, tmp_path, capsys, monkeypatch):
    out = tmp_path / "bench.json"
    argv = ["--data-dir", str(shared_data), "--vocab-size", "1200", *TINY, "--side-by-side", "--json", str(out)]
    assert _bench(monkeypatch).main(argv) == 0
    rows = json.loads(out.read_text())["train"]
    assert [(r["num_devices"], r["side_by_side"]) for r in rows] == [(1, None), (2, None), (1, 2)]
    one, two, pair = rows
    assert pair["batch_size"] == 16 and pair["process_batch_size"] == 8
    assert pair["omp_num_threads"] == two["omp_num_threads"] and pair["raw"]["devices"] == ["cpu(0)"]
    for w in pair["raw"]["windows"]:   # both processes timed in the same window: the slower one counts
        assert [p["updates"] for p in w["processes"]] == [3, 3] and w["updates"] == 3
        assert w["seconds"] == max(p["seconds"] for p in w["processes"])
        assert w["sentences"] == sum(p["sentences"] for p in w["processes"]) == 2 * 3 * 8
    ratios = sorted(x["seconds"] / p["seconds"] for x, p in zip(two["raw"]["windows"], pair["raw"]["windows"]))
    assert two["time_vs_side_by_side"] == pytest.approx(sum(ratios) / 2)
    assert one["time_vs_side_by_side"] is None and pair["time_vs_side_by_side"] is None
    assert "2 processes side by side, batch 8 each" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="batch 15 does not split into 2 equal parts"):
        _bench(monkeypatch).main([*argv[:-2], "--batch-sizes", "15"])
    with pytest.raises(SystemExit, match="--side-by-side is for CPU contexts"):
        _bench(monkeypatch).main([*argv[:-2], "--gpus", "0,1"])


def test_a_worker_error_stops_the_benchmark_with_its_message(shared_data, tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match=r"benchmark worker for 1 device\(s\): TokenizerError: vocab_size 300 is too small"):
        _bench(monkeypatch).main(["--data-dir", str(shared_data), "--vocab-size", "300", *TINY])


def test_decoding_on_one_and_two_devices_takes_turns_with_the_same_output(shared_data, tmp_path, capsys, monkeypatch):
    out = tmp_path / "bench.json"
    argv = ["--data-dir", str(shared_data), "--vocab-size", "1200", "--embed-size", "16", "--hidden-size", "16",
            "--num-layers", "1", "--only-extras", "--no-peak", "--decode", "--decode-sentences", "40",
            "--decode-train-epochs", "1", "--decode-repeats", "2", "--decode-batch", "8", "--json", str(out)]
    assert _bench(monkeypatch).main(argv) == 0
    dec = json.loads(out.read_text())["decode"]
    assert dec["sentences"] == 40 and dec["identical_outputs"] == 40   # our search == gluonnlp's sampler
    for name in ("beam_search", "gluonnlp_beam_search_sampler", "translator_beam", "translator_greedy"):
        assert len(dec[name]["seconds"]) == 2 and dec[name]["sent_per_s"] > 0
    two, = dec["multi_device"]
    assert two["devices"] == ["cpu(1)", "cpu(2)"] and two["identical_to_1_device"] == 40
    assert len(two["translator_beam"]["seconds"]) == 2 and two["beam_vs_gluonnlp"] > 0
    assert "Translator on 2 devices" in capsys.readouterr().out
