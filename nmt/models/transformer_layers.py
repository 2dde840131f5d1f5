"""The Transformer's layers (pre-norm, Wang et al. 2019): multi-head attention, feed-forward, encoder and decoder
layers and stacks, sinusoidal positions and the attention masks. `nmt.models.transformer` assembles the model.

Why our own layer classes and not gluonnlp 0.10's `TransformerEncoderCell`/`TransformerDecoderCell`: those are
post-norm only (layer norm after each residual sum, no pre-norm switch), and its `TransformerOneStepDecoder` re-runs
the whole prefix at every step. The layers here are composed of gluonnlp's `DotProductAttentionCell` (scaled dot
products, masking, softmax, attention dropout) and Gluon's `Dense`/`LayerNorm`. gluonnlp's `MultiHeadAttentionCell`
is not used because it projects keys and values inside every call, so a cache of projected keys and values (what
makes a decoding step cost O(current length)) would need its private methods; `MultiHeadAttention` below projects
outside and hands the heads to the public cell. gluonnlp's `PositionwiseFFN` applies its layer norm after the
residual sum (post-norm) and uses one dropout rate for both of its dropouts, so `FeedForward` is our own too.

All blocks take their array module `F` from the inputs, so they run imperatively and inside a hybridized graph.
"""
from __future__ import annotations

import math

from gluonnlp.model.attention_cell import DotProductAttentionCell
from mxnet import gluon
from mxnet.gluon import nn

from nmt.models.base import array_module, fold_beams, length_mask, unfold_beams


