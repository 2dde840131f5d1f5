"""The Python API given what a user may get wrong (an audit's findings): a float for an int, a string where a list
belongs, an empty list, a beam too wide for MXNet's indices, a translation that is no text, and two Translators
used from two threads at once. Each is an error naming the argument before any work, and nothing it leaves behind
breaks the calls that follow."""
from __future__ import annotations

import re
import threading

import mxnet as mx
import numpy as np
import pytest

import nmt.plot
from nmt import search_blocks
from nmt.align import align
from nmt.corpus import CorpusError
from nmt.evaluate import score
from nmt.forced import score_lines
from nmt.translate import Translator
from tests.synth import synth_file, twin_of


@pytest.fixture(scope="module")
def lines(model_dir):
    return synth_file(model_dir, "test.ko").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("call, says", [
    (lambda tr, s: tr.translate_nbest([s], nbest=2.0), "nbest must be an int, got 2.0"),
    (lambda tr, s: tr.translate([s], beam_size=3.0), "beam_size must be an int, got 3.0"),
    (lambda tr, s: tr.translate([s], beam_size="4"), "beam_size must be an int, got '4'"),
    (lambda tr, s: tr.translate_nbest([s], nbest=True), "nbest must be an int, got True"),
])
def test_a_number_of_another_type_is_refused_and_later_calls_still_work(tr, lines, call, says):
    """A float used to build a search block under a key equal to the int's (2.0 == 2), so after one failed call
    every later call with the int failed too, in any Translator of the process."""
    with pytest.raises(TypeError, match=f"^{says}$"):
        call(tr, lines[0])
    assert len(tr.translate_nbest([lines[0]], nbest=2, beam_size=3)[0]) == 2
    assert tr.translate([lines[0]], beam_size=3) == tr.translate([lines[0]], beam_size=3)


def test_a_sampling_size_of_another_type_is_refused(tr, lines):
    tr.sample = True
    try:
        with pytest.raises(TypeError, match="^sample must be an int, got True$"):
            tr.translate([lines[0]])
        tr.sample = 1
        assert isinstance(tr.translate([lines[0]])[0], str)
    finally:
        tr.sample = None


def test_a_beam_size_asked_of_a_sampling_translator_is_refused(tr, lines):
    """translate(beam_size=5) with tr.sample set sampled, without a word (as translate_aligned did); the flags refuse
    --beam-size with --sample."""
    tr.sample = 10
    try:
        for call in (lambda: tr.translate([lines[0]], beam_size=5), lambda: tr.translate_aligned(lines[0], 1, 3),
                     lambda: tr.translate_nbest([lines[0]], 1, beam_size=2)):
            with pytest.raises(ValueError, match=r"^beam_size \d asks for beam search, but the translator samples "
                                                 r"\(sample=10\)"):
                call()
        assert isinstance(tr.translate([lines[0]])[0], str)   # sampled, beam_size left out
    finally:
        tr.sample = None


def test_ensemble_members_given_by_an_iterator_are_all_taken(model_dir, tmp_path):
    """ensemble=Path.glob(...) (a generator) was emptied by the argument checks: the model decoded alone."""
    twin_of(model_dir, tmp_path / "seed2")
    tr = Translator.from_dir(model_dir, ensemble=tmp_path.glob("seed*"))
    assert (len(tr.members), tr.member_dirs) == (2, [tmp_path / "seed2"])


def test_a_beam_too_wide_for_mxnets_indices_is_refused_before_any_work(tr, lines):
    with pytest.raises(ValueError, match=r"^beam_size 10000000 x decode.batch_size \d+ hypotheses x \d+ target pieces "
                                         r"is [\d,]+ scores per search step, more than MXNet's 32-bit indices"):
        tr.translate([lines[0]], beam_size=10 ** 7)


