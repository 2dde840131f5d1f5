"""nmt-evaluate --prefix-words: the references' first words as prefixes, and the next-word accuracy."""
import pytest

from nmt.scoring import next_word_accuracy, reference_prefixes


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
