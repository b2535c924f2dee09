"""The tf.data text pipeline kmt-train used before prepared data: sentences to batches (tokenize, filter, add
start/end tokens, bucket by length, pad, shuffle, prefetch) with TensorFlow ops. Training now streams prepared shards
through `kmt.data.batches`; this stays in bench/ as the benchmarks' reference (`bench/prepared_data.py` measures the
batcher against it) and for the step benchmarks built on it.

Each example becomes `({"source": (S,), "target_in": (T,)}, target_out (T,))` where `target_in` is
`[start] + target` (the decoder input, shifted right) and `target_out` is `target + [end]`. Batches group
sentences of similar length (`tf.data.Dataset.bucket_by_sequence_length`) so little compute goes to padding, and
hold about `max_tokens` tokens each (or `batch_size` sentences when `max_tokens` is 0), as fairseq and
OpenNMT-tf batch by tokens.
"""

import logging
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from kmt.data.batches import without_autotune
from kmt.data.buckets import batches_per_pass, bucket_lengths, bucket_of, bucket_sizes
from kmt.special_ids import END_ID, START_ID

logger = logging.getLogger(__name__)

# Strings a subword-sampling stream (`make_dataset(resegment=...)`) tokenizes at a time.
RESEGMENT_CHUNK = 1024


@dataclass(frozen=True)
class EncodedSplit:
    """Token ids of the pairs kept from one split, with the raw text they came from (for BLEU and exact match).

    Attributes:
        source: `(N, None)` int32 RaggedTensor, no start/end tokens.
        target: `(N, None)` int32 RaggedTensor, no start/end tokens.
        source_text, target_text: the N kept sentence pairs.
        dropped: why pairs were dropped, e.g. `{"empty": 2, "too_long": 5}`.
    """

    source: tf.RaggedTensor
    target: tf.RaggedTensor
    source_text: list
    target_text: list
    dropped: dict

    def __len__(self):
        return len(self.source_text)

    @property
    def target_tokens(self):
        """Target tokens the loss sees per epoch (each sentence's tokens plus its end token)."""
        return int(tf.reduce_sum(self.target.row_lengths())) + len(self)


def _fits(source_length, target_length, max_length):
    """Whether a pair fits `max_length`: the target needs one more position, for the start (or end) token. For
    numpy arrays of lengths and for tensors alike."""
    return (source_length <= max_length) & (target_length <= max_length - 1)


def encode_split(name, text, vocabularies, max_length):
    """Tokenizes a `ParallelText` and drops pairs that are empty or longer than `max_length` tokens on a side.

    The target side needs one position for the start (or end) token, so its limit is `max_length - 1`.
    Counts of dropped pairs are logged and kept in the result.
    """
    pairs = [(s, t) for s, t in zip(text.source, text.target)]
    nonempty = [bool(s.strip()) and bool(t.strip()) for s, t in pairs]
    source = vocabularies.source.tokenize(tf.constant([s for s, _ in pairs], dtype=tf.string))
    target = vocabularies.target.tokenize(tf.constant([t for _, t in pairs], dtype=tf.string))
    fits = _fits(source.row_lengths().numpy(), target.row_lengths().numpy(), max_length)
    keep = np.asarray(nonempty, dtype=bool) & fits
    dropped = {"empty": int(np.sum(~np.asarray(nonempty, dtype=bool))), "too_long": int(np.sum(~fits & nonempty))}
    if any(dropped.values()):
        logger.info(
            "%s: kept %d of %d pairs (dropped %d empty, %d longer than %d tokens)",
            name,
            int(keep.sum()),
            len(pairs),
            dropped["empty"],
            dropped["too_long"],
            max_length,
        )
    else:
        logger.info("%s: %d pairs", name, len(pairs))
    indices = np.flatnonzero(keep)
    return EncodedSplit(
        source=tf.gather(source, indices),
        target=tf.gather(target, indices),
        source_text=[pairs[i][0] for i in indices],
        target_text=[pairs[i][1] for i in indices],
        dropped=dropped,
    )


def resample(split, vocabularies, max_length, alpha, seed):
    """`split` segmented by one seeded draw of subword sampling (`Tokenizer.sample`) instead of the best
    segmentation, less the pairs the draw makes longer than `max_length` (as a `make_dataset(resegment=...)` stream
    drops them). A stand-in for one pass of that stream: its lengths size the epoch, its tokens count its work."""
    source = vocabularies.source.sample(split.source_text, alpha, seed)
    target = vocabularies.target.sample(split.target_text, alpha, seed + 1)
    fits = _fits(source.row_lengths().numpy(), target.row_lengths().numpy(), max_length)
    indices = np.flatnonzero(fits)
    return EncodedSplit(
        source=tf.gather(source, indices),
        target=tf.gather(target, indices),
        source_text=[split.source_text[i] for i in indices],
        target_text=[split.target_text[i] for i in indices],
        dropped=split.dropped | {"too_long_sampled": int(np.sum(~fits))},
    )


def subword_sampler(vocabularies, alpha, seed):
    """`resegment` for `make_dataset`: samples a segmentation of each source and target string (`Tokenizer.sampler`),
    seeded from `seed` and the chunk's index in the stream."""
    source = vocabularies.source.sampler(alpha, (seed, 0))
    target = vocabularies.target.sampler(alpha, (seed, 1))
    return lambda chunk, source_text, target_text: (source(source_text, chunk), target(target_text, chunk))


