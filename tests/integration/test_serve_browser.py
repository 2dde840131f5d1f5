"""The web page in a real headless Chromium (Debian's `chromium` and `chromium-driver`, driven by selenium): it
types a Korean sentence, waits for the result, checks it equals the API's answer, that the n-best list and the
attention heatmap are shown, that pointing at a word marks the words it is aligned with, that several lines are
translated line by line, that words typed into "translation starts with" begin the chosen line's translation,
that /docs renders offline, and saves screenshots (in the test's tmp dir, and in
$NMT_ARTIFACTS when set; docs/images/serve_page.png is serve_page_alignment.png).

Then what a browser audit found: answers that come late or not at all (held back, or blocked, in the page's
fetch), a double-click, an error after a result, a change of model while translating, and keyboard use."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
from pathlib import Path

import httpx
import pytest

from nmt.text import normalize

from tests.integration.serve_app import background_server, make_app

CHROMIUM = os.environ.get("NMT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("NMT_CHROMEDRIVER", "/usr/bin/chromedriver")


def browser(phone: bool = False):
    """A headless Chromium under selenium (`phone`: emulating a 360-pixel-wide phone screen); skips the test with
    the reason when either is missing."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    if missing:
        pytest.skip(f"no browser: {', '.join(missing)} not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (requirements/dev.txt)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1000,1050", "--lang=ko"):
        opts.add_argument(arg)
    if phone:
        opts.add_experimental_option("mobileEmulation", {"deviceMetrics": {"width": 360, "height": 740,
                                                                           "pixelRatio": 2.0}})
    return webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=opts)


def save_screenshot(driver, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    driver.save_screenshot(str(path))
    if os.environ.get("NMT_ARTIFACTS"):
        out = Path(os.environ["NMT_ARTIFACTS"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, out / name)
    return path


def translate_on_page(driver, url: str, sentence: str) -> None:
    """Open the page, type `sentence`, press Translate and wait until the page shows the answer."""
    from selenium.webdriver.common.by import By
    open_page(driver, url)
    box = driver.find_element(By.ID, "source")
    box.clear()
    box.send_keys(sentence)
    driver.find_element(By.ID, "go").click()
    wait_done(driver)


def open_page(driver, url: str) -> None:
    """Open the page and wait until it has loaded the server's models (/info)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    driver.get(url + "/")
    WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "pair").text)


def set_source(driver, value: str) -> None:
    """Put `value` in the text box as if typed (faster than send_keys for many lines)."""
    driver.execute_script("const s = document.getElementById('source'); s.value = arguments[0];"
                          "s.dispatchEvent(new Event('input'));", value)


def content(driver, *ids: str) -> dict:
    """The text of each element, shown or hidden (WebElement.text is empty for hidden elements)."""
    return driver.execute_script("return Object.fromEntries(arguments[0].map((id) => "
                                 "[id, document.getElementById(id).textContent]))", list(ids))


RESULT = ("translation", "warnings", "align-src", "align-tgt", "nbest-list", "attention-note", "heatmap")

# Installed in a loaded page, over its fetch: window.sent logs the requests it sends ([path, body]); window.hold()
# holds back the answer of the next /translate until window.release(); window.pending counts the requests whose
# answer the page has not yet read and reacted to (counted down in a task queued once it has read it, which runs
# after the page's own reaction, requests it then sends included).
FETCH_LOG = """
window.sent = []; window.signals = []; window.pending = 0;
let gate = null;
window.hold = () => { gate = new Promise((go) => { window.release = go; }); };
const real = window.fetch;
window.fetch = async (url, init) => {
  const path = "/" + url.replace(/^[/]/, "");   // the page's relative URLs as the paths they ask for
  window.sent.push([path, init && init.body ? JSON.parse(init.body) : null]);
  window.signals.push(init && init.signal);
  const held = path === "/translate" ? gate : null;
  if (held) gate = null;
  window.pending++;
  try {
    const r = await real(url, init);
    await held;
    const json = r.json.bind(r);
    r.json = () => json().finally(() => setTimeout(() => window.pending--, 0));
    return r;
  } catch (e) {
    window.pending--;
    throw e;
  }
};
"""


def sent(driver, path: str) -> list:
    """The bodies of the requests to `path` the page sent since FETCH_LOG was installed."""
    return [body for p, body in driver.execute_script("return window.sent") if p == path]


def wait_settled(driver) -> None:
    """Wait until the page has reacted to every answer (FETCH_LOG) and is done or shows an error."""
    from selenium.webdriver.support.ui import WebDriverWait
    WebDriverWait(driver, 30).until(lambda d: d.execute_script(
        "return window.pending === 0 && ['done', 'error'].includes(document.body.dataset.state)"))


def api_translations(url: str, driver, lines: list, **langs) -> list:
    """The API's best translations of `lines` with the page's beam (`langs`: src_lang and tgt_lang)."""
    from selenium.webdriver.common.by import By
    beam = int(driver.find_element(By.ID, "beam").get_attribute("value"))
    answer = httpx.post(url + "/translate", json={"text": lines, "beam_size": beam, **langs}).json()
    return [t["translation"] for t in answer["translations"]]


def wait_done(driver) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")
                                    in ("done", "error"))


def check_docs_page(driver, url: str, tmp_path: Path) -> None:
    """/docs renders Swagger UI from the server's own files: the /translate operation appears."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    driver.get(url + "/docs")
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path"))
    paths = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")]
    assert "/translate" in " ".join(paths), paths
    save_screenshot(driver, tmp_path, "serve_docs.png")
    # "Try it out" starts from the schema's example (a body the server takes), not {"text": ["string"], ...}
    next(e for e in driver.find_elements(By.CSS_SELECTOR, ".opblock-summary") if "/translate" in e.text).click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".try-out__btn"))[0].click()
    body = WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "textarea.body-param__text"))
    assert json.loads(body[0].get_attribute("value")) == {"text": ["안녕하세요"], "beam_size": 4, "nbest": 1}


def heatmap_contrasts(driver) -> list:
    """The contrast ratio (WCAG 2) of each number in the heatmap with its cell's colour, drawn over white."""
    import re
    cells = driver.execute_script("return [...document.querySelectorAll('#heatmap td')].filter((td) => "
                                  "td.textContent).map((td) => [getComputedStyle(td).color, td.style.background])")

    def luminance(rgb):
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (x / 255 for x in rgb)]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    ratios = []
    for color, background in cells:
        text = [float(x) for x in re.findall(r"[\d.]+", color)][:3]
        numbers = [float(x) for x in re.findall(r"[\d.]+", background)] + [1.0]   # a weight of 1 is rgb(...)
        rgb, alpha = numbers[:3], numbers[3]
        lum = sorted([luminance(text), luminance([255 - alpha * (255 - c) for c in rgb])])
        ratios.append((lum[1] + 0.05) / (lum[0] + 0.05))
    assert ratios, "no numbers in the heatmap"
    return ratios


