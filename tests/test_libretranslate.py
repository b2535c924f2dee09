"""LibreTranslate's API on kmt-serve (`kmt.serving.libretranslate`): its request parsing, then a real client
(libretranslatepy) and LibreTranslate's documented calls against a real server."""

import json
import subprocess
import urllib.parse
import urllib.request

import pytest
from lxml import html as lxml_html

from kmt.serving.languages import Detector, Pair
from kmt.serving.protocol import RequestError, joined, lines_of, parse_form_or_json, parse_translate_body, texts


def test_a_body_with_q_is_libretranslates_as_json_or_as_a_form():
    form = urllib.parse.urlencode({"q": "A dog.\r\nA cat.", "source": "en", "target": "de"}).encode()
    assert parse_translate_body(form, "application/x-www-form-urlencoded") == (
        {"q": "A dog.\nA cat.", "source": "en", "target": "de"},
        True,
    )
    body = json.dumps({"q": ["a", "b"], "source": "auto", "target": "de"}).encode()
    for content_type in ("application/json", "application/x-www-form-urlencoded", ""):
        assert parse_translate_body(body, content_type) == ({"q": ["a", "b"], "source": "auto", "target": "de"}, True)
    # kmt's own, as curl sends it
    assert parse_translate_body(b'{"text": ["a"]}', "application/x-www-form-urlencoded") == ({"text": ["a"]}, False)
    for bad in (b"text=a", b"[1]", b"\xff"):
        with pytest.raises(RequestError, match="^malformed JSON|must be a JSON object"):
            parse_translate_body(bad, "application/x-www-form-urlencoded")
    with pytest.raises(RequestError, match="^Invalid JSON format$"):
        parse_form_or_json(b"[1]", "application/json")


def test_texts_are_checked_as_libretranslate_checks_them_and_split_into_lines():
    assert texts({"q": "Cafe\u0301"}, 100) == (["Café"], False)  # NFC
    assert texts({"q": ["a", "b"]}, 100) == (["a", "b"], True)
    for params, message in [
        ({}, "Invalid request: missing q parameter"),
        ({"q": ""}, "Invalid request: missing q parameter"),
        ({"q": "x" * 11}, r"Invalid request: request \(11\) exceeds text limit \(10\)"),
        ({"q": [1]}, "Invalid request: q must be a string or a list of strings"),
    ]:
        with pytest.raises(RequestError, match=f"^{message}$"):
            texts(params, 10)
    lines, spans = lines_of(["one\ntwo", "", "three"])
    assert lines == ["one", "two", "", "three"] and joined([s.upper() for s in lines], spans) == [
        "ONE\nTWO",
        "",
        "THREE",
    ]


def test_a_pair_is_two_codes_and_detection_keeps_to_the_languages_served():
    assert Pair.parse("EN-de") == Pair("en", "de") and str(Pair("en", "de")) == "en-de"
    for bad in ("en", "en-en", "en-d3", "-de"):
        with pytest.raises(ValueError, match="a language pair is two language codes joined by '-'"):
            Pair.parse(bad)
    detect = Detector(["en", "de"])
    assert detect("Ein Mann schläft auf einer Bank im Park.")[0] == "de"
    assert detect("A man is sleeping on a bench in the park.")[0] == "en"
    assert detect("Un homme dort sur un banc.")[0] in ("en", "de")  # French is not served: never answered
    assert Detector(["en"])("anything") == ("en", 100.0)


