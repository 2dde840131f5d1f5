"""What the decoding and serving benchmarks translate when no --src-file is given, and their errors."""
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from nmt.config import Config, ConfigError, DataConfig
from nmt.corpus import CorpusError
from nmt.scoring import first_test_sources

REPO = Path(__file__).resolve().parents[2]


def _config(**data):
    return Config(data=DataConfig(recipe=None, **data))


def test_a_source_file_wins(tmp_path):
    src = tmp_path / "s.ko"
    src.write_text("하나\n둘\n", encoding="utf-8")
    assert first_test_sources(_config(), src_file=str(src)) == (str(src), ["하나", "둘"])


def test_else_the_models_first_test_set(tmp_path):
    (tmp_path / "t.ko").write_text("가\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("a\n", encoding="utf-8")
    cfg = _config(test_src=str(tmp_path / "t.ko"), test_tgt=str(tmp_path / "t.en"))
    assert first_test_sources(cfg)[1] == ["가"]


def test_a_model_without_a_test_set_or_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="recipe"):
        first_test_sources(_config())
    with pytest.raises(CorpusError, match="missing.ko"):
        first_test_sources(_config(), src_file=str(tmp_path / "missing.ko"))


def test_the_serving_benchmark_says_why_it_has_no_sentences(tmp_path):
    spec = importlib.util.spec_from_file_location("benchmark_serve", REPO / "scripts" / "benchmark_serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = SimpleNamespace(src_file=str(tmp_path / "missing.ko"), data_dir=None, max_sentences=10)
    from nmt.config import ConfigError   # (run_cli's "error: ..." and exit 2)
    with pytest.raises(ConfigError, match="no sentences: .*missing.ko"):
        module.sentences(args, SimpleNamespace(config=_config()))
    args.src_file = None
    with pytest.raises(ConfigError, match="no sentences: .*recipe"):
        module.sentences(args, SimpleNamespace(config=_config()))


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmarks_refuse_a_data_dir_beside_a_source_file(tmp_path, capsys):
    """--data-dir names where the model's test set is read; beside --src-file it was ignored without a word (as
    nmt-evaluate refuses it), and the benchmark went on to load the model (here one that is not there)."""
    src = tmp_path / "s.ko"
    src.write_text("하나\n", encoding="utf-8")
    common = ["--model-dir", str(tmp_path / "no-model"), "--src-file", str(src), "--data-dir", str(tmp_path)]
    said = f"--data-dir {tmp_path} is where the .* is read; --src-file {src} is read where it is: drop it"
    with pytest.raises(ConfigError, match=said):
        _bench("benchmark_decode").main(common + ["--output", str(tmp_path / "d.json")])
    with pytest.raises(SystemExit):
        _bench("benchmark_serve").main(common + ["--json", str(tmp_path / "s.json")])
    import re
    assert re.search(said, capsys.readouterr().err)
    assert _bench("benchmark_translate").main(common + ["--json", str(tmp_path / "t.json")]) == 2
    assert re.search("^error: " + said, capsys.readouterr().err)
