"""Length buckets and the order of training batches: `BucketSampler` draws the global batches of every epoch
(the same whatever the device count, accumulation or number of workers) and saves its position for an exact resume.
"""
from __future__ import annotations

import hashlib
import json
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from nmt.batching import BatchError

_FINGERPRINT_VERSION = 2


BUCKETINGS = ("padding", "quantile")


def bucket_examples(s_pad: np.ndarray, t_pad: np.ndarray, num_buckets: int, bucketing: str = "padding") -> np.ndarray:
    """Bucket number (0, 1, ... in order of length) of each example, from its padded lengths (len + 1).

    * "padding": the split that pads least. Examples are ordered by max(source, target) length and cut into at
      most `num_buckets` runs so that the positions a step computes, the sum over buckets of examples x (longest
      source + longest target), is smallest (dynamic programming over the distinct lengths). A long tail gets
      buckets of its own: on Tatoeba ko-en (8 buckets) 83% of the computed positions are real tokens, against
      51% with quantiles, whose last bucket pads the longest 15% of the sentences to the single longest one.
    * "quantile": boundaries at the k/num_buckets quantiles of each side's length (the published results
      were trained with it; scripts/reproduce_results.sh passes it).
    """
    if bucketing == "quantile":
        at = np.ceil(np.arange(1, num_buckets + 1) / num_buckets * (len(s_pad) - 1)).astype(np.int64)
        keys = sorted(set(zip(np.sort(s_pad)[at].tolist(), np.sort(t_pad)[at].tolist())))
        keys[-1] = (int(s_pad.max()), int(t_pad.max()))  # the last bucket holds everything left
        bucket = np.full(len(s_pad), -1, dtype=np.int64)
        for k, (s, t) in enumerate(keys):  # first bucket both sides fit into
            bucket[(bucket < 0) & (s_pad <= s) & (t_pad <= t)] = k
        return np.unique(bucket, return_inverse=True)[1].reshape(-1)   # numbered without gaps
    values, pos = np.unique(np.maximum(s_pad, t_pad), return_inverse=True)
    pos = pos.reshape(-1)
    m = len(values)
    count = np.bincount(pos, minlength=m)
    longest_s, longest_t = np.zeros(m, np.int64), np.zeros(m, np.int64)
    np.maximum.at(longest_s, pos, s_pad)
    np.maximum.at(longest_t, pos, t_pad)
    # cost[i, j]: computed positions of one bucket holding the examples of lengths values[i..j]
    cost = np.full((m, m), np.inf)
    for i in range(m):
        n = np.cumsum(count[i:])
        cost[i, i:] = n * (np.maximum.accumulate(longest_s[i:]) + np.maximum.accumulate(longest_t[i:]))
    # best[j]: least cost of the first j lengths in k buckets; start[k][j]: where the last of them begins
    best = np.concatenate([[0.0], np.full(m, np.inf)])
    starts = []
    for _ in range(min(num_buckets, m)):
        options = best[:-1, None] + cost   # options[i, j-1]: first i lengths as before, then i..j-1 in one bucket
        start = np.argmin(options, axis=0)
        best = np.concatenate([[np.inf], options[start, np.arange(m)]])
        starts.append(start)
    cuts, j = [], m   # walk back from the last length (with the full budget of buckets)
    for start in reversed(starts):
        if j == 0:
            break
        i = int(start[j - 1])
        cuts.append(i)
        j = i
    return np.searchsorted(np.asarray(sorted(c for c in cuts if c > 0), dtype=np.int64), pos, side="right")


