"""`kmt-plot RUN_DIR [RUN_DIR ...]`: learning curves of one or more kmt-train runs, as one PNG.

Panels against the epoch: training loss (solid) and validation loss (dashed); their perplexity without label smoothing
(`ppl`, log scale), so runs with different optim.label_smoothing compare; validation BLEU when a run logged it
(`trainer.val_bleu=true`), validation token accuracy when a run did not; the learning rate. Reads each run's
`logs/history.csv`, so it works while a run is still training. kmt-train draws the same plot into `logs/curves.png`
when a run ends, and a sweep into `summary.png`.

Examples:
    kmt-plot runs/multi30k_en_de/<time>                               # -> runs/multi30k_en_de/<time>/logs/curves.png
    kmt-plot runs/multi30k_en_de/<time> runs/multi30k_en_de/<other> --output compare.png
"""

import argparse
import sys
from pathlib import Path

from kmt.cli.common import setup_logging
from kmt.cli.errors import exit_on_user_error


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-plot", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="kmt-train run directories")
    parser.add_argument("--output", help="the PNG to write (default: RUN_DIR/logs/curves.png for one run, "
                                         "curves.png for several)")
    parser.add_argument("--title", default="", help="a title above the panels")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging()
    from kmt.curves import plot_curves, read_history

    with exit_on_user_error():
        histories = {run.rstrip("/"): read_history(run) for run in args.run_dirs}
        default = Path(args.run_dirs[0]) / "logs" / "curves.png" if len(args.run_dirs) == 1 else Path("curves.png")
        print(plot_curves(histories, args.output or default, title=args.title))


if __name__ == "__main__":
    main()
