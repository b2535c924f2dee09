"""Translation catalogues, PO and XLIFF (`.po`, `.pot`, `.xliff`, `.xlf`), through translate-toolkit (the `documents`
extra)."""

import copy
import html

from kmt.documents.sentences import Sentences
from kmt.documents.word import optional
from kmt.errors import KmtError


class CatalogueDocument:
    """A PO or XLIFF catalogue (translate-toolkit): each unit without a translation is filled and marked fuzzy
    (machine translated, for a translator to review); units with one (fuzzy ones too) and the header are left
    alone.

    An XLIFF source's inline elements (`<g>`, `<x/>`, `<ph>`, `<bpt>`, `<mrk>`, ...) go into its target as markup's
    inline tags do (`kmt.documents.markup`): `<g>` and `<mrk>` around the target words aligned to the words they
    wrapped, placeholders after the target of the source word before them, each with its attributes and native code,
    once. A catalogue with such units is translated with word alignments (a Transformer's)."""

    binary = True

    def __init__(self, content, language="en", kind="po"):
        optional("translate", "translate-toolkit")
        from translate.storage import po, xliff

        storage = po.pofile if kind == "po" else xliff.xlifffile
        try:
            self.store = storage.parsestring(content)
        except Exception as error:  # translate-toolkit raises its parsers' own errors
            raise KmtError(
                f"not a {kind.upper()} file translate-toolkit can read: {' '.join(str(error).split())[:200]}"
            ) from None
        self.units = [unit for unit in self.store.units if not unit.isheader() and unit.source and not unit.target]
        sources = [_source(unit) if kind != "po" else None for unit in self.units]
        self.alignments = any(source is not None and len(source) for source in sources)
        if not self.alignments:  # plain text: each unit one sentence
            self.sentences = [" ".join(unit.source.split()) for unit in self.units]
            return
        from kmt.documents.markup import Fragment

        self.originals = []  # the inline elements, by their stand-ins' data-x
        self.fragments = [Fragment(_to_html(source, self.originals)) for source in sources]
        self.split = Sentences([line for fragment in self.fragments for line in fragment.lines], language)
        self.sentences = self.split.sentences

    def render(self, translations):
        if self.alignments:
            results = iter(self.split.join(translations))
            markup = [fragment.render([next(results) for _ in fragment.lines]) for fragment in self.fragments]
        for k, unit in enumerate(self.units):
            if not self.alignments:
                unit.target = translations[k]
            else:
                unit.target = "-"  # translate-toolkit makes the <target> element; its content is set below
                target = _source(unit, "target")
                target.text = None
                for child in list(target):
                    target.remove(child)
                _from_html(markup[k], self.originals, target)
            unit.markfuzzy(True)
        return bytes(self.store)


PAIRED = {"g", "mrk"}  # XLIFF 1.2's inline elements whose content is text to translate; the rest hold native code


def _source(unit, name="source"):
    """An XLIFF unit's `<source>` (or `<target>`) element; None for a unit without one."""
    return next((child for child in unit.xmlelement if _name(child) == name), None)


def _name(element):
    return element.tag.rsplit("}", 1)[-1] if isinstance(element.tag, str) else None


def _to_html(element, originals):
    """The content of an XLIFF element as HTML for `kmt.documents.markup`: text escaped, each inline element a
    `<span data-x=N>` (N its index in `originals`), holding the translatable content of `<g>` and `<mrk>`."""
    parts = [html.escape(element.text or "", quote=False)]
    for child in element:
        originals.append(child)
        inner = _to_html(child, originals) if _name(child) in PAIRED else ""
        parts.append(f'<span data-x="{len(originals) - 1}">{inner}</span>')
        parts.append(html.escape(child.tail or "", quote=False))
    return "".join(parts)


def _from_html(markup, originals, target):
    """`target` (an XLIFF element, emptied) filled from `markup`, `_to_html`'s after translation: each stand-in the
    original element again, with its attributes (and native code, or translated content)."""
    from lxml import html as lxml_html

    def fill(out, element):
        out.text = element.text
        for child in element:
            original = originals[int(child.get("data-x"))]
            restored = copy.deepcopy(original)
            restored.tail = child.tail
            if _name(original) in PAIRED:
                restored.text = None
                for grandchild in list(restored):
                    restored.remove(grandchild)
                fill(restored, child)
            out.append(restored)

    fill(target, lxml_html.fragment_fromstring(markup, create_parent="div"))
