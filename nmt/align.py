"""Word alignments from attention: which source words each translation's words were translated from, as Sockeye's
`translation_with_alignments`, Marian's `--alignment`, fairseq's `--print-alignment` and OpenNMT's
`-report_align` give them (for projecting markup, terms or tags from a sentence onto its translation).

The translation is fed back through the model's step interface, teacher forced (`encode`, `init_state`, one
`hybrid_step` per target piece, batched and shared out among the translator's devices as decoding is), and each
target piece is linked to the source piece its attention weighs most: the attention that produced that piece, the
same the search saw on this path. A piece whose attention peaks on the source's end of sentence gets no link.
Links between pieces become links between whitespace-separated words: source word i and target word j are linked
when a piece of j is linked to a piece of i. Words count from 0 in the line as the model read it (normalized:
whitespace runs are one space) and in the translation as written. The output is the Pharaoh format, `i-j` pairs
ordered by source then target word: `0-1 1-0 2-2`.

What the links are worth depends on the attention: the LSTM's one attention layer aligns as attention-based
aligners do; the Transformer's step returns its last decoder layer's attention, averaged over heads, which is
known to align worse than its lower layers (Garg et al. 2019). docs/translation.md has the figures.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np

from nmt.batching import make_batch
from nmt.forced import checked_translator, target_ids

Links = List[Tuple[int, int]]


def forced_attention(translator, src_ids: Sequence[List[int]], tgt_ids: Sequence[List[int]]) -> List[np.ndarray]:
    """Per pair, the attention (len(tgt) + 1, len(src) + 1) of each target piece and the final EOS over the source
    pieces and the source EOS, teacher forced through the translator's model (an ensemble: its members' mean)."""
    out: List[np.ndarray] = [np.zeros((0, 0))] * len(src_ids)
    order = sorted(range(len(src_ids)), key=lambda i: (len(tgt_ids[i]), len(src_ids[i])))

    def run(ctx: mx.Context, model, chunk: List[int]) -> None:
        b = make_batch(src_ids, tgt_ids, chunk, max(len(src_ids[i]) for i in chunk) + 1,
                       max(len(tgt_ids[i]) for i in chunk) + 1)
        weights = batch_attention(model, *(mx.nd.array(a, ctx=ctx, dtype="float32")
                                           for a in (b.src, b.src_len, b.tgt_in)))
        for r, i in enumerate(chunk):
            out[i] = weights[r, :len(tgt_ids[i]) + 1, :len(src_ids[i]) + 1]
    translator.share_out([i for i in order if src_ids[i]], run)   # an empty target too: its EOS row
    return out


def batch_attention(model, src: mx.nd.NDArray, src_len: mx.nd.NDArray, tgt_in: mx.nd.NDArray) -> np.ndarray:
    """The attention (B, T, S) of each step of `model` (`Seq2SeqModel` or `Ensemble`) teacher forced with `tgt_in`
    (B, T): row t is the attention of the step that predicts the piece after tgt_in[:, t]."""
    state = model.init_state(model.encode(src, src_len))
    rows = []
    for t in range(tgt_in.shape[1]):
        _, state, attn = model.hybrid_step(tgt_in[:, t], state)
        rows.append(attn)
    return mx.nd.stack(*rows, axis=1).asnumpy()


def word_links(weights: np.ndarray, src_words: Sequence[Optional[int]], tgt_words: Sequence[Optional[int]]) -> Links:
    """Word links from the attention `weights` (target pieces + EOS, source pieces + EOS) and the word index of
    each source and target piece (`Tokenizer.piece_words`)."""
    links = set()
    for t, j in enumerate(tgt_words):
        if j is None or t >= len(weights):
            continue
        s = int(np.argmax(weights[t]))
        if s < len(src_words) and src_words[s] is not None:
            links.add((src_words[s], j))
    return sorted(links)


def format_links(links: Links) -> str:
    """The Pharaoh format: `0-1 1-0`."""
    return " ".join(f"{i}-{j}" for i, j in links)


def align_ids(translator, src_ids: Sequence[List[int]], tgt_ids: Sequence[List[int]]) -> List[Links]:
    """Word links of each (source ids, target ids) pair (without BOS/EOS, as the search and the tokenizer give
    them); an empty source or target has none."""
    weights = forced_attention(translator, src_ids, tgt_ids)
    return [pair_links(translator, x, y, w) for x, y, w in zip(src_ids, tgt_ids, weights)]


def pair_links(translator, src: Sequence[int], tgt: Sequence[int], weights: np.ndarray) -> Links:
    """Word links of one pair's pieces (ids, as `align_ids` takes them) from their attention `weights`."""
    if not src or not tgt:
        return []
    return word_links(weights, translator.src_tok.piece_words(src)[1], translator.tgt_tok.piece_words(tgt)[1])


def with_links(translator, src_ids: Sequence[List[int]], hyps: Sequence[Sequence[Tuple[List[int], float]]]) -> list:
    """Per line, its hypotheses (target ids, score) as (detokenized translation, score, word links), for the lines
    whose source ids are `src_ids` (what `Translator.translate_aligned` returns)."""
    links = iter(align_ids(translator, [x for x, h in zip(src_ids, hyps) for _ in h], [y for h in hyps for y, _ in h]))
    return [[(text, score, next(links)) for text, score in h] for h in translator.texts(hyps)]


def align(translator, sources: Sequence[str], translations: Sequence[str], first_line: int = 1) -> List[Links]:
    """Word links of given translations of `sources` (raw text, line-aligned) under the translator's model: the
    Python API's way to align a corpus (`Translator.translate_aligned` aligns its own translations)."""
    checked_translator(translator, "align")
    src = translator.source_ids(sources, first_line, "sources")
    tgt = target_ids(translator, translations, first_line, "translation")   # checked as forced decoding takes them
    if len(src) != len(tgt):
        raise ValueError(f"{len(src)} sources but {len(tgt)} translations: they must be line-aligned")
    return align_ids(translator, src, tgt)