class BucketSampler:
    """Global batches of example indices, bucketed by length, reshuffled each epoch, resumable mid-epoch.

    `src_lens` / `tgt_lens` are token counts of x and y (without EOS/BOS). The examples are split into at most
    `num_buckets` buckets (`bucketing`, see `bucket_examples`), each then tightened to the longest example it
    holds, so every batch has one of at most `num_buckets` shapes. Give `batch_size` (sentences per batch) or
    `batch_tokens` (``rows * tgt_pad_len <= batch_tokens``), not both. Each bucket's last batch may be smaller, so that
    every example is drawn exactly once per epoch.

    Iterating yields the batches from `position` to the end of `epoch`; reaching the end moves to the start
    of the next epoch, so ``for epoch ...: for b in sampler`` needs no `set_epoch`, and a resumed state
    (`load_state_dict`) simply continues. The batches of an epoch depend only on the lengths, the
    configuration, `seed` and the epoch number.
    """

    def __init__(self, src_lens: Sequence[int], tgt_lens: Sequence[int], *, batch_size: Optional[int] = None,
                 batch_tokens: Optional[int] = None, num_buckets: int = 8, bucketing: str = "padding",
                 shuffle: bool = True, seed: int = 1):
        self.src_lens = np.asarray(src_lens, dtype=np.int64).reshape(-1)
        self.tgt_lens = np.asarray(tgt_lens, dtype=np.int64).reshape(-1)
        n = len(self.src_lens)
        if n != len(self.tgt_lens):
            raise BatchError(f"{n} source lengths but {len(self.tgt_lens)} target lengths")
        if n == 0:
            raise BatchError("no training examples to batch")
        if (batch_size is None) == (batch_tokens is None):
            raise BatchError("give exactly one of batch_size (sentences) and batch_tokens (target tokens), "
                             f"got batch_size={batch_size}, batch_tokens={batch_tokens}")
        for name, value in (("batch_size", batch_size), ("batch_tokens", batch_tokens), ("num_buckets", num_buckets)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                      or value < 1):
                raise BatchError(f"{name} must be a positive integer, got {value!r}")
        for side, lens in (("source", self.src_lens), ("target", self.tgt_lens)):
            if lens.min() < 0:
                raise BatchError(f"example {int(np.argmin(lens))} has a negative {side} length {int(lens.min())}")
        if bucketing not in BUCKETINGS:
            raise BatchError(f"bucketing (--bucketing) must be one of {', '.join(BUCKETINGS)}, got {bucketing!r}")
        self.bucketing = bucketing
        self.batch_size = None if batch_size is None else int(batch_size)
        self.batch_tokens = None if batch_tokens is None else int(batch_tokens)
        self.num_buckets, self.shuffle, self.seed = int(num_buckets), bool(shuffle), int(seed)

        self.bucket_shapes, self._members = self._make_buckets()
        longest = max(t for _, t in self.bucket_shapes)
        if self.batch_tokens is not None and self.batch_tokens < longest:
            raise BatchError(f"--batch-tokens {self.batch_tokens} cannot hold one sentence of the longest length "
                             f"bucket ({longest} target positions); give --batch-tokens {longest} or more, or a "
                             "lower --max-tgt-tokens")
        self.bucket_batch_sizes = [int(self.batch_size if self.batch_tokens is None else self.batch_tokens // t)
                                   for _, t in self.bucket_shapes]
        self._num_batches = sum(-(-len(m) // b) for m, b in zip(self._members, self.bucket_batch_sizes))
        self.epoch, self.position = 0, 0
        self._cache: Tuple[int, List[Tuple[np.ndarray, int, int]]] = (-1, [])

    def _make_buckets(self) -> Tuple[List[Tuple[int, int]], List[np.ndarray]]:
        s_pad, t_pad = self.src_lens + 1, self.tgt_lens + 1
        bucket = bucket_examples(s_pad, t_pad, self.num_buckets, self.bucketing)
        shapes, members = [], []
        for k in range(int(bucket.max()) + 1):
            idx = np.flatnonzero(bucket == k)
            if len(idx):  # tighten to the longest member: less padding, still a fixed shape per dataset
                shapes.append((int(s_pad[idx].max()), int(t_pad[idx].max())))
                members.append(idx)
        return shapes, members

    def __len__(self) -> int:
        return self._num_batches

    @property
    def num_examples(self) -> int:
        return len(self.src_lens)

    @property
    def real_fraction(self) -> float:
        """Fraction of the source + target positions of an epoch's padded batches that hold real tokens
        (EOS/BOS included)."""
        real = int((self.src_lens + 1).sum() + (self.tgt_lens + 1).sum())
        return real / sum(len(m) * (s + t) for m, (s, t) in zip(self._members, self.bucket_shapes))

    def epoch_batches(self, epoch: int) -> List[Tuple[np.ndarray, int, int]]:
        """All global batches of `epoch` in order: (example indices, src_pad_len, tgt_pad_len)."""
        if self._cache[0] == epoch:
            return self._cache[1]
        rng = np.random.default_rng([self.seed, epoch]) if self.shuffle else None
        batches = []
        for idx, rows, (s, t) in zip(self._members, self.bucket_batch_sizes, self.bucket_shapes):
            if rng is not None:
                idx = rng.permutation(idx)
            batches.extend((idx[i:i + rows], s, t) for i in range(0, len(idx), rows))
        if rng is not None:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        self._cache = (epoch, batches)
        return batches

    def set_epoch(self, epoch: int) -> None:
        """Move to the start of `epoch` (position 0)."""
        if epoch < 0:
            raise BatchError(f"epoch must be >= 0, got {epoch}")
        self.epoch, self.position = int(epoch), 0

    def consumed(self, position: int) -> None:
        """The first `position` batches of this epoch are handed out: a saved state resumes after them."""
        self.position = position

    def end_epoch(self) -> None:
        """Every batch of this epoch is handed out: move to the start of the next."""
        self.epoch, self.position = self.epoch + 1, 0

    def __iter__(self) -> Iterator[Tuple[np.ndarray, int, int]]:
        batches = self.epoch_batches(self.epoch)
        for i in range(self.position, len(batches)):
            self.consumed(i + 1)  # handed out = consumed: a state saved while it is processed resumes after it
            idx, s, t = batches[i]
            yield idx.copy(), s, t
        self.end_epoch()

    def fingerprint(self) -> str:
        """Hash of the lengths and the batching configuration (what determines the batches besides seed/epoch)."""
        h = hashlib.sha256()
        h.update(json.dumps([_FINGERPRINT_VERSION, self.batch_size, self.batch_tokens, self.num_buckets, self.shuffle,
                             self.bucketing]).encode())
        h.update(self.src_lens.astype("<i8").tobytes())
        h.update(self.tgt_lens.astype("<i8").tobytes())
        return h.hexdigest()[:20]

    def _describe(self) -> dict:
        return {"num_examples": self.num_examples, "num_batches": len(self), "batch_size": self.batch_size,
                "batch_tokens": self.batch_tokens, "num_buckets": self.num_buckets, "bucketing": self.bucketing,
                "shuffle": self.shuffle}

    def state_dict(self) -> dict:
        """JSON-serializable resume point: the next batch is number `position` of epoch `epoch`."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed,
                "fingerprint": self.fingerprint(), **self._describe()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state`; `BatchError` if it was saved for other data, configuration or seed."""
        missing = [k for k in ("epoch", "position", "seed", "fingerprint") if k not in state]
        if missing:
            raise BatchError(f"sampler state lacks {', '.join(missing)}")
        if state["fingerprint"] != self.fingerprint():
            saved = {k: state.get(k) for k in self._describe()}
            what = (f"saved {saved}, now {self._describe()}" if saved != self._describe() else "the same counts and "
                    "settings, so the content of the training files changed (an edited --train-src/--train-tgt?)")
            raise BatchError(f"sampler state was saved for other training data or batching settings "
                             f"(fingerprint {state['fingerprint']} != {self.fingerprint()}): {what}; resume with the "
                             "same data and flags, or start a new --model-dir from this one with --init-from")
        if int(state["seed"]) != self.seed:
            raise BatchError(f"sampler state was saved with seed {state['seed']}, this run uses seed {self.seed}")
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= len(self):
            raise BatchError(f"sampler state has epoch {epoch}, position {position}; "
                             f"valid positions are 0..{len(self)}")
        self.epoch, self.position = epoch, position