def test_two_translators_decode_in_two_threads_at_once(model_dir, lines):
    """Every Translator of a device shared one update block per search shape, and two threads building its graph at
    once failed inside Gluon ("'NoneType' object has no attribute '__exit__'"): nmt-serve with two models gave 500s
    to simultaneous first requests, about 1 start in 3. Each thread now has its own blocks (checked directly), and
    a dozen fresh simultaneous starts all decode (the old code failed about 1 in 3 of them)."""
    made = []
    ready = threading.Barrier(2)

    def get_block():
        ready.wait()
        made.append(search_blocks.update_block(mx.cpu(), beam_size=3, vocab_size=50, nbest=1, num_moving=2))
    threads = [threading.Thread(target=get_block) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert made[0] is not made[1]

    a, b = Translator.from_dir(model_dir), Translator.from_dir(model_dir)
    expected = a.translate(lines[:6], beam_size=5)
    for _ in range(12):
        search_blocks._UPDATES.clear()   # as in a new process: every block built at the first call again
        results, errors, start = {}, [], threading.Barrier(2)

        def run(name, tr):
            try:
                start.wait()
                results[name] = tr.translate(lines[:6], beam_size=5)
            except Exception as e:   # pylint: disable=broad-except
                errors.append(repr(e))
        threads = [threading.Thread(target=run, args=(n, t)) for n, t in (("a", a), ("b", b))]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not errors and results == {"a": expected, "b": expected}


def test_a_string_where_a_list_belongs_is_refused(tr, model_dir, lines):
    """align, score_lines and score read a string as one sentence per character, and scored or aligned those."""
    with pytest.raises(TypeError, match="the translations must be a list of strings, got str"):
        score_lines(tr, lines[:2], "Hi")
    for call in (align, score_lines):   # their argument is `sources` (the message said `lines`)
        with pytest.raises(TypeError, match="^sources must be a list of sentences, not one string"):
            call(tr, lines[0], ["Thanks"])
        with pytest.raises(TypeError, match="^sources must be a list of sentences, got NoneType"):
            call(tr, None, ["Thanks"])
    with pytest.raises(TypeError, match="the translations must be a list of strings, got str"):
        align(tr, [lines[0]], "Thanks")
    with pytest.raises(TypeError, match="^score: hyps must be a list of sentences, not one string \\('Thank you.'\\): "
                                        "give \\[sentence\\]$"):
        score("Thank you.", "Thank yuo.", "en")
    with pytest.raises(TypeError, match=r"^score: more_refs must be a list of reference lists, .*: give \[refs2\]"):
        score(["a b c d"], ["a b c d"], "en", ["a b c d"])   # (it blamed the hypotheses and references)
    two = score(["a b c d e"], ["x y z w v"], "en", (r for r in [["a b c d e"]]))   # a generator: read once
    assert two.bleu == pytest.approx(100.0) and "nrefs:2" in two.bleu_signature
    for lang in ("KO", None, "fr"):   # Korean output scored without its ko-mecab BLEU, unsaid
        with pytest.raises(ValueError, match=f"^score: tgt_lang must be one of ko, en, got {lang!r}"):
            score(["a b c d"], ["a b c d"], lang)
    with pytest.raises(TypeError, match="^ensemble must be a list of model directories, not one"):
        Translator.from_dir(model_dir, ensemble=str(model_dir))
    for ctx in ("cpu", (c for c in [mx.cpu()])):   # AttributeError: 'str' object has no attribute 'device_type'
        with pytest.raises(TypeError, match="^ctx must be an mx.Context, such as mx.cpu"):
            Translator.from_dir(model_dir, ctx=ctx)
    with pytest.raises(TypeError, match="^decode must be a DecodeConfig, got dict"):
        Translator.from_dir(model_dir, decode={"beam_size": 2})
    with pytest.raises(TypeError, match="^lines must be a list of sentences, got NoneType"):
        tr.translate(None)
    with pytest.raises(TypeError, match="^lines must be a list of sentences, not one string"):   # not "5 lines"
        tr.continuous().add(lines[0], ["k"])
    with pytest.raises(TypeError, match="^prefixes must be a list with one prefix per line, not one string"):
        tr.continuous().add([lines[0]], ["k"], "Thanks")   # was "1 lines but 1 keys and 6 prefixes"
    with pytest.raises(TypeError, match="^ContinuousDecoder.add: keys must be a list, one per line, got NoneType"):
        tr.continuous().add([lines[0]], None)
    with pytest.raises(TypeError, match="^first_line must be an int .*got str"):   # was str + int deep inside
        tr.translate(["가" * 5000], first_line="x")
    with pytest.raises(TypeError, match="^attention: sentence must be a str, got NoneType"):
        nmt.plot.attention(tr, None)
    with pytest.raises(TypeError, match="^attention: max_len must be an int or None"):   # (str + int deep inside)
        nmt.plot.attention(tr, lines[0], max_len="3")
    for bad in (0, -1):   # an empty plot
        with pytest.raises(ValueError, match="^attention: max_len must be >= 1 or None"):
            nmt.plot.attention(tr, lines[0], max_len=bad)
    assert nmt.plot.attention(tr, lines[0], max_len=np.int64(3)).translation == \
        nmt.plot.attention(tr, lines[0], max_len=3).translation   # (numpy's ints, as beam_size takes them)
    # arguments of the wrong type, named (they were "'int' object is not iterable", "'<' not supported ...")
    for call, named in ((lambda: Translator.from_dir(model_dir, ensemble=5), "^ensemble must be a list of model "
                         "directories, got int$"),
                        (lambda: tr.translate([lines[0]], prefixes=5), "^prefixes must be a list of sentences, got int"),
                        (lambda: tr.translate([lines[0]], prefixes=b"Th"), r"^prefixes must be a list of sentences, not "
                         r"one bytes object \(b'Th'\): give \[text.decode\('utf-8'\)\]"),
                        (lambda: tr.continuous(max_batch="4"), "^max_batch must be an int, got '4'"),
                        (lambda: tr.translate(lines[0], prefixes=["Th"]), "^prefixes must be a str for one sentence, "
                         "got list"),   # (it was "prefixes[0] is list, not str: give a list of sentences")
                        (lambda: nmt.plot.save_attention_plot(tr, lines[0], None), "^save_attention_plot: path must be "
                         "a str or a path, got NoneType")):
        with pytest.raises(TypeError, match=named):
            call()
    assert len(Translator.from_dir(model_dir, ensemble=None).members) == 1   # None: no further models, as ()


def test_bytes_left_out_names_what_is_wrong_with_its_translations(tr, lines):
    """`tr.bytes_left_out([1, 2, 3])` (one translation's ids, not a list of them) failed with a bare "TypeError:
    object of type 'int' has no len()"; so did translate_ids' (ids, score) pairs, by another message."""
    said = r"^bytes_left_out: translations must be one line's translations, a list of target id lists"
    for given, says in (([1, 2, 3], r", not one list of ids \(translations\[0\] is int\): give \[ids\]$"),
                        (tr.translate_ids(lines[:1])[0], r"; translations\[0\] is an \(ids, score\) pair, as "
                                                         r"translate_ids gives them: give \[ids for ids, _ in hyps\]$"),
                        ([[1, None]], r"; translations\[0\] holds a NoneType, not an id \(int\)$"),
                        ([[1, True]], r"; translations\[0\] holds a bool, not an id \(int\)$"),
                        ([[1], "abc"], r"; translations\[1\] is str, not a list of ids$"),
                        (None, ", got NoneType$")):
        with pytest.raises(TypeError, match=said + says):
            tr.bytes_left_out(given)
    ids = [y for y, _ in tr.translate_ids(lines[:1], beam_size=2, nbest=2)[0]]
    assert tr.bytes_left_out(iter(ids)) == tr.bytes_left_out(ids) and tr.bytes_left_out(np.array(ids[:1])) == \
        tr.bytes_left_out(ids[:1])   # (an iterator, numpy's ids: taken)
    # an id outside the target vocabulary (the source side's, another model's) counted as no byte left out: 0
    size = tr.tgt_tok.vocab_size
    for given, outside in (([ids[0], [5, size]], size), (np.array([[-1, 5]]), -1)):
        with pytest.raises(ValueError, match=said + rf"; translations\[{len(given) - 1}\] holds id {outside}, outside "
                                                    rf"the target vocabulary \(size {size}\)"):
            tr.bytes_left_out(given)


def test_a_mapping_or_a_bytearray_where_lines_belong_is_named(tr, lines):
    """A dict was translated key by key (its values, surely the text meant, left out); a bytearray (or memoryview)
    was "lines[0] is int, not str", where bytes are named as bytes."""
    mapping = r"must be a list of sentences, not a dict, whose keys would be read and its values left out: give "
    for call, arg in ((lambda d: tr.translate(d), "lines"), (lambda d: tr.translate_nbest(d, 2), "lines"),
                      (lambda d: tr.translate(lines[:1], prefixes=d), "prefixes"),
                      (lambda d: tr.continuous().add(d, ["k"]), "lines")):
        with pytest.raises(TypeError, match=rf"^{arg} {mapping}list\(d.values\(\)\)"):
            call({"k": lines[0]})
    with pytest.raises(TypeError, match=r"^the translations must be a list of strings, got dict"):
        score_lines(tr, lines[:1], {"x": 1})
    for given, shown in ((bytearray(b"Th"), "bytearray"), (memoryview(b"Th"), "memoryview")):
        says = rf"not one bytes-like object \({shown}\(b'Th'\)\): give \[bytes\(text\).decode\('utf-8'\)\]$"
        for call, arg in ((lambda b: tr.translate(b), "lines"), (lambda b: tr.translate(lines[:1], prefixes=b),
                                                                  "prefixes"),
                          (lambda b: tr.continuous().add(b, ["k"]), "lines")):
            with pytest.raises(TypeError, match=rf"^{arg} must be a list of sentences, {says}"):
                call(given)
        with pytest.raises(TypeError, match=rf"^the translations must be a list of strings, got {shown}: give "
                                            r"\[bytes\(text\).decode"):
            score_lines(tr, lines[:1], given)
    assert tr.translate(lines[:1]) == tr.translate(list({lines[0]: 1}))   # (its keys, given as a list: taken)
    for keys in (b"ab", bytearray(b"ab"), memoryview(b"ab")):   # (a Sequence: were taken as the int keys 97 and 98)
        with pytest.raises(TypeError, match=rf"^ContinuousDecoder.add: keys must be a list, one per line, got "
                                            rf"{type(keys).__name__}$"):
            tr.continuous().add(lines[:2], keys)


def test_a_model_dir_that_is_no_path_is_named(model_dir, tmp_path, monkeypatch, lines):
    """from_dir(None) and from_dir(5) failed in pathlib: "expected str, bytes or os.PathLike object", and so did
    ensemble=[None]; from_dir("~/m") was "no such directory", where every command and TrainConfig take "~"; and
    translate(b"...") said "lines[0] is int": bytes were read as one sentence per byte."""
    for bad, got in ((None, "NoneType"), (5, "int"), ([str(model_dir)], "list")):
        with pytest.raises(TypeError, match=fr"^model_dir must be a model directory \(str or Path\), got {got}$"):
            Translator.from_dir(bad)
    with pytest.raises(TypeError, match=r"^ensemble\[1\] must be a model directory \(str or Path\), got NoneType$"):
        Translator.from_dir(model_dir, ensemble=[model_dir, None])
    monkeypatch.setenv("HOME", str(model_dir.parent))
    assert Translator.from_dir(f"~/{model_dir.name}").model_dir == model_dir
    # "~" in the other paths the API takes (a notebook's NMT_PLOT_DIR=~/plots made ./~/plots)
    from nmt.corpus import read_parallel
    (model_dir.parent / "t.ko").write_text(lines[0] + "\n", encoding="utf-8")
    (model_dir.parent / "t.en").write_text("x\n", encoding="utf-8")
    assert read_parallel("~/t.ko", "~/t.en", whole=True).src == [lines[0]]
    plot = nmt.plot.save_attention_plot(Translator.from_dir(model_dir), lines[0], "~/att.png")
    assert plot == model_dir.parent / "att.png" and plot.is_file()
    with pytest.raises(TypeError, match=r"^lines must be a list of sentences, not one bytes object \(b'"):
        Translator.from_dir(model_dir).translate(lines[0].encode())
    tr = Translator.from_dir(model_dir)   # one string: its list, as translate_nbest gives (it refused one)
    one, listed = tr.translate_aligned(lines[0], nbest=2), tr.translate_aligned([lines[0]], nbest=2)[0]
    assert [(t, links) for t, _, links in one] == [(t, links) for t, _, links in listed]
    # (a score's last bits depend on the batch shapes decoded before: docs/performance.md; seen 4e-7 apart)
    assert [s for _, s, _ in one] == pytest.approx([s for _, s, _ in listed], abs=2e-6)


def test_decode_settings_changed_by_hand_are_checked_at_the_next_call(tr, lines):
    """`tr.decode.max_input_tokens = 0` gave ["", ""] with a log warning (DecodeConfig's checks ran only when it was
    made); `tr.decode = None` or a dict, an AttributeError deep inside the first call."""
    import dataclasses
    import nmt.plot
    from nmt.config import ConfigError
    mine = Translator(tr.net, tr.src_tok, tr.tgt_tok, dataclasses.replace(tr.decode))
    calls = {"translate": lambda: mine.translate([lines[0], lines[0]]),
             "translate_nbest": lambda: mine.translate_nbest([lines[0]], 2, beam_size=3),
             "translate_aligned": lambda: mine.translate_aligned([lines[0]], beam_size=2),
             "score_lines": lambda: score_lines(mine, [lines[0]], ["x"]),
             "align": lambda: align(mine, [lines[0]], ["x"]),
             "attention": lambda: nmt.plot.attention(mine, lines[0]),
             "continuous": lambda: mine.continuous()}
    for field, value, says in (("max_input_tokens", 0, "--max-input-tokens must be an integer from 1 to 999999 (got 0)"),
                               ("beam_size", "4", "--beam-size must be an integer from 1 to 999999 (got '4')"),
                               ("length_penalty_alpha", -1.0, "--length-penalty must be a number from 0 to 10 (got -1.0)")):
        setattr(mine.decode, field, value)
        for name, call in calls.items():
            with pytest.raises(ConfigError, match=f"^{re.escape(says)}$"):
                call()
        setattr(mine.decode, field, getattr(tr.decode, field))
    for bad, got in (({"beam_size": 2}, "dict"), (None, "NoneType")):
        mine.decode = bad
        for name, call in calls.items():
            with pytest.raises(TypeError, match=f"^decode must be a DecodeConfig, got {got}$"):
                call()
    mine.decode = dataclasses.replace(tr.decode)
    assert mine.translate([lines[0]]) == tr.translate([lines[0]])


def test_an_attention_plot_that_cannot_be_written_names_its_path(tr, lines, tmp_path):
    """A directory gave IsADirectoryError naming a temporary file ('/tmp/.x.040cef36.tmp' -> '/tmp/x'), a directory
    where no file can be made FileNotFoundError naming one ('/proc/.x.png.5f438d72.tmp')."""
    from nmt.plot import save_attention_plot
    from nmt.storage import StorageError
    with pytest.raises(StorageError, match=f"^cannot write {re.escape(str(tmp_path))}: Is a directory \\[errno "
                                           "EISDIR\\]; give the path of a file, not of a directory$"):
        save_attention_plot(tr, lines[0], tmp_path)
    with pytest.raises(StorageError, match=r"^cannot write /proc/x\.png: cannot create a file in /proc \(.*\); "
                                           "choose another directory$"):
        save_attention_plot(tr, lines[0], "/proc/x.png")
    assert [p.name for p in tmp_path.parent.iterdir() if p.name.startswith(f".{tmp_path.name}.")] == []


def test_an_attention_plot_takes_the_format_its_suffix_names(tr, lines, tmp_path):
    """"x.svg" (or .pdf) held PNG bytes; attention(max_len=..., translation=...) dropped max_len without a word."""
    from nmt.plot import attention, save_attention_plot
    assert save_attention_plot(tr, lines[0], tmp_path / "x.svg").read_text().lstrip().startswith("<?xml")
    assert save_attention_plot(tr, lines[0], tmp_path / "x.PDF").read_bytes().startswith(b"%PDF")
    assert save_attention_plot(tr, lines[0], tmp_path / "x").read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match=r"x\.docx: no image format is named '\.docx'; give one of .*\.png, "):
        save_attention_plot(tr, lines[0], tmp_path / "x.docx")
    assert not (tmp_path / "x.docx").exists()
    with pytest.raises(ValueError, match=r"no image format is named '\.pgf'"):   # (it needs LaTeX: failed after the work)
        save_attention_plot(tr, lines[0], tmp_path / "x.pgf")
    with pytest.raises(ValueError, match="^attention: max_len limits the greedy translation; a given translation"):
        attention(tr, lines[0], max_len=1, translation="a b")
    with pytest.raises(ValueError, match="^attention: sentence has text on 2 lines: "):   # (it said lines[0])
        attention(tr, f"{lines[0]}\n{lines[1]}")
    with pytest.raises(ValueError, match="^attention: translation has text on 2 lines: "):   # ("translation:1")
        attention(tr, lines[0], translation="a\nb")


