"""The length buckets that training batches are drawn from: which bucket a pair falls in, how many pairs a batch of
each bucket holds, and how many batches a pass makes.

Plain numpy, no TensorFlow: `kmt.data.batches` (the batcher of every backend) builds training batches from these
rules, and `bench/batching.py`'s tf.data text pipeline builds its own from them.
"""

import numpy as np

# Upper edges of the length buckets when `bucket_width` is 0. Lengths cluster at the short end in translation
# corpora, hence finer steps there.
BUCKET_EDGES = (8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512, 768, 1024)


def bucket_edges(max_length, bucket_width=0):
    """Exclusive upper edges of the length buckets: every `bucket_width` tokens (OpenNMT-tf's
    `length_bucket_width`; 1 puts each length in a bucket of its own), or the fixed `BUCKET_EDGES` when it is 0.
    The last edge is always `max_length + 1`."""
    if bucket_width:
        edges = range(bucket_width + 1, max_length + 1, bucket_width)
    else:
        edges = [edge for edge in BUCKET_EDGES if edge <= max_length]
    return [*edges, max_length + 1]


def bucket_sizes(max_length, max_tokens, batch_size, bucket_width=0):
    """`(edges, sizes)`: the bucket edges and the pairs a batch of each bucket holds, `max_tokens // edge` (or
    `batch_size` when `max_tokens` is 0). `sizes` has one more entry than `edges`, for lengths past the last edge,
    as `tf.data.Dataset.bucket_by_sequence_length` wants."""
    edges = bucket_edges(max_length, bucket_width)
    if max_tokens:
        sizes = [max(1, max_tokens // edge) for edge in edges]
    else:
        sizes = [batch_size] * len(edges)
    return edges, sizes + sizes[-1:]


def bucket_lengths(source_lengths, target_lengths):
    """The length a pair is bucketed by: the longer of its source and its decoder input (the target plus the
    start token), for arrays of token counts without start or end tokens."""
    return np.maximum(np.asarray(source_lengths), np.asarray(target_lengths) + 1)


def bucket_of(lengths, edges):
    """The bucket of each bucketing length: the index of the first edge above it."""
    return np.searchsorted(edges, lengths, side="right")


def batches_per_pass(buckets, sizes, repeated=False):
    """Batches in one pass over pairs in `buckets` (`bucket_of`), batched `sizes` at a time.

    A single pass ends each bucket with a partial batch, so it makes the sum over buckets of ceil(pairs / size). A
    repeated stream carries each bucket's leftover pairs into the next pass instead, so with `repeated=True` this is
    the sum of the unrounded quotients, rounded (at least 1): the steps in an epoch of one pass over the data.
    """
    counts = np.bincount(buckets, minlength=len(sizes))
    sizes = np.asarray(sizes)
    if repeated:
        return max(1, round(float(np.sum(counts / sizes))))
    return int(np.sum(-(-counts // sizes)))
