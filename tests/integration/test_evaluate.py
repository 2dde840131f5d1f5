"""`nmt-evaluate` on a tiny trained model: sacreBLEU scores with signatures, scores.json merging, --json, recipe test
sets, Korean output (ko-mecab BLEU) and bad input."""
from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional

import pytest
import sacrebleu

from nmt import checkpoint as ckpt
from nmt.cli_decode import evaluate_main
from nmt.config import Config
from nmt.scoring import record_scores
from nmt.translate import Translator
from tests.synth import run_command, twin_of

REPO = Path(__file__).resolve().parents[2]


def q(path) -> str:
    """`path` as one word of a shell command line (the checkout's path or $TMPDIR may hold a space)."""
    return shlex.quote(str(path))


@pytest.fixture
def model_copy(model_dir, tmp_path) -> Path:
    """A copy of the shared model whose scores.json this test may write."""
    dst = tmp_path / "model"
    shutil.copytree(model_dir, dst, ignore=shutil.ignore_patterns(ckpt.SCORES, ckpt.SCORES + ".lock"))
    return dst


def run(argv, capsys):
    """Exit code, stdout and stderr of the command (argparse's errors exit with 2, as on the command line)."""
    return run_command(evaluate_main, argv, capsys)


def copied_test_set(model_copy, tmp_path) -> Path:
    """The model's test files copied to `tmp_path` (set.ko, set.en): a set scored under its source path, where the
    model's own files are its set "test"."""
    src = Path(Config.load(model_copy / ckpt.CONFIG).data.test_src)
    for suffix in (".ko", ".en"):
        shutil.copy(src.with_suffix(suffix), tmp_path / f"set{suffix}")
    return tmp_path / "set.ko"


def test_a_score_against_other_references_replacing_one_says_so(model_copy, capsys, tmp_path):
    """The same source scored against other references (a second one, or another file) replaced the earlier entry of
    the default name without a word."""
    src = copied_test_set(model_copy, tmp_path)
    ref, ref2 = src.with_suffix(".en"), tmp_path / "ref2.en"
    ref2.write_text(ref.read_text(encoding="utf-8").replace(" ", "  "), encoding="utf-8")
    for refs in ([ref], [ref]):   # (the same again: no word)
        code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", *refs], capsys)
        assert code == 0 and "is replaced by this one" not in err, err
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, ref2], capsys)
    assert code == 0 and f"its best entry in scores.json, scored against {ref.resolve()}, is replaced by this one " \
        f"against {ref.resolve()}, {ref2.resolve()} (another --name keeps both)" in err, err
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref2, ref], capsys)
    assert code == 0 and "is replaced by this one" not in err, err   # (the same references, in another order)
    from nmt.eval_sets import file_name   # a pipe by the name given, not its /proc/PID/fd/pipe:[N] (a new one per run)
    assert (file_name("/dev/stdin"), file_name(str(ref))) == ("/dev/stdin", str(ref.resolve()))


def test_the_json_file_is_none_of_the_hyp_dir_files_and_a_pipe_has_a_steady_name(model_copy, tmp_path, capsys):
    """`--json hx/x.en --hyp-dir hx --name x` wrote the translations and then the JSON over them, without a word; a
    piped source was named /proc/PID/fd/pipe:[N] in the report, --json and the --hyp-dir files: a new name each run."""
    src = copied_test_set(model_copy, tmp_path)
    ref = src.with_suffix(".en")
    for json_file in (tmp_path / "hx" / "x.en", tmp_path / "hx" / "x.ref.en"):
        code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", "x", "--no-save",
                            "--hyp-dir", tmp_path / "hx", "--json", json_file], capsys)
        assert code == 2 and f"--json {json_file} is one of the files --hyp-dir {tmp_path / 'hx'} writes" in err, err
    assert not (tmp_path / "hx" / "x.en").exists()
    for _ in range(2):
        with open(src, "rb") as f:
            r = subprocess.run(f"cat | {q(sys.executable)} {q(REPO / 'scripts' / 'evaluate.py')} --model-dir "
                               f"{q(model_copy)} --src-file /dev/stdin --ref-file {q(ref)} --no-save --hyp-dir "
                               f"{q(tmp_path / 'hp')}",
                               shell=True, stdin=f, capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert r.returncode == 0 and r.stdout.startswith("/dev/stdin: "), r.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "hp").iterdir()) == ["stdin.en", "stdin.ref.en"]
    with open(src, "rb") as f:   # "-" is /dev/stdin: a file redirected to it is that file (it was "no file (a pipe?)")
        r = subprocess.run([sys.executable, str(REPO / "scripts" / "evaluate.py"), "--model-dir", str(model_copy),
                            "--src-file", "-", "--ref-file", str(ref)], stdin=f, capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr[-2000:]
    assert list(json.loads((model_copy / ckpt.SCORES).read_text())) == [str(src.resolve())]


def test_sigterm_stops_an_evaluation_as_ctrl_c_does(model_copy, tmp_path, capsys, monkeypatch):
    """SIGTERM (or SIGHUP) killed nmt-evaluate without a word (exit -15), where nmt-translate and nmt-score stop as
    Ctrl-C does, with exit code 143 (129)."""
    import signal
    import nmt.cli_decode
    evaluate_set = nmt.cli_decode._evaluate_set

    def terminated(*args, **kwargs):   # the signal arrives as the set is decoded
        os.kill(os.getpid(), signal.SIGTERM)
        return evaluate_set(*args, **kwargs)
    monkeypatch.setattr(nmt.cli_decode, "_evaluate_set", terminated)
    src = copied_test_set(model_copy, tmp_path)
    code, out, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", src.with_suffix(".en")], capsys)
    assert code == 143 and "SIGTERM received: stopping" in err and "interrupted" in err, err
    assert not (model_copy / ckpt.SCORES).exists()


def test_standard_output_is_none_of_the_files_the_evaluation_reads_or_writes(model_copy, tmp_path):
    """`--dev-set >> dev.en` appended the report to the model's dev references (and --dev-set failed after); and
    `--hyp-dir hd > hd/<set>.en` lost the report to the translations written over it; both with exit code 0."""
    cfg = json.loads((model_copy / ckpt.CONFIG).read_text())
    for key in ("dev_src", "dev_tgt"):   # (the model's own files, copied: written into if the check fails)
        cfg["data"][key] = str(shutil.copy(cfg["data"][key], tmp_path / Path(cfg["data"][key]).name))
    (model_copy / ckpt.CONFIG).write_text(json.dumps(cfg))
    src = copied_test_set(model_copy, tmp_path)
    (tmp_path / "hd").mkdir()
    script = f"{q(sys.executable)} {q(REPO / 'scripts' / 'evaluate.py')} --model-dir {q(model_copy)} --no-save"
    for line, says in ((f"{script} --dev-set >> {q(cfg['data']['dev_tgt'])}", "standard output is the model's "
                        "dev-tgt file: writing it would destroy what this command reads"),
                       (f"{script} --src-file {q(src)} --ref-file {q(src.with_suffix('.en'))} --hyp-dir "
                        f"{q(tmp_path / 'hd')} > {q(tmp_path / 'hd' / 'set.ko.en')}",
                        "standard output is the --hyp-dir file")):
        before = Path(cfg["data"]["dev_tgt"]).read_bytes()
        r = subprocess.run(line, shell=True, executable="/bin/bash", stderr=subprocess.PIPE, text=True, timeout=300,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert r.returncode == 2 and says in r.stderr, (line, r.stderr[-2000:])
        assert Path(cfg["data"]["dev_tgt"]).read_bytes() == before


def test_scores_with_signatures_saved_and_merged(model_copy, capsys, tmp_path):
    src = copied_test_set(model_copy, tmp_path)   # the synthetic test set
    ref = src.with_suffix(".en")
    code, out, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref], capsys)
    assert code == 0, err
    hyps = Translator.from_dir(model_copy).translate(src.read_text(encoding="utf-8").splitlines())
    refs = ref.read_text(encoding="utf-8").splitlines()
    bleu = sacrebleu.corpus_bleu(hyps, [refs], tokenize="13a")
    chrf = sacrebleu.corpus_chrf(hyps, [refs])
    report = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("  ")}
    assert report["BLEU"] == [f"{bleu.score:.2f}", "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.3"]
    assert report["chrF"] == [f"{chrf.score:.2f}", "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.4.3"]
    assert bleu.score > 50
    scores = json.loads((model_copy / ckpt.SCORES).read_text())
    key = str(src.resolve())
    entry = scores[key]["best"]
    assert entry["bleu"] == pytest.approx(bleu.score) and entry["n"] == len(refs) and entry["beam_size"] == 5
    assert entry["params_file"] == ckpt.PARAMS_BEST and entry["step"] == ckpt.TrainState.load(model_copy).best_step
    # a second evaluation (another name and checkpoint) is merged in; the first one stays as it was
    code, out, _ = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", "synth-test",
                        "--checkpoint", "latest", "--json"], capsys)
    report = json.loads(out)
    assert code == 0 and report["results"]["synth-test"]["beam_size"] == 5
    scores2 = json.loads((model_copy / ckpt.SCORES).read_text())
    step = ckpt.TrainState.load(model_copy).step
    assert scores2[key] == scores[key] and scores2["synth-test"][str(step)]["params_file"] == ckpt.params_file(step)
    assert scores2["synth-test"][str(step)]["checkpoint"] == str(step)   # (it said "latest", which moves on)
    assert not [p for p in model_copy.iterdir() if p.name.endswith(".tmp")]
    # --no-save leaves scores.json alone; --hyp-dir writes the translations and the references they were scored
    # against, which sacreBLEU's command line then scores as nmt-evaluate did
    code, out, _ = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", "other",
                        "--no-save", "--max-sentences", "5", "--hyp-dir", model_copy / "hyps"], capsys)
    assert code == 0 and json.loads((model_copy / ckpt.SCORES).read_text()) == scores2
    assert (model_copy / "hyps" / "other.en").read_text(encoding="utf-8").splitlines() == hyps[:5]
    assert (model_copy / "hyps" / "other.ref.en").read_text(encoding="utf-8").splitlines() == refs[:5]
    cli = subprocess.run([sys.executable, "-m", "sacrebleu", str(model_copy / "hyps" / "other.ref.en"), "-i",
                          str(model_copy / "hyps" / "other.en"), "-m", "bleu", "-b", "-w", "2"],
                         capture_output=True, text=True, check=True)
    assert f"BLEU            {float(cli.stdout):6.2f}" in out


