"""kmt.inference.decoding and its parts: a model's search (cached and not, alone and in a batch, in a graph), the
step functions, length limits, ensembles and forced-decoding scores against the search's own."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from kmt.inference.decoding import search_ids
from kmt.inference.ensemble import ensemble_log_probs
from kmt.inference.lengths import decode_length, decode_lengths
from kmt.inference.score import score_ids
from kmt.inference.search import beam_search, expand_to_beams, greedy_search
from kmt.inference.steps import cached_next_fn, uncached_next_fn
from kmt.model import build_transformer, transformer_parts

TINY = dict(vocab_size=20, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0, max_length=24)
UNTIED_PRE_NORM = dict(
    shared_embeddings=False, target_vocab_size=17, tied_output=False, norm_first=True, learned_positions=True
)
SOURCE = np.array([[5, 6, 7, 8, 9, 3, 0], [4, 4, 5, 3, 0, 0, 0], [7, 11, 13, 17, 19, 12, 3]], "int32")
PAD, START, END = 0, 2, 3


def _np(x):
    return ops.convert_to_numpy(x)


def _log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _random_model(**overrides):
    keras.utils.set_random_seed(1)
    return build_transformer(**TINY | overrides)


@pytest.mark.parametrize("overrides", [{}, UNTIED_PRE_NORM], ids=["tied_post_norm", "untied_pre_norm"])
def test_cached_and_uncached_next_fn_give_the_models_logits(overrides):
    model = _random_model(num_layers=2, **overrides)
    length = 6
    tokens = np.random.default_rng(0).integers(1, 17, size=(3, length + 1)).astype("int32")
    tokens[:, 0] = START
    expected = _np(model({"source": SOURCE, "target_in": tokens}, training=False))  # (B, L+1, V)
    encoder_outputs, source_mask = transformer_parts(model).encode(ops.convert_to_tensor(SOURCE))
    cached, state = cached_next_fn(model, encoder_outputs, source_mask, length)
    uncached, empty = uncached_next_fn(model, encoder_outputs, source_mask, length)
    for index in range(length):
        index_tensor = ops.convert_to_tensor(index, "int32")
        logits, state = cached(ops.convert_to_tensor(tokens), index_tensor, state)
        np.testing.assert_allclose(_np(logits), expected[:, index], atol=1e-5)
        np.testing.assert_allclose(_np(uncached(tokens, index_tensor, empty)[0]), expected[:, index], atol=1e-5)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_and_uncached_decoding_agree(beam_size):
    model = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    cached, cached_scores = (_np(x) for x in search_ids(model, SOURCE, beam_size=beam_size))
    uncached, uncached_scores = (_np(x) for x in search_ids(model, SOURCE, beam_size=beam_size, use_cache=False))
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_allclose(cached_scores, uncached_scores, atol=1e-4)
    assert cached.shape == (3, min(24, math.ceil(1.5 * 7 + 10)))
    for row, length in zip(cached, (SOURCE != PAD).sum(axis=1)):  # no pad before the end or limit, only pad after
        ends = np.flatnonzero(row == END)
        stop = ends[0] + 1 if len(ends) else math.ceil(1.5 * length + 10)
        assert (row[:stop] != PAD).all() and (row[stop:] == PAD).all()


def test_beam_size_one_equals_greedy_on_a_model():
    model = _random_model()
    encoder_outputs, source_mask = transformer_parts(model).encode(ops.convert_to_tensor(SOURCE))
    next_fn, state = cached_next_fn(model, encoder_outputs, source_mask, 9)
    greedy, _ = greedy_search(next_fn, state, 3, 9)
    beam, _ = beam_search(next_fn, expand_to_beams(state, 1), 3, 9, beam_size=1)
    np.testing.assert_array_equal(_np(beam), _np(greedy))
    np.testing.assert_array_equal(_np(search_ids(model, SOURCE, max_length=9)[0]), _np(greedy)[:, 1:])


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_sentence_decodes_alike_alone_and_beside_a_longer_one(beam_size):
    model = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    bias = model.get_layer("output_projection").bias
    bias.assign(np.where(np.arange(17) == END, -1e4, _np(bias)))  # the end token never wins: the limits bind
    alone_tokens, alone_scores = (_np(x) for x in search_ids(model, SOURCE[1:2, :4], beam_size=beam_size))
    tokens, scores = (_np(x) for x in search_ids(model, SOURCE, beam_size=beam_size))  # row 1 padded to 7
    assert alone_tokens.shape == (1, 16) and tokens.shape == (3, 21)  # ceil(1.5 * 4 + 10), ceil(1.5 * 7 + 10)
    assert (alone_tokens != PAD).all()
    np.testing.assert_array_equal(tokens[1], np.pad(alone_tokens[0], (0, 21 - 16)))
    np.testing.assert_allclose(scores[1], alone_scores[0], atol=1e-5)
    assert (tokens[2] != PAD).all() and (tokens != END).all()


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_ids_nbest_starts_with_the_best(beam_size):
    model = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    tokens, scores = (_np(x) for x in search_ids(model, SOURCE, beam_size=beam_size))
    nbest, nbest_scores = (_np(x) for x in search_ids(model, SOURCE, beam_size=beam_size, num_hypotheses=beam_size))
    assert nbest.shape == (3, beam_size, tokens.shape[1]) and nbest_scores.shape == (3, beam_size)
    np.testing.assert_array_equal(nbest[:, 0], tokens)
    np.testing.assert_allclose(nbest_scores[:, 0], scores, atol=1e-5)
    assert (np.diff(nbest_scores, axis=1) <= 0).all()
    assert all(len({tuple(h) for h in row}) == beam_size for row in nbest)  # distinct hypotheses
    if beam_size == 1:
        with pytest.raises(ValueError, match="beam_size 1 gives one hypothesis"):
            search_ids(model, SOURCE, num_hypotheses=2)


def test_translate_ids_samples_with_the_noise_it_is_given():
    model = _random_model()
    rng = np.random.default_rng(1)
    fixed = [rng.random((3, 21)).astype("float32") for _ in range(2)]  # limit ceil(1.5 * 7 + 10) = 21

    def sample(noise, **kwargs):
        uniform = lambda shape: ops.convert_to_tensor(noise)  # noqa: E731
        return _np(search_ids(model, SOURCE, sampling_topk=0, random_uniform=uniform, **kwargs)[0])

    first = sample(fixed[0])
    np.testing.assert_array_equal(sample(fixed[0]), first)  # the same noise draws the same translations
    assert (sample(fixed[1]) != first).any()
    np.testing.assert_array_equal(sample(fixed[0], sampling_temperature=1e-4), _np(search_ids(model, SOURCE)[0]))
    with pytest.raises(ValueError, match="sampling needs beam_size 1"):
        search_ids(model, SOURCE, beam_size=2, sampling_topk=0)


def test_translate_ids_limits_and_errors():
    model = _random_model()
    assert tuple(search_ids(model, SOURCE, max_length=5)[0].shape) == (3, 5)
    dynamic = (ops.convert_to_tensor(7),) if keras.backend.backend() == "tensorflow" else ()  # as in tf.function
    for source_length in (7, *dynamic):
        assert int(decode_length(source_length, 24, 1.5, 10)) == 21  # ceil(1.5 * 7 + 10)
        assert int(decode_length(source_length, 24, 2.0, 1)) == 15
        assert int(decode_length(source_length, 12, 1.5, 10)) == 12
    np.testing.assert_array_equal(_np(decode_lengths(SOURCE, 20, 1.5, 10)), [19, 16, 20])  # lengths 6, 4, 7
    with pytest.raises(ValueError, match="beam_size=0"):
        search_ids(model, SOURCE, beam_size=0)
    source = keras.Input((None,), dtype="int32")
    with pytest.raises(ValueError, match="Received: model 'not_a_transformer'"):
        search_ids(keras.Model(source, keras.layers.Embedding(5, 4)(source), name="not_a_transformer"), SOURCE)


def test_score_ids_gives_the_search_its_own_scores():
    """Forced decoding of the beam's hypotheses (alpha 0: their scores are plain log-probability sums) must give back
    the scores the cached search computed step by step, for every hypothesis, short or long, in one padded batch."""
    model = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    bias = model.get_layer("output_projection").bias
    bias.assign(np.where(np.arange(17) == END, 1.0, _np(bias)))  # ends come early enough for every hypothesis
    tokens, scores = (_np(x) for x in search_ids(model, SOURCE, beam_size=3, num_hypotheses=3, length_penalty=0.0))
    assert (tokens == END).any(axis=-1).all()
    hypotheses = np.where(tokens == END, PAD, tokens).reshape(9, -1)  # targets are given without their end token
    forced, lengths = (_np(x) for x in score_ids(model, np.repeat(SOURCE, 3, axis=0), hypotheses))
    np.testing.assert_allclose(forced, scores.reshape(9), atol=1e-4)
    np.testing.assert_array_equal(lengths, (hypotheses != PAD).sum(axis=1) + 1)
    assert len(set(lengths)) > 1
    # A pair scores the same alone as padded beside longer ones, and an empty target is its end token's score.
    alone, _ = score_ids(model, SOURCE[1:2, :4], hypotheses[3:4, :3])
    np.testing.assert_allclose(_np(alone), forced[3:4], atol=1e-5)
    empty, length = score_ids(model, SOURCE[:1], np.zeros((1, 0), "int32"))
    logits = _np(model({"source": SOURCE[:1], "target_in": np.array([[START]], "int32")}, training=False))
    np.testing.assert_allclose(_np(empty), _log_softmax(logits[:, 0])[:, END], atol=1e-5)
    assert _np(length).tolist() == [1]
    with pytest.raises(ValueError, match="do not fit the model's max_length 24"):
        score_ids(model, SOURCE, np.ones((3, 24), "int32"))


def _ensemble():
    """Two random models of different sizes over one vocabulary (source 20, target 17), pre-norm and post-norm."""
    first = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    keras.utils.set_random_seed(2)
    second = build_transformer(
        **TINY | dict(hidden_dim=24, num_heads=3, intermediate_dim=40, shared_embeddings=False, target_vocab_size=17,
             tied_output=False)
    )
    return [first, second]


def test_ensemble_log_probs_are_the_log_of_the_mean_probability():
    logits = [np.array([[2.0, 0.0, -1.0]], "float32"), np.array([[0.0, 3.0, 0.5]], "float32")]
    expected = np.log(np.mean([np.exp(_log_softmax(x)) for x in logits], axis=0))
    np.testing.assert_allclose(_np(ensemble_log_probs(logits)), expected, atol=1e-6)
    np.testing.assert_allclose(_np(ensemble_log_probs(logits[:1])), _log_softmax(logits[0]), atol=1e-6)


def test_an_ensemble_picks_each_token_by_the_mean_of_its_models_probabilities():
    """Greedy search over an ensemble against a hand loop: each step runs both models over the whole prefix, averages
    their probabilities, never picks pad, and pads after the end."""
    models = _ensemble()
    tokens, scores = (_np(x) for x in search_ids(models, SOURCE, max_length=8))
    # The prefix so far, then pad: the decoder is causal, so position t's logits see tokens 0..t only. One width for
    # every step, so that JAX compiles each model's ops once rather than once a prefix length (a minute of CI).
    prefix, total, done = np.full((3, 9), PAD, "int32"), np.zeros(3), np.zeros(3, bool)
    prefix[:, 0] = START
    for t in range(8):
        probs = np.mean([np.exp(_log_softmax(_np(m({"source": SOURCE, "target_in": prefix}, training=False))[:, t]))
                         for m in models], axis=0)  # (B, V)
        probs[:, PAD] = 0.0
        token = probs.argmax(axis=-1)
        total += np.where(done, 0.0, np.log(probs[np.arange(3), token]))
        token = np.where(done, PAD, token)
        done |= token == END
        prefix[:, t + 1] = token
    np.testing.assert_array_equal(tokens, prefix[:, 1:])
    np.testing.assert_allclose(scores, total, atol=1e-4)
    for model in models:  # the ensemble's choices are neither model's own
        assert (_np(search_ids(model, SOURCE, max_length=8)[0]) != tokens).any()


@pytest.mark.parametrize("beam_size", [1, 3])
def test_an_ensemble_of_one_model_twice_decodes_as_the_model(beam_size):
    model = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    tokens, scores = (_np(x) for x in search_ids(model, SOURCE, beam_size=beam_size))
    twice, twice_scores = (_np(x) for x in search_ids([model, model], SOURCE, beam_size=beam_size))
    np.testing.assert_array_equal(twice, tokens)
    np.testing.assert_allclose(twice_scores, scores, atol=1e-4)


def test_score_ids_gives_an_ensemble_search_its_own_scores():
    models = _ensemble()
    for model in models:  # ends come early enough for every hypothesis
        bias = model.get_layer("output_projection").bias
        bias.assign(np.where(np.arange(17) == END, 1.5, _np(bias)))
    tokens, scores = (_np(x) for x in search_ids(models, SOURCE, beam_size=3, num_hypotheses=3, length_penalty=0.0))
    assert (tokens == END).any(axis=-1).all()
    hypotheses = np.where(tokens == END, PAD, tokens).reshape(9, -1)
    forced, lengths = (_np(x) for x in score_ids(models, np.repeat(SOURCE, 3, axis=0), hypotheses))
    np.testing.assert_allclose(forced, scores.reshape(9), atol=1e-4)
    single, _ = score_ids(models[0], np.repeat(SOURCE, 3, axis=0), hypotheses)
    assert np.abs(_np(single) - forced).max() > 0.01  # the second model counts


def test_an_ensemble_needs_models_over_one_vocabulary():
    with pytest.raises(ValueError, match=r"share one target vocabulary. Received: vocabulary sizes \[17, 20\]"):
        search_ids([_random_model(**UNTIED_PRE_NORM), _random_model()], SOURCE)
    with pytest.raises(ValueError, match="at least one model"):
        search_ids([], SOURCE)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.function is TensorFlow's")
@pytest.mark.parametrize("beam_size", [1, 2])
def test_translate_ids_runs_in_a_tf_function_with_dynamic_shapes(beam_size):
    import tensorflow as tf

    model = _random_model()
    translate = tf.function(
        lambda source: search_ids(model, source, beam_size=beam_size),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    limits = tf.function(lambda source: decode_lengths(source, 20, 1.5, 10), input_signature=translate.input_signature)
    np.testing.assert_array_equal(limits(tf.constant(SOURCE)).numpy(), [19, 16, 20])
    for source in (SOURCE, SOURCE[:2, :4]):
        eager_tokens, eager_scores = search_ids(model, source, beam_size=beam_size)
        graph_tokens, graph_scores = translate(tf.constant(source))
        np.testing.assert_array_equal(graph_tokens.numpy(), _np(eager_tokens))
        np.testing.assert_allclose(graph_scores.numpy(), _np(eager_scores), atol=1e-5)