def test_page_shows_the_api_translation_nbest_and_heatmap(translator, serve_sentences, tmp_path):
    """The page shows the API's translation, n-best list (its score explained) and heatmap (its rows and columns
    named; every number readable, at a contrast of 4.5:1 or more: white text on weights from 0.5 had 2.4-4:1); the
    Korean font loads, and /docs renders."""
    from selenium.webdriver.common.by import By
    driver = browser()
    sentence = serve_sentences[0]
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, sentence)
            shot = save_screenshot(driver, tmp_path, "serve_page.png")
            assert driver.find_element(By.ID, "error").text == ""
            beam, nbest = (int(driver.find_element(By.ID, k).get_attribute("value")) for k in ("beam", "nbest"))
            api = httpx.post(url + "/translate", json={"text": [sentence], "beam_size": beam, "nbest": nbest}).json()
            expected = api["translations"][0]
            assert driver.find_element(By.ID, "translation").text == expected["translation"]
            items = driver.find_elements(By.CSS_SELECTOR, "#nbest-list li .hyp")
            assert [li.text for li in items] == [h["translation"] for h in expected["nbest"]]
            heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#heatmap th.src")]
            assert any("\uac00" <= ch <= "\ud7a3" for ch in "".join(heads)), f"no Hangul in the heatmap: {heads}"
            assert len(driver.find_elements(By.CSS_SELECTOR, "#heatmap td")) >= len(heads)
            note = driver.find_element(By.ID, "attention-note").text
            assert "Rows: its pieces; columns: the source line's pieces" in note
            name = driver.find_element(By.CSS_SELECTOR, "#heatmap table").get_attribute("aria-label")
            assert "a row per piece of the translation, a column per piece of the source line" in name
            assert min(heatmap_contrasts(driver)) >= 4.5
            score = driver.find_element(By.CSS_SELECTOR, "#nbest-list .score").get_attribute("title")
            assert "log-probability" in score and "length penalty" in score
            fonts = driver.execute_script("return document.fonts.check('16px NanumGothic', '가')")
            assert fonts, "the page's Korean font did not load"
            check_docs_page(driver, url, tmp_path)
    finally:
        driver.quit()
    assert shot.stat().st_size > 10_000


def test_several_lines_are_translated_line_by_line(translator, serve_sentences, tmp_path):
    """A paragraph pasted into the box was sent as one sentence, and the model translated its first line alone.
    Each line is now a sentence of its own; clicking a line of the translation shows its n-best list and heatmap (a
    blank line cannot be chosen)."""
    from selenium.webdriver.common.by import By
    driver = browser()
    lines = [serve_sentences[1], "", serve_sentences[2]]
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, "\n".join(lines) + "\n\n")
            assert driver.find_element(By.ID, "error").text == ""
            beam, nbest = (int(driver.find_element(By.ID, k).get_attribute("value")) for k in ("beam", "nbest"))
            api = httpx.post(url + "/translate", json={"text": lines, "beam_size": beam, "nbest": nbest}).json()
            shown = driver.find_elements(By.CSS_SELECTOR, "#translation .line")
            assert [d.text for d in shown] == [t["translation"] for t in api["translations"]]
            for i in (0, 2):
                if i:
                    shown[i].click()
                    wait_done(driver)
                hyps = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#nbest-list li .hyp")]
                assert hyps == [h["translation"] for h in api["translations"][i]["nbest"]]
                assert driver.find_element(By.ID, "nbest-of").text == f"(line {i + 1} of 3; click a line to choose)"
                assert shown[i].get_attribute("aria-selected") == "true"
                heads = "".join(th.text for th in driver.find_elements(By.CSS_SELECTOR, "#heatmap th.src"))
                pieces = httpx.post(url + "/attention", json={"text": lines[i]}).json()["src_pieces"]
                assert heads == "".join(pieces).replace(" ", "")
            shown[1].click()   # the blank line: nothing to choose (its empty n-best list did not match the label)
            assert driver.find_element(By.ID, "nbest-of").text == "(line 3 of 3; click a line to choose)"
            assert shown[2].get_attribute("aria-selected") == "true"
            save_screenshot(driver, tmp_path, "serve_page_lines.png")
    finally:
        driver.quit()


def test_line_breaks_the_text_box_shows_within_a_line_are_spaces(translator, serve_sentences):
    """Text pasted with U+2028 (LINE SEPARATOR) between two sentences was sent as one line, which the API refuses
    (text on 2 lines); then the page ended lines there, and at a vertical tab (Word's line break), NEL and the
    like, which the text box shows within a line: more translations than lines in sight, numbered otherwise. They are
    spaces now, and the result is what the API gives for the lines the box shows."""
    from selenium.webdriver.common.by import By
    driver = browser()
    first, second = serve_sentences[1], serve_sentences[2]
    typed = f"{first}\u2028{second}\n{second}\v{first}\x85{second}"
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, "x")
            driver.execute_script("document.getElementById('source').value = arguments[0];", typed)
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            assert driver.find_element(By.ID, "error").text == ""
            beam, nbest = (int(driver.find_element(By.ID, k).get_attribute("value")) for k in ("beam", "nbest"))
            seen = [f"{first} {second}", f"{second} {first} {second}"]
            api = httpx.post(url + "/translate", json={"text": seen, "beam_size": beam, "nbest": nbest}).json()
            shown = driver.find_elements(By.CSS_SELECTOR, "#translation .line")
            assert [d.text for d in shown] == [t["translation"] for t in api["translations"]]
    finally:
        driver.quit()


