"""Attention heatmaps of a translation, with Hangul rendered by the NanumGothic font of `koreanize-matplotlib`.

The attention is read through the model interface (`encode`, `init_state`, then one step per output token, run as
the search runs it: `hybrid_step`): of a given translation (the one `nmt-translate` wrote, the page's best), its
pieces fed back through the model (`nmt.align.forced_attention`), or along the greedy path. What is shown is the
attention a step returns: for the LSTM architecture the weights of its one attention layer (decoder
state over encoder outputs) at each output step; for the Transformer its last decoder layer's attention over the
source, averaged over its heads; for an ensemble (the service's) the mean of its members'.
Axes are labelled with the SentencePiece pieces of both sides.
"""
from __future__ import annotations

import importlib.util
import numbers
import os
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np

from nmt.corpus import CorpusError
from nmt.models.ensemble import as_model
from nmt.text import normalize, tidy_translation
from nmt.tokenizer import BOS_ID

FONT_FAMILY = "NanumGothic"
FALLBACK_FAMILY = "DejaVu Sans"   # matplotlib's own font: glyphs NanumGothic lacks fall back to it
_font_ready = False
MAX_CELLS = 60   # pieces a side drawn at full size (0.5 x 0.4 inch cells, 10-point labels)


@dataclass
class Attention:
    source: str                  # the input sentence
    translation: str             # its translation (given, or the greedy one)
    src_pieces: List[str]        # SentencePiece pieces of the source, then "</s>"
    tgt_pieces: List[str]        # pieces of the translation, then "</s>" when it ended with EOS
    weights: np.ndarray          # (len(tgt_pieces), len(src_pieces)); each row sums to 1
    links: List[Tuple[int, int]] = field(default_factory=list)   # word alignment of these weights (`nmt.align`)
    tgt_ids: List[int] = field(default_factory=list)   # the ids of the translation's pieces, without "</s>"


def attention(translator, sentence: str, max_len: Optional[int] = None, translation: Optional[str] = None,
              pieces: Optional[Sequence[str]] = None) -> Attention:
    """Greedy translation of one sentence with its attention matrix (output step x source position); with
    `translation`, the attention of that translation, its pieces fed back through the model (`nmt.align`); with
    `pieces`, of those target pieces as given (a search's, which splitting its text again may not give back)."""
    from nmt.forced import checked_translator
    checked_translator(translator, "attention")
    if not isinstance(sentence, str):
        raise TypeError(f"attention: sentence must be a str, got {type(sentence).__name__}")
    if translation is not None and not isinstance(translation, str):   # (else named as a file's line, translation:1)
        raise TypeError(f"attention: translation must be a str or None, got {type(translation).__name__}")
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, numbers.Integral)):
        raise TypeError(f"attention: max_len must be an int or None (the model's limit), got {max_len!r}")
    if max_len is not None and max_len < 1:
        raise ValueError(f"attention: max_len must be >= 1 or None (the model's limit), got {max_len!r}")
    cut: set = set()   # (whether the sentence was cut: as the Translator read it)
    try:
        ids = translator.source_ids([sentence], cut=cut)[0]
    except ValueError as e:   # named as the list of lines it checks ("lines[0] has text on 2 lines ...")
        if not str(e).startswith("lines[0] "):
            raise   # (a ConfigError of the decode settings, ...)
        raise ValueError(f"attention: sentence{str(e).removeprefix('lines[0]')}") from None
    if not ids:
        raise ValueError("attention: the sentence is empty after normalization")
    sentence = _as_read(translator, sentence, ids) if cut else sentence   # (not cut: as given)
    if translation is not None and pieces is not None:
        raise ValueError("attention: give a translation's text or its pieces, not both")
    if translation is not None or pieces is not None:
        if max_len is not None:
            raise ValueError("attention: max_len limits the greedy translation; a given translation is not cut")
        return _forced(translator, sentence, ids, translation, pieces)
    with translator.lock:   # the translator's calls from other threads wait
        return _greedy(translator, sentence, ids, max_len)


def _as_read(translator, sentence: str, ids: List[int]) -> str:
    """A sentence cut to --max-input-tokens as the model read it: its first pieces' text, marked."""
    return f"{translator.src_tok.decode([ids])[0]} … (cut to --max-input-tokens {translator.decode.max_input_tokens})"


