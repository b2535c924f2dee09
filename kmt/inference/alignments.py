"""Word alignments from a model's attention: which source word each target word translates.

A Transformer's `alignment` gives the cross-attention of one decoder layer (averaged over its heads, or the head
guided-alignment training supervised) for a pair teacher-forced; `word_alignment` sums it over the subword pieces of
each whitespace-separated word (a piece starting with "▁" begins a word) and links each target word to the source
word it attends to most: Marian's `--alignment hard`, fairseq's `--print-alignment`. The result is written in
Pharaoh's format, `i-j` for source word i and target word j, both from 0, in target order (`pharaoh`).

The same code runs in the SavedModel's graph (`translate_align`, `align`), under JAX and PyTorch, and on CTranslate2's
attention, so the three give one alignment for one model and pair.

Example:
>>> pharaoh([(0, 0), (2, 1), (1, 2)])
'0-0 2-1 1-2'
>>> parse_pharaoh("0-0 2-1")
((0, 0), (2, 1))
"""

import functools

import numpy as np

from kmt.errors import KmtError
from kmt.special_ids import END_ID, PAD_ID, START_ID

WORD_START, INSIDE, NOT_A_WORD = 1, 0, -1  # what a piece is to the words of its text


@functools.cache
def piece_kinds(tokenizer) -> np.ndarray:
    """int32 `(V,)`: for each id of a `kmt.tokenizer.Tokenizer`, `WORD_START` (a piece beginning with "▁"),
    `INSIDE` (one that continues a word, the unknown piece included) or `NOT_A_WORD` (pad, start, end)."""
    processor = tokenizer._processor
    kinds = np.array(
        [WORD_START if processor.id_to_piece(i).startswith("\u2581") else INSIDE for i in range(tokenizer.vocab_size)],
        np.int32,
    )
    kinds[[PAD_ID, START_ID, END_ID]] = NOT_A_WORD
    return kinds


