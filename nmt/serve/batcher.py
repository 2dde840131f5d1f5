"""Dynamic batching for the service: the sentences of concurrent requests are coalesced into one
`Translator.translate_nbest` call, run by the one worker thread that owns the model.

Why one thread: a hybridized MXNet block must not be called from two threads at once, and MXNet calls release
the GIL only partly, so the asyncio event loop hands work to this thread and awaits a future; it never waits
on MXNet itself. Why coalesce: a decoding batch of 16 sentences costs little more than a batch of one, so
requests that arrive within `max_wait_ms` of each other share one length-sorted search.

The queue is bounded in sentences (`max_queue`): `submit` raises `QueueFull` at once instead of letting a burst
grow memory and latency without limit; the service answers that with 503 and Retry-After.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Tuple

logger = logging.getLogger("nmt.serve")

# How long a batch waits for more sentences. 16 closed-loop clients sending one sentence each come back over some
# 10-20 ms after their answers; at 5 ms they formed batches of 8.2-8.7 sentences, at 20 ms of 12.7-14.0, for 1.2x
# the served sentences/s and a lower median latency (docs/serving.md). A lone request waits at most this long.
DEFAULT_MAX_WAIT_MS = 20.0

NBest = List[Tuple[str, float]]


class QueueFull(Exception):
    """The batcher holds `max_queue` sentences already: try again after `retry_after` seconds."""

    def __init__(self, queued: int, limit: int, retry_after: int):
        super().__init__(f"the translation queue is full ({queued} of {limit} sentences waiting); "
                         f"retry after {retry_after} s")
        self.retry_after = retry_after


class Closed(Exception):
    """The batcher is shutting down and takes no new work."""


@dataclass
class _Job:
    """One request's work: sentences to translate (with one beam/nbest setting), or a callable on the model."""
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    lines: Sequence[str] = ()
    key: Tuple[int, int] = (0, 0)             # (beam_size, nbest): only jobs with the same key share a call
    call: Optional[Callable[[], Any]] = None
    deadline: float = float("inf")            # time.monotonic() after which nobody waits for the answer
    queued_at: float = field(default_factory=time.monotonic)

    def resolve(self, result: Any = None, error: Optional[BaseException] = None) -> None:
        """Hand the result (or error) to the waiting request on its event loop; nothing if it gave up."""
        def settle() -> None:
            if not self.future.done():
                if error is not None:
                    self.future.set_exception(error)
                else:
                    self.future.set_result(result)
        try:
            self.loop.call_soon_threadsafe(settle)
        except RuntimeError:   # the loop is closed: the request is gone
            pass


