"""Tests of nmt.search on a tiny copy-task model trained in-process, and on an untrained model."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd

from nmt.config import ModelConfig
from nmt.loss import Seq2SeqLoss
from nmt.model import build_model
from nmt.search import BOS_ID, EOS_ID, beam_search, greedy_search

VOCAB = 20
MAX_WORDS = 8


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


def untrained_model(attention="mlp"):
    mx.random.seed(3)
    cfg = ModelConfig(embed_size=16, hidden_size=16, num_layers=2, attention=attention, dropout=0.0, word_dropout=0.0)
    model = build_model(cfg, 30, 30)
    model.initialize(mx.init.Xavier())
    return model


def ragged_sources(lengths, seed=0):
    """Random sources of the given lengths, padded with junk (not PAD) to show padding is ignored."""
    rng = np.random.RandomState(seed)
    src = rng.randint(4, 30, (len(lengths), max(lengths) + 3)).astype("float32")
    return nd.array(src), nd.array(lengths)


def test_copy_task_loss_drops(copy_model):
    _, losses = copy_model
    assert np.mean(losses[-20:]) < 0.1 * np.mean(losses[:5])


def test_greedy_and_beam_reproduce_the_copy(copy_model):
    model, _ = copy_model
    (src, src_len, _, _, _), words = copy_batch(np.random.RandomState(123), 24)
    max_len = 2 * src_len.asnumpy().astype(int)  # room to run on: output must stop at EOS by itself
    greedy = greedy_search(model, src, src_len, max_len)
    beam = [hyps[0][0] for hyps in beam_search(model, src, src_len, beam_size=4, max_len=max_len)]
    assert sum(g == w for g, w in zip(greedy, words)) >= 22
    assert sum(b == w for b, w in zip(beam, words)) >= 22


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
        assert len(hyps) == 5
        assert len({tuple(ids) for ids, _ in hyps}) == 5
        scores = [s for _, s in hyps]
        assert scores == sorted(scores, reverse=True)
        for ids, score in hyps:
            expected = _score(model, src[i:i + 1], src_len[i:i + 1], ids, 0.8, eos=len(ids) < 20)
            assert abs(score - expected) < 1e-4


@pytest.mark.parametrize("attention", ["dot", "mlp"])
def test_beam_of_one_equals_greedy(copy_model, attention):
    for model in (copy_model[0], untrained_model(attention)):
        src, src_len = ragged_sources([9, 3, 6, 1], seed=2)
        max_len = np.array([12, 5, 9, 3])
        greedy = greedy_search(model, src, src_len, max_len)
        beam = beam_search(model, src, src_len, beam_size=1, max_len=max_len)
        assert [hyps[0][0] for hyps in beam] == greedy


@pytest.mark.parametrize("attention", ["general", "mlp"])
def test_batched_equals_one_by_one(attention):
    model = untrained_model(attention)
    lengths = [7, 2, 11, 4, 1]
    src, src_len = ragged_sources(lengths, seed=5)
    max_len = np.array([9, 4, 14, 6, 3])
    greedy = greedy_search(model, src, src_len, max_len)
    beam = beam_search(model, src, src_len, beam_size=3, max_len=max_len, nbest=3)
    for i, n in enumerate(lengths):
        one_src, one_len = src[i:i + 1, :n], src_len[i:i + 1]  # alone and unpadded
        assert greedy_search(model, one_src, one_len, int(max_len[i])) == [greedy[i]]
        alone = beam_search(model, one_src, one_len, beam_size=3, max_len=int(max_len[i]), nbest=3)[0]
        assert [ids for ids, _ in alone] == [ids for ids, _ in beam[i]]
        np.testing.assert_allclose([s for _, s in alone], [s for _, s in beam[i]], rtol=0, atol=1e-5)


def test_max_len_is_respected_per_sentence():
    model = untrained_model()
    src, src_len = ragged_sources([5, 5, 5, 5])
    max_len = np.array([0, 1, 3, 6])
    greedy = greedy_search(model, src, src_len, max_len)
    beam = beam_search(model, src, src_len, beam_size=3, max_len=max_len, nbest=2)
    assert greedy[0] == [] and beam[0] == [([], 0.0)]
    for i in range(1, 4):
        assert 0 < len(greedy[i]) <= max_len[i]
        assert all(len(ids) <= max_len[i] for ids, _ in beam[i])
        assert all(EOS_ID not in ids for ids, _ in beam[i])
    # An untrained model rarely says EOS, so most outputs run to exactly max_len.
    assert sum(len(g) == m for g, m in zip(greedy, max_len)) >= 3


def test_bad_arguments():
    model = untrained_model()
    src, src_len = ragged_sources([3, 4])
    with pytest.raises(ValueError, match="nbest"):
        beam_search(model, src, src_len, beam_size=2, max_len=5, nbest=3)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, src_len, beam_size=0, max_len=5)
    with pytest.raises(ValueError, match="max_len"):
        greedy_search(model, src, src_len, np.array([3, 4, 5]))


def test_beam_search_matches_gluonnlp_sampler(copy_model):
    """Same hypotheses and scores as gluonnlp 0.10's BeamSearchSampler driving the model step by step."""
    from gluonnlp.model import BeamSearchSampler, BeamSearchScorer
    model, _ = copy_model
    (src, src_len, _, _, _), _ = copy_batch(np.random.RandomState(11), 12)
    src[3, 2] = 7   # a few sentences that are not exact copies, so that beams disagree more
    memory, (h0, c0) = model.encode(src, src_len)

    def step(tokens, states):
        log_probs, (h, c), _ = model.decode_step(tokens.astype("float32"), states[:2], states[2], states[3])
        return log_probs, [h, c, states[2], states[3]]
    max_len = 12
    sampler = BeamSearchSampler(4, step, EOS_ID, BeamSearchScorer(alpha=0.8, K=5.0, from_logits=False),
                                max_length=max_len)
    samples, scores, valid = sampler(nd.full((12,), BOS_ID), [h0, c0, memory, src_len])
    ours = beam_search(model, src, src_len, beam_size=4, max_len=max_len, alpha=0.8, nbest=4)
    for i, hyps in enumerate(ours):
        theirs = [[int(x) for x in samples[i, k, 1:int(valid[i, k].asscalar())].asnumpy()] for k in range(len(hyps))]
        theirs = [t[:-1] if t and t[-1] == EOS_ID else t for t in theirs]
        assert [ids for ids, _ in hyps] == theirs
        np.testing.assert_allclose([s for _, s in hyps], scores[i, :len(hyps)].asnumpy(), rtol=1e-5, atol=1e-5)


