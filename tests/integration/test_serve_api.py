"""The service over real HTTP (uvicorn on a loopback port, in this process) and a tiny trained model: answers equal
the offline Translator's, concurrent requests share batches, the queue and time limits answer 503/504, every kind
of hostile input gets a 4xx saying what to change (or the CLI's cut with a warning), and the server stays up."""
from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import resource
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.integration.serve_app import background_server, make_app, wait_until
from tests.synth import non_canonical_split


@pytest.fixture(scope="module")
def server(translator):
    """(base URL, app) of one server for the module's tests."""
    app = make_app(translator, max_wait_ms=20)
    with background_server(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server[0], timeout=60) as c:
        yield c


def test_translate_equals_offline_translator_in_input_order(http, translator, serve_sentences):
    lines = serve_sentences[:6] + [""]
    r = http.post("/translate", json={"text": lines, "beam_size": 4, "nbest": 3})
    assert r.status_code == 200, r.text
    offline = translator.translate_nbest(lines, 3, beam_size=4)
    got = r.json()["translations"]
    assert [[h["translation"] for h in t["nbest"]] for t in got] == [[x for x, _ in h] for h in offline]
    assert [t["translation"] for t in got] == translator.translate(lines, beam_size=4)
    assert got[0]["score"] == pytest.approx(offline[0][0][1], abs=1e-4)
    assert got[-1] == {"translation": "", "score": None, "nbest": []}
    assert r.json()["warnings"] == [] and r.json()["src_lang"] == "ko"


def test_alignment_is_the_translators_for_every_hypothesis(http, translator, serve_sentences):
    """Of the pieces the search wrote, as nmt-translate --alignment aligns them: the service re-tokenized the text,
    which differs where the search wrote a word in pieces SentencePiece would not choose."""
    lines = serve_sentences + [""]
    r = http.post("/translate", json={"text": lines, "beam_size": 6, "nbest": 6, "alignment": True})
    assert r.status_code == 200, r.text
    offline = translator.translate_aligned(lines, nbest=6, beam_size=6)
    got = r.json()["translations"]
    assert [[h["alignment"] for h in t["nbest"]] for t in got] == [[[list(x) for x in h[2]] for h in o]
                                                                   for o in offline]
    assert [t["alignment"] for t in got[:-1]] == [t["nbest"][0]["alignment"] for t in got[:-1]]
    assert got[-1] == {"translation": "", "score": None, "alignment": [], "nbest": []}
    assert "alignment" not in http.post("/translate", json={"text": lines[:1]}).json()["translations"][0]
    r = http.post("/translate", json={"text": lines[:1], "alignment": "yes"})
    assert r.status_code == 422 and "alignment" in r.json()["error"]


def test_concurrent_clients_are_batched_together(server, http, translator, serve_sentences):
    batcher = server[1].state.service.models["ko-en"].batcher
    before = batcher.batches
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda s: http.post("/translate", json={"text": [s]}), serve_sentences[:32]))
    assert [a.status_code for a in answers] == [200] * 32, [a.text for a in answers if a.status_code != 200]
    served = [a.json()["translations"][0] for a in answers]
    offline = translator.translate_nbest(serve_sentences[:32], 1)
    differ = [(i, s, o) for i, (s, o) in enumerate(zip(served, offline)) if s["translation"] != o[0][0]]
    assert not differ, f"served != offline (sentence, served, offline best): {differ}"
    assert batcher.batches - before < 32, "no two requests shared a batch"


def test_health_info_and_offline_docs(http):
    assert http.get("/health").json()["status"] == "ok"
    model = http.get("/info").json()["models"][0]
    assert (model["src_lang"], model["tgt_lang"], model["arch"]) == ("ko", "en", "lstm")
    score = model["best_test_score"]
    assert score["bleu"] > 50 and score["bleu_signature"].startswith("nrefs:1|") and score["test_set"] == "test"
    assert (score["beam_size"], score["length_penalty"]) == (model["beam_size"], model["length_penalty"]) == (4, 0.6)
    assert (model["max_len_a"], model["max_len_b"], model["max_input_tokens"]) == (1.5, 10, 250)
    assert "/translate" in http.get("/openapi.json").json()["paths"]
    docs = http.get("/docs").text
    assert '"static/swagger/swagger-ui-bundle.js' in docs and "cdn" not in docs.lower()   # relative, from here
    assert http.get("/static/swagger/swagger-ui-bundle.js").status_code == 200
    page = http.get("/").text
    assert "http://" not in page and "https://" not in page, "the page must load nothing from the internet"
    assert http.get("/static/korean.ttf").headers["content-type"] == "font/ttf"


