"""The Transformer architecture: masking (source padding, causality), incremental decoding = the teacher-forced
forward through select/reorder/repeat, tied embeddings, config errors naming the flag, save/rebuild/load, and a
copy task learnt in-process and decoded greedily through `step`."""
from __future__ import annotations

import logging

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd

from nmt.cli import build_train_parser, config_from_args
from nmt.config import Config, ConfigError, ModelConfig
from nmt.models import ARCHITECTURES
from nmt.models.transformer import TransformerModel, TransformerState

BOS, EOS = 2, 3


def small_config(**changes) -> ModelConfig:
    """A model small enough for unit tests, without dropout (outputs are deterministic)."""
    base = dict(arch="transformer", encoder_layers=2, decoder_layers=2, model_size=16, ff_size=32, heads=2,
                dropout=0.0, word_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    return ModelConfig(**{**base, **changes})


def build(cfg: ModelConfig = None, src_vocab: int = 20, tgt_vocab: int = 23, seed: int = 0) -> TransformerModel:
    mx.random.seed(seed)
    model = ARCHITECTURES["transformer"](cfg or small_config(), src_vocab, tgt_vocab)
    model.initialize(mx.init.Xavier(magnitude=2.24))
    return model


def log_probs(model, src, src_len, tgt_in) -> np.ndarray:
    return nd.log_softmax(model(src, src_len, tgt_in), axis=-1).asnumpy()


SRC = nd.array([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0], [11, 12, 13, 3, 0]])
SRC_LEN = nd.array([5, 3, 4])
TGT = nd.array([[2, 5, 6, 7, 8, 9], [2, 10, 11, 12, 0, 0], [2, 13, 14, 15, 16, 0]])


def test_registered_and_built_from_flags():
    args = build_train_parser().parse_args(
        ["--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "4", "--model-size", "64",
         "--ff-size", "128", "--heads", "8", "--attention-dropout", "0.2", "--activation-dropout", "0.3",
         "--shared-vocab"])
    m = config_from_args(args).model
    assert (m.arch, m.encoder_layers, m.decoder_layers, m.model_size, m.ff_size, m.heads) == \
        ("transformer", 1, 4, 64, 128, 8)
    assert (m.attention_dropout, m.activation_dropout, m.shared_vocab) == (0.2, 0.3, True)
    assert ARCHITECTURES["transformer"] is TransformerModel


@pytest.mark.parametrize("hybridize", [False, True])
def test_source_padding_changes_nothing(hybridize):
    model = build()
    if hybridize:
        model.hybridize(static_alloc=True)
    junk = nd.array(np.random.RandomState(0).randint(4, 20, (3, 4)))   # not PAD: the lengths alone mask
    padded = nd.concat(SRC, junk, dim=1)
    np.testing.assert_allclose(log_probs(model, padded, SRC_LEN, TGT), log_probs(model, SRC, SRC_LEN, TGT),
                               atol=1e-5)
    # One sentence alone (no padding at all) = the same sentence padded in a batch.
    alone = log_probs(model, SRC[1:2, :3], SRC_LEN[1:2], TGT[1:2])
    np.testing.assert_allclose(alone, log_probs(model, padded, SRC_LEN, TGT)[1:2], atol=1e-5)


def test_an_empty_filler_row_gives_finite_outputs():
    """Multi-device batches are topped up with rows of length 0: they attend to nothing and stay finite."""
    model = build()
    out = log_probs(model, SRC, nd.array([5, 0, 4]), TGT)
    assert np.isfinite(out).all()
    state = model.init_state(model.encode(SRC, nd.array([5, 0, 4])))
    _, _, attn = model.step(nd.array([BOS] * 3), state)
    assert np.isfinite(attn.asnumpy()).all() and attn[1].sum().asscalar() == 0


def test_later_target_tokens_do_not_change_earlier_outputs():
    model = build()
    before = log_probs(model, SRC, SRC_LEN, TGT)
    for k in range(1, TGT.shape[1]):
        changed = TGT.copy()
        changed[:, k:] = 17
        after = log_probs(model, SRC, SRC_LEN, changed)
        np.testing.assert_allclose(after[:, :k], before[:, :k], atol=1e-5)
        assert np.abs(after[:, k:] - before[:, k:]).max() > 1e-4   # and the changed positions do change


