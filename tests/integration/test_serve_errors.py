"""The service's refusals and failures over real HTTP, as the audit of nmt-serve found them: each is JSON in the
documented {"error", "field"} shape with a message that fits the case, and none leaves a traceback in the answer,
or in the log for what is no fault of the server."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import gzip
import json
import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, List
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.serve_app import background_server, make_app


@pytest.fixture(scope="module")
def server(translator):
    app = make_app(translator, max_wait_ms=5)
    with background_server(app) as url:
        yield url


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server, timeout=60) as c:
        yield c


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: List[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def server_log() -> Iterator[List[logging.LogRecord]]:
    """The records of the service's and uvicorn's loggers meanwhile (uvicorn's do not reach pytest's caplog); enter
    it once the server has started (uvicorn's logging setup removes the loggers' handlers)."""
    handler, loggers = Records(), [logging.getLogger(n) for n in ("nmt.serve", "uvicorn.error")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        for lg, level in zip(loggers, levels):
            lg.removeHandler(handler)
            lg.setLevel(level)


def test_deeply_nested_json_is_a_400_saying_so(http):
    """It was a RecursionError: 500 text/plain."""
    for body in (b"[" * 3000 + b"]" * 3000, b'{"text": ["a"], "x": ' + b'{"a": ' * 3000 + b"1" + b"}" * 3000 + b"}"):
        r = http.post("/translate", content=body)
        assert r.status_code == 400 and r.headers["content-type"] == "application/json", r.text
        assert "nested too deeply" in r.json()["error"] and r.json()["field"] is None
    r = http.post("/attention", content=b'{"text": ' + b"[" * 3000 + b"]" * 3000 + b"}")
    assert r.status_code == 400 and "nested too deeply" in r.json()["error"]


@pytest.mark.parametrize("path, body, field", [
    ("/translate", b'{"text": "\\ud800"}', "text"),
    ("/translate", b'{"text": ["a"], "\\ud800": 1}', "\\ud800"),   # an unknown field, named (sent escaped)
    ("/translate", b'{"text": ["a"], "src_lang": "\\ud800"}', "src_lang"),
    ("/translate", b'{"text": ["a"], "beam_size": "\\udfff"}', "beam_size"),
    ("/attention", b'{"text": "a", "tgt_lang": "\\ud800"}', "tgt_lang")])
def test_a_lone_surrogate_quoted_in_a_refusal_is_sent_escaped(http, path, body, field):
    """A lone surrogate outside a sentence was quoted in the refusal, which UTF-8 cannot encode: a 500."""
    r = http.post(path, content=body)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert "\\ud800" in r.json()["error"] or "\\udfff" in r.json()["error"], r.text


def test_a_number_too_long_to_read_and_a_repeated_field_are_named(http):
    """A number of over 4,300 digits was a ValueError past the JSON parser's errors (500); a field given twice was
    named in the message only."""
    r = http.post("/translate", content=b'{"text": ["a"], "beam_size": ' + b"9" * 5000 + b"}")
    assert r.status_code == 400 and "a number of 5000 digits (at most 4300)" in r.json()["error"], r.text
    r = http.post("/translate", content=b'{"text": ["a"], "text": ["b"]}')
    assert r.status_code == 422 and r.json()["field"] == "text", r.text
    # a key repeated in an object inside a field's value is no field given twice: that object is the fault
    r = http.post("/translate", content='{"text": ["고양이"], "target_prefix": [{"text": 1, "text": 2}]}'.encode())
    assert r.status_code == 422 and r.json()["field"] == "target_prefix[0]", r.text
    assert r.json()["error"].startswith("target_prefix[0]: input should be a valid string (got {"), r.text
    r = http.post("/translate", content=b'{"text": ["a"], "nbest": {"x": 1, "x": 2}, "nbest": 3}')
    assert r.status_code == 422 and r.json()["field"] == "nbest" and "field 'nbest' is given twice" in r.text


def test_a_body_of_a_million_arrays_is_refused_before_it_is_parsed(http):
    """{"text": [[], [], ...]} of 1.3 million empty arrays (3.9 MB, within --max-body-bytes) was parsed and walked
    on the event loop: every other client waited 5 s for its answer (/health too). Brackets in strings are text."""
    r = http.post("/translate", content=b'{"text": [' + b",".join([b"[]"] * 1_300_000) + b"]}")
    assert r.status_code == 422 and r.json()["field"] is None, r.text
    assert r.json()["error"].startswith("the body holds 1,300,002 arrays and objects: a request is an object of a few")
    r = http.post("/translate", json={"text": ["[" * 20_000, "{]"], "beam_size": 1})
    assert r.status_code == 200 and len(r.json()["translations"]) == 2, r.text
    # an unclosed string: read to the end in one pass (its match, failed and retried at every quote of `"\"\...`,
    # took time quadratic in the body: a 150 KB body held the server 106 s), its brackets text; then not JSON
    import re
    from nmt.serve import schema
    seen = []
    real = re.compile(schema._STRING.pattern)

    class Counting:
        def sub(self, repl, text):
            seen.append(sum(1 for _ in real.finditer(text)))
            return real.sub(repl, text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema, "_STRING", Counting())
        r = http.post("/translate", content=b"[" * 10_001 + b'"\\' * 20_000)
        assert r.status_code == 422 and seen == [1], (seen, r.text)   # one match: the rest of the body
        r = http.post("/translate", content=b'{"text": ["abc' + b"[" * 20_000)
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"], r.text


def test_a_body_slower_than_the_time_limit_is_a_408(translator):
    """The time a body took to arrive counted against --timeout, and the 504 then said the server was busy."""
    with background_server(make_app(translator, timeout_s=0.5, max_wait_ms=0)) as url:
        host, port = urlsplit(url).hostname, urlsplit(url).port
        body = b'{"text": ["abc"]}'
        with socket.create_connection((host, port)) as s:
            s.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body[:5])
            time.sleep(0.8)
            s.sendall(body[5:])
            s.settimeout(10)
            answer = s.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 408") and "took longer than the per-request limit of 0.5 s to arrive" in answer


def test_blank_lines_count_toward_neither_the_sentence_limit_nor_the_queue(translator, serve_sentences):
    """Blank lines counted toward --max-sentences (130 paragraphs with blank lines between them: a 413 naming 259
    sentences) and toward --max-queue, though they cost no decoding and come back as empty translations. The sentences
    decoded count: a blank line with a target prefix is one."""
    blanks = ["", "  ", "\u200b", "\x1b[31m", "\u3164"]   # (spaces, invisible, a colour code, a Hangul filler)
    s = serve_sentences
    with background_server(make_app(translator, max_sentences=3, max_queue=3)) as url, \
            httpx.Client(base_url=url, timeout=60) as http:
        r = http.post("/translate", json={"text": [s[0], *blanks, s[1], "", s[2]]})
        assert r.status_code == 200, r.text
        alone = [t["translation"] for t in http.post("/translate", json={"text": s[:3]}).json()["translations"]]
        assert [t["translation"] for t in r.json()["translations"]] == [alone[0], *[""] * 5, alone[1], "", alone[2]]
        r = http.post("/translate", json={"text": [s[0], "", s[1], "", s[2], "", s[3]]})
        assert r.status_code == 413 and r.json() == {
            "error": "text has 4 sentences (not counting 3 blank lines); at most 3 per request: split them into "
                     "several requests (or translate files with nmt-translate)", "field": "text"}, r.text
        r = http.post("/translate", json={"text": [s[0], "", s[1], s[2]], "target_prefix": ["", "The", "", ""]})
        assert r.status_code == 413 and r.json()["error"].startswith("text has 4 sentences; at most 3 "), r.text


def test_blank_lines_are_bounded_too(translator, serve_sentences):
    """With blank lines not counted toward --max-sentences, a 4 MB body of a million empty lines and one sentence was
    taken (25-50 s of the server's work, a 43 MB answer, other requests stalled meanwhile): the lines, blank ones
    included, are at most 4 per sentence of the limit."""
    with background_server(make_app(translator, max_sentences=3, max_queue=3)) as url, \
            httpx.Client(base_url=url, timeout=60) as http:
        assert http.post("/translate", json={"text": [serve_sentences[0], *[""] * 11]}).status_code == 200
        # nor do they count as sentences translated: the model's time per sentence (Retry-After) would shrink
        assert http.get("/health").json()["models"]["ko-en"]["sentences"] == 1
        r = http.post("/translate", json={"text": [serve_sentences[0], *[""] * 12]})
        assert r.status_code == 413 and r.json() == {
            "error": "text has 13 lines; at most 12 per request, blank ones included (of at most 3 sentences, 4 "
                     "lines each): split them into several requests (or translate files with nmt-translate)", "field": "text"}, r.text


def test_a_body_over_the_limit_is_told_what_makes_it_smaller_per_endpoint(translator):
    """/attention's 413 told it to send "fewer or shorter sentences per request", /translate's words: it takes one
    sentence, and what makes its body big is that sentence, the translation given or its pieces."""
    with background_server(make_app(translator, max_body_bytes=1000)) as url, \
            httpx.Client(base_url=url, timeout=60) as http:
        r = http.post("/attention", json={"text": "가", "pieces": ["\u2581a"] * 200})
        assert r.status_code == 413 and r.json() == {
            "error": "the request body is over 1000 bytes: /attention takes one sentence: send a shorter text and "
                     "translation, or fewer pieces (each is cut to the model's input limit anyway)", "field": None}
        r = http.post("/translate", json={"text": ["가"] * 200})
        assert r.status_code == 413 and r.json()["error"] == (
            "the request body is over 1000 bytes: send fewer or shorter sentences per request (long lines are cut to "
            "the model's input limit anyway)")


def test_attention_warns_of_a_text_cut_to_max_input_tokens(http, caplog):
    """/attention cut a text of over max_input_tokens pieces without a word (/translate warns); the server's log
    then said it in nmt-translate's words too ("input line 1 ... (--max-input-tokens)")."""
    with caplog.at_level(logging.INFO, logger="nmt"):
        a = http.post("/attention", json={"text": "\U0001F600" * 300}).json()
    warning = "text has more than 250 subword tokens; truncated to 250 (max_input_tokens), as nmt-translate does"
    assert len(a["src_pieces"]) == 251 and a["warnings"] == [warning]
    said = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert said == [f"POST /attention answered with 1 warning(s): {warning}"], said


def test_spaces_before_a_sentence_do_not_count_against_its_length(http, serve_sentences):
    """4,000 spaces (or zero-width spaces) before a sentence: the character guard cut the line to them alone, so
    /translate answered an empty translation and /attention "text is empty: send one sentence"."""
    for pad in (" ", "\u200b"):
        line = pad * 4000 + serve_sentences[0]
        t = http.post("/translate", json={"text": [line]}).json()
        assert t["translations"][0]["translation"] == http.post(
            "/translate", json={"text": [serve_sentences[0]]}).json()["translations"][0]["translation"] != ""
        assert not any("truncated" in w for w in t["warnings"]), t["warnings"]
        assert http.post("/attention", json={"text": line}).status_code == 200


def test_the_attention_of_an_empty_translation_is_its_end(http, serve_sentences):
    """An empty translation (a model ending at once) had no rows, where any other ends with the row of its "</s>",
    whose probability the search scored: the page drew a table of headers alone."""
    a = http.post("/attention", json={"text": serve_sentences[0], "translation": ""}).json()
    assert a["tgt_pieces"] == ["</s>"] and len(a["weights"]) == 1
    assert abs(sum(a["weights"][0]) - 1) < 1e-4 and len(a["weights"][0]) == len(a["src_pieces"])


def test_a_line_of_control_characters_is_not_counted_as_in_the_other_language(http):
    r = http.post("/translate", json={"text": ["\u0000"]}).json()
    assert r["translations"][0]["translation"] == "" and not any("Hangul" in w for w in r["warnings"]), r


def test_a_client_that_leaves_mid_body_leaves_no_traceback(server, http):
    """It left starlette's ClientDisconnect, with a traceback, at ERROR in uvicorn's log."""
    host, port = urlsplit(server).hostname, urlsplit(server).port
    with server_log() as records:
        with socket.create_connection((host, port)) as s:
            s.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n" + b'{"text": ["abcdefghi')
            time.sleep(0.2)
        deadline = time.monotonic() + 5
        while not any("disconnected" in r.getMessage() for r in records) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)   # anything logged after it
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("INFO", "a client disconnected after sending 20 bytes of its request body")]
    assert http.get("/health").json()["status"] == "ok"