def sinusoids(F, positions, like, size: int):
    """Sinusoidal position encodings (..., size) of float `positions` (...): [sin(p w_i); cos(p w_i)] with
    w_i = 10000^(-2i/size) (Vaswani et al. 2017). `like` (any array whose last axis has >= size/2 entries, on the
    right device) gives the frequencies their device, since no array of ours has a fixed length of size/2."""
    half = F.contrib.arange_like(F.slice_axis(like, axis=-1, begin=0, end=size // 2), axis=-1)
    freqs = F.exp(half * (-2.0 * math.log(10000.0) / size))
    angles = F.broadcast_mul(F.expand_dims(positions, axis=-1), freqs)
    return F.concat(F.sin(angles), F.cos(angles), dim=-1)


def key_mask(F, queries, keys, key_len):
    """(B,Tq,K) mask: key slot k of row b is valid when k < key_len[b], for every query of `queries` (B,Tq,d)."""
    valid = F.expand_dims(length_mask(F, keys, F.cast(key_len, "float32"), axis=1), axis=1)   # (B,1,K)
    ones = F.ones_like(F.slice_axis(queries, axis=-1, begin=0, end=1))   # (B,Tq,1)
    return F.broadcast_mul(ones, valid)


def causal_mask(F, queries, keys, query_pos):
    """(B,Tq,K) mask of the decoder's self-attention over a key cache whose slot 0 is a placeholder (see
    `TransformerDecoder`): slot k holds target position k-1, so a query at position p sees slots 1..p+1.
    `query_pos` (B or 1, Tq) float positions of the queries."""
    slots = F.reshape(F.cast(F.contrib.arange_like(keys, axis=1), "float32"), shape=(1, 1, -1))
    upto = F.expand_dims(query_pos, axis=-1) + 1   # (B|1,Tq,1)
    visible = F.broadcast_mul(F.broadcast_greater_equal(slots, F.ones_like(slots)),
                              F.broadcast_lesser_equal(slots, upto))
    ones = F.ones_like(F.slice_axis(queries, axis=-1, begin=0, end=1))   # (B,Tq,1)
    return F.broadcast_mul(ones, visible)


def layer_slice(F, stacked, i: int):
    """Layer `i`'s (B,K,d) of per-layer arrays stacked (B,L,K,d)."""
    return F.reshape(F.slice_axis(stacked, axis=1, begin=i, end=i + 1), shape=(0, -3, 0))


class KeyValue(gluon.HybridBlock):
    """The key and value projections (B,K,d) each of (B,K,d) inputs; each head reads its own slice of d.

    The key projection has no bias: a bias adds q.b to every score of a query alike, which the softmax cancels, so
    its true gradient is zero and Adam would turn rounding noise into updates (runs that should give the same
    parameters, on 1 or 2 devices or with accumulation, then differ in it)."""

    def __init__(self, units: int, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.key = nn.Dense(units, flatten=False, use_bias=False, in_units=units, prefix="key_")
            self.value = nn.Dense(units, flatten=False, in_units=units, prefix="value_")

    def hybrid_forward(self, F, x):
        return self.key(x), self.value(x)


class MultiHeadAttention(gluon.HybridBlock):
    """Multi-head scaled dot-product attention of queries over keys and values projected beforehand (so that a
    decoder can cache them): by this block's own `project_kv` for self-attention, by the model's `MemoryProjection`
    for attention over the encoder memory. Returns the output (B,Tq,d) and the weights (B,heads,Tq,K)."""

    def __init__(self, units: int, heads: int, dropout: float, self_attention: bool = True, **kwargs):
        super().__init__(**kwargs)
        self._heads = heads
        with self.name_scope():
            self.query = nn.Dense(units, flatten=False, in_units=units, prefix="query_")
            self.project_kv = KeyValue(units, prefix="") if self_attention else None
            self.out = nn.Dense(units, flatten=False, in_units=units, prefix="out_")
            self.cell = DotProductAttentionCell(scaled=True, dropout=dropout, prefix="cell_")

    def _split(self, F, x):
        """(B,T,d) -> (B*heads, T, d/heads)."""
        x = F.transpose(F.reshape(x, shape=(0, 0, self._heads, -1)), axes=(0, 2, 1, 3))
        return F.reshape(x, shape=(-1, 0, 0), reverse=True)

    def hybrid_forward(self, F, x, keys, values, mask):
        return self.attend(F, x, keys, values, mask)

    def attend(self, F, x, keys, values, mask):
        """`hybrid_forward` as a method, for a decoder step: called as a block on its own (a step run
        imperatively), this block's graph would not use `project_kv`'s parameters, and Gluon warns about them."""
        mask = F.reshape(F.broadcast_axis(F.expand_dims(mask, axis=1), axis=1, size=self._heads),
                         shape=(-1, 0, 0), reverse=True)
        context, weights = self.cell(self._split(F, self.query(x)), self._split(F, keys), self._split(F, values),
                                     mask)
        context = F.transpose(F.reshape(context, shape=(-1, self._heads, 0, 0), reverse=True), axes=(0, 2, 1, 3))
        return (self.out(F.reshape(context, shape=(0, 0, -1))),
                F.reshape(weights, shape=(-1, self._heads, 0, 0), reverse=True))


class FeedForward(gluon.HybridBlock):
    """relu(x W1 + b1) -> activation dropout -> W2 + b2 (the position-wise feed-forward network)."""

    def __init__(self, units: int, hidden: int, activation_dropout: float, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.inner = nn.Dense(hidden, flatten=False, in_units=units, activation="relu", prefix="inner_")
            self.dropout = nn.Dropout(activation_dropout)
            self.outer = nn.Dense(units, flatten=False, in_units=hidden, prefix="outer_")

    def hybrid_forward(self, F, x):
        return self.outer(self.dropout(self.inner(x)))


class EncoderLayer(gluon.HybridBlock):
    """x + self-attention(LN(x)), then + feed-forward(LN(.)): each sublayer's output dropped out (`dropout`)."""

    def __init__(self, cfg, **kwargs):
        super().__init__(**kwargs)
        d = cfg.model_size
        with self.name_scope():
            self.attn_norm = nn.LayerNorm(in_channels=d, prefix="attn_norm_")
            self.attn = MultiHeadAttention(d, cfg.heads, cfg.attention_dropout, prefix="attn_")
            self.ffn_norm = nn.LayerNorm(in_channels=d, prefix="ffn_norm_")
            self.ffn = FeedForward(d, cfg.ff_size, cfg.activation_dropout, prefix="ffn_")
            self.dropout = nn.Dropout(cfg.dropout)

    def feed_forward(self, x):
        """The last sublayer, the same in both layer kinds: x + dropout(FFN(LN(x)))."""
        return x + self.dropout(self.ffn(self.ffn_norm(x)))

    def hybrid_forward(self, F, x, mask):
        h = self.attn_norm(x)
        a, _ = self.attn(h, *self.attn.project_kv(h), mask)
        return self.feed_forward(x + self.dropout(a))


class DecoderLayer(EncoderLayer):
    """Masked self-attention (`attn`) over the key/value cache extended by this call's positions, attention over
    the encoder memory (`cross_attn`), feed-forward; pre-norm residual sublayers as in `EncoderLayer`. Returns the
    output, the extended keys and values, and the memory attention weights (B,heads,Tq,S)."""

    def __init__(self, cfg, **kwargs):
        super().__init__(cfg, **kwargs)
        with self.name_scope():
            self.cross_norm = nn.LayerNorm(in_channels=cfg.model_size, prefix="cross_norm_")
            self.cross_attn = MultiHeadAttention(cfg.model_size, cfg.heads, cfg.attention_dropout,
                                                 self_attention=False, prefix="cross_attn_")

    def hybrid_forward(self, F, x, query_pos, past_keys, past_values, mem_keys, mem_values, mem_mask):
        return self.decode(F, x, query_pos, past_keys, past_values, mem_keys, mem_values, mem_mask, 1)

    def decode(self, F, x, query_pos, past_keys, past_values, mem_keys, mem_values, mem_mask, beam: int):
        """`hybrid_forward` with `beam` rows of x (a step's, one position each) per sentence of the memory:
        `mem_mask` (B,beam,S), weights (B,heads,beam,S)."""
        h = self.attn_norm(x)
        new_keys, new_values = self.attn.project_kv(h)
        keys = F.concat(past_keys, new_keys, dim=1)
        values = F.concat(past_values, new_values, dim=1)
        a, _ = self.attn.attend(F, h, keys, values, causal_mask(F, h, keys, query_pos))
        x = x + self.dropout(a)
        a, weights = self.cross_attn(fold_beams(F, self.cross_norm(x), beam), mem_keys, mem_values, mem_mask)
        return self.feed_forward(x + self.dropout(unfold_beams(F, a, beam))), keys, values, weights


class Embedder(gluon.HybridBlock):
    """Token ids (B,T) and their float positions (B|1,T) -> sqrt(d)-scaled embeddings + sinusoids, with word
    dropout (whole tokens, Sennrich & Zhang 2019) on the embeddings and dropout on the sum. The embedding matrix is
    an input, not a parameter of this block, so that the model can tie it to other uses."""

    def __init__(self, cfg, vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        self._size, self._vocab_size = cfg.model_size, vocab_size
        with self.name_scope():
            self.word_dropout = nn.Dropout(cfg.word_dropout, axes=(2,)) if cfg.word_dropout else None
            self.dropout = nn.Dropout(cfg.dropout)

    def hybrid_forward(self, F, tokens, positions, weight):
        x = F.Embedding(tokens, weight, input_dim=self._vocab_size, output_dim=self._size) * math.sqrt(self._size)
        if self.word_dropout is not None:
            x = self.word_dropout(x)
        return self.dropout(F.broadcast_add(x, sinusoids(F, positions, x, self._size)))


class LayerStack(gluon.HybridBlock):
    """What the encoder and the decoder share: the embedder, `num_layers` layers and the final layer norm."""

    def __init__(self, cfg, vocab_size: int, layer_class, num_layers: int, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = Embedder(cfg, vocab_size, prefix="embed_")
            self.layers = nn.HybridSequential(prefix="")
            for i in range(num_layers):
                self.layers.add(layer_class(cfg, prefix=f"layer{i}_"))
            self.norm = nn.LayerNorm(in_channels=cfg.model_size, prefix="norm_")


class TransformerEncoder(LayerStack):
    """Source ids (B,S), lengths (B,) and the source embedding matrix -> memory (B,S,d) (final layer norm; rows
    past a sentence's length are defined but never attended to)."""

    def __init__(self, cfg, vocab_size: int, **kwargs):
        super().__init__(cfg, vocab_size, EncoderLayer, cfg.encoder_layers, **kwargs)

    def hybrid_forward(self, F, src, src_len, embed_weight):
        positions = F.reshape(F.cast(F.contrib.arange_like(src, axis=1), "float32"), shape=(1, -1))
        x = self.embed(src, positions, embed_weight)
        mask = key_mask(F, x, x, src_len)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class MemoryProjection(gluon.HybridBlock):
    """Every decoder layer's keys and values of the encoder memory (B,S,d), stacked (B,L,S,d) each: computed once
    per sentence, not at every step."""

    def __init__(self, cfg, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.layers = nn.HybridSequential(prefix="")
            for i in range(cfg.decoder_layers):
                self.layers.add(KeyValue(cfg.model_size, prefix=f"layer{i}_"))

    def hybrid_forward(self, F, memory):
        pairs = [layer(memory) for layer in self.layers]
        return F.stack(*[k for k, _ in pairs], axis=1), F.stack(*[v for _, v in pairs], axis=1)


class TransformerDecoder(LayerStack):
    """Target ids (B,Tq) at float positions (B|1,Tq), given the stacked self-attention caches (B,L,P,d) of the P
    slots before them and the stacked memory keys and values (B,L,S,d) (`MemoryProjection`) -> logits (B,Tq,V), the
    caches extended to P+Tq slots, and the last layer's memory attention averaged over heads (B,Tq,S).
    (The memory projections are a block of their own, `MemoryProjection`, so that every parameter of this block
    is used by this block's graph, in a step too.)

    The teacher-forced forward and a search step run this same block: the forward with all T positions and an
    empty cache, a step with one position and the cache of the steps before. MXNet 1.x has no zero-length arrays,
    so an empty cache is one placeholder slot (`empty_cache`) that the causal mask always hides."""

    def __init__(self, cfg, vocab_size: int, **kwargs):
        super().__init__(cfg, vocab_size, DecoderLayer, cfg.decoder_layers, **kwargs)
        self._vocab_size = vocab_size

    def empty_cache(self, like):
        """An empty self-attention cache (B,L,1,d): the placeholder slot, zeros, for the rows of `like` (B,*,d)."""
        F = array_module(like)
        slot = F.expand_dims(F.zeros_like(F.slice_axis(like, axis=1, begin=0, end=1)), axis=1)   # (B,1,1,d)
        return F.broadcast_axis(slot, axis=1, size=len(self.layers))

    def hybrid_forward(self, F, tgt, positions, past_keys, past_values, mem_keys, mem_values, src_len,
                       embed_weight, out_weight, out_bias):
        return self.decode(F, tgt, positions, past_keys, past_values, mem_keys, mem_values, src_len, embed_weight,
                           out_weight, out_bias, 1)

    def decode(self, F, tgt, positions, past_keys, past_values, mem_keys, mem_values, src_len, embed_weight,
               out_weight, out_bias, beam: int):
        """`hybrid_forward` with `beam` rows of `tgt` (a step's, Tq = 1) per sentence of the memory and `src_len`;
        the attention is then (B,beam,S)."""
        x = self.embed(tgt, positions, embed_weight)
        mem_mask = key_mask(F, fold_beams(F, x, beam), layer_slice(F, mem_keys, 0), src_len)
        keys, values = [], []
        for i, layer in enumerate(self.layers):
            x, k, v, weights = layer.decode(F, x, positions, layer_slice(F, past_keys, i),
                                            layer_slice(F, past_values, i), layer_slice(F, mem_keys, i),
                                            layer_slice(F, mem_values, i), mem_mask, beam)
            keys.append(k)
            values.append(v)
        logits = F.FullyConnected(self.norm(x), out_weight, out_bias, num_hidden=self._vocab_size, flatten=False)
        return logits, F.stack(*keys, axis=1), F.stack(*values, axis=1), F.mean(weights, axis=1)
