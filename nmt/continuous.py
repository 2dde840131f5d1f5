"""Continuous batching: sentences that arrive while others are being translated join the running beam search
between two of its steps, and each leaves with its answer as soon as it is done (`nmt.search.BeamStream`).

A service with 16 clients holds at most 16 sentences at a time. Decoding them as separate batches, each batch
runs until its longest sentence is done while the sentences already done wait for it and new arrivals wait for
the next batch: the model steps over ever fewer sentences. Here the batch is refilled as it empties, so every step
advances as many sentences as are waiting (up to `max_batch`), and no sentence waits for a longer one.

New sentences join at a step where the batch changes shape anyway (sentences left it), once a quarter of the
batch's size is waiting, or after `MAX_WAIT_STEPS` steps: a join gives the step graph a new shape to plan. They
join in arrival order, encoded at their own padded width (the batch's encoder memory is padded to the widest).
A model whose step changes its state's shapes (`Seq2SeqModel.fixed_step_shapes` False: a Transformer's caches
grow) takes new sentences only into an empty batch: batch after batch, as without this module.
"""
from __future__ import annotations

import collections
from typing import (Callable, Deque, Dict, Hashable, List, NamedTuple, Optional, Sequence, Sized,
                    Tuple)

import numpy as np

from nmt.api_inputs import BYTES_LIKE, listed
from nmt.models.ensemble import as_model
from nmt.search import BeamStream, check_int, reached_limit
from nmt.search_blocks import TargetPrefix

NBest = List[Tuple[str, float]]
# The most steps a waiting sentence lets pass before it joins a batch that has room.
MAX_WAIT_STEPS = 3
_JOIN_FRACTION = 0.25


def _check_counts(lines: int, keys: Sequence[Hashable], prefixes: Optional[Sized]) -> None:
    """ValueError unless `ContinuousDecoder.add` was given as many keys, and prefixes (None: not given), as lines."""
    if lines != len(keys) or prefixes is not None and len(prefixes) != lines:
        raise ValueError(f"ContinuousDecoder.add: {lines} lines but {len(keys)} keys"
                         + ("" if prefixes is None else f" and {len(prefixes)} prefixes"))


class Done(NamedTuple):
    """A line `ContinuousDecoder.step` is done with: its key, its n-best list, whether its best translation
    reached the length limit (max_len_a, max_len_b) and may be cut off, and the target ids of each translation (what
    `nmt.align.align_ids` aligns, as nmt-translate --alignment does)."""
    key: Hashable
    nbest: NBest
    cut_off: bool = False
    ids: Tuple[List[int], ...] = ()