def test_record_scores_keeps_other_entries_and_rejects_a_corrupt_file(tmp_path):
    record_scores(tmp_path, "a", "best", {"bleu": 1.0})
    record_scores(tmp_path, "b", "best", {"bleu": 2.0})
    record_scores(tmp_path, "a", "700", {"bleu": 3.0})
    record_scores(tmp_path, "a", "best", {"bleu": 4.0})
    assert json.loads((tmp_path / ckpt.SCORES).read_text()) == {"a": {"best": {"bleu": 4.0}, "700": {"bleu": 3.0}},
                                                                 "b": {"best": {"bleu": 2.0}}}
    (tmp_path / ckpt.SCORES).write_text("{oops")
    with pytest.raises(ckpt.CheckpointError, match="scores.json is not valid JSON"):
        record_scores(tmp_path, "c", "best", {})
    assert (tmp_path / ckpt.SCORES).read_text() == "{oops"   # never overwritten: earlier scores are not lost
    for other in ("[]", '{"a": 3}'):   # JSON, but not scores: refused the same way, not a TypeError
        (tmp_path / ckpt.SCORES).write_text(other)
        with pytest.raises(ckpt.CheckpointError, match="scores.json is not a scores file"):
            record_scores(tmp_path, "c", "best", {})


def test_a_damaged_scores_file_is_named_before_decoding(model_copy, tmp_path, capsys, monkeypatch):
    """Every test set was decoded, then recording its scores failed: the scores were never shown."""
    from nmt.translate import Translator
    cfg = Translator.from_dir(model_copy).config.data
    (model_copy / ckpt.SCORES).write_text("{oops")
    decoded = []

    def translate(self, lines, *args, **kwargs):
        decoded.append(lines)
        return ["x"] * len(lines)
    monkeypatch.setattr(Translator, "translate", translate)
    code, _, err = run(["--model-dir", model_copy, "--src-file", cfg.test_src, "--ref-file", cfg.test_tgt], capsys)
    assert code == 2 and "scores.json is not valid JSON" in err and decoded == []
    monkeypatch.undo()
    code, out, _ = run(["--model-dir", model_copy, "--src-file", cfg.test_src, "--ref-file", cfg.test_tgt,
                        "--no-save", "--max-sentences", "5"], capsys)
    assert code == 0 and "BLEU" in out


def test_a_name_of_the_models_own_sets_is_only_for_their_files(model_copy, tmp_path, capsys):
    """`--name test` (or a recipe's test set, or dev) on other files replaced the model's recorded score of that set
    with theirs, which /info and nmt-export then showed as the model's test score."""
    from nmt.translate import Translator
    cfg = Translator.from_dir(model_copy).config.data
    src, ref = tmp_path / "s.ko", tmp_path / "r.en"
    src.write_text("리 니\n", encoding="utf-8")
    ref.write_text("ni ri\n", encoding="utf-8")
    for name, what, instead in (("test", "test", "--recipe-tests"), ("dev", "dev", "--dev-set")):
        code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", name], capsys)
        assert code == 2 and f"--name {name} is the name of the model's own {what} set, which {src} and {ref} are " \
            f"not: their scores would replace that set's in scores.json; give another --name (or {instead})" in err
    assert not (model_copy / ckpt.SCORES).exists()
    code, _, err = run(["--model-dir", model_copy, "--src-file", cfg.test_src, "--ref-file", cfg.test_tgt, "--name",
                        "test", "--max-sentences", "3"], capsys)   # its own test files: that set, under its name
    assert code == 0, err
    code, out, err = run(["--model-dir", model_copy, "--src-file", cfg.test_src, "--ref-file", cfg.test_tgt],
                         capsys)   # also without --name (recorded under the source file's path, beside "test")
    assert code == 0 and out.startswith("test: "), err
    assert list(json.loads((model_copy / ckpt.SCORES).read_text())) == ["test"]
    shutil.copy(cfg.test_tgt, tmp_path / "r2.en")   # a further reference: another set (nrefs:2)
    code, _, err = run(["--model-dir", model_copy, "--src-file", cfg.test_src, "--ref-file", cfg.test_tgt,
                        tmp_path / "r2.en", "--name", "test"], capsys)
    assert code == 2 and f"--name test is the name of the model's own set of {cfg.test_src} and {cfg.test_tgt} " \
        "alone; with 1 more reference(s) it is another set (nrefs:2)" in err, err   # (not: the files "are not" it)
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", "dev", "--no-save"],
                       capsys)   # nothing recorded: any name, for the report and --hyp-dir
    assert code == 0, err
    code, _, err = run(["--model-dir", model_copy, "--dev-set", "--name", "mine"], capsys)   # (ignored without a word)
    assert code == 2 and "--name mine names the set of --src-file and --ref-file" in err, err
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--data-dir", "/nonexistent",
                        "--no-save"], capsys)   # (so was --data-dir)
    assert code == 2 and "--data-dir /nonexistent is where --recipe-tests and --dev-set read the model's own sets; " \
        "--src-file and --ref-file are read where they are: drop it" in err, err
    for flag, kind in (("--recipe-tests", "test"), ("--dev-set", "dev")):   # (a model of its own files: so was it)
        code, _, err = run(["--model-dir", model_copy, flag, "--data-dir", "/nonexistent", "--no-save"], capsys)
        assert code == 2 and f"--data-dir /nonexistent is where a recipe's corpora are read; this model's {kind} set " \
            "comes from its own files" in err, err
    saved = json.loads((model_copy / ckpt.CONFIG).read_text())   # a recipe's model: its sets' names, not "test"
    saved["data"].update(recipe="tatoeba", test_src=None, test_tgt=None)
    (model_copy / ckpt.CONFIG).write_text(json.dumps(saved))
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", "tatoeba-test"],
                       capsys)
    # (not "which X and Y are not" that set's: the recipe's own files were refused so; nothing tells them apart)
    assert code == 2 and "--name tatoeba-test is the name of a test set of the model's recipe, which --recipe-tests " \
        "scores as training read it" in err and "are not" not in err, err
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", "dev"], capsys)
    assert code == 2 and "--name dev is the name of the model's own dev set" in err and "(or --dev-set)" in err, err
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", "test", "--no-save"],
                       capsys)
    assert code == 0, err


