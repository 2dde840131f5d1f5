"""Forced decoding (`nmt.forced`, `nmt-score`) on the tiny trained model, a Transformer and their ensemble: a
translation's score is the one beam search gave it, whatever the batch; the command's output, formats and errors."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest

from nmt.cli_decode import translate_main
from nmt.cli_score import score_main
from nmt.forced import score_ids, score_lines
from nmt.models import build_model
from nmt.search import length_penalty
from nmt.translate import Translator
from tests.synth import synth_file, tiny_model_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lines(model_dir):
    def read(name):
        return synth_file(model_dir, name).read_text(encoding="utf-8").splitlines()[:12]
    return read("test.ko"), read("test.en")


def _with_members(tr: Translator, which: str) -> Translator:
    """The tiny LSTM, a seeded untrained Transformer over the same vocabularies, or both as an ensemble."""
    if which == "lstm":
        return tr
    mx.random.seed(3)
    net = build_model(tiny_model_config("transformer"), tr.src_tok.vocab_size, tr.tgt_tok.vocab_size)
    net.initialize(mx.init.Xavier(magnitude=2.24))
    net.hybridize(static_alloc=True)
    out = Translator(net, tr.src_tok, tr.tgt_tok, tr.decode)
    if which == "ensemble":
        out.members = [tr.net, net]
    return out


@pytest.mark.parametrize("which", ["lstm", "transformer", "ensemble"])
@pytest.mark.parametrize("beam, k", [(4, 3), (1, 1)])   # beam 1: greedy search, which scores the same way
def test_a_translation_scores_what_beam_search_gave_it(tr, lines, which, beam, k):
    t = _with_members(tr, which)
    src = lines[0]
    nbest = t.translate_ids(src, beam_size=beam, nbest=k)
    src_ids = t.source_ids(src)
    _, _, max_len = t.source_batch(src_ids, mx.cpu())
    pairs = [(i, y, s) for i, h in enumerate(nbest) for y, s in h]
    scored = score_ids(t, [src_ids[i] for i, _, _ in pairs], [y for _, y, _ in pairs], t.decode.length_penalty_alpha)
    ended, cut = 0, 0
    for (i, y, search_score), sc in zip(pairs, scored):
        assert sc.pieces[-1] == "</s>" and len(sc.pieces) == len(y) + 1 == len(sc.piece_log_probs)
        if len(y) < max_len[i]:   # ended by EOS, which the score counts
            ended += 1
            assert sc.score == pytest.approx(search_score, abs=1e-4)
        else:                     # stopped at its maximum length: the search's score has no EOS
            cut += 1
            penalty = float(length_penalty(np.array(len(y)), t.decode.length_penalty_alpha))
            no_eos = sum(sc.piece_log_probs[:-1]) / penalty
            assert no_eos == pytest.approx(search_score, abs=1e-4)
    assert ended + cut == len(pairs) >= 10 * k
    if which != "transformer":   # an untrained Transformer rarely ends a translation
        assert ended > 0


def test_a_pair_scores_the_same_alone_and_in_any_batch(tr, lines):
    src, tgt = lines
    batched = score_lines(tr, src, tgt)
    alone = [score_lines(tr, [s], [t])[0] for s, t in zip(src, tgt)]
    reversed_ = score_lines(tr, src[::-1], tgt[::-1])[::-1]
    for a, b, c in zip(batched, alone, reversed_):
        assert a.score == pytest.approx(b.score, abs=1e-5) == pytest.approx(c.score, abs=1e-5)
        assert a.pieces == b.pieces
    # the references of a model that learned the task score better than another sentence's reference
    wrong = score_lines(tr, src, tgt[1:] + tgt[:1])
    assert sum(a.score > w.score for a, w in zip(batched, wrong)) >= 10


def test_a_translation_on_several_lines_is_refused(tr, lines):
    """Read as one sentence, a translation of two lines would be scored as another sentence than either."""
    from nmt.corpus import CorpusError
    src, tgt = lines
    with pytest.raises(CorpusError, match="hyps:4: the translation has text on 2 lines"):
        score_lines(tr, src[:3], [tgt[0], tgt[1], tgt[2] + "\n" + tgt[0]], first_line=2, target_name="hyps")
    with pytest.raises(ValueError, match=r"^sources\[0\] has text on 2 lines"):
        score_lines(tr, [src[0] + "\r" + src[1]], tgt[:1])
    # str.splitlines' other line boundaries, where "\n" was refused, were scored as one sentence
    for sep in ("\u2028", "\x1c", "\x0b"):
        with pytest.raises(CorpusError, match="hyps:3: the translation has text on 2 lines"):
            score_lines(tr, src[:2], [tgt[0], tgt[1] + sep + tgt[0]], first_line=2, target_name="hyps")
        with pytest.raises(ValueError, match=r"^sources\[1\] has text on 2 lines"):
            score_lines(tr, [src[0], src[0] + sep + src[1]], tgt[:2])
    assert score_lines(tr, iter(src[:3]), iter(tgt[:3])) == score_lines(tr, src[:3], tgt[:3])


def test_without_a_length_penalty_the_score_is_the_log_probability(tr, lines):
    import dataclasses
    plain = Translator(tr.net, tr.src_tok, tr.tgt_tok, dataclasses.replace(tr.decode, length_penalty_alpha=0.0))
    normalized = score_lines(tr, *lines)
    for p, n in zip(score_lines(plain, *lines), normalized):
        assert p.score == p.log_prob == pytest.approx(sum(p.piece_log_probs), abs=1e-9)
        assert n.log_prob == pytest.approx(p.log_prob, abs=1e-6)
        assert p.log_prob < 0 and all(x <= 0 for x in p.piece_log_probs)
        penalty = ((5 + len(n.pieces)) / 6) ** tr.decode.length_penalty_alpha
        assert n.score == pytest.approx(p.log_prob / penalty, rel=1e-9)


def run(argv, capsys):
    code = score_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_writes_one_score_per_pair(tr, model_dir, lines, tmp_path, capsys):
    src, tgt = lines
    (tmp_path / "s.ko").write_text("\n".join(src + [""]) + "\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("\n".join(tgt + ["x"]) + "\n", encoding="utf-8")
    code, out, err = run(["--model-dir", model_dir, "--src-file", tmp_path / "s.ko", "--tgt-file", tmp_path / "t.en"],
                         capsys)
    assert code == 0, err
    scores = [float(x) for x in out.splitlines()]
    assert len(scores) == 13 and np.isfinite(scores).all()   # an empty source is scored too
    expected = [s.score for s in score_lines(tr, src, tgt)]
    np.testing.assert_allclose(scores[:12], expected, atol=2e-6)
    assert "scored 13 pairs" in err and "perplexity" in err
    code, _, err = run(["--model-dir", model_dir, "--src-file", tmp_path / "s.ko", "--tgt-file", tmp_path / "t.en",
                        "--output-format", "json", "--length-penalty", "0", "--output", tmp_path / "out.jsonl"],
                       capsys)
    assert code == 0, err
    rows = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 13 and set(rows[0]) == {"score", "log_prob", "length", "pieces", "piece_log_probs"}
    assert all(r["score"] == r["log_prob"] and r["length"] == len(r["pieces"]) == len(r["piece_log_probs"])
               and r["pieces"][-1] == "</s>" for r in rows)
    # blank lines one file ends with and the other has not: dropped with a warning, as nmt-evaluate drops them (they
    # were "line counts differ")
    (tmp_path / "t.en").write_text("\n".join(tgt + ["x", "", ""]) + "\n", encoding="utf-8")
    code, out, err = run(["--model-dir", model_dir, "--src-file", tmp_path / "s.ko", "--tgt-file", tmp_path / "t.en"],
                         capsys)
    assert code == 0 and len(out.splitlines()) == 13 and "t.en: ignored 2 blank line(s) at the end of the file" in err


def test_a_long_corpus_says_how_far_it_got(model_dir, lines, tmp_path, capsys, monkeypatch):
    """Scoring a corpus to filter it (millions of pairs) said nothing until the end; every REPORT_SECONDS it now logs
    the pairs scored so far (here at every chunk of 5 but the last; none with the default, a minute)."""
    import nmt.forced
    import nmt.stream
    src, tgt = lines
    (tmp_path / "s.ko").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    argv = ["--model-dir", model_dir, "--src-file", tmp_path / "s.ko", "--tgt-file", tmp_path / "t.en"]
    monkeypatch.setattr(nmt.forced, "SCORE_CHUNK", 5)
    whole = run(argv, capsys)
    assert whole[0] == 0 and "so far" not in whole[2]
    monkeypatch.setattr(nmt.stream, "REPORT_SECONDS", 0.0)
    code, out, err = run(argv, capsys)
    assert code == 0 and out == whole[1]
    assert re.findall(r"(\d+ of \d+) pairs scored so far", err) == ["5 of 12", "10 of 12"]


def test_the_script_runs_from_a_checkout(model_dir, tmp_path):
    (tmp_path / "s.ko").write_text("리 니\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("ni ri\n", encoding="utf-8")
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "score.py"), "--model-dir", str(model_dir),
                        "--src-file", str(tmp_path / "s.ko"), "--tgt-file", str(tmp_path / "t.en")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(r.stdout.splitlines()) == 1 and float(r.stdout) < 0


def test_every_translation_the_search_may_write_is_scored(model_dir):
    """A translation is refused as longer than nmt-translate may write, 3 x (a target prefix of --max-input-tokens
    pieces + the search's most, 1.5 x 251 + 10 = 387 by default): the limit was --max-input-tokens itself, and one
    long translation of nmt-translate, cut off at 387 pieces, failed a whole `nmt-translate | nmt-score`; then 387,
    which a prefix, or byte pieces written as U+FFFD (3 pieces read back), still passed."""
    from nmt.corpus import CorpusError
    from nmt.forced import target_ids
    tr = Translator.from_dir(model_dir)
    lengths = {k: len(target_ids(tr, ["ri " * k], limit=10 ** 6)[0]) for k in range(1850, 1950)}
    longest = max(k for k, n in lengths.items() if n <= 1911)
    assert lengths[longest] == 1911, lengths
    assert len(target_ids(tr, ["ri " * longest])[0]) == 1911
    with pytest.raises(CorpusError, match=f"target:1: the translation has {lengths[longest + 1]} subword tokens, "
                                          "more than 1911"):
        target_ids(tr, ["ri " * (longest + 1)])
    tr.decode.max_len_a, tr.decode.max_len_b = 0.0, 5   # (3 x (250 + 5): references are scored too)
    assert len(target_ids(tr, ["ri " * 700])[0]) == 700


def test_bad_input_is_one_clear_error(model_dir, tmp_path, capsys):
    src, two, bad, long_ = (tmp_path / n for n in ("s.ko", "two.en", "bad.en", "long.en"))
    src.write_text("리 니\n리\n니 리\n", encoding="utf-8")
    two.write_text("ni ri\nri\n", encoding="utf-8")
    bad.write_bytes(b"ni ri\nri \xff\nri ni\n")
    long_.write_text("ni ri\n" + "ri " * 2000 + "\nri ni\n", encoding="utf-8")
    base = ["--model-dir", model_dir, "--src-file", src]
    code, out, err = run(base + ["--tgt-file", two], capsys)
    assert code == 2 and out == ""
    assert f"--src-file {src} has 3 lines but --tgt-file {two} has 2" in err
    code, out, err = run(base + ["--tgt-file", bad], capsys)
    assert code == 2 and out == "" and f"{bad}:2" in err and "UTF-8" in err
    code, out, err = run(base + ["--tgt-file", long_], capsys)
    assert code == 2 and out == "" and f"{long_}:2: the translation has" in err
    assert "more than 1911, 3 x (--max-input-tokens 250 + the search's most for such a source, the model's " \
        "max_len_a 1.5 x 251 + max_len_b 10)" in err
    code, out, err = run(base + ["--tgt-file", long_, "--max-input-tokens", "300"], capsys)
    assert code == 0 and len(out.splitlines()) == 3, err
    code, _, err = run(base + ["--tgt-file", tmp_path / "missing.en"], capsys)
    assert code == 2 and "missing.en" in err
    code, _, err = run(["--model-dir", tmp_path, "--src-file", src, "--tgt-file", src], capsys)
    assert code == 2 and f"--model-dir {tmp_path}: config.json not found" in err
    (tmp_path / "empty.ko").write_text("", encoding="utf-8")
    code, out, err = run(["--model-dir", model_dir, "--src-file", tmp_path / "empty.ko", "--tgt-file", two], capsys)
    assert code == 2 and out == "" and f"{tmp_path / 'empty.ko'}: the file is empty" in err
    ok = tmp_path / "ok.en"
    ok.write_text("ni ri\nri\nri ni\n", encoding="utf-8")
    for command, args in ((score_main, base + ["--tgt-file", ok]), (translate_main, ["--model-dir", model_dir,
                                                                                     "--input", src])):
        code = command([str(a) for a in args + ["--output", tmp_path]])   # a directory: the output cannot be written
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and f"error: --output {tmp_path} is a directory: give the file to write" in err
        new = tmp_path / command.__name__ / "sub" / "out.txt"   # refused, where nmt-evaluate's --json made its dirs
        assert command([str(a) for a in args + ["--output", new]]) == 0 and len(new.read_text().splitlines()) == 3
        read = Path(args[args.index("--input" if "--input" in args else "--tgt-file") + 1])
        before = read.read_bytes()   # ... and through a directory made then, the file it reads was written over
        code = command([str(a) for a in args + ["--output", tmp_path / "gone" / ".." / read.name]])
        assert code == 2 and f"is the {'--input' if '--input' in args else '--tgt-file'} file" in \
            capsys.readouterr().err and read.read_bytes() == before and not (tmp_path / "gone").exists()
        (tmp_path / "s").mkdir(exist_ok=True)   # through a link too: its ".." is its target's parent, not the link's
        (tmp_path / "w").mkdir(exist_ok=True)
        if not (tmp_path / "w" / "lnk").is_symlink():
            (tmp_path / "w" / "lnk").symlink_to(tmp_path / "s")
        code = command([str(a) for a in args + ["--output", tmp_path / "w" / "lnk" / "new" / ".." / ".." / read.name]])
        assert code == 2 and "file: writing it would destroy" in capsys.readouterr().err and read.read_bytes() == before
        import nmt.storage   # an existing file, in a directory where no new file can be made: written, as before
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(nmt.storage, "check_writable", lambda *a, **k: (_ for _ in ()).throw(AssertionError(a)))
            assert command([str(a) for a in args + ["--output", new]]) == 0, capsys.readouterr().err
    code, out, err = run(["--model-dir", model_dir, "--src-file", src, "--tgt-file", src], capsys)
    assert code == 2 and out == "" and f"--tgt-file {src} should be the English side (the model translates ko -> en) " \
                                       f"but is mostly Hangul on 100% of its lines, as --src-file {src} has Hangul on " \
                                       "100%: the same " \
                                       "file is given for both sides" in err
    rows = tmp_path / "nbest.jsonl"   # nmt-translate --nbest's output: scored as English text, without a word
    rows.write_text('{"translations": ["A cat.", "Cat."], "scores": [-1.5, -2.0]}\n' * 2)
    code, out, err = run(["--model-dir", model_dir, "--src-file", two, "--tgt-file", rows], capsys)
    assert code == 2 and out == "" and f"--tgt-file {rows}: its lines are nmt-translate's n-best rows" in err, err
    assert "`jq -r '.translations[0] // \"\"'`" in err   # (an empty line's [] as an empty line, not "null")
    rows.write_text("A cat. ||| 0-0 1-1\nCat. ||| 0-0\n")   # --alignment's
    code, out, err = run(["--model-dir", model_dir, "--src-file", two, "--tgt-file", rows], capsys)
    assert code == 2 and out == "" and f"--tgt-file {rows}: its lines are nmt-translate's --alignment output" in err
    for flag, path in (("--src-file", src), ("--tgt-file", two)):   # written after reading, but lost all the same
        before = path.read_bytes()
        code, out, err = run(base + ["--tgt-file", two, "--output", path], capsys)
        assert code == 2 and out == "" and f"--output {path} is the {flag} file: writing it would destroy" in err
        assert path.read_bytes() == before
    with pytest.raises(SystemExit) as e:   # the search's flags do not apply to scoring
        score_main(["--model-dir", str(model_dir), "--src-file", str(src), "--tgt-file", str(two), "--beam-size", "4"])
    assert e.value.code == 2 and "unrecognized arguments: --beam-size" in capsys.readouterr().err


@pytest.mark.parametrize("script", ["score.py", "translate.py"])
def test_a_reader_that_goes_away_ends_the_command_quietly(model_dir, tmp_path, script):
    """`... | head -1`: the command stops with exit code 141 (as a shell reports SIGPIPE), without a traceback."""
    n = 20_001 if script == "score.py" else 40   # nmt-score writes 10,000 lines at a time, nmt-translate a chunk
    (tmp_path / "s.ko").write_text("리 니\n" * n, encoding="utf-8")
    (tmp_path / "t.en").write_text("ni ri\n" * n, encoding="utf-8")
    args = (["--src-file", tmp_path / "s.ko", "--tgt-file", tmp_path / "t.en"] if script == "score.py"
            else ["--input", tmp_path / "s.ko", "--chunk-lines", "1"])
    p = subprocess.Popen([sys.executable, str(REPO / "scripts" / script), "--model-dir", model_dir, *map(str, args)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141, err[-2000:]
    assert first.strip() and "Traceback" not in err and "Exception ignored" not in err


# Scores the synthetic test set on two CPU contexts (one OpenMP thread each, as the CLI asks for) and prints which
# context scored each batch, then the scores.
_TWO_DEVICES = """
import json, sys
import mxnet as mx
from nmt.forced import score_lines
from nmt.translate import Translator
tr = Translator.from_dir(sys.argv[1], ctx=[mx.cpu(0), mx.cpu(1)])
tr.decode.batch_size = 2
used = []
for net in [tr.members[0]] + [members[0] for _, members in tr.replicas]:
    net.log_probs = lambda src, *rest, _run=net.log_probs: (used.append(str(src.context)), _run(src, *rest))[1]
src, tgt = (open(f, encoding="utf-8").read().splitlines()[:10] for f in sys.argv[2:4])
print(json.dumps({"used": used, "scores": [s.score for s in score_lines(tr, src, tgt)]}))
"""


def test_a_dash_reads_standard_input_once(model_dir, tmp_path, capsys):
    """`--src-file -` was "-: file not found" (every other file flag takes "-" for standard input), and both files
    as /dev/stdin "the file is empty" or "are the files swapped?"."""
    (tmp_path / "s.ko").write_text("리 니\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("ni ri\n", encoding="utf-8")
    with open(tmp_path / "s.ko", "rb") as stdin:
        r = subprocess.run([sys.executable, str(REPO / "scripts" / "score.py"), "--model-dir", str(model_dir),
                            "--src-file", "-", "--tgt-file", str(tmp_path / "t.en")], stdin=stdin,
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1 and float(r.stdout) < 0, r.stderr[-2000:]
    code, out, err = run(["--model-dir", model_dir, "--src-file", "-", "--tgt-file", "/dev/stdin"], capsys)
    assert code == 2 and out == "" and ("--src-file - and --tgt-file /dev/stdin all read standard input, which can "
                                        "be read once: give all but one of them as files") in err, err


def test_one_pair_and_one_line_are_counted_in_the_singular(model_dir, tmp_path, capsys):
    """The summary read "scored 1 pairs" and a one-line --src-file "has 1 lines", as nmt-translate's "translated 1
    lines" did."""
    (tmp_path / "s.ko").write_text("리 니\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("ni ri\n", encoding="utf-8")
    (tmp_path / "two.en").write_text("ni ri\nri\n", encoding="utf-8")
    base = ["--model-dir", model_dir, "--src-file", tmp_path / "s.ko", "--tgt-file"]
    code, out, err = run(base + [tmp_path / "t.en", "--max-input-tokens", "1"], capsys)
    assert code == 0 and "scored 1 pair in " in err and "; 1 source truncated" in err, err
    code, out, err = run(base + [tmp_path / "two.en"], capsys)
    assert code == 2 and f"--src-file {tmp_path / 's.ko'} has 1 line but --tgt-file" in err, err


def test_two_devices_share_the_batches_and_score_like_one(tr, model_dir, lines):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-c", _TWO_DEVICES, str(model_dir), str(synth_file(model_dir, "test.ko")),
                        str(synth_file(model_dir, "test.en"))], capture_output=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    res = json.loads(p.stdout)
    assert set(res["used"]) == {"cpu(0)", "cpu(1)"} and len(res["used"]) == 5   # 5 batches of 2
    np.testing.assert_allclose(res["scores"], [s.score for s in score_lines(tr, lines[0][:10], lines[1][:10])],
                               atol=1e-5)


def test_the_files_warnings_are_log_lines(model_dir, tmp_path):
    """A CRLF or BOM file's warning came as a bare line, before the log was set up, unlike every other warning."""
    src, tgt = tmp_path / "s.ko", tmp_path / "t.en"
    src.write_bytes("리 니\r\n차\r\n".encode())
    tgt.write_bytes("\ufeffni ri\nri\n".encode())
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "score.py"), "--model-dir", str(model_dir),
                        "--src-file", str(src), "--tgt-file", str(tgt)], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO)), timeout=120)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2, r.stderr
    assert re.search(rf"^\S+ \S+ WARNING nmt.corpus: {src}: converted 2 CRLF", r.stderr, re.M), r.stderr
    assert re.search(rf"^\S+ \S+ WARNING nmt.corpus: {tgt}: removed the UTF-8 byte-order mark", r.stderr, re.M)


