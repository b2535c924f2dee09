"""What a resumed run pays to go on with its training stream where the finished epochs left it: the seconds to skip
an epoch of batches, with the experiment's subword sampling and without it, side by side in one process.

    python bench/resume_stream.py                     # Multi30k En->De recipe, 3 epochs of batches, 3 rounds
    python bench/resume_stream.py --epochs 1 --repeats 1 debug=smoke

A resumed kmt-train run builds its stream as the first run did (`kmt.data.batches.Batcher` over the prepared train
split: seeded, shuffled, repeated) and skips the batches of its finished epochs (`keras_data(batcher, skip=N)`), so
it trains on the batches the uninterrupted run would have. Skipping replays the batcher's plan over those batches:
indices only, no padding, but with `data.subword_sampling` each skipped pass draws its segmentation afresh (the
`sentencepiece` library over the pass's text). The recipe's data is prepared once (`kmt.data.prepared.prepare_data`,
into a temporary directory, as kmt-train prepares raw text into its run); each round builds a fresh Batcher of each
kind as `kmt.training.prepare` does (untimed: a fresh run builds it too), in alternating order, and times its plan:
to its first batch (a fresh run's wait too: the plan fills its shuffle buffer of 256 batches first), then over
`--epochs` epochs of batches more, which is what `Batcher.stream(skip=...)` adds before a resumed run's first batch.
The table gives the median seconds an epoch: what a resume after N epochs adds to its first epoch is about N times
that. Nothing is asserted.
"""

import argparse
import itertools
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import add_recipe_arguments, median, print_json, print_table, recipe_config, require_positive  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3, help="epochs of batches skipped a round (default: 3)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds, each stream once a round (default: 3)")
    add_recipe_arguments(parser)
    args = parser.parse_args(argv)
    require_positive(parser, args, "epochs", "repeats")
    return args


def main(argv=None):
    args = parse_args(argv)  # before Keras is imported (seconds): --help and usage errors answer at once
    import keras
    from omegaconf import OmegaConf

    from kmt import backend
    from kmt.data.batches import Batcher
    from kmt.data.prepared import prepare_data
    from kmt.training.prepare import subword_sampling

    cfg = recipe_config(args.experiment, args.overrides)
    keras.utils.set_random_seed(cfg.seed)  # as kmt-train, before the tokenizer
    with tempfile.TemporaryDirectory(prefix="kmt_bench_resume_") as workdir:
        prepared = prepare_data(cfg.data, cfg.model, workdir, OmegaConf.to_yaml(cfg, resolve=True))
        train, vocabularies = prepared.split("train"), prepared.vocabularies
        fixed_shapes = cfg.data.pad_to_bucket or backend.resolve_jit_compile(cfg.trainer.jit_compile)
        samplings = {"best segmentation": None}
        if cfg.data.subword_sampling:
            samplings[f"subword sampling (alpha {cfg.data.subword_sampling:g})"] = subword_sampling(
                cfg.data.subword_sampling, train, vocabularies
            )
        print(f"{args.experiment}: {len(train):,} training pairs", file=sys.stderr)

        def batcher(sampling):
            return Batcher(
                train,
                cfg.model.max_length,
                cfg.data.max_tokens,
                cfg.data.batch_size,
                cfg.data.bucket_width,
                fixed_shapes,
                seed=cfg.seed,
                sampling=sampling,
            )

        def skip_seconds(sampling):
            """`(fill, skip, steps)`: the seconds a fresh Batcher's plan takes to its first batch (filling its shuffle
            buffer), then to pass over `--epochs` epochs of `steps` batches more (what `stream(skip=...)` adds)."""
            stream = batcher(sampling)  # afresh (untimed: a fresh run builds it too), no pass drawn but its first
            accumulation = cfg.optim.gradient_accumulation_steps
            steps = max(1, stream.steps_per_pass // accumulation) * accumulation  # kmt-train's epoch
            started = time.perf_counter()
            plan = stream.plan()
            next(plan)
            filled = time.perf_counter()
            for _ in itertools.islice(plan, args.epochs * steps):
                pass
            return filled - started, time.perf_counter() - filled, steps

        seconds, batches, fill = {name: [] for name in samplings}, {}, {name: [] for name in samplings}
        for round_ in range(args.repeats):
            for name in list(samplings) if round_ % 2 == 0 else list(samplings)[::-1]:
                filled, skipped, batches[name] = skip_seconds(samplings[name])
                fill[name].append(filled)
                seconds[name].append(skipped / args.epochs)
                print(
                    f"round {round_ + 1}, {name}: {seconds[name][-1]:.3f} s to skip an epoch of {batches[name]} "
                    f"batches ({filled:.3f} s to the first batch)",
                    file=sys.stderr,
                    flush=True,
                )
    rows = [
        {
            "stream": name,
            "batches_per_epoch": batches[name],
            "epochs": args.epochs * args.repeats,
            "first_batch_seconds": median(fill[name]),
            "seconds_per_epoch": median(values),
            "seconds_after_30_epochs": 30 * median(values),
            "seconds": values,
        }
        for name, values in seconds.items()
    ]
    print_table(
        rows,
        [
            ("stream", "training stream"),
            ("batches_per_epoch", "batches an epoch"),
            ("epochs", "epochs skipped"),
            ("first_batch_seconds", "s to the first batch (any run)"),
            ("seconds_per_epoch", "s an epoch (median)"),
            ("seconds_after_30_epochs", "added to a resume after 30 epochs, s"),
        ],
    )
    print_json(
        "resume_stream", experiment=args.experiment, overrides=args.overrides, training_pairs=len(train), rows=rows
    )


if __name__ == "__main__":
    main()
