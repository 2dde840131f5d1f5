"""The Transformer's four dropouts act at every one of their sites, each at its own rate, and only in training:
`--dropout` on each sublayer's output and on the embeddings' sum, `--attention-dropout` on the weights of the
encoder's self-attention and the decoder's self- and cross-attention, `--activation-dropout` after the ReLU of every
feed-forward sublayer (encoder and decoder), `--word-dropout` on whole source and whole target token embeddings."""
from __future__ import annotations

import math

import mxnet as mx
import numpy as np
import pytest
from gluonnlp.model.attention_cell import DotProductAttentionCell
from mxnet import autograd, nd

from tests.unit.test_transformer import SRC, SRC_LEN, TGT, build, small_config

# Four different rates, so that a site given another field's rate fails (its kept values are scaled by 1/(1-rate)).
RATES = {"dropout": 0.1, "attention_dropout": 0.2, "activation_dropout": 0.3, "word_dropout": 0.4}
# Each measured fraction of dropped units may miss its rate by the Hoeffding bound of this probability: with the 24
# fractions a forward measures, the test fails by chance with probability < 24 * 1e-9 (2,048 tokens a side: word
# dropout's fraction within 0.072 of its rate; about 30,000 elements or more at the other sites: within 0.02).
FALSE_FAILURE = 1e-9


def dropout_sites(model):
    """(site, block, field, calls) of every dropout of `model`: the block whose output is the dropped-out array (an
    attention's cell: its weights), the `ModelConfig` field of its rate, and how many times a forward calls it."""
    sites = []
    for side, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        sites += [(f"{side} word dropout", stack.embed.word_dropout, "word_dropout", 1),
                  (f"{side} embeddings' sum", stack.embed.dropout, "dropout", 1)]
        for i, layer in enumerate(stack.layers):
            sites += [(f"{side} layer{i} self-attention", layer.attn.cell, "attention_dropout", 1),
                      (f"{side} layer{i} feed-forward", layer.ffn.dropout, "activation_dropout", 1),
                      (f"{side} layer{i} sublayer outputs", layer.dropout, "dropout", 2 + (side == "decoder"))]
            if side == "decoder":
                sites.append((f"decoder layer{i} cross-attention", layer.cross_attn.cell, "attention_dropout", 1))
    return sites


def watch(model):
    """Hooks on every dropout site: {site: [(before, after) of each call]}, numpy arrays of the values before and
    after its dropout (an attention's weights before it: a cell without dropout on the same inputs)."""
    calls, clean = {}, DotProductAttentionCell(scaled=True)
    for site, block, _, _ in dropout_sites(model):
        assert block is not None, f"{site}: no dropout block"
        calls[site] = []

        def record(block, inputs, out, site=site):
            if isinstance(block, DotProductAttentionCell):
                with autograd.predict_mode():
                    inputs, out = (clean(*inputs)[1],), out[1]
            calls[site].append((inputs[0].asnumpy(), out.asnumpy()))
        block.register_forward_hook(record)
    return calls


def batch(seed: int = 0, size: int = 64, length: int = 32):
    """Random sources of random lengths and random targets: 2,048 tokens a side."""
    rng = np.random.default_rng(seed)
    src = nd.array(rng.integers(4, 20, (size, length)))
    return src, nd.array(rng.integers(1, length + 1, size)), nd.array(rng.integers(4, 23, (size, length)))


def dropped_units(field: str, before: np.ndarray, after: np.ndarray):
    """(units that can be dropped, units dropped, whether whole units were dropped): whole token embeddings for word
    dropout (whose embeddings have no zero), else non-zero elements (a ReLU's output, the weights of the keys a query
    sees)."""
    if field == "word_dropout":
        dropped = (after == 0).all(axis=-1)
        return dropped.size, dropped.sum(), ((after == 0) == dropped[..., None]).all()
    return (before != 0).sum(), ((before != 0) & (after == 0)).sum(), True


