#!/usr/bin/env python
"""Translation speed of a trained model: sentences/s and tokens/s for greedy and beam search, batch sizes 1 and 64,
beam search with word alignments (`--alignment`), beam search with target prefixes (each reference's first word,
left open to complete and as a whole word: `--json-input`'s "target_prefix"), and forced decoding (`nmt-score`) of
the references.

    python scripts/benchmark_translate.py --model-dir models/tatoeba-ko-en [--data-dir ../shared/data]
        [--max-sentences 500] [--rounds 3] [--json results/benchmark_translate.json]

Default test set: the Tatoeba-Challenge test (from the mirror: --data-dir, else $NMT_DATA_DIR, else the cache), its
side in the model's source language, and the other side as the translations to score; or any file with --src-file
(and --tgt-file to time scoring too). Every configuration runs on the same sentences after a short warm-up (MXNet
builds a cached graph per new input shape); with --rounds N the configurations take turns N times and each is
reported by its median round. Reported: sentences/s, source and output (or scored) subword tokens/s,
and the process's peak resident memory after each configuration.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Callable, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:   # scripts/conditions.py, also when this file is loaded by its path
    sys.path.insert(0, str(HERE))

import conditions  # noqa: E402
from nmt.atomic import atomic_write_text  # noqa: E402
from nmt.commands import number, run_cli
from nmt.config import ConfigError
from nmt.corpus import read_lines
from nmt.forced import score_lines
from nmt.parallel import parse_devices
from nmt.translate import Translator

TEST_SOURCE = "tatoeba-challenge-test"


def default_pairs(translator: Translator, data_dir) -> Tuple[List[str], List[str]]:
    """The Tatoeba-Challenge test sentences in the model's source language and their references."""
    from nmt import recipes
    cache = recipes.default_cache_dir()
    pairs, _ = recipes.load_source(recipes.SOURCES[TEST_SOURCE], recipes.resolve_data_dir(data_dir), cache)
    return (pairs.src, pairs.tgt) if translator.src_lang == "ko" else (pairs.tgt, pairs.src)


def peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1 << 20) if sys.platform == "darwin" else r / 1024


def _search(beam: int) -> str:
    return "greedy" if beam == 1 else f"beam {beam}"


def run_config(tr: Translator, lines: List[str], beam: int, batch_size: int, warmup: int) -> dict:
    # output tokens + EOS: every hypothesis costs one step per token
    return _timed(tr, lines, batch_size, warmup, lambda n: tr.translate_ids(lines[:n], beam_size=beam),
                  lambda res: sum(len(r[0][0]) + 1 for r in res if r),
                  {"search": _search(beam), "beam_size": beam})


def run_aligned(tr: Translator, lines: List[str], beam: int, batch_size: int, warmup: int) -> dict:
    """`run_config` with each translation's word alignment (`nmt-translate --alignment`): the search, then a
    teacher-forced pass over its output."""
    return _timed(tr, lines, batch_size, warmup, lambda n: tr.translate_aligned(lines[:n], beam_size=beam),
                  lambda res: sum(len(tr.tgt_tok.encode([r[0][0]])[0]) + 1 for r in res if r),
                  {"search": f"{_search(beam)} + alignment", "beam_size": beam})


def run_prefixed(tr: Translator, lines: List[str], refs: List[str], beam: int, batch_size: int, warmup: int,
                 whole: bool) -> dict:
    """`run_config` with each reference's first word as the target prefix: left open (completed by the search,
    which then waits for each step's tokens) or, with `whole`, followed by a space."""
    prefixes = [(r.split() or [""])[0] + (" " if whole else "") for r in refs]
    return _timed(tr, lines, batch_size, warmup,
                  lambda n: tr.translate_ids(lines[:n], beam_size=beam, prefixes=prefixes[:n]),
                  lambda res: sum(len(r[0][0]) + 1 for r in res if r),
                  {"search": f"{_search(beam)} + {'word' if whole else 'open'} prefix", "beam_size": beam})


def run_score(tr: Translator, lines: List[str], refs: List[str], batch_size: int, warmup: int) -> dict:
    return _timed(tr, lines, batch_size, warmup, lambda n: score_lines(tr, lines[:n], refs[:n]),
                  lambda scored: sum(len(s.pieces) for s in scored), {"search": "forced", "beam_size": None})


def _timed(tr: Translator, lines: List[str], batch_size: int, warmup: int, work: Callable[[int], list],
           out_tokens: Callable[[list], int], kind: dict) -> dict:
    """`work(n)` on the first n sentences at `batch_size`: once on `warmup` of them, then timed on all; a result
    row (`kind` first) with the rates of the timed run and the peak memory so far."""
    tr.decode.batch_size = batch_size
    work(warmup)
    src_tokens = sum(len(x) for x in tr.source_ids(lines))
    t0 = time.perf_counter()
    res = work(len(lines))
    seconds = time.perf_counter() - t0
    return {**kind, "batch_size": batch_size, "sentences": len(lines), "seconds": round(seconds, 3),
            "sentences_per_s": round(len(lines) / seconds, 2), "src_tokens_per_s": round(src_tokens / seconds, 1),
            "out_tokens_per_s": round(out_tokens(res) / seconds, 1), "peak_rss_mb": round(peak_rss_mb(), 1)}


