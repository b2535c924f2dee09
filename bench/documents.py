"""Whole files against plain lines: `kmt.translate_file` on a generated Word file and HTML page against the same
sentences given to `translate` as lines, side by side, and how many inline tags land around aligned words.

    python bench/documents.py EXPORT_DIR --source test.en
    python bench/documents.py EXPORT_DIR --source test.en --pages 100 --repeats 3

The documents are made from `--source`'s sentences (wrapping around): a .docx of `--pages` pages of 30 sentences,
each paragraph three sentences with a bold and an italic run, a table and a header, and an HTML page of the same
paragraphs with `<b>`, `<i>` and `<a href>` inside them. Each repeat times, in a rotating order: the .docx through
`translate_file`, the page through `translate_file`, and their sentences as plain lines through `translate` (with
alignments, as the files need them). Reported: sentences and words a second, the time against plain lines
(medians), this process's peak memory, and for the HTML the share of inline tags whose target span is exactly the
words aligned to the words they wrapped (the rest are placed by their neighbours or clamped into their parent).
"""

import argparse
import itertools
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import hardware, median, peak_rss_mib, print_json, print_table, timed  # noqa: E402  (bench/ on sys.path)

SENTENCES_A_PAGE = 30


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export_dir", help="a SavedModel, CTranslate2 directory or run of a Transformer")
    parser.add_argument("--source", required=True, help="source sentences, one a line")
    parser.add_argument("--pages", type=int, default=20, help="pages of the documents (default: 20)")
    parser.add_argument("--repeats", type=int, default=1, help="timed passes (default: 1)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences a batch (default: 64)")
    return parser.parse_args(argv)


def paragraphs_of(sentences, count):
    """`count` paragraphs of three sentences each, drawn in order (wrapping around)."""
    cycle = itertools.cycle(sentences)
    return [[next(cycle) for _ in range(3)] for _ in range(count)]


def marked(words):
    """Word indices to wrap: the second word bold, the last two italic."""
    return {1: "b", len(words) - 2: "i"} if len(words) > 3 else {}


def make_docx(paragraphs, path):
    import docx

    document = docx.Document()
    document.sections[0].header.paragraphs[0].text = paragraphs[0][0]
    for k, paragraph in enumerate(paragraphs):
        words = " ".join(paragraph).split()
        styles = marked(words)
        out = document.add_paragraph()
        for i, word in enumerate(words):
            run = out.add_run(word + (" " if i < len(words) - 1 else ""))
            run.bold = styles.get(i) == "b" or None
            run.italic = styles.get(i) == "i" or None
        if k % 10 == 9:
            document.add_table(rows=1, cols=1).cell(0, 0).text = paragraph[0]
    document.save(path)


def make_html(paragraphs, path):
    import html

    body = []
    for paragraph in paragraphs:
        words = [html.escape(w) for w in " ".join(paragraph).split()]
        if len(words) > 4:
            words[1] = f"<b>{words[1]}</b>"
            words[-2] = f"<i>{words[-2]}</i>"
            words[2] = f'<a href="https://example.com/{len(body)}">{words[2]}</a>'
        body.append(f"<p>{' '.join(words)}</p>")
    path.write_text(f"<!DOCTYPE html><html><head><title>Bench</title></head><body>{''.join(body)}</body></html>")


def tag_placement(fragment, results):
    """(tags whose span is exactly their words' aligned span, tags) over the fragment's segments."""
    from kmt.documents.markup import _spans

    exact = total = 0
    segments = [part for _, parts in fragment.plans for kind, part in parts if kind == "segment" and part.text.strip()]
    for segment, (translation, alignment) in zip(segments, results):
        words = translation.split()
        spans = _spans(segment, words, alignment)
        source = segment.words()
        for element, (start, stop) in spans.items():
            inside = {i for i, (_, tags) in enumerate(source) if element in tags}
            aligned = {j for i, j in alignment if i in inside and j < len(words)}
            total += 1
            exact += bool(aligned) and (start, stop) == (min(aligned), max(aligned) + 1)
    return exact, total


def main(argv=None):
    import kmt
    from kmt.documents import document_of, translate_file
    from kmt.documents.markup import Fragment

    args = parse_args(argv)
    sentences = Path(args.source).read_text(encoding="utf-8").splitlines()
    paragraphs = paragraphs_of(sentences, args.pages * SENTENCES_A_PAGE // 3)
    translator = kmt.load(args.export_dir, batch_size=args.batch_size)
    with tempfile.TemporaryDirectory() as directory:
        directory = Path(directory)
        make_docx(paragraphs, directory / "in.docx")
        make_html(paragraphs, directory / "in.html")
        lines = {name: document_of(directory / name).sentences for name in ("in.docx", "in.html")}
        words = {name: sum(len(line.split()) for line in found) for name, found in lines.items()}
        variants = {
            ".docx file": lambda: translate_file(translator, directory / "in.docx", directory / "out.docx"),
            ".html file": lambda: translate_file(translator, directory / "in.html", directory / "out.html"),
            "plain lines": lambda: translator.translate(lines["in.docx"], alignments=True),
        }
        seconds = {name: [] for name in variants}
        names = list(variants)
        for repeat in range(args.repeats):
            for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                seconds[name].append(timed(variants[name])[1])
        fragment = Fragment((directory / "in.html").read_text(), document=True)
        found = translator.translate(fragment.lines, alignments=True)
        exact, total = tag_placement(fragment, [(h.text, h.alignment) for h in found])
        out = (directory / "out.html").read_text()
    base = median(seconds["plain lines"])
    count = {".docx file": "in.docx", ".html file": "in.html", "plain lines": "in.docx"}
    rows = [
        {
            "input": name,
            "sentences": len(lines[count[name]]),
            "sentences_per_second": round(len(lines[count[name]]) / median(seconds[name]), 1),
            "words_per_second": round(words[count[name]] / median(seconds[name]), 1),
            "time": round(median(seconds[name]) / base * len(lines["in.docx"]) / len(lines[count[name]]), 2),
        }
        for name in variants
    ]
    well_formed = out.count("<b>") == out.count("</b>") and out.count("<a ") == out.count("</a>")
    print(f"{args.pages} pages; {hardware()}; peak memory {peak_rss_mib():.0f} MiB")
    print_table(
        rows,
        [
            ("input", "input"),
            ("sentences", "sentences"),
            ("sentences_per_second", "sentences/s"),
            ("words_per_second", "words/s"),
            ("time", "time a sentence vs plain lines"),
        ],
    )
    print(f"HTML inline tags around exactly their aligned words: {exact} of {total}; well-formed: {well_formed}")
    print_json(
        "documents",
        pages=args.pages,
        repeats=args.repeats,
        rows=rows,
        tags_exact=exact,
        tags=total,
        well_formed=well_formed,
        peak_rss_mib=round(peak_rss_mib()),
    )


if __name__ == "__main__":
    main()
