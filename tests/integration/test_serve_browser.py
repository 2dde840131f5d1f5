"""The web page in a real headless Chromium (Debian's `chromium` and `chromium-driver`, driven by selenium): it
types a Korean sentence, waits for the result, checks it equals the API's answer, that the n-best list and the
attention heatmap are shown, that pointing at a word marks the words it is aligned with, that several lines are
translated line by line, that words typed into "translation starts with" begin the chosen line's translation,
that /docs renders offline, and saves screenshots (in the test's tmp dir, and in
$NMT_ARTIFACTS when set; docs/images/serve_page.png is serve_page_alignment.png)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

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
    from selenium.webdriver.support.ui import WebDriverWait
    driver.get(url + "/")
    WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "pair").text)   # /info loaded
    box = driver.find_element(By.ID, "source")
    box.clear()
    box.send_keys(sentence)
    driver.find_element(By.ID, "go").click()
    wait_done(driver)


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


def test_page_shows_the_api_translation_nbest_and_heatmap(translator, serve_sentences, tmp_path):
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
            fonts = driver.execute_script("return document.fonts.check('16px NanumGothic', '가')")
            assert fonts, "the page's Korean font did not load"
            check_docs_page(driver, url, tmp_path)
    finally:
        driver.quit()
    assert shot.stat().st_size > 10_000


def test_several_lines_are_translated_line_by_line(translator, serve_sentences, tmp_path):
    """A paragraph pasted into the box was sent as one sentence, and the model translated its first line alone.
    Each line is now a sentence of its own; clicking a line of the translation shows its n-best list and heatmap."""
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
                assert "selected" in shown[i].get_attribute("class")
                heads = "".join(th.text for th in driver.find_elements(By.CSS_SELECTOR, "#heatmap th.src"))
                pieces = httpx.post(url + "/attention", json={"text": lines[i]}).json()["src_pieces"]
                assert heads == "".join(pieces).replace(" ", "")
            save_screenshot(driver, tmp_path, "serve_page_lines.png")
    finally:
        driver.quit()


def test_a_line_separator_in_pasted_text_ends_a_line(translator, serve_sentences):
    """Text pasted with U+2028 (LINE SEPARATOR) between two sentences was sent as one line, which the API refuses
    (text on 2 lines): the page now ends lines where the API does."""
    from selenium.webdriver.common.by import By
    driver = browser()
    lines = [serve_sentences[1], serve_sentences[2]]
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, "x")
            driver.execute_script("document.getElementById('source').value = arguments[0];", "\u2028".join(lines))
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            assert driver.find_element(By.ID, "error").text == ""
            beam, nbest = (int(driver.find_element(By.ID, k).get_attribute("value")) for k in ("beam", "nbest"))
            api = httpx.post(url + "/translate", json={"text": lines, "beam_size": beam, "nbest": nbest}).json()
            shown = driver.find_elements(By.CSS_SELECTOR, "#translation .line")
            assert [d.text for d in shown] == [t["translation"] for t in api["translations"]]
    finally:
        driver.quit()


def test_pointing_at_a_word_marks_the_words_it_is_aligned_with(translator, serve_sentences, tmp_path):
    """The page asks for word alignments: pointing at a word of the best translation marks it and the source words
    the API links it to, and the other way round; the heatmap shows that translation's attention; an empty box is
    answered with a message, not a blank result."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    driver = browser()
    sentence = max(serve_sentences[:10], key=lambda x: len(x.split()))
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, sentence)
            beam = int(driver.find_element(By.ID, "beam").get_attribute("value"))
            links = httpx.post(url + "/translate", json={"text": [sentence], "beam_size": beam,
                                                         "alignment": True}).json()["translations"][0]["alignment"]
            src = driver.find_elements(By.CSS_SELECTOR, "#align-src span")
            tgt = driver.find_elements(By.CSS_SELECTOR, "#align-tgt span")
            assert [w.text for w in src] == sentence.split() and len(tgt) > 1 and links
            # the heatmap is the attention of the translation shown (the beam's best), row by row
            shown = driver.find_element(By.ID, "translation").text
            rows = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#heatmap th.tgt")]
            assert rows == [p.replace("\u2581", "_") for p in translator.tgt_tok.pieces(shown)] + ["</s>"]

            def marked(spans):
                return [k for k, w in enumerate(spans) if "linked" in w.get_attribute("class")]
            for j, word in enumerate(tgt):
                ActionChains(driver).move_to_element(word).perform()
                assert marked(tgt) == [j] and marked(src) == sorted(i for i, t in links if t == j)
            ActionChains(driver).move_to_element(src[0]).perform()
            assert marked(src) == [0] and marked(tgt) == sorted(t for i, t in links if i == 0)
            save_screenshot(driver, tmp_path, "serve_page_alignment.png")
            box = driver.find_element(By.ID, "source")
            box.clear()
            box.send_keys("  \n")
            driver.find_element(By.ID, "go").click()
            wait_done(driver)
            assert driver.find_element(By.ID, "error").text == "Type a sentence to translate (one per line)."
    finally:
        driver.quit()


