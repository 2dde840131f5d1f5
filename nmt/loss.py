"""The training loss: per-sentence label-smoothed cross-entropy of a `Seq2SeqModel`'s teacher-forced logits; the dev
set's summed NLL for perplexity."""
from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

import mxnet as mx
import numpy as np
from mxnet import gluon

from nmt.batching import make_batch
from nmt.config import ConfigError
from nmt.models.base import Seq2SeqModel as Seq2Seq
from nmt.models.base import length_mask as _length_mask

if TYPE_CHECKING:
    from nmt.data import EncodedData


class Seq2SeqLoss(gluon.HybridBlock):
    """Per-sentence summed label-smoothed cross-entropy and plain NLL, both (B,), masked by tgt_len.

    Positions at or after tgt_len (and whole rows with tgt_len 0, e.g. filler rows of a device shard)
    contribute exactly 0 to the loss and to the gradient.
    """

    def __init__(self, model: Seq2Seq, label_smoothing: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ConfigError(f"--label-smoothing must be in [0, 1) (got {label_smoothing!r})")
        self._eps = float(label_smoothing)
        with self.name_scope():
            self.model = model

    def hybrid_forward(self, F, src, src_len, tgt_in, tgt_out, tgt_len):
        logp = F.log_softmax(self.model(src, src_len, tgt_in), axis=-1)  # (B,T,V)
        nll = -F.pick(logp, F.cast(tgt_out, "float32"), axis=-1)  # (B,T)
        # Smoothing target: (1-eps) on the reference + eps spread uniformly over the vocabulary.
        loss = (1.0 - self._eps) * nll - self._eps * self._vocab_mean(F, logp) if self._eps else nll
        mask = _length_mask(F, tgt_out, F.cast(tgt_len, "float32"), axis=1)
        zeros = F.zeros_like(nll)
        # where() rather than multiply: masked positions give exactly 0 even if logits overflowed.
        return F.sum(F.where(mask, loss, zeros), axis=1), F.sum(F.where(mask, nll, zeros), axis=1)

    def _vocab_mean(self, F, logp):
        """Mean over the last axis of (B,T,V) as a product with a constant 1/V vector: MXNet's generic
        reduction over the last axis is single-threaded and takes ~5% of a training step; a matrix-vector
        product runs in the BLAS at memory speed."""
        row = F.reshape(F.slice_axis(F.slice_axis(logp, axis=0, begin=0, end=1), axis=1, begin=0, end=1),
                        shape=(1, -1))   # (1,V), only for its shape
        inv_v = F.BlockGrad(F.ones_like(row) / self.model.tgt_vocab_size)
        return F.reshape(F.FullyConnected(logp, inv_v, no_bias=True, num_hidden=1, flatten=False), shape=(0, 0))


def dev_loss(loss_block: gluon.Block, data: "EncodedData", ctx: mx.Context, batch_size: int = 64) -> Tuple[float, int]:
    """Summed NLL and target-token count of the dev set (no label smoothing): for perplexity."""
    nll_total, tokens = 0.0, 0
    order = np.argsort([len(t) for t in data.dev_tgt], kind="stable")
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        b = make_batch(data.dev_src, data.dev_tgt, idx, max(len(data.dev_src[j]) for j in idx) + 1,
                       max(len(data.dev_tgt[j]) for j in idx) + 1)
        arrays = [mx.nd.array(a, ctx=ctx, dtype="float32") for a in (b.src, b.src_len, b.tgt_in, b.tgt_out, b.tgt_len)]
        _, nll = loss_block(*arrays)
        nll_total += float(nll.sum().asscalar())
        tokens += b.num_tgt_tokens
    return nll_total, tokens
