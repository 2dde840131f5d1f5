"""nmt.search on untrained models: beam 1 = greedy, batched = one by one, per-sentence max length, early stopping,
ensembles (the mean of their members), the argument checks."""
import gc
import re
import weakref

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from nmt.config import ModelConfig
from nmt.models import build_model
from nmt.models.ensemble import Ensemble
from nmt.search import beam_search, greedy_search
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID

VOCAB = 30


def untrained_model(attention="mlp", seed=3, **kw):
    mx.random.seed(seed)
    cfg = ModelConfig(**{**dict(embed_size=16, hidden_size=16, num_layers=2, attention=attention, dropout=0.0,
                                word_dropout=0.0), **kw})
    model = build_model(cfg, VOCAB, VOCAB)
    model.initialize(mx.init.Xavier())
    return model


def other_member():
    """An untrained member of another shape (one layer, dot attention, a lexical model), fairly confident."""
    mx.random.seed(11)
    cfg = ModelConfig(embed_size=24, hidden_size=16, num_layers=1, attention="dot", dropout=0.0,
                      word_dropout=0.0, tie_weights=False, lexical_model=True)
    model = build_model(cfg, VOCAB, VOCAB)
    model.initialize(mx.init.Xavier(magnitude=3))
    return model


def ragged_sources(lengths, seed=0):
    """Random sources of the given lengths, padded with junk (not PAD) to show padding is ignored."""
    rng = np.random.RandomState(seed)
    src = rng.randint(4, VOCAB, (len(lengths), max(lengths) + 3)).astype("float32")
    return nd.array(src), nd.array(lengths)


def assert_same_hypotheses(a, b, rtol=1e-5, atol=1e-5):
    """The same token ids, and scores equal up to float32 rounding: a sentence's log-probabilities may differ in
    the last bits with the shapes of the batches it is decoded in (and, with a step graph planned per shape, with
    the shapes decoded before), and a score sums a few tens of them."""
    for x, y in zip(a, b):
        assert [ids for ids, _ in x] == [ids for ids, _ in y]
        np.testing.assert_allclose([s for _, s in x], [s for _, s in y], rtol=rtol, atol=atol)


@pytest.mark.parametrize("attention, alpha", [("dot", 0.6), ("general", 0.0), ("mlp", 1.0)])
def test_beam_of_one_equals_greedy(attention, alpha):
    """The same translations with the same scores (normalized log-probabilities, as beam search scores them)."""
    model = untrained_model(attention)
    src, src_len = ragged_sources([9, 3, 6, 1], seed=2)
    max_len = np.array([12, 5, 9, 3])
    greedy = greedy_search(model, src, src_len, max_len, alpha=alpha)
    assert_same_hypotheses([[g] for g in greedy],
                           beam_search(model, src, src_len, beam_size=1, max_len=max_len, alpha=alpha))
    assert all(score < 0 for _, score in greedy)


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
        assert_same_hypotheses([greedy_search(model, one_src, one_len, int(max_len[i]))], [[greedy[i]]])
        alone = beam_search(model, one_src, one_len, beam_size=3, max_len=int(max_len[i]), nbest=3)
        assert_same_hypotheses(alone, [beam[i]], atol=1e-5)


def test_max_len_is_respected_per_sentence():
    model = untrained_model()
    src, src_len = ragged_sources([5, 5, 5, 5])
    max_len = np.array([0, 1, 3, 6])
    greedy = greedy_search(model, src, src_len, max_len)
    beam = beam_search(model, src, src_len, beam_size=3, max_len=max_len, nbest=2)
    assert greedy[0] == ([], 0.0) and beam[0] == [([], 0.0)]
    for i in range(1, 4):
        assert 0 < len(greedy[i][0]) <= max_len[i]
        assert all(len(ids) <= max_len[i] and EOS_ID not in ids for ids, _ in beam[i])
    # An untrained model rarely says EOS, so most outputs run to exactly max_len.
    assert sum(len(ids) == m for (ids, _), m in zip(greedy, max_len)) >= 3
    assert greedy_search(model, src, src_len, 0) == [([], 0.0)] * 4


