"""Target prefixes on the tiny trained model, through every way in: the Python API (translations start with the
prefix, a prefix the model would have written changes nothing), `nmt-translate --json-input` (its output, its
errors naming the line and field after the lines before are written, the interactive prompt), and POST
/translate's `target_prefix` (the Translator's answers, also among concurrent requests without one)."""
from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from nmt.prompt import interactive
from nmt.translate import Translator
from tests.integration.serve_app import background_server, make_app
from tests.integration.test_translate import run


def test_translations_start_with_the_prefix(translator, serve_sentences):
    lines = serve_sentences[:6]
    free = translator.translate(lines, beam_size=1)
    # the model's own first word: the same translation; another sentence's words: forced, then continued
    own = [t.split()[0] for t in free]
    assert translator.translate(lines, beam_size=1, prefixes=own) == free
    other = [free[(i + 1) % len(free)].split()[0] + " " + free[(i + 2) % len(free)].split()[0]
             for i in range(len(lines))]
    for beam in (1, 4):
        for prefix, hyps in zip(other, translator.translate_nbest(lines, 3 if beam > 1 else 1, beam_size=beam,
                                                                  prefixes=other)):
            assert all(text.startswith(prefix) for text, _ in hyps), (prefix, hyps)
    mixed = [other[0], None, "", other[3]]
    got = translator.translate(lines[:4], beam_size=4, prefixes=mixed)
    assert got[1:3] == translator.translate(lines[1:3], beam_size=4)
    assert got[0].startswith(other[0]) and got[3].startswith(other[3])
    assert translator.translate(lines[0], prefixes=other[0]) == got[0]   # one string, one prefix
    aligned = translator.translate_aligned(lines[:2], prefixes=other[:2])
    assert [h[0][0] for h in aligned] == translator.translate(lines[:2], prefixes=other[:2])


def test_a_word_cut_short_is_completed(translator, serve_sentences):
    """A prefix that ends inside a word (as typed): the translation goes on with the word, which SentencePiece
    would cut differently alone; a cut of the model's own greedy translation gives that translation again."""
    lines = serve_sentences[:8]
    cases = [(x, t[:n], t) for x, t in zip(lines, translator.translate(lines, beam_size=1))
             for n in range(1, len(t)) if t[n - 1] != " "]
    sources, cuts, full = (list(c) for c in zip(*cases))
    assert translator.translate(sources, beam_size=1, prefixes=cuts) == full
    tok = translator.tgt_tok
    assert any(tok.pieces(c) != tok.pieces(t)[:len(tok.pieces(c))] for c, t in zip(cuts, full)), "no word cut short"
    for text, hyps in zip(cuts, translator.translate_nbest(sources, 3, beam_size=4, prefixes=cuts)):
        assert all(h.startswith(text) for h, _ in hyps), (text, hyps)


def test_a_prefix_ending_with_a_space_is_taken_as_whole_words(translator, serve_sentences):
    line, word = next((x, t.split()[0]) for x, t in zip(serve_sentences, translator.translate(serve_sentences[:20]))
                      if len(t.split()[0]) > 1)
    assert translator.translate(line, prefixes=word[:-1]).startswith(word)
    assert translator.translate(line, prefixes=word[:-1] + " ").startswith(word[:-1] + " ")


def test_characters_the_model_does_not_read_after_the_space_leave_the_words_whole(translator, serve_sentences):
    """A prefix ending with a space and then a character normalization removes (a zero-width space, a Hangul filler,
    a byte-order mark, a colour's ESC[0m) was read by its last raw character: its last word was left open, as if
    typed without the space, though the model reads the same text as with the space."""
    line, word = next((x, t.split()[0]) for x, t in zip(serve_sentences, translator.translate(serve_sentences[:20]))
                      if len(t.split()[0]) > 1)
    whole = translator.target_prefixes([word[:-1] + " "])[0]
    for invisible in ("\u200b", "\u3164", "\ufeff", "\x1b[0m", "\u200b\u3164"):
        forced = translator.target_prefixes([word[:-1] + " " + invisible])[0]
        assert list(forced.tokens) == list(whole.tokens) and forced.allowed.shape == whole.allowed.shape, invisible
        assert translator.translate(line, prefixes=word[:-1] + " " + invisible).startswith(word[:-1] + " ")
        assert translator.translate(line, prefixes=word[:-1] + invisible).startswith(word)   # (no space: open)
    from nmt.prefix import ends_in_word
    assert ends_in_word("We") and ends_in_word("I 👍\u200d") and not ends_in_word("We\u00a0") and not ends_in_word(
        "We\u3000\u200b")


