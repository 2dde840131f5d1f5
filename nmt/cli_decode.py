"""Command lines of translation and evaluation (`nmt-translate`, `nmt-evaluate`) over `nmt.translate` and
`nmt.scoring`; scoring given translations (`nmt-score`) is `nmt.cli_score`, the flags and outputs they share are in
`nmt.cli_io`, the sets nmt-evaluate scores in `nmt.eval_sets`. Training's command line and the flag table are in
`nmt.cli`."""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from nmt import jsonio
from nmt.commands import (CommandParser, Once, command, file_arg, nonempty, number, one_stdin, typed_interrupt,
                          usable_streams)
from nmt.cli_io import (add_model_decode_args, installed_commands, last_lines, load_translator, open_output, output_dir,
                        output_errors, reader_gone, refuse_overwriting)
from nmt.config import ConfigError
from nmt.text import input_guard


def build_translate_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="nmt-translate", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Translate text with a trained model: one output line per input line, in input order "
                    "(an empty line gives an empty line). Reads stdin and writes stdout unless --input/--output "
                    "are given; on a terminal it prompts for sentences.",
        epilog="Examples:\n  echo '안녕하세요.' | nmt-translate --model-dir models/tatoeba-ko-en\n"
               "  nmt-translate --model-dir M --input test.ko --output test.en --beam-size 1\n"
               "  nmt-translate --model-dir M --nbest 3 --beam-size 5 < in.ko > nbest.jsonl\n"
               "  nmt-translate --model-dir M --alignment < in.ko > out.en-aligned\n"
               "  echo '{\"text\": \"안녕하세요.\", \"target_prefix\": \"Hi\"}' | nmt-translate --model-dir M "
               "--json-input\n"
               "  nmt-translate --model-dir M --sample 10 --seed 2 < mono.ko > synthetic.en\n")
    add_model_decode_args(p)
    s = p.add_argument_group("sampling (instead of the search, e.g. for back-translation)")
    s.add_argument("--sample", nargs="?", const=0, type=number(int, 0), metavar="K",
                   help="draw each translation token by token from the model's distribution, renormalized over its "
                        "K most probable tokens (--sample alone, or 0: over the whole vocabulary), instead of "
                        "searching")
    s.add_argument("--seed", type=number(int, 0, 2 ** 32 - 1),
                   help="random seed of --sample (default 1): the same seed, input and flags (--chunk-lines and "
                        "--decode-batch-size too) give the same translations on one device; with --seed, input that "
                        "pauses is still translated --chunk-lines lines at a time, so that the draws do not depend "
                        "on its timing")
    g = p.add_argument_group("input and output")
    g.add_argument("--input", action=Once, type=nonempty(file_arg),
                   help="input file, UTF-8, one sentence per line (default: stdin)")
    g.add_argument("--output", action=Once, type=nonempty(file_arg),
                   help="output file (default: stdout); flushed chunk by chunk")
    g.add_argument("--chunk-lines", type=number(int, 1), default=1000,
                   help="lines translated (length-sorted) and written at a time, fewer when the input pauses "
                        "(except with --sample and --seed) (default: 1000)")
    g.add_argument("--json-input", action="store_true",
                   help="each input line is a JSON object: {\"text\": \"...\"} with an optional \"target_prefix\": "
                        "text the translation must start with (it is forced, then the search goes on from it; a "
                        "last word without a space after it is completed)")
    g.add_argument("--on-invalid-utf8", action=Once, choices=("error", "replace"), default="error",
                   help="a line that is not UTF-8: stop with an error naming it after writing every line before "
                        "it (default), or replace the bad bytes with U+FFFD and warn")
    g.add_argument("--alignment", action="store_true",
                   help="also give each translation's word alignment from the attention: 'translation ||| 0-1 1-0' "
                        "(source word - translation word, from 0), or an \"alignments\" list with --nbest")
    g.add_argument("--plot-attention", action=Once, metavar="DIR", type=nonempty(Path),
                   help="also save the attention heatmap of each non-empty line's translation as DIR/line-NNNNNN.png "
                        "(line-000001.png: line 1; an ensemble's: the mean of its members' attention; with "
                        "--json-input not of a line whose \"text\" is empty)")
    return p