def test_a_negative_count_of_sentences_or_prefix_words_is_refused(tr, lines):
    """score_test_set(max_sentences=-1) scored all but the last sentence (a slice [:-1]); prefix_words=-2 ended in
    an IndexError."""
    from nmt.corpus import Pairs
    from nmt.scoring import score_test_set
    pairs = Pairs(lines[:3], lines[:3], "x")
    for bad in ({"max_sentences": -1}, {"prefix_words": -2}, {"max_sentences": 1.5}, {"prefix_words": True}):
        (arg, value), = bad.items()
        with pytest.raises(ValueError, match=rf"^score_test_set: {arg} must be an int >= 0 \(0 or None: \w+\), got "):
            score_test_set(tr, "x", pairs, save=False, **bad)
    assert score_test_set(tr, "x", pairs, save=False, max_sentences=2)[0]["n"] == 2
    assert score_test_set(tr, "x", pairs, save=False, max_sentences=None, prefix_words=None)[0]["n"] == 3   # as 0
    entry = score_test_set(tr, "x", pairs, save=False, max_sentences=np.int64(2), prefix_words=np.int64(1))[0]
    assert entry["n"] == 2 and type(entry["prefix_words"]) is int   # (numpy's: scores.json could not hold it)
    with pytest.raises(ValueError, match="^score_test_set: give prefix_words or strokes, not both"):   # as the CLI
        score_test_set(tr, "x", pairs, save=False, prefix_words=1, strokes=True)
    assert tr.translate(lines[:2], first_line=np.int64(5)) == tr.translate(lines[:2])   # (refused: "got int64")


