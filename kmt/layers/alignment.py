"""Guided alignment's loss as a layer of the functional graph (Garg et al., 2019): one cross-attention head learns to
follow given word alignments."""

import keras

from kmt.losses import guided_alignment_loss


@keras.saving.register_keras_serializable(package="kmt")
class GuidedAlignment(keras.layers.Layer):
    """Adds `weight * guided_alignment_loss(reference, attention[:, head])` to the model's losses (`add_loss`) and
    returns `logits` unchanged: Keras's endpoint-layer pattern, so the loss rides on the graph's one output and
    `model.fit`'s loss, metrics and logs stay those of the translation (`loss` is their sum).

    Args:
        weight: float. The alignment loss's weight next to the translation loss. Defaults to `0.1`.
        head: int. The supervised head. Defaults to `0`.

    Call arguments:
        logits: `(B, T, V)`, returned as they are.
        attention: `(B, H, T, S)` cross-attention weights of the supervised layer.
        reference: `(B, T, S)` links, 1 where target token t + 1 (`target_out`'s token t) links source token s
            (`kmt.data.batches`); rows without a link are not supervised.

    Example:
    >>> layer = GuidedAlignment(weight=0.5)
    >>> logits = keras.ops.zeros((1, 2, 5))
    >>> attention = keras.ops.full((1, 2, 2, 3), 1 / 3)
    >>> reference = keras.ops.array([[[1, 0, 0], [0, 0, 0]]], dtype="uint8")
    >>> tuple(layer(logits, attention, reference).shape), round(float(layer.losses[0]), 4)  # 0.5 * log 3
    ((1, 2, 5), 0.5493)
    """

    def __init__(self, weight=0.1, head=0, **kwargs):
        super().__init__(**kwargs)
        self.weight = weight
        self.head = head

    def call(self, logits, attention, reference):
        self.add_loss(self.weight * guided_alignment_loss(reference, attention[:, self.head]))  # (B, T, S) head
        return logits

    def compute_output_spec(self, logits, attention, reference):
        # The symbolic graph needs the output's spec only: `call` adds its loss when real tensors flow.
        return keras.KerasTensor(logits.shape, logits.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"weight": self.weight, "head": self.head})
        return config