def _check_sampling(args: argparse.Namespace) -> None:
    """ConfigError for flags that do not go with --sample (a search's) or need it (--seed)."""
    if args.sample is None:
        if args.seed is not None:
            raise ConfigError("--seed seeds --sample; a search (greedy or beam) draws nothing at random")
        return
    given = [flag for flag, key in (("--beam-size", "beam_size"), ("--nbest", "nbest"),
                                    ("--length-penalty", "length_penalty_alpha")) if f"decode.{key}" in vars(args)]
    if given:
        raise ConfigError(f"--sample draws one translation per line instead of a beam search: drop {given[0]}")


@command(build_translate_parser)
def translate_main(args: argparse.Namespace) -> int:
    from nmt.languages import hangul_counts, json_requests
    from nmt.plot import attention_saver
    from nmt.prompt import interactive
    from nmt.json_input import JSON_EXAMPLE
    from nmt.stream import STDIN, open_input, read_raw_lines, translate_stream
    usable_streams([args.input], [args.output])
    if args.plot_attention:
        output_dir("--plot-attention", args.plot_attention)
    _check_sampling(args)
    refuse_overwriting("--output", args.output, {"--input": args.input or "-"}, [args.model_dir, *args.ensemble])
    tr = load_translator(args)
    if args.sample is not None:
        import mxnet as mx
        tr.sample = args.sample
        mx.random.seed(1 if args.seed is None else args.seed)
    plot = attention_saver(tr, args.plot_attention) if args.plot_attention else None
    # n-best rows when asked for (--nbest 1 too: the best translation with its score), else plain translations
    nbest = tr.decode.nbest if "decode.nbest" in vars(args) else None
    stdin, stdout = args.input in (None, "-"), args.output in (None, "-")
    typed = stdin and sys.stdin.isatty()   # lines typed at a terminal: a bad one is said, and the next one read
    if typed:
        if stdout:
            try:   # a reader gone (`| head -1`: 141) or a full disk: said as for a file's lines
                with output_errors(None), typed_interrupt():
                    return interactive(tr, nbest, plot, alignment=args.alignment, json_input=args.json_input)
            except BrokenPipeError:
                return reader_gone()
        args.chunk_lines = 1   # typed lines: translate and write each one at once
        what = f"JSON objects such as {JSON_EXAMPLE}" if args.json_input else "sentences"
        print(f"nmt-translate {tr.src_lang} -> {tr.tgt_lang}: type {what}, one per line; each translation goes to "
              f"{args.output} as you press Enter; Ctrl-D to end (Ctrl-C interrupts, exit code 130).", file=sys.stderr)
    name = STDIN if stdin else args.input
    tally = [0, 0, 0]   # non-empty lines; with Hangul (the model's source language?); JSON requests (--json-input?)

    def on_chunk(first: int, lines: list, best_ids: list) -> None:
        counts = (*hangul_counts(lines, tr.src_lang), 0 if args.json_input else json_requests(lines))
        tally[:] = [t + c for t, c in zip(tally, counts)]
        if plot is not None:
            plot(first, lines, best_ids)
    # SIGTERM (and SIGHUP) are Ctrl-C (`run_cli`): the output closed whole (a .gz file too) with what is translated
    try:   # (a reader gone from --output's pipe too: the rest of its buffer fails again as the file closes)
        with output_errors(args.output), typed_interrupt(typed), contextlib.ExitStack() as stack:
            src, idle, compressed = open_input(None if stdin else args.input, stack)
            if args.seed is not None:   # repeatable draws: the chunks (and so the draws) must not depend on pauses
                idle = None
            max_bytes = input_guard(tr.decode.max_input_tokens)
            if args.json_input:   # two fields, each up to the guard's characters, JSON-escaped (\uXXXX: 6 bytes)
                max_bytes = max_bytes * 3 + 1024
            lines = read_raw_lines(src, max_bytes, idle, squeeze=not args.json_input,
                                   source=(None if stdin else args.input, compressed))
            # (the output opened once the first line is read well: an input refused at its start leaves it as it was)
            stats = translate_stream(tr, lines, lambda: open_output(stack, args.output), name=name, nbest=nbest,
                                     compressed=compressed, chunk_lines=args.chunk_lines, alignment=args.alignment,
                                     on_invalid=args.on_invalid_utf8, json_input=args.json_input, on_chunk=on_chunk,
                                     on_bad_line=_refused if typed else None)
    except BrokenPipeError:
        return reader_gone()
    _summary(tr, stats, name, tally)
    return 0