def test_nothing_to_score_and_translations_that_are_no_text_are_named(tr, lines):
    with pytest.raises(ValueError, match="^score: no hypotheses to score$"):
        score([], [], "en")
    assert score(iter(["a b c d"]), iter(["a b c d"]), "en").bleu == pytest.approx(100.0)   # iterables are lists
    with pytest.raises(TypeError, match="^target:2: the translation is NoneType, not str$"):
        score_lines(tr, lines[:2], ["x", None])
    with pytest.raises(CorpusError, match="^translation:1: the translation has a lone surrogate U\\+DC80"):
        align(tr, [lines[0]], ["Thanks \udc80"])


def test_an_argument_of_another_type_is_a_type_error_naming_it(tr, model_dir, lines, tmp_path):
    """A model directory where a Translator belongs gave "AttributeError: 'str' object has no attribute
    'source_ids'" (or 'decode'), a title of another type failed after the attention was computed, and score's
    None or non-string items, train's init=5, errors from inside sacreBLEU or pathlib naming no argument; so did
    score_test_set's translator and pairs, and the model's sets' cfg (a Translator given for its config)."""
    from nmt.config import Config
    from nmt.corpus import Pairs
    from nmt.scoring import first_test_sources, model_dev_set, recipe_tests, score_test_set
    from nmt.train import train
    pairs = Pairs(lines[:1], lines[:1], "x")
    with pytest.raises(TypeError, match="^score_test_set: pairs must be an nmt.corpus.Pairs, got tuple$"):
        score_test_set(tr, "x", (lines[:1], lines[:1]), save=False)
    for call in (recipe_tests, model_dev_set, first_test_sources):
        with pytest.raises(TypeError, match=rf"^{call.__name__}: cfg must be a Config \(Config.from_dict makes one "
                                            r"of a dict\), got Translator$"):
            call(tr)
    for call, where in ((lambda m: score_test_set(m, "x", pairs, save=False), "score_test_set"),
                        (lambda m: nmt.plot.attention(m, lines[0]), "attention"),
                        (lambda m: nmt.plot.save_attention_plot(m, lines[0], tmp_path / "a.png"),
                         "save_attention_plot"),
                        (lambda m: align(m, lines[:1], ["x"]), "align"),
                        (lambda m: score_lines(m, lines[:1], ["x"]), "score_lines")):
        with pytest.raises(TypeError, match=rf"^{where}: translator must be an nmt.translate.Translator, got "
                                            rf"PosixPath: load it first, {where}\(Translator.from_dir\("):
            call(model_dir)
    with pytest.raises(TypeError, match="^save_attention_plot: title must be a str or None, got int$"):
        nmt.plot.save_attention_plot(tr, lines[0], tmp_path / "a.png", title=5)
    for hyps, refs, says in ((None, ["a"], "hyps must be a list of sentences, got NoneType"),
                             (["a"], [None], "refs\\[0\\] is NoneType, not a string"),
                             ([5], ["a"], "hyps\\[0\\] is int, not a string")):
        with pytest.raises(TypeError, match=f"^score: {says}$"):
            score(hyps, refs, "en")
    with pytest.raises(TypeError, match="^score: more_refs\\[0\\]\\[0\\] is int, not a string$"):
        score(["a"], ["a"], "en", more_refs=[[5]])
    # bytes were read byte by byte ("score: hyps[0] is int, not a string"): named as the Translator names them
    for given, says in ((b"Hi", r"bytes object \(b'Hi'\): give \[text.decode\('utf-8'\)\]"),
                        (bytearray(b"Hi"), r"bytes-like object \(bytearray\(b'Hi'\)\): give \[bytes\(text\)")):
        for hyps, refs, name in ((given, ["a"], "hyps"), (["a"], given, "refs")):
            with pytest.raises(TypeError, match=rf"^score: {name} must be a list of sentences, not one {says}"):
                score(hyps, refs, "en")
        with pytest.raises(TypeError, match=r"^score: more_refs must be a list of reference lists"):
            score(["a"], ["a"], "en", more_refs=[given])
    with pytest.raises(TypeError, match=r"^score: hyps must be a list of sentences, not a dict, whose keys would be"):
        score({"a": "b"}, ["a"], "en")   # (its keys were scored)

    class Lines:   # a sequence by __getitem__ and __len__ alone (a Dataset-like class): list() reads it
        def __init__(self, items):
            self.items = items

        def __getitem__(self, i):
            return self.items[i]

        def __len__(self):
            return len(self.items)
    assert score(Lines(["a b c d"]), Lines(["a b c d"]), "en").bleu == pytest.approx(100.0)
    with pytest.raises(TypeError, match="^train: init must be a model directory or parameter file path, got int$"):
        train(Config.from_dict({"train": {"model_dir": str(tmp_path / "m")}}), init=5)
    for which in (None, True, 630.0):   # (CheckpointError "unknown checkpoint 'None'")
        said = rf"^which must be best, latest, avg or a step number \(str or int\), got {type(which).__name__}$"
        with pytest.raises(TypeError, match=said):
            Translator.from_dir(model_dir, which=which)
        from nmt import checkpoint as ckpt
        with pytest.raises(TypeError, match=said):   # (the same check, said alike)
            ckpt.params_path(model_dir, which)


