"""What a config change costs a training step: an experiment's model and variants of it, side by side in one process,
on the experiment's real batches.

    python bench/step_variants.py --variant act:model.activation_dropout=0.1    # the recipe before c4d7c5d
    python bench/step_variants.py --variant fp32:trainer.precision=float32 --variant wide:model.intermediate_dim=2048

The base is the experiment's config as kmt-train composes it (trailing arguments are Hydra overrides, and apply to
every variant); each `--variant NAME:KEY=VALUE,...` changes model, optimizer or trainer settings of the base (not
data settings: every model trains on the base's batches). Each model is built and compiled as kmt-train builds and
compiles it, in its own precision. The first `--steps` batches of the shuffled training stream kmt-train makes are
cached, so the input pipeline is not timed. After one untimed fit each (tracing), every round fits each model once,
rotating the order, timed as kmt-train times an epoch (`common.fit_seconds`). Figures are medians over rounds; the
ratio is each model's step time over the base's, so what a change costs (above 1) or saves (below 1). Steps do not
change between variants here, so the ratio is also the change in an epoch's training time. Nothing is asserted.
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

BASE = "base"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--variant",
        action="append",
        required=True,
        metavar="NAME:KEY=VALUE,...",
        help="a variant of the base config: its name, then dotted overrides separated by commas (repeatable)",
    )
    parser.add_argument("--steps", type=int, default=20, help="training steps timed per model and round (default: 20)")
    parser.add_argument("--repeats", type=int, default=6, help="timed rounds (default: 6)")
    add_recipe_arguments(parser)
    args = parser.parse_args(argv)
    require_positive(parser, args, "steps", "repeats")
    names = [spec.partition(":")[0] for spec in args.variant]
    if not all(names) or len(set(names)) < len(names) or BASE in names:
        parser.error(f"--variant names must be non-empty, different, and not {BASE!r}. Received: {names}")
    return args


def variant_configs(base, specs):
    """`{name: config}`: `base` first, then each `NAME:KEY=VALUE,...` spec merged onto it and validated as kmt-train
    validates its config. A spec that changes data settings, or a bad key or value, ends the bench in one line."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from kmt.config import validate
    from kmt.errors import ConfigError

    configs = {BASE: base}
    for spec in specs:
        name, _, overrides = spec.partition(":")
        try:
            cfg = OmegaConf.merge(base, OmegaConf.from_dotlist([item for item in overrides.split(",") if item]))
            validate(cfg)
        except (OmegaConfBaseException, ConfigError) as error:
            sys.exit(f"error: --variant {spec}: {str(error).splitlines()[0]}")
        if cfg.data != base.data:
            sys.exit(f"error: --variant {spec}: changes data settings; every variant trains on the base's batches")
        configs[name] = cfg
    return configs


def main(argv=None):
    args = parse_args(argv)  # before TensorFlow is imported (seconds): --help and usage errors answer at once
    cfg, vocabularies, train = recipe_training_split(args.experiment, args.overrides)
    configs = variant_configs(cfg, args.variant)
    stream, tokens, total_steps = recipe_steps(cfg, train, args.steps)
    models = {name: recipe_model(config, vocabularies, total_steps) for name, config in configs.items()}
    print(
        f"{args.experiment}: {len(models)} models, {args.steps} steps of {tokens / args.steps:,.0f} target tokens a "
        f"model and round",
        file=sys.stderr,
    )
    seconds = fits_side_by_side(models, stream, args.steps, args.repeats)
    rows = []
    for (name, times), spec in zip(seconds.items(), [""] + [spec.partition(":")[2] for spec in args.variant]):
        step = median(times) / args.steps
        rows.append(
            {
                "variant": name,
                "overrides": spec,
                "parameters": models[name].count_params(),
                "precision": configs[name].trainer.precision,
                "ms_per_step": 1000 * step,
                "tokens_per_second": tokens / args.steps / step,
                "ms_per_step_rounds": [1000 * t / args.steps for t in times],
            }
        )
    for row in rows:
        row["step_vs_base"] = row["ms_per_step"] / rows[0]["ms_per_step"]
    print_table(
        rows,
        [
            "variant",
            "overrides",
            "parameters",
            "precision",
            ("ms_per_step", "ms/step"),
            ("tokens_per_second", "target tok/s"),
            ("step_vs_base", "step / base step"),
        ],
    )
    print_json(
        "step_variants",
        experiment=args.experiment,
        overrides=args.overrides,
        steps=args.steps,
        repeats=args.repeats,
        rows=rows,
    )


if __name__ == "__main__":
    main()
