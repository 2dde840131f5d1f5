"""Unit tests of the LSTM architecture (nmt.models.lstm) and the loss: padding/masking invariance, hybridization,
step = teacher-forced forward, loss masking, tying, configuration errors, the FLOP estimate."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from mxnet.gluon import rnn

from nmt.config import ATTENTION_TYPES, ConfigError, ModelConfig
from nmt.loss import Seq2SeqLoss
from nmt.models import build_model
from nmt.models.lstm import LSTMModel, LSTMState, count_flops_per_token
from nmt.models.lstm_layers import FusedLSTM, piece_ranges

SRC_V, TGT_V = 30, 31  # different sizes catch swapped vocabularies
# "+lex": with the lexical model (its source embeddings ride in the memory after the values and mlp keys)
ATTENTIONS = [*ATTENTION_TYPES, "dot+lex", "mlp+lex"]   # (a new score type is tested as it is added)


def make_model(attention="dot", num_layers=2, tie=False, seed=1, embed=16, hidden=16):
    attention, _, lex = attention.partition("+")
    cfg = ModelConfig(embed_size=embed, hidden_size=hidden, num_layers=num_layers, attention=attention,
                      dropout=0.0, word_dropout=0.0, tie_weights=tie, lexical_model=lex == "lex")
    mx.random.seed(seed)
    model = build_model(cfg, SRC_V, TGT_V)
    model.initialize(mx.init.Xavier())
    return model


def make_batch(src_lens, tgt_lens, src_width, tgt_width, pad_src=0, pad_tgt=0, seed=0):
    """(src, src_len, tgt_in, tgt_out, tgt_len) with sentence i drawn from seed+i, padded to the widths."""
    n = len(src_lens)
    src = np.full((n, src_width), pad_src, dtype="float32")
    tgt_in = np.full((n, tgt_width), pad_tgt, dtype="float32")
    tgt_out = np.full((n, tgt_width), pad_tgt, dtype="float32")
    for i, (s, t) in enumerate(zip(src_lens, tgt_lens)):
        rng = np.random.RandomState(seed + i)
        src[i, :s] = rng.randint(4, SRC_V, s)
        tgt_in[i, :t] = rng.randint(4, TGT_V, t)
        tgt_out[i, :t] = rng.randint(4, TGT_V, t)
    return [nd.array(a) for a in (src, np.array(src_lens), tgt_in, tgt_out, np.array(tgt_lens))]


@pytest.mark.parametrize("num_layers", [1, 3])
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_loss_same_padded_to_10_or_50(attention, num_layers):
    loss_block = Seq2SeqLoss(make_model(attention, num_layers), label_smoothing=0.1)
    lens = dict(src_lens=[4, 9, 1], tgt_lens=[5, 3, 10])
    loss10, nll10 = loss_block(*make_batch(**lens, src_width=10, tgt_width=10))
    loss50, nll50 = loss_block(*make_batch(**lens, src_width=50, tgt_width=50))
    assert loss10.shape == (3,) and np.all(loss10.asnumpy() > 0)
    np.testing.assert_allclose(loss10.asnumpy(), loss50.asnumpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(nll10.asnumpy(), nll50.asnumpy(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_padded_source_positions_change_nothing(attention):
    model = make_model(attention, num_layers=3)
    src, src_len, tgt_in, _, _ = make_batch([3, 6], [4, 4], 8, 4)
    noisy = src.copy()
    noisy[0, 3:] = nd.array(np.arange(5) + 10)  # junk tokens after the valid length
    noisy[1, 6:] = 7
    np.testing.assert_allclose(model(noisy, src_len, tgt_in).asnumpy(), model(src, src_len, tgt_in).asnumpy(),
                               rtol=0, atol=1e-6)
    changed = src.copy()
    changed[0, 2] = 29  # a valid position does matter (the test can fail)
    assert (model(changed, src_len, tgt_in)[0] - model(src, src_len, tgt_in)[0]).abs().max().asscalar() > 1e-4


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_hybridized_equals_imperative(attention):
    model = make_model(attention, num_layers=2)
    loss_block = Seq2SeqLoss(model, label_smoothing=0.1)
    batch = make_batch([5, 2, 7], [6, 1, 3], 7, 6)
    logits = model(*batch[:3]).asnumpy()
    loss, nll = (x.asnumpy() for x in loss_block(*batch))
    loss_block.hybridize(static_alloc=True, static_shape=True)
    for _ in range(2):  # the second call runs the cached graph
        h_loss, h_nll = loss_block(*batch)
        np.testing.assert_allclose(h_loss.asnumpy(), loss, rtol=0, atol=1e-5)
        np.testing.assert_allclose(h_nll.asnumpy(), nll, rtol=0, atol=1e-5)
        np.testing.assert_allclose(model(*batch[:3]).asnumpy(), logits, rtol=0, atol=1e-5)
    assert logits.shape == (3, 6, TGT_V) and logits.dtype == np.float32


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_step_log_probs_are_the_teacher_forced_ones(attention, tie):
    """`step` (imperative, and as the search's hybridized `hybrid_step`) = the teacher-forced forward, position by
    position, for every attention type, tied or not, with and without the lexical model."""
    model = make_model(attention, num_layers=2, tie=tie)
    src, src_len, tgt_in, _, _ = make_batch([5, 2, 7], [6, 6, 6], 9, 6, seed=3)
    full = nd.log_softmax(model(src, src_len, tgt_in), axis=-1).asnumpy()
    model.hybridize(static_alloc=True)   # the forward hybridized too: the step runs its decoder block cached
    for step in (model.step, model.hybrid_step):
        state = model.init_state(model.encode(src, src_len))
        assert isinstance(state, LSTMState) and state.h.shape == (3, 2, 16)
        for t in range(tgt_in.shape[1]):
            log_probs, state, attn = step(tgt_in[:, t], state)
            np.testing.assert_allclose(log_probs.asnumpy(), full[:, t], rtol=0, atol=1e-5)
            attn = attn.asnumpy()
            np.testing.assert_allclose(attn.sum(axis=1), 1.0, atol=1e-5)
            assert attn[1, 2:].max() == 0.0 and attn[0, 5:].max() == 0.0  # padding gets no attention


def test_hybrid_step_passes_the_source_fields_through():
    model = make_model("mlp")
    src, src_len, tgt_in, _, _ = make_batch([5, 2], [3, 3], 6, 3)
    state = model.init_state(model.encode(src, src_len))
    _, new, _ = model.hybrid_step(tgt_in[:, 0], state)
    assert len(new.memory) == 2   # values and the mlp attention's keys, no copy of either
    assert all(a is b for a, b in zip(new.memory, state.memory))
    assert new.src_len is state.src_len and new.h is not state.h


def test_dropout_only_in_training():
    cfg = ModelConfig(embed_size=16, hidden_size=16, num_layers=2, dropout=0.5)
    model = build_model(cfg, SRC_V, TGT_V)
    model.initialize(mx.init.Xavier())
    model.hybridize(static_alloc=True)
    batch = make_batch([5, 3], [4, 6], 5, 6)[:3]
    np.testing.assert_array_equal(model(*batch).asnumpy(), model(*batch).asnumpy())
    with autograd.record():
        a, b = model(*batch), model(*batch)
    assert np.abs((a - b).asnumpy()).max() > 1e-3


def test_word_dropout_zeroes_whole_tokens_only_in_training():
    cfg = ModelConfig(embed_size=16, hidden_size=16, num_layers=2, dropout=0.0, word_dropout=0.5)
    model = build_model(cfg, SRC_V, TGT_V)
    model.initialize(mx.init.Xavier())
    plain = build_model(ModelConfig(embed_size=16, hidden_size=16, num_layers=2, dropout=0.0, word_dropout=0.0),
                        SRC_V, TGT_V)
    plain.initialize()
    # no new parameters: a model trained with word dropout loads into one without
    assert sorted(p.name for p in model.collect_params().values()) == \
        sorted(p.name for p in plain.collect_params().values())
    emb = model.encoder.embed(mx.nd.array([[4, 5, 6, 7, 8, 9, 10, 11]] * 8))
    np.testing.assert_array_equal(model.encoder.word_dropout(emb).asnumpy(), emb.asnumpy())   # inference
    with autograd.record():
        dropped = model.encoder.word_dropout(emb).asnumpy()
    zero_tokens = (np.abs(dropped).max(axis=-1) == 0)
    assert 0 < zero_tokens.mean() < 1
    kept = ~zero_tokens
    np.testing.assert_allclose(dropped[kept], 2 * emb.asnumpy()[kept], rtol=1e-6)   # whole tokens, rescaled
    batch = make_batch([5, 3], [4, 6], 5, 6)[:3]
    acted = []   # each side's in the model's forward (either side's alone passed the comparison below)
    for side in (model.encoder, model.decoder):
        side.word_dropout.register_forward_hook(
            lambda block, inputs, out, side=side: acted.append((side.name, bool(   # whole tokens zeroed
                ((out.abs().max(axis=-1) == 0) * (inputs[0].abs().max(axis=-1) > 0)).sum().asscalar()))))
    mx.random.seed(1)   # (the draws that zero no token of a side: about 1 in 1,000)
    with autograd.record():
        a, b = model(*batch), model(*batch)
    assert np.abs((a - b).asnumpy()).max() > 1e-4
    assert sorted(set(acted)) == [(model.decoder.name, True), (model.encoder.name, True)], acted


def test_int32_inputs_accepted():
    """Batches arrive as int32 (nmt.batching); the hybridized loss must take them as they are."""
    loss_block = Seq2SeqLoss(make_model("general"), label_smoothing=0.1)
    batch = make_batch([3, 4], [2, 5], 4, 5)
    expected = loss_block(*batch)[0].asnumpy()
    loss_block.hybridize(static_alloc=True, static_shape=True)
    got = loss_block(*[x.astype("int32") for x in batch])[0].asnumpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def _grads(model):
    return {name: p.grad().asnumpy().copy() for name, p in model.collect_params().items() if p.grad_req != "null"}


def test_filler_rows_give_zero_loss_and_zero_gradient():
    model = make_model("mlp", num_layers=3)
    loss_block = Seq2SeqLoss(model, label_smoothing=0.1)
    filler = [nd.zeros((1, 6)), nd.zeros((1,)), nd.zeros((1, 5)), nd.zeros((1, 5)), nd.zeros((1,))]
    with autograd.record():
        loss, nll = loss_block(*filler)
    loss.backward()
    assert loss.asscalar() == 0.0 and nll.asscalar() == 0.0
    assert all(np.all(g == 0) for g in _grads(model).values())

    real = make_batch([4], [5], 6, 5)
    with autograd.record():
        loss_real, _ = loss_block(*real)
    loss_real.backward()
    alone = _grads(model)
    mixed = [nd.concat(a, b, dim=0) for a, b in zip(real, filler)]
    with autograd.record():
        loss_mixed, _ = loss_block(*mixed)
    loss_mixed.backward()
    assert loss_mixed[1].asscalar() == 0.0
    assert abs(loss_mixed[0].asscalar() - loss_real.asscalar()) < 1e-5
    for name, g in _grads(model).items():
        np.testing.assert_allclose(g, alone[name], rtol=0, atol=1e-6, err_msg=name)


def test_loss_is_smoothed_sum_up_to_tgt_len():
    eps = 0.2
    loss_block = Seq2SeqLoss(make_model(), label_smoothing=eps)
    src, src_len, tgt_in, tgt_out, _ = make_batch([4], [6], 4, 6)
    loss, nll = loss_block(src, src_len, tgt_in, tgt_out, nd.array([3]))
    logp = nd.log_softmax(loss_block.model(src, src_len, tgt_in), axis=-1).asnumpy()[0].astype(np.float64)
    ref = np.array([logp[t, int(tgt_out[0, t].asscalar())] for t in range(3)])
    assert abs(nll.asscalar() + ref.sum()) < 1e-4
    expected = -((1 - eps) * ref + eps * logp[:3].mean(axis=1)).sum()
    assert abs(loss.asscalar() - expected) < 1e-4


def test_tie_weights_shares_one_parameter():
    tied, untied = make_model(tie=True), make_model(tie=False)
    n_tied = sum(p.data().size for p in tied.collect_params().values())
    n_untied = sum(p.data().size for p in untied.collect_params().values())
    assert n_untied - n_tied == TGT_V * 16
    assert not any(name.endswith("out_weight") for name in tied.collect_params())
    # Through the output layer every row of the tied embedding gets a gradient, not just the input tokens.
    src, src_len, tgt_in, tgt_out, tgt_len = make_batch([3], [4], 3, 4)
    tgt_in[:] = 5
    for model, expect_all_rows in ((tied, True), (untied, False)):
        with autograd.record():
            loss, _ = Seq2SeqLoss(model)(src, src_len, tgt_in, tgt_out, tgt_len)
        loss.backward()
        grad = model.decoder.embed_weight.grad().asnumpy()
        rows_with_grad = np.abs(grad).sum(axis=1) > 0
        assert rows_with_grad.all() == expect_all_rows and rows_with_grad[5]


@pytest.mark.parametrize("change, flag", [
    (dict(attention="bogus"), "--attention"),
    (dict(num_layers=0), "--num-layers"),
    (dict(dropout=1.0), "--dropout"),
    (dict(word_dropout=-0.1), "--word-dropout"),
    (dict(dropout=-0.1), "--dropout"),
    (dict(hidden_size=0), "--hidden-size"),
    (dict(tie_weights=True, embed_size=16, hidden_size=32), "--tie-weights"),
    (dict(arch="bogus"), "--arch"),
])
def test_config_errors_name_the_flag(change, flag):
    cfg = ModelConfig(**{**dict(embed_size=16, hidden_size=16), **change})
    with pytest.raises(ConfigError, match=flag):
        build_model(cfg, SRC_V, TGT_V)


def test_registry_builds_the_lstm_with_the_saved_parameter_names():
    model = make_model()
    assert type(model) is LSTMModel and model.prefix == "seq2seq_"
    assert "seq2seq_decoder_rnn_rnn_param" in model.collect_params()


def test_other_construction_errors():
    with pytest.raises(ConfigError, match="target vocabulary"):
        build_model(ModelConfig(embed_size=16, hidden_size=16), SRC_V, 3)
    with pytest.raises(ConfigError, match="--label-smoothing"):
        Seq2SeqLoss(make_model(), label_smoothing=1.0)


@pytest.mark.parametrize("num_layers", [1, 3])
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_flop_estimate_matches_weight_matrices(attention, num_layers):
    """Forward MACs per token = entries of the weight matrices each token goes through."""
    model = make_model(attention, num_layers, embed=12, hidden=16)
    model(*make_batch([2], [2], 2, 2)[:3])
    def matrix_entries(block, skip):
        dense = sum(p.data().size for n, p in block.collect_params().items()
                    if p.data().ndim == 2 and not any(s in n for s in skip))
        lstm = []   # weight matrices inside the flat LSTM vectors
        block.apply(lambda b: lstm.extend(s for s in b.piece_shapes if len(s) == 2) if isinstance(b, FusedLSTM) else None)
        return dense + sum(a * b for a, b in lstm)
    src_w = matrix_entries(model.encoder, ("embed_", "bridge"))
    tgt_w = matrix_entries(model.decoder, ("embed_weight", "score_proj"))
    cfg = model.cfg
    est0 = count_flops_per_token(cfg, SRC_V, TGT_V, avg_src_len=0)
    assert est0["src_forward_macs"] == src_w and est0["tgt_forward_macs"] == tgt_w
    est = count_flops_per_token(cfg, SRC_V, TGT_V, avg_src_len=20)
    per_position = 2 * 16 + (12 if cfg.lexical_model else 0)   # score and context (and source-embedding context)
    assert est["tgt_forward_macs"] - tgt_w == 20 * per_position
    assert est["tgt_train_flops"] == 6 * est["tgt_forward_macs"]


class _Holder(gluon.HybridBlock):
    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.rnn = layer

    def hybrid_forward(self, F, x, h, c):
        return self.rnn(x, [h, c]) if isinstance(self.rnn, rnn.LSTM) else self.rnn(x, h, c)


def test_fused_lstm_equals_gluon_lstm():
    """Gluon's rnn.LSTM weights laid out flat (every layer's i2h and h2h weights, then their biases) give FusedLSTM
    the same function: the flat layout and gate order are the fused kernel's."""
    H, E, L = 6, 5, 2
    gluon_lstm = rnn.LSTM(H, num_layers=L, layout="TNC", input_size=E)
    reference = _Holder(gluon_lstm)
    reference.initialize(mx.init.Uniform(0.5))
    for p in reference.collect_params().values():    # non-zero biases too
        p.set_data(nd.random.uniform(-0.5, 0.5, shape=p.shape))
    x, h, c = nd.random.normal(shape=(7, 3, E)), nd.random.normal(shape=(L, 3, H)), nd.random.normal(shape=(L, 3, H))
    out, (h1, c1) = reference(x, h, c)
    params = {n.split("_", 1)[1]: p for n, p in gluon_lstm.collect_params().items()}   # e.g. l0_i2h_weight
    order = [f"l{l}_{g}_{t}" for t in ("weight", "bias") for l in range(L) for g in ("i2h", "h2h")]
    flat = [params[name].data().reshape((-1,)) for name in order]
    fused_lstm = FusedLSTM(H, L, input_size=E, with_states=True)
    fused = _Holder(fused_lstm)
    fused.initialize()
    fused_lstm.rnn_param.set_data(nd.concat(*flat, dim=0))
    out2, h2, c2 = fused(x, h, c)
    for a, b in ((out, out2), (h1, h2), (c1, c2)):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("init", ["constant", "xavier"])
def test_fused_lstm_weights_follow_the_global_initializer_piece_by_piece(init):
    """Each weight matrix in the flat vector is initialized as the global initializer would initialize it alone
    (Xavier's scale from that matrix's own fan-in and fan-out), the biases zero."""
    lstm = FusedLSTM(8, 2, input_size=5)
    lstm.initialize(mx.init.Constant(0.5) if init == "constant" else mx.init.Xavier(magnitude=3))
    flat = lstm.rnn_param.data().asnumpy()
    for start, end, shape in piece_ranges(lstm.piece_shapes):
        piece = flat[start:end]
        if len(shape) == 1:
            assert not piece.any(), f"bias {shape} not zero"
        elif init == "constant":
            np.testing.assert_array_equal(piece, 0.5)
        else:
            bound = np.sqrt(3.0 / ((shape[0] + shape[1]) / 2.0))
            assert np.abs(piece).max() <= bound + 1e-6 and np.abs(piece).max() > 0.8 * bound, (shape, bound)
