"""Requests of the translation service, checked before any work is queued: the JSON body (read with a byte cap,
so a hostile body never sits whole in memory), its fields and types (pydantic, strict, unknown fields refused),
and the service's limits. Every refusal is a `RequestError` whose message says what to change.

Over-long lines follow the CLI's rule instead of being refused: they are cut to `max_input_tokens x 16`
characters (`nmt.translate.CHARS_PER_TOKEN`) and the answer carries a warning saying so.
"""
from __future__ import annotations

import functools
import itertools
import json
import logging
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, AsyncIterator, List, Optional, Tuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import ClientDisconnect

from nmt import jsonio
from nmt.config import CHARS_PER_TOKEN
from nmt.text import count_lines, lone_surrogate, normalize, removed_controls
from nmt.textfile import wide_encoding

EXAMPLE = '{"text": ["안녕하세요"], "beam_size": 4, "nbest": 1}'   # of /translate; /attention's below
# Lines of a /translate request, blank ones included, per sentence of --max-sentences: blank lines are not decoded, but
# each is checked, normalized, queued and answered (a million of them in a 4 MB body took the server 25-50 s).
LINES_PER_SENTENCE = 4
# Arrays and objects a body may nest (a request nests 2: an object of lists of strings; much deeper JSON reached
# Python's recursion limit, a 500) and hold (2 to 4: a million empty arrays in 4 MB took seconds to parse, the GIL
# held). Brackets are counted outside strings (`_STRING`: an unclosed one runs to the end, for one pass) only when the
# whole text has more of them.
MAX_DEPTH, MAX_CONTAINERS, _STRING = 32, 10_000, re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?')

logger = logging.getLogger("nmt.serve")


def _sendable(text: str) -> str:
    """`text` with a lone surrogate (quoted from a request's JSON escapes) as its escape: UTF-8 cannot encode it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class RequestError(Exception):
    """A request the service refuses: HTTP `status` and a message that says what to change."""

    def __init__(self, status: int, message: str, field: Optional[str] = None):
        message, field = _sendable(message), None if field is None else _sendable(field)
        super().__init__(message)
        self.status, self.message, self.field = status, message, field

    def to_json(self) -> dict:
        return {"error": self.message, "field": self.field}


class ErrorBody(BaseModel):
    """The body of every refusal and failure (`RequestError.to_json`), as the OpenAPI document shows it."""
    error: str = Field(description="what is wrong and what to change")
    field: Optional[str] = Field(description="the request field at fault (text[1], beam_size, ...); null when no "
                                             "one field is")


# Each refusal's status and when it is given (docs/serving.md), for the OpenAPI document.
ERRORS = {400: f"the body is not UTF-8, not JSON, or nested more than {MAX_DEPTH} levels deep",
          408: "the body took longer than the per-request limit (--timeout) to arrive",
          413: "the body is over --max-body-bytes, or (/translate) has more sentences than --max-sentences (blank "
               f"ones not counted), or more than {LINES_PER_SENTENCE} lines per sentence of it (blank ones included)",
          415: "the body is compressed (any Content-Encoding but identity)",
          422: "a field is wrong: its type or range, a language no model has, text on several lines, ...",
          500: "the server failed (a bug); its log has the details",
          503: "the queue is full; retry after Retry-After seconds",
          504: "over the per-request time limit (--timeout)"}
RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}}


def error_responses(*statuses: int) -> dict:
    """FastAPI's `responses` for these statuses: each with its `ERRORS` description and the `ErrorBody` model."""
    return {s: {"model": ErrorBody, "description": ERRORS[s], **({"headers": RETRY_AFTER} if s == 503 else {})}
            for s in statuses}


@dataclass
class Limits:
    """What one request may ask for; each default keeps one request's work and memory small."""
    max_body_bytes: int = 4 << 20     # a 1 MB line of Hangul, JSON-escaped, still fits; then it is cut
    max_sentences: int = 256          # per request, blank ones not counted: a bigger job belongs to nmt-translate
    max_beam_size: int = 16           # beam search memory and time grow with the beam
    timeout_s: float = 60.0           # per request, from arrival to answer


