"""The search over a Transformer trained in-process on the copy task: greedy and beam search reproduce the copy,
beam 1 = greedy, batched = one by one (n-best scores too), and an ensemble of a Transformer and an LSTM follows the
mean of its members' log-probabilities. Needs the search over the model interface (`nmt.models.build_model`,
`nmt.search`, `nmt.models.ensemble`); skipped where that is not there yet."""
import numpy as np
import pytest
from mxnet import nd

import nmt.models

if not hasattr(nmt.models, "build_model"):
    pytest.skip("needs the search over the model interface (nmt.models.build_model)", allow_module_level=True)

from nmt.config import ModelConfig  # noqa: E402
from nmt.models.ensemble import Ensemble  # noqa: E402
from nmt.search import beam_search, greedy_search  # noqa: E402
from tests.unit.test_beam_stream import alone, stream_decode  # noqa: E402
from tests.unit.test_search import assert_same_hypotheses, reference_greedy  # noqa: E402
from tests.unit.test_transformer import COPY_MAX_LEN, COPY_VOCAB, copy_test_set, train_copy_model  # noqa: E402


@pytest.fixture(scope="module")
def copy_model():
    return train_copy_model()[0]


def test_greedy_and_beam_search_reproduce_the_copy(copy_model):
    src, src_len, expected = copy_test_set()
    assert [ids for ids, _ in greedy_search(copy_model, src, src_len, COPY_MAX_LEN + 2)] == expected
    assert [r[0][0] for r in beam_search(copy_model, src, src_len, beam_size=1, max_len=COPY_MAX_LEN + 2)] == \
        expected
    assert [r[0][0] for r in beam_search(copy_model, src, src_len, beam_size=4, max_len=COPY_MAX_LEN + 2)] == \
        expected


def test_batched_beam_search_equals_one_by_one(copy_model):
    src, src_len, _ = copy_test_set(6)
    batched = beam_search(copy_model, src, src_len, beam_size=4, max_len=COPY_MAX_LEN + 2, nbest=4)
    for i in range(6):
        n = int(src_len[i].asscalar())
        alone = beam_search(copy_model, src[i:i + 1, :n], src_len[i:i + 1], beam_size=4, max_len=COPY_MAX_LEN + 2,
                            nbest=4)
        assert_same_hypotheses(alone, [batched[i]], atol=1e-5)


def test_an_ensemble_with_an_lstm_follows_the_mean_of_its_members(copy_model):
    lstm = nmt.models.build_model(ModelConfig(embed_size=16, hidden_size=16, dropout=0.0, word_dropout=0.0),
                                  COPY_VOCAB, COPY_VOCAB)
    lstm.initialize()
    src, src_len, _ = copy_test_set(5)
    max_len = np.full(5, COPY_MAX_LEN + 2)
    expected = reference_greedy([copy_model, lstm], src, src_len, max_len)
    assert [ids for ids, _ in greedy_search([copy_model, lstm], src, src_len, max_len)] == expected
    ensemble = Ensemble([copy_model, lstm])
    _, _, attention = ensemble.step(nd.full((5,), 2), ensemble.init_state(ensemble.encode(src, src_len)))
    assert attention.shape == (5, src.shape[1])


def test_an_ensemble_with_an_lstm_searches_a_batch_whose_longest_sentences_end_first(copy_model):
    """Beam search of an LSTM + Transformer ensemble failed once the longest sentences of a batch were done: the
    search cut the LSTM's encoder memory to the width the others need, not the Transformer's, and the members'
    attention no longer lined up (MXNetError: expected [5,8], got [5,14])."""
    lstm = nmt.models.build_model(ModelConfig(embed_size=16, hidden_size=16, dropout=0.0, word_dropout=0.0),
                                  COPY_VOCAB, COPY_VOCAB)
    lstm.initialize()
    src, src_len, _ = copy_test_set(6)
    lengths = src_len.asnumpy()
    max_len = np.where(lengths == lengths.max(), 1, COPY_MAX_LEN + 2)   # the longest are cut off after a token
    assert 0 < (lengths == lengths.max()).sum() < 6
    batched = beam_search([copy_model, lstm], src, src_len, beam_size=3, max_len=max_len, nbest=2)
    for i in range(6):
        n = int(lengths[i])
        alone = beam_search([copy_model, lstm], src[i:i + 1, :n], src_len[i:i + 1], beam_size=3,
                            max_len=max_len[i:i + 1], nbest=2)
        assert_same_hypotheses(alone, [batched[i]], atol=1e-5)


def test_a_stream_decodes_each_sentence_as_alone(copy_model):
    """Sentences added while others decode (nmt.search.BeamStream): a Transformer's caches grow, so they start a
    new batch once the running one is done, and each decodes as it would alone."""
    src, src_len, expected = copy_test_set(6)
    max_len = [COPY_MAX_LEN + 2] * 6
    got, _, sizes = stream_decode(copy_model, src, src_len, max_len, arrivals=[0, 0, 1, 2, 2, 7])
    assert [h[0][0] for h in got] == expected
    assert_same_hypotheses(got, alone(copy_model, src, src_len, max_len))
    assert sizes[0] == 2 and 3 in sizes   # the first two alone, then the three that waited for them


def test_attention_links_each_copied_token_to_its_source_token(copy_model):
    """Word alignments (`nmt.align`) read the attention a step returns: the Transformer's last decoder layer's,
    averaged over heads. Teacher forced with the copies, each output token's attention should peak on the source
    token it copies (measured: 81 of 85)."""
    from nmt.align import batch_attention
    src, src_len, expected = copy_test_set()
    weights = batch_attention(copy_model, src, src_len, nd.concat(nd.full((src.shape[0], 1), 2), src, dim=1))
    peaks = [int(np.argmax(weights[r, t])) == t for r, copy in enumerate(expected) for t in range(len(copy))]
    assert np.mean(peaks) >= 0.9, f"{sum(peaks)} of {len(peaks)} tokens attend most to the token they copy"