def test_bad_arguments():
    model = untrained_model()
    src, src_len = ragged_sources([3, 4])
    with pytest.raises(ValueError, match="nbest"):
        beam_search(model, src, src_len, beam_size=2, max_len=5, nbest=3)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, src_len, beam_size=0, max_len=5)
    with pytest.raises(ValueError, match="max_len"):
        greedy_search(model, src, src_len, np.array([3, 4, 5]))
    with pytest.raises(ValueError, match="at least one model"):
        greedy_search([], src, src_len, 5)


def count_rows(monkeypatch, model):
    """Rows the model's step decodes, summed over the steps of the searches that follow."""
    rows = []
    step = model.hybrid_step
    monkeypatch.setattr(model, "hybrid_step", lambda prev, state: rows.append(prev.shape[0]) or step(prev, state))
    return rows


# (alpha, whether it saves steps here): a penalty growing fast with length keeps long hypotheses hopeful longer
@pytest.mark.parametrize("alpha,saves", [(0.0, True), (0.6, True), (1.5, False)])
@pytest.mark.parametrize("nbest", [1, 2])
def test_early_stop_gives_the_same_result_in_fewer_steps(monkeypatch, alpha, saves, nbest):
    """A sentence stops once no active hypothesis can beat its nbest-th finished one: the same hypotheses and
    scores as running it until all its slots are finished, with fewer decoder steps. An untrained model biased
    towards EOS and one other token finishes short hypotheses early while long ones go on."""
    model = untrained_model("dot")
    bias = model.decoder.out_bias.data().copy()
    bias[EOS_ID], bias[5] = 1.5, 3.0
    model.decoder.out_bias.set_data(bias)
    src, src_len = ragged_sources([6, 3, 9, 5, 7, 2, 8, 4], seed=2)
    rows = count_rows(monkeypatch, model)
    full = beam_search(model, src, src_len, beam_size=4, max_len=20, alpha=alpha, nbest=nbest, early_stop=False)
    full_rows = sum(rows)
    rows.clear()
    early = beam_search(model, src, src_len, beam_size=4, max_len=20, alpha=alpha, nbest=nbest)
    assert_same_hypotheses(full, early)
    assert sum(rows) < full_rows / 2 if saves else sum(rows) <= full_rows


def reference_greedy(members, src, src_len, max_len):
    """Greedy decoding one sentence at a time through each member's own `step`: argmax of the mean log-probs."""
    out = []
    for b in range(src.shape[0]):
        one_src, one_len = src[b:b + 1], src_len[b:b + 1]
        states = [m.init_state(m.encode(one_src, one_len)) for m in members]
        prev, tokens = nd.array([BOS_ID]), []
        for _ in range(int(max_len[b])):
            steps = [m.step(prev, st) for m, st in zip(members, states)]
            mean = sum(lp.asnumpy()[0].astype(np.float64) for lp, _, _ in steps) / len(members)
            states = [st for _, st, _ in steps]
            token = int(mean.argmax())
            if token == EOS_ID:
                break
            tokens.append(token)
            prev = nd.array([token])
        out.append(tokens)
    return out


