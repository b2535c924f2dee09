"""`TranslatorModule`, the `tf.Module` of a TensorFlow SavedModel that translates text: tokenizer, encoder, cached
search and detokenizer in one graph.

The graph holds stock TensorFlow ops plus tensorflow-text's SentencePiece ops, so a process that has run
`import tensorflow_text` (which registers those ops) can load and serve it with `tf.saved_model.load`,
`saved_model_cli` or TensorFlow Serving; no kmt code is needed. Signatures `translate` and `serving_default`
take `text`: tf.string `[None]` and return `translation`: tf.string `[None]` and `score`: float32 `[None]`
(the hypothesis' log-probability, divided by the length penalty under beam search). `translate_nbest` takes the
same `text` and returns the beam's n-best list, best first: `translations`: tf.string `[None, K]` and `scores`:
float32 `[None, K]` (K the beam size; one column under greedy search). `score` takes `source` and `target`:
tf.string `[None]` each, pairs of a sentence and a translation of it, and returns the model's log-probability of
each translation, `score`: float32 `[None]` (its tokens' and the end token's; NaN for a pair whose source is empty
or which has a side longer than the model's `max_length`), and `length`: int32 `[None]`, the count of tokens
scored (forced decoding; fairseq's `--score-reference`).

`translate_prefix` takes `text` and `prefix`, tf.string `[None]` each, and returns `translation` and `score` as
`translate` does, each translation beginning with its prefix (token for token after the target tokenizer; an empty
prefix is an ordinary translation); a prefix longer than its sentence's output limit gives "" and a NaN score.
`translate_constrained` takes `text` and `constraints`, tf.string `[None, None]`: each sentence's target phrases
("" for none), which its translation must contain (lexically constrained beam search,
`kmt.inference.constrained`), and returns `translation` and `score`; phrases that need more tokens than the
sentence's output limit give "" and a NaN score. (Not in an export that samples.)
A Transformer's export also has `translate_align`, which returns `translate`'s outputs and `alignment`: tf.string
`[None]`, the translation's word alignment as Pharaoh links `i-j` (source word i, target word j over
whitespace-separated words; `kmt.inference.alignments`), and `align`, which takes `source` and `target` and returns
the pairs' `alignment` (forced alignment).

A model trained with the terminology transform (`kmt.data.terminology`) has a variable `inline_terms`: it takes
a glossary's terms inline in `text` (`kmt.Glossary.annotate`).

An ensemble (a list of models sharing one vocabulary) exports the same signatures; its search and `score` take the
mean of the models' probabilities at each step (`kmt.inference.ensemble`). `export.export_translator` writes it.

Only the model's weights are saved, once each, through the `tf.Module` object graph; no optimizer state.
"""

import keras
import tensorflow as tf

from kmt.inference.alignments import alignments_graph, attention_ids, piece_kinds
from kmt.inference.decoding import search_ids
from kmt.inference.ensemble import ensemble_members
from kmt.inference.glossary import MARKERS
from kmt.inference.lengths import decode_lengths
from kmt.inference.score import score_ids
from kmt.inference.settings import SearchSettings
from kmt.special_ids import END_ID, PAD_ID

TEXT_SPEC = tf.TensorSpec([None], tf.string, name="text")
PAIR_SPECS = [tf.TensorSpec([None], tf.string, name="source"), tf.TensorSpec([None], tf.string, name="target")]
PREFIX_SPECS = [TEXT_SPEC, tf.TensorSpec([None], tf.string, name="prefix")]
CONSTRAINED_SPECS = [TEXT_SPEC, tf.TensorSpec([None, None], tf.string, name="constraints")]