def _refused(e: Exception) -> None:
    """A typed line that cannot be read, said on stderr: the user types the next one (as at `nmt.prompt`'s)."""
    print(f"error: {e}", file=sys.stderr)


def _summary(tr, stats, name: str, tally: List[int]) -> None:
    """nmt-translate's last lines: a warning of input the model does not expect (`tally`), the counts and speed."""
    from nmt.languages import other_language_warning
    warning = 'every line is a JSON object with a "text" field, translated as it is: --json-input reads such lines ' \
        'as requests' * (tally[2] == tally[0] > 0) or other_language_warning(*tally[:2], tr.src_lang, tr.tgt_lang)
    if warning:
        logging.getLogger("nmt.translate").warning("%s: %s", name, warning)
    if stats.refused:   # (typed at a terminal, each said as it came: the output has fewer lines than the input)
        logging.getLogger("nmt.translate").warning("%s: %d line%s refused (said above), without a line in the output",
                                                   name, stats.refused, "s" * (stats.refused != 1))
    logging.getLogger("nmt.translate").info(
        "translated %d line%s in %.1f s (%.1f lines/s)%s%s%s%s%s", stats.lines, "s" * (stats.lines != 1),
        stats.seconds, stats.lines / max(stats.seconds, 1e-9), f"; {tr.truncated} truncated" if tr.truncated else "",
        f"; {tr.cut_off} at the length limit" if tr.cut_off else "",
        f"; {tr.left_out} with byte pieces left out" if tr.left_out else "",
        f"; {stats.invalid_utf8} with invalid UTF-8 replaced" if stats.invalid_utf8 else "",
        stats.removals())


def build_evaluate_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="nmt-evaluate", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Translate a test set and score it with sacreBLEU (BLEU 13a and chrF with their signatures; "
                    "for Korean output also BLEU with the ko-mecab tokenizer). Scores at the model's saved decoding "
                    "settings are merged into the model directory's scores.json, keyed by test set and checkpoint; "
                    "scores at others (--beam-size, --length-penalty, ...) are reported only (--json keeps them).",
        epilog="Examples:\n  nmt-evaluate --model-dir M --src-file test.ko --ref-file test.en\n"
               "  nmt-evaluate --model-dir M --recipe-tests --data-dir ../shared/data --json\n")
    add_model_decode_args(p, nbest=False)   # BLEU scores the best translation
    g = p.add_argument_group("test data")
    g.add_argument("--src-file", action=Once, type=nonempty(file_arg),
                   help="source sentences, one per line, in the model's source language (-: standard input)")
    g.add_argument("--ref-file", type=nonempty(file_arg), nargs="+", action="extend", metavar="REF",
                   help="reference translations, line-aligned with --src-file; several files: several references "
                        "per sentence (sacreBLEU's nrefs)")
    g.add_argument("--name", action=Once, type=nonempty(),
                   help="set name in scores.json (default: the --src-file path; \"test\" for the model's test files)")
    g.add_argument("--recipe-tests", action="store_true", help="score every test set of the model's recipe")
    g.add_argument("--dev-set", action="store_true",
                   help="score the dev set the model was validated on (its recipe's held-out split or its dev "
                        "files), e.g. to choose checkpoints, beams or ensemble members without the test sets; "
                        "recorded as 'dev', which results tables leave out")
    g.add_argument("--data-dir", action=Once, type=nonempty(file_arg),
                   help="offline mirror for --recipe-tests / --dev-set (default: the model's, or $NMT_DATA_DIR)")
    g.add_argument("--max-sentences", action=Once, type=number(int, 0), default=0,
                   help="score only the first N sentences (0 = all); scores of part of a set are not recorded")
    g.add_argument("--prefix-words", type=number(int, 1), metavar="N",
                   help="start each translation with its reference's first N words (of the first --ref-file; "
                        "fairseq's --prefix-size, in words), as when a translator has typed them: besides BLEU and "
                        "chrF of the whole translations, how often the model's next word is the reference's. Not "
                        "recorded in scores.json")
    g.add_argument("--word-strokes", action="store_true",
                   help="also simulate a translator who accepts each translation up to its first wrong word, types "
                        "the reference's word there and lets the model go on, until the translation is the "
                        "reference: its strokes per 100 reference words (word stroke ratio, Barrachina et al. 2009; "
                        "one more translation per typed word)")
    o = p.add_argument_group("output")
    o.add_argument("--json", action=Once, nargs="?", const="-", metavar="FILE", type=nonempty(file_arg),
                   help="write the results as JSON to FILE, or to stdout instead of the text report")
    o.add_argument("--hyp-dir", action=Once, type=nonempty(Path),
                   help="also write the translations as DIR/<test name>.<tgt>, their references as .ref.<tgt>")
    o.add_argument("--no-save", action="store_true", help="do not record the scores in MODEL_DIR/scores.json")
    return p


