#!/usr/bin/env python
"""Results table, ablation table, training curves and example translations from trained model directories.

    python scripts/results_table.py models/all-ko-en models/all-en-ko --markdown results/results.md \\
        --json results/results.json --curves results/curves.png --examples 5 --data-dir ../shared/data
    python scripts/results_table.py models/ablation-* --ablation-base models/ablation-base \\
        --ablation-test tatoeba-test --markdown results/ablation.md

Every figure is read from the model directories (scores.json, state.json, metrics.jsonl, config.json).
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dirs", nargs="+", type=Path)
    p.add_argument("--markdown", type=Path, help="write the table(s) here")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--curves", type=Path, help="PNG of training loss and dev BLEU vs updates and wall time")
    p.add_argument("--checkpoint", help="scores of this checkpoint (default: best, else avg, else latest)")
    p.add_argument("--hardware", default=None,
                   help="hardware column of runs that did not record theirs (default: this machine's CPU)")
    p.add_argument("--ablation-base", type=Path, help="also write an ablation table against this run")
    p.add_argument("--ablation-test", default="tatoeba-test", help="test set of the ablation table")
    p.add_argument("--decode-ablations", type=Path, nargs="*", default=[],
                   help="scripts/evaluate.py --json reports of the ablation base decoded other ways (beam, length "
                        "penalty): rows of the ablation table")
    p.add_argument("--examples", type=int, default=0, help="example translations per run (first test set)")
    p.add_argument("--data-dir", help="offline mirror for --examples (else $NMT_DATA_DIR, cache)")
    args = p.parse_args(argv)

    from nmt.atomic import atomic_write_text
    from nmt.cli import user_errors
    from nmt.parallel import cpu_name
    from nmt.results import ResultsError, ablation_table, load_run, markdown_table, plot_curves, results_rows
    try:
        runs = [load_run(d) for d in args.model_dirs]
        base = load_run(args.ablation_base) if args.ablation_base else None
        reports = [_read_report(f) for f in args.decode_ablations]
    except (ResultsError, OSError, ValueError, *user_errors()) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = results_rows(runs, args.checkpoint)
    text = markdown_table(rows, args.hardware or f"{os.cpu_count()}-core CPU ({cpu_name()})")
    if base is not None:
        text += "\n" + ablation_table(base, runs, args.ablation_test, reports)
    if args.examples:
        text += "\n" + examples(runs, args.examples, args.data_dir)
    print(text)
    if args.markdown:
        atomic_write_text(args.markdown, text)
    if args.json:
        atomic_write_text(args.json, json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
    if args.curves:
        plot_curves(runs, args.curves)
    return 0


def _read_report(path: Path) -> dict:
    """An evaluate.py --json report; ResultsError naming the file if it is not one."""
    from nmt.results import ResultsError
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not JSON ({e})") from None
    if not isinstance(report, dict) or not isinstance(report.get("results"), dict):
        raise ResultsError(f"{path}: not a report of scripts/evaluate.py --json (no \"results\")")
    return report


def examples(runs, n: int, data_dir) -> str:
    """`n` sentences spread over each run's first test set with reference and beam-search output."""
    from nmt.results import example_indices
    from nmt.scoring import recipe_tests
    from nmt.translate import Translator
    out = []
    for run in runs:
        tr = Translator.from_dir(run.path, which="best")
        tests = recipe_tests(tr.config, data_dir)
        if not tests:
            continue
        name, test = next(iter(tests.items()))
        lines = example_indices(len(test.src), n)
        src, ref = [test.src[i] for i in lines], [test.tgt[i] for i in lines]
        hyps = tr.translate(src)
        out.append(f"**{run.name}** ({run.direction}, {name} lines {', '.join(str(i + 1) for i in lines)}, "
                   f"beam {tr.decode.beam_size}):\n")
        for s, r, h in zip(src, ref, hyps):
            out.append(f"- source: {s}\n  - reference: {r}\n  - output: {h}")
        out.append("")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
