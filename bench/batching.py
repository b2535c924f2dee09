"""Length bucketing on a real corpus: how much of each batch is padding, and what the padding costs in training speed,
for several `data.bucket_width` values side by side in one process.

    python bench/batching.py                                   # Multi30k En->De recipe; widths 0 (fixed edges), 1, 2, 4
    python bench/batching.py --widths 0,1 --steps 60 experiment=multi30k_de_en

The experiment's config is composed as kmt-train composes it (trailing arguments are Hydra overrides); its vocabulary
is trained on the training split as kmt-train trains it. For each width:

- one pass over the training split, batched as kmt-train batches it: batches, sentences per batch, and fill (real
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
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import (  # noqa: E402
    add_recipe_arguments,
    fit_seconds,
    median,
    print_json,
    print_table,
    recipe_model,
    recipe_training_split,
    require_positive,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--widths",
        default="0,1,2,4",
        help="comma-separated data.bucket_width values; 0 is kmt's fixed edges (default: 0,1,2,4)",
    )
    parser.add_argument("--steps", type=int, default=40, help="training steps timed per width and round (default: 40)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (default: 3)")
    add_recipe_arguments(parser)
    args = parser.parse_args(argv)
    try:
        args.widths = [int(width) for width in args.widths.split(",") if width.strip()]
    except ValueError:
        parser.error(f"--widths must be comma-separated integers. Received: {args.widths}")
    if not args.widths or min(args.widths) < 0:
        parser.error(f"--widths must be integers >= 0. Received: {args.widths}")
    require_positive(parser, args, "steps", "repeats")
    return args


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
    from text_pipeline import count_batches, make_dataset

    cfg, vocabularies, train = recipe_training_split(args.experiment, args.overrides)
    max_length = cfg.model.max_length
    batching = dict(max_length=max_length, max_tokens=cfg.data.max_tokens, batch_size=cfg.data.batch_size)
    total_steps = cfg.trainer.epochs * count_batches(
        train, **batching, bucket_width=cfg.data.bucket_width, repeated=True
    )
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
        f"{args.experiment}: {len(train):,} training pairs, {train.target_tokens:,} target tokens; "
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
        row["epoch_seconds"] = train.target_tokens / row["tokens_per_second"]
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
        training_pairs=len(train),
        rows=rows,
    )


if __name__ == "__main__":
    main()
