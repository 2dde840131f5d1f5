"""The service's FastAPI application: /translate, /attention, /health, /info, the web page at / and the OpenAPI
page at /docs, over one `Batcher` per loaded model (chosen by language pair).

Nothing is fetched from the internet: the page is one local file, its Korean font is the NanumGothic file that
koreanize-matplotlib ships, and /docs uses the Swagger UI files of the swagger-ui-bundle package.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import logging
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from nmt import jsonio
from nmt.serve.batcher import DEFAULT_MAX_WAIT_MS, Batcher, Closed, QueueFull, TimedOut
from nmt.serve.openapi import fit_examples, openapi_30
from nmt.serve.page import page_html
from nmt.serve.pooled import answer, checked_attention, checked_translate
from nmt.serve.responses import (AttentionAnswer, HealthAnswer, InfoAnswer, TranslateAnswer, logged, responses,
                                 translation_item)
from nmt.serve.attention import attention_answer, attention_within
from nmt.serve.schema import (AttentionRequest, Limits, RequestError, TranslateRequest, at_length_limit, example,
                              parse, read_body, token_warnings)

logger = logging.getLogger("nmt.serve")


@dataclass
class Model:
    """One loaded model and the batcher that owns it."""
    translator: object
    batcher: Batcher

    @property
    def pair(self) -> str:
        return f"{self.translator.src_lang}-{self.translator.tgt_lang}"

    def info(self) -> dict:
        """Languages, architecture, decoding settings and the recorded test score of this model (or ensemble): its
        own test set's, for the loaded checkpoint (`nmt.shown_score.model_test_score`)."""
        from nmt.scoring import checkpoint_key, entry_decode, model_test_sets
        from nmt.shown_score import model_test_score
        tr, dec = self.translator, self.translator.decode
        members = list(getattr(tr, "member_dirs", []))
        key = checkpoint_key(getattr(tr, "checkpoint", None), getattr(tr, "params_file", None), bool(members))
        archs = dict.fromkeys(getattr(getattr(m, "cfg", None), "arch", tr.config.model.arch)   # (m.cfg: ModelConfig)
                              for m in getattr(tr, "members", [None]))
        info = {"src_lang": tr.src_lang, "tgt_lang": tr.tgt_lang, "arch": "+".join(archs),   # an ensemble's, all
                "model_dir": str(getattr(tr, "model_dir", "")), "checkpoint": getattr(tr, "checkpoint", None),
                "step": getattr(tr, "params_step", None), "ensemble": [str(d) for d in members],
                "member_steps": list(getattr(tr, "member_steps", [])),
                **{name: getattr(dec, f) for name, (f, _) in entry_decode(dec).items()},   # (as scores.json's)
                "best_test_score": model_test_score(getattr(tr, "model_dir", None), key, members, model_test_sets(
                    tr.config), getattr(tr, "params_step", None), getattr(tr, "params_sha256", None), dec)}
        return jsonio.shown(info)   # (a path whose bytes are not UTF-8: \xNN, not a failed answer)


