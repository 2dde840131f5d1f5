"""The service's dynamic batcher over a stand-in translator: coalescing, continuous batching (sentences join a
running search and leave when done), batch bounds, keys kept apart and taking turns, the bounded queue, per-request
time limits, errors, shutdown, and an event loop that keeps running while the model works."""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import List

import pytest

from nmt.continuous import Done
from nmt.serve.batcher import Batcher, Closed, QueueFull, TimedOut


class FakeTranslator:
    """The translator side of the batcher (`continuous`): a search in which sentence x takes `steps(x)` steps once
    started, at most max_batch at a time, `seconds` per step; every step records its running sentences as a call
    (lines, nbest, beam, thread). Hypothesis j of line x is x reversed with j stars; a line ending in "!" is cut off
    at the length limit."""

    def __init__(self, seconds: float = 0.0, fail_on: str = None, steps=lambda line: 1):
        self.seconds, self.fail_on, self.steps = seconds, fail_on, steps
        self.calls: List[tuple] = []
        self.gate = threading.Event()
        self.gate.set()

    def continuous(self, beam_size, nbest, max_batch):
        return FakeDecoder(self, beam_size, nbest, max_batch)

    @contextlib.contextmanager
    def unreported(self):   # (the Translator's: the lines it cuts within are not logged)
        yield []


class FakeDecoder:
    """`nmt.continuous.ContinuousDecoder`'s protocol over FakeTranslator's rules."""

    def __init__(self, fake, beam, nbest, max_batch):
        self.fake, self.beam, self.nbest, self.max_batch = fake, beam, nbest, max_batch
        self.waiting, self.running = [], []
        self.steps = self.sentence_steps = 0
        self.on_join = None

    @property
    def pending(self):
        return len(self.waiting) + len(self.running)

    def add(self, lines, keys, prefixes=None):
        self.waiting += [[key, line, self.fake.steps(line)] for key, line in zip(keys, lines)]

    def cancel(self, keys):
        self.waiting = [r for r in self.waiting if r[0] not in keys]
        self.running = [r for r in self.running if r[0] not in keys]

    def step(self):
        joined = self.waiting[:max(0, self.max_batch - len(self.running))]
        self.waiting, self.running = self.waiting[len(joined):], self.running + joined
        if joined and self.on_join:
            self.on_join([key for key, _, _ in joined])
        self.fake.gate.wait(10)   # (stuck computing the step)
        lines = [line for _, line, _ in self.running]
        self.fake.calls.append((lines, self.nbest, self.beam, threading.current_thread().name))
        self.steps += 1
        self.sentence_steps += len(lines)
        time.sleep(self.fake.seconds)
        if self.fake.fail_on in lines:
            raise RuntimeError("model failed")
        for r in self.running:
            r[2] -= 1
        done = [r for r in self.running if r[2] <= 0 or not r[1]]
        self.running = [r for r in self.running if r not in done]
        return [Done(key, [(x[::-1] + "*" * j, -float(j)) for j in range(self.nbest)] if x else [], x.endswith("!"))
                for key, x, _ in done]


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def fake():
    return FakeTranslator(seconds=0.01)


def test_concurrent_requests_share_batches_and_keep_their_order(fake):
    b = Batcher(fake, max_batch=64, max_wait_ms=50)

    async def main():
        return await asyncio.gather(*[b.translate([f"s{i}", f"t{i}", ""], 4, 1) for i in range(16)])
    out = run(main())
    b.close()
    for i, r in enumerate(out):
        assert [h[0][0] if h else "" for h in r.nbests] == [f"s{i}"[::-1], f"t{i}"[::-1], ""]
    assert len(fake.calls) <= 2, f"16 concurrent requests took {len(fake.calls)} model calls"
    assert {c[3] for c in fake.calls} == {"nmt-serve-worker"}