class TranslateRequest(BaseModel):
    """POST /translate: sentences in one language, translated with one beam size and n-best size."""
    model_config = ConfigDict(extra="forbid", strict=True,
                              json_schema_extra={"examples": [json.loads(EXAMPLE)]})
    text: List[str] = Field(description="sentences to translate, one line per item; an empty string gives an "
                                        "empty translation")
    beam_size: Optional[int] = Field(None, description="beam size (1 = greedy); default: the model's")
    nbest: int = Field(1, description="hypotheses returned per sentence, best first (<= beam_size)")
    target_prefix: Optional[List[Optional[str]]] = Field(
        None, description="per sentence of text, the words its translations must start with (\"\" or null: none): "
                          "they are forced, then the search goes on from them; a last word without a space after "
                          "it is completed")
    alignment: bool = Field(False, description="also return each translation's word alignment from the attention: "
                                               "[source word, translation word] pairs, counted from 0")
    pieces: bool = Field(False, description="also return each translation's SentencePiece pieces as the search "
                                            "wrote them (what /attention's pieces takes)")
    src_lang: Optional[str] = Field(None, description="source language; needed only when the server has "
                                                      "several models")
    tgt_lang: Optional[str] = Field(None, description="target language (as src_lang)")


class AttentionRequest(BaseModel):
    """POST /attention: one sentence; the attention weights of its greedy translation, or of a given one."""
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"text": "안녕하세요"}]})
    text: str = Field(description="one sentence")
    translation: Optional[str] = Field(None, description="a translation of text (e.g. /translate's) to show the "
                                                         "attention of, fed back through the model; default: the "
                                                         "greedy translation")
    pieces: Optional[List[str]] = Field(None, description="instead of translation, its SentencePiece pieces (as "
                                                          "/translate's \"pieces\": true gives them), fed back as "
                                                          "they are: splitting its text again may give others")
    src_lang: Optional[str] = None
    tgt_lang: Optional[str] = None


# What makes a request's body smaller, by request, for its 413 (over --max-body-bytes)
SMALLER = {TranslateRequest: "send fewer or shorter sentences per request (long lines are cut to the model's input "
                             "limit anyway)",
           AttentionRequest: "/attention takes one sentence: send a shorter text and translation, or fewer pieces "
                             "(each is cut to the model's input limit anyway)"}


async def read_body(chunks: AsyncIterator[bytes], limit: int, model: type = TranslateRequest) -> bytes:
    """The body of a request of `model`, read chunk by chunk; a RequestError (413, saying what makes it smaller) as
    soon as it passes `limit` bytes, (400) when the client goes away before sending all of it (logged in one line:
    nobody reads the answer)."""
    body = bytearray()
    try:
        async for chunk in chunks:
            body += chunk
            if len(body) > limit:
                raise RequestError(413, f"the request body is over {limit} bytes: {SMALLER[model]}")
    except ClientDisconnect:
        logger.info("a client disconnected after sending %d bytes of its request body", len(body))
        raise RequestError(400, "the client disconnected before sending the whole request body") from None
    return bytes(body)


def example(model: type) -> str:
    """The body a request of `model` is shown as in its errors: the example of its schema."""
    return json.dumps(model.model_config["json_schema_extra"]["examples"][0], ensure_ascii=False)


