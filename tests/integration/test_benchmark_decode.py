"""scripts/benchmark_decode.py on a tiny synthetic model of either architecture: both searches run, the report is
written (no timing is checked)."""
import importlib.util
import json
from pathlib import Path

import pytest

from tests.synth import synth_file, tiny_model

REPO = Path(__file__).resolve().parents[2]


def tiny_transformer(root: Path) -> Path:
    """A tiny Transformer of the synthetic task, trained a few updates (decoding speed needs no quality)."""
    from nmt.train import train
    from tests.synth import tiny_config, write_task
    cfg = tiny_config(root, write_task(root / "synth"), "transformer", "transformer", max_steps=30)
    train(cfg, evaluate=False)
    return Path(cfg.train.model_dir)


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_benchmark_decode_compares_with_gluonnlp_and_writes_its_report(tmp_path_factory, tmp_path, capsys, arch):
    model_dir = tiny_model(tmp_path_factory) if arch == "lstm" else tiny_transformer(tmp_path)
    spec = importlib.util.spec_from_file_location("benchmark_decode", REPO / "scripts" / "benchmark_decode.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "results" / "benchmark_decode.json"
    src_file = synth_file(model_dir, "test.ko") if arch == "lstm" else model_dir.parent / "synth" / "test.ko"
    code = bench.main(["--model-dir", str(model_dir), "--src-file", str(src_file),
                       "--sentences", "12", "--batch", "5", "--rounds", "1", "--output", str(out)])
    assert code == 0 and "best hypotheses differ" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["sentences"] == 12 and report["beam"] == 4 and report["batch"] == 5
    assert report["identical_outputs"] + report["differing_outputs"] == 12 and report["identical_outputs"] >= 11
    for name in ("beam_search", "gluonnlp_beam_search_sampler", "gluonnlp_sampler_on_step"):
        assert report[name]["sent_per_s"] > 0 and len(report[name]["seconds"]) == 1
    assert report["speedup_vs_gluonnlp"] > 0 and report["speedup_vs_gluonnlp_on_step"] > 0
    assert report["samplers_agree"] >= 11 and report["model"]["arch"] == arch   # the planned step = `step`


def test_benchmark_decode_refuses_bad_input_in_one_line(tmp_path_factory, tmp_path):
    """A missing --src-file was "no sentences: ..." with exit 1, unlike every other bad input of the scripts."""
    import subprocess
    import sys
    model_dir = tiny_model(tmp_path_factory)
    for flags, said in ((["--model-dir", str(model_dir), "--src-file", str(tmp_path / "none.ko")],
                         f"error: no sentences: {tmp_path / 'none.ko'}: file not found"),
                        (["--model-dir", str(model_dir), "--rounds", "0"], "error: --rounds, --beam and --batch"),
                        (["--model-dir", str(tmp_path / "gone")], f"error: model directory {tmp_path / 'gone'}")):
        p = subprocess.run([sys.executable, REPO / "scripts" / "benchmark_decode.py", *flags,
                            "--output", str(tmp_path / "out.json")], capture_output=True, text=True, timeout=300)
        assert p.returncode == 2 and p.stderr.startswith(said), (flags, p.returncode, p.stderr)
        assert not (tmp_path / "out.json").exists()
