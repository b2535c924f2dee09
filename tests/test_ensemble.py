"""kmt.inference.ensemble: models' probabilities averaged at each step, searched as one model."""

import numpy as np
import pytest

from kmt.inference.decoding import search_ids
from kmt.inference.ensemble import ensemble_log_probs
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


def test_ensemble_log_probs_are_the_log_of_the_mean_probability():
    logits = [np.array([[2.0, 0.0, -1.0]], "float32"), np.array([[0.0, 3.0, 0.5]], "float32")]
    expected = np.log(np.mean([np.exp(log_softmax(x)) for x in logits], axis=0))
    np.testing.assert_allclose(to_numpy(ensemble_log_probs(logits)), expected, atol=1e-6)
    np.testing.assert_allclose(to_numpy(ensemble_log_probs(logits[:1])), log_softmax(logits[0]), atol=1e-6)


def test_an_ensemble_picks_each_token_by_the_mean_of_its_models_probabilities():
    """Greedy search over an ensemble against a hand loop: each step runs both models over the whole prefix, averages
    their probabilities, never picks pad or start, and pads after the end."""
    models = ensemble()
    tokens, scores = (to_numpy(x) for x in search_ids(models, SOURCE, SearchSettings.of(beam_size=1, max_length=8)))
    # The prefix so far, then pad: the decoder is causal, so position t's logits see tokens 0..t only. One width for
    # every step, so that JAX compiles each model's ops once rather than once a prefix length (a minute of CI).
    prefix, total, done = np.full((3, 9), PAD, "int32"), np.zeros(3), np.zeros(3, bool)
    prefix[:, 0] = START
    for t in range(8):
        probs = np.mean(
            [
                np.exp(log_softmax(to_numpy(m({"source": SOURCE, "target_in": prefix}, training=False))[:, t]))
                for m in models
            ],
            axis=0,
        )  # (B, V)
        probs[:, [PAD, START]] = 0.0  # never emitted
        token = probs.argmax(axis=-1)
        total += np.where(done, 0.0, np.log(probs[np.arange(3), token]))
        token = np.where(done, PAD, token)
        done |= token == END
        prefix[:, t + 1] = token
    np.testing.assert_array_equal(tokens, prefix[:, 1:])
    np.testing.assert_allclose(scores, total, atol=1e-4)
    for model in models:  # the ensemble's choices are neither model's own
        assert (to_numpy(search_ids(model, SOURCE, SearchSettings.of(beam_size=1, max_length=8))[0]) != tokens).any()


@pytest.mark.parametrize("beam_size", [1, 3])
def test_an_ensemble_of_one_model_twice_decodes_as_the_model(beam_size):
    model = random_model(num_layers=2, **UNTIED_PRE_NORM)
    tokens, scores = (to_numpy(x) for x in search_ids(model, SOURCE, SearchSettings.of(beam_size=beam_size)))
    twice, twice_scores = (
        to_numpy(x) for x in search_ids([model, model], SOURCE, SearchSettings.of(beam_size=beam_size))
    )
    np.testing.assert_array_equal(twice, tokens)
    np.testing.assert_allclose(twice_scores, scores, atol=1e-4)


def test_an_ensemble_needs_models_over_one_vocabulary():
    with pytest.raises(ValueError, match=r"share one target vocabulary. Received: vocabulary sizes \[17, 20\]"):
        search_ids([random_model(**UNTIED_PRE_NORM), random_model()], SOURCE)
    with pytest.raises(ValueError, match="at least one model"):
        search_ids([], SOURCE)
