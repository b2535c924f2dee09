"""The one batcher of every backend: prepared pairs (`kmt.data.shards`) to padded, length-bucketed batches.

Each batch is `({"source": (B, S), "target_in": (B, T)}, target_out (B, T))`, int32 numpy arrays, where `target_in`
is `[start] + target` (the decoder input, shifted right) and `target_out` is `target + [end]`; a batcher for guided
alignment (`alignment`) adds `"alignment"`, uint8 `(B, T, S)`: 1 where target token t + 1 (`target_out`'s token t)
links source token s (`kmt.data.alignments.subword_links`), all 0 for the end token and for pairs without links.
Pairs are grouped by length (`kmt.data.buckets`) so little compute goes to padding, and a batch holds about
`max_tokens` tokens (or `batch_size` pairs when `max_tokens` is 0), as fairseq and OpenNMT-tf batch by tokens.

The training stream is plain numpy, deterministic for a seed: every pass over the pairs is a seeded permutation; a
batch leaves its bucket as soon as the bucket holds its size (leftovers go on into the next pass), then passes through
a shuffle buffer of 256 batches. So the same seed gives the same batches on every backend, and a resumed run skips to
an exact position by replaying the plan (indices only, no padding). With subword sampling each pass segments the
training text afresh with the `sentencepiece` library, seeded by the pass and chunk.

Backends take the batches through their own loader: tf.data under TensorFlow (`tf_dataset`: a generator of ready
batches, prefetched on tf.data's threads), a `keras.utils.PyDataset` under JAX and PyTorch (`py_dataset`, read in
order as Keras asks). With `fixed_shapes`, every batch of a bucket has the same width (its bucket's edge), so an
XLA-compiled step compiles once per bucket and batch size; pad positions are masked out of the loss.

Under data parallelism (`kmt.training.distribute`) a batch is the global batch of `replicas` devices, each device's
share within the token budget, and each of several processes pads the whole batch and keeps its `shard` of the rows.
"""

import itertools
import os
import sys

import numpy as np

from kmt.data.alignments import subword_links
from kmt.data.buckets import batches_per_pass, bucket_lengths, bucket_of, bucket_sizes
from kmt.data.cleaning import fits
from kmt.data.shards import Rows
from kmt.special_ids import END_ID, START_ID

SHUFFLE_BATCHES = 256  # batches the training stream's shuffle buffer holds
SAMPLING_CHUNK = 1024  # sentences segmented by one seeded draw of subword sampling
BUCKETING_CHUNK = 2**20  # pairs whose lengths are read at a time to bucket them