def test_ensemble_follows_the_mean_of_its_members_log_probs():
    first, other = untrained_model("general"), other_member()
    src, src_len = ragged_sources([6, 2, 8, 4], seed=9)
    max_len = np.array([8, 4, 10, 6])
    expected = reference_greedy([first, other], src, src_len, max_len)
    assert [ids for ids, _ in greedy_search([first, other], src, src_len, max_len)] == expected
    assert [r[0][0] for r in beam_search([first, other], src, src_len, beam_size=1, max_len=max_len)] == expected
    assert expected != [ids for ids, _ in greedy_search(first, src, src_len, max_len)]
    ensemble = Ensemble([first, other])
    state = ensemble.init_state(ensemble.encode(src, src_len))
    log_probs, _, attention = ensemble.step(nd.full((4,), BOS_ID), state)
    members = [m.step(nd.full((4,), BOS_ID), m.init_state(m.encode(src, src_len))) for m in (first, other)]
    np.testing.assert_allclose(log_probs.asnumpy(), (members[0][0] + members[1][0]).asnumpy() / 2, atol=1e-6)
    assert attention.shape == (4, src.shape[1])
    logits = ensemble(src, src_len, nd.full((4, 3), BOS_ID))
    np.testing.assert_allclose(logits[:, 0].asnumpy(), log_probs.asnumpy(), atol=1e-5)


def test_ensemble_of_a_model_and_its_copy_decodes_like_the_model():
    """The mean is not renormalized: a model and a copy of it (the same parameters) score as the model."""
    model, copy = untrained_model("dot"), untrained_model("dot")
    assert copy is not model
    src, src_len = ragged_sources([6, 2, 8, 4], seed=4)
    assert_same_hypotheses([[g] for g in greedy_search([model, copy], src, src_len, 7)],
                           [[g] for g in greedy_search(model, src, src_len, 7)])
    alone = beam_search(model, src, src_len, beam_size=3, max_len=7, nbest=3)
    assert_same_hypotheses(beam_search([model, copy], src, src_len, beam_size=3, max_len=7, nbest=3), alone,
                           rtol=1e-5, atol=1e-5)


def test_an_ensemble_refuses_one_model_given_twice():
    """`Translator.from_dir` refuses a model directory (or its copy) given twice, whose parameters the mean would count
    twice, but the Python API took one model object twice (`Ensemble([net, net])`, `beam_search([net, net])`): with
    a third member, that model weighed 2/3, silently. The same object twice is a ValueError naming both members."""
    model, other = untrained_model("dot"), other_member()
    src, src_len = ragged_sources([6, 2], seed=4)
    said = "ensemble member {} is member {} again (the same LSTMModel object): the ensemble's mean would count"
    for members, i, j in (([model, model], 2, 1), ([model, other, other], 3, 2), ([other, model, model, other], 3, 2)):
        with pytest.raises(ValueError, match=re.escape(said.format(i, j))):
            Ensemble(members)
    with pytest.raises(ValueError, match=re.escape(said.format(3, 1))):
        beam_search([model, other, model], src, src_len, beam_size=2, max_len=5)
    with pytest.raises(ValueError, match=re.escape(said.format(2, 1))):
        greedy_search((model, model), src, src_len, 5)


def test_an_ensemble_refuses_a_model_also_inside_an_ensemble_member():
    """An `Ensemble` is a model, so it may be a member: `beam_search([Ensemble([a, b]), a])` took `a` twice (a
    weighed 3/4, silently), as the same object given twice did. Models inside an Ensemble member count too; another
    model beside one is taken."""
    model, other, third = untrained_model("dot"), other_member(), untrained_model("mlp")
    src, src_len = ragged_sources([6, 2], seed=4)
    said = "ensemble member 2 is a model of member 1 (an Ensemble) again (the same LSTMModel object): the ensemble's"
    with pytest.raises(ValueError, match=re.escape(said)):
        Ensemble([Ensemble([model, other]), model])
    with pytest.raises(ValueError, match=re.escape(said)):
        beam_search([Ensemble([model, other]), other], src, src_len, beam_size=2, max_len=5)
    with pytest.raises(ValueError, match=re.escape("ensemble a model of member 2 (an Ensemble) is member 1 again")):
        greedy_search([model, Ensemble([third, model])], src, src_len, 5)
    assert len(greedy_search([Ensemble([model, other]), third], src, src_len, 5)) == 2


def test_ensemble_members_must_share_vocabularies():
    small = build_model(ModelConfig(embed_size=16, hidden_size=16), 20, 20)
    with pytest.raises(ValueError, match="member 2 has vocabularies of 20/20 pieces, member 1 30/30"):
        Ensemble([untrained_model(), small])