class Service:
    """The models by language pair, and the limits."""

    def __init__(self, translators: Sequence, limits: Limits, max_batch: Optional[int] = None,
                 max_wait_ms: float = DEFAULT_MAX_WAIT_MS, max_queue: int = 1024):
        self.limits = limits
        self.models: Dict[str, Model] = {}
        for tr in translators:
            m = Model(tr, Batcher(tr, max_batch or tr.decode.batch_size, max_wait_ms, max_queue))
            if m.pair in self.models:
                raise ValueError(f"two models translate {m.pair}: give one --model-dir per language pair")
            self.models[m.pair] = m

    def pick(self, src: Optional[str], tgt: Optional[str]) -> Model:
        """The model for a request's languages (any model's language may be left out when it is unambiguous)."""
        for field, lang in (("src_lang", src), ("tgt_lang", tgt)):
            if lang is not None and not lang.strip():
                raise RequestError(422, f"{field} is empty: give a language of this server's models "
                                        f"({', '.join(self.models)}), or leave it out", field)
        found = [m for m in self.models.values()
                 if src in (None, m.translator.src_lang) and tgt in (None, m.translator.tgt_lang)]
        if len(found) == 1:
            return found[0]
        pairs = ", ".join(self.models)
        if not found:   # the source language when no model has it, else the target language
            wrong = "src_lang" if all(src not in (None, m.translator.src_lang) for m in self.models.values()) \
                else "tgt_lang"
            shown = [(x or "*") if len(x or "") <= 20 else x[:20] + "..." for x in (src, tgt)]   # (not 4 MB of it)
            raise RequestError(422, f"no model translates {shown[0]}->{shown[1]}: this server has {pairs}", wrong)
        raise RequestError(422, f"this server has several models ({pairs}): give src_lang and tgt_lang", "src_lang")

    def close(self) -> None:
        for m in self.models.values():
            m.batcher.close()


def create_app(service: Service) -> FastAPI:
    """The ASGI application over `service`; the batchers are closed when the server shuts down."""
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        service.close()   # uvicorn has answered the requests in flight by now

    # redirect_slashes off: Starlette's redirect of /health/ names the absolute URL, which leaves a proxy's /nmt/
    app = FastAPI(title="nmt-serve", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  redirect_slashes=False,
                  description="Neural machine translation over a trained nmt model. POST /translate with "
                              "{\"text\": [...], \"beam_size\": 4, \"nbest\": 1}.")
    fastapi_openapi = app.openapi
    pairs = [(m.translator.src_lang, m.translator.tgt_lang) for m in service.models.values()]
    beam = min(next(iter(service.models.values())).translator.decode.beam_size, service.limits.max_beam_size)
    # as Swagger UI 4 reads it; its requests go where the document is (a proxy's /nmt/ too), not to the site's root
    app.openapi = lambda: {**fit_examples(openapi_30(fastapi_openapi()), pairs, beam), "servers": [{"url": "."}]}
    app.state.service = service
    _mount_static(app)

    @app.exception_handler(RequestError)
    async def refused(request: Request, e: RequestError) -> JSONResponse:
        return JSONResponse(e.to_json(), status_code=e.status)

    @app.exception_handler(QueueFull)
    async def full(request: Request, e: QueueFull) -> JSONResponse:
        return JSONResponse({"error": str(e), "field": None}, status_code=503,
                            headers={"Retry-After": str(e.retry_after)})

    @app.exception_handler(Closed)
    async def closed(request: Request, e: Closed) -> JSONResponse:
        return JSONResponse({"error": "the server is shutting down: retry on another instance", "field": None},
                            status_code=503, headers={"Retry-After": "5"})

    app.add_middleware(HeadAsGet)
    _add_error_handlers(app)
    _add_routes(app, service.limits)
    _add_status_routes(app)
    return app