def test_the_answers_are_those_the_openapi_document_describes(http, serve_sentences):
    """Each 200 answer was {"type": "object", "additionalProperties": true} in /openapi.json (/health: {}), so a
    client generated from it knew none of the fields serving.md documents. The real answers fit the models exactly
    (no field missing, none unknown)."""
    from nmt.serve.responses import AttentionAnswer, HealthAnswer, InfoAnswer, TranslateAnswer
    lines = serve_sentences[:2] + [""]
    for body in ({"text": lines, "beam_size": 3, "nbest": 2, "alignment": True}, {"text": lines}):
        TranslateAnswer.model_validate(http.post("/translate", json=body).json())
    AttentionAnswer.model_validate(http.post("/attention", json={"text": lines[0]}).json())
    HealthAnswer.model_validate(http.get("/health").json())
    InfoAnswer.model_validate(http.get("/info").json())
    doc = http.get("/openapi.json").json()
    for path, method, model in (("/translate", "post", "TranslateAnswer"), ("/attention", "post", "AttentionAnswer"),
                                ("/health", "get", "HealthAnswer"), ("/info", "get", "InfoAnswer")):
        answer = doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer == {"$ref": f"#/components/schemas/{model}"}, (path, answer)
    fields = doc["components"]["schemas"]["Translation"]["properties"]
    assert {"translation", "score", "nbest", "alignment"} <= set(fields) and doc["openapi"] == "3.0.3"
    assert "anyOf" not in json.dumps(doc["components"]["schemas"]["Translation"])   # 3.0: nullable, not 3.1's null
    score = doc["components"]["schemas"]["ModelInfo"]["properties"]["best_test_score"]   # null when none recorded:
    assert score["allOf"] == [{"$ref": "#/components/schemas/TestScore"}] and score["nullable"] is True   # (3.0
    refs = []   # ignores what stands beside a $ref; it said "not nullable")

    def visit(node):
        if isinstance(node, dict):
            refs.extend([node] if "$ref" in node else [])
            [visit(v) for v in node.values()]
        elif isinstance(node, list):
            [visit(v) for v in node]
    visit(doc)
    assert refs and all(len(r) == 1 for r in refs), [r for r in refs if len(r) > 1]


def test_attention_of_the_greedy_translation(http, translator, serve_sentences):
    a = http.post("/attention", json={"text": serve_sentences[0]}).json()
    assert a["translation"] == translator.translate([serve_sentences[0]], beam_size=1)[0]
    [(_, _, links)] = translator.translate_aligned([serve_sentences[0]], beam_size=1)[0]
    assert a["alignment"] == [list(x) for x in links] and links
    assert len(a["weights"]) == len(a["tgt_pieces"]) and len(a["weights"][0]) == len(a["src_pieces"])
    assert all(abs(sum(row) - 1) < 0.01 for row in a["weights"])
    assert http.post("/attention", json={"text": "  "}).status_code == 422
    for sep in ("\n", "\u2028", "\x1e"):   # "\n", and str.splitlines' other boundaries with it
        r = http.post("/attention", json={"text": f"리 니{sep}차"})
        assert r.status_code == 422 and "text has text on 2 lines" in r.json()["error"], sep


def test_attention_of_a_given_translation_is_its_forced_attention(http, translator, serve_sentences):
    """The page shows the heatmap of the translation it shows (the beam's best), not of the greedy one."""
    import numpy as np
    from nmt.align import forced_attention
    source = serve_sentences[1]
    best, other = (t for t, _ in translator.translate_nbest([source], 2, beam_size=4)[0])
    for translation in (best, other):
        a = http.post("/attention", json={"text": source, "translation": translation}).json()
        pieces = translator.tgt_tok.pieces(translation)
        assert a["translation"] == translation and a["tgt_pieces"] == pieces + ["</s>"]   # as SentencePiece writes them
        src_ids = translator.source_ids([source])
        want = forced_attention(translator, src_ids, translator.tgt_tok.encode([translation]))[0]
        np.testing.assert_allclose(a["weights"], want, atol=1e-4)
        assert all(abs(sum(row) - 1) < 0.01 for row in a["weights"]) and a["warnings"] == []
    # the translation is answered as read, the text its pieces are of (it came back as sent, the bell too)
    a = http.post("/attention", json={"text": source, "translation": f"  {best[:3]}\x07{best[3:]}\u3000"}).json()
    assert a["translation"] == best and a["tgt_pieces"] == translator.tgt_tok.pieces(best) + ["</s>"], a
    # escape sequences were warned of as "removed before translating": neither text nor translation is translated
    a = http.post("/attention", json={"text": f"\x1b[1m{source}", "translation": f"\x1b[31m{best}\x1b[0m"}).json()
    assert a["translation"] == best and a["warnings"] == [
        "text has 1 terminal escape sequence(s) (colours, cursor keys: ESC[31m ...); they were removed before "
        "feeding it through the model", "translation has 2 terminal escape sequence(s) (colours, cursor keys: "
        "ESC[31m ...); they were removed before feeding it through the model (the answer's translation is without "
        "them)"], a
    a = http.post("/attention", json={"text": f"\x1b[1m{source}"}).json()   # (its greedy translation: translated)
    assert a["warnings"] == ["text has 1 terminal escape sequence(s) (colours, cursor keys: ESC[31m ...); they were "
                             "removed before translating"], a
    for sep in ("\n", "\u2029", "\x0c"):
        r = http.post("/attention", json={"text": source, "translation": f"a{sep}b"})
        assert r.status_code == 422 and "translation has text on 2 lines" in r.json()["error"], sep


