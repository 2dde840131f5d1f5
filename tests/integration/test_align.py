"""Word alignments (`nmt-translate --alignment`, `Translator.translate_aligned`, `nmt.align.align`) on the tiny model
of the synthetic task, whose target is the source's words romanized in reverse order: word i of an n-word source is
word n-1-i of its translation, a gold alignment to check the attention's links against."""
from __future__ import annotations

import json

import mxnet as mx
import pytest

from nmt.align import align, format_links
from nmt.cli_decode import translate_main
from nmt.prompt import interactive
from nmt.translate import Translator
from tests.synth import synth_file


@pytest.fixture(scope="module")
def lines(model_dir):
    return synth_file(model_dir, "test.ko").read_text(encoding="utf-8").splitlines()


def gold(source: str):
    n = len(source.split())
    return {(i, n - 1 - i) for i in range(n)}


def test_links_of_correct_translations_are_the_reversed_word_order(tr, lines, model_dir):
    refs = synth_file(model_dir, "test.en").read_text(encoding="utf-8").splitlines()
    right = found = linked = 0
    for source, ref, hyps in zip(lines, refs, tr.translate_aligned(lines)):
        text, _, links = hyps[0]
        if text == ref:
            right += 1
            found += len(gold(source) & set(links))
            linked += len(links)
    gold_links = sum(len(gold(s)) for s, r, h in zip(lines, refs, tr.translate(lines)) if h == r)
    assert right >= 30, f"only {right} of {len(lines)} test sentences translated right: the model is not trained"
    # Measured 1.00 and 1.00; links taken one step late (the attention of the next piece) give 0.44 and 0.56.
    assert found / linked >= 0.95 and found / gold_links >= 0.95, (found, linked, gold_links)


def test_translate_aligned_is_translate_nbest_with_links(tr, lines):
    batch = lines[:12] + [""]
    aligned = tr.translate_aligned(batch, nbest=3, beam_size=4)
    assert [[(t, s) for t, s, _ in h] for h in aligned] == tr.translate_nbest(batch, 3, beam_size=4)
    assert aligned[-1] == []
    for source, hyps in zip(batch, aligned[:-1]):
        for text, _, links in hyps:
            assert all(0 <= i < len(source.split()) and 0 <= j < len(text.split()) for i, j in links)
    # given translations aligned later: the links the search's own translations got
    texts = [h[0][0] for h in aligned[:-1]]
    assert align(tr, lines[:12], texts) == [h[0][2] for h in aligned[:-1]]


# Each device builds its step graph on its own thread; the builds once put back each other's warning filters, and
# Gluon's "Parameter ... is not used" warning got out (seen in 1 of 6 runs).
@pytest.mark.filterwarnings("error::UserWarning")
def test_two_devices_align_as_one(model_dir, tr, lines):
    two = Translator.from_dir(model_dir, ctx=[mx.cpu(0), mx.cpu(1)])
    two.decode.batch_size = 8   # several batches, dealt out to both devices
    ours, theirs = two.translate_aligned(lines), tr.translate_aligned(lines)
    assert [[(t, links) for t, _, links in h] for h in ours] == [[(t, links) for t, _, links in h] for h in theirs]
    # other batches, other padding: the scores agree to float32 rounding
    assert [h[0][1] for h in ours] == pytest.approx([h[0][1] for h in theirs], abs=1e-5)


def test_align_refuses_misaligned_and_multiline_input(tr, lines):
    with pytest.raises(ValueError, match="3 sources but 2 translations"):
        align(tr, lines[:3], ["a", "b"])
    with pytest.raises(ValueError, match="lines"):
        align(tr, ["가 나\n다"], ["na ga"])
    for sep in ("\n", "\u2028", "\x1d"):   # the translation too; str.splitlines' boundaries, as "\n"
        with pytest.raises(ValueError, match="^translation:1: the translation has text on 2 lines"):
            align(tr, ["가 나"], [f"na{sep}ga"])
    with pytest.raises(ValueError, match=r"^sources\[0\] has text on 2 lines"):
        align(tr, ["가 나\u2029다"], ["na ga"])