def test_batches_never_exceed_max_batch_and_answers_stay_whole(fake):
    b = Batcher(fake, max_batch=8, max_wait_ms=30)

    async def main():
        return await asyncio.gather(*[b.translate([f"{i}-{k}" for k in range(3)], 1, 1) for i in range(10)])
    out = run(main())
    b.close()
    assert all(len(c[0]) <= 8 for c in fake.calls)
    assert sum(len(c[0]) for c in fake.calls) == 30
    assert out[7].nbests == [[(f"7-{k}"[::-1], 0.0)] for k in range(3)]


def test_different_beam_or_nbest_never_share_a_call(fake):
    b = Batcher(fake, max_batch=64, max_wait_ms=50)

    async def main():
        return await asyncio.gather(b.translate(["a"], 1, 1), b.translate(["b"], 4, 2), b.translate(["c"], 1, 1))
    out = run(main())
    b.close()
    assert out[1].nbests == [[("b", 0.0), ("b*", -1.0)]]
    assert sorted((c[2], c[1], tuple(c[0])) for c in fake.calls) == [(1, 1, ("a", "c")), (4, 2, ("b",))]


def test_each_request_gets_its_own_lines_cut_off_at_the_length_limit(fake):
    b = Batcher(fake, max_batch=64, max_wait_ms=50)

    async def main():
        return await asyncio.gather(b.translate(["a!", "b", "c!", ""], 1, 1), b.translate(["d", "e!"], 1, 1),
                                    b.translate(["f"], 1, 1))
    out = run(main())
    b.close()
    assert [r.cut_off for r in out] == [[0, 2], [1], []]
    assert out[0].nbests == [[("!a", 0.0)], [("b", 0.0)], [("!c", 0.0)], []]


def test_full_queue_refuses_at_once_with_retry_after():
    """A later stage of a request the queue took is not refused as the queue fills meanwhile: /translate with
    alignment had its translation thrown away by a 503 "queue is full" for its alignment call, and its retry paid
    for all of it again."""
    fake = FakeTranslator()
    fake.gate.clear()   # the model is busy: nothing leaves the queue
    b = Batcher(fake, max_batch=4, max_wait_ms=0, max_queue=5)

    async def main():
        first = asyncio.ensure_future(b.translate(["a", "b", "c", "d"], 1, 1))
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFull) as e:
            await b.translate(["e", "f"], 1, 1)
        assert e.value.retry_after >= 1 and "5 sentences" in str(e.value)
        more = asyncio.ensure_future(b.call(lambda: "first stage"))   # (the last place in the queue)
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFull):
            await b.call(lambda: "another first stage")
        later = asyncio.ensure_future(b.call(lambda: "aligned", admitted=True))
        await asyncio.sleep(0.05)
        assert b.queued == 5   # (it adds nothing to the count)
        fake.gate.set()
        return await first, await more, await later
    first, more, later = run(main())
    assert len(first.nbests) == 4 and (more, later) == ("first stage", "aligned")
    assert b.queued == 0
    b.close()


def test_timed_out_request_is_dropped_before_it_reaches_the_model():
    fake = FakeTranslator()
    fake.gate.clear()
    b = Batcher(fake, max_batch=1, max_wait_ms=0)

    async def main():
        first = asyncio.ensure_future(b.translate(["first"], 1, 1))
        await asyncio.sleep(0.05)
        with pytest.raises(asyncio.TimeoutError):
            await b.translate(["late"], 1, 1, timeout=0.05)
        fake.gate.set()
        return await first
    run(main())
    b.close()
    assert [c[0] for c in fake.calls] == [["first"]]
    assert b.queued == 0


def test_model_error_reaches_its_requests_and_the_worker_survives():
    fake = FakeTranslator(fail_on="boom")
    b = Batcher(fake, max_batch=8, max_wait_ms=0)

    async def main():
        with pytest.raises(RuntimeError, match="model failed"):
            await b.translate(["boom"], 1, 1)
        return await b.translate(["ok"], 1, 1)
    assert run(main()).nbests == [[("ko", 0.0)]]
    b.close()