def test_pieces_are_the_searchs_and_attention_takes_them_back(http, translator, serve_sentences):
    """The page's heatmap split the translation's text again: where the search wrote a word in pieces SentencePiece
    would not choose, its rows were other pieces. /translate gives each hypothesis' pieces; /attention takes them."""
    import numpy as np
    from nmt.align import forced_attention
    from nmt.serve.responses import AttentionAnswer, TranslateAnswer
    lines = serve_sentences[:4] + [""]
    r = http.post("/translate", json={"text": lines, "beam_size": 3, "nbest": 3, "pieces": True, "alignment": True})
    got = TranslateAnswer.model_validate(r.json()).translations
    hyps = translator.translate_ids(lines, beam_size=3, nbest=3)
    want = [[[translator.tgt_tok.piece(t) for t in ids] for ids, _ in h] for h in hyps]
    assert [[h.pieces for h in t.nbest] for t in got] == want
    assert [t.pieces for t in got] == [w[0] for w in want[:4]] + [[]]
    for line, t in zip(lines[:4], got):   # /attention's word alignment of a hypothesis' pieces: /translate's (the
        for h in t.nbest:                  # page asks /attention for the line it shows, not /translate for all)
            a = http.post("/attention", json={"text": line, "pieces": h.pieces}).json()
            assert a["alignment"] == h.alignment and h.alignment, (line, h)
    assert "pieces" not in http.post("/translate", json={"text": lines[:1]}).json()["translations"][0]
    pieces, text = non_canonical_split(translator.tgt_tok)
    a = http.post("/attention", json={"text": lines[0], "pieces": pieces}).json()
    assert AttentionAnswer.model_validate(a).tgt_pieces == pieces + ["</s>"] and a["translation"] == text
    np.testing.assert_allclose(a["weights"], forced_attention(translator, translator.source_ids(lines[:1]),
                                                              [translator.tgt_tok.piece_ids(pieces)])[0], atol=1e-4)
    assert a["warnings"] == []
    limit = translator.decode.max_input_tokens
    a = http.post("/attention", json={"text": lines[0], "pieces": pieces * limit}).json()
    assert len(a["tgt_pieces"]) == limit + 1 and a["warnings"] == [
        f"pieces has {2 * limit} items; truncated to its first {limit} (max_input_tokens), as nmt-translate cuts "
        "input lines"]
    # the field at fault: an item as pydantic names one (pieces[1]; a piece not in the vocabulary was "pieces")
    for body, message, field in (({"pieces": pieces, "translation": text}, "translation and pieces are both given",
                                  "pieces"),
                                 ({"pieces": ["zzz"]}, "pieces[0] 'zzz' is not a piece of the en vocabulary",
                                  "pieces[0]"),
                                 ({"pieces": [pieces[0], "</s>", pieces[1]]}, "pieces[1] is the end of sentence "
                                                                              "'</s>' before the last piece",
                                  "pieces[1]"),
                                 ({"pieces": [pieces[0], 3]}, "pieces[1]: input should be a valid string",
                                  "pieces[1]"),
                                 ({"pieces": "\u2581a"}, "pieces", "pieces")):
        r = http.post("/attention", json={"text": lines[0], **body})
        assert r.status_code == 422 and message in r.json()["error"] and r.json()["field"] == field, r.text


def test_attention_maps_given_pieces_to_ids_once(http, translator, serve_sentences, monkeypatch):
    """/attention checked the pieces given with `Tokenizer.piece_ids`, then `nmt.plot.attention` mapped them again:
    they are mapped once, and a piece the vocabulary lacks is still refused as the field's (422, field pieces[i])."""
    names, piece_ids = [], translator.tgt_tok.piece_ids
    monkeypatch.setattr(translator.tgt_tok, "piece_ids", lambda pieces, name="pieces": (
        names.append(name) or piece_ids(pieces, name)))
    source, (pieces, _) = serve_sentences[0], non_canonical_split(translator.tgt_tok)
    assert http.post("/attention", json={"text": source, "pieces": pieces}).status_code == 200 and len(names) == 1
    r = http.post("/attention", json={"text": source, "pieces": pieces + ["zzz"]})
    assert r.status_code == 422 and r.json() == {
        "error": f"pieces[{len(pieces)}] 'zzz' is not a piece of the en vocabulary: give the pieces as a search wrote "
                 "them", "field": f"pieces[{len(pieces)}]"} and len(names) == 2


