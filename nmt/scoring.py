"""Scoring a model on test sets and recording the scores in its directory: `score_test_set` (translate, sacreBLEU,
merge into scores.json atomically), the test sets of a model's recipe (`recipe_tests`) and its dev set
(`model_dev_set`), and scores.json itself (`read_scores`, `record_scores`, `ensemble_key`): which scores it keeps
(the model's own decoding settings: `other_decoding`, `retire_other_decoding`); which of them nmt-serve's /info
shows: `nmt.shown_score`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import numbers
import os
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from nmt import checkpoint as ckpt, jsonio
from nmt.atomic import atomic_write_text
from nmt.config import Config, ConfigError
from nmt.corpus import CorpusError, Pairs, read_lines, read_parallel
from nmt.evaluate import Scores, score
from nmt.forced import checked_translator
from nmt.interactive import next_word_accuracy, reference_prefixes, word_strokes
from nmt.preflight import checked_config
from nmt.storage import StorageError, guarded_write, others_file
from nmt.translate import SOURCE, Translator

logger = logging.getLogger("nmt.evaluate")


def _translated(translator: Translator, pairs: Pairs, n: int, prefixes: Optional[List[str]]) -> List[str]:
    """The first `n` sources of `pairs` translated; warnings name each by its line in the files, where pairs were
    dropped as they were read (a dev set's blank lines): each run of consecutive lines is translated on its own."""
    lines = (pairs.lines or [])[:n]
    starts = [i for i in range(len(lines)) if i == 0 or lines[i] != lines[i - 1] + 1] + [len(lines)]
    if len(starts) <= 2 and (not lines or lines[0] == 1):
        return translator.translate(pairs.src[:n], prefixes=prefixes)
    return [h for a, b in zip(starts, starts[1:]) for h in translator.translate(
        pairs.src[a:b], first_line=lines[a], prefixes=prefixes[a:b] if prefixes else None)]


def score_test_set(translator: Translator, name: str, pairs: Pairs, *, max_sentences: int = 0, save: bool = True,
                   extra: Optional[Dict[str, object]] = None, prefix_words: int = 0, strokes: bool = False,
                   more_refs: Sequence[Sequence[str]] = (), one_warning: bool = False
                   ) -> Tuple[Dict[str, object], List[str], Scores]:
    """Translate and score one test set; the entry (scores, signatures, checkpoint, decoding settings, time) is
    merged into the model directory's scores.json unless `save` is False or `other_decoding` or `replaced` say why
    not (a warning). Used by evaluate and by training. `more_refs`: further references, line-aligned with `pairs.tgt`.

    With `prefix_words`, each translation starts with its reference's first words (`reference_prefixes`), and the
    entry also says how often the model's next word is the reference's (`next_word_accuracy`); with `strokes`, how
    many of the reference's words a simulated translator types (`word_strokes`). `one_warning`: sources cut to
    max_input_tokens are counted in one warning naming the set (training's), not warned of line by line."""
    from datetime import datetime, timezone
    checked_translator(translator, "score_test_set")
    if not isinstance(pairs, Pairs):
        raise TypeError(f"score_test_set: pairs must be an nmt.corpus.Pairs, got {type(pairs).__name__}")
    for arg, value, zero in (("max_sentences", max_sentences, "all"), ("prefix_words", prefix_words, "none")):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0):
            raise ValueError(f"score_test_set: {arg} must be an int >= 0 (0 or None: {zero}), got {value!r}")
    max_sentences, prefix_words = int(max_sentences or 0), int(prefix_words or 0)   # (numpy's: scores.json's ints)
    if prefix_words and strokes:   # (BLEU of the forced translations beside the typist's own runs' ratio)
        raise ValueError("score_test_set: give prefix_words or strokes, not both: the simulated translator types its "
                         "own prefixes")
    n = max_sentences or len(pairs.src)
    refs, t0 = pairs.tgt[:n], time.perf_counter()
    with translator.unreported() if one_warning else contextlib.nullcontext([]) as cut:
        hyps = _translated(translator, pairs, n, reference_prefixes(refs, prefix_words) if prefix_words else None)
    if cut:
        logger.warning("%s: %d of %d sources have more than --max-input-tokens %d subword tokens; they were translated "
                       "cut", name, len({line for what, line in cut if what == SOURCE}), n,
                       translator.decode.max_input_tokens)
    seconds = time.perf_counter() - t0
    sc = score(hyps, refs, translator.tgt_lang, [r[:n] for r in more_refs])
    d = translator.decode
    info = {"params_file": translator.params_file and translator.params_file.name, "step": translator.params_step,
            "params_sha256": translator.params_sha256, **({"member_steps": translator.member_steps}
                                                           if translator.member_dirs else {})}
    if prefix_words:
        accuracy, counted = next_word_accuracy(hyps, refs, prefix_words)
        extra = {**(extra or {}), "prefix_words": prefix_words, "next_word_accuracy": accuracy,
                 "next_word_sentences": counted}
    if strokes:
        extra = {**(extra or {}), **word_strokes(translator, pairs.src[:n], refs)}
    key = _scores_key(translator, info["params_file"])   # (under a step's key, the entry's checkpoint is that step)
    head = key.split(":", 1)[0].removeprefix(ENSEMBLE_PREFIX)   # (an ensemble's: ensemble-4697:DIR)
    entry = {**sc.to_dict(), "checkpoint": head if head.isdecimal() or head in ("best", "avg") else
             translator.checkpoint, **info, **{f: getattr(d, name) for f, (name, _) in entry_decode(d).items()},
             **(extra or {}), "seconds": round(seconds, 2),
             "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if translator.member_dirs:   # an ensemble: its own entry, never one of the first member's alone
        entry["ensemble"] = [str(p.resolve()) for p in [translator.model_dir, *translator.member_dirs]]
    # a part of a set, translations helped by the references, or another run's parameters since, are not the set's
    why = [other_decoding(translator), replaced(translator),
           f"the scores of part of a set ({n} of {len(pairs.src)} sentences)" if n < len(pairs.src) else "",
           f"translations given the references' first words (prefix_words {prefix_words})" if prefix_words else ""]
    if save and translator.model_dir:
        _record(translator.model_dir, name, key, entry, "; ".join(w for w in why if w))
    return entry, hyps, sc


def _record(model_dir: Path, name: str, key: str, entry: Dict[str, object], other: str) -> None:
    """Record `entry` unless `other` says why it is not the set's (warned; nmt-evaluate says so itself, and passes
    save=False); a full disk is warned of and noted in the entry ("not_recorded"): the scores made are still printed,
    and kept by nmt-evaluate's --json."""
    if other:
        logger.warning("%s: not recorded in %s: %s", name, model_dir / ckpt.SCORES, other)
        return
    try:
        old = read_scores(model_dir).get(name, {}).get(key)
        record_scores(model_dir, name, key, entry)
        if isinstance(old, dict) and "ref_file" in old and "ref_file" in entry and \
                sorted(_refs(old).split(", ")) != sorted(_refs(entry).split(", ")):
            logger.warning("%s: its %s entry in scores.json, scored against %s, is replaced by this one against %s "
                           "(another --name keeps both)", name, key, _refs(old), _refs(entry))
    except StorageError as e:
        logger.warning("%s: not recorded: %s", name, e)
        entry["not_recorded"] = str(e)


def _refs(entry: Dict[str, object]) -> str:
    """The reference files an entry of nmt-evaluate's was scored against, as messages name them."""
    return ", ".join(filter(None, [entry.get("ref_file"), *(entry.get("more_ref_files") or ())]))


def _scores_key(translator: Translator, params_file: Optional[str]) -> str:
    """The scores.json key of `translator`'s scores: its checkpoint's (`checkpoint_key`); its step's when params.best
    holds other parameters now (a new best since it was loaded, another run's since an --overwrite), so that they
    never replace the entry of what params.best holds; an ensemble's (`ensemble_key`)."""
    key = checkpoint_key(translator.checkpoint, params_file, bool(translator.member_dirs))
    if translator.member_dirs:
        return ensemble_key(key, translator.model_dir, translator.member_dirs)
    best = key == "best" and translator.model_dir and ckpt.params_sha256(Path(translator.model_dir) / ckpt.PARAMS_BEST)
    return str(translator.params_step) if best and best != translator.params_sha256 and translator.params_step else key


ENSEMBLE_PREFIX = "ensemble-"


def ensemble_key(checkpoint: str, model_dir: Path, member_dirs: Sequence[Path]) -> str:
    """scores.json key of an ensemble's scores: its checkpoint and the members after the first, `model_dir` (in
    whose scores.json it is recorded), each by its path from the directory that holds `model_dir`, e.g.
    ensemble-avg:run-b+run-c for runs beside it, ensemble-best:../seed2/model for runs/seed1/model's: two ensembles
    of directories of one name stay apart."""
    home = Path(model_dir).resolve().parent
    return f"{ENSEMBLE_PREFIX}{checkpoint}:" + "+".join(os.path.relpath(Path(p).resolve(), home) for p in member_dirs)


def recipe_tests(cfg: Config, data_dir: Optional[str] = None) -> Dict[str, Pairs]:
    """The test sets of a model's data configuration, in its direction: every test set of its recipe (from the
    mirror `data_dir`, else the configured one / $NMT_DATA_DIR / the cache), or its explicit test files."""
    return _model_split(checked_config(cfg, "recipe_tests"), data_dir, "test", "--recipe-tests", "test")


def first_test_sources(cfg: Config, data_dir: Optional[str] = None,
                       src_file: Optional[str] = None) -> Tuple[str, List[Optional[str]]]:
    """(name, source lines) a benchmark decodes: `src_file`, else the model's first test set (`recipe_tests`);
    ConfigError when the model has none."""
    if src_file:
        return str(src_file), read_lines(src_file, max_input_tokens=cfg.decode.max_input_tokens)   # as nmt-translate
    tests = recipe_tests(checked_config(cfg, "first_test_sources"), data_dir)
    if not tests:
        raise ConfigError("the model has no test set; pass --src-file")
    name, pairs = next(iter(tests.items()))
    return name, pairs.src


DEV_SET = "dev"   # the scores.json name of a model's own dev set (`model_dev_set`); results tables leave it out


def model_dev_set(cfg: Config, data_dir: Optional[str] = None) -> Dict[str, Pairs]:
    """The dev set a model was validated on, as {DEV_SET: pairs}: its --dev-src/--dev-tgt files, or its recipe's
    held-out split. A recipe draws that split while it loads and cleans the training corpora, so this reads them
    too (from the mirror `data_dir`, else the configured one / $NMT_DATA_DIR / the cache)."""
    return _model_split(checked_config(cfg, "model_dev_set"), data_dir, "dev", "--dev-set", DEV_SET)


def _model_split(cfg: Config, data_dir: Optional[str], kind: str, flag: str, name: str) -> Dict[str, Pairs]:
    """A model's `kind` ("test" or "dev") pairs: its --<kind>-src/--<kind>-tgt files as {name: pairs}, else its
    recipe's (with `data_dir` as the mirror, if given; a test set: its files only, load_data would also read and
    clean the training data); a ConfigError naming `flag` when the config has neither files nor a known recipe."""
    from nmt import recipes   # not at import time: the registry is only needed here
    from_recipe = recipes.load_tests if kind == "test" else lambda d: {name: recipes.load_data_again(d).dev}
    d = dataclasses.replace(cfg.data, data_dir=data_dir or cfg.data.data_dir)
    src, tgt, dev = getattr(d, f"{kind}_src"), getattr(d, f"{kind}_tgt"), kind == "dev"   # (a test set: whole)
    if src and tgt:
        try:
            return {name: read_parallel(src, tgt, skip_invalid_utf8=d.skip_invalid_utf8, name=name, whole=not dev)}
        except CorpusError as e:   # the paths come from the model's configuration, which the user may not know
            raise CorpusError(f"{flag}: the model's {kind} files (data.{kind}_src, data.{kind}_tgt of its config.json "
                              f"as trained): {e}; if they moved, give them as --src-file and --ref-file") from None
    if dev and d.train_src:   # training files without dev files: the pairs held out of them
        try:
            return from_recipe(d)
        except CorpusError as e:
            raise CorpusError(f"{flag}: the model's training files (data.train_src, data.train_tgt of its config.json "
                              f"as trained), whose held-out pairs are its dev set: {e}") from None
    if not d.recipe or d.recipe not in recipes.RECIPES:
        raise ConfigError(f"{flag}: the model's data config names no known recipe ({d.recipe!r}) and no {kind} "
                          "files; give --src-file and --ref-file instead")
    return from_recipe(d)


def checkpoint_info(model_dir: Path, which: str, quiet: bool = False) -> Dict[str, object]:
    """The parameter file behind `which` and, where known, its training step (an average has none) and sha256
    (which tells two runs' parameters of one step apart); `quiet`: as `ckpt.params_path`."""
    path = ckpt.params_path(model_dir, which, quiet)
    step = ckpt.params_step(path.name)
    if step is None and path.name == ckpt.PARAMS_BEST:   # "best", or the step number of the best (pruned since)
        step = ckpt.best_step(Path(model_dir))
    return {"params_file": path.name, "step": step, "sha256": ckpt.params_sha256(path)}


def read_scores(model_dir: Path, advice: str = "; move it away to record new scores") -> Dict[str, Dict[str, object]]:
    """model_dir/scores.json ({} when absent): test set -> checkpoint -> entry; CheckpointError naming the file
    (and `advice`) when it is not valid JSON."""
    path = Path(model_dir) / ckpt.SCORES
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:   # not JSON, or not UTF-8 text
        raise ckpt.CheckpointError(f"{path} is not valid JSON ({e}){advice}") from None
    except OSError as e:
        raise ckpt.CheckpointError(f"{path}: cannot read it ({e.strerror})") from None
    if not (isinstance(data, dict) and all(isinstance(v, dict) for v in data.values())):
        raise ckpt.CheckpointError(f"{path} is not a scores file (an object of test set -> checkpoint -> scores)"
                                   f"{advice}")
    return data


def cannot_record(model_dir: Path) -> str:
    """Why scores cannot be recorded in the model directory (another user's, on a read-only disk), warned at once
    so that its scores can still be printed; "" when they can."""
    lock, writable = Path(model_dir) / ckpt.SCORES_LOCK, os.access(model_dir, os.W_OK)   # (opened in place)
    if writable and not (lock.is_file() and not os.access(lock, os.W_OK)):
        return ""
    why = (f"{lock} is not writable ({others_file(lock) or 'its permissions: chmod u+w'})" if writable else
           f"{model_dir} is not writable (another user's, or a read-only disk)")
    logger.warning("%s: the scores are printed but not recorded in its scores.json", why)
    return why


def _update_scores(model_dir: Path, edit: Callable[[dict], bool]) -> None:
    """`edit` scores.json's entries (test set -> checkpoint key -> entry) under its lock file, which serializes
    concurrent evaluations and trainings; written back, atomically, when `edit` returns True."""
    path, lock_path = Path(model_dir) / ckpt.SCORES, Path(model_dir) / ckpt.SCORES_LOCK   # (opened in place:
    with guarded_write(lock_path if path.parent.is_dir() else path), open(lock_path, "a") as lock:   # its own name)
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = read_scores(model_dir)
        if edit(data):
            atomic_write_text(path, jsonio.dumps(data, indent=2, sort_keys=True) + "\n")


def record_scores(model_dir: Path, test_key: str, checkpoint: str, entry: Dict[str, object]) -> Path:
    """Merge `entry` into model_dir/scores.json as [test_key][checkpoint], keeping every other entry."""
    def edit(data: dict) -> bool:
        data.setdefault(test_key, {})[checkpoint] = entry
        return True
    _update_scores(model_dir, edit)
    return Path(model_dir) / ckpt.SCORES


def _drop_empty_sets(data: dict) -> None:
    for test in [t for t, by_key in data.items() if not by_key]:   # a set of no entry left: none
        del data[test]


def retire_scores(model_dir: Path, which: str) -> None:
    """After training wrote new `which` parameters (params.best or params.avg): the scores.json entries recorded for
    the old ones are no longer theirs. A best's entry moves to the key of its step (those were that step's
    parameters), unless that step has one; an average's, and an ensemble's with either, are dropped."""
    def edit(data: dict) -> bool:
        for by_key in data.values():
            old = by_key.pop(which, None)
            step = old.get("step") if which == "best" and isinstance(old, dict) else None
            if isinstance(step, int) and str(step) not in by_key:
                by_key[str(step)] = {**old, "checkpoint": str(step), "params_file": ckpt.params_file(step)}
            for key in [k for k in by_key if k.startswith(f"{ENSEMBLE_PREFIX}{which}:")]:
                del by_key[key]
        _drop_empty_sets(data)
        return True
    if (Path(model_dir) / ckpt.SCORES).exists():
        try:
            _update_scores(model_dir, edit)
        except ckpt.CheckpointError as e:   # training goes on; evaluating the model will name the file
            logger.warning("%s; its %s entries were not retired", e, which)


def entry_decode(decode) -> Dict[str, Tuple[str, object]]:
    """The decoding settings a scores.json entry records: its name -> (the DecodeConfig field, its default, at which
    an entry made before the field existed was made); every field but DecodeConfig.UNSCORED, one added later too."""
    return {("length_penalty" if f.name == "length_penalty_alpha" else f.name): (f.name, f.default)
            for f in dataclasses.fields(decode) if f.name not in decode.UNSCORED}


def retire_other_decoding(model_dir: Path, decode) -> None:
    """Drop the scores.json entries made at other decoding settings than `decode` (a resume changed the model's
    saved ones, config.json's decode section): scores.json holds a model's scores at its own (and nmt-export ships
    them as the export's), with a warning naming them; nmt-evaluate scores them again."""
    from nmt.shown_score import decoded_as   # (which imports this module)
    gone: List[str] = []

    def edit(data: dict) -> bool:
        for test, by_key in data.items():
            for key in [k for k, e in by_key.items() if isinstance(e, dict) and not decoded_as(e, decode)]:
                gone.append(f"{test} ({key})")
                del by_key[key]
        _drop_empty_sets(data)
        return bool(gone)
    if (Path(model_dir) / ckpt.SCORES).exists():
        _update_scores(model_dir, edit)
    if gone:
        logger.warning("scores.json: the scores of %s were made at other decoding settings than the model's now "
                       "(config.json's decode section), and are removed; nmt-evaluate scores them again",
                       ", ".join(gone))


def replaced(translator: Translator) -> str:
    """Why `translator`'s scores may not be recorded in its model directory's scores.json: "" unless the directory
    holds another run's step (`ckpt.holds_other`) or another params.avg than it loaded (an ensemble's: not known)."""
    step, mine = translator.params_step, translator.model_dir and not translator.member_dirs
    if mine and ckpt.holds_other(translator.model_dir, step, translator.params_sha256):
        return f"the directory holds another run's step {step} now (nmt-train --overwrite replaced the one scored)"
    avg = Path(translator.model_dir or ".") / ckpt.PARAMS_AVG   # (a training run averaged again meanwhile)
    if mine and Path(translator.params_file or "") == avg and ckpt.params_sha256(avg) != translator.params_sha256:
        return f"{avg.name} holds another average now (training averaged other checkpoints since it was loaded)"
    return ""


def other_decoding(translator: Translator) -> str:
    """Why `translator`'s scores may not be recorded in scores.json: its decoding settings (but `UNSCORED`) that
    differ from its model's config.json's as it is now (a resume may change them meanwhile), by flag; "" if none."""
    from nmt.flags import DECODE_FLAGS
    saved, home = getattr(getattr(translator, "config", None), "decode", None), getattr(translator, "model_dir", None)
    with contextlib.suppress(ConfigError, OSError):   # (an evaluation during a resume given --beam-size 3)
        saved = Config.load(Path(home) / ckpt.CONFIG).decode if saved and home else saved
    if saved is None:
        return ""
    flags = {f.field: f.flag for f in DECODE_FLAGS}
    differ = [f"{flags.get(f.name, f.name)} {getattr(translator.decode, f.name)} (saved: {getattr(saved, f.name)})"
              for f in dataclasses.fields(saved)
              if f.name not in saved.UNSCORED and getattr(translator.decode, f.name) != getattr(saved, f.name)]
    sample = getattr(translator, "sample", None)
    differ += [f"--sample {sample} (sampling, not the search)"] if sample is not None else []
    return (f"decoding settings other than the model's saved ones, {', '.join(differ)}: scores.json holds its scores "
            "at those of its config.json, and --json keeps such scores" if differ else "")


def model_test_sets(cfg: Optional[Config]) -> List[str]:
    """The scores.json names of a model's own test sets, in order: "test" for its --test-src/--test-tgt files, else
    its recipe's test sets in the recipe's order (as `recipe_tests` and training name them); [] for neither."""
    from nmt import recipes
    if cfg is None:
        return []
    if cfg.data.test_src and cfg.data.test_tgt:
        return ["test"]
    return list(recipes.RECIPES[cfg.data.recipe].tests) if cfg.data.recipe in recipes.RECIPES else []


def check_set_name(name: str, src_file: str, ref_files: Sequence[str], cfg: Config) -> None:
    """ConfigError when `name` (nmt-evaluate's --name) is that of one of the model's own sets (its recipe's test
    sets, "test", "dev") but the files are not that set's: their scores would replace the set's own, which /info and
    nmt-export show."""
    d = cfg.data
    own = {**{n: (None, None) for n in model_test_sets(cfg)}, DEV_SET: (d.dev_src, d.dev_tgt),
           **({"test": (d.test_src, d.test_tgt)} if d.test_src else {})}   # (a recipe's sets are not "test")
    given = (src_file, ref_files[0])
    same = None not in own.get(name, (None,)) and [*map(os.path.realpath, own[name])] == [*map(os.path.realpath, given)]
    if same and len(ref_files) > 1:   # further references make another set (nrefs:2)
        raise ConfigError(f"--name {name} is the name of the model's own set of {given[0]} and {given[1]} alone; "
                          f"with {len(ref_files) - 1} more reference(s) it is another set (nrefs:{len(ref_files)}), "
                          "whose scores would replace that set's in scores.json: give another --name")
    if name in own and own[name] == (None, None) and name != DEV_SET:   # (read from the recipe's corpora)
        raise ConfigError(f"--name {name} is the name of a test set of the model's recipe, which --recipe-tests "
                          "scores as training read it; scores of --src-file/--ref-file would replace its own in "
                          "scores.json: give another --name, or --recipe-tests")
    if name in own and not same:
        dev = name == DEV_SET
        raise ConfigError(f"--name {name} is the name of the model's own {'dev' if dev else 'test'} set, which "
                          f"{given[0]} and {given[1]} are not: their scores would replace that set's in scores.json; "
                          f"give another --name (or {'--dev-set' if dev else '--recipe-tests'})")


def checkpoint_key(checkpoint: Optional[str], params_file=None, ensemble: bool = False) -> Optional[str]:
    """The scores.json key of a loaded checkpoint's scores (`score_test_set` records them under it, /info looks them
    up): best and avg by name, any other by its step (a step number as given, latest by the step of its
    `params_file`); an export's avg or latest (its params.best: `nmt.export.as_exported`) as best, but as asked when
    it leads an `ensemble` (the other members' avg or latest: an "ensemble-best" of them replaced their best's)."""
    if checkpoint in ("avg", "latest") and params_file and Path(params_file).name == ckpt.PARAMS_BEST:
        return checkpoint if ensemble else "best"
    if checkpoint is None or checkpoint in ("best", "avg"):
        return checkpoint
    if str(checkpoint).isdecimal():
        return str(int(checkpoint))
    step = ckpt.params_step(Path(params_file).name) if params_file else None
    return str(step) if step is not None else str(checkpoint)