@pytest.mark.e2e
def test_libretranslates_client_and_documented_calls_get_libretranslates_answers(smoke_run, tmp_path):
    from libretranslatepy import LibreTranslateAPI

    from kmt.cli import export
    from tests.test_serve import Server

    export.main([str(smoke_run), "--beam-size", "3", "--output", str(tmp_path / "beam")])
    (tmp_path / "keys").write_text("k1\nk2\n")
    # Two models, each a language pair: the dates model twice, once with a beam, once greedy as "fr-en"
    models = [f"--model=en-de={tmp_path / 'beam'}", "--model", f"fr-en={smoke_run / 'export'}"]
    limits = ["--req-limit", "40", "--max-file-bytes", "1000", "--file-ttl-s", "600"]
    running = Server(*models, "--api-keys", tmp_path / "keys", *limits, "--no-frontend")
    try:
        plain = running.post("/v1/models/en-de:predict", {"instances": ["5 May 1999", "July 4, 2021"]})[2]
        expected = [p["translation"] for p in plain["predictions"]]
        greedy = running.post("/v1/models/fr-en:predict", {"instances": ["5 May 1999"]})[2]["predictions"][0]
        client = LibreTranslateAPI(running.url, api_key="k1")
        assert client.translate("5 May 1999", "en", "de") == expected[0]
        assert client.translate("5 May 1999", "fr", "en") == greedy["translation"]
        assert client.languages() == [
            {"code": "en", "name": "English", "targets": ["de"]},
            {"code": "fr", "name": "French", "targets": ["en"]},
        ]
        assert client.detect("A man is sleeping.") == [{"confidence": pytest.approx(50, abs=50), "language": "en"}]

        def call(path, **params):
            body = urllib.parse.urlencode({"api_key": "k1", **params}).encode()  # curl -d's form
            return running.request("POST", path, body)

        status, _, body = running.post(
            "/translate", {"q": ["5 May 1999", "July 4, 2021\n5 May 1999"], "source": "auto", "target": "de",
                           "alternatives": 2, "api_key": "k1"}
        )  # fmt: skip
        assert status == 200, body
        assert body["translatedText"] == [expected[0], f"{expected[1]}\n{expected[0]}"]
        assert len(body["alternatives"]) == 2 and all(isinstance(a, list) for a in body["alternatives"])
        assert all(expected[0] != alternative for alternative in body["alternatives"][0])
        assert [d["language"] for d in body["detectedLanguage"]] == ["en", "en"]
        status, _, body = call("/translate", q="5 May 1999", source="en", target="de", format="text")
        assert (status, body) == (200, {"translatedText": expected[0]})
        page = '<p>5 May 1999</p><p class="x">July <b>4</b>, 2021 <code>keep</code></p>'
        status, _, body = call("/translate", q=page, source="en", target="de", format="html")
        assert status == 200, body
        root = lxml_html.fragment_fromstring(body["translatedText"], create_parent="div")
        paragraphs = root.findall("p")
        assert [p.text_content().replace("keep", "").strip() for p in paragraphs] == expected
        assert paragraphs[1].get("class") == "x" and paragraphs[1].find("code").text == "keep"
        assert len(paragraphs[1].findall("b")) == 1  # every tag once, wherever its words went
        # A file, as LibreTranslate's documentation uploads it with curl, then downloaded from the URL answered
        subtitles = (
            "1\n00:00:01,000 --> 00:00:02,500\n5 May 1999\n\n2\n00:00:03,000 --> 00:00:04,000\nJuly 4,\n2021\n\n"
        )
        (tmp_path / "film.srt").write_text(subtitles)
        (tmp_path / "empty.txt").write_text("\n")
        (tmp_path / "scan.pdf").write_bytes(b"%PDF-1.4")

        def upload(name, *fields):
            form = [arg for field in ("source=en", "target=de", "api_key=k1", *fields) for arg in ("-F", field)]
            command = [
                "curl",
                "-s",
                "-X",
                "POST",
                "-F",
                f"file=@{tmp_path / name}",
                *form,
                running.url + "/translate_file",
            ]
            return json.loads(subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout)

        url = upload("film.srt")["translatedFileUrl"]
        assert url.startswith(running.url + "/download_file/") and url.endswith(".film.srt")
        with urllib.request.urlopen(url, timeout=60) as response:
            assert 'filename="film.srt"' in response.headers["content-disposition"]
            translated = response.read().decode()
        assert translated == subtitles.replace("5 May 1999", expected[0]).replace("July 4,\n2021", expected[1])
        assert upload("empty.txt") == {"error": "Invalid request: empty file"}
        assert upload("scan.pdf") == {"error": "Invalid request: file format not supported"}
        (tmp_path / "long.txt").write_text("5 May 1999\n" * 100)
        assert upload("long.txt") == {"error": "the file is over 1000 bytes, --max-file-bytes"}
        assert running.get("/download_file/..%2Fkeys")[0] in (400, 404)
        assert running.get("/")[0] == 404 and running.get("/static/app.js")[0] == 404  # --no-frontend
        status, _, settings = running.get("/frontend/settings")
        assert settings["keyRequired"] and settings["language"]["target"] == {"code": "de", "name": "German"}

        for params, answer in [
            (dict(source="en", target="de"), (400, "Invalid request: missing q parameter")),
            (dict(q="x", target="de"), (400, "Invalid request: missing source parameter")),
            (dict(q="x", source="es", target="de"), (400, "es is not supported")),
            (dict(q="x", source="en", target="fr"), (400, "French (fr) is not available as a target language "
                                                          "from English (en)")),
            (dict(q="x", source="en", target="de", format="pdf"), (400, "pdf format is not supported")),
            (dict(q="x", source="en", target="de", format="html", alternatives="1"), None),
            (dict(q="x", source="en", target="de", alternatives="two"),
             (400, "Invalid request: alternatives parameter is not a number")),
            (dict(q="x", source="en", target="de", alternatives="3"),
             (400, "Invalid request: alternatives parameter must be <= 2")),
            (dict(q="x", source="en", target="de", api_key="nope"), (403, "Invalid API key")),
            (dict(q="x", source="en", target="de", api_key=""),
             (400, "Please contact the server operator to get an API key")),
        ]:  # fmt: skip
            status, _, body = call("/translate", **params)
            if answer is None:  # LibreTranslate gives html no alternatives
                assert status == 200 and body["alternatives"] == [], body
                continue
            assert (status, body) == (answer[0], {"error": answer[1]}), params
        # kmt's own /translate is still there, keyless: the first model, or the one named
        status, _, body = running.post("/translate", {"text": ["5 May 1999"]})
        assert status == 200 and body["translations"] == expected[:1]
        body = running.post("/translate", {"text": ["5 May 1999"], "model": "fr-en"})[2]
        assert body["translations"] == [greedy["translation"]]
        assert running.post("/translate", {"text": ["x"], "model": "kmt"})[:3:2] == (
            404,
            {"error": "model 'kmt' not found; this server serves 'en-de', 'fr-en'"},
        )
        # the per-client limit: k2's own count
        statuses = [call("/detect", q="hello", api_key="k2")[0] for _ in range(41)]
        assert statuses == [200] * 40 + [429]
        status, headers, body = call("/detect", q="hello", api_key="k2")
        assert (status, body) == (429, {"error": "Slowdown: 40 per 1 minute"}) and headers["Retry-After"] == "60"
        assert call("/detect", q="hello")[0] == 200  # k1 is not slowed down
    finally:
        assert running.stop() == 0