def run(argv, capsys):
    code = translate_main([str(a) for a in argv])
    out, _ = capsys.readouterr()
    return code, out


def test_cli_writes_translation_then_links(tr, lines, tmp_path, capsys):
    src = tmp_path / "in.ko"
    src.write_text("\n".join(lines[:5] + ["", lines[5]]) + "\n", encoding="utf-8")
    code, out = run(["--model-dir", tr.model_dir, "--input", src, "--alignment"], capsys)
    assert code == 0
    expected = [f"{h[0][0]} ||| {format_links(h[0][2])}" if h else " ||| "
                for h in tr.translate_aligned(lines[:5] + ["", lines[5]])]
    assert out.splitlines() == expected and out.splitlines()[5] == " ||| "
    assert [row.split(" ||| ")[0] for row in out.splitlines()] == tr.translate(lines[:5] + ["", lines[5]])


def test_cli_nbest_rows_carry_an_alignment_per_translation(tr, lines, tmp_path, capsys):
    src = tmp_path / "in.ko"
    src.write_text(lines[0] + "\n\n", encoding="utf-8")
    code, out = run(["--model-dir", tr.model_dir, "--input", src, "--alignment", "--nbest", "2", "--beam-size", "3"],
                    capsys)
    first, empty = (json.loads(r) for r in out.splitlines())
    hyps = tr.translate_aligned([lines[0]], nbest=2, beam_size=3)[0]
    # scores to float32 rounding: a row's last bits depend on the batch shapes its Translator decoded before
    # (docs/performance.md), and this one (the fixture's) has decoded others than the command's
    assert code == 0 and first.pop("scores") == pytest.approx([h[1] for h in hyps], abs=2e-6)
    assert first == {"translations": [h[0] for h in hyps], "alignments": [format_links(h[2]) for h in hyps]}
    assert empty == {"translations": [], "scores": [], "alignments": []}


def test_the_interactive_prompt_aligns_too(tr, lines, capsys):
    inputs = iter([lines[0], ""])

    def read(prompt):
        try:
            return next(inputs)
        except StopIteration:
            raise EOFError from None
    assert interactive(tr, read=read, alignment=True) == 0
    text, _, links = tr.translate_aligned([lines[0]])[0][0]
    assert capsys.readouterr().out.splitlines() == [f"{text} ||| {format_links(links)}", " ||| "]


def test_nmt_score_aligns_given_translations(tr, lines, model_dir, tmp_path, capsys):
    """As marian-scorer --alignment: each pair's score, " ||| " and its links; in JSON an "alignment" field."""
    from nmt.cli_score import score_main
    from nmt.forced import score_lines
    refs = synth_file(model_dir, "test.en").read_text(encoding="utf-8").splitlines()[:6]
    src, tgt = tmp_path / "s.ko", tmp_path / "t.en"
    src.write_text("\n".join(lines[:5] + [""]) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(refs[:5] + [""]) + "\n", encoding="utf-8")
    argv = ["--model-dir", str(tr.model_dir), "--src-file", str(src), "--tgt-file", str(tgt), "--alignment"]
    assert score_main(argv) == 0
    rows = capsys.readouterr().out.splitlines()
    links = align(tr, lines[:5], refs[:5])
    scores = [s.score for s in score_lines(tr, lines[:5] + [""], refs[:5] + [""])]
    assert rows == [f"{s:.6f} ||| {format_links(x)}" for s, x in zip(scores, links + [[]])]
    assert sum(map(len, links)) >= 5 * 2   # the links are real ones, not empty
    assert score_main(argv + ["--output-format", "json"]) == 0
    objects = [json.loads(r) for r in capsys.readouterr().out.splitlines()]
    assert [o["alignment"] for o in objects] == [format_links(x) for x in links + [[]]]
    assert [o["score"] for o in objects] == [round(s, 6) for s in scores]