def _rows_and_results(monkeypatch, model, src, src_len, **kwargs):
    """beam_search with and without early stopping: {early_stop: (results, rows decoded summed over steps)}."""
    from nmt import search
    rows = []
    call = search.call_step
    monkeypatch.setattr(search, "call_step", lambda step, *args: rows.append(args[0].shape[0]) or call(step, *args))
    out = {}
    for early in (False, True):
        rows.clear()
        out[early] = (beam_search(model, src, src_len, early_stop=early, **kwargs), sum(rows))
    return out


def _assert_same_hypotheses(a, b, rtol=0.0, atol=1e-6):
    for x, y in zip(a, b):
        assert [ids for ids, _ in x] == [ids for ids, _ in y]
        np.testing.assert_allclose([s for _, s in x], [s for _, s in y], rtol=rtol, atol=atol)


# (alpha, whether it saves steps here): a penalty growing fast with length keeps long hypotheses hopeful longer
@pytest.mark.parametrize("alpha,saves", [(0.0, True), (0.6, True), (1.5, False)])
@pytest.mark.parametrize("nbest", [1, 2])
def test_early_stop_gives_the_same_result_in_fewer_steps(monkeypatch, alpha, saves, nbest):
    """A sentence stops once no active hypothesis can beat its nbest-th finished one: the same hypotheses and
    scores as running it until all its slots are finished, with fewer decoder steps. An untrained model biased
    towards EOS and one other token finishes short hypotheses early while long ones go on: the case early
    stopping is for."""
    model = untrained_model("dot")
    bias = model.decoder.out_bias.data().copy()
    bias[EOS_ID], bias[5] = 1.5, 3.0
    model.decoder.out_bias.set_data(bias)
    src, src_len = ragged_sources([6, 3, 9, 5, 7, 2, 8, 4], seed=2)
    res = _rows_and_results(monkeypatch, model, src, src_len, beam_size=4, max_len=20, alpha=alpha, nbest=nbest)
    (full, full_rows), (early, early_rows) = res[False], res[True]
    _assert_same_hypotheses(full, early)
    assert early_rows < full_rows / 2 if saves else early_rows <= full_rows


