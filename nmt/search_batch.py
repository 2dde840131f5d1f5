"""The sentences a search advances together (`SearchBatch`): their decoder state and the search's own per-row
variables (`Hyps`), one step at a time, and the tokens and back-pointers of every step, kept on the device until
sentences leave the batch and then traced back on the host. Used by `nmt.search`, whose docstring gives the rules.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np

from nmt.models.base import DecoderState
from nmt.parallel import to_device

# A batch sheds its done sentences once this fraction of it is done (each change of batch shape re-plans the
# step graph, which costs about one step).
_COMPACT_FRACTION = 0.25


@dataclasses.dataclass(frozen=True)
class Hyps(DecoderState):
    """The search's own per-row variables, selected together with the decoder state when sentences leave: the last
    tokens, every row's length limit, the tokens taken (`lengths`), finished flags and the raw scores."""

    prev: mx.nd.NDArray
    limits: mx.nd.NDArray
    lengths: mx.nd.NDArray
    finished: mx.nd.NDArray
    scores: Optional[mx.nd.NDArray] = None


class _Segment:
    """Steps between two changes of the batch: its sentences (the caller's ids) and, per step, the back-pointers
    (beam index within the sentence) and the emitted tokens (-1: none), (steps, B, K) on the host."""

    def __init__(self, ids: np.ndarray, beams: np.ndarray, emitted: np.ndarray):
        self.ids, self.beams, self.emitted = ids, beams, emitted


def _trace(segments: List[_Segment], ids: Sequence[int], K: int) -> Dict[int, np.ndarray]:
    """For the sentences `ids`, (steps, K) tokens of their final slots, traced back through the back-pointers."""
    wanted = set(int(i) for i in ids)
    slots: Dict[int, np.ndarray] = {}
    parts: Dict[int, list] = {i: [] for i in wanted}
    for seg in reversed(segments):
        pos = [p for p, i in enumerate(seg.ids) if int(i) in wanted]
        if not pos or not len(seg.emitted):
            continue
        emitted, beams = seg.emitted[:, pos], seg.beams[:, pos]
        slot = np.stack([slots.get(int(seg.ids[p]), np.arange(K)) for p in pos])   # (B', K); the last segment first
        history = np.empty_like(emitted)
        for t in range(len(emitted) - 1, -1, -1):
            history[t] = np.take_along_axis(emitted[t], slot, axis=1)
            slot = np.take_along_axis(beams[t], slot, axis=1)
        for b, p in enumerate(pos):
            slots[int(seg.ids[p])] = slot[b]
            parts[int(seg.ids[p])].append(history[:, b])
    return {i: np.concatenate(parts[i][::-1], axis=0) if parts[i] else np.zeros((0, K), np.int64) for i in wanted}


# advance(state, hyps, first) -> (state, hyps, emitted (BK,), back-pointer rows (BK,) or None, done (B,))
Advance = Callable[[DecoderState, Hyps, bool], tuple]
# a sentence that left: id, (steps, K) tokens of its final slots, their raw scores and lengths (K,) (beam search)
Left = Tuple[int, np.ndarray, Optional[Tuple[np.ndarray, np.ndarray]]]


