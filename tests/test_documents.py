"""Whole files (`kmt.documents`, `kmt-translate EXPORT_DIR FILE --output OUT`): each format's layout kept around the
sentences the model translates."""

import json

import pytest

from kmt.documents import HtmlDocument, SubtitleDocument, TextDocument, document_of
from kmt.errors import KmtError

SRT = "1\n00:00:01,000 --> 00:00:02,500\n5 May 1999\n\n2\n00:00:03,000 --> 00:00:04,000\nJuly 4,\n2021\n\n"


def test_each_format_hands_out_its_sentences_and_puts_their_translations_back():
    text = TextDocument("  Mr. Smith arrived. He slept.  \n\nNext line!\n")
    assert text.sentences == ["Mr. Smith arrived.", "He slept.", "Next line!"]
    assert text.render(["A.", "B.", "C!"]) == "  A. B.  \n\nC!\n"
    page = HtmlDocument(
        "<!DOCTYPE html><html><head><title>My page</title></head><body><p>Hi <b>there</b></p></body></html>"
    )
    assert page.sentences == ["My page", "Hi there"]
    assert page.render([("MEINE SEITE", ((0, 0), (1, 1))), ("HALLO DA", ((0, 0), (1, 1)))]) == (
        "<!DOCTYPE html>\n<html><head><title>MEINE SEITE</title></head><body><p>HALLO <b>DA</b></p></body></html>"
    )
    subtitles = SubtitleDocument(SRT)
    assert subtitles.sentences == ["5 May 1999", "July 4, 2021"]
    assert subtitles.render(["a", "b"]) == SRT.replace("5 May 1999", "a").replace("July 4,\n2021", "b")


def reverse(lines):
    """A stand-in model whose alignment is known: the words reversed and upper-cased."""
    results = []
    for line in lines:
        words = line.split()
        results.append((" ".join(reversed(words)).upper(), tuple((i, len(words) - 1 - i) for i in range(len(words)))))
    return results


def test_paragraphs_go_to_the_model_a_sentence_at_a_time_and_come_back_with_their_alignments_offset():
    from kmt.documents import Sentences

    split = Sentences(["One two. Three four five.", "", "Six."])
    assert split.sentences == ["One two.", "Three four five.", "Six."]
    assert split.join(reverse(split.sentences)) == [
        ("TWO. ONE FIVE. FOUR THREE", ((0, 1), (1, 0), (2, 4), (3, 3), (4, 2))),
        ("", ()),
        ("SIX.", ((0, 0),)),
    ]
    assert Sentences(["a. b."], aligned=False).join(["A.", "B."]) == ["A. B."]


def test_a_word_files_runs_keep_their_formatting_on_their_words_in_tables_and_headers_too():
    import io

    import docx

    document = docx.Document()
    paragraph = document.add_paragraph("A ")
    paragraph.add_run("big").bold = True
    paragraph.add_run(" dog").italic = True
    document.add_table(rows=1, cols=2).cell(0, 0).text = "in a cell"
    document.sections[0].header.paragraphs[0].text = "the header"
    saved = io.BytesIO()
    document.save(saved)
    word = document_of_bytes(saved.getvalue(), ".docx")
    assert word.sentences == ["A big dog", "in a cell", "the header"]
    out = docx.Document(io.BytesIO(word.render(reverse(word.sentences))))
    runs = [(run.text, run.bold, run.italic) for run in out.paragraphs[0].runs]
    assert runs == [("DOG ", None, True), ("BIG ", True, None), ("A", None, None)]
    assert out.tables[0].cell(0, 0).text == "CELL A IN" and out.sections[0].header.paragraphs[0].text == "HEADER THE"