def copied(driver, element_id: str) -> str:
    """What Ctrl+C copies with the whole of an element selected, read back from the browser's clipboard."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    driver.execute_cdp_cmd("Browser.grantPermissions", {"permissions": ["clipboardReadWrite",
                                                                        "clipboardSanitizedWrite"]})
    driver.execute_script("const r = document.createRange(); r.selectNodeContents(document.getElementById("
                          "arguments[0])); getSelection().removeAllRanges(); getSelection().addRange(r);", element_id)
    ActionChains(driver).key_down(Keys.CONTROL).send_keys("c").key_up(Keys.CONTROL).perform()
    return driver.execute_async_script("navigator.clipboard.readText().then(arguments[0])")


def test_copied_translations_keep_their_lines_and_scores_apart(translator, serve_sentences):
    """Copying the translation left out its blank lines (empty elements), so pasted it no longer lined up with the
    source; a copied n-best item had its score glued to it ("today.-2.4629"); a translation of spaces alone showed
    as a blank line, not as "(empty translation)"."""
    from selenium.webdriver.common.by import By
    driver = browser()
    typed = [serve_sentences[1], "", "   ", serve_sentences[2]]
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, "x")
            set_source(driver, "\n".join(typed))
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            shown = [d.text for d in driver.find_elements(By.CSS_SELECTOR, "#translation .line")]
            assert copied(driver, "translation").split("\n") == shown and len(shown) == len(typed)
            assert shown[1:3] == ["", ""] and shown[0] and shown[3]
            items = driver.find_elements(By.CSS_SELECTOR, "#nbest-list li")
            scores = [li.find_element(By.CLASS_NAME, "score").text for li in items]
            hyps = [li.find_element(By.CLASS_NAME, "hyp").text for li in items]
            assert copied(driver, "nbest-list").split("\n") == [f"{h} {s}" for h, s in zip(hyps, scores)]
            driver.execute_script("showNbest([{translation: '   ', score: -1.5}]); showResult({lines: ['x y', 'z'], "
                                  "result: {translations: [{translation: '  '}, {translation: 'w'}], warnings: []}, "
                                  "langs: {src_lang: 'ko', tgt_lang: 'en'}})")
            assert content(driver, "nbest-list")["nbest-list"] == "(empty translation) -1.5000"
            label = driver.execute_script("return getComputedStyle(document.querySelector('#translation .line'), "
                                          "'::before').content")
            assert label == '"(empty translation)"'   # shown; copied, a blank line (pasted, it was the label)
            assert copied(driver, "translation") == "\nw"
    finally:
        driver.quit()


def test_line_breaks_within_the_prefix_box_are_spaces(translator, serve_sentences):
    """The "translation starts with" box sent U+2028, a vertical tab or NEL as typed, and the API refused the
    Translate ("has text on 2 lines: send each line as its own sentence"), where the source box makes them spaces."""
    from selenium.webdriver.common.by import By
    driver = browser()
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, "x")
            for typed in ("a\u2028b", "a\vb", "a\x85b"):
                driver.execute_script("document.getElementById('source').value = arguments[0]; "
                                      "document.getElementById('prefix').value = arguments[1];",
                                      serve_sentences[1], typed)
                driver.execute_script(FETCH_LOG)
                driver.find_element(By.ID, "go").click()
                wait_done(driver)
                assert driver.find_element(By.ID, "error").text == ""
                assert sent(driver, "/translate")[-1]["target_prefix"] in ("a b", ["a b"]), sent(driver, "/translate")
    finally:
        driver.quit()


def test_pointing_at_a_word_marks_the_words_it_is_aligned_with(translator, serve_sentences, tmp_path):
    """The page asks for word alignments: pointing at a word of the best translation marks it and the source words
    the API links it to, and the other way round; the heatmap shows that translation's attention; of a line the
    server cut, only the words up to the last linked one are shown (all were); an empty box is answered with a
    message, and the previous text's result no longer shows (it passed for the answer)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    driver = browser()
    sentence = max(serve_sentences[:10], key=lambda x: len(x.split()))
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, sentence)
            beam = int(driver.find_element(By.ID, "beam").get_attribute("value"))
            # the heatmap is the attention of the translation shown (the beam's best), row by row: of the pieces
            # the search wrote (its text split again may be others), which the page sends back
            driver.execute_script("window.sent = []; const f = window.fetch; window.fetch = (u, o) => "
                                  "(window.sent.push([String(u), o && o.body]), f(u, o));")
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            sent = {u.rsplit("/", 1)[-1]: json.loads(b) for u, b in driver.execute_script("return window.sent")}
            best = httpx.post(url + "/translate", json=sent["translate"]).json()["translations"][0]
            assert sent["attention"] == {"text": sentence, "pieces": best["pieces"], "src_lang": "ko",
                                         "tgt_lang": "en"}
            assert "alignment" not in sent["translate"]   # (every n-best item of every line: the /attention's now)
            assert driver.find_element(By.ID, "translation").text == best["translation"]
            rows = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#heatmap th.tgt")]
            assert rows == best["pieces"] + ["</s>"]
            links = httpx.post(url + "/translate", json={"text": [sentence], "beam_size": beam,
                                                         "alignment": True}).json()["translations"][0]["alignment"]
            src = driver.find_elements(By.CSS_SELECTOR, "#align-src button")
            tgt = driver.find_elements(By.CSS_SELECTOR, "#align-tgt button")
            assert [w.text for w in src] == sentence.split() and len(tgt) > 1 and links

            def marked(spans):
                return [k for k, w in enumerate(spans) if "linked" in w.get_attribute("class")]
            for j, word in enumerate(tgt):
                ActionChains(driver).move_to_element(word).perform()
                assert marked(tgt) == [j] and marked(src) == sorted(i for i, t in links if t == j)
            ActionChains(driver).move_to_element(src[0]).perform()
            assert marked(src) == [0] and marked(tgt) == sorted(t for i, t in links if i == 0)
            save_screenshot(driver, tmp_path, "serve_page_alignment.png")
            long = " ".join(serve_sentences * 4).split()[:200]   # over 250 pieces: the server cuts it
            set_source(driver, " ".join(long))
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            links = httpx.post(url + "/translate", json={"text": [" ".join(long)], "beam_size": beam,
                                                         "alignment": True}).json()["translations"][0]["alignment"]
            last = max(i for i, _ in links)
            assert last < len(long) - 1, "the line was not cut: the test shows nothing"
            src = driver.find_elements(By.CSS_SELECTOR, "#align-src button")
            assert [w.text for w in src] == long[:last + 1]
            assert "cut before translating" in driver.find_element(By.ID, "alignment-note").text
            box = driver.find_element(By.ID, "source")
            box.clear()
            box.send_keys("  \n")
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            assert driver.find_element(By.ID, "error").text == "Type a sentence to translate (one per line)."
            assert set(content(driver, *RESULT).values()) == {""}
    finally:
        driver.quit()


def test_ctrl_enter_waits_for_the_hangul_being_composed(translator, serve_sentences):
    """With a Korean IME, Ctrl+Enter pressed while a syllable is still being composed arrives as a keydown with
    isComposing (keyCode 229) before the syllable is in the box: translating then would drop it. The page waits
    for the keydown that follows the composition. Cmd+Enter (a Mac's) translates too."""
    from selenium.webdriver.common.by import By
    driver = browser()
    press = ("document.getElementById('source').dispatchEvent(new KeyboardEvent('keydown', "
             "{key: 'Enter', [arguments[1]]: true, isComposing: arguments[0], bubbles: true}));"
             "return document.body.dataset.state || '';")
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, serve_sentences[0])
            driver.execute_script("document.body.dataset.state = 'typing';")
            assert driver.execute_script(press, True, "ctrlKey") == "typing"
            assert driver.execute_script(press, False, "ctrlKey") == "busy"
            wait_done(driver)
            assert driver.find_element(By.ID, "translation").text
            driver.execute_script("document.body.dataset.state = 'typing';")
            assert driver.execute_script(press, False, "metaKey") == "busy"   # Cmd+Enter on a Mac
            wait_done(driver)
    finally:
        driver.quit()


def two_model_app(translator, model_dir):
    """An application with two models, so that the page shows its model selector: `translator` (ko->en), and the
    same model loaded again as if it translated en->ko (what it translates does not matter here)."""
    from nmt.serve.api import Service, create_app
    from nmt.serve.schema import Limits
    from nmt.translate import Translator

    class Reversed(Translator):
        src_lang, tgt_lang = "en", "ko"
    return create_app(Service([translator, Reversed.from_dir(model_dir)], Limits()))


