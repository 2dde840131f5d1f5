"""Dynamic batching for the service: the sentences of concurrent requests are decoded together by one worker
thread that owns the model, as one running search that sentences join while it runs and leave as soon as they are
done (`Translator.continuous`, `nmt.continuous`): continuous batching.

Why one thread: a hybridized MXNet block must not be called from two threads at once, and MXNet calls release
the GIL only partly, so the asyncio event loop hands work to this thread and awaits a future; it never waits
on MXNet itself. Why decode together: a step over 16 sentences costs little more than a step over one. Why
continuously: with a batch per call, a batch runs until its longest sentence is done, while the sentences already
done wait for it and new requests wait for the next batch.

When the worker is idle, the first request waits up to `max_wait_ms` for others to start with it. A request is
answered when all its sentences are done. A request nobody waits for any more (its time limit passed, or its client
left) stops at the next step: its sentences leave the search. Requests with another beam size or n-best wait until
the running search is done; once one has waited longer than `max_wait_ms`, the running search takes no new requests,
so that it ends and the waiting key goes next (no key starves under steady traffic of another). Calls on the model
(`call`) run between two steps.

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
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

logger = logging.getLogger("nmt.serve")

# How long an idle worker waits after a request for others to start with it (later ones join the running search).
# Chosen with the earlier per-call batcher: 16 closed-loop clients come back some 10-20 ms after their answers, and
# at 5 ms they formed batches of 8.2-8.7 sentences, at 20 ms of 12.7-14.0, for 1.2x the served sentences/s. A lone
# request waits at most this long.
DEFAULT_MAX_WAIT_MS = 20.0

NBest = List[Tuple[str, float]]


class Translations(NamedTuple):
    """A request's answer: the n-best list of each line (input order), the lines (indices) whose best translation
    reached the length limit and may be cut off, and the target ids of each line's translations (`Done.ids`)."""
    nbests: List[NBest]
    cut_off: List[int]
    ids: List[tuple] = []


class QueueFull(Exception):
    """The batcher holds `max_queue` sentences already: try again after `retry_after` seconds."""

    def __init__(self, queued: int, limit: int, retry_after: int):
        super().__init__(f"the translation queue is full ({queued} of {limit} sentences waiting); "
                         f"retry after {retry_after} s")
        self.retry_after = retry_after


class Closed(Exception):
    """The batcher is shutting down and takes no new work."""


class TimedOut(asyncio.TimeoutError):
    """A request's time limit passed; `started`: whether its work had reached the model (else it only waited)."""

    def __init__(self, started: bool):
        super().__init__("started" if started else "never started")
        self.started = started