def test_a_long_given_translation_is_cut_to_max_input_tokens_pieces(http, serve_sentences):
    """A translation was cut only to max_input_tokens x 16 characters: 4000 emoji (16,000 byte pieces) held the
    model's only worker for about 40 s, and the request and those behind it got 504."""
    source = serve_sentences[0]
    for translation, characters in (("\U0001F600" * 4000, []), ("Thanks a lot. " * 300, [
            "translation has 4199 characters; truncated to 4000 (max_input_tokens 250 x 16), as nmt-translate does"])):
        t0 = time.monotonic()
        r = http.post("/attention", json={"text": source, "translation": translation})
        assert r.status_code == 200, r.text
        a = r.json()
        assert len(a["tgt_pieces"]) <= 251 and len(a["weights"]) == len(a["tgt_pieces"])   # 250 and </s>
        assert translation.startswith(a["translation"]) and a["translation"]
        cut = [w for w in a["warnings"] if w.startswith("translation has ") and w not in characters]
        assert a["warnings"][:len(characters)] == characters
        assert len(cut) == 1 and f"truncated to its first {len(a['translation'])} characters (at most 250 tokens: " \
                                  "max_input_tokens)" in cut[0], a["warnings"]
        assert time.monotonic() - t0 < 20
    r = http.post("/attention", json={"text": source, "translation": "Thanks a lot."})
    assert r.json()["warnings"] == [] and r.json()["translation"] == "Thanks a lot."


