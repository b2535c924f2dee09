"""What kmt's loss and metrics cost a training step, against the textbook `keras.ops` way of writing them, side by
side in one process on an experiment's model and real batches.

    python bench/loss_speed.py                                   # Multi30k En->De recipe, 20 steps x 6 rounds
    python bench/loss_speed.py --steps 10 --repeats 4 optim.label_smoothing=0.2

Both models are the experiment's, compiled as kmt-train compiles them, and differ only in the loss and metric
objects (`kmt.losses`), which compute the same values:

- **kmt**: the label-smoothed cross-entropy as `-sum(target * log_softmax(logits))` over the smoothed target
  distribution; the perplexity's `-log p(y)` by a gather on flattened positions; accuracy from `top_k(logits, 1)`.
- **textbook** (kmt's own until 2026-11-28): `(1 - eps) * -log p(y) + eps * mean(-log p)`, with `-log p(y)` picked
  by `take_along_axis`, whose gradient TensorFlow scatters into a `(B, T, V)` zero tensor (`UnsortedSegmentSum`,
  `bench/profile_step.py`); accuracy from `argmax`, which Keras's TensorFlow backend precedes with four passes
  that set -0.0 apart from 0.0.

Each takes the first `--steps` batches of the shuffled training stream kmt-train makes (cached, so the input
pipeline is not timed; `common.recipe_steps`). After one untimed fit each (tracing), every round fits each model
once, alternating which goes first (`common.fits_side_by_side`), timed as kmt-train times an epoch
(`common.fit_seconds`). Figures are medians over rounds; the ratio is the textbook step's time over kmt's.
Nothing is asserted.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import (  # noqa: E402
    add_recipe_arguments,
    fits_side_by_side,
    median,
    print_json,
    print_table,
    recipe_model,
    recipe_steps,
    recipe_training_split,
    require_positive,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="training steps timed per model and round (default: 20)")
    parser.add_argument("--repeats", type=int, default=6, help="timed rounds (default: 6)")
    add_recipe_arguments(parser)
    args = parser.parse_args(argv)
    require_positive(parser, args, "steps", "repeats")
    return args


def textbook_losses(label_smoothing):
    """The loss and metrics written the textbook way: kmt's classes with their per-token values computed as kmt
    computed them before 2026-11-28."""
    from keras import ops

    from kmt.losses import MaskedAccuracy, MaskedCrossEntropy, MaskedPerplexity, _real_tokens

    def log_probs_and_nll(y_true, y_pred):
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
        return log_probs, -ops.squeeze(ops.take_along_axis(log_probs, y_true[..., None], axis=-1), axis=-1)

    class Loss(MaskedCrossEntropy):
        def call(self, y_true, y_pred):
            y_true = ops.cast(y_true, "int32")
            log_probs, nll = log_probs_and_nll(y_true, y_pred)
            per_token = (1.0 - self.label_smoothing) * nll + self.label_smoothing * -ops.mean(log_probs, axis=-1)
            weights = _real_tokens(y_true, self.pad_id)
            return ops.sum(per_token * weights) / ops.maximum(ops.sum(weights), 1.0)

    class Accuracy(MaskedAccuracy):
        def token_values(self, y_true, y_pred):
            return ops.cast(ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), y_true), "float32")

    class Perplexity(MaskedPerplexity):
        def token_values(self, y_true, y_pred):
            return log_probs_and_nll(y_true, y_pred)[1]

    return Loss(label_smoothing=label_smoothing), [Accuracy(), Perplexity()]


def main(argv=None):
    args = parse_args(argv)  # before TensorFlow is imported (seconds): --help and usage errors answer at once
    cfg, vocabularies, train = recipe_training_split(args.experiment, args.overrides)
    stream, tokens, total_steps = recipe_steps(cfg, train, args.steps)
    models = {"kmt": recipe_model(cfg, vocabularies, total_steps)}
    textbook = recipe_model(cfg, vocabularies, total_steps)
    loss, metrics = textbook_losses(cfg.optim.label_smoothing)
    textbook.compile(optimizer=textbook.optimizer, loss=loss, metrics=metrics)
    models["textbook"] = textbook
    print(
        f"{args.experiment}: {models['kmt'].count_params():,} parameters, {cfg.trainer.precision}, {args.steps} "
        f"steps of {tokens / args.steps:,.0f} target tokens a model and round",
        file=sys.stderr,
    )
    seconds = fits_side_by_side(models, stream, args.steps, args.repeats)
    rows = []
    for name, times in seconds.items():
        step = median(times) / args.steps
        rows.append(
            {
                "loss": name,
                "ms_per_step": 1000 * step,
                "tokens_per_second": tokens / args.steps / step,
                "ms_per_step_rounds": [1000 * t / args.steps for t in times],
            }
        )
    for row in rows:
        row["textbook_over_this"] = rows[1]["ms_per_step"] / row["ms_per_step"]
    print_table(
        rows,
        [
            ("loss", "loss and metrics"),
            ("ms_per_step", "ms/step"),
            ("tokens_per_second", "target tok/s"),
            ("textbook_over_this", "textbook step / this step"),
        ],
    )
    print_json(
        "loss_speed",
        experiment=args.experiment,
        overrides=args.overrides,
        steps=args.steps,
        repeats=args.repeats,
        precision=cfg.trainer.precision,
        parameters=models["kmt"].count_params(),
        rows=rows,
    )


if __name__ == "__main__":
    main()
