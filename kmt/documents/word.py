"""Word files (`.docx`), through python-docx (the `documents` extra)."""

from kmt.documents.sentences import Sentences
from kmt.errors import KmtError


class WordDocument:
    """A Word file (python-docx): each paragraph of the body, its tables, headers and footers translated, each run's
    formatting (bold, italic, font, ...) kept on the target words aligned to its words."""

    alignments = True
    binary = True

    def __init__(self, content, language="en"):
        import io

        docx = optional("docx", "python-docx")
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


def optional(module, package):
    try:
        return __import__(module)
    except ImportError:
        raise KmtError(f"this format needs {package}: pip install 'kmt[documents]'") from None
