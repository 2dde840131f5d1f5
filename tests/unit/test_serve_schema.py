"""Request checks of the service, without a model: each hostile body gets a RequestError with the right status
and a message that says what to change; over-long lines are cut with a warning, as nmt-translate cuts them."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess

import pytest
from starlette.requests import ClientDisconnect

from nmt.serve.schema import Limits, RequestError, TranslateRequest, check_translate, parse, read_body


def refused(body, status: int, *words: str) -> RequestError:
    with pytest.raises(RequestError) as e:
        req = parse(body if isinstance(body, bytes) else json.dumps(body).encode(), TranslateRequest)
        check_translate(req, Limits(), default_beam=4, max_input_tokens=250)
    assert e.value.status == status, e.value.message
    for w in words:
        assert w in e.value.message, e.value.message
    return e.value


def test_valid_request_uses_the_model_beam_by_default():
    req = parse(b'{"text": ["\xea\xb0\x80", ""], "nbest": 2}', TranslateRequest)
    assert check_translate(req, Limits(), 4, 250) == (["가", ""], 4, [])


def test_a_body_after_a_byte_order_mark_is_read():
    """A JSON file saved by Windows Notepad and posted with `curl --data-binary @file` was refused (400, "Unexpected
    UTF-8 BOM (decode using utf-8-sig)"), which `nmt-translate --json-input` reads; RFC 8259 lets a parser ignore it."""
    req = parse(b'\xef\xbb\xbf{"text": ["\xea\xb0\x80"]}', TranslateRequest)
    assert check_translate(req, Limits(), 4, 250) == (["가"], 4, [])
    refused(b'\xef\xbb\xbf\xef\xbb\xbf{"text": ["a"]}', 400, "not valid JSON")   # (one mark, not any number)


def test_a_utf16_body_is_told_it_is_utf16():
    """A UTF-16 body (PowerShell's, Notepad's "Unicode") was "not valid UTF-8 (byte 0xff at offset 0)", and without
    its byte-order mark, whose NUL bytes pass as UTF-8, "not valid JSON (Expecting property name ... column 2)",
    where nmt-translate names UTF-16 input as such."""
    body = json.dumps({"text": ["hello there"]})
    refused(body.encode("utf-16"), 400, "not valid UTF-8 (byte 0xff at offset 0; it is UTF-16: it starts with a "
                                    "UTF-16 byte-order mark)", "send UTF-8")
    refused(body.encode("utf-16-le"), 400, "not UTF-8 but UTF-16LE", "send UTF-8")
    refused(json.dumps({"text": ["안녕하세요"]}, ensure_ascii=False).encode("utf-16-be"), 400, "UTF-16BE")
    assert parse(body.encode(), TranslateRequest).text == ["hello there"]


def test_a_translation_or_prefix_on_several_lines_is_told_it_is_one_line():
    """/attention's translation (and a target_prefix) on two lines was told to "send each line as its own
    sentence", the advice for a source text."""
    from nmt.serve.attention import check_attention
    from nmt.serve.schema import AttentionRequest, check_prefixes
    with pytest.raises(RequestError) as e:
        check_attention(parse(json.dumps({"text": "a", "translation": "b\nc"}).encode(), AttentionRequest), 250)
    assert e.value.message == "translation has text on 2 lines: a translation (or its start) is one line"
    with pytest.raises(RequestError) as e:
        check_prefixes(parse(json.dumps({"text": ["a"], "target_prefix": ["b\nc"]}).encode(), TranslateRequest), 250)
    assert e.value.message == "target_prefix[0] has text on 2 lines: a translation (or its start) is one line"


@pytest.mark.parametrize("body,status,words", [
    (b'{"text": [', 400, ["not valid JSON", "e.g."]),
    (b'\xff\xfe{}', 400, ["not valid UTF-8", "0xff"]),
    (["a"], 422, ["JSON object, not a JSON array"]),
    (b'{"text": ["a"], "text": ["b"]}', 422, ["field 'text' is given twice"]),   # json.loads would take ["b"]
    ({"txt": ["a"]}, 422, ["unknown field 'txt'", "remove it"]),
    ({"beam_size": 4}, 422, ["'text' is missing"]),
    ({"text": "a"}, 422, ["text:", "valid list"]),
    ({"text": ["a", 3]}, 422, ["text[1]", "valid string"]),
    ({"text": ["a"], "beam_size": "4"}, 422, ["beam_size", "valid integer"]),
    ({"text": ["a"], "beam_size": True}, 422, ["beam_size", "valid integer"]),
    ({"text": []}, 422, ["text is empty"]),
    ({"text": ["a"] * 1000}, 413, ["1000 sentences", "at most 256", "split"]),
    ({"text": ["a"] * 10_000}, 413, ["10000 lines", "at most 256 sentences", "split"]),
    ({"text": ["a"], "beam_size": 10 ** 9}, 422, ["between 1 and 16"]),
    ({"text": ["a"], "beam_size": 0}, 422, ["between 1 and 16"]),
    ({"text": ["a"], "beam_size": 2, "nbest": 3}, 422, ["nbest", "raise beam_size"]),
    ({"text": ["ok", "x\ud800y"]}, 422, ["text[1]", "lone surrogate U+D800", "character 1"]),
    ({"text": ["ok", "one.\ntwo.\r\nthree."]}, 422, ["text[1] has text on 3 lines", "its own sentence"]),
    ({"text": ["ok", "one.\u2028two."]}, 422, ["text[1] has text on 2 lines", "its own sentence"]),   # splitlines'
    ({"text": ["one.\x1ctwo.\x0bthree.", "ok"]}, 422, ["text[0] has text on 3 lines"]),
    # a RecursionError (a 500) in the parser; at 990 levels, or not, depending on how deep the caller's stack is
    (b"[" * 3000 + b"]" * 3000, 400, ["nested too deeply", "more than 32 levels"]),
    (b'{"text": ' + b"[" * 3000 + b"]" * 3000 + b"}", 400, ["nested too deeply"]),
    (b'{"text": ["a"], "x": ' + b'{"a": ' * 3000 + b"1" + b"}" * 3000 + b"}", 400, ["nested too deeply"]),
    (b'{"text": ' + b"[" * 990 + b"]" * 990 + b"}", 400, ["nested too deeply"]),
])
def test_hostile_requests_say_what_to_change(body, status, words):
    refused(body, status, *words)


def test_several_wrong_fields_are_named_with_one_example_body():
    """Each of the five wrong fields a 422 names came with its own copy of the example body: five of them, one
    after each field's words, in a message of 400 characters where the fields are the news."""
    e = refused({"text": ["a", 1, 2, 3, 4, 5, 6], "nbest": "3"}, 422)
    assert e.message == ("text[1]: input should be a valid string (got 1); text[2]: input should be a valid string "
                         "(got 2); text[3]: input should be a valid string (got 3); text[4]: input should be a valid "
                         "string (got 4); text[5]: input should be a valid string (got 5); e.g. "
                         '{"text": ["안녕하세요"], "beam_size": 4, "nbest": 1}') and e.field == "text[1]"
    assert refused({"nbest": 2}, 422).message == ("field 'text' is missing; e.g. "
                                                  '{"text": ["안녕하세요"], "beam_size": 4, "nbest": 1}')


def test_long_line_is_cut_like_the_cli_with_a_warning():
    req = parse(json.dumps({"text": ["가" * 5000]}).encode(), TranslateRequest)
    lines, _, warnings = check_translate(req, Limits(), 4, max_input_tokens=250)
    assert len(lines[0]) == 4000
    assert warnings == ["text[0] has 5000 characters; truncated to 4000 (max_input_tokens 250 x 16), as "
                        "nmt-translate does"]


def test_a_line_end_around_one_line_is_not_a_second_line():
    req = parse(json.dumps({"text": ["a\n", "\r\n b \r\n\n", "\n"]}).encode(), TranslateRequest)
    lines, _, warnings = check_translate(req, Limits(), 4, 250)
    assert lines == ["a\n", "\r\n b \r\n\n", "\n"] and warnings == []
    # nor is a line of what the model never reads: a zero-width space, a byte-order mark, a soft hyphen
    text = ["안녕\n\u200b", "안녕\u2028\ufeff", "\u00ad\n안녕"]
    lines, _, _ = check_translate(parse(json.dumps({"text": text}).encode(), TranslateRequest), Limits(), 4, 250)
    assert lines == text


def test_control_characters_are_accepted_with_a_warning():
    req = parse(json.dumps({"text": ["a\x00b\x07c\td"]}).encode(), TranslateRequest)
    lines, _, warnings = check_translate(req, Limits(), 4, 250)
    assert lines == ["a\x00b\x07c\td"] and warnings == ["text[0] has 2 control character(s); they were removed "
                                                        "before translating"]


def test_a_colour_code_is_removed_whole_with_a_warning_counting_it():
    req = parse(json.dumps({"text": ["\x1b[31m빨강\x1b[0m"]}).encode(), TranslateRequest)
    lines, _, warnings = check_translate(req, Limits(), 4, 250)
    assert warnings == ["text[0] has 2 terminal escape sequence(s) (colours, cursor keys: ESC[31m ...); they were "
                        "removed before translating"]


def test_body_over_the_limit_is_refused_while_reading():
    async def chunks():
        for _ in range(100):
            yield b"x" * 1000
    with pytest.raises(RequestError) as e:
        asyncio.run(read_body(chunks(), limit=10_000))
    assert e.value.status == 413 and "over 10000 bytes" in e.value.message


def test_a_client_that_leaves_mid_body_is_one_info_line(caplog):
    """starlette's ClientDisconnect went up to uvicorn, which logged it as an ERROR with a traceback."""
    async def chunks():
        yield b'{"text": ["'
        raise ClientDisconnect()
    with caplog.at_level("DEBUG", logger="nmt.serve"), pytest.raises(RequestError) as e:
        asyncio.run(read_body(chunks(), limit=10_000))
    assert e.value.status == 400 and "disconnected" in e.value.message
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "a client disconnected after sending 11 bytes of its request body")]


