"""Token embedding scaled by sqrt(d_model) plus positional encoding (Vaswani et al., 2017, sections 3.4-3.5)."""

import math

import keras
from keras import ops


def positional_encoding(length, depth, layout="interleaved"):
    """The paper's sinusoidal encoding, a float32 tensor `(length, depth)`.

    With `layout="interleaved"` (the paper's), `PE[pos, 2i] = sin(pos / 10000^(2i/depth))` and
    `PE[pos, 2i+1] = cos(pos / 10000^(2i/depth))`: sines and cosines interleaved, each pair of features sharing one
    wavelength. With `layout="halves"` (tensor2tensor's and Marian's), the same angles `pos / 10000^(2k/depth)`,
    k in [0, depth/2), give all the sines first, `PE[pos, k]`, then all the cosines, `PE[pos, depth/2 + k]`.

    Example:
    >>> tuple(positional_encoding(50, 16).shape)
    (50, 16)
    """
    return sinusoids(ops.arange(length), depth, layout)


def sinusoids(positions, depth, layout="interleaved"):
    """`positional_encoding` at arbitrary integer `positions` (T,): float32 `(T, depth)`."""
    positions = ops.cast(positions, "float32")[:, None]  # (T, 1)
    features = ops.arange(depth)[None, :]  # (1, D)
    if layout == "interleaved":
        pair_index = ops.cast(features // 2 * 2, "float32")  # 2i for both feature 2i and feature 2i+1
        is_sine = features % 2 == 0
    elif layout == "halves":
        if depth % 2:
            raise ValueError(f"position_layout='halves' needs an even depth. Received: depth={depth}")
        pair_index = ops.cast(features % (depth // 2) * 2, "float32")  # 2k for both feature k and feature D/2 + k
        is_sine = features < depth // 2
    else:
        raise ValueError(f"position_layout must be interleaved or halves. Received: position_layout={layout!r}")
    angles = positions / ops.power(10000.0, pair_index / depth)  # (T, D)
    return ops.where(is_sine, ops.sin(angles), ops.cos(angles))  # (T, D)


@keras.saving.register_keras_serializable(package="kmt")
class PositionalEmbedding(keras.layers.Layer):
    """Token embedding times sqrt(hidden_dim), plus a sinusoidal (or learned) position encoding.

    The same layer also serves as the tied pre-softmax projection of the paper (section 3.4): called with
    `reverse=True` on decoder states `(B, T, D)`, it returns logits `(B, T, V)` = states @ E^T.

    Embeddings are initialised from N(0, hidden_dim**-0.5), so after the sqrt(hidden_dim) scale each feature has
    unit variance, the scale of the positional encoding (the convention of fairseq and tensor2tensor).

    Args:
        vocab_size: int. Number of token ids V.
        hidden_dim: int. Embedding size D (d_model).
        max_length: int or None. Longest sequence for learned positions. Defaults to `None`; required only
            when `learned_positions=True`.
        learned_positions: bool. Learn a position embedding (BERT-style) instead of the fixed sinusoids.
            Defaults to `False`.
        position_layout: str. The sinusoids' layout, `"interleaved"` (the paper's) or `"halves"` (Marian's): see
            `positional_encoding`. Defaults to `"interleaved"`.

    Call arguments:
        inputs: `(B, T)` int token ids, or with `reverse=True` `(B, T, D)` float states.
        start_index: int or scalar tensor, position of the first token (for step-by-step decoding). Defaults to 0.
        reverse: bool. Project states onto the vocabulary instead of embedding ids. Defaults to `False`.

    Example:
    >>> embedding = PositionalEmbedding(vocab_size=100, hidden_dim=16)
    >>> tuple(embedding(keras.ops.ones((2, 7), dtype="int32")).shape)
    (2, 7, 16)
    """

    def __init__(
        self, vocab_size, hidden_dim, max_length=None, learned_positions=False, position_layout="interleaved", **kwargs
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_dim = hidden_dim
        self.max_length = max_length
        self.learned_positions = learned_positions
        self.position_layout = position_layout

    def build(self, inputs_shape=None):
        if self.learned_positions and not self.max_length:
            raise ValueError(f"learned_positions=True needs max_length. Received: max_length={self.max_length}")
        self.token_embedding = keras.layers.Embedding(
            self.vocab_size,
            self.hidden_dim,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=self.hidden_dim**-0.5),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.token_embedding.build()
        if self.learned_positions:
            self.position_embedding = keras.layers.Embedding(
                self.max_length, self.hidden_dim, dtype=self.dtype_policy, name="position_embedding"
            )
            self.position_embedding.build()
        self.built = True

    @property
    def embeddings(self):
        """The `(V, D)` token embedding matrix, shared with the pre-softmax projection."""
        return self.token_embedding.embeddings

    def call(self, inputs, start_index=0, reverse=False):
        if reverse:
            kernel = ops.cast(ops.transpose(self.token_embedding.embeddings), self.compute_dtype)  # (D, V)
            return ops.matmul(inputs, kernel)  # (B, T, V)
        length = ops.shape(inputs)[1]
        tokens = self.token_embedding(inputs) * ops.cast(math.sqrt(self.hidden_dim), self.compute_dtype)
        positions = ops.arange(length) + start_index  # (T,)
        if self.learned_positions:
            encoding = self.position_embedding(positions)  # (T, D)
        else:
            encoding = sinusoids(positions, self.hidden_dim, self.position_layout)  # (T, D)
        return tokens + ops.cast(encoding, self.compute_dtype)[None, :, :]  # (B, T, D)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "hidden_dim": self.hidden_dim,
                "max_length": self.max_length,
                "learned_positions": self.learned_positions,
                "position_layout": self.position_layout,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="kmt")
class Bias(keras.layers.Layer):
    """A learned bias added along the last axis: `outputs = inputs + b`, `b` of shape `(units,)`, zeros at first.

    kmt's Transformer adds one to the logits of its tied pre-softmax projection (`output_bias=True`; Marian's
    `final_logits_bias`), which `PositionalEmbedding(reverse=True)` computes without one.

    Call arguments:
        inputs: `(..., units)` float tensor, e.g. logits `(B, T, V)`.

    Example:
    >>> tuple(Bias()(keras.ops.ones((2, 3, 10))).shape)
    (2, 3, 10)
    """

    def build(self, inputs_shape):
        self.bias = self.add_weight(name="bias", shape=(inputs_shape[-1],), initializer="zeros")
        self.built = True

    def call(self, inputs):
        return inputs + ops.cast(self.bias, self.compute_dtype)  # (..., units)