def _forced(translator, sentence: str, ids: List[int], translation: Optional[str],
            pieces: Optional[Sequence[str]]) -> Attention:
    from nmt.align import forced_attention, pair_links
    from nmt.forced import target_ids
    from nmt.search import length_limits
    d = translator.decode   # as long as the search may write: a prefix cut to max_input_tokens, then its limit
    limit = d.max_input_tokens + int(length_limits([len(ids) + 1], d.max_len_a, d.max_len_b)[0])
    if pieces is not None:
        tgt = translator.tgt_tok.piece_ids(pieces, "attention: pieces")
        if len(tgt) > limit:
            raise ValueError(f"attention: pieces has {len(tgt)} items, more than {limit}, the most a search may "
                             "write for this sentence (a target prefix of max_input_tokens, then its length limit)")
        translation = tidy_translation(translator.tgt_tok.decode([tgt])[0])
    else:
        try:
            tgt = target_ids(translator, [translation], name="translation", limit=limit)[0]
        except CorpusError as e:   # named as a file's line ("translation:1: the translation has ...")
            raise CorpusError(f"attention: {str(e).removeprefix('translation:1: the ')}") from None   # (ValueError)
        translation = normalize(translation)   # the text its pieces are of (as sent, with control characters)
    weights = forced_attention(translator, [ids], [tgt])[0]   # an empty translation: the row of its "</s>"
    return Attention(sentence, translation, [translator.src_tok.piece(i) for i in ids] + ["</s>"],
                     [translator.tgt_tok.piece(i) for i in tgt] + ["</s>"], weights,
                     pair_links(translator, ids, tgt, weights), list(tgt))


def _greedy(translator, sentence: str, ids: List[int], max_len: Optional[int]) -> Attention:
    """The greedy translation (`greedy_search`, as the model's length limit or `max_len` allows) and the attention
    of its steps, its pieces fed back through the model; a translation the limit cut off has no "</s>" row."""
    from nmt.align import batch_attention, pair_links
    from nmt.search import greedy_search, reached_limit
    model, ctx = as_model(translator.members), translator.ctx   # an ensemble: its mean
    src, src_len, limits = translator.source_batch([ids], ctx)
    limit = int(limits[0]) if max_len is None else int(max_len)
    out = greedy_search(model, src, src_len, [limit], alpha=translator.decode.length_penalty_alpha)[0][0]
    ended = not reached_limit(out, limit, None)
    weights = batch_attention(model, src, src_len, mx.nd.array([[BOS_ID] + out], ctx=ctx, dtype="float32"))[0]
    src_pieces = [translator.src_tok.piece(i) for i in ids] + ["</s>"]   # SentencePiece's ("▁" starts a word)
    tgt_pieces = [translator.tgt_tok.piece(i) for i in out] + (["</s>"] if ended else [])
    weights = weights[:len(tgt_pieces), :len(src_pieces)]
    return Attention(sentence, tidy_translation(translator.tgt_tok.decode([out])[0]), src_pieces, tgt_pieces,
                     weights, pair_links(translator, ids, out, weights), list(out))


def _label(piece: str) -> str:
    return piece.replace("\u2581", "_")   # the word-start mark is missing from common fonts


def korean_font_file() -> Path:
    """Path of NanumGothic.ttf as shipped by the koreanize-matplotlib package (found without importing it, which
    would change matplotlib's global rcParams)."""
    spec = importlib.util.find_spec("koreanize_matplotlib")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'koreanize_matplotlib' (its NanumGothic font draws Hangul)",
                                  name="koreanize_matplotlib")
    path = Path(list(spec.submodule_search_locations)[0]) / "fonts" / "NanumGothic.ttf"
    if not path.is_file():
        raise ImportError(f"{path} not found: reinstall koreanize-matplotlib")
    return path


def _register_font() -> None:
    global _font_ready
    if not _font_ready:
        from matplotlib import font_manager
        font_manager.fontManager.addfont(str(korean_font_file()))
        _font_ready = True