def test_json_nested_within_the_limit_is_parsed():
    req = parse(b'{"text": ["a"], "target_prefix": [null]}', TranslateRequest)
    assert req.target_prefix == [None]
    refused({"text": [[[["a"]]]]}, 422, "text[0]", "valid string")


def test_a_line_of_four_byte_characters_cut_at_the_limit_is_warned_of(model_dir):
    """Five emoji are 21 pieces (4 byte pieces each and a word start): with max_input_tokens 20 the line was cut and
    the answer said nothing, the check having skipped lines of up to limit / 4 characters."""
    import dataclasses
    from nmt.serve.schema import token_warnings
    from nmt.translate import Translator
    tr = Translator.from_dir(model_dir)
    tr.decode = dataclasses.replace(tr.decode, max_input_tokens=20)
    assert len(tr.src_tok.encode(["\U0001f600" * 5])[0]) == 21
    assert token_warnings(tr, ["\U0001f600" * 5, "\U0001f600" * 4]) == [
        "text[0] has more than 20 subword tokens; truncated to 20 (max_input_tokens), as nmt-translate does"]
    # U+1D160 is 3 code points in NFC (12 byte pieces): 2 of them, 25 pieces, were cut without a word
    assert token_warnings(tr, ["\U0001d160" * 2]) == [
        "text[0] has more than 20 subword tokens; truncated to 20 (max_input_tokens), as nmt-translate does"]