def _sentences(args, tr: Translator) -> Tuple[List[str], Optional[List[str]]]:
    """The sources to translate, and the translations to score (None: scoring is not timed)."""
    if args.tgt_file and not args.src_file:   # (the test set's references were scored instead, without a word)
        raise ConfigError(f"--tgt-file {args.tgt_file} is the translations of --src-file: give both, or neither")
    if not args.src_file:
        src, refs = default_pairs(tr, args.data_dir)
    else:
        src, refs = read_lines(args.src_file), read_lines(args.tgt_file) if args.tgt_file else None
        if refs is not None and len(refs) != len(src):
            raise ConfigError(f"--src-file {args.src_file} has {len(src)} lines but --tgt-file {args.tgt_file} has "
                              f"{len(refs)}; they must be line-aligned")
    keep = [i for i, x in enumerate(src) if x][:args.max_sentences or None]
    return [src[i] for i in keep], None if refs is None else [refs[i] for i in keep]


def main(argv=None) -> int:
    load0 = os.getloadavg()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True, type=Path)
    p.add_argument("--checkpoint", default="best", help="best, latest, avg or a step number")
    p.add_argument("--src-file", help="sentences to translate (default: the Tatoeba-Challenge test from the mirror)")
    p.add_argument("--tgt-file", help="with --src-file: their translations, to time forced decoding on")
    p.add_argument("--data-dir", help="offline mirror (else $NMT_DATA_DIR, then the download cache)")
    p.add_argument("--max-sentences", type=int, default=0, help="use only the first N sentences (0 = all)")
    p.add_argument("--beams", default="1,5", help="beam sizes to time, comma-separated (1 = greedy; default 1,5)")
    p.add_argument("--batch-sizes", default="1,64", help="decoding batch sizes, comma-separated (default 1,64)")
    p.add_argument("--warmup", type=number(int, 0), default=8,
                   help="sentences translated before timing each configuration")
    p.add_argument("--rounds", type=int, default=1,
                   help="rounds in which the configurations take turns; each is reported by its median round")
    p.add_argument("--gpus", help="decode on the first of these GPUs (omit for CPU)")
    p.add_argument("--json", type=Path, help="write the figures to this JSON file")
    args = p.parse_args(argv)

    def run() -> int:
        conditions.check_outputs([args.model_dir], {"--src-file": args.src_file, "--tgt-file": args.tgt_file},
                                  json=args.json)
        try:
            beams = [int(x) for x in args.beams.split(",")]
            batch_sizes = [int(x) for x in args.batch_sizes.split(",")]
        except ValueError:
            raise ConfigError(f"--beams {args.beams!r} / --batch-sizes {args.batch_sizes!r}: give comma-separated "
                              "integers, e.g. 1,5") from None
        if min(beams + batch_sizes + [args.rounds]) < 1 or args.max_sentences < 0:
            raise ConfigError("--beams, --batch-sizes and --rounds must be >= 1, --max-sentences >= 0")
        if args.src_file and args.data_dir:   # (it was ignored without a word)
            raise ConfigError(f"--data-dir {args.data_dir} is where the Tatoeba-Challenge test is read; --src-file "
                              f"{args.src_file} is read where it is: drop it")
        ctx = parse_devices(args.gpus)[0]
        tr = Translator.from_dir(args.model_dir, args.checkpoint, ctx=ctx)
        lines, refs = _sentences(args, tr)
        if not lines:
            raise ConfigError("no sentences to translate")
        print(f"{tr.model_dir} ({tr.src_lang}->{tr.tgt_lang}, checkpoint {tr.checkpoint}), {len(lines)} sentences "
              f"from {args.src_file or TEST_SOURCE}, {ctx}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}")
        print(f"{'search':<24}{'batch':>6}{'seconds':>9}{'sent/s':>9}{'src tok/s':>11}{'out tok/s':>11}"
              f"{'peak RSS MB':>13}")
        configs = [functools.partial(run_config, tr, lines, beam, bs, args.warmup) for beam in beams
                   for bs in batch_sizes]
        # the costs of --alignment and of target prefixes, next to the search they follow (the last beam)
        configs += [functools.partial(run_aligned, tr, lines, beams[-1], bs, args.warmup) for bs in batch_sizes]
        if refs is not None:
            configs += [functools.partial(run_prefixed, tr, lines, refs, beams[-1], bs, args.warmup, whole)
                        for whole in (True, False) for bs in batch_sizes]
            configs += [functools.partial(run_score, tr, lines, refs, bs, args.warmup) for bs in batch_sizes]
        runs = [[] for _ in configs]
        for r in range(args.rounds):   # the configurations take turns, so that a change of load hits all alike
            for config, done in zip(configs, runs):
                done.append(config())
                _print_row(done[-1], f" (round {r + 1})" if args.rounds > 1 else "")
        rows = [_median(done) for done in runs]
        if args.rounds > 1:
            print("medians:")
            for row in rows:
                _print_row(row)
        if args.json:
            res = {"machine": {"processor": platform.processor() or platform.machine(), **conditions.machine(load0)},
                   "model_dir": str(tr.model_dir), "checkpoint": tr.checkpoint, "params_file": tr.params_file.name,
                   "direction": f"{tr.src_lang}-{tr.tgt_lang}", "device": str(ctx),
                   "test_set": args.src_file or TEST_SOURCE, "sentences": len(lines), "results": rows}
            atomic_write_text(args.json, json.dumps(res, indent=2) + "\n")
        return 0
    return run_cli(run)


def _median(done: List[dict]) -> dict:
    """The round of median time, with every round's seconds."""
    row = sorted(done, key=lambda r: r["seconds"])[(len(done) - 1) // 2]
    return {**row, "round_seconds": [r["seconds"] for r in done]}


def _print_row(r: dict, note: str = "") -> None:
    print(f"{r['search']:<24}{r['batch_size']:>6}{r['seconds']:>9.2f}{r['sentences_per_s']:>9.1f}"
          f"{r['src_tokens_per_s']:>11.0f}{r['out_tokens_per_s']:>11.0f}{r['peak_rss_mb']:>13.0f}{note}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
