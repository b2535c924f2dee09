"""Text to text: the `Translator` protocol and what its implementations share (`BatchedTranslator`); they are the
Keras model of a run directory (`kmt.inference.keras_translator.KerasTranslator`, any backend), a SavedModel export
(`kmt.inference.saved_model_translator.SavedModelTranslator`) and a CTranslate2 directory
(`kmt.inference.ctranslate2.CT2Translator`). `kmt.inference.loading.load_translator` opens any of them.

Every translator translates lines (`translate`, optionally each from a target prefix and with word alignments),
scores pairs (`score`) and aligns pairs (`align`) in batches of similar length (`kmt.inference.translate.map_sorted`)
and returns the results in input order: result i is line i's, empty lines included (they translate to "" with
score 0).

Example:
>>> translator = load_translator("runs/dates/<time>")  # doctest: +SKIP
>>> translator.translate(["Tuesday, March 5, 1996"])  # doctest: +SKIP
['1996-03-05']
>>> translator.translate(["5 march 96"], settings=translator.settings.replace(beam_size=8), nbest=2)  # doctest: +SKIP
[[Hypothesis(text='1996-03-05', score=-0.01, alignment=None), Hypothesis(text='1996-05-03', score=-5.2, ...)]]
>>> translator.translate(["5 march 96"], prefixes=["1996-05"], alignments=True)  # doctest: +SKIP
[Hypothesis(text='1996-05-03', score=-5.2, alignment=((2, 0),))]
"""

import logging
import math
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

from kmt.errors import KmtError
from kmt.inference.glossary import Glossary
from kmt.inference.settings import SearchSettings, SettingsError
from kmt.inference.translate import map_sorted
from kmt.special_ids import PAD_ID

logger = logging.getLogger(__name__)


class Hypothesis(NamedTuple):
    """One translation, its score (the log-probability, divided by the length penalty under beam search) and, when
    asked for, its word alignment: `(source word, target word)` pairs over whitespace-separated words
    (`kmt.inference.alignments`)."""

    text: str
    score: float
    alignment: tuple[tuple[int, int], ...] | None = None


class Score(NamedTuple):
    """A pair's log-probability under the model (natural log; its target tokens' and the end token's) and the count
    of tokens scored (the target's plus the end token), for per-token scores and perplexity. NaN for a pair whose
    source is empty or which has a side longer than the model's `max_length`."""

    log_probability: float
    tokens: int


class Translator(Protocol):
    """What translates text: `translate(lines)` and `score(sources, targets)`.

    Attributes:
        settings: the `SearchSettings` it searches with unless told otherwise; None where they are baked in and
            cannot change (a SavedModel).
    """

    settings: SearchSettings | None

    def translate(
        self,
        lines: Sequence[str],
        *,
        settings: SearchSettings | None = None,
        nbest: int | None = None,
        prefixes: Sequence[str] | None = None,
        alignments: bool = False,
        constraints: Sequence[Sequence[str]] | None = None,
    ) -> list[str] | list["Hypothesis"] | list[list["Hypothesis"]]:
        """Each line's best translation (`nbest` None), or its `nbest` best `Hypothesis`es, best first."""

    def score(self, sources: Sequence[str], targets: Sequence[str]) -> list["Score"]:
        """Each pair's `Score`: the log-probability of `targets[i]` as a translation of `sources[i]`."""

    def align(self, sources: Sequence[str], targets: Sequence[str]) -> list[tuple[tuple[int, int], ...]]:
        """Each pair's word alignment, `(source word, target word)` pairs (forced alignment)."""


