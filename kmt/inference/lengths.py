"""Length limits of a search: each sentence's output limit from its own source length, `min(max_length,
ceil(a * S + b))` (fairseq's `--max-len-a`, `--max-len-b`), and the models' own `max_length`."""

import math


def max_length_of(models, max_length=None):
    """The caller's `max_length`, else the shortest `max_length` of the models (None when one
    has none)."""
    if max_length:
        return max_length
    lengths = [model.max_length for model in models]
    return min(lengths) if all(lengths) else None


def decode_length(source_length, max_length, max_length_a, max_length_b):
    """`min(max_length, ceil(max_length_a * S + max_length_b))`: a Python int when S is one, else an int32 tensor
    shaped like S (a dynamic length inside a `tf.function`, or lengths `(B,)`). Both compute in float64, so eager and
    graph calls agree.
    """
    if isinstance(source_length, int):
        return min(max_length, math.ceil(max_length_a * source_length + max_length_b))
    from keras import ops  # tensors only: a Python length (CTranslate2's) needs no Keras

    limit = ops.ceil(ops.cast(source_length, "float64") * max_length_a + max_length_b)
    return ops.minimum(ops.cast(limit, "int32"), max_length)


def decode_lengths(source, max_length, max_length_a, max_length_b):
    """Each sentence's output limit, int32 `(B,)`: `decode_length` of its own count of non-pad tokens in `source`
    `(B, S)`, so that a sentence's translation does not depend on the lengths of its batch-mates.

    With S static (eager, JAX) the limits are looked up in a table of the Python `decode_length(0..S)`; with S
    dynamic (inside a `tf.function`) they are float64 tensors. Both compute in float64, so eager and graph calls
    agree, and JAX needs no 64-bit mode.
    """
    from keras import ops

    from kmt.layers.masks import padding_mask

    lengths = ops.sum(ops.cast(padding_mask(source), "int32"), axis=1)  # (B,)
    source_length = ops.shape(source)[1]
    if isinstance(source_length, int):
        table = [decode_length(n, max_length, max_length_a, max_length_b) for n in range(source_length + 1)]
        return ops.take(ops.convert_to_tensor(table, "int32"), lengths)  # (B,)
    return decode_length(lengths, max_length, max_length_a, max_length_b)
