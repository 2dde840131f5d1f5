"""The search on a tiny copy-task model trained in-process: it reproduces the copy, n-best scores are normalized
log-probabilities, the same hypotheses and scores as gluonnlp 0.10's BeamSearchSampler over the model's `step`,
early stopping changes nothing, and an ensemble follows the mean of its members."""
import importlib.util

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd

from nmt.config import ModelConfig
from nmt.loss import Seq2SeqLoss
from nmt.models import build_model
from nmt.search import beam_search, greedy_search
from nmt.tokenizer import BOS_ID, EOS_ID
from tests.unit.test_beam_stream import alone, stream_decode
from tests.unit.test_search import assert_same_hypotheses, count_rows, reference_greedy

VOCAB = 20
MAX_WORDS = 8
REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def copy_batch(rng, n):
    """Copy task: src = x EOS, tgt_in = BOS x, tgt_out = x EOS; padded to a fixed width (one graph shape)."""
    lens = rng.randint(2, MAX_WORDS + 1, n)
    width = MAX_WORDS + 1
    src, tgt_in, tgt_out = (np.zeros((n, width), dtype="float32") for _ in range(3))
    words = []
    for i, length in enumerate(lens):
        x = rng.randint(4, VOCAB, length)
        words.append([int(w) for w in x])
        src[i, :length], src[i, length] = x, EOS_ID
        tgt_in[i, 0], tgt_in[i, 1:length + 1] = BOS_ID, x
        tgt_out[i, :length], tgt_out[i, length] = x, EOS_ID
    arrays = [nd.array(a) for a in (src, lens + 1, tgt_in, tgt_out, lens + 1)]
    return arrays, words


@pytest.fixture(scope="module")
def copy_model():
    """A 2-layer model trained 300 Adam steps on copying; returns (model, per-token losses)."""
    mx.random.seed(0)
    rng = np.random.RandomState(0)
    cfg = ModelConfig(embed_size=32, hidden_size=32, num_layers=2, attention="general", dropout=0.0,
                      word_dropout=0.0)
    model = build_model(cfg, VOCAB, VOCAB)
    model.initialize(mx.init.Xavier())
    loss_block = Seq2SeqLoss(model, label_smoothing=0.0)
    loss_block.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(model.collect_params(), "adam", {"learning_rate": 0.005})
    losses = []
    for _ in range(300):
        batch, _ = copy_batch(rng, 32)
        with autograd.record():
            loss, _ = loss_block(*batch)
            per_token = loss.sum() / batch[4].sum()
        per_token.backward()
        trainer.step(1)
        losses.append(per_token.asscalar())
    return model, losses


def test_copy_task_loss_drops(copy_model):
    _, losses = copy_model
    assert np.mean(losses[-20:]) < 0.1 * np.mean(losses[:5])


def test_greedy_and_beam_reproduce_the_copy(copy_model):
    model, _ = copy_model
    (src, src_len, _, _, _), words = copy_batch(np.random.RandomState(123), 24)
    max_len = 2 * src_len.asnumpy().astype(int)  # room to run on: output must stop at EOS by itself
    greedy = [ids for ids, _ in greedy_search(model, src, src_len, max_len)]
    beam = [hyps[0][0] for hyps in beam_search(model, src, src_len, beam_size=4, max_len=max_len)]
    assert sum(g == w for g, w in zip(greedy, words)) >= 22
    assert sum(b == w for b, w in zip(beam, words)) >= 22
    assert [h[0][0] for h in beam_search(model, src, src_len, beam_size=1, max_len=max_len)] == greedy


def _score(model, src, src_len, ids, alpha, eos=True):
    """Length-normalized teacher-forced log-prob of `ids` (+ EOS) for one source sentence."""
    tgt = [BOS_ID] + ids
    logp = nd.log_softmax(model(src, src_len, nd.array([tgt])), axis=-1).asnumpy()[0].astype(np.float64)
    out = ids + ([EOS_ID] if eos else [])
    total = sum(logp[t, w] for t, w in enumerate(out))
    return total / ((5.0 + len(out)) / 6.0) ** alpha


def test_beam_nbest_scores_are_normalized_log_probs(copy_model):
    model, _ = copy_model
    (src, src_len, _, _, _), _ = copy_batch(np.random.RandomState(7), 4)
    results = beam_search(model, src, src_len, beam_size=5, max_len=20, alpha=0.8, nbest=5)
    for i, hyps in enumerate(results):
        assert len(hyps) == 5 and len({tuple(ids) for ids, _ in hyps}) == 5
        scores = [s for _, s in hyps]
        assert scores == sorted(scores, reverse=True)
        for ids, score in hyps:
            expected = _score(model, src[i:i + 1], src_len[i:i + 1], ids, 0.8, eos=len(ids) < 20)
            assert abs(score - expected) < 1e-4
    for i, (ids, score) in enumerate(greedy_search(model, src, src_len, max_len=[20, 20, 20, 3], alpha=0.8)):
        expected = _score(model, src[i:i + 1], src_len[i:i + 1], ids, 0.8, eos=len(ids) < (3 if i == 3 else 20))
        assert abs(score - expected) < 1e-4   # the same for greedy search's, also when cut at its max length


