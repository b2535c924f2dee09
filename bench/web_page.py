"""kmt-serve's web page in Chromium: its weight, and the time from the last keypress to the translation shown.

A kmt-serve process serves EXPORT_DIR (a CTranslate2 int8 directory for the docs' figure); Playwright drives Debian's
Chromium (`apt-get install chromium`) to its page, types SENTENCE a key at a time, and the page itself records when
the last key went down and when the translation appeared (a MutationObserver on the output): `--repeats` rounds,
each with a different last word so that no answer is cached anywhere. The debounce (the page waits for a pause in
typing) is part of the time, as a user sees it.

    kmt-export RUN_DIR --format ctranslate2 --quantization int8
    python bench/web_page.py RUN_DIR/ctranslate2_int8 --languages en-de --repeats 9
"""

import argparse
import shutil
import sys

from common import hardware, median, print_json, print_table  # bench/ is on sys.path
from serve_load import Server

SENTENCE = "A young man in a red jacket and a black hat is standing on the sidewalk next to a small dog"  # 20 words
LAST_WORDS = ("today", "outside", "again", "tonight", "there", "alone", "here", "now", "quietly", "still", "later")
WATCH = """() => {
    const output = document.querySelector('#output');
    window.__shown = null;
    window.__lastKey = null;
    document.querySelector('#q').addEventListener('keydown', () => { window.__lastKey = performance.now(); });
    new MutationObserver(() => {
        const done = window.__expected !== undefined && output.textContent === window.__expected;
        if (done) window.__shown = performance.now();
    }).observe(output, { childList: true, subtree: true, characterData: true });
}"""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export", metavar="EXPORT_DIR", help="what kmt-serve serves (a CTranslate2 int8 directory)")
    parser.add_argument("--languages", help="kmt-serve --languages SOURCE-TARGET, for an export outside a run")
    parser.add_argument("--repeats", type=int, default=9, help="rounds typed (default: 9)")
    parser.add_argument("--delay-ms", type=float, default=40, help="time between keys while typing (default: 40)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from playwright.sync_api import sync_playwright

    browser_path = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    if browser_path is None:
        raise SystemExit("bench/web_page.py: no Chromium found: apt-get install chromium")
    server = Server(args.export, ["--languages", args.languages] if args.languages else [])
    url, rows, weight = f"http://127.0.0.1:{server.port}", [], {}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=browser_path)
            page = browser.new_page()
            page.on("response", lambda r: r.request.method == "GET" and weight.setdefault(r.url, len(r.body())))
            page.goto(url + "/")
            page.wait_for_selector("#target option", state="attached")
            page.evaluate(WATCH)
            for round_ in range(args.repeats + 1):  # round 0 warms the route up, untimed
                text = f"{SENTENCE} {LAST_WORDS[round_ % len(LAST_WORDS)]}"
                answer = page.request.post(
                    url + "/translate",
                    data={"q": text, "source": page.input_value("#source"), "target": page.input_value("#target")},
                ).json()
                page.fill("#q", "")
                expect = "expected => { window.__expected = expected; window.__shown = null; }"
                page.evaluate(expect, answer["translatedText"])
                page.locator("#q").press_sequentially(text, delay=args.delay_ms)
                for _ in range(3000):  # the page's CSP forbids wait_for_function's eval: poll, 10 ms a look
                    if page.evaluate("window.__shown") is not None:
                        break
                    page.wait_for_timeout(10)
                if round_:
                    rows.append(page.evaluate("window.__shown - window.__lastKey"))
            browser.close()
    finally:
        server.stop()
    page_bytes = sum(size for address, size in weight.items() if address.startswith(url) and "/static/" in address)
    page_bytes += sum(size for address, size in weight.items() if address.rstrip("/") == url)
    table = [
        {
            "what": "last keypress to translation shown, ms",
            "median": median(rows),
            "min": min(rows),
            "max": max(rows),
            "rounds": len(rows),
        }
    ]
    print(f"kmt-serve's web page in Chromium, {args.export}, on {hardware()}; page weight {page_bytes:,} bytes")
    print_table(table, ["what", "median", "min", "max", "rounds"])
    print_json("web_page", export=str(args.export), page_bytes=page_bytes, latencies_ms=rows, sentence=SENTENCE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
