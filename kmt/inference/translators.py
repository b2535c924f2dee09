"""Text to text: the `Translator` protocol and two of its implementations, the Keras model of a run directory
(`KerasTranslator`, any backend) and a SavedModel export (`SavedModelTranslator`); the third, a CTranslate2
directory, is `kmt.inference.ctranslate2.CT2Translator`. `kmt.inference.loading.load_translator` opens any of them.

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

import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

from kmt.errors import KmtError
from kmt.inference.glossary import MARKERS, Glossary
from kmt.inference.settings import SearchSettings, SettingsError
from kmt.inference.translate import map_sorted
from kmt.special_ids import END_ID, PAD_ID

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


class KerasTranslator(BatchedTranslator):
    """Text to text with a Keras model, under any backend: the `kmt.inference.translator.TranslatorModule` graph
    (tokenizer, search and detokenizer traced once per `SearchSettings`, as the SavedModel holds it) under
    TensorFlow; elsewhere, and for prefixes and alignments, `search_ids` and `attention_ids` on ids from the
    `sentencepiece` library.

    Args:
        model: a kmt model, or a list of models sharing `vocabularies`: an ensemble.
        vocabularies: the run's `kmt.tokenizer.Vocabularies`.
        settings: the `SearchSettings` to search with by default. Defaults to `SearchSettings()`.
        batch_size: sentences per batch. Defaults to `64`.
    """

    def __init__(self, model, vocabularies, settings: SearchSettings | None = None, *, batch_size: int = 64):
        from kmt.inference.ensemble import ensemble_members
        from kmt.inference.lengths import max_length_of

        self.model, self.vocabularies = model, vocabularies
        self.settings = settings or SearchSettings()
        self.batch_size = batch_size
        self.max_length = max_length_of(ensemble_members(model))
        self._modules = {}  # SearchSettings -> TranslatorModule, under TensorFlow
        self.inline_terms = vocabularies.source.holds(MARKERS)

    def _check_features(self, prefixes=False, alignments=False, nbest=1, constraints=False):
        from kmt.inference.alignments import require_alignment
        from kmt.inference.ensemble import ensemble_members

        if alignments:
            require_alignment(ensemble_members(self.model)[0])

    def _translate_batch(self, lines, settings, nbest, prefixes, constraints=None):
        import keras

        if keras.backend.backend() == "tensorflow" and prefixes is None and constraints is None:
            return self._translate_graph(lines, settings.replace(nbest=None), nbest)
        from kmt.inference.decoding import search_ids
        from kmt.inference.lengths import decode_length

        settings = dataclasses.replace(settings, max_length=settings.max_length or self.max_length)
        rows = [ids[: settings.max_length] for ids in self.vocabularies.source.encode(lines)]  # as the graph cuts them
        limits = [
            decode_length(len(row), settings.max_length, settings.max_length_a, settings.max_length_b) for row in rows
        ]
        prefix_rows = self.vocabularies.target.encode(prefixes) if prefixes is not None else [[] for _ in rows]
        phrase_rows = [
            [ids[ids > END_ID] for ids in self.vocabularies.target.encode(list(c))]
            for c in constraints or [[] for _ in rows]
        ]
        # What must fit the output limit: the prefix, and the constraints beside it (one may lie inside it).
        needed = [max(len(p), sum(map(len, c))) for p, c in zip(prefix_rows, phrase_rows)]
        too_long = {i for i, (n, limit) in enumerate(zip(needed, limits)) if n > limit}
        prefix = None if prefixes is None else padded([[] if i in too_long else p for i, p in enumerate(prefix_rows)])
        phrases = None
        if constraints is not None:
            phrases = phrase_array([[] if i in too_long else c for i, c in enumerate(phrase_rows)])
        tokens, scores = search_ids(
            self.model, padded(rows), settings, prefix=prefix, constraints=phrases, hypotheses=True
        )
        tokens, scores = keras.ops.convert_to_numpy(tokens), keras.ops.convert_to_numpy(scores)  # (B, n, L), (B, n)
        texts = self.vocabularies.target.decode(tokens.reshape(-1, tokens.shape[-1]))
        return [
            [
                Hypothesis("", math.nan)
                if i in too_long
                else Hypothesis(texts[i * nbest + k], float(scores[i, k]))
                if len(row) > self.vocabularies.source.added
                else Hypothesis("", 0.0)
                for k in range(nbest)
            ]
            for i, row in enumerate(rows)
        ]

    def _translate_graph(self, lines, settings, nbest):
        import tensorflow as tf

        from kmt.inference.translator import TranslatorModule

        if settings not in self._modules:
            self._modules[settings] = TranslatorModule(self.model, self.vocabularies, settings)
        return translate_signatures(
            self._modules[settings].translate,
            self._modules[settings].translate_nbest,
            tf.constant(lines, tf.string),
            nbest,
        )

    def _score_batch(self, sources, targets):
        import keras

        from kmt.inference.score import score_ids

        source_rows = self.vocabularies.source.encode(sources)
        target_rows = self.vocabularies.target.encode(targets)
        fits = scorable(source_rows, target_rows, self.max_length, self.vocabularies.source.added)
        results = [Score(math.nan, len(t) + 1) for t in target_rows]
        if fits:
            scores, _ = score_ids(
                self.model, padded([source_rows[i] for i in fits]), padded([target_rows[i] for i in fits])
            )
            for i, value in zip(fits, keras.ops.convert_to_numpy(scores)):
                results[i] = Score(float(value), results[i].tokens)
        return results

    def _align_batch(self, sources, targets):
        import keras

        from kmt.inference.alignments import attention_ids, links, piece_kinds, word_alignment

        source_rows = [row[: self.max_length] for row in self.vocabularies.source.encode(sources)]
        target_rows = [row[: self.max_length - 1] for row in self.vocabularies.target.encode(targets)]
        target = padded([[*row, END_ID] for row in target_rows])  # the end token's step too, as in a search
        attention = attention_ids(self.model, padded(source_rows), target)
        best = word_alignment(
            attention,
            padded(source_rows),
            target,
            piece_kinds(self.vocabularies.source),
            piece_kinds(self.vocabularies.target),
        )
        return [links(row) for row in keras.ops.convert_to_numpy(best)]


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


class SavedModelTranslator(BatchedTranslator):
    """Text to text with a kmt SavedModel export (`kmt-export`, a run's `export/`): its `translate`,
    `translate_nbest`, `translate_prefix`, `score` and `align` signatures, with the search settings baked in
    (`settings` is None).

    Args:
        path: the SavedModel directory.
        batch_size: sentences per batch. Defaults to `64`.
    """

    settings = None

    def __init__(self, path, *, batch_size: int = 64):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the graph uses)

        self.path, self.batch_size = path, batch_size
        self.loaded = tf.saved_model.load(str(path))
        self.signatures = dict(self.loaded.signatures)
        if "translate" not in self.signatures:
            raise KmtError(f"{path} has no 'translate' signature; was it exported by kmt?")
        self.inline_terms = hasattr(self.loaded, "inline_terms")  # kmt.inference.translator.TranslatorModule

    def signature(self, name):
        """The SavedModel's signature `name` (`translate`, `translate_nbest`, `translate_prefix`, `translate_align`,
        `score`, `align`)."""
        if name not in self.signatures:
            why = "it was exported by an older kmt; export the run again with `kmt-export RUN_DIR`"
            if name in ("align", "translate_align") and "translate_prefix" in self.signatures:
                why = "its model cannot align (alignments come from a Transformer's cross-attention)"
            raise KmtError(f"{self.path} has no '{name}' signature: {why}")
        return self.signatures[name]

    @property
    def beam_size(self) -> int:
        """K, the beam the export searches with (the hypotheses of its `translate_nbest`)."""
        return self.signature("translate_nbest").structured_outputs["translations"].shape[1]

    def _checked(self, settings, nbest):
        if settings is not None:
            raise KmtError(
                f"{self.path} is a SavedModel, whose search settings are baked in: export the run again "
                "with `kmt-export RUN_DIR --beam-size N --length-penalty A`"
            )
        if nbest > 1 and nbest > self.beam_size:
            raise KmtError(
                f"nbest {nbest} is more than the {self.beam_size} hypotheses of the export's beam; export "
                f"the run with `kmt-export RUN_DIR --beam-size {nbest}`"
            )
        return None

    def _check_features(self, prefixes=False, alignments=False, nbest=1, constraints=False):
        if constraints:
            self.signature("translate_constrained")
            if prefixes:
                raise KmtError(
                    f"{self.path} is a SavedModel, whose translate_constrained takes no prefix: prefixes with "
                    "constraints come from the run directory (`kmt-translate RUN_DIR --prefixes P --constraints C`)"
                )
            if nbest > 1:
                raise KmtError(
                    f"{self.path} is a SavedModel, whose translate_constrained gives the best translation: n-best "
                    "lists with constraints come from the run directory (`kmt-translate RUN_DIR --constraints FILE`)"
                )
        if prefixes:
            self.signature("translate_prefix")
            if nbest > 1:
                raise KmtError(
                    f"{self.path} is a SavedModel, whose translate_prefix gives the best translation: n-best "
                    "lists with prefixes come from the run directory (`kmt-translate RUN_DIR --prefixes FILE`)"
                )
        if alignments:
            self.signature("align")

    def _translate_batch(self, lines, settings, nbest, prefixes, constraints=None):
        import tensorflow as tf

        text = tf.constant(lines, tf.string)
        if constraints is not None:
            count = max(1, *map(len, constraints))
            table = [[*phrases, *[""] * (count - len(phrases))] for phrases in constraints]
            outputs = self.signature("translate_constrained")(text=text, constraints=tf.constant(table, tf.string))
            return [
                [Hypothesis(t.decode("utf-8"), float(s))]
                for t, s in zip(outputs["translation"].numpy(), outputs["score"].numpy())
            ]
        if prefixes is not None:
            outputs = self.signatures["translate_prefix"](text=text, prefix=tf.constant(prefixes, tf.string))
            return [
                [Hypothesis(t.decode("utf-8"), float(s))]
                for t, s in zip(outputs["translation"].numpy(), outputs["score"].numpy())
            ]
        nbest_signature = None if nbest == 1 else self.signature("translate_nbest")
        return translate_signatures(self.signatures["translate"], nbest_signature, text, nbest)

    def _align_batch(self, sources, targets):
        import tensorflow as tf

        from kmt.inference.alignments import parse_pharaoh

        outputs = self.signatures["align"](
            source=tf.constant(sources, tf.string), target=tf.constant(targets, tf.string)
        )
        return [parse_pharaoh(line.decode("utf-8")) for line in outputs["alignment"].numpy()]

    def _score_batch(self, sources, targets):
        import tensorflow as tf

        outputs = self.signature("score")(
            source=tf.constant(sources, tf.string), target=tf.constant(targets, tf.string)
        )
        return [Score(float(p), int(n)) for p, n in zip(outputs["score"].numpy(), outputs["length"].numpy())]