class Batcher:
    """Batches of one split.

    Args:
        rows: `kmt.data.shards.Rows` (a prepared `Split`).
        max_length: int. The longest sequence, after the start or end token.
        max_tokens: int. Token budget per batch (pairs x padded length); 0 to batch by `batch_size`.
        batch_size: int. Pairs per batch when `max_tokens` is 0.
        bucket_width: int. Width of the length buckets (`kmt.data.buckets.bucket_edges`); 0 for fixed edges.
        fixed_shapes: bool. Pad every batch of a bucket to one shape (see the module's doc).
        seed: int. The training stream's seed.
        sampling: `(vocabularies, alpha, source_lines, target_lines)` or None: subword sampling, each pass drawing a
            segmentation of the kept pairs' text (`source_lines[i]`, `target_lines[i]` for pair i).
        replicas: int. Devices a batch is split over (`trainer.distribute`): `max_tokens` and `batch_size` are per
            device, and every batch's rows a multiple of `replicas` (a partial batch gets pad-only rows).
        shard: `(index, count)`: this process's share of each batch's rows, when `count` processes train together.
        alignment: `(source_starts, target_starts)`, the vocabularies' `Tokenizer.word_starts`, or None: batches
            carry the subword links of `rows.links` (guided alignment; zeros where rows have none).
    """

    def __init__(
        self,
        rows,
        max_length,
        max_tokens=0,
        batch_size=64,
        bucket_width=0,
        fixed_shapes=False,
        seed=0,
        sampling=None,
        replicas=1,
        shard=(0, 1),
        alignment=None,
    ):
        self.rows, self.max_length, self.fixed_shapes, self.seed = rows, max_length, fixed_shapes, seed
        self.alignment = alignment
        self.edges, sizes = bucket_sizes(max_length, max_tokens, batch_size, bucket_width)
        self.sizes = [size * replicas for size in sizes]
        self.replicas, self.shard = replicas, shard
        self.sampling = sampling
        self._passes = {}  # pass number -> (Rows, buckets): the first pass, and with sampling the latest
        self.epoch_rows, epoch_buckets = self._pass(0)
        self.steps_per_pass = batches_per_pass(epoch_buckets, self.sizes, repeated=True)

    def buckets(self, rows):
        """The bucket of each of `rows`' pairs: one small int a pair, the index read a chunk at a time."""
        buckets = np.empty(len(rows), np.uint8 if len(self.sizes) <= 256 else np.uint16)
        for start in range(0, len(rows), BUCKETING_CHUNK):
            lengths = bucket_lengths(*rows.lengths(start, start + BUCKETING_CHUNK))
            buckets[start : start + len(lengths)] = bucket_of(lengths, self.edges)
        return buckets

    def _pass(self, number):
        """The rows of the training stream's pass `number` and their buckets: `rows` itself, or with sampling a
        seeded draw of the text's segmentation, less the pairs that it makes too long."""
        if self.sampling is None:
            if not self._passes:
                self._passes[0] = self.rows, self.buckets(self.rows)
            return self._passes[0]
        if number not in self._passes:
            rows = sample_rows(*self.sampling, self.max_length, (self.seed, number), self.rows.links)
            self._passes = {n: v for n, v in self._passes.items() if n == 0}  # the first sizes an epoch
            self._passes[number] = rows, self.buckets(rows)
        return self._passes[number]

    def plan(self):
        """The repeated training stream's batches, forever: `(bucket, members)`, `members` a list of `(rows, i)`, pair
        i of `rows` (a bucket's leftovers of one pass, with sampling drawn from other rows, join the next pass's)."""
        rng = np.random.default_rng(self.seed)
        pending, buffer = {}, []
        for number in itertools.count():
            rows, buckets = self._pass(number)
            for i in rng.permutation(len(rows)).astype(np.int32 if len(rows) < 2**31 else np.int64):  # half the bytes
                bucket = buckets[i]
                members = pending.setdefault(bucket, [])
                members.append((rows, i))
                if len(members) == self.sizes[bucket]:
                    buffer.append((bucket, pending.pop(bucket)))
                    if len(buffer) == SHUFFLE_BATCHES:
                        j = rng.integers(len(buffer))
                        buffer[j], buffer[-1] = buffer[-1], buffer[j]
                        yield buffer.pop()

    def stream(self, skip=0):
        """The padded batches of `plan()`, after its first `skip` (a resumed run's finished epochs)."""
        return (self.pad(*item) for item in itertools.islice(self.plan(), skip, None))

    def one_pass(self):
        """Every pair once, bucket by bucket, each bucket ending with a partial batch (evaluation): a list of plans."""
        buckets = self.buckets(self.rows)
        items = []
        for bucket in np.unique(buckets):
            members = np.flatnonzero(buckets == bucket)
            size = self.sizes[bucket]
            items += [(bucket, [(self.rows, i) for i in members[k : k + size]]) for k in range(0, len(members), size)]
        return items

    def pad(self, bucket, members):
        """The batch of `members` (`(rows, i)`: pair i of `rows`) in `bucket`, padded with 0."""
        pairs = [rows.pair(i) for rows, i in members]
        # Rows are padded only to split evenly over replicas: Keras weights a batch's loss by its rows, so pad-only
        # rows change the mean loss of evaluation, whose last batch in a bucket is partial (training batches are full).
        count = -(-len(pairs) // self.replicas) * self.replicas
        if self.fixed_shapes:
            source_width = target_width = min(self.edges[bucket], self.max_length + 1) - 1
        else:
            source_width = max(len(s) for s, _ in pairs)
            target_width = max(len(t) for _, t in pairs) + 1
        source = np.zeros((count, source_width), np.int32)
        target_in = np.zeros((count, target_width), np.int32)
        target_out = np.zeros((count, target_width), np.int32)
        for row, (s, t) in enumerate(pairs):
            source[row, : len(s)] = s
            target_in[row, 0] = START_ID
            target_in[row, 1 : len(t) + 1] = t
            target_out[row, : len(t)] = t
            target_out[row, len(t)] = END_ID
        inputs = {"source": source, "target_in": target_in}
        if self.alignment is not None:
            inputs["alignment"] = self.links(members, pairs, (count, target_width, source_width))
        index, processes = self.shard
        if processes > 1:
            mine = slice(index * count // processes, (index + 1) * count // processes)
            inputs, target_out = {key: value[mine] for key, value in inputs.items()}, target_out[mine]
        return inputs, target_out

    def links(self, members, pairs, shape):
        """The batch's subword links, uint8 `shape` `(B, T, S)`: row t of a pair links its target token t (the
        end token's row, and every row of a pair without links, is 0)."""
        matrix = np.zeros(shape, np.uint8)
        for row, ((rows, i), (s, t)) in enumerate(zip(members, pairs)):
            if rows.links is not None:
                matrix[row, : len(t), : len(s)] = subword_links(rows.links.of(i), s, t, *self.alignment)
        return matrix


def sample_rows(vocabularies, alpha, source_lines, target_lines, max_length, seed, links=None):
    """One seeded draw of subword sampling over the text of every pair (`Tokenizer.draw`, `SAMPLING_CHUNK` sentences
    a draw, each seeded from `seed` and its chunk), less the pairs it makes longer than `max_length`: `Rows`, which
    keep their pairs' word `links` (`kmt.data.alignments.Links` of every pair, or None)."""
    sides = []
    for side, (tokenizer, lines) in enumerate(
        ((vocabularies.source, source_lines), (vocabularies.target, target_lines))
    ):
        values, lengths = [], []
        for chunk, start in enumerate(range(0, len(lines), SAMPLING_CHUNK)):
            state = np.random.SeedSequence([*seed, chunk, side]).generate_state(1)[0]
            ids, counts = tokenizer.draw(lines[start : start + SAMPLING_CHUNK], alpha, int(state))
            values.append(ids)
            lengths.append(counts)
        sides.append(
            (np.concatenate(values or [np.zeros(0, np.int32)]), np.concatenate(lengths or [np.zeros(0, np.int64)]))
        )
    (source, source_lengths), (target, target_lengths) = sides
    keep = fits(source_lengths, target_lengths, max_length)
    source, target = source[np.repeat(keep, source_lengths)], target[np.repeat(keep, target_lengths)]
    offsets = np.zeros((int(keep.sum()) + 1, 2), np.int64)
    offsets[1:, 0] = np.cumsum(source_lengths[keep])
    offsets[1:, 1] = np.cumsum(target_lengths[keep])
    kept_links = links.subset(np.flatnonzero(keep)) if links is not None else None
    rows = Rows(source.astype(np.int32), target.astype(np.int32), offsets, kept_links)
    rows.dropped = int(np.sum(~keep))
    return rows


# -------------------------------------------------------------------------------------------------- the loaders

# The ceiling of glibc's own adaptive mmap threshold on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX).
MMAP_THRESHOLD = 32 * 2**20
_M_MMAP_THRESHOLD = -3  # <malloc.h>


def keep_tensor_buffers_on_the_heap():
    """Lets glibc serve buffers up to 32 MiB from its heap; returns whether it did.

    A `tf.data.Dataset.from_generator` dataset tunes glibc's allocator when it starts ("Memory patch applied:
    M_TRIM_THRESHOLD=128 kb", to hand freed memory back to the system). From then on glibc maps buffers of a few MiB,
    a batch's activations, afresh with mmap at each allocation, page-faults them in and unmaps them when freed,
    where it had been reusing its heap: on a 2-core AMD EPYC a training epoch took 1.46 times as long, with 45% of
    its CPU time in the kernel (docs/experiments/performance.md). Called from inside the generator, after TensorFlow's
    patch, this sets glibc's mmap threshold to the ceiling of glibc's own adaptive threshold; the trim threshold
    stays as TensorFlow set it. Nothing is done where `MALLOC_MMAP_THRESHOLD_` is set (the user's choice) or off
    glibc.
    """
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1


def tf_dataset(batches, count=None, alignment=False):
    """A tf.data dataset of the padded batches the iterable `batches` yields (call it with a zero-argument function
    returning a fresh iterator, so each iteration starts over), prefetched on tf.data's threads; `count` batches when
    known (Keras then shows progress). With `alignment`, the inputs hold the batches' `"alignment"` links too."""
    import tensorflow as tf

    def generator():
        keep_tensor_buffers_on_the_heap()  # after TensorFlow's memory patch, which leaves a batch's buffers mmapped
        yield from batches()

    spec = tf.TensorSpec([None, None], tf.int32)
    inputs = {"source": spec, "target_in": spec}
    if alignment:
        inputs["alignment"] = tf.TensorSpec([None, None, None], tf.uint8)
    dataset = tf.data.Dataset.from_generator(generator, output_signature=(inputs, spec))
    if count is not None:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(count))
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(without_autotune())


def py_dataset(batcher, items=None, skip=0):
    """A `keras.utils.PyDataset` of `batcher`'s batches: the finite list of plan `items` (evaluation), or the
    training stream after `skip` batches.

    Keras asks for batch i of an endless PyDataset with i counted from the start of `fit`, across epochs, in order,
    when it has one worker. More workers would prefetch on threads, but Keras stops them at each epoch's end and drops
    what they fetched, and the next epoch asks on from the index after those: batches would be skipped. Padding a
    batch takes a fraction of a millisecond, and JAX and PyTorch run a step asynchronously from Python, so one worker
    costs next to nothing."""
    import keras

    class Batches(keras.utils.PyDataset):
        def __init__(self):
            super().__init__(workers=1, use_multiprocessing=False)
            self._plan, self._next = None, None

        @property
        def num_batches(self):
            return None if items is None else len(items)

        def __len__(self):
            return self.num_batches

        def __getitem__(self, index):
            if items is not None:
                return batcher.pad(*items[index])
            if index != self._next:  # a new iteration, or a jump: replay the plan to there
                self._plan = itertools.islice(batcher.plan(), skip + index, None)
            self._next = index + 1
            return batcher.pad(*next(self._plan))

    return Batches()


def keras_data(batcher, items=None, skip=0):
    """What `model.fit` and `model.evaluate` take under the current Keras backend: `tf_dataset` under TensorFlow,
    `py_dataset` under JAX and PyTorch. `items` (from `one_pass`) for a finite pass, else the training stream after
    `skip` batches."""
    import keras

    if keras.backend.backend() != "tensorflow":
        return py_dataset(batcher, items, skip)
    alignment = batcher.alignment is not None
    if items is not None:
        return tf_dataset(lambda: (batcher.pad(*item) for item in items), len(items), alignment)
    return tf_dataset(lambda: batcher.stream(skip), alignment=alignment)


def without_autotune():
    """tf.data options that turn its autotuning off.

    With autotuning on, each iterator runs a model thread that re-tunes the pipeline on a doubling period (10 ms,
    20 ms, ... up to a minute). Releasing the iterator joins that thread, and in TensorFlow 2.21 the thread first
    sleeps out its period, so `model.fit` returned up to a period after its last step with the CPU idle: 15-17 s
    after each of five 20-step fits on the 2-core AMD EPYC (each took 41.1 s in all, just past a wake-up at 10 ms
    x 2^12 = 40.96 s), against 0.1 s with autotuning off (docs/experiments/performance.md); kmt-train paid it once
    a run. Without autotuning, `AUTOTUNE` in `map` runs as many calls at once as TensorFlow's inter-op pool has threads
    (at most 16), and in `prefetch` gives a buffer that grows while the consumer waits: all kmt's tf.data
    pipelines need, as their work is small next to a training step.
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return options