@dataclass
class _Job:
    """One request's work: sentences to translate (with one beam/nbest setting), or a callable on the model."""
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    lines: Sequence[str] = ()
    prefixes: Optional[Sequence[Optional[str]]] = None   # per line, text its translations start with
    key: Tuple[int, int] = (0, 0)             # (beam_size, nbest): only jobs with the same key share a call
    call: Optional[Callable[[], Any]] = None
    deadline: float = float("inf")            # time.monotonic() after which nobody waits for the answer
    queued_at: float = field(default_factory=time.monotonic)
    started: bool = False                     # set by the worker when a sentence joined a search or its call ran
    counted: int = 0                          # what it adds to the queue's count (its sentences; a call 1 or 0)
    results: Dict[int, Any] = field(default_factory=dict)   # n-best lists of the sentences done so far
    cut_off: List[int] = field(default_factory=list)        # those at the length limit

    @property
    def live(self) -> bool:
        """Whether somebody still waits for the answer."""
        return self.deadline > time.monotonic() and not self.future.cancelled()

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
    """Decodes the sentences of concurrent requests together, at most `max_batch` at a time, on one worker thread;
    an idle worker waits at most `max_wait_ms` after the first request for more to start with it."""

    def __init__(self, translator, max_batch: int = 64, max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
                 max_queue: int = 1024):
        if max_batch < 1 or max_queue < 1 or max_wait_ms < 0:
            raise ValueError("max_batch and max_queue must be >= 1 and max_wait_ms >= 0")
        self.translator = translator
        self.max_batch, self.max_wait, self.max_queue = max_batch, max_wait_ms / 1000.0, max_queue
        self._jobs: "queue.Queue[Optional[_Job]]" = queue.Queue()
        self._held: List[_Job] = []          # taken from the queue but not yet started (another key)
        self._decoder = None                  # the running search (`Translator.continuous`) and its key
        self._key: Tuple[int, int] = (0, 0)
        self._active: Dict[int, _Job] = {}    # jobs whose sentences are in the decoder, by id (their keys there)
        self._queued = 0                      # sentences submitted and not yet finished
        self._lock = threading.Lock()
        self._closed = False
        self.batches = 0                      # groups of sentences that started or joined a search together
        self.sentences = 0                    # sentences translated (decoded: blank lines are not)
        self.steps = 0                        # search steps taken
        self.sentence_steps = 0               # sum over the steps of the sentences they advanced
        self.busy_seconds = 0.0               # time spent in search steps
        self._seconds_per_sentence = 0.05     # running estimate, for Retry-After
        self._thread = threading.Thread(target=self._run, name="nmt-serve-worker", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        """Sentences waiting or being translated."""
        return self._queued

    async def translate(self, lines: Sequence[str], beam_size: int, nbest: int, timeout: Optional[float] = None,
                        prefixes: Optional[Sequence[Optional[str]]] = None,
                        sentences: Optional[int] = None) -> Translations:
        """The n-best lists of `lines` (input order), each line's translations starting with its `prefixes` item
        if given, and the lines cut off at the length limit; QueueFull when the queue cannot take them, TimedOut
        after `timeout` seconds (the sentences are then dropped if not yet started). `sentences`: what the queue
        counts of them, the lines decoded (default all; a blank line without a prefix costs nothing)."""
        size = len(lines) if sentences is None else sentences
        return await self._submit(dict(lines=list(lines), key=(beam_size, nbest), prefixes=prefixes), size, timeout)

    async def call(self, fn: Callable[[], Any], timeout: Optional[float] = None, admitted: bool = False) -> Any:
        """Run `fn()` on the worker thread (any use of the model outside translation, e.g. attention). `admitted`:
        a later stage of a request the queue took (its alignment after its translation): not refused as the queue
        fills meanwhile, which would throw its work away and send it to retry all of it."""
        return await self._submit(dict(call=fn), 0 if admitted else 1, timeout)

    async def _submit(self, work: dict, size: int, timeout: Optional[float]) -> Any:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout if timeout else float("inf")
        job = _Job(future=loop.create_future(), loop=loop, deadline=deadline, counted=size, **work)
        with self._lock:
            if self._closed:
                raise Closed("the server is shutting down")
            if self._queued + size > self.max_queue:
                raise QueueFull(self._queued, self.max_queue, self.retry_after())
            self._queued += size
        self._jobs.put(job)
        try:   # on timeout the future is cancelled: the worker skips the job
            return await asyncio.wait_for(job.future, timeout)
        except asyncio.TimeoutError:
            raise TimedOut(job.started) from None

    def retry_after(self) -> int:
        """Seconds until the current queue is likely drained (at least 1)."""
        return max(1, int(self._queued * self._seconds_per_sentence + 0.999))

    def close(self, timeout: float = 30.0) -> None:
        """Refuse new work, finish what is queued, stop the worker thread."""
        with self._lock:
            self._closed = True
        self._jobs.put(None)
        self._thread.join(timeout)
        if not self._thread.is_alive():   # its search (the model's arrays) goes now, not at interpreter exit
            self._decoder = None

    # -- worker thread ----------------------------------------------------------------------------------------------
    def _run(self) -> None:
        """Worker loop: start a search with the oldest job's key, feed it the jobs with that key as they come, step
        it until it is empty, repeat until close()."""
        stopping = False
        while True:
            try:
                if not self._active:
                    batch, stopping = self._next_batch(stopping)
                    if not batch and stopping:
                        return
                    if batch and batch[0].call is not None:
                        self._run_call(batch[0])
                        continue
                    self._start(batch)
                else:
                    stopping = self._admit(stopping)
                if self._active:
                    self._step()
            except Exception as e:   # pylint: disable=broad-except - a bug between steps must not end the thread
                logger.exception("the translation worker failed between steps")
                self._abandon(e)

    def _next_batch(self, stopping: bool) -> Tuple[List[_Job], bool]:
        """Jobs to start a search with: the oldest job, then every job with its key that arrives within max_wait of
        it, up to max_batch sentences. A job with another key is held for a later search."""
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
            self._held.remove(job)
            batch.append(job)
            size += len(job.lines)
        until = first.queued_at + self.max_wait
        while size < self.max_batch and not stopping:
            try:
                job = self._jobs.get(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                stopping = True
            elif job.call is None and job.key == first.key:
                batch.append(job)
                size += len(job.lines)
            else:
                self._held.append(job)
        return batch, stopping

    def _admit(self, stopping: bool) -> bool:
        """Between two steps: calls run; jobs that arrived join the search if they have its key (else are held),
        unless the search is draining (`_draining`); jobs nobody waits for any more are done (their sentences
        leave the search)."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is None:
                stopping = True
            else:
                self._held.append(job)
        for job in [j for j in self._held if j.call is not None or not j.live]:
            self._held.remove(job)
            if job.call is not None:
                self._run_call(job)
            else:
                self._finish(job, error=asyncio.TimeoutError())
        for job in [j for j in self._active.values() if not j.live]:   # its sentences leave the search
            del self._active[id(job)]
            self._finish(job, error=asyncio.TimeoutError())
            self._decoder.cancel([(id(job), i) for i in range(len(job.lines))])
        if not self._draining():
            same = [j for j in self._held if j.key == self._key]
            if same:
                self._held = [j for j in self._held if j.key != self._key]
                self._add(same)
        return stopping

    def _draining(self) -> bool:
        """Whether a held job of another key has waited longer than max_wait: the running search then takes no new
        jobs, so that it ends and the held key starts next (FIFO between keys), instead of starving while jobs of
        the running key keep it busy.

        Why max_wait: it is the delay the service already accepts for the sake of batching. Draining takes as long
        as the longest sentence left in the search (up to max_len steps, some 0.1-1 s), which dominates a held
        request's wait anyway; a longer bound (e.g. a fraction of the 60 s timeout) would keep such a request tens
        of times longer than on an idle server without bounding anything better. The cost is one drain per switch
        of key; jobs of the held key that arrive meanwhile start together with it."""
        now = time.monotonic()
        return any(j.key != self._key and now - j.queued_at > self.max_wait for j in self._held)

    def _start(self, jobs: List[_Job]) -> None:
        """A new search with the jobs' key."""
        self._key = jobs[0].key
        beam, nbest = self._key
        try:
            self._decoder = self.translator.continuous(beam, nbest, self.max_batch)
            self._decoder.on_join = self._joined
        except Exception as e:   # pylint: disable=broad-except - e.g. a beam the search refuses: the callers get it
            for job in jobs:
                self._finish(job, error=e)
            return
        self._add(jobs)

    def _add(self, jobs: List[_Job]) -> None:
        """Hand the live jobs' sentences to the search; the others are done (nobody waits)."""
        for job in jobs:
            if not job.live:
                self._finish(job, error=asyncio.TimeoutError())
            elif not job.lines:
                self._finish(job, Translations([], []))
            else:
                try:   # (a cut line: its answer's warning names it, as text[i], and the log has the answer's)
                    with self.translator.unreported():
                        self._decoder.add(job.lines, [(id(job), i) for i in range(len(job.lines))], job.prefixes)
                except Exception as e:   # pylint: disable=broad-except - e.g. the tokenizer failed: the caller gets it
                    logger.exception("could not start translating a request")
                    self._finish(job, error=e)
                    continue
                self._active[id(job)] = job
        self.batches += 1

    def _joined(self, keys: Sequence[Tuple[int, int]]) -> None:
        """Lines of these requests joined the search: their work reached the model (timed out, such a request is
        told what makes it cheaper; one that only waited, that the server is busy)."""
        for job_id, _ in keys:
            if job_id in self._active:
                self._active[job_id].started = True

    def _step(self) -> None:
        """One step of the search; jobs whose sentences are all done get their answers."""
        t0, before = time.perf_counter(), self._decoder.sentence_steps
        try:
            self._record(self._decoder.step(), t0, before)
        except Exception as e:   # the model (or this bookkeeping) failed: every request in the search gets the error
            logger.exception("translation step failed")
            self._abandon(e)

    def _abandon(self, error: BaseException) -> None:
        """The running search is dropped: every request in it gets `error` (the held ones start a new search)."""
        jobs, self._active, self._decoder = self._active, {}, None
        for job in jobs.values():
            self._finish(job, error=error)

    def _record(self, done: list, t0: float, before: int) -> None:
        """Count a step, and hand each job whose sentences are all `done` its answer."""
        seconds = time.perf_counter() - t0
        self.busy_seconds += seconds
        self.steps += 1
        self.sentence_steps += self._decoder.sentence_steps - before
        for d in done:   # `nmt.continuous.Done`
            job_id, i = d.key
            self._active[job_id].results[i] = d.nbest, d.ids
            if d.cut_off:
                self._active[job_id].cut_off.append(i)
        decoded = sum(1 for d in done if d.nbest)   # (a blank line comes back undecoded: as the queue, not counted)
        if decoded:   # model time per sentence so far, for Retry-After
            self.sentences += decoded
            self._seconds_per_sentence = self.busy_seconds / self.sentences
        for job_id in dict.fromkeys(d.key[0] for d in done):   # the jobs that got answers, in order
            job = self._active[job_id]
            if len(job.results) == len(job.lines):
                del self._active[job_id]
                lines = [job.results[i] for i in range(len(job.lines))]
                self._finish(job, Translations([n for n, _ in lines], sorted(job.cut_off), [t for _, t in lines]))

    def _run_call(self, job: _Job) -> None:
        if not job.live:
            self._finish(job, error=asyncio.TimeoutError())
            return
        job.started = True
        try:
            result = job.call()
        except Exception as e:   # pylint: disable=broad-except - the caller gets it
            self._finish(job, error=e)
            return
        self._finish(job, result)

    def _finish(self, job: _Job, result: Any = None, error: Optional[BaseException] = None) -> None:
        """The job leaves the queue count, then its answer goes out (a client that has its answer sees the queue
        without it)."""
        with self._lock:
            self._queued -= job.counted
        job.resolve(result, error)
