"""kmt-serve's web page (kmt/serving/frontend/): small and self-contained, and used in Debian's Chromium through
Playwright as a user would, against a real kmt-serve on 127.0.0.1."""

import os
import re
import shutil
import urllib.parse
from pathlib import Path

import pytest

FRONTEND = Path(__file__).parents[1] / "kmt" / "serving" / "frontend"
SCREENSHOT = Path(__file__).parents[1] / "docs" / "img" / "web-page.png"  # made with KMT_SCREENSHOT_RUN
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def test_the_page_is_small_self_contained_and_inserts_text_as_text():
    files = {path.name: path.read_text() for path in FRONTEND.iterdir()}
    assert set(files) == {"index.html", "app.js", "style.css"}
    assert sum(len(text.encode()) for text in files.values()) < 150_000
    for name, text in files.items():
        assert not re.search(r"https?://|@import|url\(|@font-face", text), name  # nothing fetched from elsewhere
    html = files["index.html"]
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/app.js" defer>']  # no inline script
    assert not re.search(r"\s(on\w+|style)=", html)  # no inline handlers or styles (the CSP forbids them)
    for unsafe in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert unsafe not in files["app.js"], unsafe


def _contrast(one, other):
    """WCAG's contrast ratio of two CSS `rgb(...)` colours."""

    def luminance(colour):
        channels = [int(c) / 255 for c in re.findall(r"\d+", colour)[:3]]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(one), luminance(other)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.mark.e2e