def test_scores_of_a_pipe_are_recorded_under_a_name_given_for_them(model_copy, tmp_path, capsys):
    """`--src-file /dev/stdin` (or <(zcat ...)) recorded its scores under the pipe's per-process path
    (/proc/N/fd/pipe:[...]), a name that means nothing and never comes again: refused without --name."""
    import os
    cfg = Config.load(model_copy / ckpt.CONFIG).data
    read, write = os.pipe()
    os.write(write, open(cfg.test_src, "rb").read())
    os.close(write)
    pipe = f"/dev/fd/{read}"
    code, _, err = run(["--model-dir", model_copy, "--src-file", pipe, "--ref-file", cfg.test_tgt], capsys)
    assert code == 2 and f"--src-file {pipe} is no file (a pipe?), whose path would name its scores in scores.json; " \
        "give --name (or --no-save)" in err, err
    assert not (model_copy / ckpt.SCORES).exists()
    code, _, err = run(["--model-dir", model_copy, "--src-file", pipe, "--ref-file", cfg.test_tgt, "--name", "mine",
                        "--max-sentences", "0"], capsys)
    os.close(read)
    assert code == 0, err
    assert list(json.loads((model_copy / ckpt.SCORES).read_text())) == ["mine"]


def test_a_config_json_edited_into_a_model_that_cannot_be_built_is_named(model_copy, capsys):
    """`"tie_weights": true` written into config.json beside unequal sizes was "--tie-weights needs --embed-size ==
    --hidden-size ... give equal sizes or --no-tie-weights", naming flags nobody gave and not the file."""
    from nmt.cli import train_main
    cfg = json.loads((model_copy / ckpt.CONFIG).read_text())
    assert cfg["model"]["embed_size"] != cfg["model"]["hidden_size"]
    cfg["model"]["tie_weights"] = True
    (model_copy / ckpt.CONFIG).write_text(json.dumps(cfg))
    code, _, err = run(["--model-dir", model_copy, "--recipe-tests"], capsys)
    assert code == 2 and f"error: {model_copy / ckpt.CONFIG}: --tie-weights needs --embed-size == --hidden-size" in err
    assert train_main(["--model-dir", str(model_copy), "--resume", "--no-progress"]) == 2
    assert f"error: --resume: {model_copy / ckpt.CONFIG}: --tie-weights needs" in capsys.readouterr().err


def test_mismatched_line_counts_name_both_files(model_copy, tmp_path, capsys):
    src = tmp_path / "s.ko"
    ref = tmp_path / "r.en"
    src.write_text("리 니\n차\n두포\n", encoding="utf-8")
    ref.write_text("ni ri\ncha\n", encoding="utf-8")
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"--src-file {src} has 3 lines but --ref-file {ref} has 2" in err
    assert not (model_copy / ckpt.SCORES).exists()
    src2 = tmp_path / "s2.ko"
    src2.write_text("리 니\n차\n", encoding="utf-8")
    ref_ref = tmp_path / "r.ref.en"
    ref_ref.write_text("ni ri\ncha\n", encoding="utf-8")
    for argv, msg in [([], "give one of: --src-file and --ref-file, --recipe-tests, --dev-set"),
                      (["--src-file", src], "must be given together"),
                      (["--src-file", src, "--ref-file", src, "--recipe-tests"], "give one of"),
                      (["--recipe-tests", "--dev-set"], "give one of"),
                      (["--src-file", tmp_path / "no.ko", "--ref-file", ref], "no.ko: file not found"),
                      # BLEU scores the best translation: an n-best list has no place here
                      (["--src-file", src2, "--ref-file", ref, "--nbest", "3"], "unrecognized arguments: --nbest 3"),
                      (["--src-file", src, "--ref-file", ref, "--max-sentences", "-1"],
                       "--max-sentences: must be >= 0 (got -1)"),
                      (["--src-file", src, "--ref-file", ref, "--prefix-words", "0"],
                       "--prefix-words: must be >= 1 (got 0)"),
                      (["--src-file", src, "--ref-file", ref, "--prefix-words", "two"], "--prefix-words: "),
                      (["--src-file", src, "--ref-file", ref, "--hyp-dir", src / "hyps"],
                       f"--hyp-dir {src / 'hyps'}: cannot make the directory"),
                      (["--src-file", src2, "--ref-file", ref, "--hyp-dir", src2],   # (it said "File exists")
                       f"--hyp-dir {src2}: cannot make the directory (a file is in its path)"),
                      # the hypotheses of a set named "r" go to HYP_DIR/r.en: here the references
                      (["--src-file", src2, "--ref-file", ref, "--name", "r", "--hyp-dir", tmp_path],
                       f"--hyp-dir {ref} is the --ref-file file: writing it would destroy what this command reads"),
                      # and their references to HYP_DIR/r.ref.en
                      (["--src-file", src2, "--ref-file", ref_ref, "--name", "r", "--hyp-dir", tmp_path],
                       f"--hyp-dir {ref_ref} is the --ref-file file"),
                      (["--src-file", src2, "--ref-file", ref, "--json", src2], f"--json {src2} is the --src-file"),
                      # written after the decoding: where it cannot be, said before
                      (["--src-file", src2, "--ref-file", ref, "--json", src2 / "r.json"],
                       f"--json {src2 / 'r.json'}: cannot make its directory {src2} (a file is in its path)"),
                      (["--src-file", src2, "--ref-file", ref, "--json", "/proc/r.json"],
                       "--json /proc/r.json: cannot create a file in /proc"),
                      (["--src-file", ref, "--ref-file", src2], f"--src-file {ref} should be the Korean side (the model "
                                                                 "translates ko -> en) but has Hangul on 0% of its "
                                                                 f"lines, against 100% in --ref-file {src2}")]:
        code, _, err = run(["--model-dir", model_copy, *argv], capsys)
        assert code == 2 and msg in err, (argv, err)
    assert ref.read_text(encoding="utf-8") == "ni ri\ncha\n" and src2.read_text(encoding="utf-8") == "리 니\n차\n"


def test_a_reference_or_translation_too_long_is_said_in_the_commands_words(model_copy, tmp_path, capsys):
    """A --ref-file (nmt-evaluate) or --tgt-file (nmt-score) line over 20,000 characters was refused "(limit 20000,
    for every file read, whatever --max-chars)": a flag neither command has. It is said without it (nmt-train's
    files still say it: tests/unit/test_corpus.py)."""
    from nmt.cli_score import score_main
    src, ref = tmp_path / "s.ko", tmp_path / "r.en"
    src.write_text("리 니\n차\n", encoding="utf-8")
    ref.write_text("ni ri\n" + "cha " * 6000 + "\n", encoding="utf-8")
    said = (f"error: {ref}:2: line is 24000 characters long (limit 20000, for every file read); the file must hold "
            "one sentence per line -- check its line ends or split this line into sentences\n")
    assert run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref], capsys) == (2, "", said)
    assert run_command(score_main, ["--model-dir", model_copy, "--src-file", src, "--tgt-file", ref], capsys) == (
        2, "", said)


