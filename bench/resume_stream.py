"""What a resumed run pays to go on with its training stream where the finished epochs left it: the seconds to pass
over an epoch of batches, with the experiment's subword sampling and without it, side by side in one process.

    python bench/resume_stream.py                     # Multi30k En->De recipe, 3 epochs of batches, 3 rounds
    python bench/resume_stream.py --epochs 1 --repeats 1 debug=smoke

A resumed kmt-train run builds its stream as the first run did (`kmt.data.pipeline.make_dataset`, shuffled, repeated,
seeded) and skips the batches of its finished epochs (`skip`), so it trains on the batches the uninterrupted run
would have. Skipping runs the pipeline over those batches: reading, resampling (`data.subword_sampling`), bucketing,
shuffling. Here each round pulls `--epochs` epochs of batches from a fresh stream of each kind, in alternating
order, and the table gives the median seconds an epoch: what a resume after N epochs adds to its first epoch is
about N times that. Nothing is asserted.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import (add_recipe_arguments, median, print_json, print_table, recipe_training_split,  # noqa: E402
                    require_positive)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3, help="epochs of batches pulled a round (default: 3)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds, each stream once a round (default: 3)")
    add_recipe_arguments(parser)
    args = parser.parse_args(argv)
    require_positive(parser, args, "epochs", "repeats")
    return args


def main(argv=None):
    args = parse_args(argv)  # before TensorFlow is imported (seconds): --help and usage errors answer at once
    import kmt  # noqa: F401  (before TensorFlow: its import keeps TensorFlow's start-up lines out of the output)
    from kmt.data.pipeline import count_batches, make_dataset, resample, subword_sampler

    cfg, vocabularies, train = recipe_training_split(args.experiment, args.overrides)
    max_length, alpha = cfg.model.max_length, cfg.data.subword_sampling
    epoch = resample(train, vocabularies, max_length, alpha, cfg.seed) if alpha else train  # as kmt-train sizes it
    steps = count_batches(epoch, max_length, cfg.data.max_tokens, cfg.data.batch_size, cfg.data.bucket_width,
                          repeated=True)
    streams = {"best segmentation": None}
    if alpha:
        streams[f"subword sampling (alpha {alpha:g})"] = subword_sampler(vocabularies, alpha, cfg.seed)
    print(f"{args.experiment}: {len(train):,} training pairs, {steps} batches an epoch", file=sys.stderr)

    seconds = {name: [] for name in streams}
    for round_ in range(args.repeats):
        for name in list(streams) if round_ % 2 == 0 else list(streams)[::-1]:
            dataset = make_dataset(train, max_length, cfg.data.max_tokens, cfg.data.batch_size, shuffle=True,
                                   seed=cfg.seed, repeat=True, bucket_width=cfg.data.bucket_width,
                                   resegment=streams[name])
            started = time.perf_counter()
            for _ in dataset.take(args.epochs * steps):
                pass
            seconds[name].append((time.perf_counter() - started) / args.epochs)
            print(f"round {round_ + 1}, {name}: {seconds[name][-1]:.2f} s an epoch", file=sys.stderr, flush=True)
    rows = [{"stream": name, "epochs": args.epochs * args.repeats, "seconds_per_epoch": median(values),
             "seconds_after_30_epochs": 30 * median(values), "seconds": values} for name, values in seconds.items()]
    print_table(rows, [("stream", "training stream"), ("epochs", "epochs pulled"),
                       ("seconds_per_epoch", "s an epoch (median)"),
                       ("seconds_after_30_epochs", "added to a resume after 30 epochs, s")])
    print_json("resume_stream", experiment=args.experiment, overrides=args.overrides, batches_per_epoch=steps,
               training_pairs=len(train), rows=rows)


if __name__ == "__main__":
    main()
