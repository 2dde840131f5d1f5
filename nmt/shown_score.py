"""Which recorded test score nmt-serve's /info (and its page) shows for a loaded model: `model_test_score`, read from
the model directory's scores.json (`nmt.scoring` records it)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

from nmt import checkpoint as ckpt
from nmt.scoring import DEV_SET, ENSEMBLE_PREFIX, ensemble_key, entry_decode, read_scores

logger = logging.getLogger("nmt.scoring")


def decoded_as(entry: dict, decode) -> bool:
    """Whether the scores.json `entry` was made at the decoding settings `decode` (those it records; a setting it
    does not record, newer than the entry, at its default)."""
    return all(entry.get(f, default) == getattr(decode, d) for f, (d, default) in entry_decode(decode).items())


def model_test_score(model_dir, checkpoint: Optional[str], members: Sequence = (),
                     tests: Sequence[str] = (), step: Optional[int] = None, sha256: Optional[str] = None,
                     decode=None) -> Optional[dict]:
    """The model's test score in scores.json, for nmt-serve's /info: the loaded checkpoint's (its key,
    `checkpoint_key`, or best's for best's step; else any: best, avg, the latest step), on the first of its own test
    sets `tests` (`model_test_sets`) recorded, else another, the first by name; never the dev set, nor chosen by
    score. With test set, checkpoint, sacreBLEU signatures, decoding settings; None when nothing is recorded (or
    scores.json is damaged). `members` (an ensemble's other directories): the ensemble's own scores only. `step`,
    `sha256`: the loaded parameters' (`Translator.params_step`, `params_sha256`): best's scores are theirs only while
    best is that step, and no entry recording other parameters (another run's of that step, since --overwrite) is;
    `decode` (the loaded model's settings): whether it was made at them (not so after an export's config.json was
    edited), those that were first."""
    if model_dir is None:
        return None
    try:
        scores = read_scores(Path(model_dir))
    except ckpt.CheckpointError as e:   # the model still translates: /info (and the page) go on without its score
        logger.warning("%s; /info shows no test score for %s", e, model_dir)
        return None
    rows = [(test, key, e) for test, by_key in scores.items() if test != DEV_SET
            for key, e in by_key.items() if isinstance(e, dict) and isinstance(e.get("bleu"), (int, float))]

    def same_params(row) -> bool:   # (an entry written before entries recorded them: by its key and step alone)
        return not sha256 or row[2].get("params_sha256") in (None, sha256)

    def same_settings(row) -> bool:   # (an export's config.json edited: its scores were made at others)
        return decode is None or decoded_as(row[2], decode)
    if members:   # this ensemble's entries (the first member's scores.json holds them): the loaded checkpoint's
        tail = ensemble_key("", model_dir, members)[len(ENSEMBLE_PREFIX):]
        rows = [r for r in rows if r[1].startswith(ENSEMBLE_PREFIX) and r[1].endswith(tail)]

        def loaded(row) -> bool:
            return row[1] == ensemble_key(str(checkpoint), model_dir, members) and same_params(row)
    else:   # params.best is the parameters of its step: the loaded checkpoint's scores are under either key
        rows = [r for r in rows if not r[1].startswith(ENSEMBLE_PREFIX)]
        step = ckpt.best_step(Path(model_dir)) if step is None else step
        same = {checkpoint} | ({"best", str(step)} if step and checkpoint in ("best", str(step)) else set())

        def loaded(row) -> bool:   # (a new best since it was loaded holds another step's parameters)
            newer_best = row[1] == "best" and step and row[2].get("step") not in (None, step)
            return row[1] in same and not newer_best and same_params(row)
    if not rows:
        return None
    order = {t: i for i, t in enumerate(tests)}

    def rank(row) -> tuple:   # the model's own sets before any other (a set of --name never replaces theirs), the
        key = row[1].split(":", 1)[0][len(ENSEMBLE_PREFIX) if members else 0:]   # loaded checkpoint's first; then
        step = int(key) if key.isdecimal() else -1   # the sets in order, the others by name; best, avg, latest step
        return (row[0] not in order, not loaded(row), not same_settings(row), order.get(row[0], len(order)), row[0],
                {"best": 0, "avg": 1}.get(key, 2), -step, row[1])
    test, key, e = min(rows, key=rank)
    return {"test_set": test, "checkpoint": key, "of_loaded_checkpoint": loaded((test, key, e)),
            "at_loaded_settings": same_settings((test, key, e)), "bleu": e["bleu"],
            "bleu_signature": e.get("bleu_signature"),
            "chrf": e.get("chrf"), "chrf_signature": e.get("chrf_signature"), "extra": e.get("extra") or {},
            "extra_signatures": e.get("extra_signatures") or {}, "beam_size": e.get("beam_size"),
            "length_penalty": e.get("length_penalty")}
