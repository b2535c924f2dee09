"""What `model.fit` costs after its last step: the release of its tf.data iterator, with tf.data autotuning on (the
TensorFlow default) and off (what kmt's pipelines use), side by side in one process.

    python bench/fit_teardown.py                             # Multi30k En->De recipe, 5 rounds of 20-step fits
    python bench/fit_teardown.py --steps 10 --repeats 3 debug=smoke

With autotuning on, each tf.data iterator runs a model thread that re-tunes the pipeline on a doubling period (10 ms,
20 ms, ... up to a minute); releasing the iterator joins that thread, and in TensorFlow 2.21 the thread can sleep
out its period first. When it does, `fit` returns up to a period after its last step, with the CPU idle.

The experiment's config is composed as kmt-train composes it (trailing arguments are Hydra overrides). Each fit trains
the experiment's model for `--steps` steps on a fresh, seeded, shuffled, repeated training stream from
`text_pipeline.make_dataset` (the text pipeline kmt-train used before prepared data), autotuning on or off. One
untimed round traces; then each of `--repeats` rounds runs both settings, alternating which goes first. Per setting:
the steps' time (kmt's epoch clock, `common.fit_seconds`), the whole `fit` call, the seconds between the two (the
teardown), and how many fits took over a second to tear down. Nothing is asserted.
"""

import argparse
import os
import sys
import time

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

SETTINGS = ("on", "off")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="training steps per fit (default: 20)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds, one fit per setting each (default: 5)")
    add_recipe_arguments(parser)
    args = parser.parse_args(argv)
    require_positive(parser, args, "steps", "repeats")
    return args


def stream(train, cfg, seed, autotune):
    import tensorflow as tf

    from text_pipeline import make_dataset

    dataset = make_dataset(
        train,
        cfg.model.max_length,
        max_tokens=cfg.data.max_tokens,
        batch_size=cfg.data.batch_size,
        bucket_width=cfg.data.bucket_width,
        shuffle=True,
        seed=seed,
        repeat=True,
    )
    options = tf.data.Options()
    options.autotune.enabled = autotune == "on"
    return dataset.with_options(options)


def main(argv=None):
    args = parse_args(argv)  # before TensorFlow is imported (seconds): --help and usage errors answer at once
    cfg, vocabularies, train = recipe_training_split(args.experiment, args.overrides)
    model = recipe_model(cfg, vocabularies, 10 * args.steps * (args.repeats + 1))
    print(
        f"{args.experiment}: {len(train):,} training pairs; {model.count_params():,} parameters, "
        f"{cfg.trainer.precision}; {args.steps} steps a fit",
        file=sys.stderr,
    )

    fits = {setting: [] for setting in SETTINGS}
    for round_ in range(args.repeats + 1):  # round 0 traces and is not timed
        for setting in SETTINGS if round_ % 2 else SETTINGS[::-1]:
            started = time.perf_counter()
            steps = fit_seconds(model, stream(train, cfg, cfg.seed + round_, setting), args.steps)
            whole = time.perf_counter() - started
            if round_:
                fits[setting].append((steps, whole))
                print(
                    f"round {round_}, autotune {setting}: steps {steps:.1f} s, whole fit {whole:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
    rows = []
    for setting, timings in fits.items():
        teardowns = [whole - steps for steps, whole in timings]
        rows.append(
            {
                "autotune": setting,
                "fits": len(timings),
                "ms_per_step": 1000 * median([steps for steps, _ in timings]) / args.steps,
                "whole_fit_ms_per_step": 1000 * median([whole for _, whole in timings]) / args.steps,
                "teardown_seconds_median": median(teardowns),
                "teardown_seconds_max": max(teardowns),
                "stalled_fits": sum(seconds > 1.0 for seconds in teardowns),
                "teardown_seconds": teardowns,
            }
        )
    print_table(
        rows,
        [
            "autotune",
            "fits",
            ("ms_per_step", "steps: ms/step"),
            ("whole_fit_ms_per_step", "whole fit: ms/step"),
            ("teardown_seconds_median", "teardown s (median)"),
            ("teardown_seconds_max", "teardown s (max)"),
            ("stalled_fits", "fits with a teardown over 1 s"),
        ],
    )
    print_json(
        "fit_teardown",
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
