"""The notebooks run headless (nbclient) against a tiny model trained in the test, without a cell error, and are
committed without outputs."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.synth import synth_file, tiny_model

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def execute(name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    # A cell error raises CellExecutionError (with the cell's traceback), failing the test.
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return nb


def text_of(nb: nbformat.NotebookNode) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", "") + "".join(str(v) for k, v in out.get("data", {}).items()
                                                       if k.startswith("text/")))
    return "\n".join(parts)


@pytest.mark.parametrize("name", ["bleu_eval.ipynb", "multi_gpu_intro.ipynb"])
def test_committed_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    assert any("parameters" in c.metadata.get("tags", []) for c in code)


def test_bleu_eval_notebook(tmp_path_factory, tmp_path, monkeypatch):
    model = tiny_model(tmp_path_factory)
    monkeypatch.setenv("NMT_MODEL_DIR", str(model))
    monkeypatch.setenv("NMT_SRC_FILE", str(synth_file(model, "test.ko")))
    monkeypatch.setenv("NMT_REF_FILE", str(synth_file(model, "test.en")))
    monkeypatch.setenv("NMT_MAX_SENTENCES", "20")
    monkeypatch.setenv("NMT_PLOT_DIR", str(tmp_path / "plots"))
    nb = execute("bleu_eval.ipynb")
    text = text_of(nb)
    assert "test set test.ko: 20 sentence pairs" in text
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.3" in text and "chrF" in text
    assert "<table><tr><th>#</th><th>source</th><th>translation</th><th>reference</th></tr>" in text
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 1 and (tmp_path / "plots" / "attention-example.png").stat().st_size > 5000


def test_multi_gpu_intro_notebook(tmp_path, monkeypatch):
    bench = tmp_path / "benchmark_train.json"
    # The shape of a training-benchmark file; the notebook must show whatever such a file holds.
    bench.write_text(json.dumps({"machine": "test", "results": [{"devices": 1, "tokens_per_s": 1000.0},
                                                                 {"devices": 2, "tokens_per_s": 1500.0}]}))
    monkeypatch.setenv("NMT_BENCHMARK_JSON", str(bench))
    text = text_of(execute("multi_gpu_intro.ipynb"))
    assert "--cpu-devices 2 -> [cpu(0), cpu(1)]" in text
    assert "share 1: src (3, 9), target lengths [4, 4, 0]" in text
    assert "largest parameter difference, 1 vs 2 devices:" in text
    assert "2 device(s): 1500.0 tokens_per_s = 1.50x the 1-device rate" in text