def test_translated_files_expire_after_their_time(tmp_path):
    import os
    import types

    from kmt.serving.app import Settings
    from kmt.serving.libretranslate import LibreTranslate

    state = types.SimpleNamespace(served={}, settings=Settings(file_ttl_s=60))
    libre = LibreTranslate(state)
    libre.files = tmp_path
    for name, age in (("old.srt", 61), ("new.srt", 59)):
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (1000 - age, 1000 - age))
    libre._expire(now=1000)
    assert [path.name for path in tmp_path.iterdir()] == ["new.srt"]


def test_kmt_serve_names_each_model_by_its_pair_or_its_run(smoke_run, capsys):
    from kmt.cli.serve import main, parse_args, served_models
    from tests.helpers import refused

    export = smoke_run / "export"
    [served] = served_models(parse_args([str(export)]))
    assert (served.name, served.pair) == ("kmt", Pair("en", "de"))  # the run's data.source_lang and target_lang
    [served] = served_models(parse_args([str(export), "--languages", "fr-en", "--model-name", "m"]))
    assert (served.name, served.pair) == ("m", Pair("fr", "en"))
    models = served_models(parse_args(["--model", f"en-de={export}", "--model", f"de-en={smoke_run}"]))
    assert [(m.name, m.pair, m.path) for m in models] == [
        ("en-de", Pair("en", "de"), str(export)),
        ("de-en", Pair("de", "en"), str(smoke_run)),
    ]
    one = "kmt-serve: error: give one EXPORT_DIR, or --model SOURCE-TARGET=EXPORT_DIR once or more"
    for args, line in [
        ([], one),
        ([str(export), "--model", f"en-de={export}"], one),
        (
            ["--model", f"en-de={export}", "--languages", "en-de"],
            "kmt-serve: error: --languages names EXPORT_DIR's pair; a --model names its own",
        ),
        (
            ["--model", str(export)],
            "error: --model is SOURCE-TARGET=EXPORT_DIR, such as en-de=runs/multi30k_en_de/<time>/export. "
            f"Received: {export}",
        ),
        (["--model", f"en-de={export}", "--model", f"en-de={export}"], f"error: --model en-de={export}: en-de is "
         "served once"),
        ([str(export), "--languages", "english"], "error: --languages: a language pair is two language codes joined "
         "by '-', such as en-de. Received: 'english'"),
    ]:  # fmt: skip
        status, message = refused(capsys, main, *args)
        assert status == 2 and message == line, (args, message)
