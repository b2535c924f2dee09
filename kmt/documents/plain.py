"""Plain text, HTML and subtitles, and the sentence splitting every format shares."""

from kmt.errors import KmtError


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
