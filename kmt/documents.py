"""Whole files translated with their layout kept: `translate_file(translator, path, output)`, by extension.

- `.txt`: each line's sentences (split by pysbd, a rule-based splitter) translated, the line's spacing and the blank
  lines kept;
- `.md`: code and HTML blocks kept, each paragraph, heading, list item and table cell translated with its markers,
  emphasis and links following their aligned words;
- `.html`, `.htm`, `.xhtml`: the markup kept (`kmt.markup`; a whole document's `<title>` and `<body>`), inline tags
  put back around their aligned words;
- `.srt` (the `srt` library): each subtitle's text translated as one sentence, its number and timings kept;
- `.docx` (python-docx): every paragraph of the body, tables, headers and footers, each run's formatting kept on the
  target words aligned to its words;
- `.po`, `.pot`, `.xliff`, `.xlf` (translate-toolkit): untranslated units filled and marked fuzzy (machine
  translated), translated ones and the header left alone.

Every sentence of the file is translated in one `translate` call, so the batches are sorted by length across the
whole file; the output is written atomically (a crash or Ctrl-C leaves no half-written file). A file the parser
cannot take, or an extension not listed, is a `KmtError` of one line.
"""

import logging
import re
from pathlib import Path

from kmt.errors import KmtError
from kmt.run_dir import write_atomically

logger = logging.getLogger(__name__)
PROGRESS_FROM = 300  # sentences: larger files log their progress


def splitter(language="en"):
    """pysbd's sentence splitter for `language` (English where pysbd has no rules for it)."""
    import pysbd

    return pysbd.Segmenter(language=language if language in pysbd.languages.LANGUAGE_CODES else "en", clean=False)


class Sentences:
    """Texts (paragraphs, HTML segments) split into sentences for a model trained on sentences, and their
    translations joined back: `sentences`, then `join(results)`, each result a translation or a `(translation,
    alignment)` pair, whose alignments are offset to count the words of the whole text."""

    def __init__(self, texts, language="en", aligned=True):
        self.aligned = aligned  # results are (translation, alignment) pairs
        split = splitter(language)
        self.parts = [[s.strip() for s in split.segment(text) if s.strip()] if text.strip() else [] for text in texts]
        self.sentences = [sentence for parts in self.parts for sentence in parts]

    def join(self, results):
        found, joined = iter(results), []
        for parts in self.parts:
            pieces = [next(found) for _ in parts]
            if self.aligned:
                words, alignment, source_at, target_at = [], [], 0, 0
                for sentence, (translation, links) in zip(parts, pieces):
                    alignment += [(i + source_at, j + target_at) for i, j in links]
                    words.append(translation)
                    source_at += len(sentence.split())
                    target_at += len(translation.split())
                joined.append((" ".join(w for w in words if w), tuple(alignment)))
            else:
                joined.append(" ".join(p for p in pieces if p))
        return joined


class TextDocument:
    """Lines of text; each line's sentences are translated and joined with the spacing the line had."""

    alignments = False

    def __init__(self, text, language="en"):
        split = splitter(language)
        self.lines = text.split("\n")
        self.pieces = []  # per line: [(lead, sentence, trail), ...]
        for line in self.lines:
            pieces = []
            for chunk in split.segment(line) if line.strip() else []:
                sentence = chunk.strip()
                if sentence:
                    lead = chunk[: len(chunk) - len(chunk.lstrip())]
                    pieces.append((lead, sentence, chunk[len(chunk.rstrip()) :]))
            self.pieces.append(pieces)
        self.sentences = [sentence for pieces in self.pieces for _, sentence, _ in pieces]

    def render(self, translations):
        found, out = iter(translations), []
        for line, pieces in zip(self.lines, self.pieces):
            if not pieces:
                out.append(line)
                continue
            lead = line[: len(line) - len(line.lstrip())]
            text = "".join(f"{before}{next(found)}{after}" for before, _, after in pieces)
            out.append(lead + text.strip() + line[len(line.rstrip()) :])
        return "\n".join(out)


class HtmlDocument:
    """An HTML page or fragment (`kmt.markup`)."""

    alignments = True

    def __init__(self, text, language="en"):
        from kmt.markup import Fragment

        self.fragment = Fragment(text, document="<html" in text[:2000].lower())
        self.split = Sentences(self.fragment.lines, language)
        self.sentences = self.split.sentences

    def render(self, translations):
        return self.fragment.render(self.split.join(translations))


