"""The web page in a real headless Chromium (Debian's `chromium` and `chromium-driver`, driven by selenium): it
types a Korean sentence, waits for the result, checks it equals the API's answer, that the n-best list and the
attention heatmap are shown, that /docs renders offline, and saves a screenshot (in the test's tmp dir, and in $NMT_ARTIFACTS when set)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from nmt.serve.cli import background_server
from tests.integration.serve_app import make_app

CHROMIUM = os.environ.get("NMT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("NMT_CHROMEDRIVER", "/usr/bin/chromedriver")


def browser():
    """A headless Chromium under selenium; skips the test with the reason when either is missing."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    if missing:
        pytest.skip(f"no browser: {', '.join(missing)} not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (requirements/dev.txt)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1000,1050", "--lang=ko"):
        opts.add_argument(arg)
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