def test_train_names_a_config_that_is_no_config_and_takes_init_as_a_string(model_dir, tmp_path):
    """train(dict) raised AttributeError: 'dict' object has no attribute 'train'; init="..." (a str) failed with
    'str' object has no attribute 'parent'; a model_dir that is a file, with a bare NotADirectoryError."""
    import dataclasses
    from nmt import checkpoint as ckpt
    from nmt.config import Config, ConfigError
    from nmt.train import train
    with pytest.raises(TypeError, match=r"^train: cfg must be a Config \(Config.from_dict makes one of a dict\), "
                                        r"got dict$"):
        train({"train": {"model_dir": str(tmp_path / "m")}})
    from nmt.train import create_trainer   # the same for the part, and its model settings before any data is read
    with pytest.raises(TypeError, match=r"^create_trainer: cfg must be a Config"):
        create_trainer({"train": {"model_dir": str(tmp_path / "m")}})
    for model, message in (({"arch": "gru"}, "--arch must be one of lstm, transformer (got 'gru')"),
                           ({"attention": "foo"}, "--attention")):
        files = {"train_src": str(tmp_path / "no.ko"), "train_tgt": str(tmp_path / "no.en")}
        missing = Config.from_dict({"data": files, "model": model, "train": {"model_dir": str(tmp_path / "m")}})
        with pytest.raises(ConfigError, match=re.escape(message)):
            create_trainer(missing)
    assert not (tmp_path / "m").exists()
    saved = Config.load(model_dir / ckpt.CONFIG)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ckpt.CheckpointError, match="exists and is not a directory"):
        train(dataclasses.replace(saved, train=dataclasses.replace(saved.train, model_dir=str(tmp_path / "file"))))
    tuned = dataclasses.replace(saved, train=dataclasses.replace(saved.train, model_dir=str(tmp_path / "ft"),
                                                                 max_steps=2))
    result = train(tuned, init=str(model_dir / ckpt.PARAMS_BEST), evaluate=False)
    assert result.state.step == 2 and result.state.init_from == str(model_dir / ckpt.PARAMS_BEST)


