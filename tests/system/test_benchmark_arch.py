"""scripts/benchmark_arch.py on the real Tatoeba data with tiny models: the LSTM and the Transformer take turns
window by window, each row has its parameter count, tokens/s against the LSTM's per round, and useful FLOP/s
against the sgemm rate. Nothing here is timed."""
import json
import statistics
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

TINY = ["--vocab-size", "1200", "--batch-size", "16", "--warmup", "2", "--updates", "3", "--repeats", "2",
        "--model-size", "16", "--ff-size", "32", "--heads", "2", "--encoder-layers", "1", "--decoder-layers", "1",
        "--embed-size", "16", "--hidden-size", "16", "--num-layers", "1", "--sgemm-size", "256"]


def _bench(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))   # also for its spawned workers, which import it again
    import benchmark_arch
    return benchmark_arch


def test_both_architectures_take_turns_and_report_useful_flops(shared_data, tmp_path, capsys, monkeypatch):
    out = tmp_path / "arch.json"
    assert _bench(monkeypatch).main(["--data-dir", str(shared_data), *TINY, "--json", str(out)]) == 0
    lstm, transformer = json.loads(out.read_text())["train"]
    assert (lstm["arch"], transformer["arch"]) == ("lstm", "transformer")
    assert (transformer["model"]["model_size"], transformer["model"]["heads"], lstm["model"]["hidden_size"]) == \
        (16, 2, 16)
    assert transformer["model"]["dropout"] == 0.3   # the Transformer's own defaults where no size was given
    for r in (lstm, transformer):
        assert [w["updates"] for w in r["raw"]["windows"]] == [3, 3] and r["raw"]["warmup_updates"] == 2
        assert r["parameters"] > 0 and r["tok_per_s"] > 0 and r["sgemm_gflops"] > 0
        assert r["useful_gflops"] == pytest.approx(
            (r["src_tok_per_s"] * r["flops_per_token"]["src_train_flops"]
             + r["tgt_tok_per_s"] * r["flops_per_token"]["tgt_train_flops"]) / 1e9)
        assert len(r["sgemm_gflops_per_round"]) == 2   # one rate after each round of windows, their ratios' median:
        assert 0 < r["fraction_of_sgemm"] == pytest.approx(statistics.median(
            (x["src_tokens"] * r["flops_per_token"]["src_train_flops"] + x["tgt_tokens"]
             * r["flops_per_token"]["tgt_train_flops"]) / x["seconds"] / 1e9 / g
            for x, g in zip(r["raw"]["windows"], r["sgemm_gflops_per_round"])))
    # the same seed and batch give both the same sentences in each window
    assert [w["sentences"] for w in lstm["raw"]["windows"]] == [w["sentences"] for w in transformer["raw"]["windows"]]
    assert lstm["x_lstm_tok_per_s"] == 1.0 and transformer["x_lstm_tok_per_s"] > 0
    assert "the LSTM's tokens/s" in capsys.readouterr().out
