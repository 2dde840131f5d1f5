"""nmt.continuous.ContinuousDecoder's rules over a stand-in search: when waiting sentences join the running batch
(sentences left it, a quarter of its size is waiting, or the oldest waited MAX_WAIT_STEPS steps), the batch bound,
arrival order, keys, empty lines, and a model that cannot take sentences into a running batch."""
from __future__ import annotations

import threading
import types

import mxnet as mx
import pytest

import nmt.continuous as continuous
from nmt.translate import Translator


class FakeSearch:
    """BeamStream's surface: a sentence is done after as many steps as it has source tokens."""

    def __init__(self, model, ctx, beam, nbest, alpha, joinable=True):
        self.joinable, self.rows, self.joins, self.left_last_step = joinable, {}, [], False

    @property
    def size(self):
        return len(self.rows)

    @property
    def can_join(self):
        return self.size == 0 or self.joinable

    def add(self, src, src_len, max_len, ids, prefixes=None):
        self.joins.append([int(i) for i in ids])
        self.rows.update({int(i): int(n) - 1 for i, n in zip(ids, src_len.asnumpy())})

    def cancel(self, ids):
        for i in ids:
            del self.rows[i]
        self.left_last_step = True

    def step(self):
        self.rows = {i: n - 1 for i, n in self.rows.items()}
        done = [i for i, n in self.rows.items() if n <= 0]
        for i in done:
            del self.rows[i]
        self.left_last_step = bool(done)
        return [(i, [([7, 8], -1.0)]) for i in done]


def decoder(monkeypatch, joinable=True, max_batch=8):
    monkeypatch.setattr(continuous, "BeamStream", lambda *a: FakeSearch(*a, joinable=joinable))
    tok = types.SimpleNamespace(decode=lambda ids: [" ".join(map(str, x)) for x in ids])
    decode = types.SimpleNamespace(length_penalty_alpha=0.6, max_len_a=2.0, max_len_b=0.0)
    tr = types.SimpleNamespace(members=[object()], ctx=mx.cpu(), decode=decode, tgt_tok=tok,
                               source_ids=lambda lines, cut=None: [[5] * len(x) for x in lines],
                               lock=threading.RLock(), target_prefixes=lambda prefixes, cut=None: (
                                   None if prefixes is None else [None for _ in prefixes]))
    tr.source_batch, tr.texts = (types.MethodType(f, tr) for f in (Translator.source_batch, Translator.texts))
    monkeypatch.setattr(continuous, "as_model", lambda members: members[0])
    return continuous.ContinuousDecoder(tr, 4, 1, max_batch)


def run(dec, arrivals, steps=40):
    """arrivals: {step: [(key, line)]}; the step at which each key came back."""
    back = {}
    for step in range(steps):
        for key, line in arrivals.get(step, []):
            dec.add([line], [key])
        for key, *_ in dec.step():
            back[key] = step
    assert dec.pending == 0
    return back


def track_joins(dec):
    """{search id: the decoder's step count when it joined}."""
    joined_at, original = {}, dec.search.add

    def add(src, src_len, max_len, ids, prefixes=None):
        joined_at.update({int(i): dec.steps for i in ids})
        original(src, src_len, max_len, ids, prefixes)
    dec.search.add = add
    return joined_at


def test_join_timing_follows_the_rules(monkeypatch):
    dec = decoder(monkeypatch, max_batch=16)
    joined_at = track_joins(dec)
    run(dec, {0: [(f"a{i}", "x" * 30) for i in range(8)], 2: [("one", "x" * 5)],
              10: [(f"b{i}", "x" * 5) for i in range(2)]})
    assert joined_at[8] == 2 + continuous.MAX_WAIT_STEPS   # 1 waiting, under a quarter of 8: it waits 3 steps
    assert joined_at[9] == joined_at[10] == 10              # 2 waiting, a quarter of 8: at once


def test_a_full_batch_takes_arrivals_when_sentences_leave(monkeypatch):
    dec = decoder(monkeypatch, max_batch=8)
    joined_at = track_joins(dec)
    back = run(dec, {0: [("long", "x" * 20)] + [(f"s{i}", "x" * 12) for i in range(7)], 1: [("late", "xx")]})
    assert joined_at[8] == back["s0"] + 1 == 12   # the step after the 12-token sentences left
    assert back["late"] < back["long"]


def test_keys_and_empty_lines_come_back_and_order_is_kept(monkeypatch):
    dec = decoder(monkeypatch, max_batch=2)
    dec.add(["xxx", "", "x", "xx"], ["a", "b", "c", "d"])
    out = {}
    while dec.pending:
        out.update((d.key, d.nbest) for d in dec.step())
    assert out == {"a": [("7 8", -1.0)], "b": [], "c": [("7 8", -1.0)], "d": [("7 8", -1.0)]}
    assert dec.search.joins == [[0, 1], [2]]   # two at a time, in arrival order