class HeadAsGet:
    """ASGI middleware: a HEAD request is answered as its GET, without the body (RFC 9110), so that every GET
    endpoint answers HEAD with one route, which alone is in the OpenAPI document. The request's state says it was a
    HEAD (`head`), for the 405 of a path without GET."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "HEAD":
            return await self.app(scope, receive, send)

        async def without_body(message):
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)
        state = {**scope.get("state", {}), "head": True}
        return await self.app({**scope, "method": "GET", "state": state}, receive, without_body)


ENDPOINTS = ("POST /translate, POST /attention, GET /health, GET /info, GET /openapi.json, GET /docs and GET / (the "
             "web page)")


def _add_error_handlers(app: FastAPI) -> None:
    """Starlette's own refusals (no such path, a method a path does not take) and unexpected failures answered in
    the service's JSON shape, {"error": ..., "field": null}."""
    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        path, headers = request.url.path, dict(e.headers or {})
        allow = headers.get("Allow", "").split(", ")
        if "GET" in allow and "HEAD" not in allow:   # HEAD is answered wherever GET is (HeadAsGet)
            headers["Allow"] += ", HEAD"
        allowed = headers.get("Allow")
        method = "HEAD" if getattr(request.state, "head", False) else request.method   # HeadAsGet made it a GET
        message = {404: f"not found: {path}; the endpoints are {ENDPOINTS}",
                   405: f"{method} is not allowed on {path}" + (f": use {allowed}" if allowed else "")
                   }.get(e.status_code, str(e.detail))
        return JSONResponse({"error": message, "field": None}, status_code=e.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def failed(request: Request, e: Exception) -> JSONResponse:
        # Starlette raises the exception again after this answer, and uvicorn logs it with its traceback; the answer
        # carries no traceback (it would show the server's code and paths to any client)
        logger.error("%s %s failed with %s (traceback below)", request.method, request.url.path, type(e).__name__)
        return JSONResponse({"error": "the server failed while answering this request (its log has the details); "
                                      "retry, and report it if it persists", "field": None}, status_code=500)


def _mount_static(app: FastAPI) -> None:
    """Local Swagger UI files and /docs; the Korean font for the page."""
    from swagger_ui_bundle import swagger_ui_path
    app.mount("/static/swagger", StaticFiles(directory=str(swagger_ui_path)), name="swagger")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="openapi.json", title="nmt-serve API",   # relative, as the page's
                                   swagger_js_url="static/swagger/swagger-ui-bundle.js",
                                   swagger_css_url="static/swagger/swagger-ui.css",
                                   swagger_favicon_url="static/swagger/favicon-32x32.png")

    @app.get("/static/korean.ttf", include_in_schema=False)
    async def font() -> Response:
        data = await run_in_threadpool(web_font)   # the first call rewrites the file (0.1 s): not on the loop
        return Response(data, media_type="font/ttf", headers={"Cache-Control": "max-age=86400"})

    @app.get("/", include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(page_html())


@functools.lru_cache(maxsize=1)
def web_font() -> bytes:
    """NanumGothic (as koreanize-matplotlib ships it, for the attention plots too) without its TSI* tables:
    they are Visual TrueType sources, useless for display, and one of them is empty, which browsers' font
    sanitizer (OTS) rejects, dropping the whole font."""
    from fontTools.ttLib import TTFont   # a dependency of matplotlib
    from nmt.plot import korean_font_file
    font = TTFont(str(korean_font_file()), lazy=True)
    for tag in [t for t in font.keys() if t.startswith("TSI")]:
        del font[tag]
    out = io.BytesIO()
    font.save(out)
    return out.getvalue()


def _body_schema(model: type) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


async def _parse_request(request: Request, model: type, limits: Limits, clock: "_Clock"):
    """The request's body, read within the byte and time limits, parsed as `model`; 415 for a compressed body, 408
    for one that takes the request's whole time to arrive."""
    if request.query_params:   # (?beam_size=1 in the URL: the model's defaults, without a word)
        raise RequestError(422, f"query parameters ({', '.join(sorted(request.query_params))[:100]}) are not read: "
                                f"give every field in the JSON body, e.g. {example(model)}")
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise RequestError(415, f"the body is compressed (Content-Encoding: {encoding}): compressed request bodies "
                                "are not accepted; send the JSON uncompressed, without a Content-Encoding header")
    try:
        body = await asyncio.wait_for(read_body(request.stream(), limits.max_body_bytes, model), clock.left())
    except asyncio.TimeoutError:
        raise RequestError(408, f"the request's body took longer than the per-request limit of {clock.limit_s} s "
                                "to arrive: send it at once") from None
    return await run_in_threadpool(parse, body, model)   # (a 4 MB body of a million empty arrays: seconds)


# The endpoints find the service as `request.app.state.service`, not in a closure: FastAPI keeps each endpoint
# function in a module-level cache, and a closure would keep the service (its models' arrays) alive until the
# interpreter exits, after MXNet's engine, and freeing them then crashed the process.
def _service(request: Request) -> Service:
    return request.app.state.service


def _add_routes(app: FastAPI, limits: Limits) -> None:
    @app.post("/translate", openapi_extra=_body_schema(TranslateRequest), response_model=None,
              responses=responses(TranslateAnswer, "the translations", 400, 408, 413, 415, 422, 500, 503, 504))
    async def translate(request: Request) -> JSONResponse:
        """Translations with scores, in input order: per sentence the best and its n-best list (best first).
        Over-long lines are cut as nmt-translate cuts them, with a warning."""
        clock = _Clock(limits.timeout_s)
        req = await _parse_request(request, TranslateRequest, limits, clock)
        model = _service(request).pick(req.src_lang, req.tgt_lang)
        tr = model.translator
        lines, beam, prefixes, warnings, long_lines, sentences = await checked_translate(req, tr, limits)
        fewer = "send fewer sentences or a smaller beam_size"
        if long_lines:   # (tokenizing them is not translating: a request that then only waits is still "busy")
            warnings += await _within_limit(model.batcher.call(lambda: token_warnings(tr, lines, prefixes),
                                                               clock.left()), clock, fewer, request, worked=False)
        if not sentences:   # blank lines alone: nothing to decode, answered now (empty), not behind other requests
            nbests, cut_off, ids = [[] for _ in lines], [], [() for _ in lines]
        else:
            nbests, cut_off, ids = await _within_limit(model.batcher.translate(
                lines, beam, req.nbest, clock.left(), prefixes, sentences), clock, fewer, request)
        warnings += [f"text[{i}]: {at_length_limit(tr.decode)}" for i in cut_off]
        warnings += [f"text[{i}]: {n} {tr.LEFT_OUT}" for i, n in enumerate(map(tr.bytes_left_out, ids)) if n]
        if req.alignment:   # each hypothesis gets its links: (text, score) -> (text, score, links)
            links = iter(await _aligned(model, lines, ids, clock, request))
            nbests = [[(t, s, next(links)) for t, s in h] for h in nbests]
        pieces = [[[tr.tgt_tok.piece(t) for t in y] for y in h] if req.pieces else None for h in ids]
        return await answer({"src_lang": tr.src_lang, "tgt_lang": tr.tgt_lang, "beam_size": beam,
                             "warnings": logged(request, warnings),
                             "translations": [translation_item(h, req.alignment, p) for h, p in zip(nbests, pieces)]})

    @app.post("/attention", openapi_extra=_body_schema(AttentionRequest), response_model=None,
              responses=responses(AttentionAnswer, "the attention weights", 400, 408, 413, 415, 422, 500, 503, 504))
    async def attention(request: Request) -> JSONResponse:
        """The attention weights (target piece x source piece) of one sentence's greedy translation, or of the
        translation given: its pieces (/translate's, with "pieces": true) or its text (cut to max_input_tokens
        pieces, with a warning, as lines are)."""
        clock = _Clock(limits.timeout_s)
        req = await _parse_request(request, AttentionRequest, limits, clock)
        model = _service(request).pick(req.src_lang, req.tgt_lang)
        line, given, warnings = await checked_attention(req, model.translator.decode.max_input_tokens)
        try:
            a, more = await _within_limit(model.batcher.call(lambda: attention_within(model.translator, line, given),
                                                             clock.left()), clock,
                                          "send a shorter text or translation", request)
        except ValueError as e:   # e.g. nothing left after normalization
            raise RequestError(422, f"text: {e}", "text") from None
        return await answer(attention_answer(a, logged(request, warnings + more)))


def _add_status_routes(app: FastAPI) -> None:
    @app.get("/health", response_model=None, responses=responses(HealthAnswer, "the server takes requests", 500))
    async def health(request: Request) -> JSONResponse:
        """200 while the server takes requests, with its queue sizes. (A server that is stopping takes no new
        connection: uvicorn refuses them while it answers the requests in flight.)"""
        service = _service(request)
        body = {"status": "ok",
                "models": {p: {"queued": m.batcher.queued, "batches": m.batcher.batches, "steps": m.batcher.steps,
                               "sentence_steps": m.batcher.sentence_steps, "sentences": m.batcher.sentences,
                               "busy_seconds": round(m.batcher.busy_seconds, 3)}
                           for p, m in service.models.items()}}
        return JSONResponse(body)

    @app.get("/info", response_model=None, responses=responses(InfoAnswer, "the models and limits", 500))
    async def info(request: Request) -> dict:
        """The models (languages, architecture, decoding settings, the test score recorded for the loaded checkpoint
        on the model's own test set, with its sacreBLEU signature), limits."""
        service = _service(request)
        return {"models": [m.info() for m in service.models.values()], "limits": vars(service.limits)}


async def _disconnected(request: Request) -> None:
    """Return once the client has disconnected (the body is read: the next message says so, or that it ended)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _aligned(model: Model, lines: List[str], ids: List[tuple], clock: "_Clock", request: Request) -> list:
    """The word alignment of every hypothesis (`ids`: each line's translations' target ids, as the search gave them:
    aligned as nmt-translate --alignment aligns them), a decode batch of them per call of the worker: between two
    calls the running search steps on, and a request over its time (or whose client left) stops using the model."""
    from nmt.align import align_ids
    tr = model.translator
    srcs, tgts = [line for line, h in zip(lines, ids) for _ in h], [t for h in ids for t in h]
    links, size = [], max(1, tr.decode.batch_size)   # (the request's time went on its search too)
    hint = f"send fewer sentences or a smaller beam_size{' or nbest' * any(len(h) > 1 for h in ids)}, or no alignment"

    def align(part: slice) -> list:
        with tr.unreported():   # the sources were translated (their cuts reported) already
            return align_ids(tr, tr.source_ids(srcs[part]), tgts[part])
    for start in range(0, len(tgts), size):
        part = slice(start, start + size)
        links += await _within_limit(model.batcher.call(lambda: align(part), clock.left(), admitted=True), clock,
                                     hint, request)
    return links


class _Clock:
    """A request's time limit, counted from its arrival and shared by its stages of work on the model."""

    def __init__(self, limit_s: float):
        self.limit_s, self.deadline = limit_s, time.monotonic() + limit_s
        self.worked = False   # a stage has run on the model

    def left(self) -> float:
        """Seconds left (a millisecond at least: the batcher reads 0 as no limit)."""
        return max(self.deadline - time.monotonic(), 1e-3)


async def _within_limit(work, clock: _Clock, hint: str, request: Request, worked: bool = True):
    """`work`'s result, or a 504 RequestError once the request's time is up: saying the server is busy if no work
    of the request started (it waited behind others), else `hint` (what makes the request cheaper). If the client
    disconnects first, the work is cancelled (its sentences leave the search) and nobody gets an answer. `worked`:
    whether `work`, done, counts as the request's work having started."""
    task, gone = asyncio.ensure_future(work), asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
    if not task.done() or task.cancelled():
        logger.info("%s %s: the client disconnected before its answer; its work was dropped", request.method,
                    request.url.path)
        raise RequestError(499, "the client disconnected before its answer")
    try:
        result = task.result()
    except TimedOut as e:
        if not (e.started or clock.worked):
            raise RequestError(504, f"the request waited the whole per-request limit of {clock.limit_s} s "
                                    "without starting: the server is busy; retry later") from None
        raise RequestError(504, f"the request took longer than the per-request limit of {clock.limit_s} s: "
                                f"{hint}, or retry later") from None
    clock.worked = clock.worked or worked
    return result
