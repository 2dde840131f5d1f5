"""The data pipeline at scale, stage by stage: time and peak memory from raw files to the first training update.

`run(out_dir, pairs)` writes (or reuses) a synthetic corpus of `pairs` training pairs (nmt.synthetic), then
measures each stage as training runs it: reading, cleaning with de-duplication and test-overlap removal,
SentencePiece training (a sample of `INPUT_SENTENCE_SIZE` lines), encoding into flat arrays cached next to the
tokenizers (nmt.encoded: cold, then the warm rerun that skips it), bucketing, the first batch and the first update
of the default model. A thread samples the resident set size every 20 ms, so each stage's peak is its own.
Used by scripts/benchmark_data.py --synthetic-pairs N.
"""
from __future__ import annotations

import os
import platform
import resource
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator

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
    from nmt.corpus import clean_training_pairs, read_parallel
    from nmt.encoded import load_or_encode
    from nmt.synthetic import write_corpus
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
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg_at_start": None,
                    "processor": platform.processor() or platform.machine()},
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