def test_a_result_keeps_the_pair_it_was_translated_with(translator, serve_model, serve_sentences):
    """With two models, a translation still on its way when the model was changed was shown under the new model,
    and the page asked the new model for its attention (the audit saw a ko->en sentence drawn as en->ko byte
    pieces); a result shown stayed after the change. A change of model now clears the result and drops the
    translation on its way, closing its request, which had gone on holding the model for the next Translate; a late
    answer to an earlier Translate is still not shown over a newer one. The "translation starts with" box was
    marked English whatever the translation's language (Korean words read, spell-checked and typed as English)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
    driver = browser()
    first, second, third = serve_sentences[3:6]
    ko_en = {"src_lang": "ko", "tgt_lang": "en"}
    try:
        with background_server(two_model_app(translator, serve_model)) as url:
            open_page(driver, url)
            driver.execute_script(FETCH_LOG)
            model, go = Select(driver.find_element(By.ID, "model")), driver.find_element(By.ID, "go")
            set_source(driver, first)
            go.click()
            wait_settled(driver)
            assert driver.find_element(By.ID, "translation").text
            model.select_by_index(1)   # en -> ko: the ko -> en result goes
            assert set(content(driver, *RESULT).values()) == {""}
            # the boxes take the new pair's languages: the prefix, Korean words now, was marked English
            assert driver.execute_script("return ['source', 'prefix'].map((id) => [document.getElementById(id).lang,"
                                         " document.getElementById(id).placeholder])") == [
                ["en", "Type sentences, one per line"], ["ko", "선택: 번역의 첫 단어"]]

            model.select_by_index(0)
            driver.execute_script("window.hold()")
            set_source(driver, second)
            go.click()
            model.select_by_index(1)   # while ko -> en translates: its request is closed (the server stops it)
            assert driver.execute_script("return window.signals.at(-1).aborted") is True
            driver.execute_script("window.release()")
            wait_settled(driver)
            assert set(content(driver, *RESULT).values()) == {""}

            driver.execute_script("window.hold()")   # an en -> ko translation, dropped by the change of model...
            go.click()
            model.select_by_index(0)
            set_source(driver, third)
            go.click()   # ...and a ko -> en one, answered first (the other's request is closed, or its answer held)
            WebDriverWait(driver, 30).until(lambda d: d.execute_script(
                "return document.body.dataset.state === 'done' && document.getElementById('translation').textContent"))
            driver.execute_script("window.release()")
            wait_settled(driver)
            expected, late = api_translations(url, driver, [third, second], **ko_en)
            assert expected != late
            assert driver.find_element(By.ID, "translation").text == expected
            assert "(" + expected + ")" in driver.find_element(By.ID, "attention-note").text
            for body in sent(driver, "/attention"):   # each asked of the model of its translation: all ko -> en
                assert {k: body[k] for k in ko_en} == ko_en, body
    finally:
        driver.quit()


def test_choosing_a_line_while_translating_keeps_the_new_translation(translator, serve_sentences):
    """A click on a line of the previous result while a Translate ran threw the new translation away when it came
    (the click and the Translate shared one count of the newest action), and the page said it was done. A choice
    of line now drops only older choices of line, and the page stays busy until the translation is shown."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    driver = browser()
    old, new = serve_sentences[5:7], serve_sentences[7:10]
    try:
        with background_server(make_app(translator)) as url:
            open_page(driver, url)
            driver.execute_script(FETCH_LOG)
            set_source(driver, "\n".join(old))
            go = driver.find_element(By.ID, "go")
            go.click()
            wait_settled(driver)
            driver.execute_script("window.hold()")
            set_source(driver, "\n".join(new))
            go.click()
            driver.find_elements(By.CSS_SELECTOR, "#translation .line")[1].click()   # a line of the old result
            WebDriverWait(driver, 30).until(lambda d: d.execute_script("return window.pending === 1"))
            assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "busy"
            driver.execute_script("window.release()")
            wait_settled(driver)
            expected = api_translations(url, driver, new)
            assert [d.text for d in driver.find_elements(By.CSS_SELECTOR, "#translation .line")] == expected
            assert driver.find_element(By.ID, "error").text == ""
            assert "(" + expected[0] + ")" in driver.find_element(By.ID, "attention-note").text
    finally:
        driver.quit()


def test_while_translating_the_page_says_so_and_sends_one_request(translator, serve_sentences):
    """Nothing showed that a translation ran and the button stayed live: a double-click sent two requests (the
    server translated twice, and a 503 for the second replaced the first's answer). While a Translate runs the
    button now reads "Translating…", the previous result is dimmed and marked busy, and neither a second click nor
    Ctrl+Enter sends anything."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    driver = browser()
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, serve_sentences[0])
            driver.execute_script(FETCH_LOG + "window.hold();")
            set_source(driver, serve_sentences[1])
            go = driver.find_element(By.ID, "go")
            ActionChains(driver).double_click(go).perform()
            driver.find_element(By.ID, "source").send_keys(Keys.CONTROL, Keys.ENTER)
            assert len(sent(driver, "/translate")) == 1
            assert go.text == "Translating…" and go.get_attribute("aria-disabled") == "true"
            result = driver.find_element(By.ID, "result")
            assert result.get_attribute("aria-busy") == "true" and float(result.value_of_css_property("opacity")) < 1
            assert driver.find_element(By.TAG_NAME, "body").value_of_css_property("cursor") == "progress"
            driver.execute_script("window.release()")
            wait_settled(driver)
            assert len(sent(driver, "/translate")) == 1
            assert go.text == "Translate" and result.get_attribute("aria-busy") == "false"
            expected = api_translations(url, driver, [serve_sentences[1]])
            assert driver.find_element(By.ID, "translation").text == expected[0]
    finally:
        driver.quit()



def test_lines_clicked_through_leave_only_the_last_ones_attention_to_compute(translator, serve_sentences,
                                                                              monkeypatch):
    """Each line chosen sent its /attention, and a newer choice only dropped the older one's answer when it came:
    clicked through 20 times, the worker computed all 20 heatmaps one after the other (1.4 s each for a line of 3,000
    characters), and the page showed the last line's after 28 s. A newer choice now closes the older request, which
    the server drops while it waits (or never gets), so the last line's heatmap waits for one at most."""
    import time

    import nmt.plot
    from selenium.webdriver.common.by import By
    real, computed = nmt.plot.attention, []

    def slow(*args, **kw):
        computed.append(kw.get("pieces"))
        time.sleep(0.5)
        return real(*args, **kw)
    monkeypatch.setattr(nmt.plot, "attention", slow)
    driver = browser()
    lines = serve_sentences[:4]
    try:
        with background_server(make_app(translator, max_wait_ms=0)) as url:
            translate_on_page(driver, url, "\n".join(lines))
            driver.execute_script(FETCH_LOG)
            computed.clear()
            driver.execute_script("const shown = document.querySelectorAll('#translation .line');"
                                  "for (let k = 0; k < 12; k++) shown[k % 4].click();")   # (faster than a hand)
            wait_settled(driver)
            assert len(sent(driver, "/attention")) == 12
            assert driver.execute_script("return window.signals.map((s) => s && s.aborted)") == [True] * 11 + [False]
            assert len(computed) <= 2, f"{len(computed)} of 12 heatmaps computed"
            heads = "".join(th.text for th in driver.find_elements(By.CSS_SELECTOR, "#heatmap th.src"))
            pieces = httpx.post(url + "/attention", json={"text": lines[3]}).json()["src_pieces"]
            assert heads == "".join(pieces).replace(" ", "")
    finally:
        driver.quit()


def test_a_result_cleared_closes_the_attention_request_on_its_way(translator, serve_sentences, monkeypatch):
    """A result cleared (a Translate refused, a change of model) dropped the answer of the /attention on its way, as
    a newer choice of line does, but was not tested to close its request too, which then held the model's worker for
    a heatmap no longer shown."""
    import time

    import nmt.plot
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    real = nmt.plot.attention

    def slow(*args, **kw):
        time.sleep(1.0)
        return real(*args, **kw)
    monkeypatch.setattr(nmt.plot, "attention", slow)
    driver = browser()
    try:
        with background_server(make_app(translator, max_wait_ms=0)) as url:
            open_page(driver, url)
            driver.execute_script(FETCH_LOG)
            set_source(driver, serve_sentences[0])
            driver.find_element(By.ID, "go").click()
            WebDriverWait(driver, 30).until(lambda d: sent(d, "/attention"))   # the line's heatmap, on its way
            set_source(driver, "")
            driver.find_element(By.ID, "go").click()   # refused ("Type a sentence"): the result is cleared
            wait_settled(driver)
            assert driver.execute_script("return window.signals.filter((s, k) => window.sent[k][0] === '/attention')"
                                         ".map((s) => s.aborted)") == [True]
    finally:
        driver.quit()