def test_an_empty_line_with_a_prefix_is_translated(translator):
    assert translator.translate(["", ""], prefixes=["ga", None]) != ["", ""]
    assert translator.translate(["", ""], prefixes=["ga", None])[1] == ""
    assert translator.translate([""], prefixes=["ga"])[0].startswith("ga")


def test_bad_prefixes_are_refused_and_a_long_one_is_cut_with_a_warning(translator, serve_sentences, caplog):
    lines = serve_sentences[:2]
    with pytest.raises(ValueError, match="prefixes has 1 items for 2 lines"):
        translator.translate(lines, prefixes=["ga"])
    with pytest.raises(TypeError, match="not one string"):
        translator.translate(lines, prefixes="ga")
    with pytest.raises(ValueError, match=r"prefixes\[1\] has text on 2 lines"):
        translator.translate(lines, prefixes=["ga", "a\nb"])
    short = Translator(translator.net, translator.src_tok, translator.tgt_tok,
                       dataclasses.replace(translator.decode, max_input_tokens=4))
    prefix = "ga na da ra ma ba sa"
    cut = translator.tgt_tok.decode([translator.tgt_tok.encode([prefix])[0][:4]])[0]
    with caplog.at_level("WARNING", logger="nmt.translate"):
        out = short.translate([lines[0]], prefixes=[prefix], first_line=7)[0]
    assert out.startswith(cut) and not out.startswith(prefix)
    assert "target prefix of line 7 has" in caplog.text and "truncated to 4" in caplog.text
    # its last word "sa" was left open: cut, the words before it were cut and "sa" spliced on after the cut ("I went
    # to the school by yester" became "I went to yesterday."); now what is forced is the prefix's first 4 pieces
    forced = short.target_prefixes([prefix])[0]
    assert list(forced.tokens) == translator.tgt_tok.encode([prefix])[0][:4] and forced.allowed is None
    assert short.target_prefixes(["ga sa"])[0].allowed is not None   # within the limit, still completed
    # a prefix over the character guard (16 characters a token) and then over the token limit: one line cut, as
    # a source line cut twice is (it was counted twice in nmt-translate's "N truncated"); so is a line whose source
    # (over 4 tokens) and prefix are both cut (it counted 2), by either API
    before, source = short.truncated, short.translate([lines[0]]) and short.truncated
    short.translate([lines[0][:2]], prefixes=["ga na " * 20])
    assert source == before + 1 and short.truncated == source + 1
    short.translate([lines[0]], prefixes=["ga na " * 20])
    short.translate_aligned([lines[0]], prefixes=["ga na " * 20])
    decoder = short.continuous()   # (the service's continuous batching counted it twice still)
    decoder.add([lines[0]], ["key"], prefixes=["ga na " * 20])
    while decoder.pending:
        decoder.step()
    assert short.truncated == source + 4


