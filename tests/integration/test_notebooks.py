"""The notebooks run headless (nbclient) against a tiny model trained in the test, without a cell error, and are
committed with the outputs of a run on a real model."""
from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.synth import synth_file, tiny_flags, tiny_model, write_task

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


# What each committed notebook must show, from its run on a real model (see "Notebooks" in the README)
COMMITTED = {"bleu_eval.ipynb": ("models/tatoeba-ko-en", "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.3",
                                 "<th>source</th><th>translation</th><th>reference</th>"),
             "multi_gpu_intro.ipynb": ("largest parameter difference, 1 vs 2 devices:", "tokens/s = 1.00x the 1-device")}


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_committed_with_the_outputs_of_one_clean_run(name):
    """Committed executed top to bottom once (counts 1, 2, 3 ...), every code cell with its output, the scores,
    samples and plots a reader on a code host sees without running anything."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert any("parameters" in c.metadata.get("tags", []) for c in code)
    text = text_of(nb)
    for expected in COMMITTED[name]:
        assert expected in text, expected
    assert [o for c in code for o in c.outputs if "image/png" in o.get("data", {})], "a plot"


def test_bleu_eval_names_the_command_of_its_numbers():
    """The notebook's introduction gives the command line that prints its numbers: it scores the first
    NMT_MAX_SENTENCES sentences by default, so the command must too (without --max-sentences it scored all 2,400
    of Tatoeba-test: BLEU 7.86 against the notebook's 5.34-5.40 for the quick start's model)."""
    import re
    nb = nbformat.read(NOTEBOOKS / "bleu_eval.ipynb", as_version=4)
    intro = nb.cells[0].source
    command = re.search(r"```\n(python scripts/evaluate.py .*?)\n```", intro, re.S).group(1)
    default = re.search(r'"NMT_MAX_SENTENCES", "(\d+)"', nb.cells[1].source).group(1)
    assert "--recipe-tests" in command and f"--max-sentences {default}" in command, command
    assert f"first {default} sentences" in intro


def test_bleu_eval_notebook(tmp_path_factory, tmp_path, monkeypatch):
    """... reading its test files as nmt-evaluate reads them: a blank last reference line counts (the notebook stopped
    on "test.ko has N lines but ref.en has N - 1", where nmt-evaluate scores the files)."""
    model = tiny_model(tmp_path_factory)
    ref = synth_file(model, "test.en").read_text(encoding="utf-8").splitlines()
    (tmp_path / "ref.en").write_text("\n".join(ref[:-1] + [""]) + "\n", encoding="utf-8")
    monkeypatch.setenv("NMT_MODEL_DIR", str(model))
    monkeypatch.setenv("NMT_SRC_FILE", str(synth_file(model, "test.ko")))
    monkeypatch.setenv("NMT_REF_FILE", str(tmp_path / "ref.en"))
    monkeypatch.delenv("NMT_DATA_DIR", raising=False)   # (the mirror of a system-test run: refused with them)
    monkeypatch.setenv("NMT_MAX_SENTENCES", "0")
    monkeypatch.setenv("NMT_PLOT_DIR", str(tmp_path / "plots"))
    nb = execute("bleu_eval.ipynb")
    text = text_of(nb)
    assert f"test set test.ko: {len(ref)} sentence pairs" in text
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.3" in text and "chrF" in text
    assert "<table><tr><th>#</th><th>source</th><th>translation</th><th>reference</th></tr>" in text
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 1 and (tmp_path / "plots" / "attention-example.png").stat().st_size > 5000


def test_bleu_eval_refuses_a_source_file_without_references(tmp_path_factory, monkeypatch):
    """NMT_SRC_FILE without NMT_REF_FILE was ignored without a word: the recipe's test set was scored instead."""
    from nbclient.exceptions import CellExecutionError
    model = tiny_model(tmp_path_factory)
    monkeypatch.setenv("NMT_MODEL_DIR", str(model))
    monkeypatch.setenv("NMT_SRC_FILE", str(synth_file(model, "test.ko")))
    monkeypatch.delenv("NMT_REF_FILE", raising=False)
    monkeypatch.delenv("NMT_DATA_DIR", raising=False)
    with pytest.raises(CellExecutionError, match="NMT_SRC_FILE and NMT_REF_FILE go together"):
        execute("bleu_eval.ipynb")
    monkeypatch.setenv("NMT_SRC_FILE", str(synth_file(model, "test.en")))   # the files swapped: scored BLEU 0.00
    monkeypatch.setenv("NMT_REF_FILE", str(synth_file(model, "test.ko")))
    with pytest.raises(CellExecutionError, match="should be the Korean side .* are the files swapped"):
        execute("bleu_eval.ipynb")


