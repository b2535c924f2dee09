"""Length bucketing on a real corpus: how much of each batch is padding, and what the padding costs in training speed,
for several `data.bucket_width` values side by side in one process.

    python bench/batching.py                                   # Multi30k En->De recipe; widths 0 (fixed edges), 1, 2, 4
    python bench/batching.py --widths 0,1 --steps 60 experiment=multi30k_de_en

The experiment's config is composed as kmt-train composes it (trailing arguments are Hydra overrides); its vocabulary
is trained on the training split as kmt-train trains it. For each width:

- one pass over the training split, in kmt-train's length buckets (below): batches, sentences per batch, and fill (real
  tokens over padded positions, source and target); and kmt-train's steps per epoch, one pass of the repeated
  stream it trains on (fewer than the single pass's batches: that ends each bucket with a partial batch);
- training speed: the experiment's model (its size, dropout and precision, compiled as kmt-train compiles it) takes
  the first `--steps` batches of the seeded, shuffled, repeated stream that `model.fit` sees (no end-of-epoch
  partial batches), cached so the input pipeline is not timed, and timed as kmt-train times an epoch's
  training (`common.fit_seconds`: not the iterator's teardown, which can stall). One untimed round traces every
  width; then each of `--repeats` rounds times each width once, rotating the order. Figures are medians over rounds:
  milliseconds per step, real target tokens per second, and the epoch that rate implies (the split's target tokens
  over it).

Ratios are each width's tokens/s over width 0's (the fixed edges, kmt's default) and its projected epoch time over
width 0's. Nothing is asserted.

The batches come from the tf.data text pipeline kmt-train used before prepared data (`encode` and `make_dataset`
below: tokenize, drop empty and over-long pairs, add start/end tokens, bucket by length, pad), on the bucket rules
kmt's batcher follows (`kmt.data.buckets`); the docs' figures were measured through it.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import fit_seconds, median, print_json, print_table, recipe_config, require_positive  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--widths",
        default="0,1,2,4",
        help="comma-separated data.bucket_width values; 0 is kmt's fixed edges (default: 0,1,2,4)",
    )
    parser.add_argument("--steps", type=int, default=40, help="training steps timed per width and round (default: 40)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (default: 3)")
    parser.add_argument(
        "--experiment", default="multi30k_en_de", help="conf/experiment/ to compose (default: multi30k_en_de)"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for kmt-train (e.g. data.max_tokens=2048)")
    args = parser.parse_args(argv)
    try:
        args.widths = [int(width) for width in args.widths.split(",") if width.strip()]
    except ValueError:
        parser.error(f"--widths must be comma-separated integers. Received: {args.widths}")
    if not args.widths or min(args.widths) < 0:
        parser.error(f"--widths must be integers >= 0. Received: {args.widths}")
    require_positive(parser, args, "steps", "repeats")
    return args


def recipe_training_split(experiment, overrides):
    """An experiment's config composed as kmt-train composes it, the vocabulary kmt-train would train on its training
    split, and that split encoded: `(cfg, vocabularies, (source, target))`. Nothing is written."""
    import keras
    from omegaconf import OmegaConf

    from kmt.data import load_corpus
    from kmt.tokenizer import Vocabularies

    cfg = recipe_config(experiment, overrides)
    keras.utils.set_random_seed(cfg.seed)  # before the tokenizer: TF's seed reset drops SentencePiece resources
    train = load_corpus(cfg.data)["train"]
    vocabularies = Vocabularies.train(
        train.source, train.target, joint=cfg.model.shared_embeddings, **OmegaConf.to_container(cfg.data.tokenizer)
    )
    return cfg, vocabularies, encode(train, vocabularies, cfg.model.max_length)


def recipe_model(cfg, vocabularies, total_steps):
    """The experiment's model in its training precision, compiled as kmt-train compiles it, with the learning-rate
    schedule planned for `total_steps` updates."""
    import keras

    from kmt.build import build_model, build_schedule, compile_model

    keras.config.set_dtype_policy(cfg.trainer.precision)
    model = build_model(cfg.model, vocabularies.source.vocab_size, vocabularies.target.vocab_size)
    return compile_model(
        model, cfg.optim, build_schedule(cfg.optim, cfg.model.hidden_dim, total_steps), cfg.trainer.jit_compile
    )


def encode(text, vocabularies, max_length):
    """A `ParallelText` tokenized, less the pairs that are empty or longer than `max_length` tokens on a side (the
    target one less, for its start or end token): `(source, target)`, `(N, None)` int32 RaggedTensors."""
    import numpy as np
    import tensorflow as tf

    source = vocabularies.source.tokenize(tf.constant(list(text.source), dtype=tf.string))
    target = vocabularies.target.tokenize(tf.constant(list(text.target), dtype=tf.string))
    nonempty = np.array([bool(s.strip()) and bool(t.strip()) for s, t in zip(text.source, text.target)], dtype=bool)
    fits = (source.row_lengths().numpy() <= max_length) & (target.row_lengths().numpy() <= max_length - 1)
    keep = np.flatnonzero(nonempty & fits)
    return tf.gather(source, keep), tf.gather(target, keep)


def target_tokens(split):
    """Target tokens the loss sees in one pass over `split`: each sentence's tokens plus its end token."""
    _, target = split
    return int(target.row_lengths().numpy().sum()) + int(target.nrows())