def test_cli_json_input(translator, serve_sentences, tmp_path, capsys):
    lines = serve_sentences[:3]
    prefixes = ["ga", None, "ma ba"]
    rows = [json.dumps({"text": x, **({"target_prefix": p} if p else {})}, ensure_ascii=False)
            for x, p in zip(lines, prefixes)]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(rows[:2] + [""] + rows[2:]) + "\n", encoding="utf-8")
    out = tmp_path / "out.en"
    model = ["--model-dir", translator.model_dir]
    code, _, err = run(model + ["--json-input", "--input", src, "--output", out, "--beam-size", "3"], capsys)
    assert code == 0, err
    want = translator.translate(lines, beam_size=3, prefixes=prefixes)
    assert out.read_text(encoding="utf-8").splitlines() == want[:2] + [""] + want[2:]
    code, _, err = run(model + ["--json-input", "--input", src, "--output", tmp_path / "nbest.jsonl", "--nbest", "2",
                                "--alignment"], capsys)
    assert code == 0, err
    nbest = [json.loads(x) for x in (tmp_path / "nbest.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all(t.startswith("ma ba") for t in nbest[3]["translations"]) and len(nbest[3]["alignments"]) == 2


BAD_LINES = {   # the third line: the words the error must contain
    '{"text": "가", "target_prefix": 3}': "field 'target_prefix' (text the translation starts with) is a JSON number",
    '{"text": null}': "field 'text' (the sentence to translate, a string) is a JSON null",
    '{"txt": "가"}': "unknown field 'txt'; the fields are text, target_prefix",
    '{"text": "가", "text": "나"}': "field 'text' is given twice; give each field once",
    '{"target_prefix": "ga"}': "field 'text' (the sentence to translate, a string) is missing",
    '{"text": "가", "target_prefix": "a\\nb"}': "field 'target_prefix' has text on 2 lines",
    '{"text": "가\\u2028나"}': "field 'text' has text on 2 lines",   # str.splitlines' boundaries, as "\\n"
    '{"text": "가", "target_prefix": "a\\u001cb\\u000bc"}': "field 'target_prefix' has text on 3 lines",
    '{"text": "가\u2028나"}': "field 'text' has text on 2 lines",   # unescaped: JSON allows U+2028 in a string
    '"가"': "a JSON string, not an object",
    '{"text": "가", "target_prefix": "\\ud800"}': "field 'target_prefix' has a lone surrogate U+D800 at character 0",
    '{"text": "가"': "not JSON (Expecting ',' delimiter at character 13)",
    '{"text": "가': "not JSON (Unterminated string starting at character 10)",   # (was "at at character 10")
    # what shows as nothing or a space, named: a raw tab in a string (JSON takes it escaped), an NBSP between fields
    '{"text": "가\tb"}': "not JSON (Invalid control character at character 12, U+0009, a control character)",
    '{"text":\u00a0"가"}': "not JSON (Expecting value at character 9, U+00A0, a space)",
    '\x01{"text": "가"}': "not JSON (Expecting value at character 1, U+0001, a control character)",
}


@pytest.mark.parametrize("bad", list(BAD_LINES))
def test_cli_json_input_errors_name_the_line_after_writing_the_lines_before(translator, serve_sentences, tmp_path,
                                                                          capsys, bad):
    src = tmp_path / "in.jsonl"
    good = [json.dumps({"text": x}, ensure_ascii=False) for x in serve_sentences[:2]]
    src.write_text("\n".join(good + [bad, good[0]]) + "\n", encoding="utf-8")
    out = tmp_path / "out.en"
    code, _, err = run(["--model-dir", translator.model_dir, "--json-input", "--input", src, "--output", out,
                        "--chunk-lines", "2"], capsys)
    assert code == 2
    assert f"error: {src}:3: {BAD_LINES[bad]}" in err
    assert out.read_text(encoding="utf-8").splitlines() == translator.translate(serve_sentences[:2])


def test_interactive_json_input_reports_a_bad_line_and_goes_on(translator, serve_sentences, capsys):
    typed = iter(['{"text": "%s", "target_prefix": "ga"}' % serve_sentences[0], "not json",
                  '{"text": "%s"}' % serve_sentences[1]])

    def read(prompt):
        item = next(typed, None)
        if item is None:
            raise EOFError
        return item
    assert interactive(translator, read=read, json_input=True) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [translator.translate(serve_sentences[0], prefixes="ga"),
                                translator.translate(serve_sentences[1])]
    assert "error: input:2: not JSON" in err and "Type a JSON object such as {" in err


@pytest.fixture(scope="module")
def url(translator):
    with background_server(make_app(translator, max_wait_ms=20)) as u:
        yield u


def test_service_target_prefix_is_the_translators(url, translator, serve_sentences):
    lines = serve_sentences[:4] + [""]
    prefixes = ["ga", "", None, "na", "da"]
    r = httpx.post(url + "/translate", json={"text": lines, "beam_size": 4, "nbest": 2, "target_prefix": prefixes,
                                             "alignment": True}, timeout=60)
    assert r.status_code == 200, r.text
    got = [[h["translation"] for h in t["nbest"]] for t in r.json()["translations"]]
    offline = translator.translate_nbest(lines, 2, beam_size=4, prefixes=prefixes)
    assert got == [[x for x, _ in h] for h in offline]
    assert all(t.startswith("da") for t in got[4]) and got[4]
    # requests with and without prefixes decode together, each as alone
    jobs = [{"text": [s], **({"target_prefix": ["ga"]} if i % 2 else {})} for i, s in enumerate(serve_sentences[:12])]
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda j: httpx.post(url + "/translate", json=j, timeout=60).json(), jobs))
    served = [a["translations"][0]["translation"] for a in answers]
    assert served == [translator.translate(j["text"], prefixes=j.get("target_prefix"))[0] for j in jobs]