def test_train_refuses_resume_and_init_together(model_dir, tmp_path):
    """train(cfg, resume=True, init=...) resumed the run after copying init's SentencePiece models over its own (given
    another model's, the run's checkpoints were then refused: "another model's file is in its place"), where nmt-train
    refuses --resume with --init-from; create_trainer too."""
    import shutil
    from nmt import checkpoint as ckpt
    from nmt.config import Config, ConfigError
    from nmt.train import create_trainer, train
    run = tmp_path / "run"
    shutil.copytree(model_dir, run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for call in (train, create_trainer):
        with pytest.raises(ConfigError, match=rf"^{call.__name__}: resume=True continues the run in train.model_dir "
                                              r"and init starts a new run from a trained model \(nmt-train's --resume "
                                              r"and --init-from\): give one of them$"):
            call(Config.from_dict({"train": {"model_dir": str(run), "max_steps": 1}}), resume=True,
                 init=model_dir / ckpt.PARAMS_BEST)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_a_zero_d_array_where_lines_belong_is_named(tr, lines):
    """np.array(sentence), an array of no dimensions (one value), failed in numpy with "iteration over a 0-d array",
    naming no argument, where translate, prefixes=, ContinuousDecoder.add, score_lines and bytes_left_out take lists
    (a 1-d array of str is taken)."""
    one = np.array(lines[0])
    for call, arg in ((lambda a: tr.translate(a), "lines"), (lambda a: tr.translate(lines[:1], prefixes=a), "prefixes"),
                      (lambda a: tr.continuous().add(a, ["k"]), "lines")):
        with pytest.raises(TypeError, match=rf"^{arg} must be a list of sentences, not a 0-d ndarray \(one value, "
                                            r"'.*'\): give \[a.item\(\)\]$"):
            call(one)
    with pytest.raises(TypeError, match=r"^the translations must be a list of strings, got ndarray"):
        score_lines(tr, lines[:1], one)
    with pytest.raises(TypeError, match=r"^bytes_left_out: translations must be .*, got ndarray$"):
        tr.bytes_left_out(np.array(5))
    assert tr.translate(np.array(lines[:2])) == tr.translate(lines[:2])