def test_a_given_translation_of_exactly_max_input_tokens_pieces_is_taken_whole(http, translator, serve_sentences):
    """max_input_tokens pieces are within the limit: a translation of that many is taken whole, without a warning;
    one piece more is cut. (A cut from the limit itself took off the last character and said so.)"""
    from nmt.text import normalize
    limit, long = translator.decode.max_input_tokens, "Thanks a lot. " * 150

    def pieces(text: str) -> int:
        return len(translator.tgt_tok.encode([normalize(text)])[0])
    at = next(n for n in range(1, len(long)) if long[n - 1] != " " and pieces(long[:n]) == limit)
    a = http.post("/attention", json={"text": serve_sentences[0], "translation": long[:at]}).json()
    assert a["warnings"] == [] and a["translation"] == long[:at] and len(a["tgt_pieces"]) == limit + 1, a["warnings"]
    over = next(n for n in range(at, len(long)) if long[n - 1] != " " and pieces(long[:n]) == limit + 1)
    a = http.post("/attention", json={"text": serve_sentences[0], "translation": long[:over]}).json()
    assert a["warnings"][0].startswith(f"translation has {limit + 1} subword tokens; truncated"), a["warnings"]


def test_a_504_says_whether_the_request_was_too_big_or_the_server_busy(translator, serve_sentences, monkeypatch):
    """Every 504 said "send fewer sentences or a smaller beam_size", also for /attention, which has neither, and for
    a request that never started because others held the worker."""
    import nmt.plot

    def slow(*args, **kw):
        time.sleep(1.0)
    monkeypatch.setattr(nmt.plot, "attention", slow)
    app = make_app(translator, timeout_s=0.3, max_wait_ms=0)
    with background_server(app) as url, httpx.Client(base_url=url, timeout=30) as c, ThreadPoolExecutor(1) as pool:
        attention = pool.submit(c.post, "/attention", json={"text": serve_sentences[0]})
        time.sleep(0.1)   # the attention call holds the worker for 1 s
        waited = c.post("/translate", json={"text": serve_sentences[:1]})
        slow_one = attention.result()
    assert slow_one.status_code == 504 and slow_one.json()["error"] == (
        "the request took longer than the per-request limit of 0.3 s: send a shorter text or translation, or retry "
        "later")
    assert waited.status_code == 504 and waited.json()["error"] == (
        "the request waited the whole per-request limit of 0.3 s without starting: the server is busy; retry later")