def test_a_catalogue_gets_its_untranslated_units_filled_and_marked_fuzzy():
    catalogue = (
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        'msgid "Open file"\nmsgstr ""\n\nmsgid "Done"\nmsgstr "Fertig"\n'
    )
    po = document_of_bytes(catalogue.encode(), ".po")
    assert po.sentences == ["Open file"]
    out = po.render(["DATEI ÖFFNEN"]).decode()
    assert '#, fuzzy\nmsgid "Open file"\nmsgstr "DATEI ÖFFNEN"' in out and 'msgstr "Fertig"' in out
    xliff = (
        '<?xml version="1.0" encoding="UTF-8"?><xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">'
        '<file original="x" source-language="en" datatype="plaintext"><body>'
        '<trans-unit id="1"><source>Save as</source></trans-unit>'
        '<trans-unit id="2"><source>Quit</source><target state="translated">Beenden</target></trans-unit>'
        "</body></file></xliff>"
    )
    units = document_of_bytes(xliff.encode(), ".xliff")
    assert units.sentences == ["Save as"]
    out = units.render(["SPEICHERN UNTER"]).decode()
    assert "<target" in out and "SPEICHERN UNTER" in out and "Beenden" in out
    # inline elements: <g> around its aligned words, placeholders after the word before them, native code kept
    inline = xliff.replace(
        "<source>Save as</source>",
        '<source>Click <g id="1" ctype="bold">Save as</g> to keep<x id="2"/> the file &amp; <ph id="3">{n}</ph> now.'
        "</source>",
    )
    units = document_of_bytes(inline.encode(), ".xliff")
    assert units.alignments and units.sentences == ["Click Save as to keep the file & now."]
    [sentence] = units.sentences
    reverse = " ".join(reversed(sentence.split())).upper()
    n = len(sentence.split())
    out = units.render([(reverse, tuple((i, n - 1 - i) for i in range(n)))]).decode()
    assert (
        '<target state="needs-translation">NOW. &amp; <ph id="3">{n}</ph> FILE THE KEEP<x id="2"/> TO '
        '<g id="1" ctype="bold">AS SAVE</g> CLICK</target>'
    ) in out
    assert "Beenden" in out


def document_of_bytes(content, suffix):
    from kmt.documents import document_from

    return document_from(content, suffix)


MARKDOWN = """# A title

Some **bold words** and a [link](https://x.org/a_b) here.
It wraps on, with `code` inside.

- item *one*

```python
x = 1
```

| Name | Value |
|---|---|
| big dog | red cat |
"""


def test_markdown_keeps_its_code_and_markers_and_its_inline_syntax_follows_its_words():
    document = document_of_bytes(MARKDOWN.encode(), ".md")
    assert document.sentences == [
        "A title",
        "Some bold words and a link here.",
        "It wraps on, with",
        "inside.",
        "item one",
        "Name",
        "Value",
        "big dog",
        "red cat",
    ]
    assert document.render(reverse(document.sentences)) == (
        "# TITLE A\n\nHERE. [LINK](https://x.org/a_b) A AND **WORDS BOLD** SOME WITH ON, WRAPS IT `code` INSIDE.\n\n"
        "- *ONE* ITEM\n\n```python\nx = 1\n```\n\n| NAME | VALUE |\n|---|---|\n| DOG BIG | CAT RED |\n"
    )


def test_a_file_kmt_cannot_read_is_one_line(tmp_path):
    (tmp_path / "a.pdf").write_bytes(b"%PDF")
    with pytest.raises(KmtError, match=r"a.pdf: kmt translates .txt, .md, .html, .htm, .xhtml, .srt, .docx, .po, "):
        document_of(tmp_path / "a.pdf")
    (tmp_path / "bad.srt").write_text("1\nnot a timing\nHello\n")
    with pytest.raises(KmtError, match="^not a SubRip"):
        document_of(tmp_path / "bad.srt")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(KmtError, match="latin1.txt is not UTF-8 text"):
        document_of(tmp_path / "latin1.txt")