def test_a_refused_translate_leaves_no_old_result_and_speaks_of_lines(translator, serve_sentences):
    """After a refusal the previous text's translation, n-best list, heatmap and warnings stayed under the error,
    as if they answered the new text; the API's words (text[0], requests) were shown as they are; and an empty
    beam was sent as 0. The old result now goes, messages speak of lines, and beam and n-best are checked first."""
    from selenium.webdriver.common.by import By
    driver = browser()
    try:
        with background_server(make_app(translator, max_sentences=2)) as url:
            open_page(driver, url)
            driver.execute_script(FETCH_LOG)
            set_source(driver, serve_sentences[0] + "\x07")   # a control character: the answer warns
            go = driver.find_element(By.ID, "go")
            go.click()
            wait_settled(driver)
            warnings = httpx.post(url + "/translate", json={"text": [serve_sentences[0] + "\x07"]}).json()["warnings"]
            assert warnings and warnings[0].startswith("text[0] ")
            assert driver.find_element(By.ID, "warnings").text == warnings[0].replace("text[0]", "line 1")

            set_source(driver, "\n".join(serve_sentences[1:4]))   # 3 lines; the server takes 2
            go.click()
            wait_settled(driver)
            error = driver.find_element(By.ID, "error").text
            assert error.startswith("the text has 3 lines; at most 2 ") and "request" not in error, error
            assert set(content(driver, *RESULT).values()) == {""}

            set_source(driver, serve_sentences[1])
            requests = len(sent(driver, "/translate"))
            beam, nbest = driver.find_element(By.ID, "beam"), driver.find_element(By.ID, "nbest")
            beam.clear()
            go.click()
            assert driver.find_element(By.ID, "error").text == "Beam must be a whole number from 1 to 16."
            beam.send_keys("2")
            nbest.clear()
            nbest.send_keys("3")
            go.click()
            assert driver.find_element(By.ID, "error").text == "N-best must be a whole number from 1 to 2 (the beam)."
            assert len(sent(driver, "/translate")) == requests
    finally:
        driver.quit()


# Over the page's fetch: /translate answers as a proxy does when its server is gone, with an HTML page
BAD_GATEWAY = ("const real = window.fetch; window.fetch = (path, init) => path !== 'translate' ? real(path, init) :"
               "Promise.resolve(new Response('<html><body>502 Bad Gateway</body></html>', "
               "{status: 502, statusText: 'Bad Gateway', headers: {'Content-Type': 'text/html'}}));")


# Over the page's fetch: /attention answers 200 with an object that lacks every field (another server's)
ATTENTION_ANSWERS_NOTHING = ("const real = window.fetch; window.fetch = (path, init) => path !== 'attention' ? "
                             "real(path, init) : Promise.resolve(new Response('{}', {status: 200, headers: "
                             "{'Content-Type': 'application/json'}}));")


# Over the page's fetch: /attention answers as a server whose handler failed (a 500 without JSON)
ATTENTION_FAILS = ("const real = window.fetch; window.fetch = (path, init) => path !== 'attention' ? real(path, "
                   "init) : Promise.resolve(new Response('Internal Server Error', {status: 500, statusText: "
                   "'Internal Server Error'}));")


def test_text_with_blank_lines_between_its_paragraphs_is_not_refused_for_them(translator, serve_sentences):
    """The blank lines between paragraphs counted toward the server's --max-sentences: 130 paragraphs with a blank
    line after each were refused as "the text has 259 lines; at most 256". Only lines with words count; the refusal
    of more says how many blank lines it left out."""
    from selenium.webdriver.common.by import By
    driver = browser()
    try:
        with background_server(make_app(translator, max_sentences=2)) as url:
            open_page(driver, url)
            driver.execute_script(FETCH_LOG)
            set_source(driver, "\n\n".join(serve_sentences[1:3]) + "\n\n")   # 2 paragraphs, 3 lines sent
            driver.find_element(By.ID, "go").click()
            wait_settled(driver)
            assert driver.find_element(By.ID, "error").text == "" and sent(driver, "/translate")[-1]["text"] == [
                serve_sentences[1], "", serve_sentences[2]]
            best = api_translations(url, driver, serve_sentences[1:3])
            assert [d.text for d in driver.find_elements(By.CSS_SELECTOR, "#translation > div")] == [
                best[0], "", best[1]]
            set_source(driver, "\n\n".join(serve_sentences[1:4]))
            driver.find_element(By.ID, "go").click()
            wait_settled(driver)
            assert driver.find_element(By.ID, "error").text == (
                "the text has 3 lines (not counting 2 blank lines); at most 2 at a time: split them into several "
                "parts (or translate files with nmt-translate)")
    finally:
        driver.quit()


def unavailable(driver, translation: str, why: str) -> None:
    """The page after a Translate whose /attention failed: the translation shown, no error, the word alignment and
    attention parts saying why they are missing."""
    from selenium.webdriver.common.by import By
    assert driver.find_element(By.ID, "translation").text == translation
    assert driver.find_element(By.ID, "error").text == "" and content(driver, "heatmap", "align-src") == \
        {"heatmap": "", "align-src": ""} and driver.execute_script("return document.body.dataset.state") == "done"
    assert content(driver, "alignment-note", "attention-note", "status") == {
        "alignment-note": f"The word alignment of this translation could not be loaded: {why}",
        "attention-note": f"The attention of this translation could not be loaded: {why}",
        "status": f"Translated. The word alignment and attention of the translation could not be loaded: {why}"}


