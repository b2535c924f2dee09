"""Glossaries: source terms and the target terms they must translate to, turned into each sentence's constraints.

A glossary file is a header-free TSV, as CAT tools export it: one `source term<TAB>target term` a line (blank lines
skipped). A source term is found in a sentence as whole words (not inside a longer word), with the case the
glossary gives; where found, its target term becomes a constraint of that sentence (`kmt.inference.constrained`).
Longer terms win where two overlap, and each target term is asked once a sentence however often its source term
occurs.

A model trained with the terminology transform (`data.terminology`, `kmt.data.terminology`) takes its terms inline
instead: `annotate` marks each source term found with its target term, as Dinu et al. (2019) and OpenNMT-py's
terminology transform do, and the model copies the target term into its translation.

Example:
>>> glossary = Glossary([("dog", "Hund"), ("hot dog", "Hotdog")])
>>> glossary.constraints("A dog eats a hot dog.")
['Hund', 'Hotdog']
>>> glossary.constraints("Dogs and hotdogs.")
[]
>>> glossary.annotate("A dog barks.")
'A ｟src_term_start｠ dog ｟tgt_term_start｠ Hund ｟tgt_term_end｠ barks.'
"""

import re
from collections.abc import Iterable
from pathlib import Path

from kmt.errors import KmtError

# The inline markers of an annotated source term (OpenNMT-py's terminology transform's): the source term follows
# SOURCE_START, its target term follows TARGET_START, and TARGET_END closes the annotation.
SOURCE_START, TARGET_START, TARGET_END = "｟src_term_start｠", "｟tgt_term_start｠", "｟tgt_term_end｠"
MARKERS = (SOURCE_START, TARGET_START, TARGET_END)


class Glossary:
    """Source term -> target term pairs (`terms`), found in sentences as whole words, case as given.

    Args:
        terms: `(source term, target term)` pairs, or a dict of them.
    """

    def __init__(self, terms: Iterable[tuple[str, str]] | dict[str, str]):
        pairs = list(terms.items() if isinstance(terms, dict) else terms)
        self.terms = {}
        for source, target in pairs:
            source, target = " ".join(str(source).split()), " ".join(str(target).split())
            if not source or not target:
                raise KmtError(f"a glossary term is empty: {source!r} -> {target!r}")
            self.terms[source] = target
        # Longest first, so that "hot dog" is found before "dog"; spaces in a term match any run of spaces.
        ordered = sorted(self.terms, key=len, reverse=True)
        alternatives = "|".join(r"\s+".join(map(re.escape, term.split())) for term in ordered)
        self._pattern = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)") if ordered else None

    @classmethod
    def load(cls, path) -> "Glossary":
        """The glossary in the TSV file `path`; a line without a tab, or with an empty side, is a `KmtError` naming
        the file and line."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise KmtError(f"cannot read the glossary {path}: {error.strerror}") from None
        except UnicodeDecodeError as error:
            raise KmtError(f"{path} is not UTF-8 text: {error.reason} at byte {error.start}") from None
        pairs = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            source, tab, target = line.partition("\t")
            if not tab or not source.strip() or not target.strip() or "\t" in target:
                raise KmtError(
                    f"{path}:{number}: a glossary line is 'source term<TAB>target term'. Received: {line[:80]!r}"
                )
            pairs.append((source, target))
        return cls(pairs)

    def __len__(self):
        return len(self.terms)

    def matches(self, sentence: str) -> list[tuple[int, int, str]]:
        """`(start, end, target term)` of each source term found in `sentence`, left to right, none overlapping."""
        if self._pattern is None:
            return []
        return [
            (match.start(), match.end(), self.terms[" ".join(match.group().split())])
            for match in self._pattern.finditer(sentence)
        ]

    def constraints(self, sentence: str) -> list[str]:
        """The target terms of the source terms found in `sentence`, in the order found, each once."""
        return list(dict.fromkeys(target for _, _, target in self.matches(sentence)))

    def annotate(self, sentence: str) -> str:
        """`sentence` with every source term found annotated inline with its target term, for a model trained with
        the terminology transform: `SOURCE_START term TARGET_START target term TARGET_END`."""
        return annotated(sentence, self.matches(sentence))


def annotated(sentence: str, matches) -> str:
    """`sentence` with the `(start, end, target term)` spans of `matches` (left to right) annotated inline."""
    pieces, last = [], 0
    for start, end, target in matches:
        term = " ".join(sentence[start:end].split())
        pieces += [sentence[last:start], f"{SOURCE_START} {term} {TARGET_START} {target} {TARGET_END}"]
        last = end
    return "".join(pieces) + sentence[last:]
