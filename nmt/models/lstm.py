"""The LSTM architecture ("lstm"): GNMT-style LSTM encoder (`nmt.models.lstm_layers`), fused LSTM decoder,
Luong (dot, general) or Bahdanau (mlp) attention, optional tied embeddings and lexical model.

Decoder: target embedding -> word dropout -> dropout -> one fused L-layer LSTM over all target-in steps (no input
feeding, so no Python loop over time) -> attention for all steps at once (scores (B,T,S) masked by source length)
-> tanh(W[context; dec_out]) -> dropout -> output projection to the vocabulary.
Lexical model (optional, Nguyen & Chiang 2018): the same attention weights also average the source embeddings,
f = tanh(sum_s a_s emb_s); h = tanh(W f) + f adds its own projection to the logits, a shortcut from source words to
target words that small data learns faster than through the LSTMs.

`step` runs the very same decoder block on a length-1 target with the carried states, so step-wise decoding
computes exactly what the teacher-forced graph computes.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Tuple

import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn

from nmt.config import ATTENTION_TYPES, ConfigError, ModelConfig
from nmt.models import register
from nmt.models.base import (MIN_VOCAB, DecoderState, Seq2SeqModel, array_module, check_model_size, fold_beams,
                             length_mask, param_like)
from nmt.models.lstm_layers import Encoder, FusedLSTM, tanh, word_dropout

# Added to attention scores of padded source positions: exp() of it underflows to exactly 0 in
# float32, so padding gets zero weight and zero gradient (unlike -inf, it never makes NaN).
_MASK_VALUE = -1e9


def validate_model_config(cfg: ModelConfig, src_vocab_size: int = MIN_VOCAB,
                          tgt_vocab_size: int = MIN_VOCAB) -> None:
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
                          f"projection reuses the (vocabulary, embed) target embedding on hidden-size "
                          f"vectors (got embed {cfg.embed_size}, hidden {cfg.hidden_size}); give equal sizes "
                          "or --no-tie-weights")
    e, h = cfg.embed_size, cfg.hidden_size
    largest = {"source embedding": src_vocab_size * e, "target embedding": tgt_vocab_size * e,
               "output layer": tgt_vocab_size * h, "fused LSTM": 8 * h * (e + 2 * h) * cfg.num_layers}   # (at most)
    check_model_size(src_vocab_size, tgt_vocab_size, largest, sum(largest.values()) + largest["fused LSTM"],
                     "--embed-size, --hidden-size, --num-layers or --vocab-size")


class Decoder(gluon.HybridBlock):
    """Target-in ids (B,T) + states (B,L,H) + source lengths + memory (values (B,S,H), then keys (B,S,H) for mlp
    attention, then source embeddings (B,S,E) for the lexical model) -> logits (B,T,V), new states, attention
    (B,T,S)."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        H, E = cfg.hidden_size, cfg.embed_size
        self._vocab_size, self._embed_size, self._hidden = vocab_size, E, H
        self._attention, self._tied, self._lexical = cfg.attention, cfg.tie_weights, cfg.lexical_model
        with self.name_scope():
            # Raw parameters (not nn.Embedding/nn.Dense) so that tying is one shared Parameter.
            # The output projection starts at std sqrt(2/H), whatever the global initializer: Xavier would
            # scale it by 1/sqrt(vocab), and with a vocabulary much larger than the words in use (always the
            # case with 256 byte-fallback pieces) the logits then barely depend on the decoder state, Adam
            # turns the faint, noisy gradients into full-size steps, the tanh layers saturate and the model
            # never leaves the unigram solution (on the synthetic task: dev BLEU 0 instead of 95).
            out_init = mx.init.Normal(sigma=(2.0 / H) ** 0.5)
            self.embed_weight = self.params.get("embed_weight", shape=(vocab_size, E),
                                                init=out_init if self._tied else None)
            if not self._tied:
                self.out_weight = self.params.get("out_weight", shape=(vocab_size, H), init=out_init)
            self.out_bias = self.params.get("out_bias", shape=(vocab_size,), init="zeros")
            self.word_dropout = word_dropout(cfg.word_dropout)
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

    def hybrid_forward(self, F, tgt_in, h0, c0, src_len, *memory, **weights):
        return self.decode(F, tgt_in, h0, c0, src_len, memory, 1, **weights)

    def weights(self, like) -> Dict[str, object]:
        """This block's own parameters as `hybrid_forward` gets them (Symbols or arrays like `like`), for `decode`
        called by a step."""
        names = ["embed_weight", "out_bias"] + ([] if self._tied else ["out_weight"])
        return {n: param_like(getattr(self, n), like) for n in names + (["lex_out_weight"] if self._lexical else [])}

    def decode(self, F, tgt_in, h0, c0, src_len, memory, beam: int, embed_weight=None, out_bias=None,
               out_weight=None, lex_out_weight=None):
        """`hybrid_forward` with `beam` hypotheses (rows) per sentence of `memory` and `src_len` (a step's, T = 1):
        logits (B, beam*T, V), states (B*beam, L, H), attention (B, beam*T, S)."""
        x = F.Embedding(tgt_in, embed_weight, input_dim=self._vocab_size, output_dim=self._embed_size)
        if self.word_dropout is not None:
            x = self.word_dropout(x)
        x = F.transpose(self.dropout(x), axes=(1, 0, 2))  # (T,B,E)
        dec, h, c = self.rnn(x, F.transpose(h0, axes=(1, 0, 2)), F.transpose(c0, axes=(1, 0, 2)))  # states (L,B,H)
        dec = fold_beams(F, F.transpose(dec, axes=(1, 0, 2)), beam)  # (B,T,H)
        context, attn = self._attend(F, dec, memory[0], memory[1] if self._attention == "mlp" else None, src_len)
        out = self.dropout(self.combine(F.concat(context, dec, dim=-1)))
        weight = embed_weight if self._tied else out_weight
        logits = F.FullyConnected(out, weight, out_bias, num_hidden=self._vocab_size, flatten=False)
        if self._lexical:
            logits = logits + self._lexical_logits(F, attn, memory[-1], lex_out_weight)
        return logits, F.transpose(h, axes=(1, 0, 2)), F.transpose(c, axes=(1, 0, 2)), attn

    def _attend(self, F, dec, values, keys, src_len):
        """Decoder outputs (B,T,H) over values (B,S,H) (and, for mlp, their projected keys) -> context (B,T,H),
        attention weights (B,T,S)."""
        if keys is not None:
            hidden = tanh(F, F.broadcast_add(F.expand_dims(keys, axis=1),
                                            F.expand_dims(self.query_proj(dec), axis=2)))  # (B,T,S,H)
            scores = F.reshape(self.score_proj(hidden), shape=(0, 0, -1))
        else:
            query = dec if self.query_proj is None else self.query_proj(dec)
            scores = F.batch_dot(query, values, transpose_b=True)  # (B,T,S)
        mask = length_mask(F, values, F.clip(F.cast(src_len, "float32"), 1, 1e9), axis=1)
        scores = F.broadcast_add(scores, F.expand_dims((1 - mask) * _MASK_VALUE, axis=1))
        attn = F.softmax(scores, axis=-1)
        return F.batch_dot(attn, values), attn

    def _lexical_logits(self, F, attn, emb, lex_out_weight):
        """The lexical model's logits (B,T,V): the attention's average of the source embeddings, projected."""
        lex = tanh(F, F.batch_dot(attn, emb))  # (B,T,E)
        lex = self.dropout(tanh(F, self.lex_proj(lex)) + lex)
        return F.FullyConnected(lex, lex_out_weight, no_bias=True, num_hidden=self._vocab_size, flatten=False)