@command(build_evaluate_parser)
def evaluate_main(args: argparse.Namespace) -> int:
    import gzip
    from nmt.atomic import atomic_write_bytes, atomic_write_text
    from nmt.eval_sets import evaluation_inputs, hyp_ref_files, saved_sets, sets_to_score
    from nmt.scoring import cannot_record, other_decoding, read_scores
    from nmt.textfile import output_opener
    one_stdin({"--src-file": args.src_file, **{f"--ref-file ({i})": r for i, r in enumerate(args.ref_file or (), 1)}})
    usable_streams([f for f in (args.src_file, *(args.ref_file or ())) if f is not None],
                   ["-", *([args.json] if args.json not in (None, "-") else [])])   # (the report; --json FILE)
    if args.hyp_dir:
        output_dir("--hyp-dir", args.hyp_dir)
    if args.json not in (None, "-"):   # written at the end: its directory is checked now
        output_dir("--json", Path(args.json).parent, file=args.json)
    if args.prefix_words and args.word_strokes:
        raise ConfigError("give --prefix-words or --word-strokes, not both: the simulated translator types its own "
                          "prefixes")
    tr = load_translator(args)
    readonly = other = ""   # why no scores can be recorded: a directory not writable, other decoding settings
    if not (args.no_save or args.prefix_words):   # recorded after each test set: a damaged file is named first
        read_scores(tr.model_dir)
        readonly, other = cannot_record(tr.model_dir), other_decoding(tr)
    recordable = not (args.no_save or args.prefix_words or readonly or other)
    tests = sets_to_score(args, tr)
    saved = saved_sets(args, tr, tests, recordable)
    inputs = evaluation_inputs(args, tr.config.data)
    hyp_files = {name: args.hyp_dir / f"{Path(name).name}.{tr.tgt_lang}" for name in tests} if args.hyp_dir else {}
    hyps = [p for name, h in hyp_files.items() for p in (h, *hyp_ref_files(h, 1 + len(tests[name][1])))]
    if args.json not in (None, "-") and os.path.realpath(args.json) in map(os.path.realpath, hyps):
        raise ConfigError(f"--json {args.json} is one of the files --hyp-dir {args.hyp_dir} writes (each set's "
                          "translations and references): give another --json")
    for flag, path in [("--json", args.json), ("--json", None)] + [("--hyp-dir", p) for p in hyps]:   # (None: stdout)
        for files in inputs + ([{"--hyp-dir": str(p)} for p in hyps] if path is None else []):
            refuse_overwriting(flag, path, files, [args.model_dir, *args.ensemble])
    results, recorded, gone = {}, [], False   # gone: stdout's reader (the --json FILE is still written)
    with output_errors(None):
        for name, (pairs, more_refs) in tests.items():
            if gone and args.json in (None, "-"):
                break
            results[name], lines = _evaluate_set(args, tr, name, pairs, more_refs, saved[name], hyp_files.get(name))
            recorded += [name] if saved[name] and "not_recorded" not in results[name] else []   # (a full disk)
            gone = gone or not last_lines(lines)
        report = {"model_dir": str(tr.model_dir.resolve()), "checkpoint": tr.checkpoint, "results": results}
        if args.json == "-":
            gone = gone or not last_lines([jsonio.dumps(report, indent=2)])
    if args.json not in (None, "-"):
        text = jsonio.dumps(report, indent=2) + "\n"
        try:
            if output_opener("--json", args.json) is gzip.open:   # named .gz
                atomic_write_bytes(args.json, gzip.compress(text.encode()))
            else:
                atomic_write_text(args.json, text)
        except BrokenPipeError:   # /dev/stdout (or another descriptor) whose reader went away: `| head`
            gone = True
    if gone:
        return reader_gone()
    _say_recorded(args, tr, tests, results, recorded, [readonly, other])
    return 0