def test_attention_says_the_pieces_its_translation_drops(http, translator, serve_sentences):
    """<s> and <pad> in /attention's pieces were taken without a word: the answer's translation dropped them (a
    translation's text leaves them out). Then they were refused, but a search that sampled over the whole vocabulary
    wrote them (nmt-translate --sample 0 --plot-attention stopped at one), and a caller may give them: they are
    taken, rows of the heatmap, and a warning counts them. An end of sentence last, as /attention's own tgt_pieces
    end (and nmt-score's pieces), is the row of the end, which comes last anyway: it was refused, and with
    max_input_tokens pieces before it, cut with a warning. <unk>, which a search may write, shows as " ⁇ "."""
    source = serve_sentences[0]
    pieces, text = non_canonical_split(translator.tgt_tok)
    for given in (pieces + ["<s>"], ["<pad>"] + pieces + ["<s>", "</s>"]):
        r = http.post("/attention", json={"text": source, "pieces": given})
        n = len(given) - len(pieces) - (given[-1] == "</s>")
        assert r.status_code == 200 and r.json()["translation"] == text and r.json()["warnings"] == [
            f"pieces: {n} start of sentence or padding piece(s) (<s>, <pad>) left out of the translation: its text "
            "drops them (their rows are steps of the model)"] and r.json()["tgt_pieces"][:len(given)] == given, r.text
    a = http.post("/attention", json={"text": source, "pieces": pieces}).json()
    assert a["tgt_pieces"] == pieces + ["</s>"] and a["translation"] == text
    for given in (pieces + ["</s>"], a["tgt_pieces"]):   # an answer's pieces, sent back: the same answer
        assert http.post("/attention", json={"text": source, "pieces": given}).json() == a
    limit = translator.decode.max_input_tokens
    full = pieces * (limit // len(pieces))
    a = http.post("/attention", json={"text": source, "pieces": full + ["</s>"]}).json()
    assert a["warnings"] == [] and a["tgt_pieces"] == full + ["</s>"], a["warnings"]
    a = http.post("/attention", json={"text": source, "pieces": pieces + ["<unk>"]}).json()
    assert a["tgt_pieces"] == pieces + ["<unk>", "</s>"] and a["translation"] == f"{text} \u2047", a


HOSTILE = {   # name: (body, expected status, words the error must contain)
    "invalid JSON": (b'{"text": ["a"', 400, "not valid JSON"),
    "invalid UTF-8": (b'{"text": ["\xff"]}', 400, "not valid UTF-8"),
    "not an object": (b'"hello"', 422, "JSON object"),
    "text not a list": (b'{"text": "hello"}', 422, "valid list"),
    "number in text": (b'{"text": [1, 2]}', 422, "text[0]"),
    "beam as string": (b'{"text": ["a"], "beam_size": "4"}', 422, "valid integer"),
    "empty text": (b'{"text": []}', 422, "text is empty"),
    "10,000 sentences": (json.dumps({"text": ["가"] * 10_000}).encode(), 413, "at most 256"),
    "lone surrogate": (b'{"text": ["\\udc80 x"]}', 422, "lone surrogate U+DC80"),
    "two lines in one": (b'{"text": ["a", "b\\nc"]}', 422, "text[1] has text on 2 lines"),
    "U+2028 in one": (b'{"text": ["a", "b\\u2028c"]}', 422, "text[1] has text on 2 lines"),
    "FS in one": (b'{"text": ["b\\u001cc\\u0085d"]}', 422, "text[0] has text on 3 lines"),
    "unknown field": (b'{"text": ["a"], "beem_size": 4}', 422, "unknown field 'beem_size'"),
    "surrogate field": (b'{"text": ["a"], "\\ud800": 1}', 422, "unknown field '\\ud800' (a lone surrogate, U+D800 "
                                                         "at character 0): remove it (the fields are text, beam_size"),
    "huge beam_size": (b'{"text": ["a"], "beam_size": 1000000000}', 422, "between 1 and 16"),
    "nbest over beam": (b'{"text": ["a"], "beam_size": 2, "nbest": 5}', 422, "raise beam_size"),
    "body too big": (json.dumps({"text": ["a" * (5 << 20)]}).encode(), 413, "over 4194304 bytes"),
    "unknown language": (b'{"text": ["a"], "tgt_lang": "fr"}', 422, "no model translates"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_input_gets_a_4xx_that_says_what_to_change(http, name):
    body, status, words = HOSTILE[name]
    r = http.post("/translate", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert words in r.json()["error"]
    assert http.get("/health").json()["status"] == "ok"


def test_one_megabyte_line_is_cut_like_the_cli_with_a_warning(http):
    line = "가나 다라 " * ((1 << 20) // 14)   # 1 MB of UTF-8
    r = http.post("/translate", json={"text": [line, "가"]})
    assert r.status_code == 200
    assert "truncated to 4000 (max_input_tokens 250 x 16)" in r.json()["warnings"][0]
    assert r.json()["translations"][1]["translation"]


def test_line_over_the_token_limit_is_cut_with_a_warning(http, translator, serve_sentences, caplog):
    """... once in the answer, and once in the server's log, as the answer words it: the warnings' check and the
    alignment tokenize the line again (each said so in the log as well), and the log said "input line 2 ...
    (--max-input-tokens)", nmt-translate's words, for the answer's text[1] and max_input_tokens."""
    words = (" ".join(serve_sentences) + " ") * 10   # under the character guard, over 250 subword tokens
    assert len(words) < 4000
    with caplog.at_level(logging.INFO, logger="nmt"):
        r = http.post("/translate", json={"text": [serve_sentences[0], words], "alignment": True}).json()
    warning = "text[1] has more than 250 subword tokens; truncated to 250 (max_input_tokens), as nmt-translate does"
    assert r["warnings"] == [warning]
    assert r["translations"][1]["translation"] and r["translations"][1]["alignment"]
    said = [x.getMessage() for x in caplog.records if "truncated" in x.getMessage()]
    assert said == [f"POST /translate answered with 1 warning(s): {warning}"], said


def test_translations_at_the_length_limit_are_named_in_the_warnings(translator, serve_sentences):
    lines = serve_sentences[:8]
    free = [len(h[0][0]) for h in translator.translate_ids(lines, beam_size=4)]
    b = sorted(free)[len(free) // 2]                    # some lines are longer, some shorter
    short = copy.copy(translator)                       # the same model with a shorter length limit
    short.decode = dataclasses.replace(translator.decode, max_len_a=0.0, max_len_b=b)
    at_limit = [i for i, h in enumerate(short.translate_ids(lines, beam_size=4)) if len(h[0][0]) == b]
    assert 0 < len(at_limit) < len(lines)
    with background_server(make_app(short)) as url:
        r = httpx.post(f"{url}/translate", json={"text": lines, "beam_size": 4}, timeout=60).json()
        # /attention's greedy translation too ("warnings": [] with its </s> missing)
        greedy = [len(h[0][0]) == b for h in short.translate_ids(lines, beam_size=1)]
        att = [httpx.post(f"{url}/attention", json={"text": line}, timeout=60).json() for line in lines]
    assert r["warnings"] == [f"text[{i}]: the translation reached the model's length limit (max_len_a 0 x source "
                             f"tokens + max_len_b {b}) and may be cut off" for i in at_limit]
    assert any(greedy) and [bool(a["warnings"]) for a in att] == greedy
    assert all(a["warnings"] == ["the translation reached the model's length limit (max_len_a 0 x source tokens + "
                                 f"max_len_b {b}) and may be cut off"] for a, cut in zip(att, greedy) if cut)
    assert all((a["tgt_pieces"][-1] == "</s>") != cut for a, cut in zip(att, greedy))


def test_empty_lines_and_control_characters_are_translated_with_warnings(http, translator):
    r = http.post("/translate", json={"text": ["", "  ", "가\x00나\x1b 다"]}).json()
    assert [t["translation"] for t in r["translations"]] == ["", "", translator.translate(["가나 다"])[0]]
    assert r["warnings"] == ["text[2] has 2 control character(s); they were removed before translating"]
    r = http.post("/translate", json={"text": ["Thank you.", "", "Fine.", "가 나"]}).json()   # mostly English
    assert r["warnings"] == ["text: 1 of 3 non-empty lines have Hangul, but the model translates ko -> en: is the "
                             "input in the model's source language (or is this the model of the other direction)?"]
    assert r["translations"][0]["translation"] == translator.translate("Thank you.")   # translated all the same


def test_byte_pieces_left_out_of_a_translation_are_warned_of(http, translator, monkeypatch):
    """A beam search may write byte pieces that form no character too (7 of 2,400 beam-5 translations of a 6-minute
    en->ko model): the text leaves them out, and the answer now says so per sentence, as nmt-translate warns. (Here
    the tokenizer takes every translation's last piece for such a byte.)"""
    tok = translator.tgt_tok
    whole = tok.whole_characters
    monkeypatch.setattr(tok, "whole_characters", lambda ids: whole(ids)[:-1])
    r = http.post("/translate", json={"text": ["", "가 나"], "nbest": 2, "beam_size": 2}).json()
    assert r["warnings"] == ["text[1]: 2 byte piece(s) left out of the translation(s): UTF-8 bytes that form no whole "
                             "character (SentencePiece would write U+FFFD for each) or a control character or line "
                             "separator (a terminal would act on it)"]


def test_attention_warns_of_byte_pieces_left_out_of_its_translation(http, translator, serve_sentences, monkeypatch):
    """/attention's translation left out byte pieces that form no character, or a control character's, without the
    warning /translate gives: of the pieces given (a lone lead byte, then ESC), and of its greedy translation (here
    the tokenizer takes its last piece for such a byte, as in the test above), worded as /translate's."""
    from nmt.translate import Translator
    pieces, text = non_canonical_split(translator.tgt_tok)
    a = http.post("/attention", json={"text": serve_sentences[0], "pieces": pieces + ["<0xE3>", "<0x1B>"]}).json()
    assert a["translation"] == text and a["tgt_pieces"] == pieces + ["<0xE3>", "<0x1B>", "</s>"], a
    assert a["warnings"] == [f"pieces: 2 {Translator.LEFT_OUT}"], a["warnings"]
    a = http.post("/attention", json={"text": serve_sentences[0], "pieces": pieces}).json()
    assert a["warnings"] == [], a["warnings"]
    tok = translator.tgt_tok
    whole = tok.whole_characters
    monkeypatch.setattr(tok, "whole_characters", lambda ids: whole(ids)[:-1])
    t = http.post("/translate", json={"text": [serve_sentences[0]], "beam_size": 1}).json()
    a = http.post("/attention", json={"text": serve_sentences[0]}).json()
    assert t["warnings"] == [f"text[0]: 1 {Translator.LEFT_OUT}"], t["warnings"]
    assert a["warnings"] == [f"text: 1 {Translator.LEFT_OUT}"] and a["translation"] == t["translations"][0][
        "translation"], a


def test_memory_stays_bounded_under_big_bodies(http):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(10):
        assert http.post("/translate", content=b'{"text": ["' + b"x" * (6 << 20) + b'"]}').status_code == 413
        assert http.post("/translate", json={"text": ["가" * 300_000] * 3}).status_code == 200
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
    assert grown_mb < 200, f"peak memory grew {grown_mb:.0f} MB"


def test_two_million_wrong_items_cost_no_more_than_a_few(http):
    """A 4 MB body of 2,000,000 numbers in "text" made pydantic's error list (the dicts of 2 million errors, of
    which the answer names 5): 13 s on the event loop, every other request held up, and 2 GB more memory."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    body = b'{"text": [' + b",".join([b"1"] * 2_000_000) + b"]}"
    r = http.post("/translate", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"].startswith("text[0]: input should be a valid string") and \
        r.json()["error"].count("text[") == 5, r.text
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
    assert grown_mb < 500, f"peak memory grew {grown_mb:.0f} MB"


def test_query_parameters_are_refused_and_echoes_are_short(http):
    """?beam_size=1&nbest=3 in the URL was ignored without a word (the model's beam 5, one hypothesis); a 4 MB
    src_lang or unknown field name came back whole in the 422 (a field's name twice: 8 MB)."""
    r = http.post("/translate?beam_size=1&nbest=3", json={"text": ["가"]})
    assert r.status_code == 422 and r.json()["error"].startswith("query parameters (beam_size, nbest) are not read: "
                                                                 "give every field in the JSON body, e.g. {"), r.text
    for body in ({"text": ["가"], "src_lang": "x" * 1_000_000}, {"text": ["가"], "y" * 1_000_000: 1}):
        r = http.post("/translate", json=body)
        assert r.status_code == 422 and len(r.content) < 1000, r.content[:200]
    twice = b'{"text": ["a"], "' + b"z" * 1_000_000 + b'": 1, "' + b"z" * 1_000_000 + b'": 2}'   # (its name, twice)
    r = http.post("/translate", content=twice, headers={"content-type": "application/json"})
    assert r.status_code == 422 and "is given twice" in r.json()["error"] and len(r.content) < 1000


def test_many_unknown_fields_are_refused_at_once(http):
    """Each unknown key was one pydantic error: 450,000 of them in a 4 MB body took 6 s to answer, and a /health
    sent meanwhile 5 s; the first is named, with a count of the others."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    body = json.dumps({"text": ["a"], **{f"k{i}": 0 for i in range(300_000)}}).encode()
    r = http.post("/translate", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"] == (
        "unknown field 'k0': remove it (the fields are text, beam_size, nbest, target_prefix, alignment, pieces, "
        "src_lang, tgt_lang); 299999 more unknown fields") and r.json()["field"] == "k0"
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
    assert grown_mb < 150, f"peak memory grew {grown_mb:.0f} MB"


def test_full_queue_answers_503_with_retry_after(translator, serve_sentences):
    app = make_app(translator, max_queue=4, max_wait_ms=400, max_batch=64)
    with background_server(app) as url, httpx.Client(base_url=url, timeout=30) as c, ThreadPoolExecutor(1) as pool:
        first = pool.submit(c.post, "/translate", json={"text": serve_sentences[:4]})
        while app.state.service.models["ko-en"].batcher.queued < 4:
            pass
        r = c.post("/translate", json={"text": serve_sentences[4:5]})
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1 and "queue is full" in r.json()["error"]
        assert first.result().status_code == 200


def test_a_blank_only_request_is_answered_at_once_while_the_queue_is_full(translator, serve_sentences):
    """A request of blank lines alone (nothing to decode) was queued to the worker as 0 sentences: it waited behind
    the requests before it (here a whole search of another beam_size, after its --max-wait-ms), and could get a 504.
    It is answered at once, with the same JSON as before, and the worker counts no batch, step or sentence of it."""
    app = make_app(translator, max_queue=4, max_wait_ms=3000, max_batch=64)
    batcher = app.state.service.models["ko-en"].batcher
    blank = {"text": ["", "  ", "\u200b", ""], "target_prefix": [None, "", None, " "], "beam_size": 2,
             "alignment": True, "pieces": True}
    with background_server(app) as url, httpx.Client(base_url=url, timeout=30) as c, ThreadPoolExecutor(1) as pool:
        first = pool.submit(c.post, "/translate", json={"text": serve_sentences[:4]})
        wait_until(lambda: batcher.queued == 4, 30, "the first request in the queue")
        counts = (batcher.batches, batcher.steps, batcher.sentences)
        r = c.post("/translate", json=blank)
        assert r.status_code == 200 and r.json() == {
            "src_lang": "ko", "tgt_lang": "en", "beam_size": 2, "warnings": [],
            "translations": [{"translation": "", "score": None, "alignment": [], "pieces": [], "nbest": []}] * 4}
        assert not first.done() and batcher.queued == 4   # (the first still waits for others to start with it)
        assert (batcher.batches, batcher.steps, batcher.sentences) == counts
        assert first.result().status_code == 200 and batcher.sentences == counts[2] + 4


def test_long_blank_lines_alone_are_answered_at_once_while_the_queue_is_full(translator, serve_sentences):
    """A blank line of many spaces or invisible characters (as long as 250 pieces' worth of characters) was taken for
    a line the tokenizer might cut: the request queued a call to the worker to find the cut of what the model reads as
    nothing, and with a full queue got a 503 (queue full) instead of its empty translations."""
    app = make_app(translator, max_queue=4, max_wait_ms=3000, max_batch=64)
    batcher = app.state.service.models["ko-en"].batcher
    blank = {"text": [" " * 300, "\u200b" * 100], "target_prefix": [None, "\u2060" * 100]}
    with background_server(app) as url, httpx.Client(base_url=url, timeout=30) as c, ThreadPoolExecutor(1) as pool:
        first = pool.submit(c.post, "/translate", json={"text": serve_sentences[:4]})
        wait_until(lambda: batcher.queued == 4, 30, "the first request in the queue")
        r = c.post("/translate", json=blank)
        assert r.status_code == 200, r.text
        assert r.json()["translations"] == [{"translation": "", "score": None, "nbest": []}] * 2
        assert not first.done() and batcher.queued == 4
        assert first.result().status_code == 200


def test_request_over_its_time_limit_gets_504(translator, serve_sentences):
    app = make_app(translator, timeout_s=0.1, max_wait_ms=1000, max_batch=64)
    with background_server(app) as url:
        r = httpx.post(url + "/translate", json={"text": serve_sentences[:1]}, timeout=30)
    assert r.status_code == 504 and "per-request limit of 0.1 s" in r.json()["error"]


@pytest.fixture(scope="module")
def served_ensemble(serve_model, tmp_path_factory):
    """A copy of the served model and a second member: the same task and vocabularies, another seed, fewer steps."""
    import shutil
    from nmt import checkpoint as ckpt
    from nmt.config import Config
    from nmt.train import train
    root = tmp_path_factory.mktemp("ensemble")
    first = root / "first"
    shutil.copytree(serve_model, first)
    cfg = Config.load(serve_model / ckpt.CONFIG)
    cfg.train.model_dir, cfg.train.seed, cfg.train.max_steps = str(root / "second"), 9, 150
    train(cfg, overwrite=True, evaluate=False)
    return first, root / "second"


def ckpt_best(model_dir) -> int:
    from nmt import checkpoint as ckpt
    return ckpt.TrainState.load(model_dir).best_step


def test_an_ensemble_is_served_as_the_translator_decodes_it(served_ensemble, serve_sentences):
    from nmt.corpus import read_parallel
    from nmt.scoring import score_test_set
    from nmt.serve.cli import build_app, parse_args
    from nmt.translate import Translator
    first, second = served_ensemble
    offline = Translator.from_dir(first, ensemble=[second])
    data = offline.config.data   # the ensemble's test score, recorded as nmt-evaluate records it
    score_test_set(offline, "test", read_parallel(data.test_src, data.test_tgt, name="test"))
    lines = serve_sentences[:6]
    with background_server(build_app(parse_args(["--model-dir", str(first), "--ensemble", str(second)]))) as url:
        got = httpx.post(url + "/translate", json={"text": lines, "beam_size": 4, "nbest": 2}, timeout=60).json()
        info = httpx.get(url + "/info", timeout=60).json()["models"][0]
        attention = httpx.post(url + "/attention", json={"text": lines[0]}, timeout=60).json()
    want = offline.translate_nbest(lines, 2, beam_size=4)
    assert [[h["translation"] for h in t["nbest"]] for t in got["translations"]] == [[x for x, _ in h] for h in want]
    assert [t["score"] for t in got["translations"]] == pytest.approx([h[0][1] for h in want], abs=1e-4)
    alone = Translator.from_dir(first).translate_nbest(lines, 1, beam_size=4)
    assert [t["score"] for t in got["translations"]] != pytest.approx([h[0][1] for h in alone], abs=1e-4)
    assert info["ensemble"] == [str(second)] and info["member_steps"] == [ckpt_best(second)]   # (its own step)
    assert info["best_test_score"]["checkpoint"] == f"ensemble-best:{second.name}"
    assert attention["translation"] == offline.translate([lines[0]], beam_size=1)[0]


def test_an_ensemble_member_of_no_served_pair_is_refused(serve_model, tmp_path):
    import json as json_
    from nmt.config import ConfigError
    from nmt.serve.cli import build_app, parse_args
    en_ko = tmp_path / "en-ko"
    en_ko.mkdir()
    config = json_.loads((serve_model / "config.json").read_text())
    config["data"].update(src_lang="en", tgt_lang="ko")
    (en_ko / "config.json").write_text(json_.dumps(config))
    with pytest.raises(ConfigError, match=f"--ensemble {en_ko} translates en-ko, which no --model-dir does"):
        build_app(parse_args(["--model-dir", str(serve_model), "--ensemble", str(en_ko)]))


def test_info_of_a_model_under_a_name_that_is_not_utf8(serve_model, tmp_path, monkeypatch):
    """A model loaded by a relative --model-dir from a directory named in CP949 bytes: /info answered 500
    (UnicodeEncodeError: its absolute path cannot be UTF-8 JSON), /translate 200. The bytes are shown as \\xNN."""
    import shutil
    from nmt.translate import Translator
    legacy = tmp_path / os.fsdecode("자료".encode("cp949"))
    shutil.copytree(serve_model, legacy / "m")
    monkeypatch.chdir(legacy)
    with background_server(make_app(Translator.from_dir("m"))) as url:
        r = httpx.get(f"{url}/info", timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["models"][0]["model_dir"].endswith("\\xc0\u06b7\\xe1/m"), r.text


def test_reading_a_requests_text_or_answer_holds_up_no_other_request(translator, serve_sentences, monkeypatch):
    """Checking a request's lines (each normalized several times: a 4 MB body of 256 long lines took 2-5 s) ran on
    the event loop, and so did the encoding of its answer (256 sentences' 16-best lists with alignments, 3 MB: 4 s):
    a /health sent meanwhile waited for them. Both run on the thread pool now, as the parsing of the body does."""
    from starlette.responses import JSONResponse

    from nmt.serve import attention, schema
    check_line, render = schema.check_line, JSONResponse.render

    def slow_line(line, *args, **kwargs):
        time.sleep(1.5 if line == "slow" else 0)
        return check_line(line, *args, **kwargs)

    def slow_render(self, content):
        time.sleep(1.5 if isinstance(content, dict) and content.get("beam_size") == 3 else 0)
        return render(self, content)
    monkeypatch.setattr(schema, "check_line", slow_line)
    monkeypatch.setattr(attention, "check_line", slow_line)
    monkeypatch.setattr(JSONResponse, "render", slow_render)
    with background_server(make_app(translator)) as url, httpx.Client(base_url=url, timeout=30) as c, \
            ThreadPoolExecutor(1) as pool:
        for path, body in (("/translate", {"text": ["slow"]}), ("/attention", {"text": "slow"}),
                           ("/translate", {"text": serve_sentences[:1], "beam_size": 3})):
            slow = pool.submit(c.post, path, json=body)
            time.sleep(0.3)
            start = time.monotonic()
            assert c.get("/health").status_code == 200
            waited = time.monotonic() - start
            assert slow.result().status_code == 200 and waited < 0.8, (path, body, waited)
