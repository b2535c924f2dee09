"""Plain text and Markdown (`.txt`, `.md`)."""

import re

from kmt.documents.sentences import Sentences, splitter


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


class MarkdownDocument:
    """Markdown: code blocks (fenced or indented) and HTML blocks kept; each paragraph, heading, list item, quote
    and table cell translated, its line's markers (`#`, `>`, `-`, `1.`) kept; inline emphasis, links and code
    carried across as markup is (`kmt.documents.markup`: `**bold**`, `*italic*`, `[text](url)` follow their aligned
    words, `` `code` ``, images and bare URLs stay as they are). A paragraph's wrapped lines come out as one line."""

    alignments = True
    MARKER = re.compile(r"^(\s*(?:(?:#{1,6}|>|[-*+]|\d+[.)])[ \t]+)*)(.*)$")

    def __init__(self, text, language="en"):
        from kmt.documents.markup import Fragment

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
    """A Markdown line's inline syntax as HTML inline elements, for `kmt.documents.markup` (code, images, URLs
    untranslated)."""
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
