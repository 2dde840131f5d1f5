"""Continuous batching on a trained model (`Translator.continuous`): lines added while others decode come back with
the n-best lists `translate_nbest` gives them, greedy scores 0.0 as there, empty lines at once; a long line
does not hold back the short ones that joined after it."""
from __future__ import annotations

import dataclasses

import pytest

from nmt.translate import Translator
from tests.unit.test_search import assert_same_hypotheses


def run_stream(decoder, arrivals):
    """Add arrivals[s] (a list of (key, line)) before step s; (answers by key, the step each came back at)."""
    out, at, step = {}, {}, 0
    while step < len(arrivals) or decoder.pending:
        if step < len(arrivals) and arrivals[step]:
            keys, lines = zip(*arrivals[step])
            decoder.add(list(lines), list(keys))
        for key, nbest, *_ in decoder.step():
            out[key], at[key] = nbest, step
        step += 1
    return out, at


@pytest.mark.parametrize("beam,nbest", [(4, 3), (1, 1)])
def test_lines_added_while_others_decode_come_back_as_translate_nbest_gives_them(translator, serve_sentences,
                                                                                 beam, nbest):
    lines = serve_sentences[:14] + [""]
    arrivals = [[(i, lines[i]) for i in range(5)], [], [(5, lines[5]), (14, "")], [], [], [(i, lines[i]) for i in
                range(6, 10)], [], [(10, lines[10])], [(i, lines[i]) for i in range(11, 14)]]
    decoder = translator.continuous(beam, nbest, max_batch=6)
    out, _ = run_stream(decoder, arrivals)
    offline = translator.translate_nbest(lines, nbest, beam_size=beam)
    got = [out[i] for i in range(len(lines))]
    assert [[t for t, _ in h] for h in got] == [[t for t, _ in h] for h in offline]
    assert_same_hypotheses(got, offline, rtol=1e-4, atol=1e-4)
    assert got[-1] == [] and all(s < 0 for h in got[:-1] for _, s in h)   # greedy's scored as beam 1's
    assert decoder.sentence_steps / decoder.steps <= 6 and decoder.pending == 0


def test_a_long_line_does_not_hold_back_short_ones(translator, serve_sentences):
    long, short = max(serve_sentences, key=len), min((s for s in serve_sentences if s), key=len)
    out, at = run_stream(translator.continuous(4, 1, max_batch=8), [[("long", long)], [("short", short)]])
    assert at["short"] < at["long"], "the short line waited for the long one"
    assert_same_hypotheses([out["short"], out["long"]], translator.translate_nbest([short, long], 1, beam_size=4),
                           rtol=1e-4, atol=1e-4)



@pytest.mark.parametrize("beam", [1, 4])
def test_lines_cut_off_at_the_length_limit_are_those_translate_names(translator, serve_sentences, beam):
    """The oracle: the lines whose best translation from `translate_ids` has all the steps of the limit."""
    lines = serve_sentences[:10]
    free = [len(h[0][0]) for h in translator.translate_ids(lines, beam_size=beam)]
    b = sorted(free)[len(free) // 2]                    # some lines are longer, some shorter
    short = Translator(translator.net, translator.src_tok, translator.tgt_tok,
                       dataclasses.replace(translator.decode, max_len_a=0.0, max_len_b=b))
    offline = [i for i, h in enumerate(short.translate_ids(lines, beam_size=beam)) if len(h[0][0]) == b]
    decoder, flagged = short.continuous(beam, 1, max_batch=4), []
    decoder.add(lines[:6], list(range(6)))
    while decoder.pending:
        if decoder.steps == 2:                          # the others join a running search
            decoder.add(lines[6:], list(range(6, 10)))
        flagged += [d.key for d in decoder.step() if d.cut_off]
    assert 0 < len(offline) < len(lines) and sorted(flagged) == offline and not decoder.limits


def test_a_loaded_model_holds_no_gradients(translator):
    """A Translator only decodes: its parameters carry no gradient arrays (memory the size of the model)."""
    params = translator.net.collect_params().values()
    assert all(p.grad_req == "null" for p in params) and all(p.data().grad is None for p in params)


def test_a_sampling_translator_is_not_searched_continuously(translator):
    """`tr.sample = 10` samples every translation from then on, but `continuous()` ran beam search regardless."""
    import copy
    sampling = copy.copy(translator)
    sampling.sample = 10
    with pytest.raises(ValueError, match=r"continuous runs beam search, but the translator samples \(sample=10\)"):
        sampling.continuous()
