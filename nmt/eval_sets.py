"""nmt-evaluate's sets (`nmt.cli_decode.evaluate_main`): which to score (--src-file and --ref-file, a recipe's test
sets or the model's dev set), checked against the pairs the model's run validated and was tested on, whether their
scores are recorded in scores.json, and the files they are read from and written beside (--hyp-dir)."""
from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Tuple

from nmt.config import ConfigError


def sets_to_score(args: argparse.Namespace, tr) -> Dict[str, Tuple[Any, List[List[str]]]]:
    """name -> (Pairs, further references) of what to score (files, the recipe's test sets or the model's dev
    set)."""
    from nmt.cli_io import check_languages_of, misaligned
    from nmt.corpus import Pairs, drop_blank_ends, read_lines
    from nmt.evaluate import korean_bleu
    from nmt.scoring import check_set_name, model_dev_set, recipe_tests
    if tr.tgt_lang == "ko":   # Korean output's scorer, before the translating it would end
        korean_bleu()
    files = bool(args.src_file or args.ref_file)
    if files + args.recipe_tests + args.dev_set != 1:
        raise ConfigError("give one of: --src-file and --ref-file, --recipe-tests, --dev-set")
    if args.name and not files:   # (it was ignored without a word)
        raise ConfigError(f"--name {args.name} names the set of --src-file and --ref-file; --recipe-tests and "
                          "--dev-set score the model's own sets, under their own names")
    if args.data_dir and files:   # (so was it)
        raise ConfigError(f"--data-dir {args.data_dir} is where --recipe-tests and --dev-set read the model's own "
                          "sets; --src-file and --ref-file are read where they are: drop it")
    d, kind = tr.config.data, "test" if args.recipe_tests else "dev"
    if args.data_dir and not files and (getattr(d, f"{kind}_src") or kind == "dev" and d.train_src):   # (and so)
        raise ConfigError(f"--data-dir {args.data_dir} is where a recipe's corpora are read; this model's {kind} set "
                          "comes from its own files (its config.json's data section), read where they are: drop it")
    if args.recipe_tests or args.dev_set:
        sets = recipe_tests(tr.config, args.data_dir) if args.recipe_tests else model_dev_set(tr.config, args.data_dir)
        for model_dir in (tr.model_dir, *tr.member_dirs) if args.dev_set else ():   # (an ensemble's: each member)
            validated_on(Path(model_dir), next(iter(sets.values())), Path(tr.model_dir))
        return {name: (pairs, []) for name, pairs in sets.items()}
    if not (args.src_file and args.ref_file):
        raise ConfigError("--src-file and --ref-file must be given together")
    args.src_file = "/dev/stdin" if args.src_file == "-" else args.src_file   # ("-": named as it is read)
    args.ref_file = ["/dev/stdin" if f == "-" else f for f in args.ref_file]
    special = os.path.exists(args.src_file) and not os.path.isfile(args.src_file) and not os.path.isdir(args.src_file)
    if special and not (args.name or args.no_save):   # (before a pipe is read; a missing file: said as it is read)
        raise ConfigError(f"--src-file {args.src_file} is no file (a pipe?), whose path would name its scores in "
                          "scores.json; give --name (or --no-save)")
    # sources as nmt-translate reads them (a long line is cut, with a warning; a blank one, even all, is translated);
    # blank last lines dropped only where every file has them
    src = read_lines(args.src_file, keep_blank_end=True, blank_ok=True, max_input_tokens=tr.decode.max_input_tokens)
    refs = [read_lines(r, keep_blank_end=True) for r in args.ref_file]
    drop_blank_ends([(args.src_file, src), *zip(args.ref_file, refs)])
    for path, ref in zip(args.ref_file, refs):
        if len(src) != len(ref):
            raise misaligned(args.src_file, src, "--ref-file", path, ref, "the references", "the source")
        check_languages_of(tr, src, ref, f"--src-file {args.src_file}", f"--ref-file {path}")
    own = d.test_src and len(args.ref_file) == 1 and [*map(os.path.realpath, (d.test_src, d.test_tgt))] == [
        *map(os.path.realpath, (args.src_file, args.ref_file[0]))]   # the model's own test files: that set
    name = args.name or ("test" if own else file_name(args.src_file))   # (a pipe: its name, not /proc/PID/fd's)
    if not args.no_save:   # (else nothing is recorded: the name only labels the report and the --hyp-dir files)
        check_set_name(name, args.src_file, args.ref_file, tr.config)
    return {name: (Pairs(src, refs[0], name), refs[1:])}


