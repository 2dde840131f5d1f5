#!/usr/bin/env python
"""Throughput of the data pipeline on the real corpora: read + normalize + clean, tokenize, batch.

    python scripts/benchmark_data.py --data-dir ../shared/data [--recipe all] [--json pipeline.json]

    python scripts/benchmark_data.py --synthetic-pairs 5000000 [--work-dir /tmp/nmt-bench-data]   # at scale

Each stage is timed separately (median of --repeats), in pairs/s and subword tokens/s (source + target), and the
whole pipeline is compared with how fast training consumes tokens (--train-tokens-per-s, e.g. a figure from
scripts/benchmark_train.py): the pipeline must never be what training waits for.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "scripts"):   # from a checkout without installing; scripts.synthetic_corpus, conditions
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import conditions   # (scripts/, beside this one)
from nmt.batching import BatchIterator
from nmt.commands import number
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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)   # (the recipe flags, refused by name with --synthetic-pairs)
    p.add_argument("--data-dir", help="offline mirror (else $NMT_DATA_DIR, cache, network)")
    p.add_argument("--recipe", default="all", help="dataset recipe (default: all, the largest)")
    p.add_argument("--src", default="ko")
    p.add_argument("--tgt", default="en")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=number(int, 1), default=3)
    p.add_argument("--train-tokens-per-s", type=float, default=5400.0,
                   help="training consumption to compare with (source+target tokens/s)")
    p.add_argument("--json", type=Path, help="write the figures to this JSON file (with --synthetic-pairs, by "
                                             "default results/benchmark_data.json, which docs/performance.md cites)")
    p.add_argument("--synthetic-pairs", type=number(int, 1000),
                   help="measure the pipeline at scale on N synthetic pairs")
    p.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "nmt-bench-data",
                   help="where --synthetic-pairs keeps its corpus (reused across runs) and tokenizers; not in a "
                        "model directory, whose --overwrite they would stop")
    return p


RECIPE_ONLY = ("--data-dir", "--recipe", "--src", "--tgt", "--repeats", "--train-tokens-per-s")   # (not at scale)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = _parser()
    args = p.parse_args(argv)
    conditions.check_outputs(json=args.json)
    if args.synthetic_pairs:
        unread = [f for f in RECIPE_ONLY if any(a == f or a.startswith(f + "=") for a in argv)]
        if unread:   # (they were ignored without a word)
            p.error(f"{unread[0]} is a setting of the recipe's benchmark, not of --synthetic-pairs, which reads its "
                    "own synthetic corpus once: leave it out")
        from nmt.cli_io import output_dir   # (the corpus it writes: an unusable place named now, not in a traceback)
        conditions.check_work_dir("--work-dir", args.work_dir)   # (its files would block the model's --overwrite)
        output_dir("--work-dir", args.work_dir / str(args.synthetic_pairs))
        return at_scale(args)
    if any(a == "--work-dir" or a.startswith("--work-dir=") for a in argv):   # (it was ignored without a word)
        p.error("--work-dir is where --synthetic-pairs keeps its corpus; the recipe's benchmark reads the recipe's "
                "corpora and trains its tokenizers in a temporary directory: leave it out, or give --synthetic-pairs")

    load0 = os.getloadavg()
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
        "machine": {"processor": platform.processor() or platform.machine(), **conditions.machine(load0)},
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
    from nmt.atomic import atomic_write_text
    load = os.getloadavg()
    res = run(args.work_dir / str(args.synthetic_pairs), args.synthetic_pairs, args.vocab_size, args.batch_size)
    res = {"machine": {"processor": platform.processor() or platform.machine(), **conditions.machine(load)}, **res}
    print(f"to the first update: {res['seconds_to_first_update']:.0f} s (rerun with the encoded cache: "
          f"{res['seconds_to_first_update_rerun']:.0f} s); peak RSS {res['peak_rss_gib']:.2f} GiB")
    out = args.json or REPO / "results" / "benchmark_data.json"
    atomic_write_text(out, json.dumps(res, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


# At scale (--synthetic-pairs N): a synthetic corpus of N training pairs (scripts/synthetic_corpus.py), each stage
# measured as training runs it: reading, cleaning with de-duplication and test-overlap removal, SentencePiece
# training (a sample of INPUT_SENTENCE_SIZE lines), encoding into flat arrays cached next to the tokenizers (cold,
# then the warm rerun that skips it), bucketing, the first batch and the first update of the default model. A thread
# samples the resident set size every 20 ms, so each stage's peak is its own.

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


class PeakRSS:
    """Peak resident set size of this process since the last `reset()`, sampled by a daemon thread."""

    def __init__(self, every: float = 0.02):
        self.peak, self._every, self._stop = rss_bytes(), every, threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.peak = max(self.peak, rss_bytes())

    def reset(self) -> None:
        self.peak = rss_bytes()

    def stop(self) -> None:
        self._stop.set()


class Stages:
    """Records seconds and peak RSS (GiB) per named stage."""

    def __init__(self):
        self.rows: Dict[str, Dict[str, float]] = {}
        self.meter = PeakRSS()

    @contextmanager
    def stage(self, name: str) -> Iterator[Dict[str, Any]]:
        extra: Dict[str, Any] = {}
        self.meter.reset()
        t0 = time.perf_counter()
        yield extra
        seconds = time.perf_counter() - t0
        peak = max(self.meter.peak, rss_bytes())
        self.rows[name] = {"seconds": round(seconds, 2), "peak_rss_gib": round(peak / 2 ** 30, 3), **extra}
        print(f"{name:<34}{seconds:>9.1f} s{peak / 2 ** 30:>9.2f} GiB  {extra or ''}", flush=True)


def _first_update(train_src, train_tgt, src_vocab: int, tgt_vocab: int, batch_size: int) -> Dict[str, Any]:
    """Bucket the encoded corpus, build the first batch and run one update of the default model."""
    import mxnet as mx
    from mxnet import autograd, gluon
    from nmt.batching import BatchIterator
    from nmt.config import DataConfig, ModelConfig
    from nmt.loss import Seq2SeqLoss
    from nmt.models import build_model
    from nmt.sampler import BucketSampler
    d = DataConfig()
    sampler = BucketSampler(train_src.lengths, train_tgt.lengths, batch_size=batch_size, num_buckets=d.num_buckets,
                            bucketing=d.bucketing, seed=1)
    sampler.set_epoch(0)
    batch = next(iter(BatchIterator(train_src, train_tgt, sampler, prefetch=0)))
    net = build_model(ModelConfig(), src_vocab, tgt_vocab)
    net.initialize(mx.init.Xavier(magnitude=2.24))
    loss_block = Seq2SeqLoss(net, label_smoothing=0.1)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3})
    arrays = [mx.nd.array(a, dtype="float32") for a in (batch.src, batch.src_len, batch.tgt_in, batch.tgt_out,
                                                         batch.tgt_len)]
    with autograd.record():
        loss, _ = loss_block(*arrays)
    loss.backward()
    trainer.step(batch.num_sentences)
    return {"batches_per_epoch": len(sampler), "loss": round(float(loss.sum().asscalar()), 3)}


def run(out_dir: Path, pairs: int, vocab_size: int = 8000, batch_size: int = 64) -> Dict[str, Any]:
    """Measure every stage on a corpus of `pairs` pairs under `out_dir`; returns the figures."""
    from nmt.cleaning import clean_training_pairs
    from nmt.corpus import read_parallel
    from nmt.encoded import load_or_encode
    from scripts.synthetic_corpus import write_corpus
    from nmt.tokenizer import INPUT_SENTENCE_SIZE, train_tokenizer
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    corpus = write_corpus(out_dir / "corpus", pairs)
    generate = time.perf_counter() - t0
    f, st = corpus["files"], Stages()
    with st.stage("read (3 splits)") as x:
        train = read_parallel(f["train_src"], f["train_tgt"], name="train")
        held = [read_parallel(f[f"{s}_src"], f[f"{s}_tgt"], name=s) for s in ("dev", "test")]
        x["pairs"] = len(train)
    with st.stage("clean, dedup, test overlap") as x:
        train, x["dropped"] = clean_training_pairs(train, held, max_chars=400, max_ratio=4.0)
        x["kept"] = len(train)
    tok_dir = out_dir / "model"
    with st.stage("SentencePiece training (ko, en)") as x:
        src_tok = train_tokenizer(train.src, tok_dir, "ko", vocab_size)
        tgt_tok = train_tokenizer(train.tgt, tok_dir, "en", vocab_size)
        x["input_sentence_size"] = INPUT_SENTENCE_SIZE
    for name in ("encode (cold: into the cache)", "encode (warm: rerun/resume)"):
        if name.startswith("encode (cold"):
            for old in tok_dir.glob("encoded.*.npy"):
                old.unlink()
        with st.stage(name) as x:
            src, tgt, x["cache_hit"] = load_or_encode(tok_dir, src_tok, tgt_tok, train.src, train.tgt)
            x["tokens"] = src.num_tokens + tgt.num_tokens
    with st.stage("bucketing, first batch, first update") as x:
        x.update(_first_update(src, tgt, src_tok.vocab_size, tgt_tok.vocab_size, batch_size))
    st.meter.stop()
    rows = st.rows
    first = sum(r["seconds"] for k, r in rows.items() if k != "encode (warm: rerun/resume)")
    rerun = sum(r["seconds"] for k, r in rows.items() if k not in ("encode (cold: into the cache)",
                                                                    "SentencePiece training (ko, en)"))
    return {
        "pairs": pairs, "vocab_size": vocab_size, "batch_size": batch_size,
        "corpus": {"bytes": sum(Path(p).stat().st_size for p in f.values()), "generate_seconds": round(generate, 1),
                   "duplicates_injected": corpus["duplicates"], "overlap_injected": corpus["held_out_overlap"]},
        "stages": rows,
        "seconds_to_first_update": round(first, 1),
        "seconds_to_first_update_rerun": round(rerun, 1),
        "peak_rss_gib": max(r["peak_rss_gib"] for r in rows.values()),
        "ru_maxrss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 3),
        "goals": {"peak_rss_gib": 4.0, "seconds_to_first_update": 600},
    }

if __name__ == "__main__":
    from nmt.commands import run_cli
    sys.exit(run_cli(main))   # bad input: one line, exit 2
