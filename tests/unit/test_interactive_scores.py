"""Scores of interactive translation in nmt-evaluate: --prefix-words (the references' first words as prefixes, the
next-word accuracy) and --word-strokes (a simulated translator's word stroke ratio), on a stand-in model."""
from contextlib import contextmanager

import pytest

from nmt.interactive import next_word_accuracy, reference_prefixes, word_strokes


def test_prefixes_are_the_first_whole_words_as_the_model_writes_them():
    refs = ["Tom  went\tto school.", "Hi.", "", "   ", "He\u200b said so", "e\u0301te\u0301 is summer"]
    assert reference_prefixes(refs, 2) == ["Tom went ", "Hi. ", "", "", "He said ", "\u00e9t\u00e9 is "]
    assert reference_prefixes(["a b c"], 5) == ["a b c "]


def test_next_word_accuracy_counts_only_references_that_go_on():
    refs = ["I like green tea.", "I like it.", "Yes.", "We eat rice now"]
    hyps = ["I like green apples.", "I like you.", "Yes. Yes.", "We eat"]
    # after 2 words: "green" right, "it." wrong, "Yes." has no next word (not counted), "rice" missing (wrong)
    assert next_word_accuracy(hyps, refs, 2) == (pytest.approx(100 / 3), 3)
    assert next_word_accuracy(hyps, refs, 1) == (100.0, 3)
    assert next_word_accuracy(hyps, refs, 9) == (None, 0)


def test_next_word_is_compared_as_the_model_writes_text():
    # a decomposed (NFD) reference word equals the model's composed (NFC) one
    assert next_word_accuracy(["\uc624\ub298 \ub0a0\uc528"], ["\uc624\ub298 \u1102\u1161\u11af\uc528"], 1) == (100.0, 1)


class Believer:
    """A stand-in for a Translator: for each source it believes one translation, and given a prefix of whole words
    it keeps them and goes on with its belief after as many words. Records every call's prefixes."""

    def __init__(self, beliefs):
        self.beliefs, self.calls = beliefs, []
        self.quiet, self.warned = False, False

    @contextmanager
    def unreported(self):
        self.quiet = True
        try:
            yield []
        finally:
            self.quiet = False

    def translate(self, sources, prefixes=None):
        self.calls.append(list(prefixes))
        self.warned |= not self.quiet   # a Translator would name "input lines" of this round, not of the set
        out = []
        for s, p in zip(sources, prefixes):
            given = (p or "").split()
            assert not p or p.endswith(" "), "the typed words must be whole words"   # "" and None: none
            out.append(" ".join(given + self.beliefs[s].split()[len(given):]))
        return out


@pytest.mark.parametrize("belief, ref, strokes, endings, translations", [
    ("a b c d", "a b c d", 0, 0, 1),     # right at once
    ("a x c d", "a b c d", 1, 0, 2),     # one wrong word: typed, then the rest is right
    ("x y", "a b", 2, 0, 3),             # every word typed
    ("a b c", "a b", 1, 1, 1),           # goes on after the reference's end: the translator ends it
    ("a b", "a b c", 1, 0, 2),           # stops too early: the last word typed
    ("a", "", 1, 1, 1),                  # an empty reference: the words are removed
])
def test_word_strokes_count_what_the_translator_types(belief, ref, strokes, endings, translations):
    model = Believer({"s": belief})
    got = word_strokes(model, ["s"], [ref])
    assert (got["word_strokes"], got["word_stroke_endings"], got["word_stroke_translations"]) == \
        (strokes, endings, translations)
    assert got["reference_words"] == len(ref.split())
    assert got["word_stroke_ratio"] == (100.0 * strokes / len(ref.split()) if ref else None)


def test_word_strokes_of_a_batch_type_each_sentences_own_words():
    model = Believer({"s1": "a x c", "s2": "p q", "s3": "u v w"})
    got = word_strokes(model, ["s1", "s2", "s3"], ["a b c", "p q", "u"])
    # s1: types "b" (1); s2: right; s3: ends after "u" (1). Second round only s1, from "a b "
    assert model.calls == [["", "", ""], ["a b "]]
    assert not model.warned and not model.quiet   # no warnings or counts in the rounds; reported again after
    assert got == {"word_strokes": 2, "word_stroke_endings": 1, "reference_words": 6,
                   "word_stroke_ratio": pytest.approx(100 * 2 / 6), "word_stroke_translations": 4}
