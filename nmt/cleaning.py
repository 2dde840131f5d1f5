"""Cleaning training pairs: empty, over-long, badly proportioned and duplicate pairs, and pairs that share a side
with a dev or test set, are dropped and counted by reason (`clean_training_pairs`)."""
from __future__ import annotations

import logging
from collections import Counter
from typing import Dict, List, Sequence, Tuple

from nmt.corpus import Pairs

logger = logging.getLogger("nmt.corpus")


def _ratio(s: str, t: str) -> float:
    bs, bt = len(s.encode("utf-8")), len(t.encode("utf-8"))
    return max(bs, bt) / min(bs, bt)


# More exact duplicates than this share of a corpus's pairs is a warning: a file concatenated twice drops 50%. The
# shipped corpora drop at most 3.0% (python-docs-ko: gettext strings repeated across pages; 3.9% of its raw files),
# the others 0% (measured on shared/data): 10% is three times the most a real corpus showed, well below 50%.
DUPLICATE_WARN_SHARE = 0.10
# More pairs whose two sides are the same text than this share of the kept pairs is a warning (untranslated copies,
# which teach a model to copy its input; kept, as they may be names or numbers): Tatoeba has 0 of 5,749, the news
# and JHE dev sets 0; python-docs-ko's raw files 14% (code, identifiers), which its recipe drops ("identical").
COPY_WARN_SHARE = 0.05


def clean_training_pairs(train: Pairs, exclude: Sequence[Pairs], *, max_chars: int, max_ratio: float,
                         where: str = "", copies_said: bool = False) -> Tuple[Pairs, Dict[str, int]]:
    """Training pairs without empty, over-long, badly proportioned, duplicate or held-out-overlapping pairs.

    A pair is dropped when a side is empty; when its source side equals the source side of any pair in an
    `exclude` set (dev/test), or its target side equals a target side there ("overlap:<set name>");
    when a side has more than `max_chars` characters ("too_long"); when the longer side is more than
    `max_ratio` times as long as the shorter ("ratio"); or when the same (source, target) pair came
    earlier ("duplicate"). Order is kept. Returns the kept pairs and the drop counts by reason. The log names
    the pairs `where` (e.g. their files), else by their name; it warns of many drops by the limits or as duplicates,
    and of many pairs with the same text on both sides (unless `copies_said`: these pairs were cleaned before).

    The ratio compares UTF-8 byte lengths: a Hangul syllable (3 bytes) carries about as much as two or
    three Latin letters, so bytes put Korean and English on one scale, where a character ratio would
    reject good short pairs such as "수고했어." / "Thank you for your efforts." (5 vs 27 characters).
    """
    held_out = [(ex.name, set(ex.src), set(ex.tgt)) for ex in exclude]
    seen = set()
    counts: Counter = Counter()
    keep_s: List[str] = []
    keep_t: List[str] = []
    for s, t in zip(train.src, train.tgt):
        overlap = next((f"overlap:{name}" for name, ex_src, ex_tgt in held_out if s in ex_src or t in ex_tgt), None)
        reason = ("empty" if not s or not t else overlap or ("too_long" if len(s) > max_chars or len(t) > max_chars
                  else "ratio" if _ratio(s, t) > max_ratio else "duplicate" if (s, t) in seen else None))
        if reason is None:
            seen.add((s, t))
            keep_s.append(s)
            keep_t.append(t)
        else:
            counts[reason] += 1
    kept = Pairs(keep_s, keep_t, train.name, dict(train.dropped))
    filtered = counts["too_long"] + counts["ratio"]   # a warning past 5%: --max-chars or --max-ratio may be too low
    dups = counts["duplicate"] if counts["duplicate"] > DUPLICATE_WARN_SHARE * len(train) else 0
    copies = sum(1 for s, t in zip(keep_s, keep_t) if s == t)
    copies = copies if copies > COPY_WARN_SHARE * len(kept) and not copies_said else 0   # (said of these pairs)
    logger.log(logging.WARNING if filtered > 0.05 * len(train) or dups or copies else logging.INFO,
               "%s: kept %d of %d training pairs%s%s%s%s", where or train.name, len(kept), len(train),
               "; dropped " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) if counts else "",
               f" (too_long: over --max-chars {max_chars}, ratio: over --max-ratio {max_ratio})" if filtered else "",
               f"; {dups} of {len(train)} training pairs ({dups / len(train):.0%}) are exact duplicates of earlier "
               "pairs and were dropped: was a file concatenated twice, or a corpus given twice?" if dups else "",
               f"; {copies} of the {len(kept)} kept pairs ({copies / len(kept):.0%}) have the same text on both sides: "
               "untranslated copies teach the model to copy its input; remove those that are not translations"
               if copies else "")
    return kept, dict(counts)


def warn_dev_in_tests(dev: Pairs, tests: Dict[str, Pairs], where: str) -> None:
    """Warn when pairs of the dev set share a side with a test set's (the same files given for both, or one cut from
    the other): the best checkpoint and early stopping are then chosen on test sentences, and the test scores
    overstate the model."""
    for name, test in tests.items():
        src, tgt = set(test.src), set(test.tgt)
        shared = sum(1 for s, t in zip(dev.src, dev.tgt) if s and s in src or t and t in tgt)
        if shared:
            logger.warning("%s: %d of the %d dev pairs share a side with pairs of the %s set: the best checkpoint and "
                           "early stopping are chosen on its sentences, so its scores overstate the model; give a "
                           "dev set apart from the test set", where, shared, len(dev), name)
