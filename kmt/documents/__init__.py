"""Whole files translated with their layout kept: `translate_file(translator, path, output)`, by extension.

- `.txt`: each line's sentences (split by pysbd, a rule-based splitter) translated, the line's spacing and the blank
  lines kept;
- `.md`: code and HTML blocks kept, each paragraph, heading, list item and table cell translated with its markers,
  emphasis and links following their aligned words;
- `.html`, `.htm`, `.xhtml`: the markup kept (`kmt.documents.markup`; a whole document's `<title>` and `<body>`),
  inline tags put back around their aligned words;
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
from pathlib import Path

from kmt.documents.catalogues import CatalogueDocument
from kmt.documents.html import HtmlDocument
from kmt.documents.sentences import Sentences, splitter
from kmt.documents.subtitles import SubtitleDocument
from kmt.documents.text import MarkdownDocument, TextDocument
from kmt.documents.word import WordDocument
from kmt.errors import KmtError
from kmt.run_dir import write_atomically

__all__ = [
    "FORMATS",
    "Sentences",
    "document_of",
    "document_from",
    "open_document",
    "splitter",
    "translate_document",
    "translate_file",
]

logger = logging.getLogger(__name__)
PROGRESS_FROM = 300  # sentences: larger files show their progress


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
        path: a file of one of `FORMATS`' extensions.
        output: where the translation is written (atomically).
        language: the source language's ISO 639-1 code, for the sentence splitter. Defaults to `"en"`.
        glossary: a `kmt.Glossary` whose terms the translations must use (`Translator.translate`'s). Defaults to
            `None`.
        progress: a progress bar at a terminal, else a log line a batch (`kmt.inference.translate.map_sorted`).
            Defaults to `None`: for files of more than 300 sentences.
    """
    document = open_document(path, output, language)
    return translate_document(translator, document, output, glossary=glossary, progress=progress)


def open_document(path, output, language="en"):
    """The document at `path`, read and checked to be translatable into `output` (`translate_document`'s): a command
    reads it before it loads a model, so that a bad file costs no wait."""
    if Path(output).resolve() == Path(path).resolve():
        raise KmtError(f"{output} is the file translated: write elsewhere")
    document = document_of(path, language)
    document.path = str(path)
    return document


def translate_document(translator, document, output, *, glossary=None, progress=None):
    """Translates `document` (`open_document`'s) into `output`, written atomically; returns how many sentences were
    translated (`translate_file`'s arguments)."""
    sentences = document.sentences
    progress = len(sentences) > PROGRESS_FROM if progress is None else progress
    options = dict(progress=progress, glossary=glossary)
    if document.alignments:
        found = translator.translate(sentences, alignments=True, **options) if sentences else []
        translations = [(hypothesis.text, hypothesis.alignment) for hypothesis in found]
    else:
        translations = translator.translate(sentences, **options) if sentences else []
    write_atomically(output, document.render(translations))
    logger.info("translated %d sentences of %s into %s", len(sentences), document.path, output)
    return len(sentences)