class SubtitleDocument:
    """SubRip subtitles: each one's text is translated as one sentence; numbers and timings are kept."""

    alignments = False

    def __init__(self, text, language="en"):
        import srt

        try:
            self.subtitles = list(srt.parse(text))
        except srt.SRTParseError as error:
            raise KmtError(f"not a SubRip (.srt) file: {error}") from None
        self.sentences = [" ".join(subtitle.content.split()) for subtitle in self.subtitles]

    def render(self, translations):
        import srt

        for subtitle, translation in zip(self.subtitles, translations):
            subtitle.content = translation
        return srt.compose(self.subtitles, reindex=False)


class WordDocument:
    """A Word file (python-docx): each paragraph of the body, its tables, headers and footers translated, each run's
    formatting (bold, italic, font, ...) kept on the target words aligned to its words."""

    alignments = True
    binary = True

    def __init__(self, content, language="en"):
        import io

        docx = _optional("docx", "python-docx")
        try:
            self.document = docx.Document(io.BytesIO(content))
        except Exception as error:  # python-docx raises zipfile's, lxml's or its own errors for a damaged file
            raise KmtError(
                f"not a Word (.docx) file python-docx can read: {' '.join(str(error).split())[:200]}"
            ) from None
        self.paragraphs = [p for p in _paragraphs(self.document) if p.text.strip()]
        self.split = Sentences([" ".join(p.text.split()) for p in self.paragraphs], language)
        self.sentences = self.split.sentences

    def render(self, translations):
        import copy
        import io

        for paragraph, (translation, alignment) in zip(self.paragraphs, self.split.join(translations)):
            runs = [run for run in paragraph.runs]
            owners = _word_runs(runs)  # the run of each source word
            words = translation.split()
            chosen, last = [], 0
            for j in range(len(words)):
                sources = sorted(i for i, t in alignment if t == j and i < len(owners))
                last = owners[sources[0]] if sources else last
                chosen.append(last)
            groups = []  # consecutive target words of one run
            for j, run in enumerate(chosen):
                if groups and groups[-1][0] == run:
                    groups[-1][1].append(words[j])
                else:
                    groups.append((run, [words[j]]))
            for run in runs:
                run._r.getparent().remove(run._r)
            for k, (index, group) in enumerate(groups):
                element = copy.deepcopy(runs[index]._r)
                paragraph._p.append(element)
                new = paragraph.runs[-1]
                new.text = " ".join(group) + (" " if k < len(groups) - 1 else "")
        out = io.BytesIO()
        self.document.save(out)
        return out.getvalue()


def _paragraphs(document):
    """Every paragraph of the body, of its tables' cells (nested too), and of each section's headers and footers."""

    def of(container):
        yield from container.paragraphs
        for table in getattr(container, "tables", []):
            for row in table.rows:
                for cell in row.cells:
                    yield from of(cell)

    def every():
        yield from of(document)
        for section in document.sections:
            for part in (section.header, section.footer):
                if not part.is_linked_to_previous:
                    yield from of(part)

    seen = set()  # a merged cell is every cell it spans
    for paragraph in every():
        if id(paragraph._p) not in seen:
            seen.add(id(paragraph._p))
            yield paragraph


def _word_runs(runs):
    """The index of the run each whitespace-separated word of the runs' text starts in."""
    owners, inside = [], False
    for index, run in enumerate(runs):
        for char in run.text:
            if char.isspace():
                inside = False
            elif not inside:
                owners.append(index)
                inside = True
    return owners


class CatalogueDocument:
    """A PO or XLIFF catalogue (translate-toolkit): each unit without a translation is filled and marked fuzzy
    (machine translated, for a translator to review); units with one (fuzzy ones too) and the header are left
    alone."""

    alignments = False
    binary = True

    def __init__(self, content, language="en", kind="po"):
        _optional("translate", "translate-toolkit")
        from translate.storage import po, xliff

        storage = po.pofile if kind == "po" else xliff.xlifffile
        try:
            self.store = storage.parsestring(content)
        except Exception as error:  # translate-toolkit raises its parsers' own errors
            raise KmtError(
                f"not a {kind.upper()} file translate-toolkit can read: {' '.join(str(error).split())[:200]}"
            ) from None
        self.units = [unit for unit in self.store.units if not unit.isheader() and unit.source and not unit.target]
        self.sentences = [" ".join(unit.source.split()) for unit in self.units]

    def render(self, translations):
        for unit, translation in zip(self.units, translations):
            unit.target = translation
            unit.markfuzzy(True)
        return bytes(self.store)


