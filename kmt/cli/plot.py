"""`kmt-plot RUN_DIR [RUN_DIR ...]`: learning curves of one or more kmt-train runs, as one PNG.
`kmt-plot positions [--length 60] [--depth 32]`: the sinusoidal position encoding, as curves and a heatmap.

Panels against the epoch: training loss (solid) and validation loss (dashed); their perplexity without label smoothing
(`ppl`, log scale), so runs with different optim.label_smoothing compare; validation BLEU when a run logged it
(`trainer.val_bleu=true`), validation token accuracy when a run did not; the learning rate. Reads each run's
`logs/history.csv`, so it works while a run is still training. kmt-train draws the same plot into `logs/curves.png`
when a run ends, and a sweep into `summary.png`.

Examples:
    kmt-plot runs/multi30k_en_de/<time>                               # -> runs/multi30k_en_de/<time>/logs/curves.png
    kmt-plot runs/multi30k_en_de/<time> runs/multi30k_en_de/<other> --output compare.png
    kmt-plot RUN_A RUN_B --label "dropout 0.2" --label "dropout 0.1" --from-epoch 10   # named, late epochs zoomed
    kmt-plot positions --length 100 --depth 64 --output positions.png   # default: positions.png

`positions` as the first argument draws the encoding; a run directory of that name is `./positions`.
"""

import argparse
import sys
from pathlib import Path

from kmt.cli import console_script
from kmt.cli.common import setup_logging
from kmt.cli.errors import exit_on_user_error
from kmt.errors import KmtError


@console_script
def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["positions"]:
        return positions(argv[1:])
    parser = argparse.ArgumentParser(
        prog="kmt-plot", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="kmt-train run directories")
    parser.add_argument(
        "--output", help="the PNG to write (default: RUN_DIR/logs/curves.png for one run, curves.png for several)"
    )
    parser.add_argument(
        "--title",
        help="a title above the panels (default: for one run, the title kmt-train gives "
        "its curves.png, the config's name and the run directory's)",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="NAME",
        help="the legend's name for a run, once per RUN_DIR in their order (default: the directory)",
    )
    parser.add_argument(
        "--from-epoch",
        type=int,
        default=1,
        metavar="N",
        help="draw epochs N onwards only, the y axes scaled to them, so that late differences between "
        "runs show (default: 1, every epoch)",
    )
    args = parser.parse_args(argv)
    if args.from_epoch < 1:
        parser.error(f"--from-epoch must be positive. Received: {args.from_epoch}")
    setup_logging()
    from kmt.plots import plot_curves, read_history, run_title
    from kmt.run_dir import RunDir

    with exit_on_user_error():
        labels = args.label or [run.rstrip("/") for run in args.run_dirs]
        if len(labels) != len(args.run_dirs):
            raise KmtError(
                f"{len(args.run_dirs)} run directories need {len(args.run_dirs)} --label names, one each "
                f"in their order; got {len(args.label)}"
            )
        if len(set(labels)) != len(labels):
            twice = next(label for label in labels if labels.count(label) > 1)
            raise KmtError(f"two runs are both named {twice!r}; give each run its own --label")
        histories = {label: read_history(run) for label, run in zip(labels, args.run_dirs)}
        default = RunDir(args.run_dirs[0]).curves if len(args.run_dirs) == 1 else Path("curves.png")
        title = args.title
        if title is None:  # kmt-train's title, so that redrawing a run's curves.png keeps it
            title = run_title(args.run_dirs[0]) if len(args.run_dirs) == 1 else ""
        print(plot_curves(histories, args.output or default, title=title, first_epoch=args.from_epoch))


def positions(argv):
    """`kmt-plot positions`: kmt's sinusoidal table (`kmt.plots.plot_positions`) drawn into one PNG."""
    parser = argparse.ArgumentParser(
        prog="kmt-plot positions",
        description="The paper's sinusoidal position encoding (Vaswani et al., 2017, "
        "section 3.5) as kmt computes it: a few columns against the position, and the whole table as a heatmap.",
    )
    parser.add_argument("--length", type=int, default=60, help="positions 0 .. LENGTH - 1 (default: %(default)s)")
    parser.add_argument(
        "--depth",
        type=int,
        default=32,
        help="features d_model, even: a sine and a cosine per wavelength (default: %(default)s)",
    )
    parser.add_argument("--output", default="positions.png", help="the PNG to write (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.length < 1:
        parser.error(f"--length must be positive. Received: {args.length}")
    if args.depth < 2 or args.depth % 2:
        parser.error(f"--depth must be even and positive, a sine and a cosine per wavelength. Received: {args.depth}")
    setup_logging()
    from kmt.plots import plot_positions

    print(plot_positions(args.length, args.depth, args.output))


if __name__ == "__main__":
    main()