class Batcher:
    """Coalesces sentences of concurrent requests into batches of at most `max_batch` sentences, waiting at most
    `max_wait_ms` after the first queued job for more; runs them on one worker thread in arrival order."""

    def __init__(self, translator, max_batch: int = 64, max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
                 max_queue: int = 1024):
        if max_batch < 1 or max_queue < 1 or max_wait_ms < 0:
            raise ValueError("max_batch and max_queue must be >= 1 and max_wait_ms >= 0")
        self.translator = translator
        self.max_batch, self.max_wait, self.max_queue = max_batch, max_wait_ms / 1000.0, max_queue
        self._jobs: "queue.Queue[Optional[_Job]]" = queue.Queue()
        self._held: List[_Job] = []          # taken from the queue but not yet run (a different key)
        self._queued = 0                      # sentences submitted and not yet finished
        self._lock = threading.Lock()
        self._closed = False
        self.batches = 0                      # translate calls made (for /health and the tests)
        self.sentences = 0                    # sentences translated
        self.busy_seconds = 0.0               # time spent in translate calls
        self._seconds_per_sentence = 0.05     # running estimate, for Retry-After
        self._last_end = 0.0                  # time.monotonic() when the last batch finished
        self._thread = threading.Thread(target=self._run, name="nmt-serve-worker", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        """Sentences waiting or being translated."""
        return self._queued

    async def translate(self, lines: Sequence[str], beam_size: int, nbest: int,
                        timeout: Optional[float] = None) -> List[NBest]:
        """The n-best lists of `lines` (input order); QueueFull when the queue cannot take them,
        asyncio.TimeoutError after `timeout` seconds (the sentences are then dropped if not yet started)."""
        return await self._submit(dict(lines=list(lines), key=(beam_size, nbest)), len(lines), timeout)

    async def call(self, fn: Callable[[], Any], timeout: Optional[float] = None) -> Any:
        """Run `fn()` on the worker thread (any use of the model outside translation, e.g. attention)."""
        return await self._submit(dict(call=fn), 1, timeout)

    async def _submit(self, work: dict, size: int, timeout: Optional[float]) -> Any:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout if timeout else float("inf")
        job = _Job(future=loop.create_future(), loop=loop, deadline=deadline, **work)
        with self._lock:
            if self._closed:
                raise Closed("the server is shutting down")
            if self._queued + size > self.max_queue:
                raise QueueFull(self._queued, self.max_queue, self.retry_after())
            self._queued += size
        self._jobs.put(job)
        return await asyncio.wait_for(job.future, timeout)   # on timeout the future is cancelled: the worker skips it

    def retry_after(self) -> int:
        """Seconds until the current queue is likely drained (at least 1)."""
        return max(1, int(self._queued * self._seconds_per_sentence + 0.999))

    def close(self, timeout: float = 30.0) -> None:
        """Refuse new work, finish what is queued, stop the worker thread."""
        with self._lock:
            self._closed = True
        self._jobs.put(None)
        self._thread.join(timeout)

    # -- worker thread ----------------------------------------------------------------------------------------------
    def _run(self) -> None:
        """Worker loop: take a batch of jobs with one key, run it, repeat until close()."""
        stopping = False
        while True:
            batch, stopping = self._next_batch(stopping)
            if not batch and stopping:
                return
            if batch:
                self._execute(batch)

    def _next_batch(self, stopping: bool) -> Tuple[List[_Job], bool]:
        """Jobs to run together: the oldest job, then every job with its key that arrives within max_wait of it,
        up to max_batch sentences. A job with another key is held for a later batch."""
        first = self._held.pop(0) if self._held else None
        while first is None:   # after close(): drain what is still queued without waiting
            try:
                first = self._jobs.get_nowait() if stopping else self._jobs.get()
            except queue.Empty:
                return [], True
            if first is None:
                stopping = True
        if first.call is not None:
            return [first], stopping
        batch, size = [first], len(first.lines)
        for job in [j for j in self._held if j.call is None and j.key == first.key]:
            if size + len(job.lines) > self.max_batch:
                break
            self._held.remove(job)
            batch.append(job)
            size += len(job.lines)
        # Counted from the end of the previous batch too: the clients it answered send their next sentences within
        # a few ms, and without this wait the requests held during that batch would leave as a half-full batch.
        until = max(first.queued_at, self._last_end) + self.max_wait
        while size < self.max_batch and not stopping:
            try:
                job = self._jobs.get(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                stopping = True
            elif job.call is None and job.key == first.key and size + len(job.lines) <= self.max_batch:
                batch.append(job)
                size += len(job.lines)
            else:
                self._held.append(job)
        return batch, stopping

    def _execute(self, batch: List[_Job]) -> None:
        """Run one batch on the model and hand each job its share; expired jobs are skipped, errors passed on."""
        now = time.monotonic()
        live = [j for j in batch if j.deadline > now and not j.future.cancelled()]
        answers: List[Tuple[_Job, Any, Optional[BaseException]]] = []
        try:
            if live and live[0].call is not None:
                answers = [(live[0], live[0].call(), None)]
            elif live:
                answers = [(job, result, None) for job, result in zip(live, self._translate(live))]
        except Exception as e:   # the model failed on this batch: every request in it gets the error
            logger.exception("translation batch failed")
            answers = [(job, None, e) for job in live]
        finally:
            self._last_end = time.monotonic()
            with self._lock:   # before the answers go out: a client that has its answer sees the queue without it
                self._queued -= sum(len(j.lines) if j.call is None else 1 for j in batch)
        for job, result, error in answers:
            job.resolve(result, error)

    def _translate(self, jobs: List[_Job]) -> List[List[NBest]]:
        """Every job's n-best lists, from one translate call over all their sentences."""
        lines = [x for j in jobs for x in j.lines]
        beam, nbest = jobs[0].key
        t0 = time.perf_counter()
        out = self.translator.translate_nbest(lines, nbest, beam_size=beam)
        seconds = time.perf_counter() - t0
        self.busy_seconds += seconds
        if lines:   # smoothed cost per sentence, for Retry-After
            self._seconds_per_sentence = 0.8 * self._seconds_per_sentence + 0.2 * seconds / len(lines)
        self.batches += 1
        self.sentences += len(lines)
        shares, k = [], 0
        for job in jobs:
            shares.append(out[k:k + len(job.lines)])
            k += len(job.lines)
        return shares