@pytest.mark.parametrize("prefix, words", [(["ga"], "target_prefix has 1 items for 2 sentences"),
                                           ([1, "ga"], "target_prefix[0]"),
                                           ("ga", "target_prefix: input should be a valid list"),
                                           (["ga", "a\nb"], "target_prefix[1] has text on 2 lines")])
def test_service_refuses_bad_prefixes_naming_the_field(url, serve_sentences, prefix, words):
    r = httpx.post(url + "/translate", json={"text": serve_sentences[:2], "target_prefix": prefix}, timeout=60)
    assert r.status_code == 422 and words in r.json()["error"], r.text
    assert r.json()["field"].startswith("target_prefix")


def test_service_warns_of_a_prefix_it_cuts(url, translator, serve_sentences):
    limit = translator.decode.max_input_tokens
    r = httpx.post(url + "/translate", json={"text": serve_sentences[:1], "target_prefix": ["ga " * (limit + 10)]},
                   timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["warnings"] == [f"target_prefix[0] has more than {limit} subword tokens; truncated to {limit} "
                                    "(max_input_tokens), as nmt-translate does"]


def test_service_warns_of_a_prefix_over_the_character_limit_or_with_control_characters(url, serve_sentences):
    """A target prefix's control characters are removed, and one over the character limit cut, with the warnings a
    text gets (check_prefixes'): an answer that left them out passed, only the subword cut's warning was tested."""
    r = httpx.post(url + "/translate", json={"text": serve_sentences[:1], "target_prefix": ["T\x07h"]}, timeout=60)
    assert r.status_code == 200 and r.json()["warnings"] == [
        "target_prefix[0] has 1 control character(s); they were removed before translating"], r.text
    r = httpx.post(url + "/translate", json={"text": serve_sentences[:1], "target_prefix": ["ga " * 1400]},
                   timeout=60)
    assert r.status_code == 200 and r.json()["warnings"][0] == ("target_prefix[0] has 4199 characters; truncated "
                                                                 "to 4000 (max_input_tokens 250 x 16), as "
                                                                 "nmt-translate does"), r.text


def test_cli_json_input_reads_fields_up_to_the_guard_whole_and_names_a_longer_line(translator, tmp_path, capsys):
    """The reading guard cuts a line after --max-input-tokens x 16 characters' worth of bytes; a cut JSON line is no
    longer JSON. With --json-input it leaves room for both fields at that length, JSON-escaped; a longer line is an
    error that says why."""
    guard = 20 * 16   # --max-input-tokens 20
    at_guard = json.dumps({"text": "가" * guard, "target_prefix": "나" * guard})   # \uXXXX escapes: 6 bytes each
    over = json.dumps({"text": "가" * guard * 4})
    src = tmp_path / "in.jsonl"
    src.write_text(at_guard + "\n" + over + "\n", encoding="utf-8")
    out = tmp_path / "out.en"
    code, _, err = run(["--model-dir", translator.model_dir, "--json-input", "--input", src, "--output", out,
                        "--max-input-tokens", "20", "--chunk-lines", "1", "--beam-size", "1"], capsys)
    assert code == 2
    assert f"{src}:2: the line is longer than the input guard" in err and "no longer a JSON object" in err
    assert "not JSON" not in err and len(out.read_text(encoding="utf-8").splitlines()) == 1


def test_an_overlong_last_word_is_taken_as_whole(translator, serve_sentences):
    """A last word of over MAX_OPEN_WORD characters (a URL, a hostile request) is not completed: its table would
    take a row of the vocabulary per character, and each character a step that waits for the device."""
    from nmt.prefix import MAX_OPEN_WORD
    long_word, open_word = "g" * (MAX_OPEN_WORD + 1), "g" * MAX_OPEN_WORD
    prefixes = translator.target_prefixes([f"ga {long_word}", f"ga {open_word}"])
    assert len(prefixes[0].allowed) == 1 and prefixes[0].tokens == translator.tgt_tok.encode([f"ga {long_word}"])[0]
    assert len(prefixes[1].allowed) == MAX_OPEN_WORD + 1   # "▁" and the word
    assert translator.translate(serve_sentences[0], prefixes=f"ga {long_word}").startswith(f"ga {long_word}")