def saved_sets(args: argparse.Namespace, tr, tests: dict, recordable: bool) -> Dict[str, bool]:
    """name -> whether the set's scores are recorded in scores.json: if `recordable` (no --no-save, --prefix-words,
    read-only directory or other decoding), and not for part of a set (--max-sentences), which is not the set; the
    model's own test files, recorded, must be the pairs its run was tested with (`tested_on`)."""
    saved = {name: recordable and not 0 < args.max_sentences < len(pairs.src) for name, (pairs, _) in tests.items()}
    d = tr.config.data
    if saved.get("test") and d.test_src:   # (its own files, by --recipe-tests or as --src-file and --ref-file)
        tested_on(Path(tr.model_dir), tests["test"][0], (d.test_src, d.test_tgt))
    return saved


def evaluation_inputs(args, data) -> list:
    """What nmt-evaluate reads, one {flag: file} each (`refuse_overwriting`'s inputs): --src-file, each --ref-file,
    and the model's own corpus files (`data`, its DataConfig), which --dev-set and --recipe-tests read."""
    from nmt.config import CORPUS_FILES
    return [{"--src-file": args.src_file}, *({"--ref-file": r} for r in args.ref_file or ()),
            *({f"model's {k.replace('_', '-')}": getattr(data, k)} for k in CORPUS_FILES if getattr(data, k))]


def validated_on(model_dir: Path, dev, first: Path) -> None:
    """CorpusError when the dev pairs read again from the data of `first` (--model-dir) are not those the run of
    `model_dir` (it, or an --ensemble member) validated on (`TrainState.dev_sum`): its files changed since (a helper's
    appended lines: 120 of 500, 41 of them trained on), or a member's were others (a fine-tuned one's training)."""
    from nmt import checkpoint as ckpt
    from nmt.corpus import CorpusError
    from nmt.encoded import text_checksum
    from nmt.text import READ_SINCE
    try:
        saved = ckpt.TrainState.load(model_dir).dev_sum if (model_dir / ckpt.STATE).exists() else ""
    except ckpt.CheckpointError:
        return
    if not saved and model_dir != first:   # (an export: no state.json)
        logging.getLogger("nmt.evaluate").warning(
            "--dev-set: --ensemble %s records no dev set it validated on (an export keeps no training state): the "
            "score on --model-dir %s's dev set may count pairs it trained on", model_dir, first)
    if not saved or saved == text_checksum([*dev.src, *dev.tgt]):
        return
    if model_dir != first:
        raise CorpusError(f"--dev-set: --ensemble {model_dir} validated on other dev pairs than --model-dir {first}, "
                          "whose dev set this scores, which may hold pairs it trained on; score files with --src-file "
                          "and --ref-file instead")
    raise CorpusError("--dev-set: the dev pairs read again from the model's data are not those its run validated on: "
                      "its training, dev or test files (a held-out dev set leaves out pairs of the test set) have "
                      f"changed since (edited, appended to or replaced; or {READ_SINCE}), so their scores would not be "
                      "its dev scores and may count pairs it trained on; score files with --src-file, --ref-file "
                      "instead")


def tested_on(model_dir: Path, test, files) -> None:
    """CorpusError when the pairs of a model's own test files (`files`: its data.test_src, data.test_tgt), read again
    as `test`, are not those its run recorded (`TrainState.test_sum`; an export's export.json keeps it): edited since,
    their scores would replace the "test" entry in scores.json that training recorded, which /info and nmt-export
    show as the model's. Only for scores to be recorded (nmt-evaluate: not of part of a set, --max-sentences). (A
    recipe's test sets are read from files of known sha256.)"""
    from nmt.corpus import CorpusError
    from nmt.encoded import text_checksum
    from nmt.export import test_sum_of
    from nmt.text import READ_SINCE
    saved = test_sum_of(model_dir)   # (state.json's; an export's export.json)
    if not saved or saved == text_checksum([*test.src, *test.tgt]):
        return
    raise CorpusError(f"the model's test files ({' and '.join(map(str, files))}) are not the pairs its run was tested "
                      f"with: they have changed since (edited, appended to or replaced; or {READ_SINCE}), so their "
                      "scores would replace the model's own test scores in scores.json (which /info and nmt-export "
                      "show); score them as another set with --src-file, --ref-file and another --name (or --no-save)")


def hyp_ref_files(hyp_file: Path, count: int) -> List[Path]:
    """Where nmt-evaluate's --hyp-dir puts the `count` references of the translations in `hyp_file`: <test
    name>.ref.<tgt>, then <test name>.ref2.<tgt> ..."""
    return [hyp_file.with_name(f"{hyp_file.stem}.ref{k if k > 1 else ''}{hyp_file.suffix}") for k in range(1, count+1)]


def file_name(path: str) -> str:
    """A file as scores.json records it: by its absolute path, a pipe by the name given (/dev/stdin, not the
    /proc/PID/fd/pipe:[...] it resolves to, which differs every run)."""
    return str(Path(path).resolve()) if os.path.isfile(path) else path