class SharedGraphs:
    """`model` whose encoder and decoder step are graph functions, each traced once and called by every signature of
    a SavedModel (`encode`, `decode_step`), instead of traced again inside each: the export traces and stores them
    once, and a loader builds them once (a third less `saved_model.pb` and loading time for a Transformer with eight
    signatures). The signatures' graphs inline them when they run, so what they compute is unchanged. Everything
    else is the model's."""

    def __init__(self, model):
        self.shared_model = model
        self.encode = tf.function(model.encode, autograph=False, reduce_retracing=True)
        self.decode_step = tf.function(model.decode_step, autograph=False, reduce_retracing=True)

    def __call__(self, inputs, training=False):
        """Teacher-forced logits (`score`'s), the source encoded by the shared `encode`: the model's call without
        its own copy of the encoder."""
        encoder_outputs, source_mask = self.encode(inputs["source"])
        return self.shared_model.decode(inputs["target_in"], encoder_outputs, source_mask)

    def __getattr__(self, name):
        return getattr(self.shared_model, name)


class TranslatorModule(tf.Module):
    """Text to text with a trained model: `module.translate(tf.constant(["..."]))["translation"]`.

    Inputs are truncated to the model's `max_length` tokens; empty or whitespace-only inputs give empty outputs.

    Args:
        model: a `kmt.models.Seq2SeqModel`, or a list of them trained on the same vocabulary: an ensemble, whose
            search scores each next token by the mean of the models' probabilities (and `score` likewise).
        vocabularies: the run's `kmt.tokenizer.Vocabularies` (the ensemble's, shared).
        settings: the `SearchSettings` baked in; its `max_length` (the longest input and output in tokens) defaults
            to the model's (an ensemble's shortest), its `nbest` is ignored (`translate_nbest` returns the whole
            beam). Sampling draws new translations at every call. Defaults to `SearchSettings()`.
        use_cache: bool. Key/value cache (True) or rerunning the decoder on the prefix (False). Defaults to `True`.
    """

    def __init__(self, model, vocabularies, settings: SearchSettings | None = None, use_cache=True):
        super().__init__(name="translator")
        # What the SavedModel must hold: the weights and the SentencePiece resources. The Keras model itself stays
        # in the closure below, untracked.
        #
        # The weights are tracked as the tf.Variables inside the Keras variables (`v.value`), not as the Keras
        # variables: those are what the traced graph captures (it reads `keras_variable.value.handle`), so they
        # are what a loader must restore. A tracked Keras variable exports as a *second* graph variable,
        # `tf.Variable(<the inner one>)` (Keras's TensorFlow `Variable._export_to_saved_model_graph`),
        # and the saver would restore that copy while the signatures read the inner variable: `tf.saved_model.load`
        # copes (it restores through the object graph), but TF1 session loaders (saved_model_cli, TensorFlow
        # Serving) run only the saver's restore op and fail with "Could not find variable ...".
        models = ensemble_members(model)
        self.model_variables = [
            v.value if isinstance(v, keras.Variable) else v for member in models for v in member.variables
        ]
        if vocabularies.source.holds(MARKERS):  # trained with the terminology transform: loaders read this flag
            self.inline_terms = tf.Variable(True, trainable=False, name="inline_terms")
        self.source_ops = vocabularies.source._op
        self.target_ops = vocabularies.target._op
        shared = [SharedGraphs(member) for member in models]
        model = shared if isinstance(model, (list, tuple)) else shared[0]
        settings = settings or SearchSettings()
        max_length = settings.max_length or min(member.max_length for member in models)
        beam_size = settings.beam_size
        settings = settings.replace(max_length=max_length, nbest=beam_size)  # searches the whole beam
        source_tokenizer, target_tokenizer = vocabularies.source, vocabularies.target

        def source_ids(text):
            ids = source_tokenizer.tokenize(text)[:, :max_length]  # (B, None) ragged, truncated
            source = ids.to_tensor(default_value=PAD_ID)  # (B, S)
            source = tf.pad(source, [[0, 0], [0, tf.maximum(1 - tf.shape(source)[1], 0)]])  # S >= 1 if all empty
            return source, ids.row_lengths() <= source_tokenizer.added

        def search(source, prefix=None, constraints=None):
            tokens, scores = search_ids(  # (B, K, L), (B, K)
                model,
                source,
                settings,
                use_cache=use_cache,
                random_uniform=lambda shape: tf.random.uniform(shape),  # a stateful op: new draws every call
                prefix=prefix,
                constraints=constraints,
                hypotheses=True,
            )
            return tokens, tf.cast(scores, tf.float32)

        def search_text(text):
            source, empty = source_ids(text)
            tokens, scores = search(source)
            return tokens, scores, empty, source

        # Traced once: both signatures call this graph function. It searches for the K best, so its early stop
        # waits until no alive beam can still enter them (or K have finished); the best is the same as a 1-best
        # search's. No autograph: the search is written in Keras ops (`keras.ops.while_loop`, no Python control
        # flow on tensors, as JAX needs too), so there is nothing to convert, and converting every function it
        # calls took most of the tracing (5.3 s of a first trace, against 1.4 s without, on the CI machine).
        search_text = tf.function(search_text, autograph=False)

        def best(tokens, scores, empty):  # translate's outputs from a search's
            translation = target_tokenizer.detokenize(tokens[:, 0])  # (B,)
            return {
                "translation": tf.where(empty, tf.constant(""), translation),
                "score": tf.where(empty, tf.zeros_like(scores[:, 0]), scores[:, 0]),
            }

        def translate(text):
            tokens, scores, empty, _ = search_text(text)
            return best(tokens, scores, empty)

        def translate_nbest(text):
            tokens, scores, empty, _ = search_text(text)
            translations = target_tokenizer.detokenize(tf.reshape(tokens, [-1, tf.shape(tokens)[2]]))  # (B*K,)
            translations = tf.reshape(translations, [-1, beam_size])  # (B, K), K static in the signature
            return {
                "translations": tf.where(empty[:, None], tf.constant(""), translations),
                "scores": tf.where(empty[:, None], tf.zeros_like(scores), scores),
            }

        def score(source, target):
            source_ids = source_tokenizer.tokenize(source)  # (B, None) ragged
            target_ids = target_tokenizer.tokenize(target)
            # The target's tokens and the start token need a position each, as in training; a pair cut to fit
            # would be scored as another pair, and an empty source is nothing the model was trained to translate
            # (training drops such pairs), so these get NaN instead.
            source_lengths = source_ids.row_lengths()
            fits = (source_lengths > source_tokenizer.added) & (source_lengths <= max_length)
            fits &= target_ids.row_lengths() < max_length
            source_ids = source_ids[:, :max_length].to_tensor(default_value=PAD_ID)
            source_ids = tf.pad(source_ids, [[0, 0], [0, tf.maximum(1 - tf.shape(source_ids)[1], 0)]])
            padded_target = target_ids[:, : max_length - 1].to_tensor(default_value=PAD_ID)
            scores, lengths = score_ids(model, source_ids, padded_target)
            return {
                "score": tf.where(fits, tf.cast(scores, tf.float32), float("nan")),
                "length": tf.cast(target_ids.row_lengths() + 1, tf.int32),
            }

        def translate_prefix(text, prefix):
            source, empty = source_ids(text)
            prefix_ids = target_tokenizer.tokenize(prefix)  # (B, None) ragged
            limits = decode_lengths(source, max_length, settings.max_length_a, settings.max_length_b)  # (B,)
            fits = prefix_ids.row_lengths() <= tf.cast(limits, tf.int64)  # (B,)
            prefix_ids = tf.where(fits[:, None], prefix_ids.to_tensor(default_value=PAD_ID), PAD_ID)  # (B, P)
            tokens, scores = search(source, prefix_ids)
            translation = target_tokenizer.detokenize(tokens[:, 0])  # (B,)
            return {
                "translation": tf.where(empty | ~fits, tf.constant(""), translation),
                "score": tf.where(empty, 0.0, tf.where(fits, scores[:, 0], float("nan"))),
            }

        def translate_constrained(text, constraints):
            source, empty = source_ids(text)
            shape = tf.shape(constraints)  # (B, C)
            phrase_ids = target_tokenizer.tokenize(tf.reshape(constraints, [-1]))  # (B*C, None) ragged
            phrase_ids = tf.ragged.boolean_mask(phrase_ids, phrase_ids > END_ID)  # no end token (a Marian tokenizer's)
            needed = tf.reduce_sum(tf.reshape(phrase_ids.row_lengths(), shape), axis=1)  # (B,)
            limits = decode_lengths(source, max_length, settings.max_length_a, settings.max_length_b)
            fits = needed <= tf.cast(limits, tf.int64)  # (B,)
            phrases = phrase_ids.to_tensor(default_value=PAD_ID)  # (B*C, W)
            phrases = tf.pad(phrases, [[0, 0], [0, tf.maximum(1 - tf.shape(phrases)[1], 0)]])  # W >= 1
            phrases = tf.reshape(phrases, [shape[0], shape[1], tf.shape(phrases)[1]])  # (B, C, W)
            tokens, scores = search(source, constraints=tf.where(fits[:, None, None], phrases, PAD_ID))
            translation = target_tokenizer.detokenize(tokens[:, 0])
            return {
                "translation": tf.where(empty | ~fits, tf.constant(""), translation),
                "score": tf.where(empty, 0.0, tf.where(fits, scores[:, 0], float("nan"))),
            }

        self.translate = tf.function(translate, input_signature=[TEXT_SPEC], autograph=False)
        if settings.strategy.supports("constraints"):
            self.translate_constrained = tf.function(
                translate_constrained, input_signature=CONSTRAINED_SPECS, autograph=False
            )
        self.translate_nbest = tf.function(translate_nbest, input_signature=[TEXT_SPEC], autograph=False)
        self.translate_prefix = tf.function(translate_prefix, input_signature=PREFIX_SPECS, autograph=False)
        self.score = tf.function(score, input_signature=PAIR_SPECS, autograph=False)
        if not hasattr(models[0], "alignment"):  # alignments come from a Transformer's cross-attention
            return
        source_kinds = tf.constant(piece_kinds(source_tokenizer))  # (V_source,)
        target_kinds = tf.constant(piece_kinds(target_tokenizer))  # (V_target,)

        def alignment(source, target):  # target (B, T): the pieces, the end token, pad
            attention = attention_ids(model, source, target)  # (B, T, S)
            return alignments_graph(attention, source, target, source_kinds, target_kinds)

        alignment = tf.function(alignment, autograph=False, reduce_retracing=True)  # translate_align's and align's

        def translate_align(text):
            tokens, scores, empty, source = search_text(text)
            outputs = best(tokens, scores, empty)
            aligned = alignment(source, tokens[:, 0])
            return {**outputs, "alignment": tf.where(empty, tf.constant(""), aligned)}

        def align(source, target):
            source_ids_ = source_tokenizer.tokenize(source)[:, :max_length].to_tensor(default_value=PAD_ID)
            source_ids_ = tf.pad(source_ids_, [[0, 0], [0, tf.maximum(1 - tf.shape(source_ids_)[1], 0)]])
            target_ids = target_tokenizer.tokenize(target)[:, : max_length - 1]  # (B, None)
            ends = tf.fill([target_ids.nrows(), 1], END_ID)  # the end token's step too, as in a search
            target_ids = tf.concat([target_ids, tf.RaggedTensor.from_tensor(ends)], axis=1).to_tensor(PAD_ID)
            return {"alignment": alignment(source_ids_, target_ids)}

        self.translate_align = tf.function(translate_align, input_signature=[TEXT_SPEC], autograph=False)
        self.align = tf.function(align, input_signature=PAIR_SPECS, autograph=False)