def test_failed_requests_say_what_happened(translator, serve_sentences):
    """A request that got no answer showed "Failed to fetch", a non-JSON answer (a proxy's error page) the JSON
    parser's error, a failed /info nothing at all; and when /attention failed, the previous sentence's heatmap
    stayed under the new translation. Each now says what happened, and a failed heatmap leaves none. A failed
    /attention (no answer, or a 500) was a page error under a translation that had succeeded: the translation
    stands, its word alignment and attention say they are unavailable, and the page goes on working."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    driver = browser()
    unreachable = "Cannot reach the server (is nmt-serve still running?)"

    def block(*paths):   # requests to these paths fail in the browser, as when the server is down
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [f"*{p}" for p in paths]})
    try:
        with background_server(make_app(translator)) as url:
            driver.execute_cdp_cmd("Network.enable", {})
            block("/info")
            driver.get(url + "/")
            WebDriverWait(driver, 5).until(lambda d: d.find_element(By.ID, "error").text)
            assert driver.find_element(By.ID, "error").text == \
                f"The server's models could not be loaded from /info: {unreachable}"
            block()
            translate_on_page(driver, url, serve_sentences[0])
            assert driver.find_elements(By.CSS_SELECTOR, "#heatmap td")
            block("/attention")
            set_source(driver, serve_sentences[1])
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            expected = api_translations(url, driver, [serve_sentences[1]])
            unavailable(driver, expected[0], unreachable)
            block()
            driver.execute_script(ATTENTION_FAILS)   # the server answers /attention with a 500
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            unavailable(driver, expected[0], "the server answered 500 Internal Server Error")
            driver.execute_script(ATTENTION_ANSWERS_NOTHING)   # an answer the page cannot draw: not "unavailable"
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            assert driver.find_element(By.ID, "error").text and content(
                driver, "attention-note", "alignment-note", "status", "align-src", "heatmap") == {
                "attention-note": "", "alignment-note": "", "status": "Translated", "align-src": "", "heatmap": ""}
            block("/translate")
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            assert driver.find_element(By.ID, "error").text == unreachable
            assert set(content(driver, *RESULT).values()) == {""}
            block()
            driver.execute_script(BAD_GATEWAY)
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            assert driver.find_element(By.ID, "error").text == "the server answered 502 Bad Gateway"
    finally:
        driver.quit()


def test_lines_and_words_are_usable_by_keyboard_and_labelled(translator, serve_sentences):
    """The translation's lines and the alignment's words reacted to the mouse only, errors were not announced, the
    whole page was marked Korean and the text box had no label. Tab now reaches the chosen line, the arrow keys and
    Enter choose another, Tab goes on to the words (a focused word marks its links); the error is an alert; the page
    is English, and the source text, source pieces and translations carry their languages."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    driver = browser()
    lines = serve_sentences[5:7]
    try:
        with background_server(make_app(translator)) as url:
            open_page(driver, url)
            assert driver.execute_script("const s = document.getElementById('source');"
                                         "return [document.documentElement.lang, s.lang, s.labels.length]") \
                == ["en", "ko", 1]
            assert driver.find_element(By.ID, "error").get_attribute("role") == "alert"
            set_source(driver, "\n".join(lines))
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            langs = driver.execute_script(
                "const lang = (css) => document.querySelector(css).lang;"
                "return ['#translation', '#nbest-list', '#align-src', '#align-tgt', '#heatmap th.src',"
                "        '#heatmap th.tgt', '#prefix'].map(lang)")
            assert langs == ["en", "en", "ko", "en", "ko", "en", "en"]   # (the prefix's words: the translation's)
            expected = api_translations(url, driver, lines)
            driver.find_element(By.ID, "prefix").send_keys(Keys.TAB)
            line = driver.switch_to.active_element
            assert (line.get_attribute("role"), line.get_attribute("aria-selected"), line.text) == \
                ("option", "true", expected[0])
            line.send_keys(Keys.ARROW_DOWN)
            driver.switch_to.active_element.send_keys(Keys.ENTER)
            wait_done(driver)
            assert driver.find_element(By.ID, "nbest-of").text == "(line 2 of 2; click a line to choose)"
            line = driver.switch_to.active_element
            assert (line.get_attribute("aria-selected"), line.text) == ("true", expected[1])
            line.send_keys(Keys.TAB)
            word = driver.switch_to.active_element
            assert word == driver.find_elements(By.CSS_SELECTOR, "#align-src button")[0]
            assert "linked" in word.get_attribute("class")
            # a line whose alignment fails is said in the status, after the result's words, each time it fails; the
            # result's words alone once another line's alignment is shown
            driver.execute_script("window.realFetch = window.fetch; window.fetch = (path, init) => path === 'attention'"
                                  " ? Promise.resolve(new Response('', {status: 500, statusText: 'Internal Server "
                                  "Error'})) : window.realFetch(path, init);")
            said = ("Translated 2 lines. The word alignment and attention of line 1 could not be loaded: the server "
                    "answered 500 Internal Server Error")
            driver.execute_script("window.spoken = []; new MutationObserver(() => window.spoken.push(document"
                                  ".getElementById('status').textContent)).observe(document.getElementById('status'),"
                                  " {childList: true, characterData: true, subtree: true});")
            for _ in range(2):
                driver.find_elements(By.CSS_SELECTOR, "#translation .line")[0].click()
                wait_done(driver)
            assert driver.execute_script("return window.spoken") == [said, said]
            driver.execute_script("window.fetch = window.realFetch;")
            driver.find_elements(By.CSS_SELECTOR, "#translation .line")[1].click()
            wait_done(driver)
            assert content(driver, "status")["status"] == "Translated 2 lines" and content(driver, "heatmap")["heatmap"]
    finally:
        driver.quit()


def test_on_a_phone_only_the_heatmap_scrolls_sideways(translator, serve_sentences, tmp_path):
    """Without a viewport tag a phone laid the page out 980 pixels wide and showed it shrunk; and the heatmap of a
    long sentence, wider than the page, made the whole page scroll sideways. The page now takes the screen's width
    and the heatmap scrolls in its own box, its target pieces staying in view."""
    from selenium.webdriver.common.by import By
    driver = browser(phone=True)
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, " ".join(serve_sentences[:6]))
            save_screenshot(driver, tmp_path, "serve_page_phone.png")
            assert driver.find_element(By.ID, "error").text == ""
            assert driver.execute_script("return window.innerWidth") == 360
            page, heatmap = driver.execute_script(
                "const h = document.getElementById('heatmap'); h.scrollLeft = h.scrollWidth;"
                "return [document.documentElement.scrollWidth, [h.scrollWidth, h.clientWidth]];")
            assert page <= 360, f"the page is {page} pixels wide on a 360-pixel screen"
            assert heatmap[0] > heatmap[1] > 0, f"the heatmap fits the screen ({heatmap}): the test shows nothing"
            label = driver.find_element(By.CSS_SELECTOR, "#heatmap th.tgt")
            box = driver.find_element(By.ID, "heatmap")
            assert label.rect["x"] >= box.rect["x"] and label.text, "scrolled, the target pieces left the screen"
    finally:
        driver.quit()