def test_bleu_eval_checks_korean_bleu_before_translating(tmp_path, monkeypatch):
    """An en->ko model with mecab-ko not loadable: the notebook translated the whole test set and only then failed in
    the scoring; it fails in its setup cell, with nmt-evaluate's message (`nmt.evaluate.korean_bleu`)."""
    from nbclient.exceptions import CellExecutionError
    from nmt.cli import train_main
    from tests.integration.test_valid_metric_runs import en_ko
    task = en_ko(write_task(tmp_path / "synth", n_train=200))
    model = tmp_path / "enko"
    assert train_main(tiny_flags(task, model) + ["--src", "en", "--tgt", "ko", "--max-steps", "2"]) == 0
    stand_in = tmp_path / "no-mecab" / "mecab_ko"   # first on the kernel's path: sacreBLEU's import of it fails
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text('raise ImportError("no mecab_ko here (a test\'s stand-in)")\n')
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(stand_in.parent),
                                                                   os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("NMT_MODEL_DIR", str(model))
    monkeypatch.setenv("NMT_SRC_FILE", task["dev_src"])
    monkeypatch.setenv("NMT_REF_FILE", task["dev_tgt"])
    monkeypatch.delenv("NMT_DATA_DIR", raising=False)
    monkeypatch.setenv("NMT_PLOT_DIR", str(tmp_path / "plots"))
    nb = nbformat.read(NOTEBOOKS / "bleu_eval.ipynb", as_version=4)
    for cell in nb.cells:   # (the committed outputs would stay in the cells not run)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    with pytest.raises(CellExecutionError, match=r"Korean output is scored by BLEU on ko-mecab morphemes too, whose "
                                                 r"tokenizer cannot be loaded \(.*\): pip install 'mecab-ko=="):
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    failed = [c.source for c in nb.cells if any(o.output_type == "error" for o in c.get("outputs", []))]
    assert len(failed) == 1 and "Translator.from_dir(MODEL_DIR, CHECKPOINT)" in failed[0], failed
    assert "sentence pairs" not in text_of(nb)   # nothing read, nothing translated


def test_multi_gpu_intro_notebook(tmp_path, monkeypatch):
    bench = tmp_path / "benchmark_train.json"
    # The shape of a training-benchmark file; the notebook must show whatever such a file holds.
    row = dict(batch_size=64, omp_num_threads=1, ms_per_update=100.0, time_vs_1_device=1.0)
    bench.write_text(json.dumps({"machine": {"cpu": "test"}, "train": [dict(row, num_devices=1, tok_per_s=1000.0),
                                                                      dict(row, num_devices=2, tok_per_s=1500.0)]}))
    monkeypatch.setenv("NMT_BENCHMARK_JSON", str(bench))
    nb = execute("multi_gpu_intro.ipynb")
    text = text_of(nb)
    assert "--cpu-devices 2 -> [cpu(0), cpu(1)]" in text
    assert "share 1: src (3, 9), target lengths [4, 4, 0]" in text
    assert "largest parameter difference, 1 vs 2 devices:" in text
    assert "batch 64, 2 device(s): 1500 tokens/s = 1.50x the 1-device rate" in text
    assert [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]   # the plot


@pytest.mark.parametrize("variable, value, least", [("NMT_MAX_SENTENCES", "-1", 0), ("NMT_BEAM_SIZE", "five", 1),
                                                    ("NMT_BEAM_SIZE", "0", 1)])
def test_bleu_eval_names_a_count_that_is_no_whole_number(variable, value, least, monkeypatch):
    """NMT_MAX_SENTENCES=-1 scored nothing and ended in "score: no hypotheses to score"; NMT_BEAM_SIZE=five in
    int()'s "invalid literal", NMT_BEAM_SIZE=0 printed beam 5, then failed in the search."""
    from nbclient.exceptions import CellExecutionError
    monkeypatch.setenv(variable, value)
    with pytest.raises(CellExecutionError, match=f"{variable}='{value}': give a whole number >= {least}"):
        execute("bleu_eval.ipynb")


def test_bleu_eval_names_its_variable_for_a_data_dir_that_is_not_there(monkeypatch):
    """NMT_DATA_DIR=/nonexistent said "--data-dir /nonexistent: no such directory", a flag the notebook has not."""
    from nbclient.exceptions import CellExecutionError
    monkeypatch.setenv("NMT_DATA_DIR", "/nonexistent")
    with pytest.raises(CellExecutionError, match=r"NMT_DATA_DIR='/nonexistent': no such directory \(relative to "
                                                 r".*notebooks\)"):
        execute("bleu_eval.ipynb")