def test_an_attention_text_of_invisible_characters_is_empty():
    """A line of a Hangul filler (a "blank" in Korean chat) or a lone joiner passed `line.strip()` and got "attention:
    the sentence is empty after normalization" from deep in the model, where a line of spaces got this answer."""
    from nmt.serve.attention import check_attention
    from nmt.serve.schema import AttentionRequest, check_prefixes
    for text in ("\u3164", "\u200e \u200d", "   "):
        with pytest.raises(RequestError) as e:
            check_attention(parse(json.dumps({"text": text}).encode(), AttentionRequest), 250)
        assert (e.value.status, e.value.message) == (422, "text is empty: send one sentence")


def test_the_page_gets_the_servers_character_classes():
    """The page carried its own, shorter copy of the characters the server drops from a line; it now gets the
    server's, each character written as \\u{hex}, which mean the same classes (every code point checked)."""
    import re
    from nmt.serve.page import READ_RULES, js_class, page_html
    from nmt.text import INVISIBLE, JOINERS, NOTHING_TO_JOIN
    for pattern in (INVISIBLE.pattern, JOINERS.pattern.removesuffix("+"), NOTHING_TO_JOIN):
        js = js_class(pattern)
        assert re.fullmatch(r"\[(\\u\{[0-9a-f]+\}|-)+\]", js)
        back = re.compile(re.sub(r"\\u\{([0-9a-f]+)\}", lambda m: f"\\U{int(m[1], 16):08x}", js))
        original = re.compile(pattern)
        assert [c for c in range(0x110000) if back.match(chr(c))] == [c for c in range(0x110000)
                                                                       if original.match(chr(c))]
    html = page_html()
    assert READ_RULES not in html
    rules = json.loads(re.search(r"const READ = (\{.*?\});", html)[1])
    assert set(rules) == {"invisible", "joiners", "space", "nothing_to_join", "full_width", "escapes"} and \
        "\\u{3164}" in rules["invisible"]
    with pytest.raises(ValueError, match="not a character class"):
        js_class("[^a]")
    node = shutil.which("node")   # (the browser test runs the page's words() itself)
    if node:   # the terminal escape sequences, a pattern the page compiles as it is: the same matches in JavaScript
        texts = ["\x1b[31m빨강\x1b[0m", "a\x1b[Db \x1b[1;2;3 ~x", "\x1b]8;;u\x1b\\l\x1b]8;;\x07!", "\x1b(B\x9b0m\x9d0;t\x9c.",
                 "\x1b]0;cut", "\x1b x \x1b[", "[31m", "\x1bOP\x1b7a\x1bbc\x1b\\d\x1bP",
                 "안녕\x1bO하세요 가\x1bO 나 \x1bO1 \x1bN~ 가\x1b[[A나", "\x9bNext \x9b Products \x9b12 가 \x9b?25l\x9b0 q",
                 "\xe2\x80\x9cHi,\xe2\x80\x9d he said. \xe2\x80\x9c가\x9d2 나\x9c \x9d0;t\x9c\x9d8;;u\x07l"]
        script = f"const r = new RegExp({json.dumps(rules['escapes'])}, 'gu'); " \
                 f"console.log(JSON.stringify({json.dumps(texts)}.map((x) => x.replace(r, ''))))"
        got = subprocess.run([node, "-e", script], capture_output=True, text=True, check=True, timeout=60).stdout
        from nmt.text import ESCAPE_SEQUENCE
        assert json.loads(got) == [ESCAPE_SEQUENCE.sub("", x) for x in texts] != texts


