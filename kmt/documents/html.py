"""HTML and XHTML pages and fragments (`.html`, `.htm`, `.xhtml`), through `kmt.documents.markup`."""

from kmt.documents.sentences import Sentences


class HtmlDocument:
    """An HTML page or fragment (`kmt.documents.markup`)."""

    alignments = True

    def __init__(self, text, language="en"):
        from kmt.documents.markup import Fragment

        self.fragment = Fragment(text, document="<html" in text[:2000].lower())
        self.split = Sentences(self.fragment.lines, language)
        self.sentences = self.split.sentences

    def render(self, translations):
        return self.fragment.render(self.split.join(translations))
