"""bench/text_pipeline.py, the tf.data text pipeline the benchmarks measure kmt's batcher against: what it batches,
so that the benches' "today" figures mean the pipeline kmt-train used before prepared data."""

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from kmt.data.buckets import bucket_edges
from kmt.data.sources import ParallelText
from kmt.special_ids import END_ID, START_ID
from kmt.tokenizer import Vocabularies

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import text_pipeline  # noqa: E402  (bench/ is not a package)
from text_pipeline import count_batches, encode_split, make_dataset, resample, subword_sampler  # noqa: E402

SOURCES = ["a b c", "", "d e", "a " * 40, "b c d e f g", "c"] * 10
TARGETS = ["x y", "y", "", "z", "x y z w", "w"] * 10


@pytest.fixture(scope="module")
def vocabularies():
    return Vocabularies.train(SOURCES, TARGETS, joint=True, vocab_size=300)


@pytest.fixture(scope="module")
def split(vocabularies):
    return encode_split("train", ParallelText(SOURCES, TARGETS), vocabularies, max_length=16)


def varied_split(vocabularies, pairs, seed):
    """`pairs` random pairs of 1-7 words a side, so their lengths spread over several buckets."""
    rng = np.random.default_rng(seed)
    words = lambda letters: " ".join(rng.choice(list(letters), size=rng.integers(1, 8)))  # noqa: E731
    return encode_split(
        "train",
        ParallelText([words("abcdefg") for _ in range(pairs)], [words("xyzw") for _ in range(pairs)]),
        vocabularies,
        max_length=16,
    )


def test_empty_and_over_long_pairs_are_dropped_and_counted(split):
    assert split.dropped == {"empty": 20, "too_long": 10}
    assert len(split) == 30 and "" not in split.source_text and "" not in split.target_text


def test_decoder_input_is_shifted_right_behind_a_start_token(split):
    features, target_out = next(iter(make_dataset(split, max_length=16, batch_size=4)))
    target_in, target_out = features["target_in"].numpy(), target_out.numpy()
    assert (target_in[:, 0] == START_ID).all()
    for row_in, row_out in zip(target_in, target_out):
        length = int((row_out != 0).sum())
        assert row_out[length - 1] == END_ID
        np.testing.assert_array_equal(row_in[1:length], row_out[: length - 1])


@pytest.mark.parametrize("bucket_width", [0, 1, 3])
@pytest.mark.parametrize("max_tokens, batch_size", [(40, 0), (0, 7)])
def test_batches_respect_the_budget_and_the_count_is_exact(split, max_tokens, batch_size, bucket_width):
    dataset = make_dataset(
        split, max_length=16, max_tokens=max_tokens, batch_size=batch_size or 64, bucket_width=bucket_width
    )
    batches = list(dataset)
    count = count_batches(split, 16, max_tokens, batch_size or 64, bucket_width)
    assert len(batches) == count == dataset.cardinality()
    assert sum(int(f["source"].shape[0]) for f, _ in batches) == len(split)
    for features, target_out in batches:
        rows, width = features["source"].shape[0], max(features["source"].shape[1], target_out.shape[1])
        assert rows * width <= max(max_tokens, width) if max_tokens else rows <= 7


def test_shuffling_is_seeded(split):
    first = [f["source"].numpy().tolist() for f, _ in make_dataset(split, 16, batch_size=4, shuffle=True, seed=1)]
    again = [f["source"].numpy().tolist() for f, _ in make_dataset(split, 16, batch_size=4, shuffle=True, seed=1)]
    assert first == again


def test_padding_to_the_bucket_gives_one_shape_per_bucket_within_the_budget(vocabularies):
    varied = varied_split(vocabularies, 60, seed=0)
    loose = list(make_dataset(varied, max_length=16, max_tokens=40))
    fixed = list(make_dataset(varied, max_length=16, max_tokens=40, pad_to_bucket=True))
    widths = {f["source"].shape[1] for f, _ in fixed} | {t.shape[1] for _, t in fixed}
    assert widths <= {7, 11, 15, 16}  # bucket edges 8, 12, 16 and max_length + 1, less one
    for features, target_out in fixed:
        assert features["source"].shape[1] == features["target_in"].shape[1] == target_out.shape[1]
        assert features["source"].shape[0] * target_out.shape[1] <= 40
    # The same sentences in the same batches, only padded wider, in fewer shapes.
    strip = lambda batches: [[row[row != 0].tolist() for row in f["source"].numpy()] for f, _ in batches]  # noqa
    assert strip(loose) == strip(fixed)
    shapes = lambda batches: {(tuple(f["source"].shape), tuple(t.shape)) for f, t in batches}  # noqa: E731
    assert len(shapes(fixed)) < len(shapes(loose))


def test_bucket_edges_step_by_the_width_and_end_past_the_longest_sequence():
    assert bucket_edges(16) == [8, 12, 16, 17]
    assert bucket_edges(16, bucket_width=1) == list(range(2, 18))
    assert bucket_edges(16, bucket_width=4) == [5, 9, 13, 17]
    assert bucket_edges(16, bucket_width=40) == [17]