@pytest.mark.parametrize("a, shown", [(0.1000001, "0.1000001"), (999999.9, "999999.9"), (1.0000000001, "1.0000000001"),
                                      (1e-300, "1e-300"), (1.5, "1.5"), (0.0, "0"), (2.0, "2")])
def test_the_length_limit_warning_shows_max_len_a_as_the_limit_takes_it(a, shown):
    """The length limit takes max_len_a as the decimal it is written as (`search.length_limits`), but the warnings of
    a translation that reached it showed it with %g: 0.1000001 as 0.1 (a limit of 4 for 30 source tokens, where 0.1 x
    30 is 3), 999999.9 as 1e+06 (a value --max-len-a refuses), 1.0000000001 as 1. The service's warning, nmt-score's
    target limit and nmt-translate's warning show it through DecodeConfig.max_len_a_text."""
    from nmt.config import DecodeConfig
    from nmt.serve.schema import at_length_limit
    assert at_length_limit(DecodeConfig(max_len_a=a, max_len_b=1)) == \
        f"the translation reached the model's length limit (max_len_a {shown} x source tokens + max_len_b 1) and may " \
        "be cut off"


def test_the_sentences_counted_are_those_normalization_leaves_text_in():
    """--max-sentences and the queue count the sentences decoded (`decoded_count`), those `normalize` (what the
    Translator reads) leaves text in: each character of the BMP alone, and lines after a terminal escape sequence
    (ESC[31m, digits that normalization removes); a target prefix makes a blank line one."""
    from nmt.serve.schema import decoded_count
    from nmt.text import normalize
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c < 0xE000]
    assert decoded_count(TranslateRequest(text=chars)) == sum(1 for c in chars if normalize(c))
    colour = ["\x1b[31m", "\x1b[31m가", "\x9b1m", "\u3164", "\u200b7", " \t"]
    assert decoded_count(TranslateRequest(text=colour)) == 2
    assert decoded_count(TranslateRequest(text=colour, target_prefix=["The", None, "", " ", "\x1b[0m", "A"])) == 4
    # (a blank line's prefix None, as JSON's null: no prefix, not an error)
    assert decoded_count(TranslateRequest(text=["", " ", "가"], target_prefix=[None, "A", None])) == 2


