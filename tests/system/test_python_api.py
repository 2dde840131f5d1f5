"""The training example of docs/training.md ("From Python"), run as written but for its paths and length; a run
from Python records $NMT_DATA_DIR as nmt-train does."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_documented_python_training_example_runs(shared_data, tmp_path, capsys):
    page = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    section = page[page.index("## From Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    short = '"max_steps": 20, "progress": False}, "decode": {"max_len_a": 0, "max_len_b": 3}'   # an untrained
    for old, new in (('"../shared/data"', repr(str(shared_data))),                        # model's outputs: short
                     ('"models/nb-transformer"', repr(str(tmp_path / "m"))),
                     ('"max_steps": 2000, "progress": False}', short)):
        assert old in code, old
        code = code.replace(old, new)
    *body, last = code.strip().splitlines()
    scope: dict = {}
    exec("\n".join(body) + f"\nanswer = {last}", scope)   # noqa: S102 (the documentation's own code)
    result, cfg = scope["result"], scope["cfg"]
    assert cfg.model.arch == "transformer" and cfg.model.dropout == 0.3   # the Transformer's defaults, as the CLI's
    assert result.state.step == 20 and result.state.stopped == "max_steps"
    assert "tok:13a" in result.test_scores["tatoeba-test"].bleu_signature
    assert isinstance(scope["answer"], str)
    assert capsys.readouterr().out.startswith(f"20 {result.state.best_bleu} ")


def test_a_run_from_python_records_nmt_data_dir(shared_data, tmp_path, monkeypatch):
    """README: "(or NMT_DATA_DIR; the run records it, for its evaluation and --resume)": nmt-train did, train() left
    data_dir null, and a resume without the variable then tried to download the corpora."""
    from nmt import checkpoint as ckpt
    from nmt.config import Config
    from nmt.train import train
    monkeypatch.setenv("NMT_DATA_DIR", str(shared_data))
    model = {"embed_size": 16, "hidden_size": 16, "num_layers": 1}
    train(Config.from_dict({"model": model, "train": {"model_dir": str(tmp_path / "m"), "max_steps": 2,
                                                      "progress": False, "valid_every": 0}}), evaluate=False)
    saved = Config.load(tmp_path / "m" / ckpt.CONFIG)
    assert saved.data.data_dir == str(Path(shared_data).resolve())
    monkeypatch.delenv("NMT_DATA_DIR")
    cfg = Config.load(tmp_path / "m" / ckpt.CONFIG)
    cfg.train.max_steps = 3
    assert train(cfg, resume=True, evaluate=False).state.step == 3   # (from the recorded mirror, no download)