def test_translations_that_are_all_empty_are_scored(model_dir, tmp_path, capsys):
    """Every line is a pair, a blank translation too, but a --tgt-file of blank lines alone was refused ("the file
    has only blank lines"): the output of `nmt-translate` whose every translation is empty (a model trained briefly
    can rank one first) could not be scored. A source of blank lines alone was refused too, though a blank source
    line among others is scored (what the model gives a translation of nothing): it is scored as that line is, with
    the warning of lines blank on one side. An empty file (no line at all) is still refused."""
    (tmp_path / "s.ko").write_text("리 니\n니 리\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("\n\n", encoding="utf-8")
    (tmp_path / "one.en").write_text("\n", encoding="utf-8")
    code, out, err = run(["--model-dir", model_dir, "--src-file", tmp_path / "s.ko", "--tgt-file", tmp_path / "t.en"],
                         capsys)
    assert code == 0 and len(out.splitlines()) == 2 and all(float(s) < 0 for s in out.split()), err
    assert "scored 2 pairs" in err and "blank on one side only (line 1, 2)" in err, err
    code, out, err = run(["--model-dir", model_dir, "--src-file", tmp_path / "s.ko", "--tgt-file",
                          tmp_path / "one.en"], capsys)
    assert code == 2 and out == "" and "has 2 lines but --tgt-file" in err, err
    code, out, err = run(["--model-dir", model_dir, "--src-file", tmp_path / "t.en", "--tgt-file", tmp_path / "t.en"],
                         capsys)
    assert code == 0 and len(out.splitlines()) == 2 and "blank on one side" not in err, err
    (tmp_path / "mixed.ko").write_text("리 니\n\n", encoding="utf-8")   # a blank source among others, as alone
    (tmp_path / "mixed.en").write_text("ni ri\nri\n", encoding="utf-8")
    (tmp_path / "blank.ko").write_text("\n\n", encoding="utf-8")
    mixed = run(["--model-dir", model_dir, "--src-file", tmp_path / "mixed.ko", "--tgt-file", tmp_path / "mixed.en"],
                capsys)
    code, out, err = run(["--model-dir", model_dir, "--src-file", tmp_path / "blank.ko", "--tgt-file",
                          tmp_path / "mixed.en"], capsys)
    assert code == 0 and out.splitlines()[1] == mixed[1].splitlines()[1], (err, mixed)
    assert "blank on one side only (line 1, 2)" in err, err
    (tmp_path / "none.en").write_bytes(b"")   # (an empty --tgt-file holds no translation, not empty ones)
    code, out, err = run(["--model-dir", model_dir, "--src-file", tmp_path / "s.ko", "--tgt-file",
                          tmp_path / "none.en"], capsys)
    assert code == 2 and out == "" and f"{tmp_path / 'none.en'}: the file is empty" in err, err