def test_bleu_eval_refuses_a_data_dir_beside_its_own_test_files(tmp_path_factory, tmp_path, monkeypatch):
    """NMT_DATA_DIR given with NMT_SRC_FILE and NMT_REF_FILE was not used, without a word (the files were scored):
    refused, as nmt-evaluate refuses --data-dir with --src-file, naming the variables, before the model loads."""
    from nbclient.exceptions import CellExecutionError
    model = tiny_model(tmp_path_factory)
    monkeypatch.setenv("NMT_MODEL_DIR", str(model))
    monkeypatch.setenv("NMT_SRC_FILE", str(synth_file(model, "test.ko")))
    monkeypatch.setenv("NMT_REF_FILE", str(synth_file(model, "test.en")))
    monkeypatch.setenv("NMT_DATA_DIR", str(tmp_path))
    nb = nbformat.read(NOTEBOOKS / "bleu_eval.ipynb", as_version=4)
    for cell in nb.cells:   # (the committed outputs would stay in the cells not run)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    with pytest.raises(CellExecutionError, match=rf"NMT_DATA_DIR='{tmp_path}' is where the recipe's test sets are "
                                                 r"read; NMT_SRC_FILE and NMT_REF_FILE are read where they are: unset "
                                                 r"NMT_DATA_DIR \(or NMT_SRC_FILE and NMT_REF_FILE, to score"):
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    assert "model " not in text_of(nb)   # (refused in the parameters' cell: no model loaded)


def test_bleu_eval_names_its_variables_when_the_models_test_set_is_gone(tmp_path_factory, tmp_path, monkeypatch):
    """A model whose recorded test files moved (or whose recorded mirror is gone): the error advised "give them as
    --src-file and --ref-file" (or "--data-dir given again"), flags the notebook has not; it names its variables."""
    import shutil
    from nbclient.exceptions import CellExecutionError
    model = tmp_path / "model"
    shutil.copytree(tiny_model(tmp_path_factory), model)
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    config["data"]["test_src"] = str(tmp_path / "moved" / "test.ko")
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    monkeypatch.setenv("NMT_MODEL_DIR", str(model))
    monkeypatch.delenv("NMT_SRC_FILE", raising=False)
    monkeypatch.delenv("NMT_REF_FILE", raising=False)
    with pytest.raises(CellExecutionError, match=r"moved/test.ko: file not found.*\n\(in this notebook: NMT_DATA_DIR "
                                                 r"for --data-dir, NMT_SRC_FILE and NMT_REF_FILE for --src-file"):
        execute("bleu_eval.ipynb")


def test_bleu_eval_names_its_variable_for_a_model_dir_that_is_not_there(tmp_path, monkeypatch):
    """A missing model directory (the quick start's default, or NMT_MODEL_DIR) said "model directory ...: no such
    directory; give a directory written by nmt-train", without the variable that gives one to the notebook."""
    from nbclient.exceptions import CellExecutionError
    monkeypatch.setenv("NMT_MODEL_DIR", str(tmp_path / "none"))
    said = rf"NMT_MODEL_DIR='{tmp_path / 'none'}': no such directory \(relative to .*notebooks\); point it at a model"
    with pytest.raises(CellExecutionError, match=said + " directory written by nmt-train"):
        execute("bleu_eval.ipynb")


def test_bleu_eval_reads_a_model_and_data_dir_under_home_as_the_library_does(tmp_path_factory, tmp_path, monkeypatch):
    """NMT_MODEL_DIR=~/model (or NMT_DATA_DIR=~/data), which Translator.from_dir (and the recipes' mirror) read under
    the home directory, was refused by the parameters cell's own check of the directory: "no such directory"."""
    model, home = tiny_model(tmp_path_factory), tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "model").symlink_to(model, target_is_directory=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))   # (the kernel's files: not under HOME)
    monkeypatch.setenv("NMT_MODEL_DIR", "~/model")
    monkeypatch.setenv("NMT_SRC_FILE", str(synth_file(model, "test.ko")))
    monkeypatch.setenv("NMT_REF_FILE", str(synth_file(model, "test.en")))
    monkeypatch.setenv("NMT_MAX_SENTENCES", "3")
    monkeypatch.setenv("NMT_PLOT_DIR", str(tmp_path / "plots"))
    text = text_of(execute("bleu_eval.ipynb"))
    assert "model ~/model: ko -> en" in text and "test set test.ko: 3 sentence pairs" in text
    # NMT_DATA_DIR goes without the notebook's own test files (refused beside them): ~/data passes the check of the
    # directory, and the model's own test files (config.json's; the synthetic model has no recipe) are scored
    monkeypatch.delenv("NMT_SRC_FILE")
    monkeypatch.delenv("NMT_REF_FILE")
    monkeypatch.setenv("NMT_DATA_DIR", "~/data")
    text = text_of(execute("bleu_eval.ipynb"))
    assert "model ~/model: ko -> en" in text and "test set test:" in text, text[:600]