class SearchBatch:
    """The sentences searched together, K rows each, and the steps they took: `step` runs `advance` once; the done
    sentences leave (their tokens traced back at once, `take`) and new ones may `join` between two steps."""

    def __init__(self, advance: Advance, K: int):
        self.advance, self.K = advance, K
        self.state: Optional[DecoderState] = None
        self.hyps: Optional[Hyps] = None
        self.flags: Optional[mx.nd.NDArray] = None   # the last step's sentence-done flags, read one step late
        self.first = False                             # the state has one row per sentence, not K
        self.ids = np.zeros(0, np.int64)
        self.segments: List[_Segment] = []
        self.records: list = []
        self.left: List[Left] = []

    @property
    def size(self) -> int:
        """Sentences in the batch."""
        return len(self.ids)

    def join(self, state: DecoderState, hyps: Hyps, ids: np.ndarray, first: bool = False) -> None:
        """Add sentences `ids` with their K rows of `hyps` and of `state` (or one row each with `first`, only into
        an empty batch: its first step then runs the model once per sentence)."""
        self._close()
        if self.state is None:
            self.state, self.hyps, self.flags, self.first, self.ids = state, hyps, None, first, np.asarray(ids)
            return
        if first:
            raise ValueError("SearchBatch.join: first=True needs an empty batch")
        if self.first:   # no step taken yet: one row per sentence so far
            self.state, self.first = self.state.repeat(self.K), False
        self.state = DecoderState.concat([self.state, state])
        self.hyps = DecoderState.concat([self.hyps, hyps])
        if self.flags is not None:
            self.flags = mx.nd.concat(self.flags, mx.nd.zeros(len(ids), ctx=self.flags.context), dim=0)
        self.ids = np.concatenate([self.ids, ids])

    def step(self) -> None:
        """One step of every sentence; the ones done before it leave (a step queued after all were done is
        dropped)."""
        new_state, new_hyps, emitted, rows, new_flags = self.advance(self.state, self.hyps, self.first)
        done = None if self.flags is None else self.flags.asnumpy() > 0.5
        if done is not None and done.all():
            # The step just queued is dropped: let it finish, so that no computation outlives the search. A process
            # that exits while MXNet's engine still runs one aborts ("terminate called without an active
            # exception"): nmt-translate exited 134 in about 1 run of 6 on the tiny test model.
            new_flags.wait_to_read()
            self._leave(np.arange(self.size))
            return
        self.state, self.hyps, self.flags, self.first = new_state, new_hyps, new_flags, False
        self.records.append((emitted, rows))
        if done is not None and done.sum() >= max(1.0, _COMPACT_FRACTION * self.size):
            self._leave(np.flatnonzero(done))   # done before this step means done after it

    def take(self) -> List[Left]:
        """The sentences that left since the last call."""
        out, self.left = self.left, []
        return out

    def _close(self) -> None:
        """Bring the current segment's tokens and back-pointers to the host."""
        if self.records:
            n, B, K = len(self.records), self.size, self.K
            emitted = mx.nd.stack(*[e for e, _ in self.records]).asnumpy().astype(np.int64).reshape(n, B, K)
            if self.records[0][1] is None:
                beams = np.zeros_like(emitted)
            else:
                rows = mx.nd.stack(*[r for _, r in self.records]).asnumpy().astype(np.int64).reshape(n, B, K)
                beams = rows - (np.arange(B) * K)[None, :, None]
            self.segments.append(_Segment(self.ids, beams, emitted))
        self.records = []

    def drop(self, ids: Sequence[int]) -> None:
        """The sentences `ids` leave now, unfinished and unreported (nobody waits for them any more)."""
        positions = np.flatnonzero(np.isin(self.ids, np.asarray(ids, dtype=np.int64)))
        if len(positions):
            self._leave(positions, report=False)

    def _leave(self, positions: np.ndarray, report: bool = True) -> None:
        """The sentences at `positions` leave with their hypotheses as they are (to `take` if `report`)."""
        self._close()
        K, ctx = self.K, self.hyps.prev.context
        if report:
            gone = self.ids[positions]
            finals = [None] * len(gone)
            if self.hyps.scores is not None:
                raw, lengths = (x.asnumpy().reshape(-1, K)[positions] for x in (self.hyps.scores, self.hyps.lengths))
                finals = list(zip(raw, lengths))
            histories = _trace(self.segments, gone, K)
            self.left += [(int(i), histories[int(i)], final) for i, final in zip(gone, finals)]
        keep = np.setdiff1d(np.arange(self.size), positions)
        if len(keep) == 0:
            self.state = self.hyps = self.flags = None
            self.ids = np.zeros(0, np.int64)
        else:
            kept = to_device(keep, ctx)
            self.state, self.hyps = self.state.select(kept), self.hyps.select(kept)
            self.flags = None if self.flags is None else mx.nd.take(self.flags, kept)
            self.ids = self.ids[keep]
        self.segments = [s for s in self.segments if np.isin(s.ids, self.ids).any()]

