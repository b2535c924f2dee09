"""Multi-head scaled dot-product attention (Vaswani et al., 2017, section 3.2)."""

import math

import keras
from keras import ops

from kmt.layers.dropout import Dropout
from kmt.layers.masks import apply_mask


def check_divisible(hidden_dim, num_heads):
    """Raises the ValueError every attention block gives when heads do not split the hidden size evenly."""
    if hidden_dim % num_heads:
        raise ValueError(
            f"hidden_dim must be divisible by num_heads. Received: hidden_dim={hidden_dim}, num_heads={num_heads}"
        )


@keras.saving.register_keras_serializable(package="kmt")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention: `Concat(head_1, ..., head_H) W^O`, `head_i = softmax(Q_i K_i^T / sqrt(d_k)) V_i`.

    The query, key and value are projected by `W^Q`, `W^K`, `W^V` into `num_heads` heads of `key_dim` features,
    attended per head, concatenated and projected back by `W^O` (paper, section 3.2.2). With the same weights it
    computes exactly what `keras.layers.MultiHeadAttention` computes; kmt keeps its own so the decoder can carry
    a key/value cache and so masks follow one convention (boolean, True = may attend).

    Args:
        num_heads: int. Number of attention heads H. The paper uses 8 (base) and 16 (big).
        key_dim: int. Size d_k of each head for queries and keys (the paper: d_model / H = 64).
        value_dim: int or None. Size d_v of each head for values. Defaults to `key_dim`.
        dropout: float. Dropout rate on the attention weights. Defaults to `0.0` (the paper's residual
            dropout lives in the encoder and decoder layers, not here).
        use_bias: bool. Whether the four projections have biases. Defaults to `True`.
        output_dim: int or None. Size of the output. Defaults to the query's last dimension.
        kernel_initializer: initializer of the projection kernels. Defaults to `"glorot_uniform"`.

    Call arguments:
        query: `(B, T, D)` float tensor.
        value: `(B, S, D)` float tensor.
        key: `(B, S, D)` float tensor or None. Defaults to `value`.
        attention_mask: boolean tensor broadcastable to `(B, T, S)`, True where a query may attend to a key.
        cache: `(keys, values)`, each `(B, H, L, d_k)`, or None. With `cache_update_index` None the cache is used
            as is (cross-attention: projected once per sentence); with an index, the keys and values of `query`'s T
            positions are written into it there (self-attention, one step at a time). Heads come before positions
            so that each step multiplies the cache as it lies, without transposing it.
        cache_update_index: int or scalar tensor, where in the cache's L axis the new keys and values go.
        return_attention_scores: bool. Also return the attention weights `(B, H, T, S)`.
        training: bool. Dropout acts only when True.

    Returns `(B, T, output_dim)`; with a cache, `(output, cache)`; with `return_attention_scores`, the weights
    are appended to what is returned.

    Example:
    >>> attention = MultiHeadAttention(num_heads=2, key_dim=4)
    >>> tuple(attention(keras.ops.ones((1, 3, 8)), keras.ops.ones((1, 5, 8))).shape)
    (1, 3, 8)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.serialize(keras.initializers.get(kernel_initializer))

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        value_dim = self.value_dim or self.key_dim

        def projection(units, name, input_shape):
            dense = keras.layers.Dense(
                units,
                use_bias=self.use_bias,
                kernel_initializer=keras.initializers.get(self.kernel_initializer),  # fresh per projection
                dtype=self.dtype_policy,
                name=name,
            )
            dense.build(input_shape)
            return dense

        self.query_dense = projection(self.num_heads * self.key_dim, "query", query_shape)
        self.key_dense = projection(self.num_heads * self.key_dim, "key", key_shape)
        self.value_dense = projection(self.num_heads * value_dim, "value", value_shape)
        output_dim = self.output_dim or query_shape[-1]
        self.output_dense = projection(output_dim, "attention_output", (*query_shape[:-1], self.num_heads * value_dim))
        self.weights_dropout = Dropout(self.dropout, dtype=self.dtype_policy, name="weights_dropout")
        self.built = True

    def _split_heads(self, x, head_dim):
        """`(B, L, H*d)` -> `(B, L, H, d)`."""
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (batch, length, self.num_heads, head_dim))

    def _cached(self, x, head_dim):
        """`(B, L, H*d)` -> `(B, H, L, d)`: a cache's layout, heads before positions."""
        return ops.transpose(self._split_heads(x, head_dim), (0, 2, 1, 3))

    def compute_cache(self, key, value=None):
        """Projects `key` and `value` `(B, S, D)` into a cache's layout `(keys, values)`, each `(B, H, S, d_k)`: once
        for cross-attention, and each decoding step for the rows it writes into the self-attention cache."""
        value = key if value is None else value
        keys = self._cached(self.key_dense(key), self.key_dim)  # (B, H, S, Dk)
        return keys, self._cached(self.value_dense(value), self.value_dim or self.key_dim)  # (B, H, S, Dv)

    def call(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
    ):
        key = value if key is None else key
        queries = self._split_heads(self.query_dense(query), self.key_dim)  # (B, T, H, Dk)

        # Without a cache (training, the encoder) keys and values stay positions-first, as projected; a cache holds
        # them heads-first, so that each decoding step multiplies it as it lies and transposes only its own row.
        keys_layout = "bhsd"
        if cache is not None and cache_update_index is None:
            keys, values = cache  # (B, H, S, Dk), (B, H, S, Dv), projected earlier
        elif cache is not None:  # a decoding step writes its own rows into the self-attention cache
            start = [0, 0, cache_update_index, 0]
            step_keys, step_values = self.compute_cache(key, value)  # (B, H, T, Dk), (B, H, T, Dv)
            cache = _write_rows(cache[0], start, step_keys), _write_rows(cache[1], start, step_values)
            keys, values = cache  # (B, H, L, Dk), (B, H, L, Dv)
        else:
            keys = self._split_heads(self.key_dense(key), self.key_dim)  # (B, S, H, Dk)
            values = self._split_heads(self.value_dense(value), self.value_dim or self.key_dim)  # (B, S, H, Dv)
            keys_layout = "bshd"

        scale = ops.cast(1.0 / math.sqrt(self.key_dim), queries.dtype)
        scores = ops.einsum(f"bthd,{keys_layout}->bhts", queries * scale, keys)  # (B, H, T, S)
        scores = apply_mask(scores, attention_mask)
        # Softmax in float32 so mixed_float16 cannot overflow; cast back to the compute dtype.
        weights = ops.cast(ops.softmax(ops.cast(scores, "float32"), axis=-1), queries.dtype)  # (B, H, T, S)
        dropped = self.weights_dropout(weights, training=training)
        attended = ops.einsum(f"bhts,{keys_layout}->bthd", dropped, values)  # (B, T, H, Dv)
        batch, length = ops.shape(attended)[0], ops.shape(attended)[1]
        attended = ops.reshape(attended, (batch, length, -1))  # (B, T, H*Dv): concatenate the heads
        output = self.output_dense(attended)  # (B, T, D)

        outputs = (output,)
        if cache is not None:
            outputs += (cache,)
        if return_attention_scores:
            outputs += (weights,)
        return outputs[0] if len(outputs) == 1 else outputs

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                "kernel_initializer": self.kernel_initializer,
            }
        )
        return config


def _write_rows(cache, start, rows):
    """`cache` `(B, H, L, d)` with `rows` `(B, H, T, d)` written at `start`. Under TensorFlow, one row (a decoding
    step's) goes in through `where`: `slice_update` is XLA's dynamic-update-slice there, compiled on demand for each
    new cache shape (each batch size and output limit a server meets); `where` gives the same tensor."""
    if keras.backend.backend() == "tensorflow" and rows.shape[2] == 1:
        positions = ops.arange(ops.shape(cache)[2])[None, None, :, None]  # (1, 1, L, 1)
        return ops.where(ops.equal(positions, start[2]), rows, cache)
    return ops.slice_update(cache, start, rows)