def parse(body: bytes, model: type) -> BaseModel:
    """`model` from a JSON body; RequestError 400 for a body that is not UTF-8 JSON, 422 for wrong fields."""
    wide, sign = wide_encoding(body)   # UTF-16 named (Windows tools'; without its mark, its NULs pass as UTF-8)
    try:   # (a UTF-8 byte-order mark, a JSON file saved by Notepad, is dropped)
        text, problem = body.decode("utf-8").removeprefix("\ufeff"), f"not UTF-8 but {wide} ({sign})" * bool(wide)
    except UnicodeDecodeError as e:
        text, problem = "", f"not valid UTF-8 (byte 0x{body[e.start]:02x} at offset {e.start}" + (
            f"; it is {wide}: {sign})" if wide else ")")
    if problem:
        raise RequestError(400, f"the body is {problem}: send UTF-8 encoded JSON, e.g. {example(model)}")
    too_deep = RequestError(400, f"the body is nested too deeply (more than {MAX_DEPTH} levels of arrays and "
                                 f"objects): send a JSON object of fields, e.g. {example(model)}")
    containers = text.count("[") + text.count("{")
    if containers > MAX_CONTAINERS and (containers := _containers(text)) > MAX_CONTAINERS:
        raise RequestError(422, f"the body holds {containers:,} arrays and objects: a request is an object of a few "
                                f"fields, lists of strings, e.g. {example(model)}")
    try:
        obj = _fields_once(text)
    except jsonio.TooDeep:   # the parser recurses once per level
        raise too_deep from None
    except json.JSONDecodeError as e:
        raise RequestError(400, f"the body is not valid JSON ({e}): send a JSON object, e.g. "
                                f"{example(model)}") from None
    if nested_deeper(obj, MAX_DEPTH):
        raise too_deep
    if not isinstance(obj, dict):
        raise RequestError(422, f"the body must be a JSON object, not a JSON {jsonio.json_type(obj)}: e.g. "
                                f"{example(model)}")
    unknown = [k for k in obj if k not in model.model_fields]   # (before pydantic, which makes an error of each:
    if unknown:   # 450,000 keys took 6 s, every other request held up; a lone surrogate got its own words)
        name, odd = shown_name(unknown[0]), lone_surrogate(unknown[0])
        raise RequestError(422, f"unknown field {name!r}{f' (a lone surrogate, {odd})' if odd else ''}: remove it "
                                f"(the fields are {', '.join(model.model_fields)})" +
                           (f"; {len(unknown) - 1} more unknown fields" if len(unknown) > 1 else ""), name)
    try:
        return model.model_validate({k: cut_after_wrong_items(v, model.model_fields.get(k)) for k, v in obj.items()})
    except ValidationError as e:
        raise validation_error(e, model) from None


def _fields_once(text: str) -> Any:
    """The parsed JSON `text`; a 422 for a field given twice (json.loads would keep the last value). A key repeated in
    an object within a field's value is left to the validation, which refuses that object (no field takes one)."""
    try:
        return jsonio.loads(text)
    except jsonio.RepeatedKey:
        top, seen = jsonio.loads(text, _Pairs), set()
        for key, _ in top if isinstance(top, _Pairs) else ():
            if key in seen:
                name = shown_name(key)
                raise RequestError(422, f"field {name!r} is given twice; give each field once", name) from None
            seen.add(key)
        return jsonio.loads(text, dict)


class _Pairs(list):
    """A JSON object as its (key, value) pairs."""


def _containers(text: str) -> int:
    """The arrays and objects of JSON `text`: its brackets outside strings."""
    outside = _STRING.sub("", text)
    return outside.count("[") + outside.count("{")


def shown_name(name: str) -> str:
    """A field's name as an answer echoes it: 60 characters at most (not a 4 MB one, twice)."""
    return name if len(name) <= 60 else name[:60] + "..."


def cut_after_wrong_items(value: Any, field) -> Any:
    """A list of `field` (of strings) cut after its `SHOWN_ERRORS`-th item that is no string (nor null, where null is
    allowed): it fails validation as it would whole, in the same items, without the errors of the rest. A 4 MB body
    of 2 million numbers made pydantic's 2 million errors: 13 s on the event loop, every other request held up, and
    2 GB of memory. Another value as it is."""
    if not isinstance(value, list) or field is None or len(value) <= SHOWN_ERRORS:
        return value
    nullable = "Optional[str]" in str(field.annotation)   # (target_prefix: List[Optional[str]]; text: List[str])
    wrong = (i for i, x in enumerate(value) if not isinstance(x, str) and not (nullable and x is None))
    last = next(itertools.islice(wrong, SHOWN_ERRORS - 1, None), None)
    return value if last is None else value[:last + 1]


def nested_deeper(obj: Any, limit: int) -> bool:
    """Whether parsed JSON nests arrays and objects more than `limit` levels deep (found without recursion)."""
    stack = [(obj, 1)] if isinstance(obj, (list, dict)) else []
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        items = value.values() if isinstance(value, dict) else value
        stack.extend((v, depth + 1) for v in items if isinstance(v, (list, dict)))
    return False


