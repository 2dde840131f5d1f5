"""scripts/benchmark_arch.py and scripts/benchmark_train.py refuse bad arguments before they read any data (their
runs on the real corpora are in tests/system)."""
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _script(monkeypatch, name: str):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    return importlib.import_module(name)


def test_benchmark_arch_refuses_bad_arguments(monkeypatch):
    with pytest.raises(SystemExit, match="--repeats, --batch-size and --sgemm-size must be >= 1"):
        _script(monkeypatch, "benchmark_arch").main(["--repeats", "0"])


def test_benchmark_train_refuses_bad_arguments(monkeypatch, capsys):
    bench = _script(monkeypatch, "benchmark_train")
    with pytest.raises(SystemExit, match="--devices must include 1"):
        bench.main(["--devices", "2"])
    with pytest.raises(SystemExit, match="--amp needs --gpus"):
        bench.main(["--amp"])
    with pytest.raises(SystemExit, match="--repeats must be >= 1"):   # was statistics.median of nothing, at the end
        bench.main(["--repeats", "0"])
    with pytest.raises(SystemExit):
        bench.main(["--batch-sizes", "0"])
    assert "expected comma-separated positive integers" in capsys.readouterr().err


def test_benchmark_ab_refuses_no_rounds(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        _script(monkeypatch, "benchmark_ab").main(["--a", str(REPO), "--b", str(REPO), "--rounds", "0"])
    assert "--rounds must be >= 1, got 0" in capsys.readouterr().err