def _say_recorded(args, tr, tests: dict, results: dict, recorded: List[str], why: List[str]) -> None:
    """Say on stderr whether the sets' scores are in scores.json, and why not (`why`: a directory not writable,
    other decoding settings; more found here)."""
    from nmt.scoring import replaced
    replaced_since = not args.no_save and replaced(tr)   # (each set's scores were not recorded then, with a warning)
    recorded = [] if replaced_since else recorded
    if recorded:
        print(f"scores recorded in {tr.model_dir / 'scores.json'}", file=sys.stderr)
    if len(recorded) < len(tests) and not args.no_save:
        part = any(0 < args.max_sentences < len(pairs.src) for pairs, _ in tests.values())
        why = [f"translations given the references' first words (--prefix-words {args.prefix_words})"
               if args.prefix_words else "", *why, replaced_since,
               *{r["not_recorded"] for r in results.values() if "not_recorded" in r},   # (a full disk)
               f"the scores of part of a set (--max-sentences {args.max_sentences})" if part else ""]
        print(f"not recorded in {tr.model_dir / 'scores.json'}: {'; '.join(w for w in why if w)}", file=sys.stderr)


def _evaluate_set(args: argparse.Namespace, tr, name: str, pairs, more_refs: List[List[str]], save: bool,
                  hyp_file: Optional[Path]) -> Tuple[dict, List[str]]:
    """Translate and score one test set (`score_test_set`); its translations and references written to
    `hyp_file` and beside it (--hyp-dir); its entry, and the lines of its report (none when the JSON goes to
    stdout)."""
    from nmt.atomic import atomic_write_text
    from nmt.eval_sets import file_name, hyp_ref_files
    from nmt.evaluate import report_lines
    from nmt.scoring import score_test_set
    files = {"source": (f"recipe {tr.config.data.recipe}" if (args.recipe_tests or args.dev_set)
                        and tr.config.data.recipe else None),
             "src_file": file_name(args.src_file) if args.src_file else None,
             "ref_file": file_name(args.ref_file[0]) if args.ref_file else None}
    if more_refs:
        files["more_ref_files"] = [file_name(r) for r in args.ref_file[1:]]
    entry, hyps, sc = score_test_set(tr, name, pairs, max_sentences=args.max_sentences, save=save, extra=files,
                                     prefix_words=args.prefix_words or 0, strokes=args.word_strokes,
                                     more_refs=more_refs)
    if hyp_file:   # the translations, and the references they were scored against (for sacrebleu)
        atomic_write_text(hyp_file, "".join(h + "\n" for h in hyps))
        for path, refs in zip(hyp_ref_files(hyp_file, 1 + len(more_refs)), [pairs.tgt, *more_refs]):
            atomic_write_text(path, "".join(r + "\n" for r in refs[:len(hyps)]))
        given = {os.path.realpath(r) for r in args.ref_file or ()}   # an earlier set's of this name, not a --ref-file:
        for path in (p for p in hyp_ref_files(hyp_file, 99)[1 + len(more_refs):] if os.path.realpath(p) not in given):
            path.unlink(missing_ok=True)
    if args.json == "-":
        return entry, []
    words = "word" if args.prefix_words == 1 else f"{args.prefix_words} words"
    steps = [str(s or "-") for s in tr.member_steps]
    return entry, [f"{name}: {sc.n} sentences, checkpoint {tr.checkpoint} ({entry['params_file']}"
                   f"{', step %s' % entry['step'] if entry['step'] else ''}), beam {entry['beam_size']}, "
                   f"length penalty {entry['length_penalty']:g}, {entry['seconds']:.1f} s"
                   + f", ensemble of {len(tr.members)} models (the others' steps: {', '.join(steps)})" * bool(steps)
                   + (f", {1 + len(more_refs)} references each" if more_refs else "")
                   + (f", each translation started with its reference's first {words}" if args.prefix_words else ""),
                   *report_lines(sc, entry)]


# `python -m nmt.cli_decode` (which holds two commands) is refused with exit code 2, a flag error's (not 1)
if __name__ == "__main__":
    print("error: nmt.cli_decode holds two commands: run nmt-translate or nmt-evaluate"
          + installed_commands("nmt-translate", "nmt-evaluate"), file=sys.stderr)
    raise SystemExit(2)
