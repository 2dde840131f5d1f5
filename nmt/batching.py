"""Bucketed batches of (source, target-in, target-out) for training, split per device and per worker.

Conventions (the model, the loss and the translator rely on them):

* source row   = x + [EOS], ``src_len = len(x) + 1``: the encoder sees where the sentence ends, and a source
  is never empty. Build inference inputs the same way (`pad_sources`).
* target-in    = [BOS] + y, target-out = y + [EOS], ``tgt_len = len(y) + 1`` (both have that many real tokens).
* padding with PAD_ID up to the bucket's lengths only, so the whole dataset uses a few fixed shapes.

`nmt.sampler.BucketSampler` draws *global* batches: what one update sees, independent of device count, gradient
accumulation and number of workers. Those only change how a global batch is cut (`split_batch`).
Filler rows pad a split to equal shares; they have ``tgt_len == 0`` and must be masked
out by length, so a loss must be normalized by the *global* batch's `num_tgt_tokens` (or `num_sentences`),
never by a per-share mean.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID

if TYPE_CHECKING:   # nmt.sampler imports this module
    from nmt.sampler import BucketSampler

class BatchError(ValueError):
    """Batching input or state that cannot work; the message names the example, flag or field."""


@dataclass
class Batch:
    """One padded batch; numpy int32 arrays. Filler rows (from `split_batch`) have ``tgt_len == 0``."""
    src: np.ndarray      # (B, S) x + EOS, padded with PAD_ID; S = bucket source length
    src_len: np.ndarray  # (B,)   len(x) + 1
    tgt_in: np.ndarray   # (B, T) BOS + y, padded
    tgt_out: np.ndarray  # (B, T) y + EOS, padded
    tgt_len: np.ndarray  # (B,)   len(y) + 1; 0 for filler rows

    @property
    def num_sentences(self) -> int:
        return int(np.count_nonzero(self.tgt_len))

    @property
    def num_tgt_tokens(self) -> int:
        return int(self.tgt_len.sum())

    @property
    def num_src_tokens(self) -> int:
        return int(self.src_len[self.tgt_len > 0].sum())

    def __len__(self) -> int:
        """Rows, filler rows included."""
        return int(self.src.shape[0])


def pad_sources(src_ids: Sequence[Sequence[int]], src_pad_len: int) -> Tuple[np.ndarray, np.ndarray]:
    """Source matrix (rows x + EOS, PAD-padded to `src_pad_len`) and lengths; shared by training and inference."""
    return _pad_sources(src_ids, range(len(src_ids)), src_pad_len, "source row")


def _pad_sources(src_ids: Sequence[Sequence[int]], rows: Sequence[int], src_pad_len: int,
                 label: str) -> Tuple[np.ndarray, np.ndarray]:
    src = np.full((len(rows), src_pad_len), PAD_ID, dtype=np.int32)
    src_len = np.empty(len(rows), dtype=np.int32)
    for r, i in enumerate(rows):
        x = src_ids[i]
        n = len(x)
        if n + 1 > src_pad_len:
            raise BatchError(f"{label} {i}: source has {n} tokens + EOS, longer than the padded length {src_pad_len}")
        src[r, :n] = x
        src[r, n] = EOS_ID
        src_len[r] = n + 1
    return src, src_len


def make_batch(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]], indices: Sequence[int],
               src_pad_len: int, tgt_pad_len: int) -> Batch:
    """Batch of examples `indices`: src = x + EOS, tgt_in = BOS + y, tgt_out = y + EOS, padded to the given lengths."""
    src, src_len = _pad_sources(src_ids, indices, src_pad_len, "example")
    b = len(indices)
    tgt_in = np.full((b, tgt_pad_len), PAD_ID, dtype=np.int32)
    tgt_out = np.full((b, tgt_pad_len), PAD_ID, dtype=np.int32)
    tgt_len = np.empty(b, dtype=np.int32)
    for r, i in enumerate(indices):
        y = tgt_ids[i]
        n = len(y)
        if n + 1 > tgt_pad_len:
            raise BatchError(f"example {i}: target has {n} tokens + BOS/EOS, longer than the padded length "
                             f"{tgt_pad_len}")
        tgt_in[r, 0] = BOS_ID
        tgt_in[r, 1:n + 1] = y
        tgt_out[r, :n] = y
        tgt_out[r, n] = EOS_ID
        tgt_len[r] = n + 1
    return Batch(src, src_len, tgt_in, tgt_out, tgt_len)


def split_batch(batch: Batch, num_shards: int) -> List[Batch]:
    """Cut `batch` into `num_shards` equal-shaped shares; share k holds rows [k*b, (k+1)*b).

    When the rows do not divide evenly, filler rows (src = [EOS] + PAD, tgt_in = [BOS] + PAD, tgt_out all PAD,
    src_len 1, tgt_len 0) are appended at the end, so they fall in the last share(s).
    """
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise BatchError(f"number of shares must be a positive integer, got {num_shards!r}")
    if num_shards == 1:
        return [batch]
    rows = len(batch)
    per = -(-rows // num_shards)
    fill = per * num_shards - rows
    if fill:
        s, t = batch.src.shape[1], batch.tgt_in.shape[1]
        src = np.full((fill, s), PAD_ID, dtype=np.int32)
        src[:, 0] = EOS_ID
        tgt_in = np.full((fill, t), PAD_ID, dtype=np.int32)
        tgt_in[:, 0] = BOS_ID
        batch = Batch(src=np.concatenate([batch.src, src]),
                      src_len=np.concatenate([batch.src_len, np.ones(fill, np.int32)]),
                      tgt_in=np.concatenate([batch.tgt_in, tgt_in]),
                      tgt_out=np.concatenate([batch.tgt_out, np.full((fill, t), PAD_ID, dtype=np.int32)]),
                      tgt_len=np.concatenate([batch.tgt_len, np.zeros(fill, np.int32)]))
    return [Batch(batch.src[k * per:(k + 1) * per], batch.src_len[k * per:(k + 1) * per],
                  batch.tgt_in[k * per:(k + 1) * per], batch.tgt_out[k * per:(k + 1) * per],
                  batch.tgt_len[k * per:(k + 1) * per]) for k in range(num_shards)]


# Samples drawn per sentence and batch before falling back to its best segmentation (BatchIterator).
_SAMPLE_TRIES = 4
# (example indices, seed) -> their source and target ids segmented anew (see BatchIterator)
Resegment = Callable[[np.ndarray, int], Tuple[List[List[int]], List[List[int]]]]


class BatchIterator:
    """`Batch` objects for the sampler's batches, built ahead in a background thread (`prefetch` batches).

    The sampler's position counts batches handed to the caller, never the ones prepared ahead, so
    `state_dict()` is an exact resume point at any moment. With `resegment` (subword regularization) each
    batch's sentences are segmented anew from a seed of (sampler seed, epoch, batch number): the same batch
    whenever it is built, resumed runs included.
    """

    def __init__(self, src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]],
                 sampler: BucketSampler, prefetch: int = 2, resegment: Optional[Resegment] = None):
        if len(src_ids) != len(tgt_ids):
            raise BatchError(f"{len(src_ids)} source sentences but {len(tgt_ids)} target sentences")
        if len(src_ids) != sampler.num_examples:
            raise BatchError(f"the sampler was built for {sampler.num_examples} examples, got {len(src_ids)}")
        for side, ids, lens in (("source", src_ids, sampler.src_lens), ("target", tgt_ids, sampler.tgt_lens)):
            actual = (np.asarray(ids.lengths) if hasattr(ids, "lengths")   # flat ids (nmt.encoded): no loop
                      else np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids)))
            bad = np.flatnonzero(actual != lens)
            if len(bad):
                raise BatchError(f"example {bad[0]}: {side} has {actual[bad[0]]} tokens but the sampler was "
                                 f"built with length {lens[bad[0]]}")
        if prefetch < 0:
            raise BatchError(f"prefetch must be >= 0, got {prefetch}")
        self.src_ids, self.tgt_ids, self.sampler, self.prefetch = src_ids, tgt_ids, sampler, prefetch
        self.resegment = resegment

    def __len__(self) -> int:
        return len(self.sampler)

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)

    def _build(self, item: Tuple[np.ndarray, int, int], number: int) -> Batch:
        """Batch `number` of the sampler's current epoch."""
        idx, s, t = item
        if self.resegment is None:
            return make_batch(self.src_ids, self.tgt_ids, idx, s, t)
        # A sampled segmentation is mostly longer than the best one, which the buckets were built on: a sentence
        # takes the first of a few samples that fits the batch's shape, else its best segmentation (so shapes,
        # batches and resume points stay those of the sampler).
        src: List[Optional[List[int]]] = [None] * len(idx)
        tgt: List[Optional[List[int]]] = [None] * len(idx)
        for attempt in range(_SAMPLE_TRIES):
            rows = [r for r in range(len(idx)) if src[r] is None or tgt[r] is None]
            if not rows:
                break
            seed = np.random.SeedSequence([self.sampler.seed, self.sampler.epoch, number, attempt])
            new_src, new_tgt = self.resegment(idx[rows], int(seed.generate_state(1)[0]))
            for r, x, y in zip(rows, new_src, new_tgt):
                if src[r] is None and 0 < len(x) < s:
                    src[r] = x
                if tgt[r] is None and 0 < len(y) < t:
                    tgt[r] = y
        return make_batch([x if x is not None else self.src_ids[i] for x, i in zip(src, idx)],
                          [y if y is not None else self.tgt_ids[i] for y, i in zip(tgt, idx)],
                          range(len(idx)), s, t)

    def __iter__(self) -> Iterator[Batch]:
        """One epoch from the sampler's current position (see `BucketSampler`)."""
        sampler = self.sampler
        batches = sampler.epoch_batches(sampler.epoch)
        start = sampler.position
        if self.prefetch == 0:
            for i in range(start, len(batches)):
                batch = self._build(batches[i], i)
                sampler.consumed(i + 1)
                yield batch
            sampler.end_epoch()
            return
        ready: "queue.Queue" = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def produce() -> None:
            for i in range(start, len(batches)):
                try:
                    item = (i, self._build(batches[i], i))
                except BaseException as e:  # handed to the consumer, which re-raises it in its own thread
                    item = (i, e)
                while not stop.is_set():
                    try:
                        ready.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set() or isinstance(item[1], BaseException):
                    return

        worker = threading.Thread(target=produce, name="nmt-batch-prefetch", daemon=True)
        worker.start()
        try:
            for _ in range(start, len(batches)):
                while True:
                    try:
                        i, batch = ready.get(timeout=1.0)
                        break
                    except queue.Empty:
                        if not worker.is_alive():
                            raise BatchError("the batch prefetch thread stopped unexpectedly") from None
                if isinstance(batch, BaseException):
                    raise batch
                sampler.consumed(i + 1)
                yield batch
            sampler.end_epoch()
        finally:
            stop.set()
            worker.join()
