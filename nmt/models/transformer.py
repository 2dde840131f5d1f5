"""The Transformer architecture ("transformer"): a pre-norm encoder-decoder (Vaswani et al. 2017, with layer norm
before each sublayer and after the last layer as in Wang et al. 2019), sinusoidal positions added to sqrt(d)-scaled
embeddings, and tied embeddings: target embedding = output layer (`--tie-weights`), and with `--shared-vocab` and
equal vocabulary sizes the source embedding too (three-way tying, Press & Wolf 2017).

Incremental decoding: the state caches every decoder layer's projected self-attention keys and values, and the
encoder memory's keys and values per layer (computed once per sentence), so a step attends over the cache instead of
re-running the prefix: O(current length) per step. `step` and the teacher-forced forward run the same
`TransformerDecoder` block (`nmt.models.transformer_layers`).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Dict, Tuple

import mxnet as mx

from nmt.config import ConfigError, ModelConfig
from nmt.models import register
from nmt.models.base import MIN_VOCAB, DecoderState, Seq2SeqModel, array_module, check_model_size, param_like
from nmt.models.transformer_layers import MemoryProjection, TransformerDecoder, TransformerEncoder

logger = logging.getLogger(__name__)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_transformer_config(cfg: ModelConfig, src_vocab_size: int = MIN_VOCAB,
                                tgt_vocab_size: int = MIN_VOCAB) -> None:
    """Raise ConfigError naming the flag when `cfg` cannot build a Transformer."""
    for flag, value in (("--encoder-layers", cfg.encoder_layers), ("--decoder-layers", cfg.decoder_layers),
                        ("--model-size", cfg.model_size), ("--ff-size", cfg.ff_size), ("--heads", cfg.heads)):
        if not _is_int(value) or value < 1:
            raise ConfigError(f"{flag} must be a positive integer (got {value!r})")
    if cfg.model_size % cfg.heads:
        raise ConfigError(f"--model-size {cfg.model_size} must be divisible by --heads {cfg.heads} "
                          "(each head gets model-size / heads dimensions)")
    if cfg.model_size % 2:
        raise ConfigError(f"--model-size must be even (got {cfg.model_size}): the position encodings are "
                          "sine and cosine halves")
    for flag, rate in (("--dropout", cfg.dropout), ("--attention-dropout", cfg.attention_dropout),
                       ("--activation-dropout", cfg.activation_dropout), ("--word-dropout", cfg.word_dropout)):
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0.0 <= rate < 1.0:
            raise ConfigError(f"{flag} must be in [0, 1) (got {rate!r})")
    m, f, layers = cfg.model_size, cfg.ff_size, cfg.encoder_layers + cfg.decoder_layers
    largest = {"source embedding": src_vocab_size * m, "target embedding": tgt_vocab_size * m,
               "feed-forward layer": m * f}
    check_model_size(src_vocab_size, tgt_vocab_size, largest, sum(largest.values()) + tgt_vocab_size * m
                     + layers * (4 * m * m + 2 * m * f) + cfg.decoder_layers * 4 * m * m,
                     "--model-size, --ff-size, --encoder-layers, --decoder-layers or --vocab-size")


@dataclasses.dataclass(frozen=True)
class TransformerState(DecoderState):
    """The Transformer decoder's state.

    Source fields (one row per sentence, for all its beams): `memory_keys`, `memory_values` (B,L,S,d), each
    decoder layer's projection of the encoder memory, and `src_len` (B,). Moving fields (one row per hypothesis):
    `keys`, `values` (N,L,P,d), each decoder layer's self-attention cache (slot 0 a placeholder, then one slot per
    target token read), and `position` (N,) float, the position of the next token read."""

    source_fields = ("memory_keys", "memory_values", "src_len")
    source_position_fields, source_position_axis = ("memory_keys", "memory_values"), 2
    memory_keys: mx.nd.NDArray
    memory_values: mx.nd.NDArray
    src_len: mx.nd.NDArray
    keys: mx.nd.NDArray
    values: mx.nd.NDArray
    position: mx.nd.NDArray


@register("transformer")
class TransformerModel(Seq2SeqModel):
    """Pre-norm Transformer encoder-decoder; `hybrid_forward(src, src_len, tgt_in)` -> logits (B,T,V) float32."""

    config_fields = ("encoder_layers", "decoder_layers", "model_size", "ff_size", "heads", "dropout", "word_dropout",
                     "attention_dropout", "activation_dropout", "tie_weights")
    tunable_fields = ("dropout", "word_dropout", "attention_dropout", "activation_dropout")

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, **kwargs):
        validate_transformer_config(cfg, src_vocab_size, tgt_vocab_size)
        kwargs.setdefault("prefix", "transformer_")
        super().__init__(cfg, src_vocab_size, tgt_vocab_size, **kwargs)
        self.shares_source_embedding = bool(cfg.shared_vocab) and src_vocab_size == tgt_vocab_size
        if cfg.shared_vocab and not self.shares_source_embedding:
            logger.warning("--shared-vocab with source vocabulary %d != target vocabulary %d: source and target "
                           "embeddings stay separate", src_vocab_size, tgt_vocab_size)
        d = cfg.model_size
        # Embeddings start at std d^-1/2: scaled by sqrt(d) they enter the layers at unit scale, and as the tied
        # output layer over a layer-normed state they give logits of unit scale, whatever the vocabulary size
        # (Xavier would shrink them with the vocabulary; see the LSTM's output layer for what that costs).
        init = mx.init.Normal(sigma=d ** -0.5)
        with self.name_scope():
            self.tgt_embed_weight = self.params.get("tgt_embed_weight", shape=(tgt_vocab_size, d), init=init)
            if not self.shares_source_embedding:
                self.src_embed_weight = self.params.get("src_embed_weight", shape=(src_vocab_size, d), init=init)
            if not cfg.tie_weights:
                self.out_weight = self.params.get("out_weight", shape=(tgt_vocab_size, d), init=init)
            self.out_bias = self.params.get("out_bias", shape=(tgt_vocab_size,), init="zeros")
            self.encoder = TransformerEncoder(cfg, src_vocab_size, prefix="encoder_")
            self.decoder = TransformerDecoder(cfg, tgt_vocab_size, prefix="decoder_")
            self.memory_proj = MemoryProjection(cfg, prefix="decoder_memory_")

    def hybrid_forward(self, F, src, src_len, tgt_in, tgt_embed_weight, out_bias, src_embed_weight=None,
                       out_weight=None):
        memory = self.encoder(src, src_len, tgt_embed_weight if src_embed_weight is None else src_embed_weight)
        mem_keys, mem_values = self.memory_proj(memory)
        empty = self.decoder.empty_cache(memory)
        positions = F.reshape(F.cast(F.contrib.arange_like(tgt_in, axis=1), "float32"), shape=(1, -1))
        logits, _, _, _ = self.decoder(tgt_in, positions, empty, empty, mem_keys, mem_values, src_len,
                                       tgt_embed_weight, tgt_embed_weight if out_weight is None else out_weight,
                                       out_bias)
        return logits

    def _weights(self, like) -> Tuple:
        """(source embedding, target embedding, output weight, output bias) as arrays or Symbols like `like`."""
        tgt = param_like(self.tgt_embed_weight, like)
        src = tgt if self.shares_source_embedding else param_like(self.src_embed_weight, like)
        out = tgt if self.cfg.tie_weights else param_like(self.out_weight, like)
        return src, tgt, out, param_like(self.out_bias, like)

    def encode(self, src: mx.nd.NDArray, src_len: mx.nd.NDArray) -> Tuple[mx.nd.NDArray, mx.nd.NDArray]:
        """(memory (B,S,d), src_len (B,))."""
        return self.encoder(src, src_len, self._weights(src)[0]), src_len

    def init_state(self, encoded: Tuple[mx.nd.NDArray, mx.nd.NDArray]) -> TransformerState:
        """Memory keys and values per decoder layer, empty self-attention caches, position 0."""
        memory, src_len = encoded
        F = array_module(memory)
        mem_keys, mem_values = self.memory_proj(memory)
        empty = self.decoder.empty_cache(memory)
        position = F.zeros_like(F.cast(src_len, "float32"))
        return TransformerState(memory_keys=mem_keys, memory_values=mem_values, src_len=src_len, keys=empty,
                                values=empty, position=position)

    def step(self, prev_tokens: mx.nd.NDArray, state: TransformerState
             ) -> Tuple[mx.nd.NDArray, TransformerState, mx.nd.NDArray]:
        """The decoder block on one token per row: log-probs (N,V), the state with the caches one slot longer,
        and the attention (N,S) that attention plots show: the last decoder layer's attention over the source,
        averaged over its heads."""
        F = array_module(prev_tokens)
        _, tgt, out, bias = self._weights(prev_tokens)
        args = (F.reshape(prev_tokens, shape=(-1, 1)), F.reshape(state.position, shape=(-1, 1)), state.keys,
                state.values, state.memory_keys, state.memory_values, state.src_len, tgt, out, bias)
        # beam 1: the block itself (one cached graph when a hybridized model steps imperatively); a Block takes
        # only arrays, so more beams go through its `decode`, which takes the beam
        logits, keys, values, attn = (self.decoder(*args) if state.beam == 1
                                      else self.decoder.decode(F, *args, state.beam))
        log_probs = F.log_softmax(F.reshape(logits, shape=(-3, 0)), axis=-1)
        new_state = dataclasses.replace(state, keys=keys, values=values, position=state.position + 1)
        return log_probs, new_state, F.reshape(attn, shape=(-3, 0))



def count_flops_per_token(cfg: ModelConfig, src_vocab: int, tgt_vocab: int, avg_src_len: float = 20.0,
                          avg_tgt_len: float = 20.0) -> Dict[str, float]:
    """Approximate training cost per source and per target token, from the matrix products (as
    `nmt.models.lstm.count_flops_per_token` counts the LSTM's, for useful FLOP/s next to the sgemm rate).

    Forward multiply-adds (MACs): per source token, each encoder layer's query, key, value and output projections
    (4 d^2), attention scores and context over `avg_src_len` positions (2 S d) and feed-forward (2 d ff), plus each
    decoder layer's projection of the memory into keys and values (2 d^2); per target token, each decoder layer's
    self-attention (4 d^2 + 2 T d over `avg_tgt_len` positions: the masked half is computed too), attention over the
    source (query and output projections 2 d^2, scores and context 2 S d) and feed-forward, and the output layer
    (d V). Embedding lookups, layer norms and element-wise ops are ignored. Backward is taken as twice the forward,
    so training FLOPs = 3 * 2 * forward MACs. Returns src/tgt forward MACs and src/tgt training FLOPs per token."""
    validate_transformer_config(cfg, src_vocab, tgt_vocab)
    d, ff, S, T = cfg.model_size, cfg.ff_size, avg_src_len, avg_tgt_len
    feed_forward = 2 * d * ff
    src = cfg.encoder_layers * (4 * d * d + 2 * S * d + feed_forward) + cfg.decoder_layers * 2 * d * d
    tgt = cfg.decoder_layers * (4 * d * d + 2 * T * d + 2 * d * d + 2 * S * d + feed_forward) + d * tgt_vocab
    return {"src_forward_macs": float(src), "tgt_forward_macs": float(tgt), "src_train_flops": 6.0 * src,
            "tgt_train_flops": 6.0 * tgt, "avg_src_len": float(S), "avg_tgt_len": float(T)}