def _optional(module, package):
    try:
        return __import__(module)
    except ImportError:
        raise KmtError(f"this format needs {package}: pip install 'kmt[documents]'") from None


class MarkdownDocument:
    """Markdown: code blocks (fenced or indented) and HTML blocks kept; each paragraph, heading, list item, quote
    and table cell translated, its line's markers (`#`, `>`, `-`, `1.`) kept; inline emphasis, links and code
    carried across as markup is (`kmt.markup`: `**bold**`, `*italic*`, `[text](url)` follow their aligned words,
    `` `code` ``, images and bare URLs stay as they are). A paragraph's wrapped lines come out as one line."""

    alignments = True
    MARKER = re.compile(r"^(\s*(?:(?:#{1,6}|>|[-*+]|\d+[.)])[ \t]+)*)(.*)$")

    def __init__(self, text, language="en"):
        from kmt.markup import Fragment

        self.blocks = []  # ("keep", line) or ("text", prefix, text) or ("row", cells)
        fence = None
        lines = text.split("\n")
        for line in lines:
            stripped = line.strip()
            if fence is not None or stripped.startswith(("```", "~~~")):
                if fence is None:
                    fence = stripped[:3]
                elif stripped.startswith(fence):
                    fence = None
                self.blocks.append(("keep", line))
            elif not stripped or stripped.startswith("<") or re.fullmatch(r"[-*_=|: ]{3,}", stripped):
                self.blocks.append(("keep", line))  # blank, HTML, a rule or a table's separator row
            elif line.startswith(("    ", "\t")) and (not self.blocks or self.blocks[-1][0] == "keep"):
                self.blocks.append(("keep", line))  # indented code
            elif stripped.startswith("|"):
                cells = stripped.strip("|").split("|")
                self.blocks.append(("row", [cell.strip() for cell in cells]))
            else:
                prefix, rest = self.MARKER.match(line).groups()
                previous = self.blocks[-1] if self.blocks else None
                if (
                    not prefix.strip()
                    and previous
                    and previous[0] == "text"
                    and not previous[1].lstrip().startswith("#")
                ):
                    self.blocks[-1] = ("text", previous[1], f"{previous[2]} {rest.strip()}")  # a wrapped line
                else:
                    self.blocks.append(("text", prefix, rest.strip()))
        texts = [b[2] for b in self.blocks if b[0] == "text"] + [c for b in self.blocks if b[0] == "row" for c in b[1]]
        self.fragments = [Fragment(_markdown_to_html(text)) for text in texts]
        self.split = Sentences([line for fragment in self.fragments for line in fragment.lines], language)
        self.sentences = self.split.sentences

    def render(self, translations):
        results = iter(self.split.join(translations))
        translated = [
            _html_to_markdown(fragment.render([next(results) for _ in fragment.lines])) for fragment in self.fragments
        ]
        count = sum(block[0] == "text" for block in self.blocks)
        texts, cells, out = iter(translated[:count]), iter(translated[count:]), []
        for block in self.blocks:
            if block[0] == "keep":
                out.append(block[1])
            elif block[0] == "text":
                out.append(block[1] + next(texts))
            else:
                out.append("| " + " | ".join(next(cells) for _ in block[1]) + " |")
        return "\n".join(out)


INLINE_MARKDOWN = re.compile(
    r"(?P<code>`[^`]+`)|(?P<image>!\[[^\]]*\]\([^)]*\))|\[(?P<link>[^\]]+)\]\((?P<url>[^)\s]+)\)"
    r"|\*\*(?P<bold>[^*]+)\*\*|__(?P<bold2>[^_]+)__|\*(?P<italic>[^*\s][^*]*)\*|(?<!\w)_(?P<italic2>[^_]+)_(?!\w)"
    r"|(?P<bare>https?://[^\s)>]+)"
)