SHOWN_ERRORS = 5   # a 422 names the first few wrong fields


def validation_error(e: ValidationError, model: type) -> RequestError:
    """The first pydantic errors of a request (its unknown fields are refused before, by `parse`) as one
    RequestError naming the fields and what each should be."""
    messages = [_field_message(err) for err in e.errors(include_url=False)[:SHOWN_ERRORS]]   # (one example, after all)
    return RequestError(422, "; ".join(m for m, _ in messages) + f"; e.g. {example(model)}", messages[0][1])


def _field_message(err: dict) -> Tuple[str, str]:
    """(message, field) of one pydantic error."""
    loc = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(err["loc"]))
    loc = shown_name(loc)
    if err["type"] == "missing":
        return f"field {loc!r} is missing", loc
    got = json.dumps(err.get("input"), ensure_ascii=False)[:60]
    return f"{loc or 'a field name'}: {err['msg'].lower()} (got {got})", loc or None


def check_translate(req: TranslateRequest, limits: Limits, default_beam: int, max_input_tokens: int,
                    read: Optional["ReadText"] = None) -> Tuple[List[str], int, List[str]]:
    """(lines to translate, beam size, warnings) of a parsed request; RequestError for what the service refuses.
    `read`: the request's `ReadText`, shared with the other checks (default: its own)."""
    if not req.text:
        raise RequestError(422, f"text is empty: send at least one sentence, e.g. {EXAMPLE}", "text")
    if len(req.text) > (most := LINES_PER_SENTENCE * limits.max_sentences):   # blank lines too cost work
        raise RequestError(413, f"text has {len(req.text)} lines; at most {most} per request, blank ones included "
                                f"(of at most {limits.max_sentences} sentences, {LINES_PER_SENTENCE} lines each): "
                                "split them into several requests (or translate files with nmt-translate)", "text")
    read = ReadText(req) if read is None else read
    if len(req.text) > limits.max_sentences and (sentences := decoded_count(req, read)) > limits.max_sentences:
        blank = len(req.text) - sentences
        raise RequestError(413, f"text has {sentences} sentences" + f" (not counting {blank} blank lines)" * bool(blank)
                           + f"; at most {limits.max_sentences} per request: split them into several requests (or "
                           "translate files with nmt-translate)", "text")
    beam = default_beam if req.beam_size is None else req.beam_size
    if not 1 <= beam <= limits.max_beam_size:
        raise RequestError(422, f"beam_size must be between 1 and {limits.max_beam_size} (got {beam})", "beam_size")
    if not 1 <= req.nbest <= beam:
        raise RequestError(422, f"nbest must be between 1 and beam_size {beam} (got {req.nbest}): beam search "
                                "keeps only beam_size hypotheses; raise beam_size or lower nbest", "nbest")
    lines, warnings = [], []
    for i, line in enumerate(req.text):
        line, warning = check_line(line, f"text[{i}]", max_input_tokens, read=read.text[i])
        lines.append(line)
        warnings += warning
    return lines, beam, warnings


class ReadText:
    """A /translate request's lines and target prefixes (None: "") as the Translator reads them (`normalize`), each
    read once, when first asked for (after the checks that need none): the checks take them from here, and so does
    `decoded_count` what is blank."""

    def __init__(self, req: TranslateRequest):
        self._req = req

    @functools.cached_property
    def text(self) -> List[str]:
        return [normalize(line) for line in self._req.text]

    @functools.cached_property
    def prefixes(self) -> List[str]:
        return [normalize(prefix or "") for prefix in self._req.target_prefix or []]


def decoded_count(req: TranslateRequest, read: Optional[ReadText] = None) -> int:
    """How many of a /translate request's sentences the model decodes: those of --max-sentences and of the queue. A
    blank one (spaces, or characters the model does not read: `normalize` leaves nothing) without a target prefix
    costs nothing, and comes back as an empty translation. `read`: the request's `ReadText` (default: its own)."""
    read, prefixes = ReadText(req) if read is None else read, req.target_prefix or []
    return sum(1 for i, line in enumerate(read.text) if line or i < len(prefixes) and read.prefixes[i])