def test_compiled_steps_do_not_keep_models_alive():
    src, src_len = ragged_sources([3, 4])
    first, second = untrained_model(), untrained_model("dot")
    beam_search([first, second], src, src_len, beam_size=2, max_len=4)
    refs = [weakref.ref(first), weakref.ref(second)]
    del first, second
    gc.collect()
    assert [r() for r in refs] == [None, None]


def first_token_probabilities(model, src, src_len, top=0, drawn=True):
    """The model's distribution of a sentence's first token (renormalized over its `top` most probable tokens); with
    `drawn`, as a search draws from it: without <pad> and <s>, which it never chooses."""
    state = model.init_state(model.encode(src, src_len))
    log_probs, _, _ = model.step(nd.full((1,), BOS_ID), state)
    p = np.exp(log_probs.asnumpy()[0].astype(np.float64))
    if drawn:
        p[[PAD_ID, BOS_ID]] = 0.0
    if top:
        p[np.argsort(-p)[top:]] = 0.0
    return p / p.sum()


def peaked(model, seed=0):
    """`model` with an output bias that makes it fairly confident (an untrained model is near-uniform)."""
    bias = next(p for name, p in model.collect_params().items() if name.endswith("decoder_out_bias"))
    bias.set_data(nd.array(np.random.RandomState(seed).normal(0, 1.5, VOCAB)))
    return model


@pytest.mark.parametrize("members, top", [("one", 0), ("one", 3), ("ensemble", 0)])
def test_sampling_draws_from_the_models_distribution(members, top):
    model = peaked(other_member()) if members == "one" else Ensemble([peaked(other_member()),
                                                                      peaked(untrained_model(), 1)])
    src, src_len = ragged_sources([6], seed=1)
    p = first_token_probabilities(model, src, src_len, top)
    assert 0.1 < p.max() < 0.9   # neither near-uniform nor near-certain: argmax or uniform draws would fail
    n = 4000
    mx.random.seed(7)
    first = greedy_search(model, nd.repeat(src, n, axis=0), nd.repeat(src_len, n, axis=0), 1, sample=top)
    drawn = np.bincount([ids[0] if ids else EOS_ID for ids, _ in first], minlength=VOCAB) / n
    np.testing.assert_allclose(drawn, p, atol=0.03)
    assert (drawn[p == 0] == 0).all()


def test_sampling_never_draws_a_banned_token():
    """Sampling over the whole vocabulary wrote control characters and "⁇" into back-translations (38 and 2 lines
    of 1,000): <unk> and the bytes of control characters, which no training text holds, kept label smoothing's
    share of the probability. `banned` ids (`Tokenizer.never_written`) are never drawn; the rest keep their odds."""
    model = peaked(other_member())
    src, src_len = ragged_sources([6], seed=1)
    p = first_token_probabilities(model, src, src_len, 0)
    banned = [int(i) for i in np.argsort(-p)[:2]]   # the two likeliest first tokens
    n = 2000
    mx.random.seed(7)
    first = greedy_search(model, nd.repeat(src, n, axis=0), nd.repeat(src_len, n, axis=0), 1, sample=0,
                          banned=banned)
    drawn = np.bincount([ids[0] if ids else EOS_ID for ids, _ in first], minlength=VOCAB) / n
    assert drawn[banned].sum() == 0 and p[banned].sum() > 0.2
    rest = p.copy()
    rest[banned] = 0
    np.testing.assert_allclose(drawn, rest / rest.sum(), atol=0.04)


