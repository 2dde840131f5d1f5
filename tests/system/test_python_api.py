"""The training example of docs/training.md ("From Python"), run as written but for its paths and length."""
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
