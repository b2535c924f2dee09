"""The position-wise feed-forward network of every encoder and decoder layer (Vaswani et al., 2017, section 3.3)."""

import keras

from kmt.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="kmt")
class FeedForward(keras.layers.Layer):
    """`FFN(x) = max(0, x W_1 + b_1) W_2 + b_2`, applied to each position alone (paper, section 3.3).

    Args:
        hidden_dim: int. Input and output size D (d_model).
        intermediate_dim: int. Inner size d_ff (2048 in the base model).
        activation: str. Inner activation. Defaults to `"relu"`, the paper's.
        activation_dropout: float. Dropout after the inner activation. Defaults to `0.0`.

    Call arguments:
        inputs: `(B, T, D)` float tensor.
        training: bool. Dropout acts only when True.

    Example:
    >>> tuple(FeedForward(hidden_dim=8, intermediate_dim=32)(keras.ops.ones((2, 3, 8))).shape)
    (2, 3, 8)
    """

    def __init__(self, hidden_dim, intermediate_dim, activation="relu", activation_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.activation = activation
        self.activation_dropout = activation_dropout

    def build(self, inputs_shape):
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_dim, activation=self.activation, dtype=self.dtype_policy, name="intermediate"
        )
        self.intermediate_dense.build(inputs_shape)
        self.intermediate_dropout = Dropout(
            self.activation_dropout, dtype=self.dtype_policy, name="intermediate_dropout"
        )
        self.output_dense = keras.layers.Dense(self.hidden_dim, dtype=self.dtype_policy, name="output")
        self.output_dense.build((*inputs_shape[:-1], self.intermediate_dim))
        self.built = True

    def call(self, inputs, training=None):
        hidden = self.intermediate_dropout(self.intermediate_dense(inputs), training=training)  # (B, T, d_ff)
        return self.output_dense(hidden)  # (B, T, D)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "intermediate_dim": self.intermediate_dim,
                "activation": self.activation,
                "activation_dropout": self.activation_dropout,
            }
        )
        return config
