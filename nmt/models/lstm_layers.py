"""The recurrent layers of the LSTM architecture: `FusedLSTM` (one flat parameter in the layout of MXNet's fused
RNN kernel) and the GNMT-style `Encoder` built from it.

Encoder: source embedding -> word dropout (whole tokens, optional) -> dropout -> layer 1 bidirectional (a forward
LSTM on x and a forward LSTM on x reversed *by valid length* with `SequenceReverse`, whose output is reversed back,
as gluon-nlp's GNMT encoder does; the fused `bidirectional=True, use_sequence_length=True` kernel is not
padding-invariant on CPU in MXNet 1.9.1) -> layers 2..L unidirectional, residual from layer 3 on, dropout between
layers. With one layer the 2H-wide output is projected to H so that every attention type sees H-wide keys.
Bridge: decoder layer l starts from a projection of encoder layer l's last valid output (h = tanh(W x), c = W' x).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn


class _FusedLSTMInit(mx.init.Initializer):
    """Initializes the flat LSTM vector piece by piece: each weight matrix as the global initializer would
    initialize it alone (as Gluon's own LSTM layer gets it), biases zero."""

    def __init__(self, shapes: Sequence[Tuple[int, ...]]):
        super().__init__(shapes=[list(x) for x in shapes])
        self._shapes = [tuple(x) for x in shapes]

    def _init_weight(self, desc, arr):
        glob = desc.global_init if isinstance(getattr(desc, "global_init", None), mx.init.Initializer) \
            else mx.init.Xavier()
        for i, (start, end, shape) in enumerate(piece_ranges(self._shapes)):
            piece = mx.nd.zeros(shape, ctx=arr.context, dtype=arr.dtype)
            if len(shape) == 2:
                glob(mx.init.InitDesc(f"{desc}_{i}_weight"), piece)
            arr[start:end] = piece.reshape((-1,))


def _prod(shape: Sequence[int]) -> int:
    out = 1
    for x in shape:
        out *= int(x)
    return out


def piece_ranges(shapes: Sequence[Tuple[int, ...]]) -> List[Tuple[int, int, Tuple[int, ...]]]:
    """(start, end, shape) of each piece in a flat vector holding `shapes` one after another."""
    out, offset = [], 0
    for shape in shapes:
        n = _prod(shape)
        out.append((offset, offset + n, tuple(shape)))
        offset += n
    return out


class FusedLSTM(gluon.HybridBlock):
    """Unidirectional multi-layer LSTM over (T,B,C) input, run by MXNet's fused RNN kernel (oneDNN on CPU,
    cuDNN on GPU). All weights live in one flat parameter laid out as the kernel reads it (every layer's i2h
    and h2h weights, then every layer's i2h and h2h biases; gates i, f, c, o), so no per-call concatenation
    of separate weight matrices is needed (Gluon's `rnn.LSTM` concatenates them at every forward and splits
    the gradient at every backward).

    `block(x)` starts from zero states and returns the outputs (T,B,H); `block(x, h0, c0)` takes (L,B,H)
    states and returns (outputs, h, c)."""

    def __init__(self, hidden_size: int, num_layers: int, input_size: int, dropout: float = 0.0,
                 with_states: bool = False, **kwargs):
        super().__init__(**kwargs)
        self._hidden, self._layers, self._dropout, self._with_states = hidden_size, num_layers, dropout, with_states
        H = hidden_size
        self.piece_shapes = [s for l in range(num_layers) for s in ((4 * H, input_size if l == 0 else H), (4 * H, H))]
        self.piece_shapes += [(4 * H,)] * (2 * num_layers)
        size = sum(_prod(x) for x in self.piece_shapes)
        with self.name_scope():
            self.rnn_param = self.params.get("rnn_param", shape=(size,), init=_FusedLSTMInit(self.piece_shapes))

    def hybrid_forward(self, F, x, *args, rnn_param=None):
        if self._with_states:
            h0, c0 = args
        else:   # zero states shaped (L,B,H) from the input, so the graph needs no batch size
            z = F.zeros_like(F.slice_axis(F.slice_axis(x, axis=0, begin=0, end=1), axis=2, begin=0, end=1))
            h0 = c0 = F.broadcast_axis(z, axis=(0, 2), size=(self._layers, self._hidden))
        out = F.RNN(x, rnn_param, h0, c0, state_size=self._hidden, num_layers=self._layers, mode="lstm",
                    p=self._dropout, state_outputs=self._with_states)
        return (out[0], out[1], out[2]) if self._with_states else out


def tanh(F, x):
    """tanh by the `Activation` operator: oneDNN's kernel on CPU, 25x as fast as MXNet 1.9.1's `tanh` operator
    (one element at a time: 1.1 ms against 0.04 ms on a 256x256 array, 2 threads), with the same values up to
    float32 rounding."""
    return F.Activation(x, act_type="tanh")


def word_dropout(rate: float) -> Optional[gluon.HybridBlock]:
    """Zeroes whole token embeddings of (B,T,E) (one mask value per token, shared by its E features) in training,
    as Sennrich & Zhang (2019) do for small data; None (no op in the graph) with rate 0."""
    return nn.Dropout(rate, axes=(2,)) if rate else None


class Encoder(gluon.HybridBlock):
    """Source ids (B,S) + lengths (B,) -> decoder initial states h, c (B,L,H) and the memory: the encoder output
    (B,S,H), then for "mlp" attention its projected attention keys (B,S,H) and, with the lexical model, the
    (dropped-out) source embeddings (B,S,E), as separate arrays (the decoder reads each at every step)."""

    def __init__(self, cfg, vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        H, E, L = cfg.hidden_size, cfg.embed_size, cfg.num_layers
        with self.name_scope():
            self.embed = nn.Embedding(vocab_size, E, prefix="embed_")
            self.word_dropout = word_dropout(cfg.word_dropout)
            self.dropout = nn.Dropout(cfg.dropout)
            self.fwd = FusedLSTM(H, 1, input_size=E, prefix="fwd_")
            self.bwd = FusedLSTM(H, 1, input_size=E, prefix="bwd_")
            self.layers = nn.HybridSequential(prefix="")
            for i in range(1, L):
                self.layers.add(FusedLSTM(H, 1, input_size=2 * H if i == 1 else H, prefix=f"layer{i + 1}_"))
            # One layer: project the 2H bidirectional states to H (keys of the attention).
            self.out_proj = nn.Dense(H, flatten=False, in_units=2 * H, prefix="out_proj_") if L == 1 else None
            self.bridge = nn.HybridSequential(prefix="")
            for i in range(L):
                self.bridge.add(nn.Dense(2 * H, flatten=False, in_units=2 * H if i == 0 else H,
                                         prefix=f"bridge{i + 1}_"))
            # Bahdanau keys W1*h_s depend on the source only: computed once here, not at every step.
            self.key_proj = (nn.Dense(H, flatten=False, use_bias=False, in_units=H, prefix="key_proj_")
                             if cfg.attention == "mlp" else None)
        self._lexical = cfg.lexical_model

    def hybrid_forward(self, F, src, src_len):
        src_len = F.clip(F.cast(src_len, "float32"), 1, 1e9)  # empty filler rows read one position
        emb = self.embed(src)
        if self.word_dropout is not None:
            emb = self.word_dropout(emb)
        emb = self.dropout(emb)  # (B,S,E)
        x = F.transpose(emb, axes=(1, 0, 2))  # (S,B,E)
        fwd = self.fwd(x)
        rev = F.SequenceReverse(x, sequence_length=src_len, use_sequence_length=True)
        bwd_rev = self.bwd(rev)  # step len-1 of the reversed run has read the whole sentence
        bwd = F.SequenceReverse(bwd_rev, sequence_length=src_len, use_sequence_length=True)
        finals = [F.concat(F.SequenceLast(fwd, sequence_length=src_len, use_sequence_length=True),
                           F.SequenceLast(bwd_rev, sequence_length=src_len, use_sequence_length=True),
                           dim=-1)]
        out = F.concat(fwd, bwd, dim=-1)  # (S,B,2H)
        for i, layer in enumerate(self.layers):
            y = layer(self.dropout(out))
            finals.append(F.SequenceLast(y, sequence_length=src_len, use_sequence_length=True))
            out = y + out if i >= 1 else y  # residual from layer 3 on (GNMT)
        out = F.transpose(out, axes=(1, 0, 2))  # (B,S,H or 2H)
        if self.out_proj is not None:
            out = self.out_proj(out)
        h0, c0 = self._bridge(F, finals)
        memory = [out]
        if self.key_proj is not None:
            memory.append(self.key_proj(out))
        if self._lexical:
            memory.append(emb)
        return (h0, c0, *memory)

    def _bridge(self, F, finals):
        """The decoder's initial states (B,L,H) from each encoder layer's last valid output."""
        hs, cs = [], []
        for final, bridge in zip(finals, self.bridge):
            h, c = F.split(bridge(final), num_outputs=2, axis=-1)
            hs.append(F.expand_dims(tanh(F, h), axis=1))
            cs.append(F.expand_dims(c, axis=1))
        h0 = F.concat(*hs, dim=1) if len(hs) > 1 else hs[0]
        c0 = F.concat(*cs, dim=1) if len(cs) > 1 else cs[0]
        return h0, c0