def test_a_source_of_blank_lines_alone_is_scored_as_nmt_translate_translates_it(model_copy, tmp_path, capsys):
    """A --src-file of blank lines alone was refused ("the file has only blank lines"), where nmt-translate translates
    it (empty lines) and nmt-score scores it: each blank line is scored as its empty translation, against its
    reference."""
    src, ref = tmp_path / "blank.ko", tmp_path / "r.en"
    src.write_text("\n \n", encoding="utf-8")
    ref.write_text("ni ri\ncha\n", encoding="utf-8")
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", "blank",
                        "--hyp-dir", tmp_path / "hyps", "--json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    assert "2 line(s) blank on one side only (line 1, 2)" in err   # (the warning of a shifted line, as nmt-score's)
    hyps = (tmp_path / "hyps" / "blank.en").read_text(encoding="utf-8").split("\n")[:-1]
    assert hyps == Translator.from_dir(model_copy).translate(["", " "]) == ["", ""]
    result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["results"]["blank"]
    assert result["n"] == 2 and result["bleu"] == sacrebleu.corpus_bleu(hyps, [["ni ri", "cha"]]).score
    assert "blank" in json.loads((model_copy / ckpt.SCORES).read_text(encoding="utf-8"))


def test_a_refused_command_makes_no_output_directory(model_copy, tmp_path, capsys):
    """--hyp-dir and the directory of --json FILE were made as the command started, and stayed behind when a refusal
    found after them (flags that exclude each other, a checkpoint not kept) stopped it: a refused command makes
    nothing on disk. They are still found unwritable before any work, and made as their files are written."""
    out = tmp_path / "out"
    outputs = ["--hyp-dir", out / "hyps", "--json", out / "j" / "r.json"]
    for argv, says in ((["--dev-set", "--recipe-tests"], "give one of"),
                       (["--dev-set", "--prefix-words", "1", "--word-strokes"], "give --prefix-words or"),
                       (["--dev-set", "--checkpoint", "99"], "params.00000099 not found")):
        code, _, err = run(["--model-dir", model_copy, *argv, *outputs], capsys)
        assert code == 2 and says in err and not out.exists(), (argv, err)
    code, _, err = run(["--model-dir", model_copy, "--dev-set", "--no-save", *outputs], capsys)
    assert code == 0 and sorted(os.listdir(out / "hyps")) == ["dev.en", "dev.ref.en"], err
    assert json.loads((out / "j" / "r.json").read_text())["results"]["dev"]["n"] > 0


def test_recipe_tests_of_explicit_files(model_copy, capsys):
    code, out, err = run(["--model-dir", model_copy, "--recipe-tests"], capsys)
    assert code == 0, err
    assert out.startswith("test: 40 sentences") and "test" in json.loads((model_copy / ckpt.SCORES).read_text())


def test_the_models_test_files_edited_since_training_are_not_its_test_set(model_copy, tmp_path, capsys):
    """The model's own test files, edited since training (a few references changed), were scored as its set "test"
    (by --recipe-tests, or given as --src-file and --ref-file): their scores replaced those training recorded (the
    tiny model's chrF 64.33 -> 56.43 with 20 of 40 references changed), which /info and nmt-export show as the
    model's test scores. The run records its test pairs' checksum (state.json's test_sum): they are compared."""
    saved = json.loads((model_copy / ckpt.CONFIG).read_text())   # the test files where this test may edit them
    src, ref = copied_test_set(model_copy, tmp_path), tmp_path / "set.en"
    saved["data"].update(test_src=str(src), test_tgt=str(ref))
    (model_copy / ckpt.CONFIG).write_text(json.dumps(saved))
    code, _, err = run(["--model-dir", model_copy, "--recipe-tests"], capsys)   # the same pairs, moved: that set
    assert code == 0, err
    recorded = json.loads((model_copy / ckpt.SCORES).read_text())["test"]["best"]
    from nmt.export import export_model   # an export's scores.json too (/info shows it): export.json keeps the sum
    export = export_model(model_copy, tmp_path / "export")
    lines = ref.read_text(encoding="utf-8").splitlines()
    ref.write_text("".join(f"the {x}\n" if i < 5 else f"{x}\n" for i, x in enumerate(lines)), encoding="utf-8")
    says = (f"error: the model's test files ({src} and {ref}) are not the pairs its run was tested with: they have "
            "changed since")
    for flags in (["--recipe-tests"], ["--src-file", src, "--ref-file", ref], ["--src-file", src, "--ref-file", ref,
                                                                             "--name", "test"]):
        for model in (model_copy, export):
            code, _, err = run(["--model-dir", model, *flags], capsys)
            assert code == 2 and says in err and err.endswith("score them as another set with --src-file, --ref-file "
                                                              "and another --name (or --no-save)\n"), (model, err)
    assert json.loads((export / ckpt.SCORES).read_text())["test"]["best"]["chrf"] == recorded["chrf"]
    assert json.loads((model_copy / ckpt.SCORES).read_text())["test"]["best"] == recorded
    code, out, err = run(["--model-dir", model_copy, "--recipe-tests", "--no-save"], capsys)   # nothing recorded
    assert code == 0 and out.startswith("test: 40 sentences"), err
    beam = Config.load(model_copy / ckpt.CONFIG).decode.beam_size   # nor of part of it, of other decoding settings
    for flags in (["--max-sentences", "5"], ["--beam-size", str(beam + 1)], ["--prefix-words", "1"]):   # or prefixes:
        for given in (["--recipe-tests"], ["--src-file", src, "--ref-file", ref]):   # refused, "or --no-save", all
            code, _, err = run(["--model-dir", model_copy, *given, *flags], capsys)
            assert code == 0 and "not recorded in" in err, (flags, given, err)
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", "edited"], capsys)
    assert code == 0, err
    scores = json.loads((model_copy / ckpt.SCORES).read_text())
    assert scores["test"]["best"] == recorded and scores["edited"]["best"]["chrf"] != recorded["chrf"]


def test_a_model_whose_run_recorded_no_test_pairs_is_scored_on_its_own_test_files(model_copy, capsys):
    """A run from before state.json recorded its test pairs (no test_sum) has nothing to compare its test files with:
    they are its set "test", as they were (not refused as changed since)."""
    state = json.loads((model_copy / ckpt.STATE).read_text())
    assert state.pop("test_sum")   # (this model's run recorded them)
    (model_copy / ckpt.STATE).write_text(json.dumps(state))
    code, out, err = run(["--model-dir", model_copy, "--recipe-tests"], capsys)
    assert code == 0 and out.startswith("test: 40 sentences"), err
    assert "test" in json.loads((model_copy / ckpt.SCORES).read_text())


def test_dev_set_is_the_one_validated_on_and_stays_out_of_results_tables(model_copy, capsys):
    cfg = Config.load(model_copy / ckpt.CONFIG)
    code, out, err = run(["--model-dir", model_copy, "--dev-set", "--json"], capsys)
    assert code == 0, err
    entry = json.loads(out)["results"]["dev"]
    # the same as scoring the model's dev files by name
    code, out, err = run(["--model-dir", model_copy, "--src-file", cfg.data.dev_src, "--ref-file", cfg.data.dev_tgt,
                          "--json", "--no-save"], capsys)
    by_file = next(iter(json.loads(out)["results"].values()))
    assert code == 0 and entry["n"] == by_file["n"] == 40 and entry["bleu"] == by_file["bleu"]
    assert json.loads((model_copy / ckpt.SCORES).read_text())["dev"]["best"]["bleu"] == entry["bleu"]
    from scripts.runs import load_run, results_rows
    assert "dev" not in {r["test_set"] for r in results_rows([load_run(model_copy)])}
    moved = Path(cfg.data.dev_src).with_name("moved.ko")   # the dev files moved since training: how to score them
    Path(cfg.data.dev_src).rename(moved)
    try:
        code, _, err = run(["--model-dir", model_copy, "--dev-set"], capsys)
    finally:
        moved.rename(cfg.data.dev_src)
    assert code == 2 and err.endswith(f"{cfg.data.dev_src}: file not found; check the path; if they moved, give them "
                                      "as --src-file and --ref-file\n"), err


