"""One encoder layer: self-attention then a feed-forward network (Vaswani et al., 2017, section 3.1)."""

import keras

from kmt.layers.attention import MultiHeadAttention, check_divisible
from kmt.layers.dropout import Dropout
from kmt.layers.feedforward import FeedForward


def attention_sublayer(layer, name, query_shape, value_shape):
    """A built `MultiHeadAttention` with the heads and attention dropout of `layer` (an encoder or decoder layer)."""
    attention = MultiHeadAttention(
        layer.num_heads,
        key_dim=layer.hidden_dim // layer.num_heads,
        dropout=layer.attention_dropout,
        dtype=layer.dtype_policy,
        name=name,
    )
    attention.build(query_shape, value_shape)
    return attention


def feed_forward_sublayer(layer, inputs_shape):
    """A built `FeedForward` with the sizes, activation and activation dropout of `layer`."""
    feed_forward = FeedForward(
        layer.hidden_dim,
        layer.intermediate_dim,
        activation=layer.activation,
        activation_dropout=layer.activation_dropout,
        dtype=layer.dtype_policy,
        name="feed_forward",
    )
    feed_forward.build(inputs_shape)
    return feed_forward


def norm_and_dropout(layer, name, inputs_shape):
    """The built LayerNorm `{name}_norm` and the residual Dropout `{name}_dropout` (rate `layer.dropout`) that wrap
    the sublayer `name` of `layer`."""
    norm = keras.layers.LayerNormalization(
        epsilon=layer.layer_norm_epsilon, dtype=layer.dtype_policy, name=f"{name}_norm"
    )
    norm.build(inputs_shape)
    return norm, Dropout(layer.dropout, dtype=layer.dtype_policy, name=f"{name}_dropout")


@keras.saving.register_keras_serializable(package="kmt")
class EncoderLayer(keras.layers.Layer):
    """Transformer encoder layer: multi-head self-attention and a feed-forward network (ReLU by default), each
    wrapped in dropout, a residual connection and LayerNorm (post-norm as in the paper; `norm_first=True` for
    pre-norm).

    Args:
        hidden_dim: int. Model size D (d_model), the size of the inputs and outputs.
        num_heads: int. Attention heads H; must divide `hidden_dim`.
        intermediate_dim: int. Inner size of the feed-forward network (d_ff).
        dropout: float. Residual dropout on each sublayer's output (P_drop). Defaults to `0.1`.
        attention_dropout: float. Dropout on attention weights. Defaults to `0.0`.
        activation_dropout: float. Dropout after the feed-forward activation. Defaults to `0.0`.
        norm_first: bool. Pre-norm instead of the paper's post-norm. Defaults to `False`.
        activation: str. The feed-forward inner activation (`"relu"`, `"gelu"`, `"swish"`/`"silu"`).
            Defaults to `"relu"`, the paper's.
        layer_norm_epsilon: float. Defaults to `1e-5`.

    Call arguments:
        inputs: `(B, S, D)` float tensor.
        attention_mask: boolean tensor broadcastable to `(B, S, S)`, True where a position may attend
            (see `kmt.layers.masks.source_attention_mask`). Defaults to `None` (attend everywhere).
        training: bool. Dropout acts only when True.

    Example:
    >>> layer = EncoderLayer(hidden_dim=16, num_heads=2, intermediate_dim=32)
    >>> tuple(layer(keras.ops.ones((2, 5, 16))).shape)
    (2, 5, 16)
    """

    def __init__(
        self,
        hidden_dim,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        norm_first=False,
        activation="relu",
        layer_norm_epsilon=1e-5,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.norm_first = norm_first
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon

    def build(self, inputs_shape):
        check_divisible(self.hidden_dim, self.num_heads)
        self.self_attention = attention_sublayer(self, "self_attention", inputs_shape, inputs_shape)
        self.self_attention_norm, self.self_attention_dropout = norm_and_dropout(self, "self_attention", inputs_shape)
        self.feed_forward = feed_forward_sublayer(self, inputs_shape)
        self.feed_forward_norm, self.feed_forward_dropout = norm_and_dropout(self, "feed_forward", inputs_shape)
        self.built = True

    def residual_dropouts(self):
        """The Dropout layers on the sublayers' outputs, before the residual connections (rate `dropout`)."""
        return [self.self_attention_dropout, self.feed_forward_dropout]

    def call(self, inputs, attention_mask=None, training=None):
        # Each block: post-norm `x = norm(x + dropout(sublayer(x)))`, pre-norm `x = x + dropout(sublayer(norm(x)))`.
        x = inputs  # (B, S, D)
        h = self.self_attention_norm(x) if self.norm_first else x
        h = self.self_attention(h, h, attention_mask=attention_mask, training=training)
        x = x + self.self_attention_dropout(h, training=training)
        if not self.norm_first:
            x = self.self_attention_norm(x)

        h = self.feed_forward_norm(x) if self.norm_first else x
        h = self.feed_forward(h, training=training)
        x = x + self.feed_forward_dropout(h, training=training)
        if not self.norm_first:
            x = self.feed_forward_norm(x)
        return x  # (B, S, D)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation_dropout": self.activation_dropout,
                "norm_first": self.norm_first,
                "activation": self.activation,
                "layer_norm_epsilon": self.layer_norm_epsilon,
            }
        )
        return config