def test_a_failure_after_a_step_fails_its_requests_and_the_worker_survives():
    """A step whose answers cannot be handed out (here: a key of no request) killed the worker thread, and every
    request after it waited for its time limit."""
    class Garbled(FakeTranslator):
        def continuous(self, beam_size, nbest, max_batch):
            decoder = super().continuous(beam_size, nbest, max_batch)
            step = decoder.step

            def garbled():
                bad = any(line == "bad" for _, line, _ in decoder.waiting + decoder.running)
                return step() + ([Done(("nobody", 0), [], False)] if bad else [])
            decoder.step = garbled
            return decoder
    b = Batcher(Garbled(), max_batch=8, max_wait_ms=0)

    async def main():
        with pytest.raises(KeyError):
            await b.translate(["bad"], 1, 1, timeout=5)
        return await b.translate(["ok"], 1, 1, timeout=5)
    assert run(main()).nbests == [[("ko", 0.0)]] and b.queued == 0
    b.close()


def test_call_runs_on_the_worker_thread(fake):
    b = Batcher(fake)
    assert run(b.call(lambda: threading.current_thread().name)) == "nmt-serve-worker"
    b.close()


def test_close_finishes_queued_work_then_refuses():
    fake = FakeTranslator(seconds=0.05)
    b = Batcher(fake, max_batch=1, max_wait_ms=0)

    async def main():
        jobs = [asyncio.ensure_future(b.translate([f"x{i}"], 1, 1)) for i in range(3)]
        await asyncio.sleep(0.01)
        closer = threading.Thread(target=b.close)
        closer.start()
        out = await asyncio.gather(*jobs)
        closer.join()
        with pytest.raises(Closed):
            await b.translate(["y"], 1, 1)
        return out
    assert [r.nbests[0][0][0] for r in run(main())] == ["0x", "1x", "2x"]


def test_event_loop_keeps_running_while_the_model_works():
    fake = FakeTranslator(seconds=0.3)
    b = Batcher(fake, max_wait_ms=0)

    async def main():
        ticks = 0
        job = asyncio.ensure_future(b.translate(["a"], 1, 1))
        while not job.done():
            await asyncio.sleep(0.01)
            ticks += 1
        return ticks
    assert run(main()) >= 10   # ~30 expected: the loop was free during the 0.3 s call
    b.close()


def test_a_short_sentence_joins_a_running_search_and_is_answered_first():
    fake = FakeTranslator(seconds=0.01, steps=len)   # "x" * 40 takes 40 steps, "ab" 2
    b = Batcher(fake, max_batch=8, max_wait_ms=0)
    order = []

    async def main():
        async def one(line):
            out = await b.translate([line], 1, 1)
            order.append(line)
            return out
        long = asyncio.ensure_future(one("x" * 40))
        await asyncio.sleep(0.08)   # the long sentence is some steps in
        short = await one("ab")
        return short, await long
    short, long = run(main())
    b.close()
    assert short.nbests == [[("ba", 0.0)]] and long.nbests == [[("x" * 40, 0.0)]]
    assert order == ["ab", "x" * 40]
    assert any(c[0] == ["x" * 40, "ab"] for c in fake.calls), "the short sentence never ran beside the long one"
    assert len(fake.calls) == 40, "the long sentence's search was restarted"
    assert b.sentences == 2 and b.steps == 40 and b.sentence_steps == 42


def test_blank_lines_done_with_sentences_in_one_step_are_not_counted_as_translated():
    """The sentences translated (/health's, and the model's time per sentence behind Retry-After) count the lines
    decoded: blank lines come back from the same step as the sentences beside them, and counting them too would
    shrink the time per sentence (Retry-After) with every blank line. Nor does the queue count them (`sentences`)."""
    fake = FakeTranslator()   # (every line is done in one step: the blank ones with the others)
    b = Batcher(fake, max_batch=8, max_wait_ms=0, max_queue=2)
    out = run(b.translate(["ab", "", "", "cd", ""], 1, 1, sentences=2))
    b.close()
    assert [n[0][0] if n else "" for n in out.nbests] == ["ba", "", "", "dc", ""]
    assert len(fake.calls) == 1 and b.sentences == 2
    assert b._seconds_per_sentence == b.busy_seconds / 2