def test_the_score_of_an_average_replaced_meanwhile_is_not_recorded(model_copy, caplog):
    """nmt-evaluate --checkpoint avg while a training run averaged other checkpoints recorded the old average's
    score as "avg" after the trainer had dropped the old entry: scores.json and the results table showed it for the
    new params.avg."""
    from nmt.corpus import Pairs
    from nmt.scoring import read_scores, score_test_set
    from tests.synth import list_params_files
    files = list_params_files(model_copy)
    ckpt.average_checkpoints(model_copy, files[-2:])
    tr = Translator.from_dir(model_copy, "avg")
    ckpt.average_checkpoints(model_copy, files[-3:])   # (the trainer, while the evaluation translates)
    cfg = Config.load(model_copy / ckpt.CONFIG)
    pairs = Pairs(Path(cfg.data.test_src).read_text().splitlines(), Path(cfg.data.test_tgt).read_text().splitlines(),
                  "test")
    with caplog.at_level(logging.WARNING, logger="nmt"):
        score_test_set(tr, "test", pairs, save=True)
    assert "test" not in read_scores(model_copy)
    assert any("params.avg holds another average now (training averaged other checkpoints since it was loaded)" in
               r.getMessage() for r in caplog.records), caplog.text


def test_a_score_made_while_a_resume_changed_the_decoding_is_not_recorded(model_copy, caplog):
    """nmt-evaluate during `nmt-train --resume --beam-size 3` recorded its beam-5 scores after the resume had
    removed the entries made at the old settings: scores.json then held a beam-5 score of a model whose config.json
    says beam 3 (an export shipped it; /info showed it)."""
    from nmt.corpus import Pairs
    from nmt.scoring import read_scores, score_test_set
    tr = Translator.from_dir(model_copy)
    cfg = Config.load(model_copy / ckpt.CONFIG)
    cfg.decode.beam_size = 3   # (the resume, while the evaluation translates)
    cfg.save(model_copy / ckpt.CONFIG)
    pairs = Pairs(Path(cfg.data.test_src).read_text().splitlines(), Path(cfg.data.test_tgt).read_text().splitlines(),
                  "test")
    with caplog.at_level(logging.WARNING, logger="nmt"):
        score_test_set(tr, "test", pairs, save=True)
    assert "test" not in read_scores(model_copy)
    assert any("--beam-size 5 (saved: 3)" in r.getMessage() for r in caplog.records), caplog.text


def test_an_ensembles_dev_set_is_every_members(model_copy, tmp_path, capsys):
    """--dev-set of an ensemble scored --model-dir's dev set alone: a member fine-tuned on other data (its dev set
    another, its training pairs maybe these) made the ensemble's dev score count pairs it had trained on."""
    same = twin_of(model_copy, tmp_path / "same")
    code, out, err = run(["--model-dir", model_copy, "--ensemble", same, "--dev-set", "--no-save"], capsys)
    assert code == 0 and out.startswith("dev: 40 sentences"), err
    state = ckpt.TrainState.load(same)
    state.dev_sum = "0" * 64   # (another run's dev pairs)
    state.save(same)
    code, out, err = run(["--model-dir", model_copy, "--ensemble", same, "--dev-set", "--no-save"], capsys)
    assert code == 2 and err.endswith(f"error: --dev-set: --ensemble {same} validated on other dev pairs than "
                                      f"--model-dir {model_copy}, whose dev set this scores, which may hold pairs it "
                                      "trained on; score files with --src-file and --ref-file instead\n"), err
    (same / ckpt.STATE).unlink()   # (as an export: no training state, no record of its dev set)
    code, out, err = run(["--model-dir", model_copy, "--ensemble", same, "--dev-set", "--no-save"], capsys)
    assert code == 0 and (f"WARNING nmt.evaluate: --dev-set: --ensemble {same} records no dev set it validated on (an "
                          "export keeps no training state): the score on --model-dir") in err, err


def test_dev_set_of_a_run_without_dev_files_is_the_pairs_held_out_of_its_training_data(model_copy, capsys):
    """A run on training files alone validates on pairs held out of them, and its log says `nmt-evaluate --dev-set`
    scores them; --dev-set said the model named no recipe and no dev files."""
    from nmt.recipes import load_data
    from nmt.encoded import text_checksum
    cfg = Config.load(model_copy / ckpt.CONFIG)
    cfg.data.dev_src = cfg.data.dev_tgt = None
    cfg.save(model_copy / ckpt.CONFIG)
    state, dev = ckpt.TrainState.load(model_copy), load_data(cfg.data).dev   # what such a run validated on
    state.dev_sum = text_checksum([*dev.src, *dev.tgt])
    state.save(model_copy)
    capsys.readouterr()   # (what this test's own reading logged)
    code, out, err = run(["--model-dir", model_copy, "--dev-set", "--json", "--no-save"], capsys)
    assert code == 0, err
    assert json.loads(out)["results"]["dev"]["n"] == len(dev.src) > 0
    # its training warned of the pairs held out ("give a dev set ... to train on them"), which --dev-set said again
    # as its own, reading the training files again: each warning once, there (-v shows it)
    held_out = "no --dev-src/--dev-tgt: 500 random training pairs are the dev set"
    assert held_out not in err and ("INFO nmt: the model's training data read again: 1 warning left out, which its "
                                    "training gave (-v shows it)") in err, err
    code, out, err = run(["--model-dir", model_copy, "--dev-set", "--json", "--no-save", "-v"], capsys)
    assert code == 0 and f"DEBUG nmt.recipes: {held_out}" in err and "left out" not in err, err


def as_tatoeba_model(model_dir: Path, data_dir: Optional[Path] = None) -> Config:
    """Rewrite the copied model's config as if it had been trained on the tatoeba recipe (no data files), and its
    state's checksum of the dev pairs validated on as such a run's: that of the recipe's dev set read from
    `data_dir`, or none (a run from before the checksum) without one."""
    from nmt.encoded import text_checksum
    from nmt.recipes import load_data
    cfg = Config.load(model_dir / ckpt.CONFIG)
    for f in ("train_src", "train_tgt", "dev_src", "dev_tgt", "test_src", "test_tgt"):
        setattr(cfg.data, f, None)
    cfg.data.recipe = "tatoeba"
    cfg.save(model_dir / ckpt.CONFIG)
    state = ckpt.TrainState.load(model_dir)
    state.dev_sum = ""
    if data_dir is not None:
        dev = load_data(replace(cfg.data, data_dir=str(data_dir))).dev
        state.dev_sum = text_checksum([*dev.src, *dev.tgt])
    state.save(model_dir)
    return cfg


def test_a_model_without_recipe_or_files_says_which_flag_cannot_work(model_copy, capsys):
    cfg = Config.load(model_copy / ckpt.CONFIG)
    for f in ("train_src", "train_tgt", "test_src", "test_tgt", "dev_src", "dev_tgt"):   # (training files alone:
        setattr(cfg.data, f, None)                                                     # their held-out dev set)
    cfg.save(model_copy / ckpt.CONFIG)
    for flag, kind in (("--recipe-tests", "test"), ("--dev-set", "dev")):
        code, _, err = run(["--model-dir", model_copy, flag], capsys)
        assert code == 2 and "Traceback" not in err, err
        assert f"{flag}: the model's data config names no known recipe (None) and no {kind} files" in err