def test_the_translation_can_be_made_to_start_with_given_words(translator, serve_sentences):
    """Words typed into "translation starts with" are forced as the translation's first words (the API's
    target_prefix), and Enter there translates."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
    driver = browser()
    sentence = serve_sentences[5]
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, sentence)
            free = driver.find_element(By.ID, "translation").text
            prefix = "ga ma"
            assert not free.startswith(prefix)
            driver.find_element(By.ID, "prefix").send_keys(prefix + Keys.ENTER)
            WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "translation").text != free)
            wait_done(driver)
            beam, nbest = (int(driver.find_element(By.ID, k).get_attribute("value")) for k in ("beam", "nbest"))
            api = httpx.post(url + "/translate", json={"text": [sentence], "beam_size": beam, "nbest": nbest,
                                                       "target_prefix": [prefix]}).json()["translations"][0]
            assert driver.find_element(By.ID, "translation").text == api["translation"]
            assert api["translation"].startswith(prefix)
            hyps = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#nbest-list li .hyp")]
            assert hyps == [h["translation"] for h in api["nbest"]]
    finally:
        driver.quit()


def test_with_several_lines_the_words_start_the_chosen_lines_translation(translator, serve_sentences):
    """The "starts with" box used to force its words on every line of a several-line input; it now applies to the
    line chosen in the translation (the first at first), and its label says which. Text with none of the lines it
    was chosen among kept the choice's number (a browser audit)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    driver = browser()
    lines = [serve_sentences[5], serve_sentences[6]]
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, "\n".join(lines))
            label = driver.find_element(By.ID, "prefix-label")
            assert label.text == "translation of line 1 starts with"
            beam, nbest = (int(driver.find_element(By.ID, k).get_attribute("value")) for k in ("beam", "nbest"))
            free = httpx.post(url + "/translate", json={"text": lines, "beam_size": beam,
                                                        "nbest": nbest}).json()["translations"]
            driver.find_elements(By.CSS_SELECTOR, "#translation .line")[1].click()
            wait_done(driver)
            assert label.text == "translation of line 2 starts with"
            prefix = "ga ma"
            assert not any(t["translation"].startswith(prefix) for t in free)
            driver.find_element(By.ID, "prefix").send_keys(prefix + Keys.ENTER)
            wait_done(driver)
            api = httpx.post(url + "/translate", json={"text": lines, "beam_size": beam, "nbest": nbest,
                                                       "target_prefix": ["", prefix]}).json()["translations"]
            shown = driver.find_elements(By.CSS_SELECTOR, "#translation .line")
            assert [d.text for d in shown] == [free[0]["translation"], api[1]["translation"]]
            assert api[1]["translation"].startswith(prefix) and shown[1].get_attribute("aria-selected") == "true"
            hyps = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#nbest-list li .hyp")]
            assert hyps == [h["translation"] for h in api[1]["nbest"]]
            driver.execute_script(   # a line added above the chosen one: the choice stays with its sentence
                "const s = document.getElementById('source'); s.value = arguments[0]; "
                "s.dispatchEvent(new Event('input'));", "\n".join([serve_sentences[7], *lines]))
            assert label.text == "translation of line 3 starts with"
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            shown = [d.text for d in driver.find_elements(By.CSS_SELECTOR, "#translation .line")]
            assert shown[2] == api[1]["translation"] and not shown[0].startswith(prefix)
            set_source(driver, "\n".join(serve_sentences[8:11]))   # new text: its first line, not its third
            assert label.text == "translation of line 1 starts with"
            twice = [serve_sentences[5], serve_sentences[6], serve_sentences[5]]   # the second copy chosen ...
            set_source(driver, "\n".join(twice))
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            driver.find_elements(By.CSS_SELECTOR, "#translation .line")[2].click()
            wait_done(driver)
            set_source(driver, "\n".join([serve_sentences[7], *twice]))   # ... stays chosen below a line added
            assert label.text == "translation of line 4 starts with"
            driver.find_element(By.ID, "source").send_keys(Keys.CONTROL, "a", Keys.DELETE, lines[0])
            assert label.text == "translation starts with"
    finally:
        driver.quit()


def test_invisible_lines_long_words_and_the_news_of_a_result(translator, serve_sentences):
    """What a second browser audit found: a line of a zero-width space counted as text (choosable, and choosing it
    asked /attention, which refused it in red); the arrow keys stopped on blank lines; a URL made the whole page
    scroll sideways; and a screen reader heard nothing when a result came. A third: the page's copy of what the
    server drops from a line had fallen behind (a Hangul filler, a direction mark or a lone joiner counted as a
    word, and the word alignment marked the word before the one linked); it now has the server's classes."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    driver = browser()
    url_word = "https://www.example.com/" + "averyveryverylongpathsegment/" * 5 + "index.html"
    lines = [serve_sentences[1], "\u200b \u3164 \u200d\ufe0f", f"{url_word} {serve_sentences[2]}"]
    try:
        with background_server(make_app(translator)) as url:
            open_page(driver, url)
            samples = [f"a{c}b c {c} d" for c in sorted(set(page_characters()))] + ["\u1112\u1161 \u1100",
                       "오늘\u200d 날씨 \u200d안녕", "1\ufe0f\u20e3 \U0001f468\u200d\U0001f469 \u2764\ufe0f",
                       "ＴＶ를 봐요．\uff01\uff5e \uff21\u200d가 \uff45\u200d\u0301",   # (full-width: folded)
                       "\x1b[31m빨강\x1b[0m a\x1b[Db \x1b]8;;u\x1b\\l\x1b]8;;\x07 \x1b(B\x9b0m. \x1b]0;t \x1b[",   # (colours)
                       "안녕\x1bOP하세요 \x1bOA \x1b7a\x1bbc\x1b8 \x1b=d\x1b> \x1b\\e \x1bP1 \x1bO",   # (F1, Alt+b, ...)
                       "안녕\x1bO하세요 가\x1bO 나 \x1bO1 \x1bN~다 \x1b[[E라",   # (ESC O, not SS3: alone; Linux F5)
                       "\x9bNext \x9b Products \x9b12 가 \x9b?25l\x9b0;1m굵게\x9b0 q",   # (U+009B: CSI if a parameter)
                       # (U+009D: OSC before a number only; curly quotes' UTF-8 read as Latin-1 hold it)
                       "\xe2\x80\x9cHi,\xe2\x80\x9d he said. \xe2\x80\x9c가\x9d2 나\x9c \x9d0;t\x9c\x9d8;;u\x07l"]
            assert driver.execute_script("return arguments[0].map(words)", samples) == [
                normalize(x).split() for x in samples]
            driver.execute_script("showNbest([{translation: '', score: -1.5}])")   # a model that ended at once
            assert content(driver, "nbest-list")["nbest-list"] == "(empty translation) -1.5000"
            driver.execute_script(FETCH_LOG)
            set_source(driver, "\n".join(lines))
            driver.find_element(By.ID, "go").click()
            wait_settled(driver)
            assert driver.find_element(By.ID, "error").text == ""
            shown = driver.find_elements(By.CSS_SELECTOR, "#translation .line")
            assert shown[1].get_attribute("aria-disabled") == "true"
            shown[0].click()
            wait_settled(driver)
            driver.switch_to.active_element.send_keys(Keys.ARROW_DOWN)   # over the blank line, to line 3
            assert driver.switch_to.active_element == shown[2]
            driver.switch_to.active_element.send_keys(Keys.ENTER)
            wait_settled(driver)
            assert [b["text"] for b in sent(driver, "/attention")] == [lines[0], lines[0], lines[2]]
            assert driver.find_element(By.ID, "error").text == ""
            width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], f"the page is {width[0]} pixels wide in a {width[1]}-pixel window"
            status = driver.find_element(By.ID, "status")
            assert status.get_attribute("role") == "status" and content(driver, "status")["status"].startswith(
                "Translated 3 lines")
    finally:
        driver.quit()


def test_the_heatmaps_warnings_are_shown_and_its_note_wraps(translator, serve_sentences):
    """/attention's warnings (its text or translation cut to max_input_tokens) were dropped by the page, which drew
    the cut heatmap without a word; and a long unbroken translation in the note under it (a URL, ",,,,") made the
    whole page scroll sideways, on a phone laid out wider than the screen."""
    import copy
    import dataclasses
    short = copy.copy(translator)   # the same model, its input limit below the translations' pieces
    short.decode = dataclasses.replace(translator.decode, max_input_tokens=3)
    driver = browser()
    try:
        with background_server(make_app(short)) as url:
            translate_on_page(driver, url, " ".join(serve_sentences[:3]))
            said = content(driver, "attention-note", "warnings")   # the line's cut: said once, in the page's words
            assert "line 1 has more than 3 subword tokens" in said["warnings"] and "Note:" not in \
                said["attention-note"], said
            cut = driver.execute_script("return pageWords(arguments[0])", "pieces has 7 items; truncated to its first "
                                        "6 (max_input_tokens), as nmt-translate cuts input lines")
            assert cut == "the translation has 7 pieces: the heatmap and the word alignment cover its first 6"
            late = driver.execute_script("return pageWords(arguments[0])", "the request took longer than the per-"
                                         "request limit of 3.0 s: send fewer sentences or a smaller beam_size, "
                                         "or retry later")
            assert late == ("the request took longer than the per-request limit of 3.0 s: send fewer lines or a "
                            "smaller beam, or retry later")
            driver.execute_script(   # a translation of more pieces than the limit: a cut /translate did not say
                "const p = shown.result.translations[0].pieces; while (p.length <= 3) p.push(...p); selectLine(0);")
            wait_done(driver)
            note = content(driver, "attention-note")["attention-note"]
            assert re.search(r"sum to 1\. Note: the translation has \d+ pieces: the heatmap and the word alignment "
                             r"cover its first 3\.$", note), note
            driver.execute_script("document.getElementById('attention-note').textContent += ','.repeat(3000)")
            width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], f"the page is {width[0]} pixels wide in a {width[1]}-pixel window"
    finally:
        driver.quit()


def test_the_heatmaps_byte_piece_warning_is_in_the_pages_words(translator):
    """/attention's warning of byte pieces its translation's text leaves out names the request's field ("pieces: 2
    byte piece(s) left out ..."), which the page has no field of: its note said "Note: pieces: 2 byte piece(s) ..."."""
    driver = browser()
    try:
        with background_server(make_app(translator)) as url:
            open_page(driver, url)
            said = driver.execute_script("return pageWords(arguments[0])", f"pieces: 2 {translator.LEFT_OUT}")
            assert said == f"2 {translator.LEFT_OUT}"
    finally:
        driver.quit()