class BatchedTranslator:
    """`translate` and `score` over batches of `batch_size` similar lengths; a subclass searches one batch
    (`_translate_batch`) and scores one (`_score_batch`)."""

    settings: SearchSettings | None = None
    batch_size: int = 64
    inline_terms: bool = False  # the model learned to copy terms given inline (`kmt.data.terminology`)

    def translate(
        self,
        lines: Sequence[str],
        *,
        settings: SearchSettings | None = None,
        nbest: int | None = None,
        prefixes: Sequence[str] | None = None,
        alignments: bool = False,
        constraints: Sequence[Sequence[str]] | None = None,
        glossary: Glossary | None = None,
        progress: bool = False,
        long_prefixes: str = "raise",
        first_line: int = 1,
    ) -> list[str] | list[Hypothesis] | list[list[Hypothesis]]:
        """Translates `lines`, a sequence of str: a list of str (`nbest` None), or of each line's `nbest` best
        `Hypothesis`es, best first (or one `Hypothesis` a line with `alignments` and no `nbest`). Inputs are cut to
        the model's `max_length` tokens.

        Settings, `nbest`, `prefixes` and `alignments` are checked before any line is translated (`SettingsError`,
        or `KmtError` for what this kind of translator cannot do), so an empty call checks them.

        Args:
            lines: the sentences to translate.
            settings: the `SearchSettings` to search with (their `nbest` is this call's). Defaults to `None`: the
                translator's own.
            nbest: int n: return the n best hypotheses of each line, n at most the beam size. Defaults to `None`.
            prefixes: one str per line that its translation must begin with ("" for none), the search continuing
                from it (CTranslate2's `target_prefix`). A prefix longer than its sentence's output limit is a
                `KmtError` naming its line. Defaults to `None`.
            alignments: give each hypothesis its word `alignment` (`align` on the translation). Defaults to `False`.
            constraints: one list of target phrases per line, each of which its translation must contain
                (lexically constrained beam search, fairseq's `--constraints`; not CTranslate2). An empty phrase is
                a `KmtError` naming its line, as are phrases that need more tokens than the sentence's output
                limit; a translation that could not contain them all is logged as a warning, with its line.
                Defaults to `None`.
            glossary: a `kmt.Glossary` whose terms found in a line must be translated its way: given inline
                (`Glossary.annotate`) to a model trained with the terminology transform (`inline_terms`), else
                added to the line's `constraints`. Defaults to `None`.
            progress: log `translated done/total (lines/s)` after each batch. Defaults to `False`.
            long_prefixes: `"raise"` a `KmtError` for a prefix longer than its sentence's limit, or `"keep"` going:
                that line translates to "" with a NaN score (as the SavedModel's `translate_prefix` answers; what a
                server does, one request's prefix not failing the others batched with it). Defaults to `"raise"`.
            first_line: the number messages give `lines[0]` (a stream's later chunks). Defaults to `1`.
        """
        if nbest is not None and nbest < 1:
            raise SettingsError(f"nbest must be positive. Received: nbest={nbest}")
        lines = sources = list(lines)  # `sources` are what the model reads; `lines` what alignments count
        if glossary is not None and self.inline_terms:
            sources = [glossary.annotate(line) for line in lines]
        elif glossary is not None:
            given = constraints if constraints is not None else [[] for _ in lines]
            constraints = [
                list(phrases) + [t for t in glossary.constraints(line) if t not in phrases]
                for phrases, line in zip(given, lines)
            ]
        if prefixes is not None:
            prefixes = list(prefixes)
            if len(prefixes) != len(lines):
                raise KmtError(
                    f"translate takes one prefix a line. Received: {len(lines)} lines, {len(prefixes)} prefixes"
                )
        if constraints is not None:
            constraints = [check_phrases(first_line + i, phrases) for i, phrases in enumerate(constraints)]
            if len(constraints) != len(lines):
                raise KmtError(
                    "translate takes one list of constraints a line. "
                    f"Received: {len(lines)} lines, {len(constraints)} lists"
                )
        settings = self._checked(settings, nbest or 1)
        self._check_features(
            prefixes=prefixes is not None, alignments=alignments, nbest=nbest or 1, constraints=constraints is not None
        )
        if constraints is not None and (settings or self.settings) is not None:  # a SavedModel's: its signature
            (settings or self.settings).strategy.require("constraints")
        items = [
            (line, prefixes[i] if prefixes is not None else "", constraints[i] if constraints is not None else [])
            for i, line in enumerate(sources)
        ]
        results = map_sorted(
            lambda batch: self._translate_batch(
                [line for line, _, _ in batch],
                settings,
                nbest or 1,
                [p for _, p, _ in batch] if prefixes is not None else None,
                [c for _, _, c in batch] if constraints is not None else None,
            ),
            items,
            self.batch_size,
            key=lambda item: len(item[0]),
            progress=progress,
        )
        for i, (_, prefix, phrases) in enumerate(items if long_prefixes == "raise" else ()):
            if (prefix or phrases) and math.isnan(results[i][0].score):
                what = f"the prefix {prefix[:60]!r} is longer" if prefix else "the constraints need more tokens"
                what = (
                    f"the prefix {prefix[:60]!r} and the constraints need more tokens" if prefix and phrases else what
                )
                raise KmtError(
                    f"line {first_line + i}: {what} than the sentence's output limit, "
                    "min(max_length, ceil(max_length_a * source tokens + max_length_b)) tokens"
                )
        if constraints is not None:
            missed = [
                first_line + i
                for i, (phrases, found) in enumerate(zip(constraints, results))
                if not met(phrases, found[0])
            ]
            if missed:
                logger.warning(
                    "%d of %d translations miss a constraint (lines %s)",
                    len(missed),
                    len(lines),
                    ", ".join(map(str, missed[:20])) + (", ..." if len(missed) > 20 else ""),
                )
        if alignments:
            pairs = [(line, h.text) for line, hypotheses in zip(lines, results) for h in hypotheses]  # "" aligns none
            found = iter(self.align(*zip(*pairs)) if pairs else ())
            results = [[h._replace(alignment=next(found)) for h in hypotheses] for hypotheses in results]
        if nbest is None:
            return [hypotheses[0] if alignments else hypotheses[0].text for hypotheses in results]
        return results

    def align(self, sources: Sequence[str], targets: Sequence[str], *, progress: bool = False):
        """The word alignment of each `(sources[i], targets[i])` pair, as `(source word, target word)` pairs over
        whitespace-separated words (forced alignment: the model's attention over the given translation; Marian's
        `--alignment hard`). An empty side aligns nothing."""
        sources, targets = list(sources), list(targets)
        if len(sources) != len(targets):
            raise KmtError(
                f"align takes as many targets as sources. Received: {len(sources)} sources, {len(targets)} targets"
            )
        self._check_features(alignments=True)
        return map_sorted(
            lambda batch: self._align_batch(*zip(*batch)),
            list(zip(sources, targets)),
            self.batch_size,
            key=lambda pair: len(pair[0]) + len(pair[1]),
            progress=progress,
            verb="aligned",
        )

    def score(self, sources: Sequence[str], targets: Sequence[str], *, progress: bool = False) -> list[Score]:
        """The `Score` of each `(sources[i], targets[i])` pair (forced decoding; fairseq's `--score-reference`)."""
        sources, targets = list(sources), list(targets)
        if len(sources) != len(targets):
            raise ValueError(
                f"score takes as many targets as sources. Received: {len(sources)} sources, {len(targets)} targets"
            )
        return map_sorted(
            lambda batch: self._score_batch(*zip(*batch)),
            list(zip(sources, targets)),
            self.batch_size,
            key=lambda pair: len(pair[0]) + len(pair[1]),
            progress=progress,
            verb="scored",
        )

    def _checked(self, settings, nbest):
        """The settings to search with: `settings` or the translator's own, with `nbest`."""
        return (settings or self.settings).replace(nbest=nbest)

    def _check_features(self, prefixes=False, alignments=False, nbest=1, constraints=False):
        """Raises a `KmtError` for what this translator cannot do (prefixes, alignments, constraints, n-best lists
        with a prefix), naming what can."""

    def _translate_batch(self, lines, settings, nbest, prefixes, constraints=None):  # -> [[Hypothesis] * nbest]
        raise NotImplementedError

    def _score_batch(self, sources, targets):  # -> [Score for each pair]
        raise NotImplementedError

    def _align_batch(self, sources, targets):  # -> [alignment pairs for each pair]
        raise NotImplementedError

    def _scoring_rows(self, sources, targets):
        """`(source rows, target rows, the pairs that fit, results)` of a batch to score: each pair that does not fit
        the model's length keeps its NaN `Score`."""
        source_rows = self.vocabularies.source.encode(sources)
        target_rows = self.vocabularies.target.encode(targets)
        fits = scorable(source_rows, target_rows, self.max_length, self.vocabularies.source.added)
        return source_rows, target_rows, fits, [Score(math.nan, len(t) + 1) for t in target_rows]


