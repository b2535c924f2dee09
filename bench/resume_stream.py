"""What a resumed run pays to go on with its training stream where the finished epochs left it: the seconds to pass
over an epoch of batches, with the experiment's subword sampling and without it, side by side in one process.

    python bench/resume_stream.py                     # Multi30k En->De recipe, 3 epochs of batches, 3 rounds
    python bench/resume_stream.py --epochs 1 --repeats 1 debug=smoke

A resumed kmt-train run builds its stream as the first run did (`kmt.training.prepare.training_stream`: shuffled,
repeated, seeded) and skips the batches of its finished epochs, so it trains on the batches the uninterrupted run
would have. Skipping runs the pipeline over those batches: reading, resampling (`data.subword_sampling`),
bucketing, shuffling. Here each round pulls `--epochs` epochs of batches from a fresh stream of each kind, in
alternating order, and the table gives the median seconds an epoch: what a resume after N epochs adds to its first
epoch is about N times that. Nothing is asserted.
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
    from omegaconf import OmegaConf

    from kmt.training.prepare import training_stream

    cfg, vocabularies, train = recipe_training_split(args.experiment, args.overrides)
    configs = {"best segmentation": OmegaConf.merge(cfg, {"data": {"subword_sampling": 0.0}})}
    if cfg.data.subword_sampling:
        configs[f"subword sampling (alpha {cfg.data.subword_sampling:g})"] = cfg
    print(f"{args.experiment}: {len(train):,} training pairs", file=sys.stderr)

    seconds, batches = {name: [] for name in configs}, {}
    for round_ in range(args.repeats):
        for name in list(configs) if round_ % 2 == 0 else list(configs)[::-1]:
            dataset, _, steps = training_stream(configs[name], train, vocabularies)  # afresh: from its first batch
            batches[name] = steps
            started = time.perf_counter()
            for _ in dataset.take(args.epochs * steps):
                pass
            seconds[name].append((time.perf_counter() - started) / args.epochs)
            print(f"round {round_ + 1}, {name}: {seconds[name][-1]:.2f} s an epoch of {steps} batches", file=sys.stderr,
                  flush=True)
    rows = [{"stream": name, "batches_per_epoch": batches[name], "epochs": args.epochs * args.repeats,
             "seconds_per_epoch": median(values), "seconds_after_30_epochs": 30 * median(values), "seconds": values}
            for name, values in seconds.items()]
    print_table(rows, [("stream", "training stream"), ("batches_per_epoch", "batches an epoch"),
                       ("epochs", "epochs pulled"),
                       ("seconds_per_epoch", "s an epoch (median)"),
                       ("seconds_after_30_epochs", "added to a resume after 30 epochs, s")])
    print_json("resume_stream", experiment=args.experiment, overrides=args.overrides, training_pairs=len(train),
               rows=rows)


if __name__ == "__main__":
    main()
