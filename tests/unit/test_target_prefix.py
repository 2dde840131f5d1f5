"""Target prefixes in nmt.search on untrained models: the translations start with the prefix, its tokens are scored
by the model as teacher forcing scores them, a prefix the search would have chosen anyway changes nothing, the
prefix does not count against max_len, and a sentence with a prefix decodes the same in a batch, alone, or joining
a running search."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from nmt.models.ensemble import as_model
from nmt.search import BOS_ID, EOS_ID, BeamStream, beam_search, greedy_search, length_penalty
from tests.unit.test_search import (VOCAB, assert_same_hypotheses, other_member, peaked, ragged_sources,
                                    untrained_model)
from tests.unit.test_transformer import build as build_transformer


def model_of(kind):
    if kind == "transformer":
        return build_transformer(src_vocab=VOCAB, tgt_vocab=VOCAB, seed=2)
    if kind == "ensemble":
        return [peaked(untrained_model("mlp")), peaked(other_member(), 1)]
    return peaked(untrained_model("dot"))


def forced_score(model, src, src_len, tokens, limit, alpha=0.6):
    """The normalized score teacher forcing gives `tokens` (EOS included unless the search stopped at `limit`)."""
    ended = len(tokens) < limit
    tgt_in = nd.array([[BOS_ID] + tokens])
    lp = as_model(model).log_probs(src, src_len, tgt_in).asnumpy()[0].astype(np.float64)
    targets = tokens + [EOS_ID] if ended else tokens
    raw = sum(lp[t, y] for t, y in enumerate(targets))
    return raw / length_penalty(len(targets), alpha)


@pytest.mark.parametrize("kind", ["lstm", "transformer", "ensemble"])
def test_translations_start_with_the_prefix_scored_by_the_model(kind):
    model = model_of(kind)
    lengths = [5, 2, 8, 4]
    src, src_len = ragged_sources(lengths, seed=3)
    prefixes = [[7, 7, 9], None, [25], [4, 5, 6, 8, 10, 12]]
    max_len = [9, 6, 12, 7]
    greedy = greedy_search(model, src, src_len, max_len, prefixes=prefixes)
    beam = beam_search(model, src, src_len, 4, max_len, nbest=3, prefixes=prefixes)
    for i, prefix in enumerate(prefixes):
        limit = max_len[i] + len(prefix or ())
        one_src, one_len = src[i:i + 1, :lengths[i]], src_len[i:i + 1]
        for tokens, score in [greedy[i]] + beam[i]:
            assert tokens[:len(prefix or ())] == (prefix or [])
            assert len(tokens) <= limit
            np.testing.assert_allclose(score, forced_score(model, one_src, one_len, tokens, limit), rtol=1e-4)
        assert len({tuple(t) for t, _ in beam[i]}) == 3   # the beam spreads after the prefix
        assert beam[i][0][1] >= greedy[i][1] - 1e-5


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_prefix_the_search_would_choose_changes_nothing(search):
    model = model_of("lstm")
    src, src_len = ragged_sources([6, 3, 9], seed=8)
    max_len = np.array([10, 8, 12])

    def run(limits, prefixes=None):
        if search == "greedy":
            return [[h] for h in greedy_search(model, src, src_len, limits, prefixes=prefixes)]
        return beam_search(model, src, src_len, 1, limits, prefixes=prefixes)
    free = run(max_len)
    for n in (1, 3):
        # the prefix does not count against max_len: n fewer give the free search's limit
        assert_same_hypotheses(run(max_len - n, [h[0][0][:n] for h in free]), free)


def test_the_prefix_does_not_count_against_max_len():
    model = model_of("lstm")
    src, src_len = ragged_sources([4], seed=1)
    prefix = [5, 6, 7, 8, 9]
    hyps = beam_search(model, src, src_len, 3, 0, nbest=3, prefixes=[prefix])[0]
    assert [tokens for tokens, _ in hyps] == [prefix]   # the beam had no room to spread
    out = greedy_search(model, src, src_len, 2, prefixes=[prefix])[0][0]
    assert out[:5] == prefix and len(out) <= 7


def test_batched_equals_alone_and_joining_a_running_search():
    model = model_of("lstm")
    lengths = [3, 9, 1, 6, 12]
    src, src_len = ragged_sources(lengths, seed=4)
    max_len = [6, 9, 4, 7, 10]
    prefixes = [[11], None, [12, 13, 14, 15], [], [16, 17]]
    batched = beam_search(model, src, src_len, 4, max_len, nbest=2, prefixes=prefixes)
    alone = [beam_search(model, src[i:i + 1, :lengths[i]], src_len[i:i + 1], 4, max_len[i], nbest=2,
                         prefixes=[prefixes[i]])[0] for i in range(len(lengths))]
    assert_same_hypotheses(batched, alone)
    stream, out = BeamStream(model, mx.cpu(), 4, 2), {}
    stream.add(src[:2], src_len[:2], max_len[:2], [0, 1], prefixes[:2])
    out.update(stream.step())
    out.update(stream.step())   # sentence 0's prefix is done; the others join with theirs
    stream.add(src[2:], src_len[2:], max_len[2:], [2, 3, 4], prefixes[2:])
    while stream.size:
        out.update(stream.step())
    assert_same_hypotheses([out[i] for i in range(5)], alone)


def test_sampling_keeps_the_prefix():
    model = model_of("lstm")
    src, src_len = ragged_sources([5, 7], seed=6)
    mx.random.seed(3)
    out = greedy_search(model, nd.repeat(src, 20, axis=0), nd.repeat(src_len, 20, axis=0), 8, sample=0,
                        prefixes=[[9, 8]] * 40)
    assert all(tokens[:2] == [9, 8] for tokens, _ in out)
    assert len({tuple(t) for t, _ in out}) > 5   # the rest is drawn


def test_one_prefix_per_sentence():
    model = model_of("lstm")
    src, src_len = ragged_sources([5, 7], seed=6)
    with pytest.raises(ValueError, match="one entry per sentence"):
        beam_search(model, src, src_len, 2, 5, prefixes=[[4]])