def test_a_models_own_files_gone_missing_say_where_their_paths_come_from(model_copy, tmp_path, capsys):
    """The dev and test files of a model trained on its own files are read from the paths in its config.json; an
    error that named only the path left the user to guess where it came from."""
    cfg = Config.load(model_copy / ckpt.CONFIG)
    cfg.data.dev_src = cfg.data.test_src = str(tmp_path / "moved.ko")
    cfg.save(model_copy / ckpt.CONFIG)
    for flag, kind in (("--recipe-tests", "test"), ("--dev-set", "dev")):
        code, _, err = run(["--model-dir", model_copy, flag], capsys)
        assert code == 2 and "Traceback" not in err, err
        assert f"error: {flag}: the model's {kind} files (data.{kind}_src, data.{kind}_tgt of its config.json as " \
               f"trained): {tmp_path / 'moved.ko'}" in err


def test_korean_output_adds_ko_mecab_bleu(model_copy, tmp_path, capsys, monkeypatch):
    # The tiny model translates into romanized text; labelled as an en -> ko model, its scores must gain the ko-mecab
    # BLEU (the sources here are the romanized side, the references the Korean one, so the numbers are low: the
    # signature is what counts).
    monkeypatch.setattr(Translator, "src_lang", property(lambda self: "en"))
    monkeypatch.setattr(Translator, "tgt_lang", property(lambda self: "ko"))
    data = Config.load(model_copy / ckpt.CONFIG).data
    src, ref = Path(data.test_tgt), Path(data.test_src)
    code, out, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref], capsys)
    assert code == 0, err
    assert re.search(r"\n  BLEU ko-mecab +[0-9.]+  nrefs:1\|.*\|tok:ko-mecab-", out), out
    entry = json.loads((model_copy / ckpt.SCORES).read_text())[str(src.resolve())]["best"]
    assert "bleu_ko_mecab" in entry["extra"] and "ko-mecab" in entry["extra_signatures"]["bleu_ko_mecab"]


def test_ensemble_scores_get_their_own_entry(model_copy, tmp_path, capsys):
    twin = twin_of(model_copy, tmp_path / "twin")   # (decodes as model_copy: a copy, the same model, is refused)
    src = Path(Config.load(model_copy / ckpt.CONFIG).data.test_src)
    ref = src.with_suffix(".en")
    code, _, _ = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", "t"], capsys)
    assert code == 0
    code, out, err = run(["--model-dir", model_copy, "--ensemble", twin, "--src-file", src, "--ref-file", ref,
                          "--name", "t"], capsys)
    best = ckpt.TrainState.load(twin).best_step   # (each member's step is named: the key has the first's only)
    assert code == 0 and f"ensemble of 2 models (the others' steps: {best})" in out, err
    scores = json.loads((model_copy / ckpt.SCORES).read_text())["t"]
    assert set(scores) == {"best", "ensemble-best:twin"} and scores["ensemble-best:twin"]["member_steps"] == [best]
    assert scores["ensemble-best:twin"]["ensemble"] == [str(model_copy.resolve()), str(twin.resolve())]
    assert scores["ensemble-best:twin"]["bleu"] == pytest.approx(scores["best"]["bleu"])   # twins: same output
    code, _, err = run(["--model-dir", model_copy, "--ensemble", twin, "--src-file", src, "--ref-file", ref,
                        "--name", "t", "--checkpoint", "latest"], capsys)
    step = ckpt.TrainState.load(model_copy).step   # under the step's key, that step ("latest" went stale)
    assert code == 0 and json.loads((model_copy / ckpt.SCORES).read_text())["t"][f"ensemble-{step}:twin"][
        "checkpoint"] == str(step), err


def test_a_set_named_too_long_for_its_hyp_dir_files_is_refused_before_decoding(model_copy, tmp_path, capsys):
    """--name of 250 bytes with --hyp-dir: the translations were written, then the reference file's name (.ref.en
    more) ended the run in an OSError traceback, its scores already recorded under that name."""
    src = Path(Config.load(model_copy / ckpt.CONFIG).data.test_src)
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", src.with_suffix(".en"), "--name",
                        "a" * 250, "--hyp-dir", tmp_path / "hyp"], capsys)
    assert code == 2 and "a file name of 257 bytes, more than a file system takes (255); --hyp-dir names its files " \
        "after the set: give a shorter --name" in err and "Traceback" not in err, err
    assert not (model_copy / ckpt.SCORES).exists() and not list((tmp_path / "hyp").glob("a*"))


def test_ensembles_of_directories_of_one_name_are_recorded_apart(model_copy, tmp_path, capsys):
    """The key named each member by its directory's name alone: the ensembles with r2/m and with r3/m shared one
    entry, the second replacing the first without a word."""
    src = Path(Config.load(model_copy / ckpt.CONFIG).data.test_src)
    for run_dir in ("r2", "r3"):
        twin_of(model_copy, tmp_path / run_dir / "m")
        code, _, err = run(["--model-dir", model_copy, "--ensemble", tmp_path / run_dir / "m", "--src-file", src,
                            "--ref-file", src.with_suffix(".en"), "--name", "t", "--max-sentences", "0"], capsys)
        assert code == 0, err
    scores = json.loads((model_copy / ckpt.SCORES).read_text())["t"]
    assert set(scores) == {"ensemble-best:r2/m", "ensemble-best:r3/m"}
    assert scores["ensemble-best:r3/m"]["ensemble"][1] == str((tmp_path / "r3" / "m").resolve())


def test_json_naming_a_directory_is_refused_before_decoding(model_copy, tmp_path, capsys):
    src = Path(Config.load(model_copy / ckpt.CONFIG).data.test_src)
    code, out, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", src.with_suffix(".en"),
                          "--json", tmp_path], capsys)
    assert code == 2 and f"--json {tmp_path} is a directory: give the file to write" in err and "BLEU" not in out
    assert not (model_copy / ckpt.SCORES).exists()


def test_scores_of_part_of_a_set_are_not_recorded(model_copy, capsys, tmp_path):
    """--max-sentences is a quick look: its scores must not replace the whole set's in scores.json."""
    src = copied_test_set(model_copy, tmp_path)
    argv = ["--model-dir", model_copy, "--src-file", src, "--ref-file", src.with_suffix(".en")]
    assert run(argv, capsys)[0] == 0
    whole = (model_copy / ckpt.SCORES).read_text()
    code, out, err = run(argv + ["--max-sentences", "3"], capsys)
    assert code == 0 and "3 sentences" in out
    assert "not recorded in" in err and "scores recorded" not in err
    assert (model_copy / ckpt.SCORES).read_text() == whole
    (model_copy / ckpt.SCORES).unlink()
    n = len(src.read_text(encoding="utf-8").splitlines())
    assert run(argv + ["--max-sentences", str(n)], capsys)[0] == 0   # N = the whole set: recorded
    assert json.loads((model_copy / ckpt.SCORES).read_text())[str(src.resolve())]["best"]["n"] == n


def test_scores_at_other_decoding_settings_are_not_recorded(model_copy, capsys):
    """scores.json holds the model's scores at its own decoding settings (its config.json's); --beam-size 1
    --length-penalty 2.0 silently replaced the model's test score there, which nmt-serve's /info and nmt-export then
    presented as the model's. Such scores are reported (and kept by --json) but not recorded, saying why; the
    model's own settings given explicitly are recorded."""
    src = Path(Config.load(model_copy / ckpt.CONFIG).data.test_src)
    argv = ["--model-dir", model_copy, "--src-file", src, "--ref-file", src.with_suffix(".en"), "--name", "t"]
    assert run(argv, capsys)[0] == 0
    whole = (model_copy / ckpt.SCORES).read_text()
    code, out, err = run(argv + ["--beam-size", "1", "--length-penalty", "2.0", "--json"], capsys)
    assert code == 0 and json.loads(out)["results"]["t"]["beam_size"] == 1, err
    assert f"not recorded in {model_copy / ckpt.SCORES}: decoding settings other than the model's saved ones, " \
           "--beam-size 1 (saved: 5), --length-penalty 2.0 (saved: 0.6): scores.json holds its scores at those of " \
           "its config.json, and --json keeps such scores\n" in err and "scores recorded" not in err
    assert (model_copy / ckpt.SCORES).read_text() == whole
    for flag, value, saved in (("--max-len-a", "3", "1.5"), ("--max-len-b", "4", "10"),
                               ("--max-input-tokens", "100", "250")):
        code, _, err = run(argv + ["--beam-size", "1", flag, value, "--max-sentences", "3"], capsys)
        assert code == 0 and f"(saved: 5), {flag} {float(value) if flag == '--max-len-a' else value} " \
                             f"(saved: {saved}): scores.json" in err, err
        assert err.rstrip().endswith("; the scores of part of a set (--max-sentences 3)")
        assert (model_copy / ckpt.SCORES).read_text() == whole
    (model_copy / ckpt.SCORES).unlink()
    code, _, err = run(argv + ["--beam-size", "5", "--length-penalty", "0.6", "--max-len-a", "1.5", "--max-len-b", "10",
                               "--max-input-tokens", "250", "--decode-batch-size", "7"], capsys)
    assert code == 0 and "scores recorded in" in err and "not recorded" not in err, err
    entry = json.loads((model_copy / ckpt.SCORES).read_text())["t"]["best"]
    assert (entry["beam_size"], entry["length_penalty"], entry["max_input_tokens"]) == (5, 0.6, 250)