class ContinuousDecoder:
    """`add` lines under keys, `step` until `pending` is 0; each `step` returns the lines that are done (`Done`:
    key, n-best list, cut off), the same lists `Translator.translate_nbest` gives. A key names one pending line at a
    time: once `step` has returned it (or `cancel` dropped it) it may name a new one."""

    def __init__(self, translator, beam_size: int, nbest: int, max_batch: int):
        check_int("max_batch", max_batch)
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1 (got {max_batch})")
        self.translator, self.max_batch = translator, max_batch
        self.search = BeamStream(as_model(translator.members), translator.ctx, beam_size, nbest,
                                 translator.decode.length_penalty_alpha)
        # (key, source ids, target prefix or None, the step count when it arrived)
        self.waiting: Deque[Tuple[Hashable, List[int], Optional[TargetPrefix], int]] = collections.deque()
        self.ready: List[Done] = []                     # done without decoding (empty lines)
        # called with the keys of lines as they join the batch, before a step computes them (None: nothing)
        self.on_join: Optional[Callable[[List[Hashable]], None]] = None
        self.keys: dict = {}                            # search id -> key
        self.limits: Dict[int, Tuple[int, Optional[TargetPrefix]]] = {}   # search id -> length limit, prefix
        self._next_id = 0
        self.steps = 0            # steps taken
        self.sentence_steps = 0   # sum over steps of the sentences in the batch

    @property
    def pending(self) -> int:
        """Lines added and not yet returned by `step`."""
        return len(self.waiting) + self.search.size + len(self.ready)

    def add(self, lines: Sequence[str], keys: Sequence[Hashable],
            prefixes: Optional[Sequence[Optional[str]]] = None) -> None:
        """Queue `lines`, known by `keys` (same length, hashable) when they come back from `step`; `prefixes`: per
        line, text its translations start with (None or "": none). A key given twice, or one still pending (added
        and not yet returned by `step` nor cancelled), is a ValueError naming it, found before the lines are
        read: nothing is queued, and no line is counted or logged as cut. So is a count of keys (or of prefixes)
        other than the lines'."""
        if listed(lines):   # (else `source_ids` says what
            lines = list(lines)   # lines must be: a string is not one line per character)
            self._check_new_keys(keys)   # before the lines are read: a refused call counts no line cut, logs no cut
            if listed(prefixes):
                prefixes = list(prefixes)   # (a generator's too: counted before any line is read)
            _check_counts(len(lines), keys, prefixes if isinstance(prefixes, list) else None)
        cut: set = set()   # the lines cut (source, prefix or both): each counted once in the translator's `truncated`
        src = self.translator.source_ids(lines, cut=cut)   # (raises unless lines is a list: checked above)
        targets = self.translator.target_prefixes(prefixes, cut=cut)   # (raises unless prefixes is a list or None)
        for key, ids, prefix in zip(keys, src, targets or [None for _ in src]):
            if ids or prefix:
                self.waiting.append((key, ids, prefix, self.steps))
            else:
                self.ready.append(Done(key, []))

    def _check_new_keys(self, keys: Sequence[Hashable]) -> None:
        """Refuse a key given twice, or one still pending (waiting, decoding or done and not yet returned by `step`):
        its two lines would come back under one key. A key `step` returned or `cancel` dropped may be used again."""
        if not isinstance(keys, Sequence) or isinstance(keys, (str, *BYTES_LIKE)):   # (bytes: one int key per byte)
            raise TypeError(f"ContinuousDecoder.add: keys must be a list, one per line, got {type(keys).__name__}")
        pending = {w[0] for w in self.waiting} | {r.key for r in self.ready} | set(self.keys.values())
        seen: set = set()
        for i, key in enumerate(keys):
            try:
                again = key in seen or key in pending
            except TypeError:
                raise TypeError(f"ContinuousDecoder.add: keys[{i}] must be hashable, got {type(key).__name__} "
                                f"{key!r}") from None
            if again:
                raise ValueError(f"ContinuousDecoder.add: key {key!r} (keys[{i}]) "
                                 + ("is given twice" if key in seen else "is still pending from an earlier add")
                                 + ": each line needs its own key until `step` returns it")
            seen.add(key)

    def step(self) -> List[Done]:
        """Let waiting sentences join (see the module's rules), advance the batch by one token, and return the
        lines that are done."""
        out, self.ready = self.ready, []
        with self.translator.lock:   # the translator's other calls (other threads) wait
            self._join()
            if self.search.size:
                self.steps += 1
                self.sentence_steps += self.search.size
                done = self.search.step()
                texts = self.translator.texts([hyps for _, hyps in done])
                out += [Done(self.keys.pop(i), nbest, bool(hyps) and reached_limit(hyps[0][0], *self.limits.pop(i)),
                             tuple(ids for ids, _ in hyps)) for (i, hyps), nbest in zip(done, texts)]
        return out

    def cancel(self, keys: Sequence[Hashable]) -> None:
        """Stop translating the lines added under `keys` (nobody waits for them any more): waiting ones are
        forgotten, ones being decoded leave the batch now, and `step` returns none of them."""
        gone = set(keys)
        self.waiting = collections.deque(w for w in self.waiting if w[0] not in gone)
        self.ready = [r for r in self.ready if r[0] not in gone]
        ids = [i for i, key in self.keys.items() if key in gone]
        if ids:
            with self.translator.lock:
                self.search.cancel(ids)
            for i in ids:
                del self.keys[i], self.limits[i]

    def _join(self) -> None:
        """Move waiting sentences into the batch when the rules allow."""
        running, room = self.search.size, self.max_batch - self.search.size
        if not self.waiting or room <= 0 or not self.search.can_join:
            return
        if running and not (self.search.left_last_step or len(self.waiting) >= _JOIN_FRACTION * running
                            or self.steps - self.waiting[0][3] >= MAX_WAIT_STEPS):
            return
        taken = [self.waiting.popleft() for _ in range(min(room, len(self.waiting)))]
        if self.on_join:
            self.on_join([key for key, _, _, _ in taken])
        ids = np.arange(self._next_id, self._next_id + len(taken))
        self._next_id += len(taken)
        self.keys.update(zip(ids.tolist(), [key for key, _, _, _ in taken]))
        src, src_len, max_len = self.translator.source_batch([src for _, src, _, _ in taken], self.translator.ctx)
        self.limits.update(zip(ids.tolist(), zip(max_len.tolist(), [prefix for _, _, prefix, _ in taken])))
        self.search.add(src, src_len, max_len, ids, [prefix for _, _, prefix, _ in taken])
