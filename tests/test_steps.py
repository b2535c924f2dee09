"""kmt.inference.steps: the cached and the uncached decoder step give the model's own logits."""

import numpy as np
import pytest
from keras import ops

from kmt.inference.steps import cached_next_fn, uncached_next_fn
from tests.tiny_transformers import SOURCE, START, UNTIED_PRE_NORM, random_model, to_numpy


@pytest.mark.parametrize("overrides", [{}, UNTIED_PRE_NORM], ids=["tied_post_norm", "untied_pre_norm"])
def test_cached_and_uncached_next_fn_give_the_models_logits(overrides):
    model = random_model(num_layers=2, **overrides)
    length = 6
    tokens = np.random.default_rng(0).integers(1, 17, size=(3, length + 1)).astype("int32")
    tokens[:, 0] = START
    expected = to_numpy(model({"source": SOURCE, "target_in": tokens}, training=False))  # (B, L+1, V)
    encoder_outputs, source_mask = model.encode(ops.convert_to_tensor(SOURCE))
    cached, state = cached_next_fn(model, encoder_outputs, source_mask, length)
    uncached, empty = uncached_next_fn(model, encoder_outputs, source_mask, length)
    for index in range(length):
        index_tensor = ops.convert_to_tensor(index, "int32")
        logits, state = cached(ops.convert_to_tensor(tokens), index_tensor, state)
        np.testing.assert_allclose(to_numpy(logits), expected[:, index], atol=1e-5)
        np.testing.assert_allclose(to_numpy(uncached(tokens, index_tensor, empty)[0]), expected[:, index], atol=1e-5)