def test_the_tokenizers_never_written_pieces_are_unk_and_control_bytes(tmp_path):
    """<pad> and <s> were banned twice when sampling: in `never_written` and by every search's `NeverChosen`. The
    search owns that ban; the tokenizer's list holds what only its vocabulary knows (<unk>, control bytes)."""
    from nmt.tokenizer import train_tokenizer
    from tests.unit.test_tokenizer import EN_WORDS, synthetic_lines
    tok = train_tokenizer(synthetic_lines(EN_WORDS, n=500, seed=1), tmp_path, "en", 400)
    pieces = [tok.piece(i) for i in tok.never_written()]
    assert pieces == ["<unk>"] + [f"<0x{b:02X}>" for b in [*range(0x20), 0x7F]]


def test_a_sampled_translation_holds_no_pad_or_bos(tmp_path):
    """`nmt-translate --sample 0` wrote <s> and <pad> (11 of 120 lines of an undertrained model), which the text
    then dropped without a word: the translator's sampling draws neither (`NeverChosen`) nor a piece of
    `never_written`, even from a model that finds <pad> and <s> the likeliest."""
    from nmt.config import DecodeConfig
    from nmt.tokenizer import PAD_ID, train_tokenizer
    from nmt.translate import Translator
    from tests.unit.test_tokenizer import EN_WORDS, synthetic_lines
    tok = train_tokenizer(synthetic_lines(EN_WORDS, n=500, seed=1), tmp_path, "en", 400)
    mx.random.seed(3)
    model = build_model(ModelConfig(embed_size=16, hidden_size=16, dropout=0.0, word_dropout=0.0),
                        tok.vocab_size, tok.vocab_size)
    model.initialize(mx.init.Xavier())
    bias = np.zeros(tok.vocab_size, dtype="float32")
    bias[[PAD_ID, BOS_ID]] = 6.0   # together about 9 in 10 of the probability
    next(p for name, p in model.collect_params().items() if name.endswith("decoder_out_bias")).set_data(nd.array(bias))
    tr = Translator(model, tok, tok, DecodeConfig())
    tr.sample = 0
    mx.random.seed(5)
    drawn = [ids for hyps in tr.translate_ids(["we ate rice", "the weather is nice today ."] * 10) for ids, _ in hyps]
    assert sum(map(len, drawn)) > 20 and not {PAD_ID, BOS_ID} & {t for ids in drawn for t in ids}


def favouring_pad_and_bos(model):
    """`model` with an output bias that makes <pad> and <s> its likeliest pieces at every step."""
    bias = np.zeros(VOCAB, dtype="float32")
    bias[[PAD_ID, BOS_ID]] = 8.0
    next(p for name, p in model.collect_params().items() if name.endswith("decoder_out_bias")).set_data(nd.array(bias))
    return model


def test_no_search_writes_pad_or_bos():
    """No translation holds <pad> or <s> (its text would drop them), yet greedy and beam search banned no piece: a
    model that gives them the most probability had them written. Every search (greedy, sampling, beam, n-best,
    ensembles, target prefixes) now chooses among the other pieces, by their own log-probabilities."""
    model, other = favouring_pad_and_bos(untrained_model()), favouring_pad_and_bos(other_member())
    src, src_len = ragged_sources([6, 2, 8, 4], seed=4)
    for m in (model, other, Ensemble([model, other])):
        assert set(first_token_probabilities(m, src[:1], src_len[:1], drawn=False).argsort()[-2:]) == {PAD_ID, BOS_ID}
    prefixes = [[5], None, [6, 7], []]
    mx.random.seed(1)
    found = {
        "greedy": [[h] for h in greedy_search(model, src, src_len, 7)],
        "greedy, prefixes": [[h] for h in greedy_search(model, src, src_len, 7, prefixes=prefixes)],
        "sample": [[h] for h in greedy_search(model, src, src_len, 7, sample=0)],
        "sample 3": [[h] for h in greedy_search(model, src, src_len, 7, sample=3)],
        "beam": beam_search(model, src, src_len, beam_size=3, max_len=7),
        "n-best": beam_search(model, src, src_len, beam_size=4, max_len=7, nbest=4),
        "n-best, prefixes": beam_search(model, src, src_len, beam_size=3, max_len=7, nbest=3, prefixes=prefixes),
        "ensemble greedy": [[h] for h in greedy_search([model, other], src, src_len, 7)],
        "ensemble sample": [[h] for h in greedy_search([model, other], src, src_len, 7, sample=0)],
        "ensemble n-best": beam_search([model, other], src, src_len, beam_size=3, max_len=7, nbest=3)}
    for name, hyps in found.items():
        tokens = [t for nbest in hyps for ids, _ in nbest for t in ids]
        assert len(tokens) > 10 and not {PAD_ID, BOS_ID} & set(tokens), (name, hyps)
        assert all(np.isfinite(score) for nbest in hyps for _, score in nbest), (name, hyps)
    assert [len(n) for n in found["n-best"]] == [4] * 4