def attention_figure(att: Attention, title: Optional[str] = None):
    """A matplotlib Figure of the heatmap: source pieces on x, output pieces on y (no pyplot state used)."""
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties
    _register_font()
    n_tgt, n_src = att.weights.shape
    # over MAX_CELLS pieces a side the cells shrink (and the labels with them), not the figure: 250 x 390 pieces
    # made a 12,800 x 15,680 pixel image and took 7 GB to draw
    sx, sy = min(1.0, MAX_CELLS / max(n_src, 1)), min(1.0, MAX_CELLS / max(n_tgt, 1))
    xfont, yfont, font = (FontProperties(family=[FONT_FAMILY, FALLBACK_FAMILY], size=max(4.0, 10 * k))
                          for k in (sx, sy, 1.0))
    width = max(4.0, 0.5 * sx * n_src + 2.5)
    head = title if title is not None else f"{normalize(att.source)}\n→ {att.translation}"   # as the model read it
    chars = max(20, int(width * 72 / 11) - 6)   # an 11-point Hangul syllable is about 11 points wide
    head = "\n".join(_wrapped(line, chars) for line in head.split("\n"))   # (else a long line's is cut off)
    fig = Figure(figsize=(width, max(3.0, 0.4 * sy * n_tgt + 2.0) + 0.2 * max(0, head.count("\n") - 1)), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(att.weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(n_src))
    ax.set_xticklabels([_label(p) for p in att.src_pieces], rotation=60, ha="right", fontproperties=xfont)
    ax.set_yticks(range(n_tgt))
    ax.set_yticklabels([_label(p) for p in att.tgt_pieces], fontproperties=yfont)
    ax.set_xlabel("source", fontproperties=font)
    ax.set_ylabel("translation", fontproperties=font)
    ax.set_title(head, fontproperties=FontProperties(family=[FONT_FAMILY, FALLBACK_FAMILY], size=11))
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


def _wrapped(line: str, chars: int, most: int = 4) -> str:
    """`line` wrapped to `chars` a line, at most `most` lines (the rest as "…"): a title that fits its figure."""
    lines = textwrap.wrap(line, chars) or [""]
    return "\n".join(lines if len(lines) <= most else lines[:most - 1] + [textwrap.shorten(" ".join(lines[most - 1:]),
                                                                                         chars, placeholder=" …")])


def save_attention_plot(translator, sentence: str, path, title: Optional[str] = None,
                        translation: Optional[str] = None, pieces: Optional[Sequence[str]] = None) -> Path:
    """Save the attention heatmap of `sentence`'s `translation` or target `pieces` (default: its greedy
    translation; see `attention`) at `path`, in the format its suffix names (.png, .svg, .pdf ...: matplotlib's;
    PNG without one)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from nmt.atomic import atomic_open
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"save_attention_plot: path must be a str or a path, got {type(path).__name__}")
    from nmt.forced import checked_translator
    checked_translator(translator, "save_attention_plot")
    if title is not None and not isinstance(title, str):   # (it failed after the attention was computed)
        raise TypeError(f"save_attention_plot: title must be a str or None, got {type(title).__name__}")
    path = Path(path).expanduser()
    kind = path.suffix[1:].lower() or "png"
    known = {k: v for k, v in FigureCanvasAgg.get_supported_filetypes().items() if k != "pgf"}   # (pgf: LaTeX's)
    if kind not in known:
        raise ValueError(f"save_attention_plot: {path}: no image format is named {path.suffix!r}; give one of "
                         f"{', '.join('.' + k for k in sorted(known))}")
    fig = attention_figure(attention(translator, sentence, translation=translation, pieces=pieces), title)
    FigureCanvasAgg(fig)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format=kind)
    return path


def attention_saver(translator, out_dir) -> Callable[[int, List[str], List[List[int]]], None]:
    """A callback `(first_line_number, lines, target_ids)` that saves the heatmap of each non-empty line's
    translation (its target ids as the search wrote them) as out_dir/line-<n>.png (used by `scripts/translate.py
    --plot-attention DIR`), made with its first heatmap: a command refused before it leaves nothing on disk."""
    out_dir = Path(out_dir)
    importlib.import_module("matplotlib")   # missing, or its Korean font: said before the translating, not after it
    korean_font_file()

    def save(first_line: int, lines: List[str], target_ids: List[List[int]]) -> None:
        with translator.unreported():   # the lines were translated (their cuts reported) already
            for k, (line, ids) in enumerate(zip(lines, target_ids)):
                if normalize(line):   # an empty translation: the row of its end of sentence
                    save_attention_plot(translator, line, out_dir / f"line-{first_line + k:06d}.png",
                                        pieces=[translator.tgt_tok.piece(i) for i in ids])
    return save
