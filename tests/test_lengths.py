"""kmt.inference.lengths: the output length limit of a search."""

import keras
import numpy as np
from keras import ops

from kmt.inference.lengths import decode_length, decode_lengths
from tests.tiny_transformers import SOURCE, to_numpy


def test_decode_length_is_a_times_the_source_length_plus_b_within_the_model():
    dynamic = (ops.convert_to_tensor(7),) if keras.backend.backend() == "tensorflow" else ()  # as in tf.function
    for source_length in (7, *dynamic):
        assert int(decode_length(source_length, 24, 1.5, 10)) == 21  # ceil(1.5 * 7 + 10)
        assert int(decode_length(source_length, 24, 2.0, 1)) == 15
        assert int(decode_length(source_length, 12, 1.5, 10)) == 12
    np.testing.assert_array_equal(to_numpy(decode_lengths(SOURCE, 20, 1.5, 10)), [19, 16, 20])  # lengths 6, 4, 7
