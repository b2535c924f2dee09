"""The one batcher (kmt.data.batches) over prepared shards (kmt.data.shards): buckets, budgets, seeded streams,
exact resume positions, subword sampling, and the same batches through tf.data and a Keras PyDataset."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kmt.data import batches as batches_module
from kmt.data.batches import Batcher, keras_data, py_dataset, tf_dataset
from kmt.data.buckets import bucket_edges, bucket_lengths, bucket_of
from kmt.data.shards import OnDisk, PreparedData, write_prepared
from kmt.special_ids import END_ID, START_ID
from kmt.tokenizer import Vocabularies

SOURCES = ["a b c", "", "d e", "a " * 40, "b c d e f g", "c"] * 10
TARGETS = ["x y", "y", "", "z", "x y z w", "w"] * 10


@pytest.fixture(scope="module")
def vocabularies():
    return Vocabularies.train(SOURCES, TARGETS, joint=True, vocab_size=300)


def prepare(directory, vocabularies, pairs):
    write_prepared(directory, {"train": pairs}, vocabularies, 16, "{}\n")
    return PreparedData(directory).split("train")


@pytest.fixture(scope="module")
def split(vocabularies, tmp_path_factory):
    return prepare(tmp_path_factory.mktemp("fixed"), vocabularies, zip(SOURCES, TARGETS))


def varied_pairs(pairs, seed):
    """`pairs` random pairs of 1-7 words a side, so their lengths spread over several buckets."""
    rng = np.random.default_rng(seed)
    words = lambda letters: " ".join(rng.choice(list(letters), size=rng.integers(1, 8)))  # noqa: E731
    return [(words("abcdefg"), words("xyzw")) for _ in range(pairs)]


@pytest.fixture(scope="module")
def varied(vocabularies, tmp_path_factory):
    pairs = varied_pairs(80, seed=3)
    split = prepare(tmp_path_factory.mktemp("varied"), vocabularies, pairs)
    split.pairs = pairs
    return split


def as_lists(batches):
    return [(f["source"].tolist(), f["target_in"].tolist(), t.tolist()) for f, t in batches]


def test_empty_and_over_long_pairs_are_dropped_counted_and_their_lines_kept(split):
    assert split.dropped == {"empty": 20, "too_long": 10}
    assert len(split) == 30
    text = split.text()
    assert len(text) == 60 and text.source[:6] == SOURCES[:6]  # every line, for BLEU over the whole split
    assert [text.source[i] for i in text.kept] == [s for s, t in zip(SOURCES, TARGETS) if s and t and len(s) < 20]


def test_shards_hold_the_ids_tensorflow_text_gives(split, vocabularies):
    import tensorflow as tf

    text = split.text()
    kept = [text.source[i] for i in text.kept]
    ragged = vocabularies.source.tokenize(tf.constant(kept))
    assert [split.pair(i)[0].tolist() for i in range(len(split))] == ragged.to_list()
    assert split.source_ids.dtype == np.uint16  # a vocabulary of 300 pieces: two bytes an id


def test_prepared_files_read_from_disk_index_like_numpy_and_the_buckets_read_in_chunks(varied, monkeypatch):
    offsets = np.load(varied._directory / "train.index.npy")
    source = np.fromfile(varied._directory / "train.source.ids", np.uint16)
    assert isinstance(varied.offsets, OnDisk) and varied.offsets.shape == offsets.shape
    for key in (0, 5, -1, slice(3, 9), slice(70, 200), slice(5, 2), (-1, 1), (slice(2, 6), 0)):
        np.testing.assert_array_equal(varied.offsets[key], offsets[key])
    np.testing.assert_array_equal(np.asarray(varied.source_ids), source)
    with pytest.raises(IndexError):
        varied.offsets[len(offsets)]
    lengths = np.diff(offsets, axis=0)
    whole = Batcher(varied, 16, max_tokens=40).buckets(varied)
    monkeypatch.setattr(batches_module, "BUCKETING_CHUNK", 7)
    assert whole.dtype == np.uint8
    np.testing.assert_array_equal(Batcher(varied, 16, max_tokens=40).buckets(varied), whole)
    np.testing.assert_array_equal(whole, bucket_of(bucket_lengths(lengths[:, 0], lengths[:, 1]), bucket_edges(16)))


def test_decoder_input_is_shifted_right_behind_a_start_token(split):
    batcher = Batcher(split, 16, batch_size=4)
    features, target_out = batcher.pad(*batcher.one_pass()[0])
    target_in = features["target_in"]
    assert (target_in[:, 0] == START_ID).all()
    for row_in, row_out in zip(target_in, target_out):
        length = int((row_out != 0).sum())
        assert row_out[length - 1] == END_ID
        np.testing.assert_array_equal(row_in[1:length], row_out[: length - 1])


@pytest.mark.parametrize("bucket_width", [0, 1, 3])
@pytest.mark.parametrize("max_tokens, batch_size", [(40, 0), (0, 7)])
def test_batches_respect_the_budget_and_one_pass_holds_every_pair_once(varied, max_tokens, batch_size, bucket_width):
    batcher = Batcher(varied, 16, max_tokens, batch_size or 64, bucket_width)
    batches = [batcher.pad(*item) for item in batcher.one_pass()]
    assert sum(len(t) for _, t in batches) == len(varied)
    for features, target_out in batches:
        rows, width = features["source"].shape[0], max(features["source"].shape[1], target_out.shape[1])
        assert rows * width <= max(max_tokens, width) if max_tokens else rows <= 7


def test_fixed_shapes_give_one_shape_per_bucket_within_the_budget(varied):
    loose, fixed = Batcher(varied, 16, 40), Batcher(varied, 16, 40, fixed_shapes=True)
    loose_batches = [loose.pad(*item) for item in loose.one_pass()]
    fixed_batches = [fixed.pad(*item) for item in fixed.one_pass()]
    widths = {f["source"].shape[1] for f, _ in fixed_batches} | {t.shape[1] for _, t in fixed_batches}
    assert widths <= {7, 11, 15, 16}  # bucket edges 8, 12, 16 and max_length + 1, less one
    for features, target_out in fixed_batches:
        assert features["source"].shape[1] == features["target_in"].shape[1] == target_out.shape[1]
        assert features["source"].shape[0] * target_out.shape[1] <= 40
    # The same pairs in the same batches, only padded wider: no pad-only rows.
    strip = lambda batches: [[r[r != 0].tolist() for r in f["source"]] for f, _ in batches]  # noqa
    assert strip(loose_batches) == strip(fixed_batches)
    shapes = lambda batches: {(f["source"].shape, t.shape) for f, t in batches}  # noqa: E731
    assert len(shapes(fixed_batches)) < len(shapes(loose_batches))


def test_evaluation_loss_is_the_same_with_fixed_and_loose_shapes(varied, vocabularies):
    # Keras weights each batch's loss by its rows: pad-only rows in a bucket's last batch would change it.
    from kmt.build import build_model, build_schedule, compile_model
    from tests.helpers import compose_config

    cfg = compose_config()
    size = vocabularies.source.vocab_size
    schedule = build_schedule(cfg.optim, cfg.model.hidden_dim, 4)
    model = compile_model(build_model(cfg.model, size, size), cfg.optim, schedule, cfg.trainer.jit_compile)
    results = []
    for fixed in (False, True):
        batcher = Batcher(varied, 16, 40, fixed_shapes=fixed)
        data = keras_data(batcher, batcher.one_pass())
        results.append(model.evaluate(data, verbose=0, return_dict=True))
    assert results[0]["loss"] == pytest.approx(results[1]["loss"], rel=1e-5)
    assert results[0]["ppl"] == pytest.approx(results[1]["ppl"], rel=1e-5)


def test_bucket_edges_step_by_the_width_and_end_past_the_longest_sequence():
    assert bucket_edges(16) == [8, 12, 16, 17]
    assert bucket_edges(16, bucket_width=1) == list(range(2, 18))
    assert bucket_edges(16, bucket_width=40) == [17]


def test_an_epoch_of_the_stream_is_one_pass_over_the_pairs_and_the_seed_decides_it(varied):
    batcher = Batcher(varied, 16, 40, bucket_width=1, seed=0)
    steps, single = batcher.steps_per_pass, len(batcher.one_pass())
    assert steps < single  # a single pass ends each bucket with a partial batch; the repeated stream does not
    epochs = 20
    stream = list(zip(range(epochs * steps), batcher.stream()))
    drawn = sum(len(target) for _, (_, target) in stream)
    assert abs(drawn / (epochs * len(varied)) - 1) < 0.05
    take = lambda b: as_lists(batch for _, batch in zip(range(30), b.stream()))  # noqa: E731
    assert take(batcher) == take(Batcher(varied, 16, 40, bucket_width=1, seed=0))
    assert take(batcher) != take(Batcher(varied, 16, 40, bucket_width=1, seed=1))


def test_a_resumed_stream_goes_on_where_the_skipped_batches_end(varied, vocabularies, monkeypatch):
    monkeypatch.setattr(batches_module, "SAMPLING_CHUNK", 16)  # several seeded draws a pass
    sampling = (vocabularies, 0.1, [s for s, _ in varied.pairs], [t for _, t in varied.pairs])
    batcher = Batcher(varied, 16, 64, seed=1, sampling=sampling)
    whole = as_lists(batch for _, batch in zip(range(50), batcher.stream()))  # several passes, each resampled
    again = Batcher(varied, 16, 64, seed=1, sampling=sampling)
    assert as_lists(batch for _, batch in zip(range(13), again.stream(skip=37))) == whole[37:]


def test_subword_sampling_resegments_every_pass_within_the_length_limit(varied, vocabularies):
    sampling = (vocabularies, 0.1, [s for s, _ in varied.pairs], [t for _, t in varied.pairs])
    batcher = Batcher(varied, 16, 64, seed=0, sampling=sampling)
    segmentations = {}  # source text -> the segmentations drawn for it
    for _, (features, _) in zip(range(60), batcher.stream()):
        source, target_in = features["source"], features["target_in"]
        assert source.shape[1] <= 16 and target_in.shape[1] <= 16
        for row in source:
            ids = tuple(int(i) for i in row if i)
            segmentations.setdefault(vocabularies.source.decode([ids])[0], set()).add(ids)
    assert set(segmentations) <= {s for s, _ in varied.pairs}  # sampled pieces spell the training sentences
    assert any(len(drawn) > 1 for drawn in segmentations.values())  # and differ from pass to pass
    assert batcher.epoch_rows.target_tokens > varied.target_tokens  # the first draw, which sizes an epoch


def test_tf_data_and_a_py_dataset_give_the_same_batches(varied):
    batcher = Batcher(varied, 16, 40, seed=2)
    expected = as_lists(batch for _, batch in zip(range(25), batcher.stream(skip=5)))
    through_tf = as_lists(
        ({k: v.numpy() for k, v in f.items()}, t.numpy()) for f, t in tf_dataset(lambda: batcher.stream(5)).take(25)
    )
    stream = py_dataset(batcher, skip=5)
    assert through_tf == expected == as_lists(stream[i] for i in range(25))
    items = batcher.one_pass()
    assert as_lists(py_dataset(batcher, items)[i] for i in range(len(items))) == as_lists(
        ({k: v.numpy() for k, v in f.items()}, t.numpy()) for f, t in keras_data(batcher, items)
    )


def test_the_same_seed_gives_the_same_batches_under_jax(varied, tmp_path):
    """A JAX process (no TensorFlow) reads the same shards into the same batches."""
    batcher = Batcher(varied, 16, 40, seed=4)
    expected = as_lists(batch for _, batch in zip(range(20), batcher.stream()))
    script = (
        "import json, sys\n"
        "from kmt.data.batches import Batcher, keras_data\n"
        "from kmt.data.shards import PreparedData\n"
        f"batcher = Batcher(PreparedData({str(varied._directory)!r}).split('train'), 16, 40, seed=4)\n"
        "data = keras_data(batcher)\n"
        "batches = [data[i] for i in range(20)]\n"
        "print(json.dumps([(f['source'].tolist(), f['target_in'].tolist(), t.tolist()) for f, t in batches]))\n"
        "assert 'tensorflow' not in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=os.environ | {"KERAS_BACKEND": "jax"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert [list(map(list, batch)) for batch in json.loads(result.stdout)] == [list(b) for b in expected]


def test_sampled_passes_keep_each_pair_in_the_bucket_of_its_own_draw(varied, vocabularies, monkeypatch):
    """A bucket's leftovers of one pass join the next pass's pairs, which another draw segmented: each pair is read
    from the draw it was bucketed by, so it fits its batch's fixed shape."""
    monkeypatch.setattr(batches_module, "SAMPLING_CHUNK", 16)
    sampling = (vocabularies, 0.1, [s for s, _ in varied.pairs], [t for _, t in varied.pairs])
    batcher = Batcher(varied, 16, 64, seed=0, fixed_shapes=True, sampling=sampling)
    edges = [0, *batcher.edges]
    for _, (features, target_out) in zip(range(80), batcher.stream()):
        width = features["source"].shape[1]
        bucket = next(b for b, edge in enumerate(batcher.edges) if edge - 1 == width)
        for source, target in zip(features["source"], target_out):
            if source.any():
                length = max(int((source != 0).sum()), int((target != 0).sum()))  # target_out has the end token
                assert edges[bucket] <= length < edges[bucket + 1]


