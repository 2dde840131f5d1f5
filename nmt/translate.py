"""Inference: `Translator.from_dir(path).translate(lines)`, used by the script, evaluation and notebooks alike."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np

from nmt import checkpoint as ckpt
from nmt.config import Config, DecodeConfig
from nmt.corpus import Pairs, normalize
from nmt.evaluate import Scores, score
from nmt.model import build_model
from nmt.search import beam_search, greedy_search
from nmt.batching import pad_sources
from nmt.tokenizer import Tokenizer, tokenizer_path

logger = logging.getLogger("nmt.translate")


class Translator:
    """Batched, length-sorted translation with greedy or beam search. Output order = input order; an empty
    input line gives an empty output line."""

    def __init__(self, net, src_tok: Tokenizer, tgt_tok: Tokenizer, decode: DecodeConfig, ctx: mx.Context = None):
        self.net, self.src_tok, self.tgt_tok, self.decode = net, src_tok, tgt_tok, decode
        self.ctx = ctx or mx.cpu()
        self.truncated = 0          # inputs cut to decode.max_input_tokens so far

    @classmethod
    def from_dir(cls, model_dir, which: str = "best", ctx: mx.Context = None,
                 decode: Optional[DecodeConfig] = None) -> "Translator":
        """Everything comes from the model directory: config, both SentencePiece models, parameters."""
        model_dir = Path(model_dir)
        if not (model_dir / ckpt.CONFIG).exists():
            raise ckpt.CheckpointError(f"{model_dir / ckpt.CONFIG} not found: --model-dir must be a directory "
                                       "written by nmt training")
        cfg = Config.load(model_dir / ckpt.CONFIG)
        ctx = ctx or mx.cpu()
        src_tok = Tokenizer.load(tokenizer_path(model_dir, cfg.data.src_lang))
        tgt_tok = Tokenizer.load(tokenizer_path(model_dir, cfg.data.tgt_lang))
        net = build_model(cfg.model, src_tok.vocab_size, tgt_tok.vocab_size)
        net.load_parameters(str(ckpt.params_path(model_dir, which)), ctx=ctx)
        net.hybridize(static_alloc=True)
        return cls(net, src_tok, tgt_tok, decode or cfg.decode, ctx=ctx)

    def _source_ids(self, lines: Sequence[str]) -> List[List[int]]:
        ids = self.src_tok.encode([normalize(x) for x in lines])
        limit = self.decode.max_input_tokens
        for i, x in enumerate(ids):
            if len(x) > limit:
                self.truncated += 1
                logger.warning("input %d has %d subword tokens; truncated to %d (--max-input-tokens)", i + 1, len(x), limit)
                ids[i] = x[:limit]
        return ids

    def translate_ids(self, lines: Sequence[str], beam_size: Optional[int] = None,
                      nbest: int = 1) -> List[List[Tuple[List[int], float]]]:
        """Per input line, up to `nbest` (target ids, score) pairs, best first ([] for an empty line)."""
        beam = beam_size or self.decode.beam_size
        ids = self._source_ids(lines)
        out: List[List[Tuple[List[int], float]]] = [[] for _ in lines]
        todo = [i for i, x in enumerate(ids) if x]
        todo.sort(key=lambda i: len(ids[i]))   # length-sorted batches: little padding
        bs = max(1, self.decode.batch_size)
        for start in range(0, len(todo), bs):
            chunk = todo[start:start + bs]
            src, src_len = pad_sources([ids[i] for i in chunk], max(len(ids[i]) for i in chunk) + 1)
            max_len = np.ceil(self.decode.max_len_a * src_len + self.decode.max_len_b).astype("int64")
            src_nd = mx.nd.array(src, ctx=self.ctx, dtype="float32")
            len_nd = mx.nd.array(src_len, ctx=self.ctx, dtype="float32")
            if beam == 1 and nbest == 1:
                hyps = [[(h, 0.0)] for h in greedy_search(self.net, src_nd, len_nd, max_len)]
            else:
                hyps = beam_search(self.net, src_nd, len_nd, beam_size=max(beam, nbest), max_len=max_len,
                                   alpha=self.decode.length_penalty_alpha, nbest=nbest)
            for r, i in enumerate(chunk):
                out[i] = hyps[r]
        return out

    def translate(self, lines: Sequence[str], beam_size: Optional[int] = None) -> List[str]:
        """One detokenized translation per input line."""
        res = self.translate_ids(lines, beam_size=beam_size)
        texts = self.tgt_tok.decode([r[0][0] if r else [] for r in res])
        return [t if r else "" for t, r in zip(texts, res)]


def evaluate_pairs(translator: Translator, pairs: Pairs, tgt_lang: str, beam_size: Optional[int] = None) -> Scores:
    """Translate `pairs.src` and score against `pairs.tgt` with sacreBLEU."""
    hyps = translator.translate(pairs.src, beam_size=beam_size)
    return score(hyps, pairs.tgt, tgt_lang)