def _to_example(source, target):
    start, end = tf.constant([START_ID], tf.int32), tf.constant([END_ID], tf.int32)
    features = {"source": source, "target_in": tf.concat([start, target], axis=0)}  # (S,), (T,)
    return features, tf.concat([target, end], axis=0)  # (T,)


def make_dataset(
    split,
    max_length,
    max_tokens=0,
    batch_size=64,
    shuffle=False,
    seed=None,
    repeat=False,
    pad_to_bucket=False,
    bucket_width=0,
    resegment=None,
    skip=0,
):
    """A tf.data pipeline of padded, length-bucketed batches over an `EncodedSplit`.

    Args:
        split: `EncodedSplit`.
        max_length: int. Longest sequence (tokens) in the split, after the start/end token.
        max_tokens: int. Token budget per batch (sentences x padded length); 0 to batch by `batch_size`.
        batch_size: int. Sentences per batch when `max_tokens` is 0.
        shuffle: bool. Shuffle sentences (seeded) before bucketing and batches after. Defaults to `False`.
        seed: int or None. Shuffle seed.
        repeat: bool. Repeat forever (for `steps_per_epoch`). Defaults to `False`.
        pad_to_bucket: bool. Pad every batch to its bucket's width (upper edge - 1) rather than to its longest
            sequence, so batches come in a few fixed shapes: an XLA-compiled step (`trainer.jit_compile`)
            then compiles once per bucket instead of once per new shape. Defaults to `False`.
        bucket_width: int. Width of the length buckets in tokens (see `kmt.data.buckets.bucket_edges`); narrower
            buckets waste less compute on padding. 0 for the fixed `kmt.data.buckets.BUCKET_EDGES`. Defaults to `0`.
        resegment: callable or None. Subword regularization (`subword_sampler`): maps a chunk's index in the stream
            and the chunk's source and target strings to ragged ids, and the stream tokenizes the split's text
            afresh on every pass with it, dropping pairs that come out longer than `max_length`, instead of reusing
            the split's ids. Its passes then vary in length, so it is for a repeated training stream. Defaults to
            `None`.
        skip: int. Batches to pass over first: a resumed run's stream starts after the batches its finished epochs
            trained on, so it trains on the batches the uninterrupted run would have (the stream is deterministic for
            a seed). Passing over them costs the pipeline's work for them (a few seconds an epoch). Defaults to `0`.

    Returns a `tf.data.Dataset` of `({"source": (B, S), "target_in": (B, T)}, target_out (B, T))` int32.
    """
    if resegment is None:
        dataset = tf.data.Dataset.from_tensor_slices((split.source, split.target))
    else:
        dataset = tf.data.Dataset.from_tensor_slices((split.source_text, split.target_text))
    if shuffle:
        dataset = dataset.shuffle(len(split), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    if resegment is not None:
        dataset = (
            dataset.batch(RESEGMENT_CHUNK)
            .enumerate()
            .map(lambda chunk, texts: resegment(chunk, *texts), num_parallel_calls=tf.data.AUTOTUNE)
        )
        dataset = dataset.unbatch().filter(lambda source, target: _fits(tf.size(source), tf.size(target), max_length))
    dataset = dataset.map(_to_example, num_parallel_calls=tf.data.AUTOTUNE)
    edges, sizes = bucket_sizes(max_length, max_tokens, batch_size, bucket_width)
    dataset = dataset.bucket_by_sequence_length(
        element_length_func=lambda features, _: tf.maximum(  # buckets.bucket_lengths: target_in has the start token
            tf.shape(features["source"])[0], tf.shape(features["target_in"])[0]
        ),
        bucket_boundaries=edges,
        bucket_batch_sizes=sizes,
        padded_shapes=({"source": [None], "target_in": [None]}, [None]),
        pad_to_bucket_boundary=pad_to_bucket,
    )
    if not repeat and resegment is None:  # a known length: Keras shows progress, no StopIteration warning
        batches = count_batches(split, max_length, max_tokens, batch_size, bucket_width)
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    if shuffle:
        dataset = dataset.shuffle(256, seed=seed, reshuffle_each_iteration=True)
    if skip:
        dataset = dataset.skip(skip)
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(without_autotune())


def count_batches(split, max_length, max_tokens=0, batch_size=64, bucket_width=0, repeated=False):
    """Batches in one pass over `split`.

    A single pass (`make_dataset(repeat=False)`) ends each bucket with a partial batch, so it yields the sum over
    buckets of ceil(sentences / batch size). A repeated stream (`repeat=True`, what `model.fit` trains on) carries
    each bucket's leftover sentences into the next pass instead, so with `repeated=True` this is the sum of the
    unrounded quotients, rounded: `steps_per_epoch` for an epoch of one pass over the data, however many buckets
    there are.
    """
    edges, sizes = bucket_sizes(max_length, max_tokens, batch_size, bucket_width)
    lengths = bucket_lengths(split.source.row_lengths().numpy(), split.target.row_lengths().numpy())
    return batches_per_pass(bucket_of(lengths, edges), sizes, repeated)
