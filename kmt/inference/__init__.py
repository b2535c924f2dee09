"""Inference: from token ids or text to translations, with a trained `kmt.models.Seq2SeqModel` or an ensemble.

One meaning per word: *search* maps source ids to output ids (`search.py`, the algorithms over a `next_fn`;
`decoding.search_ids`, a model's search over `settings.SearchSettings`), *score* is the model's log-probability of
a given pair (`score.score_ids`), *translate* maps text to text (the `translators.Translator` protocol: a run's Keras
model, a SavedModel or a CTranslate2 directory, opened by `loading.load_translator`; `translator.TranslatorModule`
is the `tf.Module` a SavedModel is exported from by `export.export_translator`). `steps.py` makes the
`next_fn`s from a model's decoding methods (`kmt.models.Seq2SeqModel`), `ensemble.py` combines several models,
`lengths.py` sets each sentence's output limit. BLEU and chrF are `kmt.metrics`.
"""