def test_sampling_from_the_top_token_is_greedy_and_a_seed_repeats_a_draw():
    model = untrained_model()
    src, src_len = ragged_sources([7, 2, 11, 4], seed=5)
    max_len = np.array([9, 4, 14, 6])
    assert greedy_search(model, src, src_len, max_len, sample=1) == greedy_search(model, src, src_len, max_len)
    draws = []
    for seed in (5, 5, 6):
        mx.random.seed(seed)
        draws.append(greedy_search(model, src, src_len, max_len, sample=0))
    assert draws[0] == draws[1] != draws[2]
    assert all(len(ids) <= m for (ids, _), m in zip(draws[2], max_len))
    with pytest.raises(ValueError, match="sample must be >= 0"):
        greedy_search(model, src, src_len, max_len, sample=-1)


def test_the_row_top_k_hook_is_used_and_matches_its_reference(monkeypatch):
    """`search_blocks.ROW_TOPK`, where an optional kernel plugs in, is honoured whenever it is set (not only before
    the first search) and checked against the MXNet reference as an accelerated kernel would be: here a top-k
    made of a full sort."""
    from mxnet import gluon
    from nmt import search_blocks
    made = []

    class SortedTopK(gluon.HybridBlock):
        def __init__(self, k, **kwargs):
            super().__init__(**kwargs)
            self._k = k
            made.append(k)

        def hybrid_forward(self, F, log_probs):
            values = F.slice_axis(F.sort(log_probs, axis=-1, is_ascend=False), axis=-1, begin=0, end=self._k)
            ids = F.slice_axis(F.argsort(log_probs, axis=-1, is_ascend=False), axis=-1, begin=0, end=self._k)
            return values, ids

    model = untrained_model("dot")
    src, src_len = ragged_sources([7, 2, 11, 4, 1], seed=5)
    reference = beam_search(model, src, src_len, beam_size=3, max_len=12, nbest=3)
    monkeypatch.setattr(search_blocks, "ROW_TOPK", SortedTopK)
    assert_same_hypotheses(beam_search(model, src, src_len, beam_size=3, max_len=12, nbest=3), reference)
    assert made == [3]


@pytest.mark.parametrize("a, b, lengths, limits", [
    (1.1, 0, [50, 10, 7], [55, 11, 8]),     # 1.1 x 50 is 55.00000000000001 in floating point: 55, not 56
    (2.2, 0, [25, 45, 3], [55, 99, 7]),
    (1.1, 10, [50], [65]),
    (1.5, 10, [1, 7], [12, 21]),            # a fraction above a whole number is still rounded up
    (0.0001, 0, [3], [1]),
    (1e-10, 0, [3], [1]),                   # not rounded to 0: a limit of no step left the translation empty
    (1.0000000001, 0, [1], [2]),            # a fraction below 1e-9 above a whole number is rounded up too
    (999999.0, 0, [4613], [4612995387]),    # a product of 4.6e9 is whole: rounding to 9 decimals made it 1 more
    (2.2, 7, [np.int32(45)], [106]),
])
def test_the_length_limit_is_a_times_the_source_length_plus_b_rounded_up(a, b, lengths, limits):
    from nmt.search import length_limits
    assert length_limits(np.array(lengths), a, b).tolist() == limits