class NumpyOps:
    """The `keras.ops` functions `word_alignment` uses, in NumPy: CTranslate2's attention is aligned without Keras
    (and the TensorFlow it imports)."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def cast(x, dtype):
        return np.asarray(x).astype(dtype)

    @staticmethod
    def convert_to_tensor(x, dtype=None):
        return np.asarray(x, dtype)


def _keras_ops():
    from keras import ops  # Keras only when aligning in a graph: kmt-translate imports this module for `pharaoh`

    return ops


def _words(ids, kinds, ops):
    """Each piece's word index, -1 for none (int32 `(B, L)`), and one-hot `(B, L, L)` float32 piece-to-word maps.
    The first piece of a text begins a word whatever it is."""
    kind = ops.take(ops.convert_to_tensor(kinds, "int32"), ops.cast(ids, "int32"), axis=0)  # (B, L)
    real = ops.greater_equal(kind, 0)
    first = ops.logical_and(real, ops.equal(ops.cumsum(ops.cast(real, "int32"), axis=1), 1))
    starts = ops.logical_or(ops.logical_and(real, ops.equal(kind, WORD_START)), first)
    word = ops.where(real, ops.cumsum(ops.cast(starts, "int32"), axis=1) - 1, -1)  # (B, L)
    one_hot = ops.equal(word[:, :, None], ops.arange(ops.shape(ids)[1])[None, None, :])  # (B, L, L words)
    return word, ops.cast(one_hot, "float32")


def word_alignment(attention, source_ids, target_ids, source_kinds, target_kinds, ops=None):
    """Hard word alignments from subword attention.

    Args:
        attention: float `(B, T, S)`; row t is the attention of the step that predicted `target_ids[:, t]`.
        source_ids: int `(B, S)`, pad 0 (and whatever else `source_kinds` marks `NOT_A_WORD`).
        target_ids: int `(B, T)`, the target's pieces, end and pad after them.
        source_kinds: int `(V_source,)` from `piece_kinds`.
        target_kinds: int `(V_target,)` from `piece_kinds`.
        ops: `keras.ops`, or `NumpyOps()` for NumPy arrays without Keras. Defaults to `None`: `keras.ops`.

    Returns int32 `(B, T)`: for target word j (j below the target's word count) the source word it attends to most
    (attention summed over the pieces of both words), -1 past the target's last word and for a sentence with no
    source word.
    """
    ops = _keras_ops() if ops is None else ops
    source_word, source_map = _words(source_ids, source_kinds, ops)  # (B, S), (B, S, S)
    target_word, target_map = _words(target_ids, target_kinds, ops)  # (B, T), (B, T, T)
    attention = ops.cast(attention, "float32")
    words = ops.einsum("btj,bts,bsi->bji", target_map, attention, source_map)  # (B, T words, S words)
    source_count = ops.max(source_word, axis=1) + 1  # (B,)
    target_count = ops.max(target_word, axis=1) + 1  # (B,)
    valid_source = ops.less(ops.arange(ops.shape(source_ids)[1])[None, :], source_count[:, None])  # (B, S words)
    best = ops.cast(ops.argmax(ops.where(valid_source[:, None, :], words, -1.0), axis=-1), "int32")  # (B, T words)
    linked = ops.logical_and(
        ops.less(ops.arange(ops.shape(target_ids)[1])[None, :], target_count[:, None]), source_count[:, None] > 0
    )
    return ops.where(linked, best, -1)


def links(row) -> tuple[tuple[int, int], ...]:
    """One row of `word_alignment` (a sequence of ints, -1 for none) as `(source word, target word)` pairs."""
    return tuple((int(i), j) for j, i in enumerate(row) if i >= 0)


def pharaoh(alignment) -> str:
    """`(i, j)` pairs as a Pharaoh line: `"0-0 2-1"`."""
    return " ".join(f"{i}-{j}" for i, j in alignment)


def parse_pharaoh(line: str, where: str = "alignment") -> tuple[tuple[int, int], ...]:
    """A Pharaoh line as `(i, j)` pairs; a `KmtError` naming `where` when it is not one (`i-j` or `i-j-p` items)."""
    pairs = []
    for item in line.split():
        parts = item.split("-")
        if len(parts) not in (2, 3) or not all(part.isdigit() for part in parts[:2]):
            raise KmtError(f"{where}: {item!r} is not a Pharaoh link i-j (source word i, target word j)")
        pairs.append((int(parts[0]), int(parts[1])))
    return tuple(pairs)


def alignments_graph(attention, source_ids, target_ids, source_kinds, target_kinds):
    """`word_alignment` as a tf.string `(B,)` of Pharaoh lines, inside a TensorFlow graph (the SavedModel)."""
    import tensorflow as tf

    best = word_alignment(attention, source_ids, target_ids, source_kinds, target_kinds)  # (B, T)
    best = tf.convert_to_tensor(best)
    target_words = tf.broadcast_to(tf.range(tf.shape(best)[1])[None, :], tf.shape(best))  # (B, T)
    items = tf.strings.as_string(best) + "-" + tf.strings.as_string(target_words)  # (B, T) "i-j"
    items = tf.ragged.boolean_mask(items, best >= 0)  # (B, None)
    return tf.strings.reduce_join(items, axis=1, separator=" ")  # (B,)


def attention_ids(model, source, target, start_id=START_ID):
    """The alignment attention of teacher-forced pairs: float32 `(B, T, S)`, row t the attention of the step that
    predicts `target[:, t]`.

    Args:
        model: a `kmt.models.Transformer` (or an ensemble, whose first model aligns).
        source: int `(B, S)` source ids, pad 0.
        target: int `(B, T)` target ids without the start token, pad 0.
        start_id: int, the token the decoder starts from. Defaults to `kmt.special_ids.START_ID`.
    """
    from keras import ops

    from kmt.inference.ensemble import ensemble_members

    model = ensemble_members(model)[0]
    require_alignment(model)
    source, target = ops.convert_to_tensor(source, "int32"), ops.convert_to_tensor(target, "int32")
    encoder_outputs, source_mask = model.encode(source)
    start = ops.zeros((ops.shape(target)[0], 1), "int32") + start_id
    target_in = ops.concatenate([start, target[:, :-1]], axis=1)  # (B, T): shifted right behind the start
    return model.alignment(target_in, encoder_outputs, source_mask)


def require_alignment(model):
    """Raises a `KmtError` unless `model` can align (a Transformer: its `alignment` method)."""
    if not hasattr(model, "alignment"):
        raise KmtError(f"alignments come from a Transformer's cross-attention; this model is a {type(model).__name__}")