def test_every_dropout_site_acts_at_its_own_rate():
    model = build(small_config(**RATES))
    calls = watch(model)
    mx.random.seed(0)
    with autograd.train_mode():
        model(*batch())
    wrong = []
    for site, _, field, expected_calls in dropout_sites(model):
        if len(calls[site]) != expected_calls:
            wrong.append(f"{site}: {len(calls[site])} calls, not {expected_calls}")
        rate = RATES[field]
        for before, after in calls[site]:
            units, dropped, whole = dropped_units(field, before, after)
            if not whole:
                wrong.append(f"{site}: single features of token embeddings dropped, not whole tokens")
            tolerance = math.sqrt(math.log(2 / FALSE_FAILURE) / (2 * units))
            if abs(dropped / units - rate) > tolerance:
                wrong.append(f"{site}: {dropped / units:.3f} of {units} dropped, not {rate} ({field}) "
                             f"+- {tolerance:.3f}")
            # every value kept is scaled by 1/(1-rate): the rate of this field, not of another
            kept = np.where(after == 0, 0.0, before / (1 - rate))
            if not np.allclose(after, kept, rtol=1e-5, atol=0):
                ratio = np.median(after[after != 0] / before[after != 0])
                wrong.append(f"{site}: kept values scaled by {ratio:.4f}, not 1/(1-{rate}) ({field})")
    assert not wrong, "\n".join(wrong)


def test_the_output_of_every_dropout_site_reaches_the_logits():
    """A site whose dropped-out array is computed but not used passes the test above: each site's output at each of
    its calls, changed in place (an attention cell's context, which its dropped-out weights make), must change the
    logits."""
    model = build(small_config(**RATES))
    plain = model(SRC, SRC_LEN, TGT).asnumpy()   # predict mode: each dropout copies its input
    unused = []
    for site, block, _, calls in dropout_sites(model):
        for call in range(calls):
            seen = []

            def change(block, inputs, out, call=call, seen=seen):
                if len(seen) == call:
                    changed = out[0] if isinstance(out, tuple) else out
                    changed *= 2.0   # (not a constant shift: the layer norms would remove it)
                seen.append(call)
            handle = block.register_forward_hook(change)
            if np.abs(model(SRC, SRC_LEN, TGT).asnumpy() - plain).max() < 1e-3:
                unused.append(f"{site}, call {call + 1} of {calls}")
            handle.detach()
    assert not unused, f"the output of these dropouts is not used: {unused}"


def test_no_dropout_acts_in_a_predict_mode_forward_nor_in_decoding_steps():
    model = build(small_config(**RATES))
    calls = watch(model)
    model(*batch())
    state = model.init_state(model.encode(SRC, SRC_LEN))
    for k in range(3):
        _, state, _ = model.step(TGT[:, k], state)
    model.step(nd.array([7, 8, 9, 10, 11, 12]), state.repeat(2))   # two beams a sentence: `decode` of the blocks
    for site, _, field, expected_calls in dropout_sites(model):
        runs = 1 + (4 if site.startswith("decoder") else 1)   # the forward, then the 4 steps or `encode`
        assert len(calls[site]) == expected_calls * runs, f"{site}: {len(calls[site])} calls"
        for before, after in calls[site]:
            np.testing.assert_array_equal(after, before, err_msg=f"{site} ({field})")


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("field", ["dropout", "attention_dropout", "activation_dropout", "word_dropout"])
def test_each_dropout_acts_in_training_only(field, hybridize):
    """Seen from outside: training forwards differ; a predict-mode forward and steps are those of the same
    parameters without dropout."""
    model, plain = build(small_config(**{field: 0.5})), build(small_config())
    for name, param in model.collect_params().items():
        plain.collect_params()[name].set_data(param.data())
    if hybridize:
        model.hybridize(static_alloc=True)
    with autograd.train_mode():
        first, second = (model(SRC, SRC_LEN, TGT).asnumpy() for _ in range(2))
    assert np.abs(first - second).max() > 1e-3
    np.testing.assert_allclose(model(SRC, SRC_LEN, TGT).asnumpy(), plain(SRC, SRC_LEN, TGT).asnumpy(), atol=1e-6)
    states = [m.init_state(m.encode(SRC, SRC_LEN)) for m in (model, plain)]
    for k in range(3):
        (got, states[0], _), (want, states[1], _) = (m.step(TGT[:, k], s) for m, s in zip((model, plain), states))
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), atol=1e-6)
