"""`kmt-align EXPORT_DIR --source S --target T`: word alignments of given sentence pairs (forced alignment), one
Pharaoh line per pair: `0-0 1-2 ...`, source word i - target word j, from 0, over whitespace-separated words (the
format of Marian's `--alignment hard`, fast_align and eflomal).

Each pair's target is forced through the model and read through its alignment attention (the cross-attention of
one decoder layer averaged over its heads, or the head a run trained with `data.train.alignments` supervised); each
target word is linked to the source word it attends to most. EXPORT_DIR is a SavedModel (a run's export/), a
CTranslate2 directory or a run directory of a Transformer; they give the same alignments for the same model.

Examples:
    kmt-align runs/multi30k/<time>/export --source test.en --target test.de --output test.align
    kmt-align runs/dates/<time>/ctranslate2 --source dates.txt --target dates.iso.txt
"""

import argparse
import contextlib
import sys

from kmt.cli import console_script
from kmt.cli.common import setup_logging
from kmt.cli.errors import exit_on_user_error, fail
from kmt.errors import KmtError


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-align", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("export_dir", help="a SavedModel (a run's export/), a CTranslate2 directory or a run directory")
    parser.add_argument("--source", required=True, help="source sentences, one a line")
    parser.add_argument("--target", required=True, help="their translations, line by line with --source")
    parser.add_argument("--output", default="-", help="file to write instead of stdout")
    parser.add_argument("--batch-size", type=int, default=64, help="pairs per batch (default: 64)")
    parser.add_argument("--verbose", action="store_true", help="log progress to stderr")
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error(f"--batch-size must be positive. Received: {args.batch_size}")
    return args


def read_text(path):
    """The lines of a UTF-8 file, without their line ends; one line naming the file when it cannot be read."""
    try:
        with open(path, "rb") as stream:
            return [raw.decode("utf-8", errors="replace").rstrip("\r\n") for raw in stream]
    except OSError as error:
        fail(f"cannot read {path}: {error.strerror}")


@console_script
def main(argv=None):
    args = parse_args(argv)
    setup_logging(args.verbose)
    sources, targets = read_text(args.source), read_text(args.target)
    if len(sources) != len(targets):
        fail(
            f"--target {args.target} has {len(targets)} lines and --source {args.source} {len(sources)}: "
            "give one translation a source line"
        )
    with exit_on_user_error():
        from kmt.inference.alignments import pharaoh
        from kmt.inference.loading import load_translator

        translator = load_translator(args.export_dir, batch_size=args.batch_size)
        alignments = translator.align(sources, targets, progress=args.verbose)
        try:
            out = contextlib.nullcontext(sys.stdout) if args.output == "-" else open(args.output, "w", encoding="utf-8")
        except OSError as error:
            raise KmtError(f"cannot write {args.output}: {error.strerror}") from None
        with out as stream:  # stdout stays open for whoever runs main() next
            stream.writelines(f"{pharaoh(alignment)}\n" for alignment in alignments)


if __name__ == "__main__":
    main()