def _markdown_to_html(text):
    """A Markdown line's inline syntax as HTML inline elements, for `kmt.markup` (code, images, URLs untranslated)."""
    import html

    out, last = [], 0
    for match in INLINE_MARKDOWN.finditer(text):
        out.append(html.escape(text[last : match.start()], quote=False))
        kind = match.lastgroup if match.lastgroup != "url" else "link"
        value = match.group(kind)
        if kind in ("code", "image", "bare"):
            out.append(f'<code data-md="{html.escape(match.group(0))}">x</code>')
        elif kind == "link":
            out.append(f'<a href="{html.escape(match.group("url"))}">{_markdown_to_html(value)}</a>')
        elif kind in ("bold", "bold2"):
            out.append(f"<b>{_markdown_to_html(value)}</b>")
        else:
            out.append(f"<i>{_markdown_to_html(value)}</i>")
        last = match.end()
    out.append(html.escape(text[last:], quote=False))
    return "".join(out)


def _html_to_markdown(markup):
    """The inverse of `_markdown_to_html` on a translated fragment."""
    from lxml import html as lxml_html

    root = lxml_html.fragment_fromstring(f"<div>{markup}</div>")

    def walk(element):
        parts = [element.text or ""]
        for child in element:
            inner = "".join(walk(child))
            if child.tag == "code":
                parts.append(child.get("data-md", ""))
            elif child.tag == "a":
                parts.append(f"[{inner}]({child.get('href', '')})")
            elif child.tag == "b":
                parts.append(f"**{inner}**")
            elif child.tag == "i":
                parts.append(f"*{inner}*")
            else:
                parts.append(inner)
            parts.append(child.tail or "")
        return parts

    return " ".join("".join(walk(root)).split())


FORMATS = {
    ".txt": TextDocument,
    ".md": MarkdownDocument,
    ".html": HtmlDocument,
    ".htm": HtmlDocument,
    ".xhtml": HtmlDocument,
    ".srt": SubtitleDocument,
    ".docx": WordDocument,
    ".po": CatalogueDocument,
    ".pot": CatalogueDocument,
    ".xliff": lambda content, language: CatalogueDocument(content, language, kind="xliff"),
    ".xlf": lambda content, language: CatalogueDocument(content, language, kind="xliff"),
}


def document_of(path, language="en"):
    """The document at `path`, read by its extension's class."""
    path = Path(path)
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise KmtError(
            f"{path}: kmt translates {', '.join(FORMATS)} files; {path.suffix or 'no extension'} is none of them "
            "(for one sentence a line, use --input)"
        )
    try:
        content = path.read_bytes()
    except OSError as error:
        raise KmtError(f"cannot read {path}: {error.strerror}") from None
    return document_from(content, path.suffix, language, name=str(path))


def document_from(content, suffix, language="en", name="the file"):
    """The document in `content` (bytes, UTF-8) of the format of `suffix` (`.txt`, ...; one of `FORMATS`)."""
    kind = FORMATS[suffix.lower()]
    if getattr(kind, "binary", False) or suffix.lower() in (".xliff", ".xlf"):
        return kind(content, language)
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise KmtError(f"{name} is not UTF-8 text: {error.reason} at byte {error.start}") from None
    return kind(text.replace("\r\n", "\n"), language)


def translate_file(translator, path, output, *, language="en", glossary=None, progress=None):
    """Translates the file at `path` into `output` (same format), with `translator` (a
    `kmt.inference.translators.Translator`); returns how many sentences were translated.

    Args:
        translator: what translates (`kmt.load(...)`).
        path: a `.txt`, `.html`, `.htm`, `.xhtml` or `.srt` file.
        output: where the translation is written (atomically).
        language: the source language's ISO 639-1 code, for the sentence splitter. Defaults to `"en"`.
        glossary: a `kmt.Glossary` whose terms the translations must use (`Translator.translate`'s). Defaults to
            `None`.
        progress: log the progress of each batch. Defaults to `None`: for files of more than 300 sentences.
    """
    document = document_of(path, language)
    sentences = document.sentences
    if Path(output).resolve() == Path(path).resolve():
        raise KmtError(f"{output} is the file translated: write elsewhere")
    progress = len(sentences) > PROGRESS_FROM if progress is None else progress
    options = dict(progress=progress, glossary=glossary)
    if document.alignments:
        found = translator.translate(sentences, alignments=True, **options) if sentences else []
        translations = [(hypothesis.text, hypothesis.alignment) for hypothesis in found]
    else:
        translations = translator.translate(sentences, **options) if sentences else []
    write_atomically(output, document.render(translations))
    logger.info("translated %d sentences of %s into %s", len(sentences), path, output)
    return len(sentences)