def _reference(model, history):
    """Each row's log-probs after its (sentence, tokens) history, from the teacher-forced forward."""
    rows = []
    for sentence, tokens in history:
        n = int(SRC_LEN[sentence].asscalar())
        rows.append(log_probs(model, SRC[sentence:sentence + 1, :n], SRC_LEN[sentence:sentence + 1],
                              nd.array([tokens]))[0, -1])
    return np.stack(rows)


def test_incremental_steps_equal_the_forward_through_select_reorder_repeat():
    model = build()
    state = model.init_state(model.encode(SRC, SRC_LEN))
    history = [(b, []) for b in range(3)]

    def advance(state, history, tokens):
        history = [(b, h + [t]) for (b, h), t in zip(history, tokens)]
        out, state, attn = model.step(nd.array(tokens), state)
        np.testing.assert_allclose(out.asnumpy(), _reference(model, history), atol=1e-5)
        assert attn.shape == (len(tokens), SRC.shape[1])
        np.testing.assert_allclose(attn.sum(axis=1).asnumpy(), 1.0, rtol=1e-5)
        return state, history

    state, history = advance(state, history, [BOS] * 3)
    state, history = advance(state, history, [5, 6, 7])
    state, history = state.repeat(2), [h for h in history for _ in range(2)]   # two beams per sentence
    state, history = advance(state, history, [8, 9, 10, 11, 12, 13])
    rows = [1, 0, 2, 2, 5, 4]   # back-pointers within each sentence's beams
    state, history = state.reorder(nd.array(rows)), [history[r] for r in rows]
    state, history = advance(state, history, [14, 15, 16, 17, 18, 19])
    rows = [0, 1, 4, 5]   # sentence 1 finished
    state, history = state.select(nd.array([0, 2])), [history[r] for r in rows]
    for tokens in ([4, 5, 6, 7], [8, 9, 10, 11]):
        state, history = advance(state, history, tokens)
    assert isinstance(state, TransformerState) and state.keys.shape[:3] == (4, 2, 7)   # placeholder + 6 tokens


@pytest.mark.filterwarnings("ignore:Parameter .* is not used by any computation")   # the encoder's, in a step
def test_step_runs_inside_a_hybridized_graph():
    """A search may run `step` as one hybridized block (Symbols in, Symbols out): same results as imperative."""
    model = build()

    class Step(gluon.HybridBlock):
        def __init__(self):
            super().__init__(prefix="step_")
            self.model = model

        def hybrid_forward(self, F, tokens, *arrays):
            out, state, attn = self.model.step(tokens, template.with_arrays(arrays))
            return (out, attn) + tuple(state.arrays())

    graph = Step()
    graph.hybridize(static_alloc=True)
    template = state = model.init_state(model.encode(SRC, SRC_LEN))
    arrays = state.arrays()
    for tokens in ([BOS] * 3, [5, 6, 7], [8, 9, 10]):
        want, state, want_attn = model.step(nd.array(tokens), state)
        got = graph(nd.array(tokens), *arrays)
        arrays = list(got[2:])
        np.testing.assert_allclose(got[0].asnumpy(), want.asnumpy(), atol=1e-5)
        np.testing.assert_allclose(got[1].asnumpy(), want_attn.asnumpy(), atol=1e-6)


def test_shared_vocab_ties_source_target_and_output_in_one_parameter():
    model = build(small_config(shared_vocab=True), 21, 21)
    names = sorted(model.collect_params().keys())
    assert "transformer_tgt_embed_weight" in names
    assert not [n for n in names if n in ("transformer_src_embed_weight", "transformer_out_weight")]
    weight = model.tgt_embed_weight
    with autograd.record():
        loss = model(SRC, SRC_LEN, TGT[:, :2]).sum()   # target tokens 2, 10, 13; source-only tokens 5..9
    loss.backward()
    grad = np.abs(weight.grad().asnumpy()).sum(axis=1)
    assert grad[[5, 6, 7, 8, 9]].min() > 0     # the source's tokens are looked up in the shared matrix
    assert grad[[18, 19, 20]].min() > 0       # and every row is an output-layer row


