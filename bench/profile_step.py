"""Where a training step's time goes: TensorFlow's profiler around a few `model.fit` steps of an experiment's model
on its real batches, summed by op type, by layer scope and by op.

    python bench/profile_step.py                                   # Multi30k En->De recipe, 10 profiled steps
    python bench/profile_step.py --steps 20 --top 40 trainer.precision=float32

The experiment's config is composed as kmt-train composes it (trailing arguments are Hydra overrides), its
vocabulary trained on the training split, and its model compiled as kmt-train compiles it. It takes the first
`--steps` batches of the shuffled training stream kmt-train makes (cached, so the input pipeline is not timed),
fits them once untimed (tracing), once timed without the profiler, and once timed under it. The trace's op events
(every kernel TensorFlow's executor ran, on either of its threads) are summed per step; ops run side by side on the
cores, so the sums add up to more than the wall time. Scopes are the op names' first two parts with layer numbers
folded (`transformer/decoder_layer_N`; `gradient_tape/...` is the backward pass). The trace itself goes to
`--logdir` (default: a temporary directory), which TensorBoard's profile plugin also reads.

Nothing is asserted: it prints figures to act on, such as `bench/results/` cites.
"""

import argparse
import collections
import os
import re
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import (  # noqa: E402
    add_recipe_arguments,
    fit_seconds,
    print_json,
    print_table,
    recipe_model,
    recipe_steps,
    recipe_training_split,
    require_positive,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="training steps profiled (default: 10)")
    parser.add_argument("--top", type=int, default=25, help="rows of each table (default: 25)")
    parser.add_argument(
        "--logdir",
        type=Path,
        help="where the profiler writes its trace (default: a temporary directory, removed afterwards)",
    )
    add_recipe_arguments(parser)
    args = parser.parse_args(argv)
    require_positive(parser, args, "steps", "top")
    return args


def op_times(logdir, steps):
    """`{op name: milliseconds a step}` of every op event in the profiler trace under `logdir`.

    TensorFlow names an op event `scope/.../name:OpType`; other events on the executor's threads (its own
    bookkeeping, `ExecutorState::Process`, which encloses op events) hold `::` or no `:` and are left out."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = sorted(Path(logdir).rglob("*.xplane.pb"))
    if not paths:
        raise SystemExit(f"error: the profiler wrote no trace under {logdir}")
    space = xplane_pb2.XSpace()
    space.ParseFromString(paths[-1].read_bytes())
    times = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" in name and "::" not in name:
                    times[name] += event.duration_ps / 1e9 / steps
    return times


def scope_of(op_name):
    """`StatefulPartitionedCall/gradient_tape/transformer_1/decoder_layer_2_1/.../MatMul:_MklMatMul` ->
    `gradient_tape/transformer/decoder_layer_N`: the first two parts under the step function's call (three for the
    backward pass), without Keras's `_1` suffixes and with layer numbers folded."""
    path = op_name.rsplit(":", 1)[0].split("/")
    if path[0] == "StatefulPartitionedCall" and len(path) > 1:
        path = path[1:]
    path = path[:3] if path[0] == "gradient_tape" else path[:2]
    return re.sub(r"layer_\d+", "layer_N", "/".join(re.sub(r"_\d+$", "", part) for part in path))


def summed(times, key):
    totals = collections.Counter()
    for name, ms in times.items():
        totals[key(name)] += ms
    return totals


def main(argv=None):
    args = parse_args(argv)  # before TensorFlow is imported (seconds): --help and usage errors answer at once
    import tensorflow as tf

    cfg, vocabularies, train = recipe_training_split(args.experiment, args.overrides)
    stream, tokens, total_steps = recipe_steps(cfg, train, args.steps)
    model = recipe_model(cfg, vocabularies, total_steps)
    fit_seconds(model, stream, args.steps)  # traces
    plain = fit_seconds(model, stream, args.steps)
    with tempfile.TemporaryDirectory() as scratch:
        logdir = str(args.logdir or scratch)
        tf.profiler.experimental.start(logdir)
        try:
            profiled = fit_seconds(model, stream, args.steps)
        finally:
            tf.profiler.experimental.stop()
        times = op_times(logdir, args.steps)

    total = sum(times.values())
    print(
        f"{args.experiment}: {model.count_params():,} parameters, {cfg.trainer.precision}, {args.steps} steps of "
        f"{tokens / args.steps:,.0f} target tokens; {1000 * plain / args.steps:,.0f} ms a step "
        f"({1000 * profiled / args.steps:,.0f} under the profiler); op time {total:,.0f} ms a step",
        file=sys.stderr,
    )
    tables = {}
    for title, key in (
        ("op type", lambda name: name.rsplit(":", 1)[1]),
        ("scope", scope_of),
        ("op", lambda name: name.split("/", 1)[-1]),
    ):
        rows = [
            {title: name, "ms/step": ms, "share": ms / total} for name, ms in summed(times, key).most_common(args.top)
        ]
        tables[title] = rows
        print_table(rows, [title, "ms/step", "share"])
    print_json(
        "profile_step",
        experiment=args.experiment,
        overrides=args.overrides,
        steps=args.steps,
        precision=cfg.trainer.precision,
        parameters=model.count_params(),
        target_tokens_per_step=tokens / args.steps,
        ms_per_step=1000 * plain / args.steps,
        profiled_ms_per_step=1000 * profiled / args.steps,
        op_ms_per_step=total,
        tables=tables,
    )


if __name__ == "__main__":
    main()
