"""The terminology transform (Dinu et al., 2019, "Training Neural Machine Translation To Apply Terminology
Constraints"; OpenNMT-py's `terminology` transform): a model that learns to copy terms given inline.

With `data.terminology.glossary=terms.tsv`, each training pair whose source holds a glossary term (whole words, case
as given) and whose target holds that term's translation (likewise) has the term annotated in its source, with
probability `data.terminology.ratio` per occurrence (seeded by `data.seed`):

    A ｟src_term_start｠ dog ｟tgt_term_start｠ Hund ｟tgt_term_end｠ barks.  ->  Ein Hund bellt.

The three markers are pieces of their own in the vocabulary the run trains. The model learns to copy what follows
`｟tgt_term_start｠`; at translation time `kmt.Glossary.annotate` marks a sentence's terms the same way (kmt-translate
and kmt-serve do it for `--glossary` when the model's vocabulary holds the markers), so the terms need no constrained
search: they decode at the ordinary search's speed, through CTranslate2 too. Validation and test pairs stay as they
are.
"""

import logging
import random
import re

from kmt.inference.glossary import Glossary, annotated

logger = logging.getLogger(__name__)


class TermAnnotator:
    """Annotates glossary terms in training pairs: `annotator(pairs)` yields the pairs, annotated where a term and its
    translation both occur; `pairs`, `annotated_pairs` and `terms` count what it has seen and marked.

    Args:
        glossary: a `kmt.Glossary`.
        ratio: float in (0, 1]. The probability that a term found on both sides is annotated.
        seed: int. Seeds which occurrences are annotated.
    """

    def __init__(self, glossary: Glossary, ratio: float, seed: int):
        self.glossary, self.ratio = glossary, ratio
        self._random = random.Random(seed)
        self._targets = {}  # target term -> its whole-word pattern
        self.pairs = self.annotated_pairs = self.terms = 0

    def _in(self, term, text):
        pattern = self._targets.get(term)
        if pattern is None:
            words = r"\s+".join(map(re.escape, term.split()))
            pattern = self._targets[term] = re.compile(rf"(?<!\w){words}(?!\w)")
        return pattern.search(text) is not None

    def annotate(self, source: str, target: str) -> str:
        """`source` with the terms annotated that `target` translates as the glossary says (each drawn with
        probability `ratio`)."""
        self.pairs += 1
        matches = [
            match
            for match in self.glossary.matches(source)
            if self._in(match[2], target) and self._random.random() < self.ratio
        ]
        if not matches:
            return source
        self.annotated_pairs += 1
        self.terms += len(matches)
        return annotated(source, matches)

    def __call__(self, pairs):
        for source, target in pairs:
            yield self.annotate(source, target), target

    def log(self, path):
        logger.info(
            "terminology: annotated %s terms of %s in %s of %s training pairs (%.1f%%)",
            f"{self.terms:,}",
            path,
            f"{self.annotated_pairs:,}",
            f"{self.pairs:,}",
            100 * self.annotated_pairs / max(self.pairs, 1),
        )
