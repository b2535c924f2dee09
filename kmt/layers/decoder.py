"""One decoder layer: masked self-attention, cross-attention, feed-forward (Vaswani et al., 2017, section 3.1)."""

import keras

from kmt.layers.attention import check_divisible
from kmt.layers.encoder import attention_sublayer, feed_forward_sublayer, norm_and_dropout


@keras.saving.register_keras_serializable(package="kmt")
class DecoderLayer(keras.layers.Layer):
    """Transformer decoder layer: (causally masked) multi-head self-attention, multi-head attention over the
    encoder output, and a feed-forward network (ReLU by default), each wrapped in dropout, a residual connection and
    LayerNorm (post-norm as in the paper; `norm_first=True` for pre-norm).

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
        inputs: `(B, T, D)` float tensor, the embedded target prefix.
        encoder_outputs: `(B, S, D)` float tensor. May be None when `cross_attention_cache` is given.
        self_attention_mask: boolean, broadcastable to `(B, T, T)`; causal and not padding
            (`kmt.layers.masks.target_attention_mask`). With a cache, broadcastable to `(B, T, L)`.
        cross_attention_mask: boolean, broadcastable to `(B, T, S)`; real source tokens
            (`kmt.layers.masks.source_attention_mask`).
        self_attention_cache: `(keys, values)`, each `(B, H, L, D/H)`, of the positions decoded so far, or None.
        self_attention_cache_update_index: where this call's T positions go in the cache.
        cross_attention_cache: `(keys, values)`, each `(B, H, S, D/H)`, the encoder's projected once
            (`layer.cross_attention.compute_cache(encoder_outputs)`), or None.
        return_attention_scores: bool. Also return the cross-attention weights `(B, H, T, S)`, the alignments
            the paper visualises. Defaults to `False`.
        training: bool. Dropout acts only when True.

    Returns `(B, T, D)`; with caches, `(outputs, self_attention_cache, cross_attention_cache)`; with
    `return_attention_scores`, the weights are appended.

    Example:
    >>> layer = DecoderLayer(hidden_dim=16, num_heads=2, intermediate_dim=32)
    >>> tuple(layer(keras.ops.ones((2, 4, 16)), keras.ops.ones((2, 5, 16))).shape)
    (2, 4, 16)
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

    def build(self, inputs_shape, encoder_outputs_shape=None):
        check_divisible(self.hidden_dim, self.num_heads)
        encoder_outputs_shape = encoder_outputs_shape or inputs_shape
        # Made in this order (the cross-attention last) since the first release: each sublayer draws its initial
        # weights and dropout seeds from the global generator, so the order keeps what a seed gives.
        self.self_attention = attention_sublayer(self, "self_attention", inputs_shape, inputs_shape)
        self.self_attention_norm, self.self_attention_dropout = norm_and_dropout(self, "self_attention", inputs_shape)
        self.feed_forward = feed_forward_sublayer(self, inputs_shape)
        self.feed_forward_norm, self.feed_forward_dropout = norm_and_dropout(self, "feed_forward", inputs_shape)
        self.cross_attention = attention_sublayer(self, "cross_attention", inputs_shape, encoder_outputs_shape)
        self.cross_attention_norm, self.cross_attention_dropout = norm_and_dropout(
            self, "cross_attention", inputs_shape
        )
        self.built = True

    def residual_dropouts(self):
        """The Dropout layers on the sublayers' outputs, before the residual connections (rate `dropout`)."""
        return [self.self_attention_dropout, self.feed_forward_dropout, self.cross_attention_dropout]

    def call(
        self,
        inputs,
        encoder_outputs=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        return_attention_scores=False,
        training=None,
    ):
        # Each block: post-norm `x = norm(x + dropout(sublayer(x)))`, pre-norm `x = x + dropout(sublayer(norm(x)))`.
        cached = self_attention_cache is not None
        x = inputs  # (B, T, D)
        h = self.self_attention_norm(x) if self.norm_first else x
        h = self.self_attention(
            h,
            h,
            attention_mask=self_attention_mask,
            cache=self_attention_cache,
            cache_update_index=self_attention_cache_update_index,
            training=training,
        )
        if cached:
            h, self_attention_cache = h  # the cache with this call's keys and values written in
        x = x + self.self_attention_dropout(h, training=training)
        if not self.norm_first:
            x = self.self_attention_norm(x)

        h = self.cross_attention_norm(x) if self.norm_first else x
        h = self.cross_attention(
            h,
            encoder_outputs,
            attention_mask=cross_attention_mask,
            cache=cross_attention_cache,
            return_attention_scores=return_attention_scores,
            training=training,
        )
        weights = None
        if cross_attention_cache is not None and return_attention_scores:
            h, cross_attention_cache, weights = h
        elif cross_attention_cache is not None:
            h, cross_attention_cache = h
        elif return_attention_scores:
            h, weights = h  # (B, H, T, S)
        x = x + self.cross_attention_dropout(h, training=training)
        if not self.norm_first:
            x = self.cross_attention_norm(x)

        h = self.feed_forward_norm(x) if self.norm_first else x
        h = self.feed_forward(h, training=training)
        x = x + self.feed_forward_dropout(h, training=training)
        if not self.norm_first:
            x = self.feed_forward_norm(x)  # (B, T, D)

        outputs = (x, self_attention_cache, cross_attention_cache) if cached else (x,)
        if return_attention_scores:
            outputs += (weights,)
        return outputs if len(outputs) > 1 else x

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