def test_a_long_line_that_only_waited_is_told_the_server_is_busy(translator, serve_sentences, monkeypatch):
    """A line of 63 characters or more is first tokenized on the worker (its cut is warned of), between two steps
    of the running search; that counted as the request's work having started, so a one-line request that then
    waited for room in the search (--max-batch) until its time was up was told to send fewer sentences."""
    from nmt.continuous import ContinuousDecoder
    step = ContinuousDecoder.step

    def slow_step(self):
        time.sleep(0.6)
        return step(self)
    monkeypatch.setattr(ContinuousDecoder, "step", slow_step)
    long = " ".join(serve_sentences)[:80]
    app = make_app(translator, timeout_s=1.0, max_wait_ms=0, max_batch=1)
    with background_server(app) as url, httpx.Client(base_url=url, timeout=30) as c, ThreadPoolExecutor(1) as pool:
        first = pool.submit(c.post, "/translate", json={"text": serve_sentences[:1]})   # holds the one slot
        time.sleep(0.1)
        waited = c.post("/translate", json={"text": [long]})
        first.result()
    assert waited.status_code == 504 and waited.json()["error"] == (
        "the request waited the whole per-request limit of 1.0 s without starting: the server is busy; retry later")


def test_the_time_limit_covers_all_of_a_requests_stages(translator, serve_sentences, monkeypatch):
    """/translate with alignment runs the search, then the alignment, each on the worker: each stage got the whole
    limit, so a request took up to twice --timeout and still got its 200."""
    import nmt.align
    align = nmt.align.align_ids

    def slow_align(*args, **kw):
        time.sleep(1.5)
        return align(*args, **kw)
    monkeypatch.setattr(nmt.align, "align_ids", slow_align)
    slow = copy.copy(translator)                        # the same model, whose search takes 1 s more
    slow.texts = lambda hyps: (time.sleep(1.0 if hyps else 0), translator.texts(hyps))[1]   # as sentences finish
    # each stage within the limit, both over it; the search's own work may take up to 1 s (a loaded machine)
    with background_server(make_app(slow, timeout_s=2.0, max_wait_ms=0)) as url:
        t0 = time.monotonic()
        r = httpx.post(f"{url}/translate", json={"text": serve_sentences[:1], "alignment": True}, timeout=30)
        took = time.monotonic() - t0
    assert r.status_code == 504 and took < 3.0, (r.status_code, took)
    # "a smaller nbest" was the advice at nbest 1 too; the time went on the search (its beam) and the alignment
    assert r.json()["error"] == ("the request took longer than the per-request limit of 2.0 s: send fewer sentences "
                                 "or a smaller beam_size, or no alignment, or retry later")
    with background_server(make_app(translator, timeout_s=1.0, max_wait_ms=0)) as url:   # the alignment: 1.5 s
        two = httpx.post(f"{url}/translate", json={"text": serve_sentences[:1], "alignment": True, "nbest": 2},
                         timeout=30)
    assert two.status_code == 504 and two.json()["error"] == (
        "the request took longer than the per-request limit of 1.0 s: send fewer sentences or a smaller beam_size or "
        "nbest, or no alignment, or retry later")


