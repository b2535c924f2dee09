"""Sentence splitting, below every format: pysbd's rules, and texts split into sentences and joined back with
their alignments."""


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
