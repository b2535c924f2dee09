"""Dropout whose keep mask is drawn in float32 under any compute dtype."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="kmt")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with its keep mask drawn from float32 uniform numbers and its kept values scaled in
    float32, whatever the layer's compute dtype, so that it drops the fraction `rate` asks for and keeps the mean.

    Under the `mixed_bfloat16` policy, Keras's TensorFlow backend draws the uniform numbers in bfloat16, which takes
    only 128 values in [0, 1): rate 0.1 drops 10.16% and rate 0.3 drops 30.47% (39 of the 128 values lie below
    bfloat16(0.3)), while the kept values are scaled for the nominal rate, so training sees activations scaled by
    about 0.997 and 0.994 that inference does not (`tests/test_layers.py` measures both).

    Arguments and call arguments are `keras.layers.Dropout`'s.
    """

    def call(self, inputs, training=False):
        if not training or self.rate <= 0:
            return inputs
        if self.rate >= 1:
            return ops.zeros_like(inputs)
        shape = ops.shape(inputs)
        noise_shape = (
            shape
            if self.noise_shape is None
            else tuple(shape[axis] if size is None else size for axis, size in enumerate(self.noise_shape))
        )
        keep = keras.random.uniform(noise_shape, dtype="float32", seed=self.seed_generator) >= self.rate
        scaled = ops.cast(ops.cast(inputs, "float32") / (1.0 - self.rate), inputs.dtype)
        return ops.where(keep, scaled, ops.zeros_like(inputs))
