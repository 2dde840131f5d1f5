#!/usr/bin/env python
"""Throughput of the data pipeline on the real corpora: read + normalize + clean, tokenize, batch.

    python scripts/benchmark_data.py --data-dir ../shared/data [--recipe all] [--json results/benchmark_data.json]

    python scripts/benchmark_data.py --synthetic-pairs 5000000 [--work-dir /tmp/nmt-bench]   # at scale

Each stage is timed separately (median of --repeats), in pairs/s and subword tokens/s (source + target), and the
whole pipeline is compared with how fast training consumes tokens (--train-tokens-per-s, e.g. a figure from
scripts/benchmark_train.py): the pipeline must never be what training waits for.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nmt.batching import BatchIterator
from nmt.sampler import BucketSampler
from nmt.config import DataConfig
from nmt.recipes import load_data
from nmt.tokenizer import train_tokenizer


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", help="offline mirror (else $NMT_DATA_DIR, cache, network)")
    p.add_argument("--recipe", default="all", help="dataset recipe (default: all, the largest)")
    p.add_argument("--src", default="ko")
    p.add_argument("--tgt", default="en")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--train-tokens-per-s", type=float, default=5400.0,
                   help="training consumption to compare with (source+target tokens/s)")
    p.add_argument("--json", type=Path, help="write the figures to this JSON file")
    p.add_argument("--synthetic-pairs", type=int, help="measure the pipeline at scale on N synthetic pairs")
    p.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "nmt-bench-data",
                   help="where --synthetic-pairs keeps its corpus (reused across runs) and tokenizers")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.synthetic_pairs:
        return at_scale(args)

    cfg = DataConfig(recipe=args.recipe, src_lang=args.src, tgt_lang=args.tgt, data_dir=args.data_dir,
                     vocab_size=args.vocab_size, batch_size=args.batch_size)
    splits, t_read = timed(lambda: load_data(cfg), args.repeats)
    n_raw = len(splits.train) + len(splits.dev) + sum(len(t) for t in splits.tests.values())
    n = len(splits.train)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        src_tok = train_tokenizer(splits.train.src, tmp, args.src, args.vocab_size)
        tgt_tok = train_tokenizer(splits.train.tgt, tmp, args.tgt, args.vocab_size)
        t_spm = time.perf_counter() - t0
        (src_ids, tgt_ids), t_tok = timed(lambda: (src_tok.encode(splits.train.src), tgt_tok.encode(splits.train.tgt)),
                                          args.repeats)
    tokens = sum(map(len, src_ids)) + sum(map(len, tgt_ids))
    sampler = BucketSampler([len(x) for x in src_ids], [len(y) for y in tgt_ids], batch_size=args.batch_size,
                            num_buckets=cfg.num_buckets, bucketing=cfg.bucketing, seed=1)
    it = BatchIterator(src_ids, tgt_ids, sampler, prefetch=0)

    def one_epoch():
        sampler.set_epoch(sampler.epoch)
        return sum(b.num_src_tokens + b.num_tgt_tokens for b in it)
    batched_tokens, t_batch = timed(one_epoch, args.repeats)
    # Steady-state per-epoch cost (reading/cleaning and SentencePiece training happen once per run).
    per_epoch = t_tok + t_batch
    res = {
        "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
        "recipe": args.recipe, "direction": f"{args.src}-{args.tgt}", "train_pairs": n, "pairs_read": n_raw,
        "train_tokens": tokens,
        "read_clean": {"seconds": t_read, "pairs_per_s": n_raw / t_read},
        "spm_train_seconds_once": t_spm,
        "tokenize": {"seconds": t_tok, "pairs_per_s": n / t_tok, "tokens_per_s": tokens / t_tok},
        "batch": {"seconds": t_batch, "pairs_per_s": n / t_batch, "tokens_per_s": batched_tokens / t_batch,
                  "num_batches": len(sampler)},
        "pipeline_per_epoch": {"seconds": per_epoch, "tokens_per_s": tokens / per_epoch,
                               "x_training_rate": tokens / per_epoch / args.train_tokens_per_s},
    }
    print(f"recipe {args.recipe} {args.src}->{args.tgt}: {n} training pairs, {tokens} subword tokens")
    print(f"{'stage':<28}{'seconds':>9}{'pairs/s':>12}{'tokens/s':>13}")
    print(f"{'read+normalize+clean':<28}{t_read:>9.2f}{n_raw / t_read:>12,.0f}{'':>13}")
    print(f"{'SentencePiece training':<28}{t_spm:>9.2f}{'(once)':>12}{'':>13}")
    print(f"{'tokenize (encode)':<28}{t_tok:>9.2f}{n / t_tok:>12,.0f}{tokens / t_tok:>13,.0f}")
    print(f"{'batch (one epoch)':<28}{t_batch:>9.2f}{n / t_batch:>12,.0f}{batched_tokens / t_batch:>13,.0f}")
    print(f"pipeline per epoch: {tokens / per_epoch:,.0f} tokens/s = "
          f"{res['pipeline_per_epoch']['x_training_rate']:.0f}x a training rate of "
          f"{args.train_tokens_per_s:,.0f} tokens/s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


def at_scale(args: argparse.Namespace) -> int:
    """--synthetic-pairs N: stage by stage to the first update; results/benchmark_data.json (replaced)."""
    import os
    from nmt.atomic import atomic_write_text
    from nmt.scale_bench import run
    if args.synthetic_pairs < 1000:
        print(f"error: --synthetic-pairs must be >= 1000, got {args.synthetic_pairs}", file=sys.stderr)
        return 2
    load = os.getloadavg()
    res = run(args.work_dir / str(args.synthetic_pairs), args.synthetic_pairs, args.vocab_size, args.batch_size)
    res["machine"]["load_avg_at_start"], res["machine"]["load_avg_at_end"] = load, os.getloadavg()
    print(f"to the first update: {res['seconds_to_first_update']:.0f} s (rerun with the encoded cache: "
          f"{res['seconds_to_first_update_rerun']:.0f} s); peak RSS {res['peak_rss_gib']:.2f} GiB")
    out = args.json or Path(__file__).resolve().parents[1] / "results" / "benchmark_data.json"
    atomic_write_text(out, json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
