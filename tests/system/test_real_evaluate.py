"""`nmt-evaluate` on the recipes' dev and test sets read from the offline mirror."""
from __future__ import annotations

import json

from nmt import checkpoint as ckpt
from tests.integration.test_evaluate import as_tatoeba_model, model_copy, run  # noqa: F401 (a fixture)


def test_dev_set_of_a_recipe_from_the_mirror(model_copy, shared_data, tmp_path, capsys):
    from nmt.recipes import load_data
    cfg = as_tatoeba_model(model_copy, shared_data)
    code, out, err = run(["--model-dir", model_copy, "--dev-set", "--data-dir", shared_data, "--beam-size", "1",
                          "--max-sentences", "5", "--max-len-a", "0", "--max-len-b", "5", "--json", "--no-save"],
                         capsys)
    assert code == 0, err
    entry = json.loads(out)["results"]["dev"]
    cfg.data.data_dir = str(shared_data)
    dev = load_data(cfg.data).dev   # the recipe's held-out split: its first 5 pairs scored by file give the same
    (tmp_path / "d.ko").write_text("".join(x + "\n" for x in dev.src[:5]), encoding="utf-8")
    (tmp_path / "d.en").write_text("".join(x + "\n" for x in dev.tgt[:5]), encoding="utf-8")
    code, out, err = run(["--model-dir", model_copy, "--src-file", tmp_path / "d.ko", "--ref-file", tmp_path / "d.en",
                          "--beam-size", "1", "--max-len-a", "0", "--max-len-b", "5", "--json", "--no-save"], capsys)
    by_file = next(iter(json.loads(out)["results"].values()))
    assert code == 0 and len(dev) == 500 and entry["n"] == by_file["n"] == 5
    assert (entry["bleu"], entry["chrf"]) == (by_file["bleu"], by_file["chrf"])


def test_recipe_tests_from_the_mirror(model_copy, shared_data, capsys):
    as_tatoeba_model(model_copy)
    code, out, err = run(["--model-dir", model_copy, "--recipe-tests", "--data-dir", shared_data, "--beam-size", "1",
                          "--max-sentences", "5", "--max-len-a", "0", "--max-len-b", "5", "--json"], capsys)
    assert code == 0, err
    entry = json.loads(out)["results"]["tatoeba-test"]
    assert entry["n"] == 5 and "tok:13a" in entry["bleu_signature"]
    recorded = model_copy / ckpt.SCORES   # 5 of 2,400 sentences: a quick look, not the test set's score
    assert "not recorded" in err
    assert "tatoeba-test" not in (json.loads(recorded.read_text()) if recorded.exists() else {})
