"""A translator who types, simulated against references: translations started with a reference's first words
(`reference_prefixes`) and how often the model's next word is the reference's (`next_word_accuracy`), and the
word stroke ratio of interactive translation (`word_strokes`). nmt-evaluate's --prefix-words and --word-strokes
(`nmt.scoring.score_test_set`)."""
from __future__ import annotations

import logging
from typing import Dict, List, Optional, Sequence, Tuple

from nmt.corpus import line_list
from nmt.text import normalize
from nmt.translate import SOURCE, Translator

logger = logging.getLogger("nmt.evaluate")


def reference_prefixes(refs: Sequence[str], words: int) -> List[str]:
    """Each reference's first `words` words (split at whitespace, as the model writes text: `normalize`) as a
    prefix of whole words (`whole_words`)."""
    return [whole_words(normalize(r).split()[:words]) for r in refs]


def whole_words(words: Sequence[str]) -> str:
    """A target prefix of whole words: joined, and a space after the last, so that the translation goes on with a
    word of its own; "" (no prefix) for none."""
    return " ".join(words) + " " if words else ""


def next_word_accuracy(hyps: Sequence[str], refs: Sequence[str], words: int) -> Tuple[Optional[float], int]:
    """Of the sentences whose reference goes on after its first `words` words, the percentage whose translation
    (started with those words) has the reference's next word as its next word, compared as the model writes text;
    and how many such sentences there are (None, 0 when none)."""
    pairs = [(h.split(), normalize(r).split()) for h, r in zip(hyps, refs)]
    counted = [(h, r) for h, r in pairs if len(r) > words]
    if not counted:
        return None, 0
    hits = sum(len(h) > words and h[words] == r[words] for h, r in counted)
    return 100.0 * hits / len(counted), len(counted)


def word_strokes(translator: Translator, sources: Sequence[str], refs: Sequence[str]) -> Dict[str, object]:
    """The word stroke ratio of interactive translation (Barrachina et al. 2009), by a simulated translator: it
    reads the model's translation, accepts it up to the first word that differs from the reference, types the
    reference's word there, and the model translates again starting with the accepted and typed words (a target
    prefix of whole words), until the translation is the reference. A translation that goes on after the
    reference's last word costs one stroke too (the translator ends it). Words are compared as in
    `next_word_accuracy`. Returns the strokes (and of them the endings), the reference words, their ratio (strokes per
    100 reference words: above 100 when few words are typed and many translations ended) and the translations it took.
    Words that make the typed prefix longer than max_input_tokens pieces (it would be cut) count as typed."""
    words = [normalize(r).split() for r in refs]
    kept = [0] * len(words)   # per sentence, the reference words accepted or typed so far
    strokes, endings, translations, todo, long = 0, 0, 0, list(range(len(words))), []
    with translator.unreported() as cut:   # the set's lines, translated (and reported) already
        while todo:
            before = len(cut)
            hyps = translator.translate([sources[i] for i in todo],
                                        prefixes=[whole_words(words[i][:kept[i]]) for i in todo])
            translations += len(todo)
            left, too_long = [], {todo[n - 1] for what, n in cut[before:] if what != SOURCE}
            for i, hyp in zip(todo, hyps):
                got, want, k = hyp.split(), words[i], kept[i]
                if i in too_long:   # the model was not given the words typed: the translator types the rest
                    strokes += len(want) - k
                    long.append(i + 1)
                    continue
                while k < len(want) and k < len(got) and got[k] == want[k]:
                    k += 1
                if k == len(want):   # the whole reference: done, once the translator has ended any words after it
                    endings += len(got) > k
                else:                # the translator types the reference's word k; the model goes on after it
                    strokes, kept[i] = strokes + 1, k + 1
                    left.append(i)
            todo = left
    if long:
        logger.warning("--word-strokes: the words typed for %d sentence(s) (line %s) became a prefix longer than "
                       "--max-input-tokens %d pieces; the rest of their words count as typed", len(long),
                       line_list(sorted(long)), translator.decode.max_input_tokens)
    total, strokes = sum(map(len, words)), strokes + endings
    return {"word_strokes": strokes, "word_stroke_endings": endings, "reference_words": total,
            "word_stroke_ratio": 100.0 * strokes / total if total else None, "word_stroke_translations": translations}