def make_dataset(split, max_length, max_tokens, batch_size, bucket_width, shuffle=False, seed=None, repeat=False):
    """Padded, length-bucketed batches over `split` (`encode`'s), each about `max_tokens` tokens (or `batch_size`
    sentences when `max_tokens` is 0), shuffled (seeded) before bucketing and after when `shuffle`, repeated forever
    when `repeat`: `({"source": (B, S), "target_in": (B, T)}, target_out (B, T))` int32, where `target_in` is
    `[start] + target` and `target_out` is `target + [end]`."""
    import tensorflow as tf

    from kmt.data.batches import without_autotune
    from kmt.data.buckets import bucket_sizes
    from kmt.special_ids import END_ID, START_ID

    def example(source, target):
        start, end = tf.constant([START_ID], tf.int32), tf.constant([END_ID], tf.int32)
        features = {"source": source, "target_in": tf.concat([start, target], axis=0)}  # (S,), (T,)
        return features, tf.concat([target, end], axis=0)  # (T,)

    dataset = tf.data.Dataset.from_tensor_slices(split)
    if shuffle:
        dataset = dataset.shuffle(int(split[0].nrows()), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    edges, sizes = bucket_sizes(max_length, max_tokens, batch_size, bucket_width)
    dataset = dataset.map(example, num_parallel_calls=tf.data.AUTOTUNE).bucket_by_sequence_length(
        element_length_func=lambda features, _: tf.maximum(  # buckets.bucket_lengths: target_in has the start token
            tf.shape(features["source"])[0], tf.shape(features["target_in"])[0]
        ),
        bucket_boundaries=edges,
        bucket_batch_sizes=sizes,
        padded_shapes=({"source": [None], "target_in": [None]}, [None]),
    )
    if not repeat:  # checks `count_batches`: iterating fails if the pass makes another number of batches
        batches = count_batches(split, max_length, max_tokens, batch_size, bucket_width)
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    if shuffle:
        dataset = dataset.shuffle(256, seed=seed, reshuffle_each_iteration=True)
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(without_autotune())


def count_batches(split, max_length, max_tokens, batch_size, bucket_width, repeated=False):
    """Batches in one pass over `split` (`kmt.data.buckets.batches_per_pass`): with `repeated`, the steps of an epoch
    of the repeated stream `model.fit` trains on, which carries each bucket's partial batch into the next pass."""
    from kmt.data.buckets import batches_per_pass, bucket_lengths, bucket_of, bucket_sizes

    edges, sizes = bucket_sizes(max_length, max_tokens, batch_size, bucket_width)
    lengths = bucket_lengths(split[0].row_lengths().numpy(), split[1].row_lengths().numpy())
    return batches_per_pass(bucket_of(lengths, edges), sizes, repeated)


def fill(dataset):
    """Batches, sentences, and real tokens over padded positions on each side, over one pass of `dataset`."""
    import numpy as np

    batches = sentences = 0
    real, padded = np.zeros(2), np.zeros(2)
    for features, target_out in dataset:
        source, target = features["source"].numpy(), target_out.numpy()
        batches += 1
        sentences += len(source)
        real += [(source != 0).sum(), (target != 0).sum()]
        padded += [source.size, target.size]
    return batches, sentences, real / padded


def main(argv=None):
    args = parse_args(argv)  # before TensorFlow is imported (seconds): --help and usage errors answer at once
    from kmt.data.buckets import bucket_edges

    cfg, vocabularies, train = recipe_training_split(args.experiment, args.overrides)
    max_length = cfg.model.max_length
    batching = dict(max_length=max_length, max_tokens=cfg.data.max_tokens, batch_size=cfg.data.batch_size)
    total_steps = cfg.trainer.epochs * count_batches(
        train, **batching, bucket_width=cfg.data.bucket_width, repeated=True
    )
    pairs, tokens_per_pass = int(train[0].nrows()), target_tokens(train)
    model = recipe_model(cfg, vocabularies, total_steps)
    rows, streams = [], {}
    for width in args.widths:
        batches, sentences, (source_fill, target_fill) = fill(make_dataset(train, **batching, bucket_width=width))
        stream = make_dataset(train, **batching, bucket_width=width, shuffle=True, seed=cfg.seed, repeat=True)
        stream = stream.take(args.steps).cache()
        tokens = sum(int((target_out.numpy() != 0).sum()) for _, target_out in stream)  # fills the cache
        streams[width] = (stream, tokens)
        steps = count_batches(train, **batching, bucket_width=width, repeated=True)
        rows.append(
            {
                "bucket_width": width,
                "buckets": len(bucket_edges(max_length, width)),
                "batches": batches,
                "steps_per_epoch": steps,
                "sentences_per_batch": sentences / batches,
                "source_fill": source_fill,
                "target_fill": target_fill,
                "seconds": [],
            }
        )
    print(
        f"{args.experiment}: {pairs:,} training pairs, {tokens_per_pass:,} target tokens; "
        f"{model.count_params():,} parameters, {cfg.trainer.precision}; {args.steps} steps a width and round",
        file=sys.stderr,
    )

    order = list(range(len(rows)))
    for round_ in range(args.repeats + 1):  # round 0 traces and is not timed
        for index in order:
            seconds = fit_seconds(model, streams[rows[index]["bucket_width"]][0], args.steps)
            if round_:
                rows[index]["seconds"].append(seconds)
        order = order[1:] + order[:1]

    for row in rows:
        seconds = median(row.pop("seconds"))
        tokens = streams[row["bucket_width"]][1]
        row["ms_per_step"] = 1000 * seconds / args.steps
        row["target_tokens_per_step"] = tokens / args.steps
        row["tokens_per_second"] = tokens / seconds
        row["epoch_seconds"] = tokens_per_pass / row["tokens_per_second"]
    base = rows[0]
    for row in rows:
        row["speed_ratio"] = row["tokens_per_second"] / base["tokens_per_second"]
        row["epoch_ratio"] = row["epoch_seconds"] / base["epoch_seconds"]
    print_table(
        rows,
        [
            ("bucket_width", "bucket width"),
            "buckets",
            ("batches", "batches in one pass"),
            ("steps_per_epoch", "steps/epoch"),
            ("sentences_per_batch", "sentences/batch"),
            ("source_fill", "source fill"),
            ("target_fill", "target fill"),
            ("ms_per_step", "ms/step"),
            ("target_tokens_per_step", "target tokens/step"),
            ("tokens_per_second", "target tok/s"),
            ("epoch_seconds", "epoch s (projected)"),
            ("speed_ratio", f"tok/s vs width {base['bucket_width']}"),
            ("epoch_ratio", f"epoch vs width {base['bucket_width']}"),
        ],
    )
    print_json(
        "batching",
        experiment=args.experiment,
        overrides=args.overrides,
        steps=args.steps,
        repeats=args.repeats,
        precision=cfg.trainer.precision,
        parameters=model.count_params(),
        training_pairs=pairs,
        rows=rows,
    )


if __name__ == "__main__":
    main()