def test_without_joins_new_sentences_wait_for_an_empty_batch(monkeypatch):
    dec = decoder(monkeypatch, joinable=False, max_batch=16)
    back = run(dec, {0: [("long", "x" * 10)], 1: [(f"s{i}", "x") for i in range(6)]})
    assert dec.search.joins == [[0], list(range(1, 7))]
    assert all(back[f"s{i}"] > back["long"] for i in range(6))


def test_cancelled_keys_never_come_back(monkeypatch):
    dec = decoder(monkeypatch, max_batch=2)
    dec.add(["xxxx", "xxxx", "", "xx", "x"], ["run", "keep", "empty", "wait", "wait2"])
    dec.cancel(["empty", "wait"])   # one ready without decoding, one waiting
    assert dec.pending == 3
    out = {d.key: d.nbest for d in dec.step()}   # "run" and "keep" join the search
    dec.cancel(["run", "nobody"])    # one being decoded; a key never added is ignored
    assert dec.search.size == 1 and dec.pending == 2
    while dec.pending:
        out.update((d.key, d.nbest) for d in dec.step())
    assert set(out) == {"keep", "wait2"}


def test_bad_arguments(monkeypatch):
    with pytest.raises(ValueError, match="max_batch"):
        decoder(monkeypatch, max_batch=0)
    dec = decoder(monkeypatch)
    with pytest.raises(ValueError, match="2 lines but 1 keys"):
        dec.add(["a", "b"], ["k"])


def test_a_key_names_one_pending_line_at_a_time(monkeypatch):
    """A key twice in one call, or one still waiting, decoding or ready from an earlier call, would bring two lines
    back under one key: refused, naming it, with nothing queued. Once returned (or cancelled) a key is free again."""
    dec = decoder(monkeypatch, max_batch=1)
    with pytest.raises(ValueError, match=r"key 'a' \(keys\[2\]\) is given twice"):
        dec.add(["x", "xx", "xxx"], ["a", "b", "a"])
    assert dec.pending == 0
    dec.add(["xx", "x", ""], ["run", "wait", "empty"])
    dec.step()   # "run" decodes, "wait" waits, "empty" came back
    for key in ("run", "wait"):
        with pytest.raises(ValueError, match=f"key '{key}' \\(keys\\[1\\]\\) is still pending from an earlier add"):
            dec.add(["x", "x"], ["new", key])
    assert dec.pending == 2
    with pytest.raises(TypeError, match=r"keys\[0\] must be hashable, got list \['l'\]"):
        dec.add(["x"], [["l"]])
    dec.add([""], ["ready"])
    with pytest.raises(ValueError, match="key 'ready' .* still pending"):   # done, not yet returned by step
        dec.add(["x"], ["ready"])
    dec.cancel(["wait"])
    dec.add(["x", ""], ["wait", "empty"])   # cancelled, and returned: both free
    out = []
    while dec.pending:
        out += [d.key for d in dec.step()]
    assert sorted(out) == ["empty", "ready", "run", "wait"]


def test_a_refused_key_reads_no_line(monkeypatch):
    """A key refused (given twice, or still pending) was found only after the lines were read: a line over
    max_input_tokens was logged as cut and counted in the translator's `truncated` for a call that queued nothing,
    and again when the call was made anew with its own keys."""
    dec = decoder(monkeypatch)
    read, source_ids = [], dec.translator.source_ids
    dec.translator.source_ids = lambda lines, cut=None: read.append(list(lines)) or source_ids(lines, cut)
    dec.add(["x"], ["a"])
    for keys in (["b", "b"], ["a", "c"]):
        with pytest.raises(ValueError, match="key '[ab]'"):
            dec.add(["xx", "x"], keys)
    with pytest.raises(TypeError, match="keys must be a list, one per line, got str"):
        dec.add(["xx", "x"], "bc")
    assert read == [["x"]] and dec.pending == 1


def test_a_refused_count_of_keys_or_prefixes_reads_no_line(monkeypatch):
    """As a refused key (above): as many lines as keys and prefixes were compared only after the lines were read, so
    add([400-word line], ["a", "b"]) of a real model logged the line as cut and counted it in the translator's
    `truncated` for a call that queued nothing. Prefixes given as a generator were counted only after the lines were
    read (the counts were checked twice for them); they are read first too, once."""
    dec = decoder(monkeypatch)
    read, source_ids = [], dec.translator.source_ids
    dec.translator.source_ids = lambda lines, cut=None: read.append(list(lines)) or source_ids(lines, cut)
    with pytest.raises(ValueError, match="^ContinuousDecoder.add: 1 lines but 2 keys$"):
        dec.add(["xx"], ["a", "b"])
    for prefixes in (["p", "q"], (p for p in ["p", "q"])):
        with pytest.raises(ValueError, match="^ContinuousDecoder.add: 1 lines but 1 keys and 2 prefixes$"):
            dec.add(["xx"], ["a"], prefixes)
    assert read == [] and dec.pending == 0
    dec.add((line for line in ["x", "xx"]), ["a", "b"], [None, "p"])   # (any iterable of lines, read once)
    assert read == [["x", "xx"]] and dec.pending == 2
