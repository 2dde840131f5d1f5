"""A request's work that reads all of its text or all of its answer, on a thread of the pool instead of the event
loop, as the parsing of its body (`api._parse_request`): checking the lines of a request normalizes each of them (a
4 MB body took 0.5-1 s; 2-5 s when each line was normalized several times), and FastAPI's encoding of a big answer
(256 sentences' 16-best lists with their alignments and pieces, 3 MB of JSON) took 4 s. On the event loop, either
held up every other request, /health too, for that long."""
from __future__ import annotations

from typing import List, NamedTuple, Optional

from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from nmt.languages import hangul_counts, other_language_warning
from nmt.serve.attention import check_attention
from nmt.serve.schema import ReadText, check_prefixes, check_translate, decoded_count, within_pieces


class Checked(NamedTuple):
    """A /translate request as checked: its lines, beam size, target prefixes (or None), warnings, whether a line
    or prefix as the model reads it may pass max_input_tokens pieces (the worker then tokenizes it to warn of its
    cut; a blank one never does), and how many of its sentences are decoded (`schema.decoded_count`: what the queue
    counts)."""
    lines: List[str]
    beam: int
    prefixes: Optional[List[str]]
    warnings: List[str]
    long_lines: bool
    sentences: int


async def checked_translate(req, translator, limits) -> Checked:
    """`req` (a TranslateRequest) checked for `translator`'s model within `limits`; RequestError for a refusal."""
    return await run_in_threadpool(_check_translate, req, translator, limits)


def _check_translate(req, tr, limits) -> Checked:
    most, read = tr.decode.max_input_tokens, ReadText(req)   # (each line normalized once, for every check)
    lines, beam, warnings = check_translate(req, limits, tr.decode.beam_size, most, read)
    prefixes, cut = check_prefixes(req, most, read)
    language = other_language_warning(*hangul_counts(lines, tr.src_lang), tr.src_lang, tr.tgt_lang)
    warnings += cut + ([f"text: {language}"] if language else [])
    # as read (a cut line: its cut read), not as sent: a blank line of 300 spaces is none, and goes to no worker
    long_lines = any(not within_pieces(min(x, r, key=len), most)
                     for x, r in zip(lines + (prefixes or []), read.text + read.prefixes))
    return Checked(lines, beam, prefixes, warnings, long_lines, decoded_count(req, read))


async def checked_attention(req, max_input_tokens: int) -> tuple:
    """`attention.check_attention` of `req` (an AttentionRequest)."""
    return await run_in_threadpool(check_attention, req, max_input_tokens)


async def answer(body: dict) -> JSONResponse:
    """The JSON answer of `body` (lists, strings, numbers), encoded as FastAPI's would be."""
    return await run_in_threadpool(JSONResponse, body)