def test_buckets_one_token_wide_batch_only_pairs_of_one_length(vocabularies):
    varied = varied_split(vocabularies, 80, seed=1)

    def lengths(batch):  # target_out = target_in
        return {
            max(int((s != 0).sum()), int((t != 0).sum())) for s, t in zip(batch[0]["source"].numpy(), batch[1].numpy())
        }

    exact = list(make_dataset(varied, max_length=16, max_tokens=40, bucket_width=1))
    assert all(len(lengths(batch)) == 1 for batch in exact)
    assert sum(len(batch[1]) for batch in exact) == len(varied)
    coarse = list(make_dataset(varied, max_length=16, max_tokens=40))
    assert any(len(lengths(batch)) > 1 for batch in coarse)  # so the check above can fail
    padding = lambda batches: sum(int((t.numpy() == 0).sum()) for _, t in batches)  # noqa: E731
    assert padding(exact) < padding(coarse)


def test_an_epoch_of_a_repeated_stream_is_one_pass_over_the_pairs(vocabularies):
    varied = varied_split(vocabularies, 80, seed=2)
    single = count_batches(varied, 16, max_tokens=40, bucket_width=1)
    steps = count_batches(varied, 16, max_tokens=40, bucket_width=1, repeated=True)
    assert steps < single  # a single pass ends each bucket with a partial batch; a repeated stream does not
    epochs = 20
    stream = make_dataset(varied, 16, max_tokens=40, bucket_width=1, shuffle=True, seed=0, repeat=True)
    drawn = sum(int(target.shape[0]) for _, target in stream.take(epochs * steps))
    assert abs(drawn / (epochs * len(varied)) - 1) < 0.05


def test_subword_sampling_resegments_every_pass_within_the_length_limit(vocabularies):
    varied = varied_split(vocabularies, 80, seed=3)
    stream = make_dataset(
        varied,
        16,
        max_tokens=64,
        shuffle=True,
        seed=0,
        repeat=True,
        resegment=subword_sampler(vocabularies, 0.1, seed=0),
    )
    pairs = {}  # source text -> the segmentations drawn for it
    for features, _ in stream.take(60):
        source, target_in = features["source"].numpy(), features["target_in"].numpy()
        assert source.shape[1] <= 16 and target_in.shape[1] <= 16
        assert (target_in[:, 0] == START_ID).all()
        for row in source:
            ids = [int(i) for i in row if i]
            sentence = vocabularies.source.detokenize(np.array([ids], dtype=np.int32)).numpy()[0].decode()
            pairs.setdefault(sentence, set()).add(tuple(ids))
    assert set(pairs) <= set(varied.source_text)  # sampled pieces spell the training sentences
    assert any(len(segmentations) > 1 for segmentations in pairs.values())  # and differ from pass to pass

    epoch = resample(varied, vocabularies, 16, 0.1, seed=0)  # a seeded pass: longer, over-long pairs dropped
    assert epoch.target_tokens > varied.target_tokens
    assert max(epoch.source.row_lengths()) <= 16 and max(epoch.target.row_lengths()) <= 15
    assert len(epoch) + epoch.dropped["too_long_sampled"] == len(varied)


def test_a_subword_sampling_stream_is_the_same_for_the_same_seed(vocabularies, monkeypatch):
    monkeypatch.setattr(text_pipeline, "RESEGMENT_CHUNK", 16)  # many chunks, drawn by a parallel map
    varied = varied_split(vocabularies, 80, seed=3)

    def batches(sampling_seed):
        stream = make_dataset(
            varied,
            16,
            max_tokens=64,
            shuffle=True,
            seed=1,
            repeat=True,
            resegment=subword_sampler(vocabularies, 0.1, sampling_seed),
        )
        return [(f["source"].numpy().tolist(), target.numpy().tolist()) for f, target in stream.take(60)]

    assert batches(1) == batches(1)
    assert batches(1) != batches(2)  # the same shuffle, other draws


def test_a_resumed_stream_goes_on_where_the_skipped_batches_end(vocabularies):
    varied = varied_split(vocabularies, 80, seed=3)

    def batches(skip, take):
        stream = make_dataset(
            varied,
            16,
            max_tokens=64,
            shuffle=True,
            seed=1,
            repeat=True,
            skip=skip,
            resegment=subword_sampler(vocabularies, 0.1, seed=0),
        )
        return [(f["source"].numpy().tolist(), target.numpy().tolist()) for f, target in stream.take(take)]

    whole = batches(0, 50)  # several passes: reshuffled and resampled on each
    assert batches(37, 13) == whole[37:]


@pytest.mark.parametrize("stream", [{}, {"shuffle": True, "seed": 1, "repeat": True}])
def test_batches_come_without_tf_data_autotuning_and_are_the_same_as_with_it(split, stream):
    # Autotuning's model thread made fit wait for its next wake-up when it released the training iterator
    # (kmt.data.batches.without_autotune).
    assert make_dataset(split, max_length=16, batch_size=4, **stream).options().autotune.enabled is False
    options = tf.data.Options()
    options.autotune.enabled = True
    batches = lambda data: [f["source"].numpy().tolist() for f, _ in data.take(12)]  # noqa: E731
    assert batches(make_dataset(split, max_length=16, batch_size=4, **stream)) == batches(
        make_dataset(split, max_length=16, batch_size=4, **stream).with_options(options)
    )