def test_an_alignment_over_the_time_limit_stops_using_the_model(translator, serve_sentences, monkeypatch):
    """The alignment of all of a request's hypotheses was one call of the worker, which ran to its end after the
    request got its 504 (or its client left), holding up every request behind it."""
    import nmt.align
    align, aligned = nmt.align.align_ids, []

    def slow_align(tr, sources, translations):
        time.sleep(0.15 * len(translations))
        aligned.append(len(translations))
        return align(tr, sources, translations)
    monkeypatch.setattr(nmt.align, "align_ids", slow_align)
    small = copy.copy(translator)
    small.decode = dataclasses.replace(translator.decode, batch_size=2)
    with background_server(make_app(small, timeout_s=0.8, max_wait_ms=0)) as url:
        r = httpx.post(f"{url}/translate", json={"text": serve_sentences[:10], "alignment": True}, timeout=30)
        time.sleep(2.0)   # what the worker does after the 504
    assert r.status_code == 504 and 0 < sum(aligned) < 10 and set(aligned) == {2}, (r.status_code, aligned)


@pytest.mark.parametrize("languages, field", [({"tgt_lang": "fr"}, "tgt_lang"), ({"src_lang": "fr"}, "src_lang"),
                                              ({"src_lang": "fr", "tgt_lang": "en"}, "src_lang"),
                                              ({"src_lang": "ko", "tgt_lang": "ko"}, "tgt_lang")])
def test_a_language_no_model_has_is_named_by_its_field(http, languages, field):
    """A tgt_lang that no model has was reported as field src_lang."""
    r = http.post("/translate", json={"text": ["가"], **languages})
    assert r.status_code == 422 and "no model translates" in r.json()["error"] and r.json()["field"] == field
    r = http.post("/attention", json={"text": "가", **languages})
    assert r.status_code == 422 and r.json()["field"] == field


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_a_compressed_body_is_refused_as_compressed(http, encoding):
    """A gzip body got "the body is not valid UTF-8 (byte 0x8b at offset 1)"."""
    body = gzip.compress(b'{"text": ["\xea\xb0\x80"]}')
    for path in ("/translate", "/attention"):
        r = http.post(path, content=body, headers={"content-type": "application/json", "content-encoding": encoding})
        assert r.status_code == 415 and r.headers["content-type"] == "application/json", r.text
        assert r.json() == {"error": f"the body is compressed (Content-Encoding: {encoding}): compressed request "
                                     "bodies are not accepted; send the JSON uncompressed, without a Content-Encoding "
                                     "header", "field": None}
    assert http.post("/translate", json={"text": ["가"]}, headers={"content-encoding": "identity"}).status_code == 200