def check_prefixes(req: TranslateRequest, max_input_tokens: int,
                   read: Optional[ReadText] = None) -> Tuple[Optional[List[str]], List[str]]:
    """(target prefixes or None, warnings) of a parsed /translate request; RequestError unless it has one per
    sentence. `read`: the request's `ReadText` (default: its own)."""
    if req.target_prefix is None:
        return None, []
    if len(req.target_prefix) != len(req.text):
        raise RequestError(422, f"target_prefix has {len(req.target_prefix)} items for {len(req.text)} sentences in "
                                "text: give one per sentence (\"\" or null for none)", "target_prefix")
    read = ReadText(req) if read is None else read
    prefixes, warnings = [], []
    for i, prefix in enumerate(req.target_prefix):
        prefix, warning = check_line(prefix or "", f"target_prefix[{i}]", max_input_tokens, read=read.prefixes[i])
        prefixes.append(prefix)
        warnings += warning
    return prefixes, warnings


def check_line(line: str, where: str, max_input_tokens: int, use: str = "translating",
               read: Optional[str] = None) -> Tuple[str, List[str]]:
    """A line cut to the CLI's character limit, with warnings (`use`: what is done with the line, which its control
    characters were removed before; `read`: its `normalize`, if known); RequestError for a lone surrogate or text on
    several lines."""
    surrogate = lone_surrogate(line)
    if surrogate:
        raise RequestError(422, f"{where} has a lone surrogate {surrogate}: it is not a character; send valid "
                                "Unicode (a complete surrogate pair, or remove it)", where)
    lines = count_lines(line, read)
    if lines > 1:
        advice = ("send each line as its own sentence (read as one, all but the first would usually be left out of "
                  "the translation)" if where.startswith("text") else "a translation (or its start) is one line")
        raise RequestError(422, f"{where} has text on {lines} lines: {advice}", where)
    warnings, controls = [], removed_controls(line)
    max_chars = max_input_tokens * CHARS_PER_TOKEN
    read = normalize(line) if read is None else read
    if len(read) > max_chars:   # the line as read (4,000 spaces before its text are not counted)
        line = read
        warnings.append(f"{where} has {len(line)} characters; truncated to {max_chars} (max_input_tokens "
                        f"{max_input_tokens} x {CHARS_PER_TOKEN}), as nmt-translate does")
        line = line[:max_chars].rstrip()
    if controls:
        warnings.append(f"{where} has {controls}; they were removed before {use}")
    return line, warnings


def token_warnings(translator, lines: List[str], prefixes: Optional[List[str]] = None) -> List[str]:
    """Warnings for the lines (and target prefixes) the Translator will cut to max_input_tokens subword tokens (its
    second rule after the characters'), found with its own source_ids and target_prefixes. Run on the worker thread: it
    uses the model's tokenizers."""
    out = [token_warning(translator, f"text[{i}]", line, translator.source_ids) for i, line in enumerate(lines)]
    out += [token_warning(translator, f"target_prefix[{i}]", line, translator.target_prefixes)
            for i, line in enumerate(prefixes or [])]
    return [w for w in out if w]


def at_length_limit(decode) -> str:
    """The warning for a translation that reached the model's length limit (`decode`: its DecodeConfig)."""
    return (f"the translation reached the model's length limit (max_len_a {decode.max_len_a_text} x source tokens + "
            f"max_len_b {decode.max_len_b}) and may be cut off")


def within_pieces(line: str, limit: int) -> bool:
    """Whether `line` is too short to pass `limit` pieces whatever its characters: at most 4 byte-fallback pieces
    a character of its NFC form (one code point may become three: U+1D160), and the word start before them."""
    return 4 * len(unicodedata.normalize("NFC", line)) + 1 <= limit


def token_warning(translator, where: str, line: str, encode) -> str:
    """The warning for a line that `encode` (the Translator's) cuts to max_input_tokens pieces, or ""."""
    limit = translator.decode.max_input_tokens
    if within_pieces(line, limit):
        return ""
    with translator.unreported() as cut:   # (the log gets the answer's warning: `responses.logged`)
        encode([line])
    return (f"{where} has more than {limit} subword tokens; truncated to {limit} (max_input_tokens), as "
            "nmt-translate does") if cut else ""
