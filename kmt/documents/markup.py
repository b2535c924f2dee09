"""Text with markup: an HTML or XML fragment translated with its structure kept (LibreTranslate's `format=html`).

The fragment is parsed by lxml's forgiving HTML parser (malformed markup is repaired as a browser would, never an
error). Block elements stay where they are; the text of each run of inline content in a block (its text and inline
elements such as `<b>`, `<a href>`, `<span>`) is one segment, translated as plain text with its word alignment. Each
inline element is put back around the target words aligned to the source words it wrapped (Bergamot's approach;
the span from the first to the last such word, kept inside its parent's span and after its earlier siblings), so
every source element appears exactly once, properly nested, with its attributes. An element wrapping no aligned
word, or no word at all (a placeholder), is kept, empty, after the target of the nearest aligned source word before
it. Untranslatable content stays as it is: `<code>`, `<pre>`, `<script>`, `<style>`, `<kbd>`, `<samp>`, `<var>`,
anything marked `translate="no"` or `class="notranslate"`, and comments; an untranslatable or void element inside a
run (`<br>`, `<img>`, `<code>`) ends its segment and stays between the two.

`translate_fragment(html, translate)` does it; `translate(lines)` returns each line's `(translation, alignment)`,
the alignment as `(source word, target word)` pairs over whitespace-separated words (`kmt.inference.alignments`).
`Fragment` splits it in two, the lines to translate and the markup rebuilt from their translations, for a caller
that translates elsewhere (kmt-serve's queue).
"""

import html as html_lib

from lxml import etree
from lxml import html as lxml_html

INLINE = {
    "a", "abbr", "b", "bdi", "bdo", "cite", "data", "dfn", "em", "font", "i", "ins", "del", "label", "mark", "q",
    "s", "small", "span", "strong", "sub", "sup", "time", "u", "big", "tt",
}  # fmt: skip
KEEP = {"code", "pre", "script", "style", "kbd", "samp", "var", "textarea", "svg", "math"}


def untranslatable(element):
    if not isinstance(element.tag, str):  # a comment or processing instruction
        return True
    classes = (element.get("class") or "").split()
    return element.tag.lower() in KEEP or element.get("translate") == "no" or "notranslate" in classes


def is_inline(element):
    return isinstance(element.tag, str) and element.tag.lower() in INLINE and not untranslatable(element)


class Segment:
    """A run of inline content: its pieces of text, each with the inline elements around it (outermost first)."""

    def __init__(self):
        self.pieces = []  # (text, (element, ...))
        self.elements = []  # every inline element opened in the run, in document order
        self.opened_at = {}  # each element's offset in `text` where it opens
        self.length = 0

    def open(self, element):
        self.elements.append(element)
        self.opened_at[element] = self.length

    def add(self, text, path):
        if text:
            self.pieces.append((text, path))
            self.length += len(text)

    @property
    def text(self):
        return "".join(text for text, _ in self.pieces)

    def words(self):
        """Each whitespace-separated word of `text` and the set of elements any of its characters is in."""
        words, current, tags = [], [], set()
        for text, path in self.pieces:
            for char in text:
                if char.isspace():
                    if current:
                        words.append(("".join(current), tags))
                        current, tags = [], set()
                else:
                    current.append(char)
                    tags |= set(path)
        if current:
            words.append(("".join(current), tags))
        return words


def pure_inline(element):
    """An inline element holding only text and inline elements: translated with the words around it."""
    return is_inline(element) and all(is_inline(e) for e in element.iterdescendants())


def _segments(block):
    """The parts of a block's own content, in order: `("segment", Segment)` for each run of text and pure inline
    elements, `("keep", node)` for each other child (a block, kept in place and translated as its own block; an
    untranslatable or void element, kept as it is)."""
    parts, segment = [], Segment()

    def walk(element, path):
        segment.open(element)
        segment.add(element.text, path)
        for child in element:
            walk(child, (*path, child))
            segment.add(child.tail, path)

    segment.add(block.text, ())
    for child in block:
        if pure_inline(child):
            walk(child, (child,))
        else:
            parts += [("segment", segment), ("keep", child)]
            segment = Segment()
        segment.add(child.tail, ())
    return [*parts, ("segment", segment)]


def _spans(segment, target_words, alignment):
    """Each inline element's span of target words `[start, stop)`, nested as in the source and in order."""
    source = segment.words()
    aligned = {}
    for i, j in alignment:
        if i < len(source) and j < len(target_words):
            aligned.setdefault(i, set()).add(j)
    spans = {}
    for element in segment.elements:  # document order: parents before children
        inside = [i for i, (_, tags) in enumerate(source) if element in tags]
        words = {j for i in inside for j in aligned.get(i, ())}
        if words:
            start, stop = min(words), max(words) + 1
        else:  # after the target word of the nearest aligned source word before it (for an empty one, where it is)
            count = inside[0] if inside else len(segment.text[: segment.opened_at[element]].split())
            before = next((aligned[i] for i in reversed(range(count)) if i in aligned), ())
            start = stop = max(before) + 1 if before else 0
        parent = element.getparent()
        if parent in spans:  # inside the parent's span
            low, high = spans[parent]
            start, stop = min(max(start, low), high), min(max(stop, low), high)
        for other, (low, high) in spans.items():  # after an earlier sibling's span
            if other.getparent() is parent and other is not element and low < stop and start < high:
                start = min(max(start, high), stop)
        spans[element] = (start, max(start, stop))
    return spans


