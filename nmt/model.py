"""Attention seq2seq model: GNMT-style LSTM encoder, fused LSTM decoder, Luong/Bahdanau attention.

Architecture (all batch-major at the API, time-major inside the fused RNN kernels):

* Encoder: source embedding -> word dropout (whole tokens, optional) -> dropout -> layer 1 bidirectional
  (a forward LSTM on x and a forward LSTM on x reversed *by valid length* with `SequenceReverse`, whose
  output is reversed back, as gluon-nlp's GNMT encoder does; the fused `bidirectional=True,
  use_sequence_length=True` kernel is not padding-invariant on CPU in MXNet 1.9.1) -> layers 2..L
  unidirectional, residual from layer 3 on, dropout between layers. With one layer the 2H-wide output
  is projected to H so that every attention type sees H-wide keys.
* Bridge: decoder layer l starts from a projection of encoder layer l's last valid output
  (h = tanh(W x), c = W' x).
* Decoder: target embedding -> word dropout -> dropout -> one fused L-layer LSTM over all target-in steps (no
  input feeding, so no Python loop over time) -> attention for all steps at once (scores (B,T,S) masked
  by source length) -> tanh(W[context; dec_out]) -> dropout -> output projection to the vocabulary.
* Lexical model (optional, Nguyen & Chiang 2018): the same attention weights also average the source
  embeddings, f = tanh(sum_s a_s emb_s); h = tanh(W f) + f adds its own projection to the logits, a
  shortcut from source words to target words that small data learns faster than through the LSTMs. The
  encoder appends the (dropped-out) source embeddings to the memory for it.

`decode_step` runs the very same decoder block on a length-1 target, so step-wise decoding computes
exactly what the training graph computes.
"""
from __future__ import annotations

import os
import tempfile
from typing import Dict, List, Optional, Tuple

import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn

from nmt.config import ConfigError, ModelConfig
from nmt.lstm import FusedLSTM, fuse_legacy_lstm_params, piece_ranges

ATTENTION_TYPES = ("dot", "general", "mlp")
# Added to attention scores of padded source positions: exp() of it underflows to exactly 0 in
# float32, so padding gets zero weight and zero gradient (unlike -inf, it never makes NaN).
_MASK_VALUE = -1e9
_MIN_VOCAB = 4  # PAD, UNK, BOS, EOS