def check_phrases(line, phrases):
    """Line `line`'s constraints as a list of str, each with text: an empty one is a `KmtError` naming its line."""
    if isinstance(phrases, str):
        raise KmtError(f"line {line}: constraints are a list of phrases a line. Received: {phrases!r}")
    phrases = list(phrases)
    for phrase in phrases:
        if not str(phrase).strip():
            raise KmtError(f"line {line}: a constraint is empty: give each a word or more")
    return phrases


def met(phrases, hypothesis):
    """Whether `hypothesis`'s text contains each of `phrases` (what a user checks; a sentence translated to ""
    because its constraints did not fit meets none)."""
    text = " ".join(hypothesis.text.split())
    return all(" ".join(phrase.split()) in text for phrase in phrases)


def scorable(source_rows, target_rows, max_length, added=0):
    """The indices of the pairs a model of `max_length` scores, as the SavedModel's `score` does: a source of 1 to
    `max_length` tokens (more than the `added` ones its tokenizer ends every string with), a target shorter than
    `max_length` (the start token and its tokens need a position each, as in training). The others score NaN."""
    return [
        i
        for i, (s, t) in enumerate(zip(source_rows, target_rows))
        if added < len(s) <= max_length and len(t) < max_length
    ]


def padded(rows, width=None):
    """Rows of ids as an int32 `(B, max(1, longest))` array, pad 0 after each (cut to `width` ids)."""
    rows = [row[:width] for row in rows]
    array = np.full((len(rows), max(1, *map(len, rows))), PAD_ID, np.int32)
    for i, row in enumerate(rows):
        array[i, : len(row)] = row
    return array


def phrase_array(rows):
    """Each sentence's phrases (lists of ids) as an int32 `(B, max(1, phrases), max(1, longest))` array, pad 0."""
    count = max(1, *map(len, rows))
    width = max(1, *(len(phrase) for phrases in rows for phrase in phrases)) if any(rows) else 1
    array = np.full((len(rows), count, width), PAD_ID, np.int32)
    for i, phrases in enumerate(rows):
        for j, phrase in enumerate(phrases):
            array[i, j, : len(phrase)] = phrase
    return array


def translate_signatures(translate, translate_nbest, text, nbest):
    """`[[Hypothesis] * nbest for each line]` from a `translate` signature (nbest 1) or a `translate_nbest` one."""
    if nbest == 1:
        outputs = translate(text=text)
        return [
            [Hypothesis(t.decode("utf-8"), float(s))]
            for t, s in zip(outputs["translation"].numpy(), outputs["score"].numpy())
        ]
    outputs = translate_nbest(text=text)
    return [
        [Hypothesis(t.decode("utf-8"), float(s)) for t, s in zip(texts[:nbest], scores[:nbest])]
        for texts, scores in zip(outputs["translations"].numpy(), outputs["scores"].numpy())
    ]
