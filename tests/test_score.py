"""kmt.inference.score: forced decoding gives a search's hypotheses the scores the search computed."""

import numpy as np
import pytest

from kmt.inference.decoding import search_ids
from kmt.inference.score import score_ids
from kmt.inference.settings import SearchSettings
from tests.tiny_transformers import (
    END,
    PAD,
    SOURCE,
    START,
    UNTIED_PRE_NORM,
    ensemble,
    log_softmax,
    random_model,
    to_numpy,
)


def test_score_ids_gives_the_search_its_own_scores():
    """Forced decoding of the beam's hypotheses (alpha 0: their scores are plain log-probability sums) must give back
    the scores the cached search computed step by step, for every hypothesis, short or long, in one padded batch."""
    model = random_model(num_layers=2, **UNTIED_PRE_NORM)
    bias = model.get_layer("output_projection").bias
    bias.assign(np.where(np.arange(17) == END, 1.0, to_numpy(bias)))  # ends come early enough for every hypothesis
    settings = SearchSettings.of(beam_size=3, nbest=3, length_penalty=0.0)
    tokens, scores = (to_numpy(x) for x in search_ids(model, SOURCE, settings))
    assert (tokens == END).any(axis=-1).all()
    hypotheses = np.where(tokens == END, PAD, tokens).reshape(9, -1)  # targets are given without their end token
    forced, lengths = (to_numpy(x) for x in score_ids(model, np.repeat(SOURCE, 3, axis=0), hypotheses))
    np.testing.assert_allclose(forced, scores.reshape(9), atol=1e-4)
    np.testing.assert_array_equal(lengths, (hypotheses != PAD).sum(axis=1) + 1)
    assert len(set(lengths)) > 1
    # A pair scores the same alone as padded beside longer ones, and an empty target is its end token's score.
    alone, _ = score_ids(model, SOURCE[1:2, :4], hypotheses[3:4, :3])
    np.testing.assert_allclose(to_numpy(alone), forced[3:4], atol=1e-5)
    empty, length = score_ids(model, SOURCE[:1], np.zeros((1, 0), "int32"))
    logits = to_numpy(model({"source": SOURCE[:1], "target_in": np.array([[START]], "int32")}, training=False))
    np.testing.assert_allclose(to_numpy(empty), log_softmax(logits[:, 0])[:, END], atol=1e-5)
    assert to_numpy(length).tolist() == [1]
    with pytest.raises(ValueError, match="do not fit the model's max_length 24"):
        score_ids(model, SOURCE, np.ones((3, 24), "int32"))


def test_score_ids_gives_an_ensemble_search_its_own_scores():
    models = ensemble()
    for model in models:  # ends come early enough for every hypothesis
        bias = model.get_layer("output_projection").bias
        bias.assign(np.where(np.arange(17) == END, 1.5, to_numpy(bias)))
    searched = search_ids(models, SOURCE, SearchSettings.of(beam_size=3, nbest=3, length_penalty=0.0))
    tokens, scores = (to_numpy(x) for x in searched)
    assert (tokens == END).any(axis=-1).all()
    hypotheses = np.where(tokens == END, PAD, tokens).reshape(9, -1)
    forced, lengths = (to_numpy(x) for x in score_ids(models, np.repeat(SOURCE, 3, axis=0), hypotheses))
    np.testing.assert_allclose(forced, scores.reshape(9), atol=1e-4)
    single, _ = score_ids(models[0], np.repeat(SOURCE, 3, axis=0), hypotheses)
    assert np.abs(to_numpy(single) - forced).max() > 0.01  # the second model counts