def validate_model_config(cfg: ModelConfig, src_vocab_size: int = _MIN_VOCAB,
                          tgt_vocab_size: int = _MIN_VOCAB) -> None:
    """Raise ConfigError naming the flag when `cfg` cannot build a model."""
    if cfg.attention not in ATTENTION_TYPES:
        raise ConfigError(f"--attention must be one of {', '.join(ATTENTION_TYPES)} (got {cfg.attention!r})")
    for flag, value in (("--num-layers", cfg.num_layers), ("--embed-size", cfg.embed_size),
                        ("--hidden-size", cfg.hidden_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{flag} must be a positive integer (got {value!r})")
    for flag, rate in (("--dropout", cfg.dropout), ("--word-dropout", cfg.word_dropout)):
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0.0 <= rate < 1.0:
            raise ConfigError(f"{flag} must be in [0, 1) (got {rate!r})")
    if cfg.tie_weights and cfg.embed_size != cfg.hidden_size:
        raise ConfigError(f"--tie-weights needs --embed-size == --hidden-size, because the output "
                          f"projection reuses the ({tgt_vocab_size}, embed) target embedding on hidden-size "
                          f"vectors (got embed {cfg.embed_size}, hidden {cfg.hidden_size}); give equal sizes "
                          "or --no-tie-weights")
    for name, size in (("source", src_vocab_size), ("target", tgt_vocab_size)):
        if size < _MIN_VOCAB:
            raise ConfigError(f"{name} vocabulary size must be at least {_MIN_VOCAB} "
                              f"(PAD, UNK, BOS, EOS); got {size}")


def _length_mask(F, like, lengths, axis: int):
    """(B, N) float mask, 1 where position < length along `axis` of `like`."""
    positions = F.cast(F.contrib.arange_like(like, axis=axis), "float32")
    return F.broadcast_lesser(F.reshape(positions, shape=(1, -1)), F.reshape(lengths, shape=(-1, 1)))


def _word_dropout(rate: float) -> Optional[gluon.HybridBlock]:
    """Zeroes whole token embeddings of (B,T,E) (one mask value per token, shared by its E features) in training,
    as Sennrich & Zhang (2019) do for small data; None (no op in the graph) with rate 0."""
    return nn.Dropout(rate, axes=(2,)) if rate else None


class Encoder(gluon.HybridBlock):
    """Source ids (B,S) + lengths (B,) -> memory (B,S,M) and decoder initial states [h, c] (B,L,H)."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        H, E, L = cfg.hidden_size, cfg.embed_size, cfg.num_layers
        with self.name_scope():
            self.embed = nn.Embedding(vocab_size, E, prefix="embed_")
            self.word_dropout = _word_dropout(cfg.word_dropout)
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
        hs, cs = [], []
        for final, bridge in zip(finals, self.bridge):
            h, c = F.split(bridge(final), num_outputs=2, axis=-1)
            hs.append(F.expand_dims(F.tanh(h), axis=1))
            cs.append(F.expand_dims(c, axis=1))
        h0 = F.concat(*hs, dim=1) if len(hs) > 1 else hs[0]
        c0 = F.concat(*cs, dim=1) if len(cs) > 1 else cs[0]
        if self.key_proj is not None:
            out = F.concat(out, self.key_proj(out), dim=-1)  # memory = [values; keys]
        if self._lexical:
            out = F.concat(out, emb, dim=-1)  # memory = [values; (keys;) source embeddings]
        return out, h0, c0


class Decoder(gluon.HybridBlock):
    """Target-in ids (B,T) + states + memory -> logits (B,T,V), new states, attention (B,T,S)."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        H, E = cfg.hidden_size, cfg.embed_size
        self._vocab_size, self._embed_size, self._hidden = vocab_size, E, H
        self._attention = cfg.attention
        self._tied = cfg.tie_weights
        self._lexical = cfg.lexical_model
        with self.name_scope():
            # Raw parameters (not nn.Embedding/nn.Dense) so that tying is one shared Parameter.
            # The output projection starts at std sqrt(2/H), whatever the global initializer: Xavier would
            # scale it by 1/sqrt(vocab), and with a vocabulary much larger than the words in use (always the
            # case with 256 byte-fallback pieces) the logits then barely depend on the decoder state, Adam
            # turns the faint, noisy gradients into full-size steps, the tanh layers saturate and the model
            # never leaves the unigram solution (measured on the synthetic task: dev BLEU 0 vs 95 in 600 updates).
            out_init = mx.init.Normal(sigma=(2.0 / H) ** 0.5)
            self.embed_weight = self.params.get("embed_weight", shape=(vocab_size, E),
                                                init=out_init if self._tied else None)
            if not self._tied:
                self.out_weight = self.params.get("out_weight", shape=(vocab_size, H), init=out_init)
            self.out_bias = self.params.get("out_bias", shape=(vocab_size,), init="zeros")
            self.word_dropout = _word_dropout(cfg.word_dropout)
            self.dropout = nn.Dropout(cfg.dropout)
            self.rnn = FusedLSTM(H, cfg.num_layers, input_size=E, dropout=cfg.dropout, with_states=True,
                                 prefix="rnn_")
            # general: h_t^T W h_s computed as (W^T h_t)^T h_s, so the keys need no per-step projection.
            self.query_proj = (nn.Dense(H, flatten=False, use_bias=cfg.attention == "mlp", in_units=H,
                                         prefix="query_proj_")
                               if cfg.attention != "dot" else None)
            self.score_proj = (nn.Dense(1, flatten=False, use_bias=False, in_units=H, prefix="score_proj_")
                               if cfg.attention == "mlp" else None)
            self.combine = nn.Dense(H, flatten=False, activation="tanh", in_units=2 * H, prefix="combine_")
            if self._lexical:
                self.lex_proj = nn.Dense(E, flatten=False, use_bias=False, in_units=E, prefix="lex_proj_")
                self.lex_out_weight = self.params.get("lex_out_weight", shape=(vocab_size, E),
                                                      init=mx.init.Normal(sigma=(2.0 / E) ** 0.5))

    def hybrid_forward(self, F, tgt_in, h0, c0, memory, src_len, embed_weight, out_bias, out_weight=None,
                       lex_out_weight=None):
        x = F.Embedding(tgt_in, embed_weight, input_dim=self._vocab_size, output_dim=self._embed_size)
        if self.word_dropout is not None:
            x = self.word_dropout(x)
        x = F.transpose(self.dropout(x), axes=(1, 0, 2))  # (T,B,E)
        dec, h, c = self.rnn(x, F.transpose(h0, axes=(1, 0, 2)), F.transpose(c0, axes=(1, 0, 2)))  # states (L,B,H)
        dec = F.transpose(dec, axes=(1, 0, 2))  # (B,T,H)
        weight = embed_weight if self._tied else out_weight
        logits, attn = self.attend_and_project(F, dec, memory, src_len, weight, out_bias, lex_out=lex_out_weight)
        return logits, F.transpose(h, axes=(1, 0, 2)), F.transpose(c, axes=(1, 0, 2)), attn

    def attend_and_project(self, F, dec, memory, src_len, out_weight, out_bias, combine=None, attention=(),
                           lexical=(), lex_out=None, native: bool = False, dense=None):
        """Decoder outputs (B,T,H) over memory (B,S,M) -> logits (B,T,V), attention (B,T,S). The T queries of a
        row are independent, so a beam search passes a sentence's K beams as its T (one memory per sentence).
        `combine`: the combine layer's weight cut in its context and decoder halves and its bias (a search step
        adds two products instead of concatenating their inputs; without dropout); then `attention` and
        `lexical` hold the attention layers' and the lexical model's weights too (see `step_weights`), so the
        step uses no parameter of this block. `lex_out`: the lexical output weight in the training graph.
        `native`: dot and general attention as one `nmt_attention` (`nmt.native`; the search on CPU). `dense`:
        `dense(x, weight, bias or None, num_hidden)` for the products per row of `dec` (the search's may leave
        rows out), else FullyConnected."""
        H = self._hidden
        if dense is None:
            def dense(x, w, b, n):
                return F.FullyConnected(x, w, b, no_bias=b is None, num_hidden=n, flatten=False)
        query_proj, score_proj = self.query_proj, self.score_proj
        if self._lexical:
            lex_proj = self.lex_proj
            if combine is not None:
                lex_out = lexical[1]

                def lex_proj(x):
                    return dense(x, lexical[0], None, self._embed_size)
        if combine is not None and self._attention != "dot":   # the same layers on the given weights
            w, mlp = list(attention), self._attention == "mlp"

            def query_proj(x):   # mlp: W and b; general: W only
                return dense(x, w[0], w[1] if mlp else None, H)

            def score_proj(x):
                return F.FullyConnected(x, w[2], no_bias=True, num_hidden=1, flatten=False)
        mlp = self._attention == "mlp"
        # memory = [values (H); keys (H, mlp only); source embeddings (E, lexical model only)]
        values = F.slice_axis(memory, axis=-1, begin=0, end=H) if mlp or self._lexical else memory
        if mlp:
            keys = F.slice_axis(memory, axis=-1, begin=H, end=2 * H)
            hidden = F.tanh(F.broadcast_add(F.expand_dims(keys, axis=1),
                                            F.expand_dims(query_proj(dec), axis=2)))  # (B,T,S,H)
            scores = F.reshape(score_proj(hidden), shape=(0, 0, -1))
        else:
            query = dec if query_proj is None else query_proj(dec)
        if native and not mlp:   # the products, the mask and the softmax in one kernel
            context, attn = F.nmt_attention(query, values, src_len)
        else:
            if not mlp:
                scores = F.batch_dot(query, values, transpose_b=True)  # (B,T,S)
            mask = _length_mask(F, memory, F.clip(F.cast(src_len, "float32"), 1, 1e9), axis=1)
            scores = F.broadcast_add(scores, F.expand_dims((1 - mask) * _MASK_VALUE, axis=1))
            attn = F.softmax(scores, axis=-1)
            context = F.batch_dot(attn, values)  # (B,T,H)
        if combine is None:
            out = self.dropout(self.combine(F.concat(context, dec, dim=-1)))
        else:
            w_ctx, w_dec, b = combine
            out = F.Activation(dense(context, w_ctx, b, H) + dense(dec, w_dec, None, H), act_type="tanh")
        logits = dense(out, out_weight, out_bias, self._vocab_size)
        if self._lexical:
            emb = F.slice_axis(memory, axis=-1, begin=2 * H if mlp else H, end=None)
            lex = F.tanh(F.batch_dot(attn, emb))  # (B,T,E)
            lex = F.tanh(lex_proj(lex)) + lex
            if combine is None:
                lex = self.dropout(lex)
            logits = logits + dense(lex, lex_out, None, self._vocab_size)
        return logits, attn

    @property
    def num_attention_weights(self) -> int:
        """Arrays of the attention layers in `step_weights`: none (dot), W (general), W, b, v (mlp)."""
        return {"dot": 0, "general": 1, "mlp": 3}[self._attention]

    @property
    def num_lexical_weights(self) -> int:
        """Arrays of the lexical model in `step_weights`: its projection and output weights, or none."""
        return 2 if self._lexical else 0

    @property
    def num_step_weights(self) -> int:
        """How many arrays `step_weights` returns."""
        return 4 + self.num_attention_weights + self.num_lexical_weights + 3 * (len(self.rnn.piece_shapes) // 4)

    def step_weights(self, ctx: mx.Context) -> List[mx.nd.NDArray]:
        """Every weight of a search step on `ctx` (the step then uses no parameter of this block, so members of
        an ensemble, whose parameters share names, can run in one graph), LSTM pieces cut once from the fused
        kernel's flat vector: the first layer's input gates of every target token, embed @ W_x^T + b_x + b_h
        (V, 4H) (a lookup per step instead of a product), the output weight and bias, the combine layer's
        context and decoder halves and bias, the attention layers' weights (`num_attention_weights`), the lexical
        model's (`num_lexical_weights`), the first layer's W_h (4H, H), then per further layer W_x (4H, H),
        W_h (4H, H), b_x + b_h (4H,)."""
        flat = self.rnn.rnn_param.data(ctx)
        pieces = [flat[start:end].reshape(shape) for start, end, shape in piece_ranges(self.rnn.piece_shapes)]
        L = len(self.rnn.piece_shapes) // 4
        weights, biases = pieces[:2 * L], pieces[2 * L:]
        bias = [biases[2 * l] + biases[2 * l + 1] for l in range(L)]
        embed = self.embed_weight.data(ctx)
        gates_in = mx.nd.FullyConnected(embed, weights[0], bias[0], num_hidden=4 * self._hidden)
        H = self._hidden
        w_combine = self.combine.weight.data(ctx)
        out = [gates_in, (self.embed_weight if self._tied else self.out_weight).data(ctx), self.out_bias.data(ctx),
               w_combine[:, :H], w_combine[:, H:], self.combine.bias.data(ctx)]
        if self.query_proj is not None:
            out += [p.data(ctx) for p in self.query_proj.params.values()]   # weight (and bias for mlp)
        if self.score_proj is not None:
            out.append(self.score_proj.weight.data(ctx))
        if self._lexical:
            out += [self.lex_proj.weight.data(ctx), self.lex_out_weight.data(ctx)]
        out.append(weights[1])
        for l in range(1, L):
            out += [weights[2 * l], weights[2 * l + 1], bias[l]]
        return out


class Seq2Seq(gluon.HybridBlock):
    """Attention encoder-decoder; `hybrid_forward(src, src_len, tgt_in)` -> logits (B,T,V) float32."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        validate_model_config(cfg, src_vocab_size, tgt_vocab_size)
        self.cfg = cfg
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        with self.name_scope():
            self.encoder = Encoder(cfg, src_vocab_size, prefix="encoder_")
            self.decoder = Decoder(cfg, tgt_vocab_size, prefix="decoder_")

    def hybrid_forward(self, F, src, src_len, tgt_in):
        memory, h0, c0 = self.encoder(src, src_len)
        logits, _, _, _ = self.decoder(tgt_in, h0, c0, memory, src_len)
        return logits

    def load_parameters(self, filename, ctx=None, allow_missing: bool = False, ignore_extra: bool = False,
                        cast_dtype: bool = False, dtype_source: str = "current") -> None:
        """Gluon's `load_parameters`; files written before the LSTM weights were fused (per-matrix
        `rnn.LSTM` parameters) are converted on the fly."""
        kwargs = dict(ctx=ctx, allow_missing=allow_missing, ignore_extra=ignore_extra, cast_dtype=cast_dtype,
                      dtype_source=dtype_source)
        loaded = mx.nd.load(str(filename))
        if not (isinstance(loaded, dict) and any("._unfused." in k for k in loaded)):
            super().load_parameters(str(filename), **kwargs)
            return
        fd, tmp = tempfile.mkstemp(suffix=".params", prefix=os.path.basename(str(filename)) + ".fused.")
        os.close(fd)
        try:
            mx.nd.save(tmp, fuse_legacy_lstm_params(loaded))
            super().load_parameters(tmp, **kwargs)
        finally:
            os.remove(tmp)

    def encode(self, src: mx.nd.NDArray, src_len: mx.nd.NDArray) -> Tuple[mx.nd.NDArray, List[mx.nd.NDArray]]:
        """Encode a batch: memory (B,S,M) for `decode_step` and the initial decoder states.

        The memory is the encoder output (M = hidden_size), followed for "mlp" attention by its
        projected attention keys (M = 2 * hidden_size). Every state has the batch on axis 0, so a
        search may reorder hypotheses with `take(rows, axis=0)`.
        """
        memory, h0, c0 = self.encoder(src, src_len)
        return memory, [h0, c0]

    def decode_step(self, prev_tokens: mx.nd.NDArray, states: List[mx.nd.NDArray], enc_out: mx.nd.NDArray,
                    src_len: mx.nd.NDArray) -> Tuple[mx.nd.NDArray, List[mx.nd.NDArray], mx.nd.NDArray]:
        """One decoder step: log-probs (B,V) of the next token, new states, attention weights (B,S)."""
        logits, h, c, attn = self.decoder(prev_tokens.reshape((-1, 1)), states[0], states[1], enc_out, src_len)
        return mx.nd.log_softmax(logits[:, 0], axis=-1), [h, c], attn[:, 0]


def build_model(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq:
    """Validate `cfg` (ConfigError naming the flag) and build an uninitialized Seq2Seq.

    Initialize it with e.g. `model.initialize(mx.init.Xavier(), ctx=ctx)`; biases default to zeros.
    """
    validate_model_config(cfg, src_vocab_size, tgt_vocab_size)
    return Seq2Seq(cfg, src_vocab_size, tgt_vocab_size, prefix="seq2seq_")


def _lstm_macs(input_size: int, hidden: int) -> int:
    return 4 * hidden * (input_size + hidden)


def count_flops_per_token(cfg: ModelConfig, src_vocab: int, tgt_vocab: int,
                          avg_src_len: float = 20.0) -> Dict[str, float]:
    """Approximate training cost per source and per target token, from the weight-matrix products.

    Forward multiply-adds (MACs) count every matrix product (LSTM gates, projections, attention
    scores and context over `avg_src_len` source positions, output layer); embeddings lookups,
    element-wise ops and the once-per-sentence bridge are ignored. Backward is taken as twice the
    forward (gradients w.r.t. inputs and weights), so training FLOPs = 3 * 2 * forward MACs.
    Returns src/tgt forward MACs and src/tgt forward+backward FLOPs per token.
    """
    validate_model_config(cfg, src_vocab, tgt_vocab)
    H, E, L = cfg.hidden_size, cfg.embed_size, cfg.num_layers
    src = 2 * _lstm_macs(E, H)
    src += sum(_lstm_macs(2 * H if i == 1 else H, H) for i in range(1, L))
    if L == 1:
        src += 2 * H * H  # output projection 2H -> H
    if cfg.attention == "mlp":
        src += H * H  # key projection
    tgt = _lstm_macs(E, H) + (L - 1) * _lstm_macs(H, H)
    tgt += 2 * avg_src_len * H  # scores (dot products, or v^T tanh(.) for mlp) + context
    if cfg.attention != "dot":
        tgt += H * H  # query projection
    tgt += 2 * H * H + H * tgt_vocab  # combine layer + output projection
    if cfg.lexical_model:
        tgt += avg_src_len * E + E * E + E * tgt_vocab  # source-embedding context, its projection and output
    return {"src_forward_macs": float(src), "tgt_forward_macs": float(tgt),
            "src_train_flops": 6.0 * src, "tgt_train_flops": 6.0 * tgt, "avg_src_len": float(avg_src_len)}