def test_early_stop_matches_on_a_trained_model(copy_model, monkeypatch):
    model, _ = copy_model
    (src, src_len, _, _, _), _ = copy_batch(np.random.RandomState(7), 24)
    src[::3, 1] = 9   # some sentences that are not exact copies: less certain beams
    res = _rows_and_results(monkeypatch, model, src, src_len, beam_size=4, max_len=14, alpha=0.6, nbest=2)
    _assert_same_hypotheses(res[False][0], res[True][0])
    assert res[True][1] <= res[False][1]


def test_search_graph_is_built_once_per_model_and_beam(copy_model):
    from nmt import search_graph
    model, _ = copy_model
    src, src_len = ragged_sources([4, 6])
    from nmt.search import _native
    key = ("beam", 3, 1, _native(mx.cpu()), ())
    beam_search(model, src, src_len, beam_size=3, max_len=5)
    block = search_graph.STEP_CACHE[model][key]
    beam_search(model, src[:1], src_len[:1], beam_size=3, max_len=7)
    assert search_graph.STEP_CACHE[model][key] is block
    # the step block shares the model's parameters, it does not own copies
    assert set(block.collect_params().values()) <= set(model.collect_params().values())


@pytest.mark.parametrize("attention", ["dot", "general", "mlp", "dot+lex", "mlp+lex"])
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("native", [False, True])
def test_search_step_computes_what_decode_step_computes(attention, tied, native):
    """The search's own decoder step (LSTM as matrix products, beams attending as a group over one memory row
    per sentence; its cells on MXNet's operators or on nmt.native's kernel) gives the log-probs and states of
    `Seq2Seq.decode_step` on K-times repeated memory."""
    from nmt import native as kernels
    if native and not kernels.available():
        pytest.skip(f"native kernels: {kernels.status()}")
    from nmt.search import _layer_states
    from nmt.search_graph import decoder_step
    mx.random.seed(5)
    attention, _, lex = attention.partition("+")   # "+lex": with the lexical model
    cfg = ModelConfig(embed_size=16, hidden_size=16, num_layers=3, attention=attention, dropout=0.3,
                      tie_weights=tied, lexical_model=lex == "lex")
    model = build_model(cfg, 30, 30)
    model.initialize(mx.init.Xavier())
    src, src_len = ragged_sources([5, 2, 7])
    memory, (h, c) = model.encode(src, src_len)
    K = 3
    h, c = h.repeat(K, axis=0) + nd.random.normal(0, 0.3, (9, 3, 16)), c.repeat(K, axis=0)
    prev = nd.array(np.random.RandomState(0).randint(4, 30, 9))
    ref, (ref_h, ref_c), _ = model.decode_step(prev, [h, c], memory.repeat(K, axis=0), src_len.repeat(K, axis=0))
    weights = model.decoder.step_weights(mx.cpu())
    log_probs, new_hs, new_cs = decoder_step(nd, model.decoder, prev, _layer_states(h), _layer_states(c), memory,
                                             src_len, K, weights, native)
    new_h, new_c = nd.stack(*new_hs, axis=1), nd.stack(*new_cs, axis=1)   # back to (N,L,H)
    for ours, theirs in ((log_probs, ref), (new_h, ref_h), (new_c, ref_c)):
        np.testing.assert_allclose(ours.asnumpy(), theirs.asnumpy(), rtol=1e-5, atol=1e-6)
    if native and kernels.has_op("nmt_masked_fc"):   # rows left out of the products: the others as before
        skip = np.array([0, 1, 0, 0, 0, 1, 1, 0, 0], np.float32)
        log_probs, new_hs, new_cs = decoder_step(nd, model.decoder, prev, _layer_states(h), _layer_states(c), memory,
                                                 src_len, K, weights, native, skip=nd.array(skip))
        new_h, new_c = nd.stack(*new_hs, axis=1), nd.stack(*new_cs, axis=1)
        for ours, theirs in ((log_probs, ref), (new_h, ref_h), (new_c, ref_c)):
            np.testing.assert_allclose(ours.asnumpy()[skip == 0], theirs.asnumpy()[skip == 0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nbest", [0, 1, 4])
def test_native_beam_update_is_the_update_on_mxnet_operators(nbest):
    """nmt_beam_update against BeamStep._update on random steps: finished and dead (-inf) hypotheses, equal
    scores (the lower index first, as MXNet's topk), slots at their length limit, EOS among the candidates."""
    from nmt import native
    if not native.has_op("nmt_beam_update"):
        pytest.skip(f"native kernels: {native.status()}")
    from nmt.search_graph import BeamStep
    model = build_model(ModelConfig(embed_size=8, hidden_size=8, num_layers=1, attention="dot", dropout=0.0), 30, 30)
    K, B = 4, 6
    block = BeamStep([model], K, nbest)
    rng = np.random.RandomState(3)
    lp_table = nd.array(((5.0 + np.arange(12)) / 6.0) ** 0.6)
    for trial in range(20):
        cand_lp = np.sort(np.round(rng.uniform(-4, 0, (B * K, K)), 1), axis=1)[:, ::-1]   # rounded: ties
        cand_tok = rng.randint(0, 6, (B * K, K)).astype(np.float32)                      # EOS_ID among them
        scores = np.round(rng.uniform(-6, 0, B * K), 1)
        scores[rng.rand(B * K) < 0.1] = -np.inf
        finished = (rng.rand(B * K) < 0.3).astype(np.float32)
        t = float(rng.randint(1, 8))
        lengths = np.minimum(rng.randint(0, 8, B * K), t).astype(np.float32)
        limits = np.repeat(rng.randint(1, 10, B), K).astype(np.float32)
        args = [nd.array(a) for a in (cand_lp.copy(), cand_tok, scores, lengths, finished, limits, [t])] + [lp_table]
        fin = nd.broadcast_logical_or(args[4], nd.broadcast_lesser_equal(args[5], nd.broadcast_like(args[6], args[5])))
        want = block._update(nd, *args[:5], fin, *args[5:])
        got = nd.nmt_beam_update(*args, beam=K, nbest=nbest, eos=EOS_ID)
        for i, (w, g) in enumerate(zip(want, got)):
            np.testing.assert_array_equal(g.asnumpy(), w.asnumpy(), err_msg=f"trial {trial}, output {i}")


# -- ensembles ---------------------------------------------------------------------------------------------------

def _other_member(vocab=VOCAB):
    """An untrained member of another shape (one layer, dot attention, untied, a lexical model) over the copy
    model's vocabularies."""
    mx.random.seed(11)
    cfg = ModelConfig(embed_size=24, hidden_size=16, num_layers=1, attention="dot", dropout=0.0,
                      word_dropout=0.0, tie_weights=False, lexical_model=True)
    model = build_model(cfg, vocab, vocab)
    model.initialize(mx.init.Xavier(magnitude=3))
    return model


def _reference_ensemble_greedy(members, src, src_len, max_len):
    """Greedy decoding one sentence at a time with `decode_step`: argmax of the members' mean log-probs."""
    out = []
    for b in range(src.shape[0]):
        one_src, one_len = src[b:b + 1], src_len[b:b + 1]
        runs = [(m, *m.encode(one_src, one_len)) for m in members]
        states = [run[2] for run in runs]
        prev, tokens = nd.array([BOS_ID]), []
        for _ in range(int(max_len[b])):
            steps = [m.decode_step(prev, st, memory, one_len) for (m, memory, _), st in zip(runs, states)]
            mean = sum(lp.asnumpy()[0].astype(np.float64) for lp, _, _ in steps) / len(members)
            states = [st for _, st, _ in steps]
            token = int(mean.argmax())
            if token == EOS_ID:
                break
            tokens.append(token)
            prev = nd.array([token])
        out.append(tokens)
    return out


def test_ensemble_of_one_model_twice_decodes_like_the_model(copy_model):
    model, _ = copy_model
    (src, src_len, _, _, _), _ = copy_batch(np.random.RandomState(5), 12)
    max_len = 2 * src_len.asnumpy().astype(int)
    assert greedy_search([model, model], src, src_len, max_len) == greedy_search(model, src, src_len, max_len)
    alone = beam_search(model, src, src_len, beam_size=3, max_len=max_len, nbest=3)
    twice = beam_search([model, model], src, src_len, beam_size=3, max_len=max_len, nbest=3)
    assert [[ids for ids, _ in r] for r in twice] == [[ids for ids, _ in r] for r in alone]
    np.testing.assert_allclose([s for r in twice for _, s in r], [s for r in alone for _, s in r], rtol=1e-5)


def test_ensemble_follows_the_mean_of_its_members_log_probs(copy_model):
    """Two members of different shapes: greedy and beam-1 search equal a step-by-step reference over
    `decode_step`, and the ensemble's output differs from each member's own (so both members count)."""
    model, _ = copy_model
    other = _other_member()
    bias = np.zeros(VOCAB, dtype="float32")
    bias[4] = 12.0   # a strong, wrong opinion: the confident copy model alone would outvote a random member
    other.decoder.out_bias.set_data(nd.array(bias))
    (src, src_len, _, _, _), _ = copy_batch(np.random.RandomState(9), 10)
    max_len = 2 * src_len.asnumpy().astype(int)
    expected = _reference_ensemble_greedy([model, other], src, src_len, max_len)
    assert greedy_search([model, other], src, src_len, max_len) == expected
    assert [r[0][0] for r in beam_search([model, other], src, src_len, beam_size=1, max_len=max_len)] == expected
    assert expected != greedy_search(model, src, src_len, max_len)
    assert expected != greedy_search(other, src, src_len, max_len)
    weights = [m.decoder.step_weights(mx.cpu()) for m in (model, other)]
    assert greedy_search([model, other], src, src_len, max_len, weights=weights) == expected


def test_ensemble_members_must_share_vocabularies(copy_model):
    model, _ = copy_model
    src, src_len = ragged_sources([3, 4])
    with pytest.raises(ValueError, match="member 2 has vocabularies of 30/30 pieces, member 1 20/20"):
        greedy_search([model, _other_member(vocab=30)], src, src_len, 5)
    with pytest.raises(ValueError, match="weights: 1 lists for 2 ensemble members"):
        greedy_search([model, model], src, src_len, 5, weights=[model.decoder.step_weights(mx.cpu())])


def test_cached_step_blocks_do_not_keep_models_alive():
    import gc
    import weakref as wr
    from nmt import search_graph
    src, src_len = ragged_sources([3, 4])
    first, second = untrained_model(), untrained_model("dot")
    beam_search([first, second], src, src_len, beam_size=2, max_len=4)
    greedy_search(first, src, src_len, 4)
    refs = [wr.ref(first), wr.ref(second)]
    assert first in search_graph.STEP_CACHE
    del first, second
    gc.collect()
    gc.collect()   # the second member goes with the first one's cached block, whose weak key the first pass freed
    assert [r() for r in refs] == [None, None]


def test_native_kernels_and_mxnet_operators_decode_alike(copy_model):
    """The search with nmt.native's CPU kernels (the default when they load) and without: same hypotheses,
    scores equal to float32 rounding accumulated over the steps (the kernels sum their dot products in another
    order and use their own exp: up to 3e-5 relative measured on an AVX2 host, below 1e-5 on an AVX-512 one)."""
    from nmt import native
    if not native.available():
        pytest.skip(f"native kernels: {native.status()}")
    model, _ = copy_model
    (src, src_len, _, _, _), _ = copy_batch(np.random.RandomState(12), 16)
    src[2, 1] = 9
    fast = beam_search(model, src, src_len, beam_size=4, max_len=12, alpha=0.6, nbest=4)
    fast_greedy = greedy_search(model, src, src_len, 12)
    with native.turned_off():
        plain = beam_search(model, src, src_len, beam_size=4, max_len=12, alpha=0.6, nbest=4)
        plain_greedy = greedy_search(model, src, src_len, 12)
    from nmt.search_graph import STEP_CACHE
    assert {key[3] for key in STEP_CACHE[model]} == {True, False}   # both kinds of step graph ran
    _assert_same_hypotheses(fast, plain, rtol=1e-4, atol=1e-4)
    assert fast_greedy == plain_greedy
