"""`KerasTranslator`: a run directory's Keras model as a `kmt.inference.translators.Translator`, under any backend."""

import dataclasses
import logging
import math

from kmt.inference.glossary import MARKERS
from kmt.inference.settings import SearchSettings
from kmt.inference.translators import BatchedTranslator, Hypothesis, Score, padded, phrase_array, translate_signatures
from kmt.special_ids import END_ID

logger = logging.getLogger(__name__)


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

        source_rows, target_rows, fits, results = self._scoring_rows(sources, targets)
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
