"""POST /attention's request and work: its checks before any work is queued (the sentence, and the translation
given as text or as pieces), the attention of that translation (or of the greedy one) with the warnings of the work,
computed on the model's worker thread (`nmt.plot.attention`), and the answer's fields."""
from __future__ import annotations

from typing import List, Tuple

from nmt.serve.schema import AttentionRequest, RequestError, at_length_limit, check_line, token_warning
from nmt.text import normalize


def check_attention(req: AttentionRequest, max_input_tokens: int) -> Tuple[str, object, List[str]]:
    """(sentence, translation: its text, its pieces or None, warnings) of a parsed /attention request;
    RequestError for what is refused. A translation is cut like a sentence: its pieces are steps of the model."""
    read = "feeding it through the model"   # (a translation given is not translated: its text is read)
    line, warnings = check_line(req.text, "text", max_input_tokens,
                                "translating" if req.translation is None and req.pieces is None else read)
    if not normalize(line):   # spaces, or invisible characters the model does not read
        raise RequestError(422, "text is empty: send one sentence", "text")
    if req.pieces is not None:
        if req.translation is not None:
            raise RequestError(422, "translation and pieces are both given: send one (pieces, when you have them)",
                               "pieces")
        ended = req.pieces[-1:] == ["</s>"]   # (as an answer's pieces end: the row of the end, not a step to cut)
        if len(req.pieces) - ended > max_input_tokens:
            warnings.append(f"pieces has {len(req.pieces)} items; truncated to its first {max_input_tokens} "
                            "(max_input_tokens), as nmt-translate cuts input lines")
            return line, req.pieces[:max_input_tokens], warnings
        return line, req.pieces, warnings
    if req.translation is None:
        return line, None, warnings
    translation, cut = check_line(req.translation, "translation", max_input_tokens,
                                  f"{read} (the answer's translation is without them)")
    return line, translation, warnings + cut


def attention_within(translator, line: str, given) -> Tuple[object, List[str]]:
    """(`nmt.plot.attention` of `line`, warnings: a text cut to max_input_tokens pieces, a given translation cut,
    a greedy translation at the model's length limit, byte pieces its text leaves out, worded as /translate words
    them, and <s> or <pad> pieces it drops (a caller's): of the sentence's translation, "text", or of the pieces given,
    "pieces"). A given translation (`check_attention`'s: text, pieces or None) over max_input_tokens target pieces
    is first cut to its longest start within them, as a line is cut: each piece is a step of the model, and the
    character guard alone lets one translation take minutes (an emoji is 4 byte pieces). Run on the worker thread:
    it uses the model's tokenizer."""
    from nmt.plot import attention
    from nmt.tokenizer import PieceError
    warnings = [token_warning(translator, "text", line, translator.source_ids)]
    asked = {}
    if isinstance(given, list):
        asked = {"pieces": given}
    elif given is not None:
        given, cut = _within_pieces(translator, given)
        warnings.append(cut)
        asked = {"translation": given}
    with translator.unreported():   # (a cut is said in the answer, and the log has the answer's words)
        try:
            a = attention(translator, line, **asked)
        except PieceError as e:   # of given pieces (`Tokenizer.piece_ids`, which maps them once, there), named as
            if "pieces" not in asked:   # pydantic names an item: pieces[2]
                raise
            raise RequestError(422, str(e).removeprefix("attention: "), e.field.removeprefix("attention: ")) from None
    if not asked and a.tgt_pieces[-1:] != ["</s>"]:   # (a given translation is as given)
        warnings.append(at_length_limit(translator.decode))
    where = "pieces" if "pieces" in asked else "text"   # (of given pieces too: their text leaves them out alike)
    left_out, dropped = translator.bytes_left_out([a.tgt_ids]), translator.tgt_tok.dropped_pieces(a.tgt_ids)
    warnings += [f"{where}: {left_out} {translator.LEFT_OUT}" if left_out else "",
                 f"{where}: {dropped} start of sentence or padding piece(s) (<s>, <pad>) left out of the translation: "
                 "its text drops them (their rows are steps of the model)" if dropped else ""]
    return a, [w for w in warnings if w]


def _within_pieces(translator, given: str) -> Tuple[str, str]:
    """(`given`, "") for a translation of at most max_input_tokens target pieces, else (its longest start within
    them, the warning)."""
    limit = translator.decode.max_input_tokens
    pieces = _pieces(translator, given)
    if pieces <= limit:
        return given, ""
    lo, hi = 0, len(given)   # given[:lo] fits, given[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _pieces(translator, given[:mid]) <= limit else (lo, mid)
    return given[:lo], (f"translation has {pieces} subword tokens; truncated to its first {lo} characters (at most "
                        f"{limit} tokens: max_input_tokens), as nmt-translate cuts input lines")


def _pieces(translator, text: str) -> int:
    return len(translator.tgt_tok.encode([normalize(text)])[0])


def attention_answer(a, warnings: List[str]) -> dict:
    """The answer (`responses.AttentionAnswer`) of attention `a` with `warnings`."""
    return {"translation": a.translation, "src_pieces": a.src_pieces, "tgt_pieces": a.tgt_pieces,
            "weights": [[round(float(w), 4) for w in row] for row in a.weights],
            "alignment": [list(link) for link in a.links], "warnings": warnings}
