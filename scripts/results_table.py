#!/usr/bin/env python
"""Results table, ablation table, training curves and example translations from trained model directories.

    python scripts/results_table.py models/all-ko-en models/all-en-ko --markdown results/results.md \\
        --json results/results.json --curves results/curves.png --examples 5 --data-dir ../shared/data
    python scripts/results_table.py models/ablation-* --ablation-base models/ablation-base \\
        --ablation-test tatoeba-test --markdown results/ablation.md
    python scripts/results_table.py --docs docs/results.md     # the docs page, from the tables in results/

Every figure is read from the model directories (scores.json, state.json, metrics.jsonl, config.json); the docs
page is assembled from the tables and plots those runs wrote to results/.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:   # run from a checkout without installing
    sys.path.insert(0, str(REPO))

from nmt.commands import number  # noqa: E402 (after the path)


def checkpoint_name(text: str) -> str:
    """An argparse type: a checkpoint's name as the other commands take it."""
    if text in ("best", "latest", "avg") or text.isdecimal():
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: use best, latest, avg or a step number")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dirs", nargs="*", type=Path)
    p.add_argument("--markdown", type=Path, help="write the table(s) here")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--curves", type=Path,
                   help="image of training loss and dev BLEU vs updates and wall time (.png, .svg, .pdf ...)")
    p.add_argument("--checkpoint", type=checkpoint_name,
                   help="scores of this checkpoint (default: best, else avg, else latest), and --examples' translations")
    p.add_argument("--hardware", default=None,
                   help="hardware column of runs that did not record theirs (default: \"not recorded\"; this "
                        "machine's is not theirs)")
    p.add_argument("--ablation-base", type=Path, help="also write an ablation table against this run")
    p.add_argument("--ablation-test", default="tatoeba-test", help="test set of the ablation table")
    p.add_argument("--decode-ablations", type=Path, nargs="*", default=[],
                   help="scripts/evaluate.py --json reports of the ablation base decoded other ways (beam, length "
                        "penalty): rows of the ablation table")
    p.add_argument("--examples", type=number(int, 0), default=0, help="example translations per run (first test set; "
                   "by the best checkpoint, unless --checkpoint)")
    p.add_argument("--data-dir", help="offline mirror for --examples (else $NMT_DATA_DIR, cache)")
    p.add_argument("--docs", type=Path, help="write the docs page (e.g. docs/results.md) from the tables in "
                                              "--results-dir, after the tables of this call")
    p.add_argument("--results-dir", type=Path, default=REPO / "results",
                   help="where results.md, ablation.md and the curves are (default: the checkout's results/)")
    args = p.parse_args(argv)
    if not args.model_dirs:
        if not args.docs:
            p.error("give model directories, or --docs PAGE to assemble the docs page alone")
        return _docs_alone(args.docs, args.results_dir)

    from nmt.atomic import atomic_write_text
    from nmt.commands import user_errors
    from nmt.scoring import DEV_SET
    from scripts import conditions
    from scripts.runs import ResultsError, ablation_table, load_run, markdown_table, plot_curves, results_rows
    try:   # (no report over a file of a run, or over another report)
        conditions.check_outputs([*args.model_dirs, args.ablation_base], {f"--decode-ablations {f}": f for f in
                                 args.decode_ablations}, markdown=args.markdown, json=args.json, curves=args.curves,
                                 docs=args.docs)
        conditions.check_outputs(inputs=page_inputs(args.results_dir), docs=args.docs)   # (not over what it reads)
        conditions.check_image("--curves", args.curves)
        runs = [load_run(d) for d in args.model_dirs]
        base = load_run(args.ablation_base) if args.ablation_base else None
        reports = [_read_report(f, base) for f in args.decode_ablations]
    except (ResultsError, OSError, ValueError, *user_errors()) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = results_rows(runs, args.checkpoint)
    tests = sorted({t for r in runs for t in r.scores})
    unscored = [r for r in runs if not set(r.scores) - {DEV_SET}]   # (left out of the table: --no-eval runs)
    alone = runs and len(unscored) == len(runs)   # (their table would be empty, exit 0)
    for run in unscored:
        print(f"{'error' if alone else 'warning'}: {run.path} has no test set's scores {unscored_advice(run)}",
              file=sys.stderr)
    if alone:
        return 2
    for wrong, why in ((args.checkpoint and runs and not rows, f"--checkpoint {args.checkpoint}: no run has its scores"),
                       (base is not None and args.ablation_test not in tests,
                        f"--ablation-test {args.ablation_test}: no run has scores of that test set")):
        if wrong:   # (an empty table or a column of dashes, exit 0)
            print(f"error: {why} (test sets scored: {', '.join(tests) or 'none'})", file=sys.stderr)
            return 2
    text = markdown_table(rows, args.hardware or "not recorded")
    if base is not None:
        text += "\n" + ablation_table(base, runs, args.ablation_test, reports)
    if args.examples:
        text += "\n" + examples(runs, args.examples, args.data_dir, args.checkpoint)
    print(text)
    if args.markdown:
        atomic_write_text(args.markdown, text)
    if args.json:
        atomic_write_text(args.json, json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
    if args.curves:
        plot_curves(runs, args.curves)
    if args.docs:
        return write_docs_page(args.docs, args.results_dir)
    return 0


PAGE_INTRO = """\
# Results

<!-- Generated by `python scripts/results_table.py --docs docs/results.md` from the tables in results/. Do not edit:
     rerun the script (scripts/reproduce_results.sh does at its end). -->

Every run below was trained and scored by `scripts/reproduce_results.sh` (see [training.md](training.md#recipes)),
and every figure is read back from its model directory by `scripts/results_table.py`. Scores: sacreBLEU 2.4.3 on
detokenized output, beam 5, the checkpoint best on dev BLEU (ensembles: the averaged last-5 checkpoints of every
member; training time and updates per member); BLEU 13a and chrF, and for Korean output also BLEU with sacreBLEU's
`ko-mecab` tokenizer. Training time is wall time summed over resumed runs; two runs trained side by side on a 2-core
CPU, one core each (`OMP_NUM_THREADS=1`).

Runs: `abl-worddrop0.2-lex` (and its seed-2 twin) is the current defaults (but the length-quantile buckets of then,
`--bucketing quantile`) with a 30-minute budget on Tatoeba alone; `all-ko-en-up4-lex` (and its twin) the all-data
recipe (vocabulary 4,000, dropout 0.3, label smoothing 0.1, batch 64, no word dropout, Tatoeba weighted 4x) for 2
hours; `all-en-ko-up4-lex` the same for en→ko. The rows after them are the runs that led there: without the lexical
model (`all-ko-en-up4`, `abl-worddrop0.2`), without the Tatoeba weighting (`all-ko-en`, `all-en-ko`) and the earlier
defaults (`tatoeba-ko-en`).
"""


def _docs_alone(page: Path, results_dir: Path) -> int:
    """--docs without model directories: the page checked as the reports are (not in a model directory, where
    --overwrite would then refuse the run, nor over one of its files, nor over the tables it is made of), then
    written."""
    from nmt.commands import user_errors
    from scripts import conditions
    try:
        conditions.check_outputs(inputs=page_inputs(results_dir), docs=page)
    except (OSError, ValueError, *user_errors()) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return write_docs_page(page, results_dir)


# The files of --results-dir the docs page is made of (its tables) or links to (its images): --docs is none of them.
PAGE_PARTS = ("results.md", "curves.png", "ablation.md", "ablation-curves.png", "transformer.md",
              "transformer-ablation.md")


def page_inputs(results_dir: Path) -> dict:
    """`PAGE_PARTS` in `results_dir`, as `conditions.check_outputs` takes a command's inputs (flag -> file)."""
    return {f"--results-dir {results_dir / name}": results_dir / name for name in PAGE_PARTS}


def write_docs_page(page: Path, results_dir: Path) -> int:
    """docs/results.md: the results table, example translations, training curves and the ablation table, as
    written to `results_dir` by the calls above; links relative to the page."""
    from nmt.atomic import atomic_write_text
    main = results_dir / "results.md"
    if not main.is_file():
        print(f"error: {main} not found: write it first (--markdown {main})", file=sys.stderr)
        return 2
    rel = lambda f: os.path.relpath(f, page.resolve().parent)  # noqa: E731
    parts = [PAGE_INTRO, "## All runs\n", main.read_text(encoding="utf-8").strip() + "\n"]
    if (results_dir / "curves.png").is_file():
        parts += ["## Training curves\n", "Training loss and dev BLEU against updates and against wall time:\n",
                  f"![training loss and dev BLEU of the main runs]({rel(results_dir / 'curves.png')})\n"]
    ablation = results_dir / "ablation.md"
    if ablation.is_file():
        parts += ["## Ablations\n",
                  "Tatoeba ko→en, 30 minutes each on one core next to another run, against the base run "
                  "`tatoeba-ko-en` (the earlier defaults); the second column is read from each run's saved config, "
                  "the last rows decode the base run other ways without retraining.\n",
                  ablation.read_text(encoding="utf-8").strip() + "\n"]
        if (results_dir / "ablation-curves.png").is_file():
            parts.append(f"![training curves of the ablation runs]({rel(results_dir / 'ablation-curves.png')})\n")
    transformer, tf_ablation = results_dir / "transformer.md", results_dir / "transformer-ablation.md"
    if transformer.is_file():
        parts += ["## The Transformer\n",
                  "`--arch transformer` runs (`scripts/reproduce_results.sh transformer`; settings and discussion in "
                  "[transformer.md](transformer.md)), scored as above; the hardware column says where each ran.\n",
                  transformer.read_text(encoding="utf-8").strip() + "\n"]
        if tf_ablation.is_file():
            parts += ["Its ablations: Tatoeba ko→en, 30 minutes each on one core next to another run, one change from "
                      "`tf-tatoeba-ko-en` each, chosen by best dev BLEU.\n",
                      tf_ablation.read_text(encoding="utf-8").strip() + "\n"]
    page.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(page, "\n".join(parts))
    print(f"wrote {page}")
    return 0


def _read_report(path: Path, base) -> dict:
    """An evaluate.py --json report of the ablation `base` run; ResultsError naming the file if it is not one."""
    from scripts.runs import ResultsError
    if base is None:
        raise ResultsError(f"--decode-ablations {path}: decodings of the ablation base; give --ablation-base too")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not JSON ({e})") from None
    except (OSError, UnicodeDecodeError) as e:   # (a bare "[Errno 2] No such file or directory: 'x.json'")
        raise ResultsError(f"--decode-ablations {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if not isinstance(report, dict) or not isinstance(report.get("results"), dict):
        raise ResultsError(f"{path}: not a report of scripts/evaluate.py --json (no \"results\")")
    if Path(str(report.get("model_dir"))).resolve() != base.path.resolve():
        raise ResultsError(f"{path}: a report of --model-dir {report.get('model_dir')}, not of the ablation base "
                           f"{base.path}: its rows would be shown as decodings of the base")
    return report


def unscored_advice(run) -> str:
    """Why `run` has no test scores and the command that scores them: --recipe-tests for its own test files or its
    recipe's (a --no-eval run), files of the user's for a run that has no test set (which --recipe-tests refuses)."""
    from nmt import recipes
    from nmt.commands import shell_word
    d, where = run.config.data, shell_word(str(run.path))
    if d.test_src and d.test_tgt or d.recipe in recipes.RECIPES and recipes.RECIPES[d.recipe].tests:
        return f"(trained with --no-eval?), so no row: score it first, e.g. nmt-evaluate --model-dir {where} " \
               "--recipe-tests"
    return (f"(it names no test files and no recipe, so its training had no test set to score), so no row: score "
            f"it on test files first, e.g. nmt-evaluate --model-dir {where} --src-file SRC --ref-file REF")


def example_tests(run, cfg, data_dir) -> dict:
    """The test sets of `run` (its config `cfg`) that --examples draws from: its test files, else its recipe's; a
    ConfigError in this script's terms where it has none or they cannot be read (nmt.scoring.recipe_tests names
    nmt-evaluate's flags, --recipe-tests and --src-file, which this script has not)."""
    from nmt import recipes
    from nmt.config import ConfigError
    from nmt.corpus import CorpusError, read_parallel
    from nmt.scoring import recipe_tests
    d, fields = cfg.data, "data.test_src, data.test_tgt of its config.json"
    if d.test_src and d.test_tgt:
        try:
            return {"test": read_parallel(d.test_src, d.test_tgt, skip_invalid_utf8=d.skip_invalid_utf8, name="test",
                                          whole=True)}
        except CorpusError as e:   # (moved: to put back; else what is wrong with them, which its error says)
            gone = not all(Path(p).expanduser().is_file() for p in (d.test_src, d.test_tgt))
            raise ConfigError(f"--examples: the test files of {run.path} ({fields}): {str(e).rstrip('.')}; " + (
                "put them back where its config.json says, or" if gone else "or") + " leave --examples out") from None
    if d.recipe not in recipes.RECIPES:
        raise ConfigError(f"--examples: {run.path} has no test set to take examples from (it names no test files, "
                          f"{fields}, and no known recipe, {d.recipe!r}): leave --examples out, or leave this run "
                          "out of the table")
    return recipe_tests(cfg, data_dir)


def examples(runs, n: int, data_dir, checkpoint=None) -> str:
    """`n` sentences spread over each run's first test set with reference and beam-search output, by the
    `checkpoint` given (None: the best)."""
    from scripts.runs import example_indices
    from nmt.translate import Translator
    out = []
    for run in runs:
        tr = Translator.from_dir(run.path, which=checkpoint or "best")
        tests = example_tests(run, tr.config, data_dir)
        if not tests:
            continue
        name, test = next(iter(tests.items()))
        lines = example_indices(len(test.src), n)
        src, ref = [test.src[i] for i in lines], [test.tgt[i] for i in lines]
        hyps = tr.translate(src)
        out.append(f"**{run.name}** ({run.direction}, {name} lines {', '.join(str(i + 1) for i in lines)}, "
                   f"beam {tr.decode.beam_size}{f', checkpoint {checkpoint}' if checkpoint else ''}):\n")
        for s, r, h in zip(src, ref, hyps):
            out.append(f"- source: {s}\n  - reference: {r}\n  - output: {h}")
        out.append("")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    from nmt.commands import run_cli
    sys.exit(run_cli(main))   # bad input: one line, exit 2