@pytest.mark.e2e
def test_kmt_translate_writes_each_format_with_the_models_translations(smoke_run, tmp_path, capsys):
    from kmt.cli import translate
    from kmt.inference.loading import load_translator
    from tests.helpers import refused

    export = smoke_run / "export"
    sentences = ["5 May 1999", "July 4, 2021"]
    expected = load_translator(export).translate(sentences)
    files = {
        "in.txt": ("5 May 1999\n\n  July 4, 2021\n", f"{expected[0]}\n\n  {expected[1]}\n"),
        "in.srt": (SRT, SRT.replace("5 May 1999", expected[0]).replace("July 4,\n2021", expected[1])),
    }
    for name, (text, result) in files.items():
        (tmp_path / name).write_text(text)
        out = tmp_path / f"out{(tmp_path / name).suffix}"
        translate.main([str(export), str(tmp_path / name), "--output", str(out)])
        assert out.read_text() == result
        assert capsys.readouterr().err.strip().endswith(f"translated 2 sentences of {tmp_path / name} into {out}")
    (tmp_path / "in.html").write_text('<p>5 May 1999</p><p>July <b class="x">4</b>, 2021 <code>keep</code></p>')
    translate.main([str(export), str(tmp_path / "in.html"), "--output", str(tmp_path / "out.html")])
    out = (tmp_path / "out.html").read_text()
    assert out.count('<b class="x">') == 1 and "<code>keep</code>" in out and out.startswith(f"<p>{expected[0]}</p>")
    import docx

    document = docx.Document()
    document.add_paragraph("5 May 1999").runs[0].bold = True
    document.save(tmp_path / "in.docx")
    (tmp_path / "in.po").write_text('msgid "5 May 1999"\nmsgstr ""\n\nmsgid "July 4, 2021"\nmsgstr "kept"\n')
    (tmp_path / "in.md").write_text("# 5 May 1999\n\n```\nJuly 4, 2021\n```\n")
    (tmp_path / "in.xlf").write_text(
        '<?xml version="1.0" encoding="UTF-8"?><xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">'
        '<file original="x" source-language="en" datatype="plaintext"><body>'
        '<trans-unit id="1"><source><g id="1">July</g> 4, 2021</source></trans-unit></body></file></xliff>'
    )
    for name in ("in.docx", "in.po", "in.md", "in.xlf"):
        translate.main([str(export), str(tmp_path / name), "--output", str(tmp_path / f"out.{name[3:]}")])
    [paragraph] = docx.Document(tmp_path / "out.docx").paragraphs
    assert paragraph.text == expected[0] and all(run.bold for run in paragraph.runs)
    assert f'#, fuzzy\nmsgid "5 May 1999"\nmsgstr "{expected[0]}"' in (tmp_path / "out.po").read_text()
    assert 'msgstr "kept"' in (tmp_path / "out.po").read_text()
    assert (tmp_path / "out.md").read_text() == f"# {expected[0]}\n\n```\nJuly 4, 2021\n```\n"
    from translate.storage import xliff

    [unit] = xliff.xlifffile.parsefile(str(tmp_path / "out.xlf")).units
    assert " ".join(unit.target.split()) == expected[1] and unit.isfuzzy()
    assert (tmp_path / "out.xlf").read_text().count('<g id="1">') == 2  # source and target
    import kmt  # the same through Python

    assert kmt.translate_file(kmt.load(export), tmp_path / "in.srt", tmp_path / "again.srt") == 2
    assert (tmp_path / "again.srt").read_text() == (tmp_path / "out.srt").read_text()

    assert refused(capsys, translate.main, export, tmp_path / "in.txt") == (
        2,
        "error: FILE is translated into a file of its format: give --output",
    )
    assert refused(capsys, translate.main, export, tmp_path / "in.txt", "--nbest", "2", "--output", "x.txt") == (
        2,
        "error: --nbest is for one sentence a line, not for FILE",
    )
    assert refused(capsys, translate.main, export, tmp_path / "in.txt", "--output", tmp_path / "in.txt") == (
        2,
        f"error: {tmp_path / 'in.txt'} is the file translated: write elsewhere",
    )
    (tmp_path / "in.doc").write_text("x")
    status, line = refused(capsys, translate.main, export, tmp_path / "in.doc", "--output", tmp_path / "o.doc")
    assert status == 2 and line.startswith(f"error: {tmp_path / 'in.doc'}: kmt translates .txt")
    assert not (tmp_path / "o.doc").exists()


@pytest.mark.e2e
def test_the_documents_bench_times_files_against_lines_and_counts_placed_tags(smoke_run, tmp_path):
    from tests.test_bench import run_bench

    (tmp_path / "src").write_text("A man sleeps.\nA dog runs home.\nTwo cats play.\n")
    result = run_bench("documents", smoke_run / "export", "--source", tmp_path / "src", "--pages", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.splitlines()[-1])
    assert [row["input"] for row in figures["rows"]] == [".docx file", ".html file", "plain lines"]
    assert figures["rows"][0]["sentences"] == 32 and figures["well_formed"]  # 30, a table's cell and the header
    assert 0 <= figures["tags_exact"] <= figures["tags"] == 30  # 10 paragraphs of 3 tags