def test_404_and_405_are_in_the_documented_shape_and_head_is_answered(http):
    """404 and 405 were Starlette's {"detail": ...}; HEAD /health and HEAD / were 405. /health/ was a redirect to
    the absolute URL of /health, which leaves a reverse proxy's path (/nmt/health/ -> the site's /health)."""
    for path in ("/nope", "/static/swagger/nope.js", "/translate/x", "/health/", "/openapi.json/"):
        r = http.get(path)
        assert r.status_code == 404 and r.json()["field"] is None, r.text
        assert r.json()["error"].startswith(f"not found: {path}; the endpoints are POST /translate, ")
        assert "GET /openapi.json" in r.json()["error"]   # (it was left out)
    r = http.get("/translate")
    assert r.status_code == 405 and r.json() == {"error": "GET is not allowed on /translate: use POST", "field": None}
    assert r.headers["allow"] == "POST"
    r = http.post("/health")
    assert r.status_code == 405 and r.json()["error"] in ("POST is not allowed on /health: use GET, HEAD",
                                                          "POST is not allowed on /health: use HEAD, GET")
    for path in ("/health", "/", "/info", "/docs", "/static/korean.ttf"):
        head, get = http.head(path), http.get(path)
        assert head.status_code == 200 and head.content == b"", path
        assert head.headers["content-type"] == get.headers["content-type"], path
    paths = http.get("/openapi.json").json()["paths"]
    assert set(paths["/health"]) == {"get"} and set(paths["/info"]) == {"get"}
    r = http.post("/static/swagger/swagger-ui.css")   # static files say HEAD themselves: "GET, HEAD, HEAD"
    assert r.status_code == 405 and sorted(r.headers["allow"].split(", ")) == ["GET", "HEAD"], r.headers


def test_an_attention_request_is_shown_an_attention_example(http):
    """/attention's errors showed a /translate body, which /attention then refused too."""
    for body in (b'{"text": ["a"]}', b"{}", b"[1]", b"{nope"):
        r = http.post("/attention", content=body, headers={"content-type": "application/json"})
        assert r.status_code in (400, 422) and r.json()["error"].endswith('e.g. {"text": "안녕하세요"}'), r.text
    r = http.post("/translate", json={"text": "a"})
    assert r.json()["error"].endswith('e.g. {"text": ["안녕하세요"], "beam_size": 4, "nbest": 1}'), r.text


def test_a_head_to_a_path_without_get_is_a_405_naming_head(http):
    """HEAD /translate was answered as a GET (HeadAsGet), so its 405 said "GET is not allowed on /translate"."""
    for path in ("/translate", "/attention"):   # no body (HEAD), but the length of the one a GET would get
        r = http.head(path)
        assert r.status_code == 405 and r.headers["allow"] == "POST" and r.content == b"", path
        body = f'{{"error":"HEAD is not allowed on {path}: use POST","field":null}}'
        assert r.headers["content-length"] == str(len(body)), path
    r = http.get("/translate")   # a GET's 405 still says GET, and a HEAD of a GET path is still answered
    assert r.status_code == 405 and r.json()["error"] == "GET is not allowed on /translate: use POST"
    assert http.head("/health").status_code == 200


def test_the_openapi_document_lists_the_error_answers(http):
    """/openapi.json listed only the 200 answer of each path, so a client generator knew none of the refusals."""
    doc = http.get("/openapi.json").json()
    error = doc["components"]["schemas"]["ErrorBody"]
    assert set(error["properties"]) == {"error", "field"} and set(error["required"]) == {"error", "field"}
    ref = {"$ref": "#/components/schemas/ErrorBody"}
    for path, statuses in (("/translate", {400, 408, 413, 415, 422, 500, 503, 504}),
                           ("/attention", {400, 408, 413, 415, 422, 500, 503, 504}), ("/info", {500})):
        answers = doc["paths"][path]["post" if path != "/info" else "get"]["responses"]
        assert set(answers) == {"200"} | {str(s) for s in statuses}, path
        for s in statuses:
            assert answers[str(s)]["content"]["application/json"]["schema"] == ref and answers[str(s)]["description"]
        if 503 in statuses:   # (no client reaches a server that is shutting down: uvicorn refuses connections)
            assert "Retry-After" in answers["503"]["headers"] and "shutting" not in answers["503"]["description"]
    health = doc["paths"]["/health"]["get"]["responses"]
    assert set(health) == {"200", "500"}   # (a stopping server takes no connection: no 503 reaches a client)