@pytest.mark.parametrize("shared, tie, sizes, expected", [
    (True, False, (21, 21), {"transformer_tgt_embed_weight", "transformer_out_weight"}),
    (False, True, (21, 21), {"transformer_tgt_embed_weight", "transformer_src_embed_weight"}),
    (True, True, (20, 23), {"transformer_tgt_embed_weight", "transformer_src_embed_weight"}),
])
def test_two_way_tying(shared, tie, sizes, expected, caplog):
    with caplog.at_level(logging.WARNING, logger="nmt"):
        model = build(small_config(shared_vocab=shared, tie_weights=tie), *sizes)
    big = {n for n, p in model.collect_params().items() if p.shape[0] in sizes and len(p.shape) == 2}
    assert big == expected
    assert ("--shared-vocab" in caplog.text) == (shared and sizes[0] != sizes[1])
    state = model.init_state(model.encode(SRC, SRC_LEN))   # every combination of weights runs both paths
    step_log_probs, _, _ = model.step(TGT[:, 0], state)
    np.testing.assert_allclose(step_log_probs.asnumpy(), log_probs(model, SRC, SRC_LEN, TGT)[:, 0], atol=1e-5)


@pytest.mark.parametrize("field, value, flag", [
    ("encoder_layers", 0, "--encoder-layers"), ("decoder_layers", -1, "--decoder-layers"),
    ("model_size", 0, "--model-size"), ("ff_size", 2.5, "--ff-size"), ("heads", 0, "--heads"),
    ("heads", 3, "--heads"), ("model_size", 15, "--model-size"), ("dropout", 1.0, "--dropout"),
    ("attention_dropout", -0.1, "--attention-dropout"), ("activation_dropout", 1.5, "--activation-dropout"),
    ("word_dropout", True, "--word-dropout"),
])
def test_bad_config_names_the_flag(field, value, flag):
    """A bad value names the flag; one of another type (2.5 for an int) the field, as the config is made."""
    with pytest.raises(ConfigError, match=f"{flag} |ModelConfig.{field} must be"):
        TransformerModel(small_config(**{field: value}), 20, 20)


def test_tiny_vocabulary_is_refused():
    with pytest.raises(ConfigError, match="target vocabulary"):
        TransformerModel(small_config(), 20, 3)


def test_saved_parameters_load_into_a_model_rebuilt_from_its_config(tmp_path):
    cfg = small_config(shared_vocab=True, encoder_layers=1, decoder_layers=3)
    model = build(cfg, 22, 22, seed=3)
    model.save_parameters(str(tmp_path / "params"))
    Config(model=cfg).save(tmp_path / "config.json")
    rebuilt = TransformerModel(Config.load(tmp_path / "config.json").model, 22, 22)
    rebuilt.load_parameters(str(tmp_path / "params"))
    rebuilt.hybridize(static_alloc=True)
    np.testing.assert_allclose(rebuilt(SRC, SRC_LEN, TGT).asnumpy(), model(SRC, SRC_LEN, TGT).asnumpy(), atol=1e-6)


def _copy_batch(rng, batch: int, vocab: int, max_len: int):
    """Random sequences of symbols 4..vocab-1 (lengths 2..max_len): source = sequence + EOS, target-in = BOS +
    sequence, target-out = sequence + EOS, padded with 0."""
    lengths = rng.integers(2, max_len + 1, size=batch)
    src, tgt_in, tgt_out = (np.zeros((batch, max_len + 1)) for _ in range(3))
    for i, n in enumerate(lengths):
        seq = rng.integers(4, vocab, size=n)
        src[i, :n + 1] = tgt_out[i, :n + 1] = np.append(seq, EOS)
        tgt_in[i, :n + 1] = np.insert(seq, 0, BOS)
    return nd.array(src), nd.array(lengths + 1), nd.array(tgt_in), nd.array(tgt_out)