def test_a_request_check_reads_each_line_once_and_refuses_as_before(monkeypatch):
    """The sentences counted were told blank by a shortcut of their own (a copy of nmt.text's rules: the characters
    that begin an escape sequence, the invisible ones), then `check_line` normalized every line twice more (its line
    count, then the line as read): a 4 MB body took 1.0-1.3 s to check. The check now normalizes each line and
    target prefix once, and counts from that what it decodes; a request both over --max-sentences and wrong in a line
    or field is still refused for its sentences first."""
    from types import SimpleNamespace

    from nmt import text as nmt_text
    from nmt.serve import pooled, schema
    read = []
    monkeypatch.setattr(nmt_text, "normalize", lambda t, f=nmt_text.normalize: read.append(t) or f(t))
    monkeypatch.setattr(schema, "normalize", nmt_text.normalize)
    tr = SimpleNamespace(decode=SimpleNamespace(max_input_tokens=250, beam_size=4), src_lang="ko", tgt_lang="en")
    text, prefixes = ["가 나", "", "\u200b", "다\u2028", "Mary"], [None, "The", "", "A", ""]
    checked = pooled._check_translate(TranslateRequest(text=text, target_prefix=prefixes), tr, Limits())
    assert checked.sentences == 4 and checked.lines == text and checked.prefixes == ["", "The", "", "A", ""]
    assert sorted(read) == sorted(["다", "", *text, *(p or "" for p in prefixes)]), read   # (U+2028: parts)
    for body in ({"text": ["a"] * 4 + ["\ud800"]}, {"text": ["a"] * 4 + ["b\nc"]}, {"text": ["a"] * 5, "nbest": 9},
                 {"text": ["", "a", "", "b", "", "c"], "target_prefix": ["x", "", "y"]}):
        with pytest.raises(RequestError) as e:
            pooled._check_translate(TranslateRequest(**body), tr, Limits(max_sentences=3))
        assert e.value.status == 413 and e.value.message.startswith("text has 5 sentences"), (body, e.value.message)
