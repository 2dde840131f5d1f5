"""The LSTM stack both model halves run: one flat parameter in the layout of MXNet's fused RNN kernel.

Also converts parameters saved with Gluon's separate `rnn.LSTM` layers into that layout, and walks the flat
vector piece by piece (the initializer and the search's per-layer weights both need that).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import mxnet as mx
from mxnet import gluon


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
                glob._init_weight(mx.init.InitDesc(f"{desc}_{i}_weight"), piece)
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
    the gradient at every backward: about a fifth of a training step at hidden size 256).

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


def fuse_legacy_lstm_params(loaded: Dict[str, mx.nd.NDArray]) -> Dict[str, mx.nd.NDArray]:
    """Parameters saved with Gluon's `rnn.LSTM` layers (`<block>._unfused.<layer>.{i2h,h2h}_{weight,bias}`)
    converted to this module's `<block>.rnn_param` layout; other entries unchanged."""
    groups: Dict[str, Dict[str, mx.nd.NDArray]] = {}
    out = {}
    for name, value in loaded.items():
        if "._unfused." in name:
            block, rest = name.split("._unfused.", 1)
            groups.setdefault(block, {})[rest] = value
        else:
            out[name] = value
    for block, parts in groups.items():
        layers = len({k.split(".")[0] for k in parts})
        order = [f"{l}.{g}" for t in ("weight", "bias") for l in range(layers)
                 for g in ("i2h_" + t, "h2h_" + t)]
        missing = [k for k in order if k not in parts]
        if missing:
            raise ValueError(f"LSTM parameters of {block} are incomplete: missing "
                             f"{', '.join(f'{block}._unfused.{k}' for k in missing)}")
        out[f"{block}.rnn_param"] = mx.nd.concat(*[parts[k].reshape((-1,)) for k in order], dim=0)
    return out
