"""Translation catalogues, PO and XLIFF (`.po`, `.pot`, `.xliff`, `.xlf`), through translate-toolkit (the `documents`
extra)."""

from kmt.documents.word import optional
from kmt.errors import KmtError


class CatalogueDocument:
    """A PO or XLIFF catalogue (translate-toolkit): each unit without a translation is filled and marked fuzzy
    (machine translated, for a translator to review); units with one (fuzzy ones too) and the header are left
    alone."""

    alignments = False
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
        self.sentences = [" ".join(unit.source.split()) for unit in self.units]

    def render(self, translations):
        for unit, translation in zip(self.units, translations):
            unit.target = translation
            unit.markfuzzy(True)
        return bytes(self.store)