def test_the_python_api_does_not_record_scores_at_other_settings_either(model_copy, caplog, monkeypatch):
    """`score_test_set` recorded whatever settings its Translator decoded with; only nmt-evaluate checked them."""
    import dataclasses

    from nmt.corpus import read_parallel
    from nmt.scoring import score_test_set
    from nmt.translate import Translator
    cfg = Config.load(model_copy / ckpt.CONFIG)
    pairs = read_parallel(cfg.data.test_src, cfg.data.test_tgt)
    tr = Translator.from_dir(model_copy)
    tr.decode = dataclasses.replace(tr.decode, beam_size=1)
    monkeypatch.setattr(logging.getLogger("nmt"), "propagate", True)   # to caplog, also after a run's setup_logging
    with caplog.at_level("WARNING", logger="nmt.evaluate"):
        score_test_set(tr, "t", pairs, max_sentences=3)
    assert not (model_copy / ckpt.SCORES).exists()
    assert f"t: not recorded in {model_copy / ckpt.SCORES}: decoding settings other than the model's saved ones, " \
           "--beam-size 1 (saved: 5)" in caplog.text
    tr.decode = dataclasses.replace(tr.decode, beam_size=5)
    # nor a part of the set, translations started with the references' words, or sampled ones (all recorded, over
    # the model's own score, which nmt-serve's /info and nmt-export show)
    with caplog.at_level("WARNING", logger="nmt.evaluate"):
        score_test_set(tr, "t", pairs, max_sentences=3)
        score_test_set(tr, "t", pairs, prefix_words=1)
        tr.sample = 0
        score_test_set(tr, "t", pairs)
        tr.sample = None
    assert not (model_copy / ckpt.SCORES).exists()
    for why in (f"the scores of part of a set (3 of {len(pairs.src)} sentences)",
                "translations given the references' first words (prefix_words 1)", "--sample 0 (sampling, not"):
        assert why in caplog.text, why
    score_test_set(tr, "t", pairs)
    assert json.loads((model_copy / ckpt.SCORES).read_text())["t"]["best"]["n"] == len(pairs.src)


def test_tr_decode_changed_in_place_or_a_chdir_leave_the_models_own(model_copy, caplog, monkeypatch, tmp_path):
    """`tr.decode.beam_size = 1` (as the docs change it) changed the model's saved settings too (one object), and
    score_test_set recorded beam-1 scores over the model's beam-5 ones; after an os.chdir, a Translator loaded
    from a relative path was told its directory "holds no checkpoint yet"."""
    from nmt.corpus import read_parallel
    from nmt.scoring import score_test_set
    from nmt.translate import Translator
    cfg = Config.load(model_copy / ckpt.CONFIG)
    pairs = read_parallel(cfg.data.test_src, cfg.data.test_tgt)
    monkeypatch.chdir(model_copy.parent)
    tr = Translator.from_dir(model_copy.name)
    monkeypatch.chdir(tmp_path.parent)
    tr.decode.beam_size = 1
    assert tr.config.decode.beam_size == 5
    monkeypatch.setattr(logging.getLogger("nmt"), "propagate", True)
    with caplog.at_level("WARNING", logger="nmt.evaluate"):
        score_test_set(tr, "t", pairs)
    assert f"t: not recorded in {model_copy / ckpt.SCORES}: decoding settings other than the model's saved ones, " \
           "--beam-size 1 (saved: 5)" in caplog.text and not (model_copy / ckpt.SCORES).exists()


def test_prefix_words_start_each_translation_with_its_reference(model_copy, capsys):
    """--prefix-words N: every translation begins with its reference's first N words, the next word is counted
    against the reference's, and these scores stay out of scores.json. The references here begin with another
    one's first two words, so that the free translations do not."""
    src = Path(Config.load(model_copy / ckpt.CONFIG).data.test_src)
    true_refs = src.with_suffix(".en").read_text(encoding="utf-8").splitlines()
    refs = [" ".join(o.split()[:2] + r.split()[2:]) for o, r in zip(true_refs[1:] + true_refs[:1], true_refs)]
    ref = model_copy / "refs.en"
    ref.write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    code, out, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--prefix-words", "2",
                          "--hyp-dir", model_copy / "hyps", "--json", model_copy / "r.json"], capsys)
    assert code == 0, err
    hyps = (model_copy / "hyps" / f"{src.name}.en").read_text(encoding="utf-8").splitlines()
    free = Translator.from_dir(model_copy).translate(src.read_text(encoding="utf-8").splitlines())
    assert len(hyps) == len(refs) and sum(f.split()[:2] != r.split()[:2] for f, r in zip(free, refs)) > len(refs) / 2
    for h, r in zip(hyps, refs):
        assert h.split()[:2] == r.split()[:2], (h, r)
    goes_on = [(h.split(), r.split()) for h, r in zip(hyps, refs) if len(r.split()) > 2]
    hits = sum(len(h) > 2 and h[2] == r[2] for h, r in goes_on)
    entry = json.loads((model_copy / "r.json").read_text())["results"][str(src.resolve())]
    assert entry["prefix_words"] == 2 and entry["next_word_sentences"] == len(goes_on) > 0
    assert entry["next_word_accuracy"] == pytest.approx(100.0 * hits / len(goes_on))
    assert entry["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="13a").score)
    assert "started with its reference's first 2 words" in out and re.search(r"next word +\d+\.\d\d  % of", out)
    assert "not recorded in" in err and "--prefix-words 2" in err and not (model_copy / ckpt.SCORES).exists()


def test_several_reference_files_are_several_references_per_sentence(model_copy, tmp_path, capsys):
    """--ref-file A B scores against both references of each sentence (sacreBLEU's nrefs:2), as sacrebleu A B
    does; --hyp-dir writes both beside the translations; a second file that does not fit is named."""
    src = Path(Config.load(model_copy / ckpt.CONFIG).data.test_src)
    ref = src.with_suffix(".en")
    refs = ref.read_text(encoding="utf-8").splitlines()
    # a second reference where the model's translations differ from the first: its own translations
    other = Translator.from_dir(model_copy).translate(src.read_text(encoding="utf-8").splitlines())
    assert other != refs
    ref2 = tmp_path / "ref2.en"
    ref2.write_text("".join(r + "\n" for r in other), encoding="utf-8")
    code, out, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, ref2, "--name", "two",
                          "--hyp-dir", tmp_path / "hyps"], capsys)
    assert code == 0, err
    hyps = (tmp_path / "hyps" / "two.en").read_text(encoding="utf-8").splitlines()
    bleu = sacrebleu.corpus_bleu(hyps, [refs, other], tokenize="13a")
    assert bleu.score == pytest.approx(100) and sacrebleu.corpus_bleu(hyps, [refs], tokenize="13a").score < 99
    assert re.search(rf"\n  BLEU +{bleu.score:.2f}  nrefs:2\|", out) and "2 references each" in out
    assert (tmp_path / "hyps" / "two.ref.en").read_text(encoding="utf-8").splitlines() == refs
    assert (tmp_path / "hyps" / "two.ref2.en").read_text(encoding="utf-8").splitlines() == other
    given = tmp_path / "hyps" / "two.ref2.en"   # a file of the earlier run given as the reference: kept
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", given, "--name", "two",
                        "--hyp-dir", tmp_path / "hyps", "--no-save"], capsys)
    assert code == 0 and given.read_text(encoding="utf-8").splitlines() == other, err
    code, out, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--name", "two",
                          "--hyp-dir", tmp_path / "hyps", "--no-save", "--length-penalty", "1.5"], capsys)
    assert code == 0 and sorted(p.name for p in (tmp_path / "hyps").iterdir()) == ["two.en", "two.ref.en"], err
    assert re.search(r"two: \d+ sentences, checkpoint best \(params.best, step \d+\), beam \d+, length penalty 1.5, ",
                     out), out   # (the same set scored again with one reference: the earlier .ref2 went, which
    # sacrebleu two.ref*.en would have read; the report names the length penalty, which moves the scores)
    entry = json.loads((model_copy / ckpt.SCORES).read_text())["two"]["best"]
    assert entry["bleu"] == pytest.approx(bleu.score) and entry["more_ref_files"] == [str(ref2.resolve())]
    short, korean, rows = tmp_path / "short.en", tmp_path / "ko.en", tmp_path / "nbest.jsonl"
    short.write_text("".join(r + "\n" for r in other[:-1]), encoding="utf-8")
    korean.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    rows.write_text("".join(json.dumps({"translations": [r, r + "!"], "scores": [-1.0, -2.0]}) + "\n" for r in refs))
    for extra, msg in [([short], f"--ref-file {short} has {len(refs) - 1}"),
                       ([rows], f"--ref-file {rows}: its lines are nmt-translate's n-best rows (JSON with "
                                '"translations"), not one translation per line'),   # (scored as English, silently)
                       ([korean], f"--ref-file {korean} should be the English side (the model translates ko -> "
                                  "en) but is mostly Hangul on 100% of its lines, as --src-file"),
                       ([ref2, "--name", "ref2", "--hyp-dir", tmp_path, "--beam-size", "1"],
                        f"--hyp-dir {ref2} is the --ref-file file")]:
        code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, *extra], capsys)
        assert code == 2 and msg in err and "Traceback" not in err, (extra, err)


