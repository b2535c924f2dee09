"""kmt.inference.decoding: a model's search, cached and not, alone and in a batch, in a graph; greedy as beam size
one; n-best lists and sampling. The steps, lengths, ensembles and scores have test modules of their own."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from kmt.inference.decoding import search_ids
from kmt.inference.lengths import decode_lengths
from kmt.inference.search import beam_search, expand_to_beams, greedy_search
from kmt.inference.settings import SearchSettings
from kmt.inference.steps import cached_next_fn
from tests.tiny_transformers import END, PAD, SOURCE, UNTIED_PRE_NORM, random_model, to_numpy


@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_and_uncached_decoding_agree(beam_size):
    model = random_model(num_layers=2, **UNTIED_PRE_NORM)
    settings = SearchSettings.of(beam_size=beam_size)
    cached, cached_scores = (to_numpy(x) for x in search_ids(model, SOURCE, settings))
    uncached, uncached_scores = (to_numpy(x) for x in search_ids(model, SOURCE, settings, use_cache=False))
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_allclose(cached_scores, uncached_scores, atol=1e-4)
    assert cached.shape == (3, min(24, math.ceil(1.5 * 7 + 10)))
    for row, length in zip(cached, (SOURCE != PAD).sum(axis=1)):  # no pad before the end or limit, only pad after
        ends = np.flatnonzero(row == END)
        stop = ends[0] + 1 if len(ends) else math.ceil(1.5 * length + 10)
        assert (row[:stop] != PAD).all() and (row[stop:] == PAD).all()


def test_beam_size_one_equals_greedy_on_a_model():
    model = random_model()
    encoder_outputs, source_mask = model.encode(ops.convert_to_tensor(SOURCE))
    next_fn, state = cached_next_fn(model, encoder_outputs, source_mask, 9)
    greedy, _ = greedy_search(next_fn, state, 3, 9)
    beam, _ = beam_search(next_fn, expand_to_beams(state, 1), 3, 9, beam_size=1)
    np.testing.assert_array_equal(to_numpy(beam), to_numpy(greedy))
    searched = search_ids(model, SOURCE, SearchSettings.of(beam_size=1, max_length=9))[0]
    np.testing.assert_array_equal(to_numpy(searched), to_numpy(greedy)[:, 1:])


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_sentence_decodes_alike_alone_and_beside_a_longer_one(beam_size):
    model = random_model(num_layers=2, **UNTIED_PRE_NORM)
    bias = model.get_layer("output_projection").bias
    bias.assign(np.where(np.arange(17) == END, -1e4, to_numpy(bias)))  # the end token never wins: the limits bind
    settings = SearchSettings.of(beam_size=beam_size)
    alone_tokens, alone_scores = (to_numpy(x) for x in search_ids(model, SOURCE[1:2, :4], settings))
    tokens, scores = (to_numpy(x) for x in search_ids(model, SOURCE, settings))  # row 1 padded to 7
    assert alone_tokens.shape == (1, 16) and tokens.shape == (3, 21)  # ceil(1.5 * 4 + 10), ceil(1.5 * 7 + 10)
    assert (alone_tokens != PAD).all()
    np.testing.assert_array_equal(tokens[1], np.pad(alone_tokens[0], (0, 21 - 16)))
    np.testing.assert_allclose(scores[1], alone_scores[0], atol=1e-5)
    assert (tokens[2] != PAD).all() and (tokens != END).all()


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_ids_nbest_starts_with_the_best(beam_size):
    model = random_model(num_layers=2, **UNTIED_PRE_NORM)
    tokens, scores = (to_numpy(x) for x in search_ids(model, SOURCE, SearchSettings.of(beam_size=beam_size)))
    searched = search_ids(model, SOURCE, SearchSettings.of(beam_size=beam_size, nbest=beam_size))
    nbest, nbest_scores = (to_numpy(x) for x in searched)
    assert nbest.shape == (3, beam_size, tokens.shape[1]) and nbest_scores.shape == (3, beam_size)
    np.testing.assert_array_equal(nbest[:, 0], tokens)
    np.testing.assert_allclose(nbest_scores[:, 0], scores, atol=1e-5)
    assert (np.diff(nbest_scores, axis=1) <= 0).all()
    assert all(len({tuple(h) for h in row}) == beam_size for row in nbest)  # distinct hypotheses
    if beam_size == 1:
        with pytest.raises(ValueError, match="nbest must be 1 to beam_size. Received: nbest=2, beam_size=1"):
            SearchSettings.of(beam_size=1, nbest=2)


def test_translate_ids_samples_with_the_noise_it_is_given():
    model = random_model()
    rng = np.random.default_rng(1)
    fixed = [rng.random((3, 21)).astype("float32") for _ in range(2)]  # limit ceil(1.5 * 7 + 10) = 21

    def sample(noise, **kwargs):
        uniform = lambda shape: ops.convert_to_tensor(noise)  # noqa: E731
        settings = SearchSettings.of(beam_size=1, sampling_topk=0, **kwargs)
        return to_numpy(search_ids(model, SOURCE, settings, random_uniform=uniform)[0])

    first = sample(fixed[0])
    np.testing.assert_array_equal(sample(fixed[0]), first)  # the same noise draws the same translations
    assert (sample(fixed[1]) != first).any()
    np.testing.assert_array_equal(sample(fixed[0], sampling_temperature=1e-4), to_numpy(search_ids(model, SOURCE)[0]))
    with pytest.raises(ValueError, match="sampling_topk samples with beam_size=1 only"):
        SearchSettings.of(beam_size=2, sampling_topk=0)


def test_translate_ids_limits_and_errors():
    model = random_model()
    assert tuple(search_ids(model, SOURCE, SearchSettings.of(beam_size=1, max_length=5))[0].shape) == (3, 5)
    with pytest.raises(ValueError, match="beam_size=0"):
        SearchSettings.of(beam_size=0)
    source = keras.Input((None,), dtype="int32")
    with pytest.raises(ValueError, match="Received: model 'not_a_transformer'"):
        search_ids(keras.Model(source, keras.layers.Embedding(5, 4)(source), name="not_a_transformer"), SOURCE)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.function is TensorFlow's")
@pytest.mark.parametrize("beam_size", [1, 2])
def test_translate_ids_runs_in_a_tf_function_with_dynamic_shapes(beam_size):
    import tensorflow as tf

    model = random_model()
    translate = tf.function(
        lambda source: search_ids(model, source, SearchSettings.of(beam_size=beam_size)),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    limits = tf.function(lambda source: decode_lengths(source, 20, 1.5, 10), input_signature=translate.input_signature)
    np.testing.assert_array_equal(limits(tf.constant(SOURCE)).numpy(), [19, 16, 20])
    for source in (SOURCE, SOURCE[:2, :4]):
        eager_tokens, eager_scores = search_ids(model, source, SearchSettings.of(beam_size=beam_size))
        graph_tokens, graph_scores = translate(tf.constant(source))
        np.testing.assert_array_equal(graph_tokens.numpy(), to_numpy(eager_tokens))
        np.testing.assert_allclose(graph_scores.numpy(), to_numpy(eager_scores), atol=1e-5)