def greedy(model, src, src_len, max_len: int):
    """Greedy decoding through `step`: the argmax token of each row until EOS."""
    state = model.init_state(model.encode(src, src_len))
    tokens, out = nd.full((src.shape[0],), BOS), []
    for _ in range(max_len):
        log_p, state, _ = model.step(tokens, state)
        tokens = log_p.argmax(axis=1)
        out.append(tokens.asnumpy().astype(int))
    rows = []
    for row in np.stack(out, axis=1).tolist():
        rows.append(row[:row.index(EOS)] if EOS in row else row)
    return rows


COPY_VOCAB, COPY_MAX_LEN = 12, 6


def train_copy_model(steps: int = 300, warmup: int = 30, peak: float = 3e-3):
    """A one-layer model trained in-process on the copy task (Adam, linear warm-up and decay); returns it and its
    per-token losses."""
    model = build(small_config(model_size=64, ff_size=128, heads=4, encoder_layers=1, decoder_layers=1),
                  COPY_VOCAB, COPY_VOCAB, seed=1)
    model.hybridize(static_alloc=True)
    trainer = gluon.Trainer(model.collect_params(), "adam", {"learning_rate": peak, "beta2": 0.98})
    rng = np.random.default_rng(1)
    losses = []
    for i in range(steps):
        src, src_len, tgt_in, tgt_out = _copy_batch(rng, 32, COPY_VOCAB, COPY_MAX_LEN)
        with autograd.record():
            mask = tgt_out > 0
            log_p = nd.pick(nd.log_softmax(model(src, src_len, tgt_in)), tgt_out)
            loss = -(log_p * mask).sum() / mask.sum()   # per target token
        loss.backward()
        # Linear warm-up, then linear decay to 0: without the decay Adam hovers at a loss that still
        # confuses a symbol or two in some sentences.
        trainer.set_learning_rate(peak * min((i + 1) / warmup, (steps - i) / (steps - warmup)))
        trainer.step(1)
        losses.append(loss.asscalar())
    return model, losses


def copy_test_set(n: int = 20):
    """Held-out copy-task sources, their lengths, and the sequences a perfect copy returns."""
    src, src_len, _, _ = _copy_batch(np.random.default_rng(7), n, COPY_VOCAB, COPY_MAX_LEN)
    expected = [row[:int(k) - 1] for row, k in zip(src.asnumpy().astype(int).tolist(), src_len.asnumpy())]
    return src, src_len, expected


def test_a_tiny_model_learns_to_copy_and_greedy_steps_reproduce_the_input():
    model, losses = train_copy_model()
    assert np.mean(losses[-20:]) < 0.05 * np.mean(losses[:5])
    src, src_len, expected = copy_test_set()
    assert greedy(model, src, src_len, COPY_MAX_LEN + 2) == expected


def test_flop_count_covers_every_weight_matrix_once():
    """With no attention span, forward MACs per source + target token = the entries of the weight matrices (the
    output layer's included, embeddings not); each position attended to adds 2 d per layer."""
    from nmt.models.transformer import count_flops_per_token
    cfg = small_config(encoder_layers=2, decoder_layers=3, tie_weights=False)
    model = build(cfg)
    matrices = sum(p.data().size for name, p in model.collect_params().items()
                   if p.data().ndim == 2 and "embed_weight" not in name)
    flat = count_flops_per_token(cfg, 20, 23, avg_src_len=0, avg_tgt_len=0)
    assert flat["src_forward_macs"] + flat["tgt_forward_macs"] == matrices
    wide = count_flops_per_token(cfg, 20, 23, avg_src_len=10, avg_tgt_len=5)
    d = cfg.model_size
    assert wide["src_forward_macs"] - flat["src_forward_macs"] == 2 * 2 * 10 * d       # encoder self-attention
    assert wide["tgt_forward_macs"] - flat["tgt_forward_macs"] == 3 * 2 * (5 + 10) * d  # self + source attention
    assert wide["tgt_train_flops"] == 6 * wide["tgt_forward_macs"]
    with pytest.raises(ConfigError, match="--heads"):
        count_flops_per_token(small_config(heads=3), 20, 23)