def test_ctrl_enter_waits_for_the_hangul_being_composed(translator, serve_sentences):
    """With a Korean IME, Ctrl+Enter pressed while a syllable is still being composed arrives as a keydown with
    isComposing (keyCode 229) before the syllable is in the box: translating then would drop it. The page waits
    for the keydown that follows the composition."""
    from selenium.webdriver.common.by import By
    driver = browser()
    press = ("document.getElementById('source').dispatchEvent(new KeyboardEvent('keydown', "
             "{key: 'Enter', ctrlKey: true, isComposing: arguments[0], bubbles: true}));"
             "return document.body.dataset.state || '';")
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, serve_sentences[0])
            driver.execute_script("document.body.dataset.state = 'typing';")
            assert driver.execute_script(press, True) == "typing"
            assert driver.execute_script(press, False) == "busy"
            wait_done(driver)
            assert driver.find_element(By.ID, "translation").text
    finally:
        driver.quit()


def test_a_late_answer_to_an_earlier_request_is_not_shown(translator, serve_sentences):
    """Translate pressed twice: when the first answer arrives after the second (here held back 1.5 s in the page's
    fetch), the page went on to show it under the second text. The newest request wins."""
    import time
    from selenium.webdriver.common.by import By
    driver = browser()
    hold_first = ("const real = window.fetch; let n = 0;"
                  "window.fetch = async (path, opts) => { const k = n++; const r = await real(path, opts);"
                  "  if (k === 0) await new Promise((ok) => setTimeout(ok, 1500)); return r; };")
    first, second = serve_sentences[3], serve_sentences[4]
    try:
        with background_server(make_app(translator)) as url:
            translate_on_page(driver, url, "")   # the page loaded
            driver.execute_script(hold_first)
            box = driver.find_element(By.ID, "source")
            for sentence in (first, second):
                box.clear()
                box.send_keys(sentence)
                driver.find_element(By.ID, "go").click()
            wait_done(driver)
            time.sleep(2.5)   # the first answer has arrived by now
            beam = int(driver.find_element(By.ID, "beam").get_attribute("value"))
            api = httpx.post(url + "/translate", json={"text": [first, second], "beam_size": beam}).json()
            expected = [t["translation"] for t in api["translations"]]
            assert expected[0] != expected[1]
            assert driver.find_element(By.ID, "translation").text == expected[1]
            assert "(" + expected[1] + ")" in driver.find_element(By.ID, "attention-note").text
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
    line chosen in the translation (the first at first), and its label says which."""
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
            assert api[1]["translation"].startswith(prefix) and "selected" in shown[1].get_attribute("class")
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
            driver.find_element(By.ID, "source").send_keys(Keys.CONTROL, "a", Keys.DELETE, lines[0])
            assert label.text == "translation starts with"
    finally:
        driver.quit()
