"""nmt.search.BeamStream (continuous batching) on untrained models: sentences that join a running search, at any
step and of any source length, decode as they would alone; a Transformer's growing state takes sentences only
into an empty batch; DecoderState.concat and narrow_positions."""
import mxnet as mx
import numpy as np
import pytest


from nmt.models.base import DecoderState
from nmt.search import BeamStream, beam_search
from tests.unit.test_search import VOCAB, assert_same_hypotheses, other_member, ragged_sources, untrained_model
from tests.unit.test_transformer import build as build_transformer


def stream_decode(model, src, src_len, max_len, arrivals, beam_size=4, nbest=2):
    """Decode with sentence i added after arrivals[i] steps (in order); (n-best lists by sentence, steps taken,
    the batch sizes seen at each step)."""
    stream = BeamStream(model, mx.cpu(), beam_size, nbest)
    out, step, sizes, todo = {}, 0, [], list(range(len(arrivals)))
    while todo or stream.size:
        joining = [i for i in todo if arrivals[i] <= step]
        if joining and stream.can_join:
            width = int(max(src_len[i].asscalar() for i in joining)) + 1
            stream.add(src[joining, :width], src_len[joining], [max_len[i] for i in joining], joining)
            todo = [i for i in todo if i not in joining]
        if stream.size:
            sizes.append(stream.size)
            out.update(stream.step())
        step += 1
    return [out[i] for i in range(len(arrivals))], step, sizes


def alone(model, src, src_len, max_len, beam_size=4, nbest=2):
    return [beam_search(model, src[i:i + 1], src_len[i:i + 1], beam_size, max_len[i], nbest=nbest)[0]
            for i in range(src.shape[0])]


@pytest.mark.parametrize("member", ["lstm", "ensemble"])
def test_sentences_joining_a_running_search_decode_as_alone(member):
    model = untrained_model("dot") if member == "lstm" else [untrained_model("mlp"), other_member()]
    lengths = [3, 9, 1, 6, 12, 2, 7]   # joiners both shorter and longer than the running batch's sources
    src, src_len = ragged_sources(lengths, seed=4)
    max_len = [10, 14, 4, 9, 16, 5, 11]
    got, _, sizes = stream_decode(model, src, src_len, max_len, arrivals=[0, 0, 2, 3, 3, 5, 9])
    assert_same_hypotheses(got, alone(model, src, src_len, max_len))
    assert max(sizes) > 2, "no sentence joined a running batch"


def test_a_transformer_takes_sentences_only_into_an_empty_batch():
    model = build_transformer(tgt_vocab=VOCAB, src_vocab=VOCAB)
    src, src_len = ragged_sources([4, 7, 2], seed=1)
    max_len = [8, 8, 8]
    got, _, sizes = stream_decode(model, src, src_len, max_len, arrivals=[0, 1, 1])
    assert_same_hypotheses(got, alone(model, src, src_len, max_len))
    stream = BeamStream(model, mx.cpu(), 2)
    stream.add(src[:1], src_len[:1], 8, [0])
    stream.step()
    assert not stream.can_join
    with pytest.raises(ValueError, match="sentences can only start a batch"):
        stream.add(src[1:2], src_len[1:2], 8, [1])


def test_ids_come_back_and_the_batch_empties():
    model = untrained_model("general")
    src, src_len = ragged_sources([5, 5], seed=2)
    stream = BeamStream(model, mx.cpu(), 3, nbest=3)
    stream.add(src, src_len, [0, 6], [10, 20])   # a sentence allowed no tokens is done at once
    done = {}
    while stream.size:
        done.update(stream.step())
    assert set(done) == {10, 20} and [ids for ids, _ in done[10]] == [[]]
    assert len(done[20]) == 3 and stream.size == 0 and stream.can_join


@pytest.mark.parametrize("after_steps", [0, 2])
def test_cancelled_sentences_leave_at_once_and_the_rest_decode_as_alone(after_steps):
    model = untrained_model("dot")
    src, src_len = ragged_sources([4, 12, 3, 7], seed=5)   # sentence 1's source is the longest
    max_len = [9, 16, 6, 10]
    stream = BeamStream(model, mx.cpu(), 4, nbest=2)
    stream.add(src, src_len, max_len, [0, 1, 2, 3])
    out = {}
    for _ in range(after_steps):   # 0: before the first step, while the batch has one row per sentence
        out.update(stream.step())
    stream.cancel([1, 3, 99])   # 99 was never added
    assert stream.size == 2 and not out
    while stream.size:
        out.update(stream.step())
    assert sorted(out) == [0, 2]
    expected = alone(model, src, src_len, max_len)
    assert_same_hypotheses([out[0], out[2]], [expected[0], expected[2]])
    stream.cancel([0, 2])   # gone already: nothing happens
    stream.add(src[:1], src_len[:1], 5, [7])   # an empty stream takes new sentences
    stream.cancel([7])
    assert stream.size == 0 and stream.can_join


def test_concat_pads_source_positions_and_narrow_cuts_them():
    model = untrained_model("dot")
    short = model.init_state(model.encode(*ragged_sources([2, 3], seed=0)))
    src, src_len = ragged_sources([8], seed=1)
    long = model.init_state(model.encode(src, src_len))
    joined = DecoderState.concat([short, long])
    assert joined.arrays(moving_only=True)[0].shape[0] == 3   # hypotheses
    for a, b, c in zip(joined.memory, short.memory, long.memory):
        assert a.shape[1] == c.shape[1] > b.shape[1]
        np.testing.assert_array_equal(a[:2, :b.shape[1]].asnumpy(), b.asnumpy())
        assert not a[:2, b.shape[1]:].asnumpy().any()
    narrow = joined.narrow_positions(4)
    assert all(m.shape[1] == 4 for m in narrow.memory) and narrow.h.shape == joined.h.shape
    bigger = untrained_model("dot", hidden_size=24, embed_size=24)
    with pytest.raises(ValueError, match=r"LSTMState\.memory\[0\] has rows of shapes"):
        DecoderState.concat([short, bigger.init_state(bigger.encode(src, src_len))])

