"""The training loss: label-smoothed cross-entropy per sentence, masked by target length."""
from __future__ import annotations

from mxnet import gluon

from nmt.config import ConfigError
from nmt.model import Seq2Seq, _length_mask


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