def test_word_strokes_of_a_trained_model(model_copy, tmp_path, capsys):
    """--word-strokes: against references that are the model's own translations a translator types nothing; with
    the last word of some changed, that word (and at most one more, ending what the model adds after it)."""
    src = Path(Config.load(model_copy / ckpt.CONFIG).data.test_src)
    own = Translator.from_dir(model_copy).translate(src.read_text(encoding="utf-8").splitlines())
    changed = [" ".join(t.split()[:-1] + ["zz"]) if len(t.split()) > 1 and i % 2 else t for i, t in enumerate(own)]
    n_changed = sum(a != b for a, b in zip(own, changed))
    assert n_changed > 2
    for refs, low, high in [(own, 0, 0), (changed, n_changed, 2 * n_changed)]:
        ref = tmp_path / "refs.en"
        ref.write_text("".join(r + "\n" for r in refs), encoding="utf-8")
        code, out, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--word-strokes",
                              "--no-save", "--json"], capsys)
        assert code == 0, err
        entry = json.loads(out)["results"][str(src.resolve())]
        assert low <= entry["word_strokes"] <= high and entry["reference_words"] == sum(len(r.split()) for r in refs)
        assert entry["word_stroke_translations"] == len(refs) + (n_changed if low else 0)
    code, out, _ = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--word-strokes",
                        "--no-save"], capsys)
    strokes = re.search(r"\n  word strokes +(\d+\.\d\d)  per 100 of (\d+) reference words: (\d+) typed, (\d+) "
                        r"translations? ended after the reference's last word", out)
    assert code == 0 and strokes, out
    ratio, words, typed, ended = float(strokes[1]), *map(int, strokes.groups()[1:])
    assert (words, typed + ended) == (entry["reference_words"], entry["word_strokes"])
    assert ratio == pytest.approx(100 * (typed + ended) / words, abs=0.005)
    code, _, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--word-strokes",
                        "--prefix-words", "1"], capsys)
    assert code == 2 and "give --prefix-words or --word-strokes, not both" in err


def test_word_strokes_past_the_input_limit_count_the_rest_as_typed(model_copy, tmp_path, capsys):
    """Typed words that made the prefix longer than --max-input-tokens were cut from it, silently: the model never
    wrote them, yet they counted as accepted (66.67% where every word had to be typed)."""
    src = tmp_path / "s.ko"
    src.write_text("리 니\n", encoding="utf-8")
    ref = tmp_path / "r.en"
    ref.write_text("qq " * 12 + "\n", encoding="utf-8")   # words the model never writes: each one typed
    code, out, err = run(["--model-dir", model_copy, "--src-file", src, "--ref-file", ref, "--word-strokes",
                          "--no-save", "--json", "--max-input-tokens", "6"], capsys)
    assert code == 0, err
    entry = json.loads(out)["results"][str(src.resolve())]
    assert (entry["word_strokes"], entry["reference_words"]) == (12, 12), entry
    assert "--word-strokes: the words typed for 1 sentence(s) (line 1) became a prefix longer than " \
           "--max-input-tokens 6 pieces" in err


def test_the_summary_names_korean_outputs_morpheme_bleu_as_the_report_does(serve_model):
    """nmt-train's closing lines showed Korean output's ko-mecab BLEU by its key, "bleu_ko_mecab 0.00", where
    nmt-evaluate's report and the validation lines name it. train.log's test line gave the 13a BLEU signature alone
    beside chrF and ko-mecab BLEU: each score's own now, in its order."""
    from nmt.evaluate import EXTRA_LABELS, Scores
    sc = Scores(1.0, 2.0, "s1", "s2", 3, {"bleu_ko_mecab": 4.0}, {"bleu_ko_mecab": "s3"})
    assert sc.summary() == f"BLEU 1.00 chrF 2.00 {EXTRA_LABELS['bleu_ko_mecab']} 4.00" == \
        "BLEU 1.00 chrF 2.00 BLEU ko-mecab 4.00"
    assert sc.signatures() == "s1 | s2 | s3"
    logged = [x for x in (serve_model / "train.log").read_text(encoding="utf-8").splitlines() if " test test (" in x]
    assert logged and logged[-1].endswith("| nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.3 | "
                                          "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.4.3"), logged


def test_warnings_name_the_file_lines_of_a_set_whose_pairs_were_dropped(model_dir, tmp_path, nmt_logs):
    """`nmt-evaluate --dev-set` of dev files with blank lines (those pairs dropped as they are read) named the
    lines by their place among the pairs kept: "input line 9" for line 12 of the file, beside the warning of the
    dropped pairs, which names the file's lines."""
    from nmt.corpus import read_parallel
    from nmt.scoring import score_test_set
    from nmt.translate import Translator
    src, tgt = tmp_path / "dev.ko", tmp_path / "dev.en"
    src.write_text("리 니\n\n차\n" + "리 " * 600 + "\n두 포\n", encoding="utf-8")
    tgt.write_text("ni ri\nx\ncha\nri\ndu po\n", encoding="utf-8")
    pairs = read_parallel(src, tgt, name="dev")   # (line 2 dropped: an empty side)
    tr = Translator.from_dir(model_dir)
    _, hyps, _ = score_test_set(tr, "dev", pairs, save=False)
    said = " ".join(r.getMessage() for r in nmt_logs)
    assert "dropped 1 pair(s) with an empty side: line 2" in said and "input line 4 has" in said, said
    assert "input line 3 has" not in said and hyps == tr.translate(pairs.src)   # (the same translations)