def test_another_key_waits_until_the_running_search_is_done():
    """A request of another key waits until the running search is done; one of the running key that arrives with
    it joins the search (the other has not yet waited max_wait, after which the search would take no new ones)."""
    fake = FakeTranslator(seconds=0.01, steps=len)
    b = Batcher(fake, max_batch=8, max_wait_ms=20)

    async def main():
        first = asyncio.ensure_future(b.translate(["a" * 10], 1, 1))
        await asyncio.sleep(0.05)   # the first starts after 20 ms alone, and runs for 10 steps of 10 ms
        other = asyncio.ensure_future(b.translate(["bb"], 4, 2))
        same = asyncio.ensure_future(b.translate(["cc"], 1, 1))
        return await asyncio.gather(first, other, same)
    out = run(main())
    b.close()
    assert out[1].nbests == [[("bb", 0.0), ("bb*", -1.0)]]
    keys = [(c[2], c[1]) for c in fake.calls]
    assert keys == [(1, 1)] * 10 + [(4, 2)] * 2, "a search of another key ran before the first was done"
    assert any(c[0] == ["a" * 10, "cc"] for c in fake.calls), "a request with the running key did not join it"


def test_a_failing_tokenizer_fails_its_request_only():
    class Picky(FakeTranslator):
        def continuous(self, beam_size, nbest, max_batch):
            decoder = super().continuous(beam_size, nbest, max_batch)
            add = decoder.add

            def checked(lines, keys, prefixes=None):
                if "bad" in lines:
                    raise ValueError("cannot tokenize")
                add(lines, keys, prefixes)
            decoder.add = checked
            return decoder
    b = Batcher(Picky(), max_batch=8, max_wait_ms=30)

    async def main():
        return await asyncio.gather(b.translate(["ok"], 1, 1), b.translate(["bad"], 1, 1), return_exceptions=True)
    good, bad = run(main())
    b.close()
    assert good.nbests == [[("ko", 0.0)]] and isinstance(bad, ValueError) and b.queued == 0


def test_a_search_that_cannot_start_fails_its_requests_and_the_worker_goes_on():
    class NoBeam3(FakeTranslator):
        def continuous(self, beam_size, nbest, max_batch):
            if beam_size == 3:
                raise ValueError("beam_size 3 is not allowed")
            return super().continuous(beam_size, nbest, max_batch)
    b = Batcher(NoBeam3(), max_batch=8, max_wait_ms=0)

    async def main():
        with pytest.raises(ValueError, match="beam_size 3"):
            await b.translate(["x"], 3, 1)
        return await b.translate(["ok"], 1, 1)
    assert run(main()).nbests == [[("ko", 0.0)]] and b.queued == 0
    b.close()


def test_another_key_is_not_starved_by_steady_traffic_of_the_running_key():
    """Under steady traffic of one key the running search never emptied, so a request with another beam size or
    n-best (held until it does) never started and timed out (504). Once it has waited max_wait, the running search
    takes no new requests, ends, and the held key goes next; the steady traffic goes on after it."""
    fake = FakeTranslator(seconds=0.005, steps=len)
    b = Batcher(fake, max_batch=16, max_wait_ms=20)
    served = []

    async def main():
        stop = asyncio.Event()

        async def client(k):   # closed loop: a new request as soon as the last is answered
            while not stop.is_set():
                await b.translate(["x" * (5 + 2 * k)], 1, 1, timeout=10)
                served.append(k)
        clients = [asyncio.ensure_future(client(k)) for k in range(8)]
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        other = await b.translate(["ab"], 4, 2, timeout=3)
        waited = time.monotonic() - t0
        before, deadline = len(served), time.monotonic() + 10
        while len(served) - before <= 10 and time.monotonic() < deadline:   # (0.2 s here; more on a slow host)
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*clients)
        return other, waited, len(served) - before
    other, waited, after = run(main())
    b.close()
    assert other.nbests == [[("ba", 0.0), ("ba*", -1.0)]]
    assert waited < 1.0, f"the request of another key waited {waited:.2f} s"
    assert after > 10, "the steady traffic did not go on after the other key's search"
    assert b.queued == 0