def _benchmark_decode():
    spec = importlib.util.spec_from_file_location("benchmark_decode", REPO / "scripts" / "benchmark_decode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_beam_search_matches_gluonnlp_sampler(copy_model):
    """Same hypotheses and scores as gluonnlp 0.10's BeamSearchSampler driving the model's `step`."""
    from gluonnlp.model import BeamSearchSampler, BeamSearchScorer
    model, _ = copy_model
    (src, src_len, _, _, _), _ = copy_batch(np.random.RandomState(11), 12)
    src[3, 2] = 7   # a few sentences that are not exact copies, so that beams disagree more
    state = model.init_state(model.encode(src, src_len))
    sampler = BeamSearchSampler(4, _benchmark_decode().sampler_step(model, state), EOS_ID,
                                BeamSearchScorer(alpha=0.8, K=5.0, from_logits=False), max_length=12)
    samples, scores, valid = sampler(nd.full((12,), BOS_ID), state.arrays())
    ours = beam_search(model, src, src_len, beam_size=4, max_len=12, alpha=0.8, nbest=4)
    for i, hyps in enumerate(ours):
        theirs = [[int(x) for x in samples[i, k, 1:int(valid[i, k].asscalar())].asnumpy()] for k in range(len(hyps))]
        theirs = [t[:-1] if t and t[-1] == EOS_ID else t for t in theirs]
        assert [ids for ids, _ in hyps] == theirs
        np.testing.assert_allclose([s for _, s in hyps], scores[i, :len(hyps)].asnumpy(), rtol=1e-5, atol=1e-5)


def test_early_stop_matches_on_a_trained_model(copy_model, monkeypatch):
    model, _ = copy_model
    (src, src_len, _, _, _), _ = copy_batch(np.random.RandomState(7), 24)
    src[::3, 1] = 9   # some sentences that are not exact copies: less certain beams
    rows = count_rows(monkeypatch, model)
    full = beam_search(model, src, src_len, beam_size=4, max_len=14, alpha=0.6, nbest=2, early_stop=False)
    full_rows = sum(rows)
    rows.clear()
    assert_same_hypotheses(full, beam_search(model, src, src_len, beam_size=4, max_len=14, alpha=0.6, nbest=2))
    assert sum(rows) <= full_rows


def test_ensemble_follows_the_mean_of_its_members_log_probs(copy_model, tmp_path):
    """A member of another shape with a strong, wrong opinion: the ensemble's output is the step-by-step mean's,
    and differs from each member's own (so both count). A model and its copy decode as the model."""
    model, _ = copy_model
    mx.random.seed(11)
    other = build_model(ModelConfig(embed_size=24, hidden_size=16, num_layers=1, attention="dot", dropout=0.0,
                                    word_dropout=0.0, tie_weights=False, lexical_model=True), VOCAB, VOCAB)
    other.initialize(mx.init.Xavier(magnitude=3))
    bias = np.zeros(VOCAB, dtype="float32")
    bias[4] = 12.0   # the confident copy model alone would outvote a random member
    other.decoder.out_bias.set_data(nd.array(bias))
    (src, src_len, _, _, _), _ = copy_batch(np.random.RandomState(9), 10)
    max_len = 2 * src_len.asnumpy().astype(int)
    expected = reference_greedy([model, other], src, src_len, max_len)
    assert [ids for ids, _ in greedy_search([model, other], src, src_len, max_len)] == expected
    assert [r[0][0] for r in beam_search([model, other], src, src_len, beam_size=1, max_len=max_len)] == expected
    for member in (model, other):
        assert expected != [ids for ids, _ in greedy_search(member, src, src_len, max_len)]
    alone = beam_search(model, src, src_len, beam_size=3, max_len=max_len, nbest=3)
    model.save_parameters(str(tmp_path / "copy.params"))
    copy = build_model(model.cfg, VOCAB, VOCAB)
    copy.load_parameters(str(tmp_path / "copy.params"))
    assert_same_hypotheses(beam_search([model, copy], src, src_len, beam_size=3, max_len=max_len, nbest=3), alone,
                           rtol=1e-5, atol=1e-5)


def test_sentences_joining_a_running_search_copy_as_alone(copy_model):
    """A trained LSTM, sentences of 1-8 words joining a running beam search at different steps (BeamStream):
    the same n-best lists as decoding each alone."""
    model, _ = copy_model
    (src, src_len, _, _, _), words = copy_batch(np.random.RandomState(5), 8)
    max_len = (2 * src_len.asnumpy().astype(int)).tolist()
    got, _, sizes = stream_decode(model, src, src_len, max_len, arrivals=[0, 0, 0, 1, 3, 3, 4, 6])
    assert_same_hypotheses(got, alone(model, src, src_len, max_len))
    assert sum(h[0][0] == w for h, w in zip(got, words)) >= 7 and max(sizes) > 3
