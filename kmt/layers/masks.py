"""Boolean attention masks, built once from token ids at the top of the model.

Convention (flax `examples/wmt`, annotated-transformer `subsequent_mask`): a mask is boolean and **True means
"may attend"**. `kmt.special_ids.PAD_ID` (0) is padding. Every mask in kmt is made here and nowhere else; layers
receive them by keyword (`attention_mask=`, `self_attention_mask=`, `cross_attention_mask=`) and only apply them.

The two model-level masks are registered Keras functions so that the functional model can call them inside
`keras.layers.Lambda` and still reload with `safe_mode=True`:

- `source_attention_mask(source)` -> `(B, 1, S)`: keys that are real source tokens. It serves both the encoder's
  self-attention and the decoder's cross-attention, broadcasting over the query axis.
- `target_attention_mask(target_in)` -> `(B, T, T)`: causal (position t sees positions <= t) and not padding.
"""

import keras
from keras import ops

from kmt.special_ids import PAD_ID

# Added to the attention logits of masked positions. Large enough to zero a softmax entry, small enough to be
# finite in float16 (max 65504) and bfloat16, so masking never produces inf or NaN under mixed precision.
MASK_VALUE = -3.0e4


def padding_mask(token_ids, pad_id=PAD_ID):
    """True where `token_ids` (B, L) is a real token, False at padding. Returns (B, L) bool."""
    return ops.not_equal(token_ids, pad_id)


def causal_mask(query_length, key_length=None, offset=0):
    """Lower-triangular mask: query i (at absolute position `offset + i`) may attend to keys j <= offset + i.

    Returns `(query_length, key_length)` bool. `offset` is the position of the first query, which is what a
    decoder with a key/value cache needs when it feeds one token at a time.
    """
    key_length = query_length if key_length is None else key_length
    rows = ops.arange(query_length)[:, None] + offset  # (T, 1)
    cols = ops.arange(key_length)[None, :]  # (1, S)
    return ops.greater_equal(rows, cols)


def merge_masks(*masks):
    """Logical AND of broadcastable boolean masks, skipping `None`s; None if all are None."""
    merged = None
    for mask in masks:
        if mask is None:
            continue
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


@keras.saving.register_keras_serializable(package="kmt")
def source_attention_mask(source):
    """Mask over source keys for encoder self-attention and decoder cross-attention: (B, S) ids -> (B, 1, S)."""
    return ops.expand_dims(padding_mask(source), axis=1)  # (B, 1, S)


@keras.saving.register_keras_serializable(package="kmt")
def source_padding_mask(source):
    """The mask a recurrent encoder skips padding with (`kmt.models.LSTM`): (B, S) ids -> (B, S) bool, True at real
    tokens."""
    return padding_mask(source)


@keras.saving.register_keras_serializable(package="kmt")
def target_attention_mask(target_in):
    """Causal mask merged with target padding for decoder self-attention: (B, T) ids -> (B, T, T)."""
    length = ops.shape(target_in)[1]
    keys = ops.expand_dims(padding_mask(target_in), axis=1)  # (B, 1, T)
    return merge_masks(causal_mask(length)[None, :, :], keys)  # (B, T, T)


def apply_mask(scores, mask):
    """Sets attention logits (B, H, T, S) to MASK_VALUE where `mask` (broadcastable to (B, T, S)) is False."""
    if mask is None:
        return scores
    mask = ops.expand_dims(mask, axis=1)  # (B, 1, T, S): same mask for every head
    return ops.where(mask, scores, ops.cast(MASK_VALUE, scores.dtype))