def page_characters() -> str:
    """Every character of the classes the page gets from the server, a character either side of each range, and
    whitespace: what its words() must split and drop as nmt.text.normalize does."""
    from nmt.text import INVISIBLE, JOINERS
    out = [chr(c) for c in range(0x3001) if chr(c).isspace()]
    for pattern in (INVISIBLE.pattern, JOINERS.pattern):
        body = pattern[1:pattern.rindex("]")]
        for k, c in enumerate(body):
            if c != "-" and (k + 1 == len(body) or body[k + 1] != "-"):
                low = ord(body[k - 2]) if k >= 2 and body[k - 1] == "-" else ord(c)
                out += [chr(x) for x in range(max(low - 1, 1), ord(c) + 2) if not 0xd800 <= x <= 0xdfff]
    return "".join(out)


def test_a_test_score_of_another_checkpoint_is_named_with_it(translator):
    """/info gives the loaded checkpoint's recorded score, else another's (with its key): the page showed "BLEU 7.9"
    for a model serving --checkpoint latest, the score being the best checkpoint's."""
    app = make_app(translator)
    driver = browser()
    try:
        with background_server(app) as url:
            open_page(driver, url)
            got = driver.execute_script("""
                const base = models[0], out = [];
                for (const [scored, loaded, extra, served, step, settings] of arguments[0]) {
                  models[0] = {...base, checkpoint: served || "latest", step: step ?? null, best_test_score: {
                    bleu: 7.89, test_set: "t", checkpoint: scored, of_loaded_checkpoint: loaded, extra: extra,
                    at_loaded_settings: settings ?? true, beam_size: 5, length_penalty: 0.6}};
                  choose(0);
                  out.push(document.getElementById("pair").textContent.split(" · ").pop());
                }
                return out;""", [["best", True, {}], ["best", False, {}], ["6048", True, {}], ["6048", False, {}],
                                 ["ensemble-best:b+c", True, {}], ["ensemble-best:b", False, {}],
                                 ["best", True, {"bleu_ko_mecab": 9.63}], ["best", False, {}, "best"],
                                 ["ensemble-best:b", False, {}, "best"], ["6048", False, {}, "6048"],
                                 ["4697", False, {}, "latest", 4697], ["4662", False, {}, "best", 4662],
                                 ["best", True, {}, "best", None, False]])
    finally:
        driver.quit()
    # (--checkpoint latest, whose scores are recorded under its step: of the loaded checkpoint, named nothing)
    assert got == ["BLEU 7.9 (t)", "BLEU 7.9 (t, checkpoint best)", "BLEU 7.9 (t)", "BLEU 7.9 (t, checkpoint 6048)",
                   "BLEU 7.9 (t)", "BLEU 7.9 (t, checkpoint best)",
                   "BLEU 7.9, ko-mecab BLEU 9.6 (t)",   # Korean output's (its 13a BLEU counts only whole eojeol)
                   # another best than the one served (a new best since it was loaded, or another run's after
                   # --overwrite): it was "checkpoint best", the name of the one served
                   "BLEU 7.9 (t, another best than the one loaded)", "BLEU 7.9 (t, another best than the one loaded)",
                   "BLEU 7.9 (t, another 6048 than the one loaded)",
                   # served by another name than the score's key, its step (it was "checkpoint 4697", the one served)
                   "BLEU 7.9 (t, another 4697 than the one loaded)", "BLEU 7.9 (t, another 4662 than the one loaded)",
                   # the loaded checkpoint's, made at other settings (an export's config.json edited to beam 3): it
                   # was "another best than the one loaded"
                   "BLEU 7.9 (t, beam 5, length penalty 0.6)"]


@contextlib.contextmanager
def under_a_path(url: str, prefix: str = "/nmt"):
    """A reverse proxy on a free port that serves `url`'s server under `prefix` (as nginx's `location /nmt/`);
    yields its base URL with the prefix."""
    import http.server

    class Proxy(http.server.BaseHTTPRequestHandler):
        def relay(self):
            if not self.path.startswith(prefix + "/"):
                self.send_error(404)
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            r = httpx.request(self.command, url + self.path[len(prefix):], content=body or None,
                              headers={"Content-Type": self.headers.get("Content-Type", "text/plain")})
            self.send_response(r.status_code)
            self.send_header("Content-Type", r.headers.get("content-type", "text/plain"))
            self.end_headers()
            self.wfile.write(r.content)
        do_GET = do_POST = relay

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{prefix}"
    finally:
        server.shutdown()


def test_the_page_works_under_a_path_of_a_reverse_proxy(translator, serve_sentences, tmp_path):
    """Behind a proxy serving it under /nmt/ the page asked /info, /translate and the font at the site's root
    (404: "The server's models could not be loaded"); it asks by relative URLs now, and for no /favicon.ico."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    driver = browser()
    try:
        with background_server(make_app(translator)) as url, under_a_path(url) as proxied:
            translate_on_page(driver, proxied, serve_sentences[0])
            assert driver.find_element(By.ID, "error").text == ""
            expected = api_translations(url, driver, serve_sentences[:1])[0]
            assert driver.find_element(By.ID, "translation").text == expected
            assert driver.find_elements(By.CSS_SELECTOR, "#heatmap td")
            assert driver.execute_script("return document.fonts.check('16px NanumGothic', '가')")
            check_docs_page(driver, proxied, tmp_path)   # /docs too (it was blank: its files asked at the root)
            driver.find_element(By.CSS_SELECTOR, ".execute").click()   # and "Try it out" asks the server behind it
            status = ".live-responses-table tbody .response-col_status"
            code = WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, status))
            assert code[0].text.startswith("200"), code[0].text
    finally:
        driver.quit()
