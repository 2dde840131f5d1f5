"""The Python API as a notebook meets it: `help(nmt)` points at it, a Translator shows what it loaded, and a wrong
argument (a device listed twice, bytes for a list of translations, a number for a translation's text) is an error
naming it, as the command line's flags are."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import mxnet as mx
import pytest

import nmt
import nmt.plot
from nmt.align import align
from nmt.forced import score_lines
from nmt.translate import Translator
from tests.synth import synth_file


@pytest.fixture(scope="module")
def lines(model_dir):
    return synth_file(model_dir, "test.ko").read_text(encoding="utf-8").splitlines()


def test_help_of_the_package_names_the_python_api():
    """`help(nmt)` said only "Korean<->English neural machine translation on Apache MXNet Gluon" and listed
    mxnet_builds_problem: nothing of Translator, nor where the API is documented."""
    doc = nmt.__doc__
    assert "Translator.from_dir(" in doc and "docs/translation.md#python-api" in doc
    names = set(re.findall(r"(?<![\w.])nmt(?:\.[A-Za-z_]\w*)+", doc)) | {"nmt.translate.Translator.from_dir"}
    for name in sorted(names):
        parts, obj = name.split("."), nmt
        for i, part in enumerate(parts[1:], 2):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                obj = getattr(obj, part)
        assert obj is not None, name   # (a name missing: AttributeError)


def test_a_translator_shows_its_model_checkpoint_direction_and_devices(model_dir):
    """It showed `<nmt.translate.Translator object at 0x7f...>`: which model and checkpoint a notebook's `tr`
    held could only be read from attributes."""
    tr = Translator.from_dir(model_dir, which="latest")
    shown = repr(tr)
    assert shown.startswith(f"Translator({str(tr.model_dir)!r}, checkpoint='latest', step {tr.params_step}, ")
    assert f"{tr.src_lang}->{tr.tgt_lang}, ctx=[cpu(0)])" in shown
    tr.sample = 10
    assert repr(tr).endswith(", sample=10)")
    tr.sample = 0   # (sampling from the whole vocabulary: still no beam search, and shown as such)
    assert repr(tr).endswith(", sample=0)")
    tr.sample, tr.member_dirs = None, [Path("/runs/b"), Path("/runs/c")]   # (an ensemble's further members)
    assert repr(tr).endswith("ctx=[cpu(0)], ensemble=['/runs/b', '/runs/c'])")
    bare = Translator(tr.net, tr.src_tok, tr.tgt_tok, tr.decode)   # built in memory: no directory, no checkpoint
    assert repr(bare).startswith("Translator(<a model in memory>, checkpoint=None, ")
    # an ensemble built in memory showed no further member, where one loaded from directories shows them
    from nmt.models import build_model
    from nmt.models.ensemble import Ensemble
    other = build_model(tr.config.model, tr.src_tok.vocab_size, tr.tgt_tok.vocab_size)   # (an LSTMModel)
    bare.members = [tr.net, other]
    assert repr(bare).endswith("ctx=[cpu(0)], ensemble=[<a LSTMModel in memory>])")
    joined = Translator(Ensemble([tr.net, other]), tr.src_tok, tr.tgt_tok, tr.decode)   # (one model, an Ensemble)
    assert repr(joined) == repr(bare)


def test_a_device_listed_twice_is_refused(model_dir):
    """`--gpus 0,0` is refused ("GPU ids must be distinct"); `ctx=[mx.cpu(0), mx.cpu(0)]` (or a GPU twice) loaded
    a second copy of the model on the same device and said nothing."""
    for ctx, twice in (([mx.cpu(0), mx.cpu(0)], 0), ([mx.cpu(), mx.cpu(1), mx.cpu(0)], 0),
                       ([mx.cpu(0), mx.cpu(2), mx.cpu(1), mx.cpu(2)], 2)):
        with pytest.raises(ValueError, match=rf"^ctx lists cpu\({twice}\) twice: give each device once"):
            Translator.from_dir(model_dir, ctx=ctx)
    assert Translator.from_dir(model_dir, ctx=[mx.cpu(0), mx.cpu(1)]).ctxs == [mx.cpu(0), mx.cpu(1)]


def test_bytes_for_the_translations_are_named_as_bytes(tr, lines):
    """score_lines and align took bytes as a list of translations, one per byte, and said "target:1: the
    translation is int, not str"."""
    says = r"^the translations must be a list of strings, got bytes: give \[text.decode\('utf-8'\)\]$"
    with pytest.raises(TypeError, match=says):
        score_lines(tr, lines[:1], b"x")
    with pytest.raises(TypeError, match=says):
        align(tr, lines[:1], b"x")
    assert len(score_lines(tr, lines[:1], ["x"])) == 1


def test_a_translation_of_another_type_is_named_by_the_attention(tr, lines, tmp_path):
    """attention(translation=5) said "translation:1: the translation is int, not str", a file's line, not the
    argument, as save_attention_plot did."""
    says = "^attention: translation must be a str or None, got int$"
    with pytest.raises(TypeError, match=says):
        nmt.plot.attention(tr, lines[0], translation=5)
    with pytest.raises(TypeError, match=says):
        nmt.plot.save_attention_plot(tr, lines[0], tmp_path / "a.png", translation=5)
    assert not (tmp_path / "a.png").exists()
    assert nmt.plot.attention(tr, lines[0], translation="x").translation == "x"


def test_bytes_for_the_attentions_pieces_are_named_as_bytes(tr, lines):
    """pieces=b"..." was taken as a list of pieces, one per byte, and said "attention: pieces[0] is int, not a piece
    (a string)", where a str is named ("got str") and bytes translations are named as bytes."""
    with pytest.raises(TypeError, match=r"^attention: pieces must be a list of pieces \(strings\), got bytes$"):
        nmt.plot.attention(tr, lines[0], pieces=b"\xe2\x96\x81x")


def test_reloading_nmt_keeps_one_guard_of_mxnets_import():
    """`importlib.reload(nmt)`, as a notebook does after an edit, put one more guard of MXNet's import (the
    DMLC_ROLE check, nmt.dmlc_role_problem) in front of sys.meta_path each time: its isinstance check missed the
    instance of the earlier module's class. The guard is there once, however often nmt is reloaded."""
    import sys

    def guards():
        return [f for f in sys.meta_path if type(f).__module__ == "nmt" and type(f).__qualname__ == "_RoleGuard"]
    assert len(guards()) == 1
    importlib.reload(nmt)
    importlib.reload(nmt)
    assert len(guards()) == 1
