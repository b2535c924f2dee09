"""`kmt-average RUN_DIR --last N`: average a run's last N epoch checkpoints and export the result.

Checkpoint averaging (Vaswani et al., 2017, section 6.1) usually gains a little BLEU for free. The average is saved
as `RUN_DIR/checkpoints/average_last{N}.weights.h5` and exported to `RUN_DIR/export_avg{N}` (or `--output`).
Training can do the same at its end with `trainer.average_last=N`.

Example:
    kmt-average runs/multi30k/<time> --last 10 --beam-size 5
"""

import argparse
import sys

from kmt.cli import export


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-average", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", help="a kmt-train run directory")
    parser.add_argument("--last", type=int, required=True, metavar="N", help="how many epoch checkpoints to average")
    parser.add_argument("--output", help="where to write the SavedModel (default: RUN_DIR/export_avg{N})")
    parser.add_argument("--beam-size", type=int, help="beam size baked into the export (1: greedy)")
    parser.add_argument("--length-penalty", type=float, help="GNMT length penalty alpha baked into the export")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    forwarded = [args.run_dir, "--average", str(args.last),
                 "--output", args.output or f"{args.run_dir.rstrip('/')}/export_avg{args.last}"]
    if args.beam_size is not None:
        forwarded += ["--beam-size", str(args.beam_size)]
    if args.length_penalty is not None:
        forwarded += ["--length-penalty", str(args.length_penalty)]
    export.main(forwarded)


if __name__ == "__main__":
    main()