def test_a_timed_out_request_says_whether_it_had_started():
    fake = FakeTranslator()
    fake.gate.clear()   # the model is stuck in a step: the first request has started, the second never does
    b = Batcher(fake, max_batch=1, max_wait_ms=0)

    async def main():
        first = asyncio.ensure_future(b.translate(["first"], 1, 1, timeout=0.2))
        await asyncio.sleep(0.05)
        with pytest.raises(TimedOut) as late:
            await b.translate(["late"], 1, 1, timeout=0.05)
        with pytest.raises(TimedOut) as started:
            await first
        fake.gate.set()
        return late.value, started.value
    late, started = run(main())
    b.close()
    assert not late.started and started.started and isinstance(late, asyncio.TimeoutError)
    assert b.queued == 0


def test_a_request_waiting_for_room_in_the_search_has_not_started():
    """Lines handed to the running search wait there for room (--max-batch): such a request timed out as one that
    had started, and a one-word request queued behind others was told to send fewer sentences (docs/serving.md:
    a request that never started is told that the server is busy)."""
    fake = FakeTranslator(seconds=0.01, steps=len)   # the long line takes 100 steps, about 1 s
    b = Batcher(fake, max_batch=1, max_wait_ms=0)

    async def main():
        first = asyncio.ensure_future(b.translate(["x" * 100], 1, 1, timeout=10))
        await asyncio.sleep(0.05)
        with pytest.raises(TimedOut) as late:
            await b.translate(["y"], 1, 1, timeout=0.1)
        return late.value, await first
    late, first = run(main())
    b.close()
    assert not late.started and first.nbests == [[("x" * 100, -0.0)]]


def test_a_request_that_timed_out_leaves_the_running_search():
    fake = FakeTranslator(seconds=0.01, steps=len)   # the long line would take 1,000 steps (10 s)
    b = Batcher(fake, max_batch=8, max_wait_ms=0)

    async def main():
        with pytest.raises(TimedOut) as late:
            await b.translate(["x" * 1000, "y" * 1000], 1, 1, timeout=0.1)
        return late.value.started, await b.translate(["ab"], 1, 1)
    started, short = run(main())
    deadline = time.monotonic() + 2
    while b.queued and time.monotonic() < deadline:
        time.sleep(0.01)
    steps = len(fake.calls)
    time.sleep(0.1)
    b.close()
    assert started and short.nbests == [[("ba", -0.0)]]
    assert b.queued == 0 and len(fake.calls) == steps, "the timed-out request kept the worker stepping"
    assert all("x" * 1000 not in lines for lines, *_ in fake.calls[-2:])


def test_a_failure_between_steps_fails_the_running_search_and_the_worker_survives():
    """Leaving the search (a timed-out request's sentences) happens between steps; an error there ended the worker
    thread, and every request after it waited for its time limit."""
    class Stuck(FakeTranslator):
        def continuous(self, beam_size, nbest, max_batch):
            decoder = super().continuous(beam_size, nbest, max_batch)

            def cancel(keys):
                raise RuntimeError("cannot cancel")
            decoder.cancel = cancel
            return decoder
    b = Batcher(Stuck(seconds=0.01, steps=len), max_batch=8, max_wait_ms=0)

    async def main():
        other = asyncio.ensure_future(b.translate(["y" * 300], 1, 1, timeout=5))
        with pytest.raises(TimedOut):
            await b.translate(["x" * 1000], 1, 1, timeout=0.1)
        with pytest.raises(RuntimeError, match="cannot cancel"):
            await other
        return await b.translate(["ok"], 1, 1, timeout=5)
    assert run(main()).nbests == [[("ko", 0.0)]]
    deadline = time.monotonic() + 2
    while b.queued and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b.queued == 0
    b.close()