def _rebuild(segment, translation, alignment):
    """The translated run as markup: its text, with its elements around their words (a string of HTML)."""
    words = translation.split()
    spans = _spans(segment, words, alignment)
    depth = {element: len(list(element.iterancestors())) for element in segment.elements}
    text, worded = segment.text, set().union(*(tags for _, tags in segment.words()))
    spaced = {  # a placeholder (no words in it) that a space came before: one comes before it here too
        e for e in segment.elements if e not in worded and text[: segment.opened_at[e]][-1:].isspace()
    }
    out = []
    for position in range(len(words) + 1):
        for element in sorted(
            (e for e, (start, stop) in spans.items() if stop == position and start < stop or start == stop == position),
            key=lambda e: -depth[e],
        ):
            if spans[element][0] == spans[element][1]:  # empty: open and close here
                out.append((" " if element in spaced and 0 < position < len(words) else "") + _open(element))
                out.append(_close(element))
            else:
                out.append(_close(element))
        if position == len(words):
            break
        if position:
            out.append(" ")
        for element in sorted(
            (e for e, (start, stop) in spans.items() if start == position and start < stop), key=lambda e: depth[e]
        ):
            out.append(_open(element))
        out.append(html_lib.escape(words[position], quote=False))
    return "".join(out)


def _open(element):
    attributes = "".join(f' {name}="{html_lib.escape(value)}"' for name, value in element.attrib.items())
    return f"<{element.tag}{attributes}>"


def _close(element):
    return f"</{element.tag}>"


def _blocks(root):
    """The elements whose own inline content is translated: every translatable element that is not inline."""
    for element in root.iter():
        if isinstance(element.tag, str) and not is_inline(element) and not untranslatable(element):
            if not any(untranslatable(a) for a in element.iterancestors()):
                yield element


class Fragment:
    """An HTML fragment (or with `document`, a whole page) to translate: `lines`, the plain text of each of its
    segments (one sentence a line to the model), then `render(results)` with each line's `(translation,
    alignment)` gives the translated markup."""

    def __init__(self, markup, document=False):
        self.document = document  # a whole page (<html>, <head>, <body>), else a fragment
        if document:
            self.root = lxml_html.document_fromstring(markup)
        else:
            self.root = lxml_html.fragment_fromstring(markup, create_parent="div")
        self.plans = [(block, _segments(block)) for block in _blocks(self.root)]
        segments = [part.text for _, parts in self.plans for kind, part in parts if kind == "segment"]
        self._all = [" ".join(text.split()) for text in segments]
        self.lines = [line for line in self._all if line]

    def render(self, results):
        found = iter(results)
        translated = [next(found) if line else ("", ()) for line in self._all]
        # Innermost blocks first: an outer block's kept children are serialized with their own translations in.
        index = len(translated)
        for block, parts in reversed(self.plans):
            index -= sum(kind == "segment" for kind, _ in parts)
            answers = iter(translated[index:])
            if not any(kind == "segment" and part.text.strip() for kind, part in parts):
                continue  # no text of its own (a list, a table row): its children are translated in place
            rebuilt = []
            for kind, part in parts:
                if kind == "keep":
                    tail, part.tail = part.tail, None
                    rebuilt.append(etree.tostring(part, encoding="unicode", method="html"))
                    part.tail = tail
                    continue
                translation, alignment = next(answers)
                text = part.text
                if not text.strip():
                    rebuilt.append(html_lib.escape(text, quote=False))
                    continue
                lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
                rebuilt += [
                    html_lib.escape(lead, quote=False),
                    _rebuild(part, translation, alignment),
                    html_lib.escape(trail, quote=False),
                ]
            _replace_content(block, "".join(rebuilt))
        if self.document:
            doctype = self.root.getroottree().docinfo.doctype or None
            return lxml_html.tostring(self.root, encoding="unicode", method="html", doctype=doctype)
        return _inner(self.root)


def translate_fragment(markup, translate):
    """`markup` (an HTML fragment, str) with its text translated by `translate` and its structure kept."""
    fragment = Fragment(markup)
    return fragment.render(translate(fragment.lines) if fragment.lines else [])


def _replace_content(block, inner):
    """Sets `block`'s content (text and children) to the HTML `inner`, keeping its tail."""
    parsed = lxml_html.fragment_fromstring(f"<div>{inner}</div>")
    for child in list(block):
        block.remove(child)
    block.text = parsed.text
    for child in parsed:
        block.append(child)


def _inner(root):
    return (html_lib.escape(root.text or "", quote=False)) + "".join(
        etree.tostring(child, encoding="unicode", method="html") for child in root
    )