def test_a_failure_in_the_worker_is_a_json_500_without_the_traceback(translator, serve_sentences):
    """A worker exception was a 500 text/plain "Internal Server Error"; the answer is now JSON, and the traceback is
    in the server's log only."""
    class Broken:
        def continuous(self, *args):
            raise RuntimeError("the model broke at /secret/path")
    app = make_app(translator, max_wait_ms=0)
    app.state.service.models["ko-en"].batcher.translator = Broken()
    with background_server(app) as url, server_log() as records:
        r = httpx.post(url + "/translate", json={"text": serve_sentences[:1]}, timeout=30)
        health = httpx.get(url + "/health", timeout=30)
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    assert r.json() == {"error": "the server failed while answering this request (its log has the details); retry, "
                                 "and report it if it persists", "field": None}
    assert "secret" not in r.text and "Traceback" not in r.text
    assert any(r.exc_info and "the model broke at /secret/path" in str(r.exc_info[1]) for r in records), \
        [x.getMessage() for x in records]
    assert "POST /translate failed with RuntimeError (traceback below)" in [x.getMessage() for x in records]
    assert health.status_code == 200


def test_a_request_of_another_beam_size_is_served_under_steady_traffic(translator, serve_sentences):
    """Under steady traffic at the default settings, a request with another beam_size or nbest was held until the
    running search emptied, which it never did: 504 after the whole time limit."""
    import threading
    app = make_app(translator, timeout_s=10)
    stop, answers = threading.Event(), []
    with background_server(app) as url, httpx.Client(base_url=url, timeout=30) as c, ThreadPoolExecutor(8) as pool:
        def client(k: int) -> None:   # closed loop: a new request as soon as the last is answered
            while not stop.is_set():
                answers.append(c.post("/translate", json={"text": serve_sentences[k:k + 1 + k % 4]}).status_code)
        clients = [pool.submit(client, k) for k in range(8)]
        time.sleep(1.0)
        t0 = time.monotonic()
        other = [c.post("/translate", json={"text": serve_sentences[:1], "beam_size": 2, "nbest": 2}),
                 c.post("/translate", json={"text": serve_sentences[:1], "beam_size": 3, "nbest": 1})]
        waited = time.monotonic() - t0
        stop.set()
        for f in clients:
            f.result()
    assert [r.status_code for r in other] == [200, 200], [r.text for r in other]
    assert waited < 5, f"two requests of other keys took {waited:.1f} s under load"
    assert set(answers) == {200}


def test_the_openapi_document_is_openapi_3_0_throughout(http):
    """It said 3.0.3 over FastAPI's 3.1 schemas: Swagger UI 4 ignored the examples (its "Try it out" sent
    {"text": ["string"], "beam_size": 0, ...}, refused), and 3.0 tools have no {"type": "null"}."""
    from nmt.serve.openapi import openapi_30
    doc = http.get("/openapi.json").json()
    text = json.dumps(doc)
    assert doc["openapi"] == "3.0.3" and '"type": "null"' not in text and '"anyOf"' not in text, text[:500]
    body = {p: doc["paths"][p]["post"]["requestBody"]["content"]["application/json"]["schema"]
            for p in ("/translate", "/attention")}
    assert body["/translate"]["example"] == {"text": ["안녕하세요"], "beam_size": 4, "nbest": 1}
    assert body["/attention"]["example"] == {"text": "안녕하세요"} and "examples" not in body["/translate"]
    assert body["/translate"]["properties"]["beam_size"]["nullable"] is True
    prefix = body["/translate"]["properties"]["target_prefix"]
    assert prefix["type"] == "array" and prefix["nullable"] and prefix["items"] == {"type": "string", "nullable": True}
    two = {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}], "examples": [1]}
    assert openapi_30({"x": two})["x"] == {"anyOf": [{"type": "integer"}, {"type": "string"}], "nullable": True,
                                            "example": 1}
