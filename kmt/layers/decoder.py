"""One decoder layer: masked self-attention, cross-attention, feed-forward (Vaswani et al., 2017, section 3.1)."""

import keras

from kmt.layers.encoder import EncoderLayer
from kmt.layers.feedforward import residual


@keras.saving.register_keras_serializable(package="kmt")
class DecoderLayer(EncoderLayer):
    """Transformer decoder layer: an encoder layer with a third sublayer, multi-head attention over the encoder
    output, between its (causally masked) self-attention and its feed-forward network. Each sublayer has residual
    dropout, a residual connection and LayerNorm, post-norm by default.

    Args: the same as `EncoderLayer` (hidden_dim, num_heads, intermediate_dim, dropout=0.1,
    attention_dropout=0.0, activation_dropout=0.0, norm_first=False, layer_norm_epsilon=1e-5).

    Call arguments:
        inputs: `(B, T, D)` float tensor, the embedded target prefix.
        encoder_outputs: `(B, S, D)` float tensor. May be None when `cross_attention_cache` is given.
        self_attention_mask: boolean, broadcastable to `(B, T, T)`; causal and not padding
            (`kmt.layers.masks.target_attention_mask`). With a cache, broadcastable to `(B, T, L)`.
        cross_attention_mask: boolean, broadcastable to `(B, T, S)`; real source tokens
            (`kmt.layers.masks.source_attention_mask`).
        self_attention_cache: `(B, 2, L, H, D/H)` keys and values of the positions decoded so far, or None.
        self_attention_cache_update_index: where this call's T positions go in the cache.
        cross_attention_cache: `(B, 2, S, H, D/H)` encoder keys and values projected once
            (`layer.cross_attention.compute_cache(encoder_outputs)`), or None.
        return_attention_scores: bool. Also return the cross-attention weights `(B, H, T, S)`, the alignments
            the paper visualises. Defaults to `False`.
        training: bool. Dropout acts only when True.

    Returns `(B, T, D)`; with caches, `(outputs, self_attention_cache, cross_attention_cache)`; with
    `return_attention_scores`, the weights are appended.

    Example:
    >>> layer = DecoderLayer(hidden_dim=16, num_heads=2, intermediate_dim=32)
    >>> layer(keras.ops.ones((2, 4, 16)), keras.ops.ones((2, 5, 16))).shape
    (2, 4, 16)
    """

    def build(self, inputs_shape, encoder_outputs_shape=None):
        super().build(inputs_shape)
        encoder_outputs_shape = encoder_outputs_shape or inputs_shape
        self.cross_attention = self._attention("cross_attention", inputs_shape, encoder_outputs_shape)
        self.cross_attention_norm, self.cross_attention_dropout = self._norm_and_dropout(
            "cross_attention", inputs_shape
        )
        self.built = True

    def residual_dropouts(self):
        return [*super().residual_dropouts(), self.cross_attention_dropout]

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
        cached = self_attention_cache is not None
        x = residual(
            inputs,
            lambda h: self.self_attention(
                h,
                h,
                attention_mask=self_attention_mask,
                cache=self_attention_cache,
                cache_update_index=self_attention_cache_update_index,
                training=training,
            ),
            self.self_attention_norm,
            self.self_attention_dropout,
            self.norm_first,
            training,
        )
        if cached:
            x, self_attention_cache = x
        outputs = residual(
            x,
            lambda h: self.cross_attention(
                h,
                encoder_outputs,
                attention_mask=cross_attention_mask,
                cache=cross_attention_cache,
                return_attention_scores=return_attention_scores,
                training=training,
            ),
            self.cross_attention_norm,
            self.cross_attention_dropout,
            self.norm_first,
            training,
        )
        # The attention returns (output, [cache], [weights]); residual passes the extras through.
        x, *extras = outputs if isinstance(outputs, tuple) else (outputs,)
        if cross_attention_cache is not None:
            cross_attention_cache = extras.pop(0)
        x = residual(
            x,
            lambda h: self.feed_forward(h, training=training),
            self.feed_forward_norm,
            self.feed_forward_dropout,
            self.norm_first,
            training,
        )  # (B, T, D)
        outputs = (x, self_attention_cache, cross_attention_cache) if cached else (x,)
        outputs += tuple(extras)  # the cross-attention weights, when asked for
        return outputs if len(outputs) > 1 else x