def test_the_page_translates_as_the_api_does_in_a_real_browser(smoke_run, tmp_path):
    from docx import Document
    from playwright.sync_api import expect, sync_playwright

    from kmt.cli import export
    from tests.test_serve import Server

    browser_path = next(filter(None, map(shutil.which, CHROMIUM)), None)
    if browser_path is None:
        pytest.fail("no Chromium: apt-get install chromium (.ci/run installs it)")
    # KMT_SCREENSHOT_RUN=RUN_DIR (a Multi30k en-de run): that model answers en-de, and docs/images/web-page.png is made
    screenshot_run = os.environ.get("KMT_SCREENSHOT_RUN")
    export.main([screenshot_run or str(smoke_run), "--beam-size", "3", "--output", str(tmp_path / "beam")])
    (tmp_path / "keys").write_text("k1\n")
    models = [f"--model=en-de={tmp_path / 'beam'}", "--model", f"de-en={smoke_run / 'export'}"]
    running = Server(*models, "--api-keys", tmp_path / "keys", "--max-chars", "300")

    def api(**params):
        status, _, body = running.post("/translate", {"api_key": "k1", **params})
        assert status == 200, body
        return body

    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=browser_path)
            context = browser.new_context(viewport={"width": 1200, "height": 860})
            context.grant_permissions(["clipboard-read", "clipboard-write"], origin=running.url)
            page = context.new_page()
            requested, dialogs, problems = [], [], []
            page.on("request", lambda request: requested.append(request.url))
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on("console", lambda message: message.type == "error" and problems.append(message.text))
            response = page.goto(running.url + "/")
            assert "script-src 'self'" in response.headers["content-security-policy"]
            output, source_text = page.locator("#output"), page.locator("#q")

            # A server that requires keys: the field shows, and the API's error is the page's message
            expect(page.locator("#key-box")).to_be_visible()
            expect(page.locator("#source")).to_have_value("en")
            expect(page.locator("#target")).to_have_value("de")
            source_text.fill("5 May 1999")
            expect(page.locator("#error")).to_have_text("Please contact the server operator to get an API key")
            page.locator("#api-key").fill("k1")
            page.locator("#api-key").press("Tab")
            expected = api(q="5 May 1999", source="en", target="de")  # LibreTranslate's plain call
            expect(output).to_have_text(expected["translatedText"])
            expect(page.locator("#error")).to_be_hidden()
            expect(page.locator("#counter")).to_have_text("10 / 300 characters")

            # Typing fast: several requests race, and the last text's answer is the one shown
            before = sum(url.endswith("/translate") for url in requested)
            source_text.fill("")
            source_text.press_sequentially("July 4, 2021", delay=170)
            last = api(q="July 4, 2021", source="en", target="de", alignments=True)
            assert last["translatedText"] == api(q="July 4, 2021", source="en", target="de")["translatedText"]
            expect(output).to_have_text(last["translatedText"])
            page.wait_for_timeout(500)
            expect(output).to_have_text(last["translatedText"])
            assert sum(url.endswith("/translate") for url in requested) - before > 3

            # The alignment: a target word lights its source words, and a source word its target words
            links = [tuple(map(int, link.split("-"))) for link in last["alignment"].split()]
            assert links
            lit = lambda side: sorted(  # noqa: E731
                int(i) for i in page.locator(f"#{side} .word.lit").evaluate_all("els => els.map(e => e.dataset.index)")
            )
            i, j = links[0]
            page.locator(f'#output .word[data-index="{j}"]').hover()
            assert lit("source-words") == sorted({s for s, t in links if t == j})
            page.locator(f'#source-words .word[data-index="{i}"]').focus()
            assert lit("output") == sorted({t for s, t in links if s == i})
            page.mouse.move(0, 0)
            page.locator("#q").focus()
            if screenshot_run:
                source_text.fill("A man in a blue shirt is standing on a ladder and cleaning a window.")
                expect(page.locator("#source-box")).to_be_visible()
                page.wait_for_timeout(1000)
                page.locator('#output .word[data-index="2"]').hover()
                page.set_viewport_size({"width": 1100, "height": 560})
                page.screenshot(path=SCREENSHOT)
                source_text.fill("July 4, 2021")
                expect(output).to_have_text(last["translatedText"])
                page.set_viewport_size({"width": 1200, "height": 860})

            # Alternatives, on request, are the API's
            page.locator("#alternatives-button").click()
            alternatives = api(q="July 4, 2021", source="en", target="de", alternatives=2)["alternatives"]
            expect(page.locator("#alternatives button")).to_have_text(alternatives)

            # Copy
            page.locator("#copy").click()
            assert page.evaluate("navigator.clipboard.readText()") == last["translatedText"]

            # Swap: the languages trade places and the translation becomes the source
            page.locator("#swap").click()
            expect(page.locator("#source")).to_have_value("de")
            expect(page.locator("#target")).to_have_value("en")
            expect(source_text).to_have_value(last["translatedText"])
            back = api(q=last["translatedText"], source="de", target="en")["translatedText"]
            expect(output).to_have_text(back)

            # Markup typed into the page stays text, in text and in HTML mode
            attack = '<img src=x onerror="alert(1)"><b onmouseover="alert(2)">5 May 1999</b>'
            source_text.fill(attack)
            expect(output).to_have_text(api(q=attack, source="de", target="en")["translatedText"])
            page.locator('input[name="format"][value="html"]').check()
            in_html = api(q=attack, source="de", target="en", format="html")["translatedText"]
            expect(output).to_have_text(in_html)
            page.locator("#output").hover()
            assert page.locator("img, main b").count() == 0 and dialogs == []
            page.locator('input[name="format"][value="text"]').check()

            # Files: a .txt and a .docx uploaded and their translations downloaded; an unsupported file's error
            page.locator("#tab-files").click()
            (tmp_path / "dates.txt").write_text("5 May 1999\n\nJuly 4, 2021\n")
            document = Document()
            document.add_paragraph("5 May 1999")
            document.save(tmp_path / "dates.docx")
            (tmp_path / "scan.pdf").write_bytes(b"%PDF-1.4")
            dates = ("5 May 1999", "July 4, 2021")
            translated = {t: api(q=t, source="de", target="en")["translatedText"] for t in dates}
            for name in ("dates.txt", "dates.docx"):
                page.locator("#file").set_input_files(tmp_path / name)
                page.locator("#translate-file").click()
                expect(page.locator("#download")).to_be_visible(timeout=60_000)
                with page.expect_download() as download:
                    page.locator("#download").click()
                saved = tmp_path / f"translated-{name}"
                download.value.save_as(saved)
                if name.endswith(".txt"):
                    assert saved.read_text() == f"{translated['5 May 1999']}\n\n{translated['July 4, 2021']}\n"
                else:
                    assert [p.text for p in Document(saved).paragraphs] == [translated["5 May 1999"]]
            page.locator("#file").set_input_files(tmp_path / "scan.pdf")
            page.locator("#translate-file").click()
            expect(page.locator("#error")).to_have_text("Invalid request: file format not supported")
            expect(page.locator("#download")).to_be_hidden()

            # The languages and the key are kept across a reload
            page.reload()
            expect(page.locator("#source")).to_have_value("de")
            expect(page.locator("#api-key")).to_have_value("k1")

            # Keyboard only: every control is reached with Tab, labelled, and its focus visible
            page.evaluate("document.activeElement.blur()")
            reached = {}
            for _ in range(12):
                page.keyboard.press("Tab")
                name, outline = page.evaluate(
                    "[document.activeElement.id || document.activeElement.name, "
                    "getComputedStyle(document.activeElement).outlineStyle]"
                )
                reached[name] = outline
            controls = ("api-key", "tab-text", "source", "swap", "target", "format", "q")
            assert all(reached.get(name, "none") != "none" for name in controls), reached
            unlabelled = page.evaluate(
                """() => [...document.querySelectorAll('button, select, input, textarea')].filter(e =>
                    !((e.labels && e.labels.length) || e.getAttribute('aria-label') || e.textContent.trim())
                ).map(e => e.id)"""
            )
            assert unlabelled == []
            # Contrast in light and dark mode (which follows the system's)
            for scheme in ("light", "dark"):
                page.emulate_media(color_scheme=scheme)
                colours = page.evaluate(
                    """() => [document.body, document.querySelector('#output')].map(e => {
                        const s = getComputedStyle(e); return [s.color, s.backgroundColor]; })"""
                )
                assert all(_contrast(*pair) >= 4.5 for pair in colours), (scheme, colours)
            assert page.evaluate("getComputedStyle(document.body).backgroundColor") != "rgb(255, 255, 255)"
            page.emulate_media(color_scheme="light")

            # Phone width: one column, nothing wider than the screen
            page.set_viewport_size({"width": 360, "height": 740})
            page.locator("#tab-text").click()
            assert page.evaluate("document.documentElement.scrollWidth") <= 360
            below = page.evaluate(
                "document.querySelector('#output').getBoundingClientRect().top >= "
                "document.querySelector('#q').getBoundingClientRect().bottom"
            )
            assert below

            origin = urllib.parse.urlsplit(running.url)
            elsewhere = [url for url in requested if urllib.parse.urlsplit(url)[:2] != origin[:2]]
            assert all(url.startswith("data:") for url in elsewhere), elsewhere
            assert problems == [] or all("status of 4" in p for p in problems), problems
            browser.close()
    finally:
        assert running.stop() == 0
