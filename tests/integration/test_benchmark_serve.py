"""A short smoke run of scripts/benchmark_serve.py (not a timing test): a server process, a few clients for a
second, the offline Translator, and the JSON it writes."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_benchmark_serve_writes_its_figures(serve_model, tmp_path):
    spec = importlib.util.spec_from_file_location("benchmark_serve", REPO / "scripts" / "benchmark_serve.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    assert bench.main(["--model-dir", str(serve_model), "--clients", "4", "--seconds", "1", "--rounds", "1",
                       "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    served = result["rounds"][0]["served"]
    assert served["requests"] > 0 and served["errors"] == {}
    assert served["p50_ms"] <= served["p95_ms"] <= served["p99_ms"]
    assert result["rounds"][0]["offline"]["sentences_per_s"] > 0 and result["median_served_over_offline"] > 0
    # the offline Translator also at the batch the 4 clients can fill, and continuous batching without HTTP
    small = result["rounds"][0]["offline_in_flight_batch"]
    assert small["batch_size"] == 4 and small["sentences_per_s"] > 0
    assert result["rounds"][0]["continuous_in_process"]["sentences_per_s"] > 0
    assert result["rounds"][0]["offline"]["batch_size"] > 4
    # the server's own figures over the measured time (not the warm-up's), the model's settings as trained, and
    # the conditions every benchmark records
    server = served["server"]
    assert server["mean_batch"] > 0 and server["model_ms_per_sentence"] > 0 and 0 < server["worker_busy"] <= 1.0
    assert result["model"]["arch"] == "lstm" and result["model"]["hidden_size"] == 48, result["model"]
    assert {"cpu", "cores", "commit", "date", "load_average_at_start", "load_average_at_end",
            "OMP_NUM_THREADS"} <= set(result["machine"])


def test_benchmark_serve_raises_the_servers_limits_to_its_requests(serve_model, tmp_path):
    """--beam-size 17 (the server's default --max-beam-size is 16) or --sentences-per-request 257 (its default
    --max-sentences is 256): every request was refused (422, 413) and the run wrote served 0.00 and NaN latencies."""
    spec = importlib.util.spec_from_file_location("benchmark_serve", REPO / "scripts" / "benchmark_serve.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    assert bench.main(["--model-dir", str(serve_model), "--clients", "1", "--sentences-per-request", "257",
                       "--beam-size", "17", "--max-sentences", "20", "--seconds", "1", "--rounds", "1",
                       "--json", str(out)]) == 0
    served = json.loads(out.read_text())["rounds"][0]["served"]
    assert served["errors"] == {} and served["requests"] > 0, served


def test_benchmark_serve_writes_json_without_percentiles_of_too_few_requests(serve_model, tmp_path):
    """A round of fewer than 2 answered requests has no latency percentiles: they were written as NaN, which is no
    JSON (jq, a browser's JSON.parse refuse the file); they are null."""
    spec = importlib.util.spec_from_file_location("benchmark_serve", REPO / "scripts" / "benchmark_serve.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    assert bench.main(["--model-dir", str(serve_model), "--clients", "1", "--seconds", "0.000001", "--rounds", "1",
                       "--max-sentences", "4", "--json", str(out)]) == 0

    def refuse(constant):
        raise ValueError(f"{constant} is no JSON")
    served = json.loads(out.read_text(), parse_constant=refuse)["rounds"][0]["served"]
    assert served["requests"] < 2 and served["p50_ms"] is None and served["p99_ms"] is None, served