def test_keras_reads_the_stream_in_order_across_epochs(varied):
    """What `model.fit` gets from `py_dataset` (JAX, PyTorch) over several epochs of `steps_per_epoch` batches: the
    stream itself, no batch skipped or repeated at an epoch's end."""
    from kmt._keras_private import EpochIterator

    batcher = Batcher(varied, 16, 40, seed=5)
    expected = as_lists(batch for _, batch in zip(range(3 * 4), batcher.stream(skip=2)))
    epochs = EpochIterator(x=py_dataset(batcher, skip=2), steps_per_epoch=4, shuffle=False)
    got = []
    for _ in range(3):
        for _, _, (batch,) in epochs:  # one step an execution: a list of one batch
            features, target = batch[:2]
            got.append(({k: np.asarray(v) for k, v in features.items()}, np.asarray(target)))
    assert as_lists(got) == expected


MMAPPED_CHUNKS = """
import ctypes, json
import numpy as np
from kmt.data.batches import tf_dataset

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype, libc.malloc.restype = MallInfo2, ctypes.c_void_p
libc.malloc.argtypes, libc.free.argtypes = (ctypes.c_size_t,), (ctypes.c_void_p,)
batch = np.ones((4, 3), np.int32)
next(iter(tf_dataset(lambda: iter([({"source": batch, "target_in": batch}, batch)]))))  # TF's memory patch
before = libc.mallinfo2().hblks
buffer = libc.malloc(4 * 2**20)  # a 4 MiB tensor buffer
print(json.dumps(libc.mallinfo2().hblks - before))
libc.free(buffer)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc's allocator only"
)
def test_buffers_under_32_mib_stay_on_the_heap_beside_tensorflows_generator_dataset():
    def mmapped_chunks(**env):
        result = subprocess.run(
            [sys.executable, "-c", MMAPPED_CHUNKS],
            capture_output=True,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env},
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return json.loads(result.stdout.strip().splitlines()[-1])

    assert mmapped_chunks() == 0
    # Where the user sets the threshold, kmt leaves it: at 128 KiB the buffer is mmapped, as after TensorFlow's patch
    # without kmt's setting.
    assert mmapped_chunks(MALLOC_MMAP_THRESHOLD_="131072") == 1