@dataclasses.dataclass(frozen=True)
class LSTMState(DecoderState):
    """The LSTM decoder's state: the encoder memory (its arrays, as `Encoder` returns them) and source lengths (B,),
    one row per sentence, and the decoder layers' hidden and cell states h, c (N,L,H), one row per hypothesis."""

    source_fields = ("memory", "src_len")
    source_position_fields = ("memory",)
    memory: Tuple[mx.nd.NDArray, ...]
    src_len: mx.nd.NDArray
    h: mx.nd.NDArray
    c: mx.nd.NDArray


@register("lstm")
class LSTMModel(Seq2SeqModel):
    """Attention encoder-decoder; `hybrid_forward(src, src_len, tgt_in)` -> logits (B,T,V) float32."""

    fixed_step_shapes = True   # memory, source lengths and the (N,L,H) states keep their shapes
    config_fields = ("embed_size", "hidden_size", "num_layers", "attention", "dropout", "word_dropout", "tie_weights",
                     "lexical_model")
    tunable_fields = ("dropout", "word_dropout")

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, **kwargs):
        validate_model_config(cfg, src_vocab_size, tgt_vocab_size)
        kwargs.setdefault("prefix", "seq2seq_")   # the parameter names every model directory uses
        super().__init__(cfg, src_vocab_size, tgt_vocab_size, **kwargs)
        with self.name_scope():
            self.encoder = Encoder(cfg, src_vocab_size, prefix="encoder_")
            self.decoder = Decoder(cfg, tgt_vocab_size, prefix="decoder_")

    def hybrid_forward(self, F, src, src_len, tgt_in):
        h0, c0, *memory = self.encoder(src, src_len)
        logits, _, _, _ = self.decoder(tgt_in, h0, c0, src_len, *memory)
        return logits

    def encode(self, src: mx.nd.NDArray, src_len: mx.nd.NDArray) -> Tuple[mx.nd.NDArray, ...]:
        """(h0 (B,L,H), c0 (B,L,H), src_len (B,), *memory arrays)."""
        h0, c0, *memory = self.encoder(src, src_len)
        return (h0, c0, src_len, *memory)

    def init_state(self, encoded: Tuple[mx.nd.NDArray, ...]) -> LSTMState:
        h0, c0, src_len, *memory = encoded
        return LSTMState(memory=tuple(memory), src_len=src_len, h=h0, c=c0)

    def step(self, prev_tokens, state: LSTMState):
        """The decoder block on one token per row (a length-1 target): log-probs (N,V), state, attention (N,S)."""
        F = array_module(prev_tokens)
        args = (F.reshape(prev_tokens, shape=(-1, 1)), state.h, state.c, state.src_len)
        if state.beam == 1:   # the block itself: one cached graph when a hybridized model steps imperatively
            logits, h, c, attn = self.decoder(*args, *state.memory)
        else:   # a Block takes only arrays: its `decode` takes the beam
            logits, h, c, attn = self.decoder.decode(F, *args, state.memory, state.beam,
                                                     **self.decoder.weights(prev_tokens))
        log_probs = F.log_softmax(F.reshape(logits, shape=(-3, 0)), axis=-1)
        return log_probs, dataclasses.replace(state, h=h, c=c), F.reshape(attn, shape=(-3, 0))


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
