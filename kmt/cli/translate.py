"""`kmt-translate EXPORT_DIR`: translate sentences from stdin (one per line) to stdout (one per line).

Output line i always translates input line i: empty and whitespace-only lines give empty lines, over-long lines
are truncated to the model's maximum length. Search settings (beam size, length penalty) are those the model was
exported with (`kmt-export RUN_DIR --beam-size N` to change them).

Example:
    echo "Tuesday, March 5, 1996" | kmt-translate runs/dates/<time>/export
"""

import argparse
import sys
from pathlib import Path

from kmt.cli.common import load_export, setup_logging
from kmt.cli.errors import exit_on_user_error
from kmt.errors import KmtError
from kmt.translation import batch_fn, translate_lines


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-translate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("export_dir", help="a SavedModel written by kmt-train or kmt-export (a run's export/)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    parser.add_argument("--input", default="-", help="file to translate instead of stdin")
    parser.add_argument("--output", default="-", help="file to write instead of stdout")
    parser.add_argument("--scores", action="store_true", help="prefix each line with its score and a TAB")
    parser.add_argument("--attention-plots", metavar="DIR",
                        help="also save cross-attention heatmaps (PNG, one per sentence, every layer and head) of "
                             "the first --attention-limit input lines into DIR; needs the run directory around "
                             "EXPORT_DIR (its model.keras and tokenizer/)")
    parser.add_argument("--attention-limit", type=int, default=10, help="sentences to plot (default: 10)")
    parser.add_argument("--verbose", action="store_true", help="log progress to stderr")
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error(f"--batch-size must be positive. Received: {args.batch_size}")
    return args


def read_input(path):
    try:
        stream = sys.stdin.buffer if path == "-" else open(path, "rb")
        with stream:
            data = stream.read()
    except OSError as error:
        from kmt.cli.errors import fail

        fail(f"cannot read {path}: {error.strerror}")
    text = data.decode("utf-8", errors="replace")  # a stray bad byte becomes U+FFFD rather than stopping the job
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def main(argv=None):
    args = parse_args(argv)
    setup_logging(args.verbose)
    translate = load_export(args.export_dir)
    lines = read_input(args.input)
    translations, scores = translate_lines(batch_fn(translate), lines, args.batch_size, progress=args.verbose)
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    with out:
        for text, score in zip(translations, scores):
            text = text.replace("\n", " ")  # one line out per line in
            out.write(f"{score:.4f}\t{text}\n" if args.scores else f"{text}\n")
    if args.attention_plots:
        plot_attention(Path(args.export_dir).resolve().parent, lines[: args.attention_limit], args.attention_plots)


def plot_attention(run_dir, sentences, directory):
    """Heatmaps from the run's Keras model (the SavedModel does not expose attention weights)."""
    with exit_on_user_error():
        if not (run_dir / "model.keras").is_file() or not (run_dir / "tokenizer").is_dir():
            raise KmtError(f"--attention-plots needs {run_dir / 'model.keras'} and {run_dir / 'tokenizer'}")
        import keras

        import kmt  # noqa: F401  (registers kmt's layers for loading)
        from kmt.tokenizer import Vocabularies
        from kmt.visualize import save_attention_plots

        model = keras.saving.load_model(run_dir / "model.keras", compile=False)
        paths = save_attention_plots(model, Vocabularies.load(run_dir / "tokenizer"), sentences, directory)
        print(f"wrote {len(paths)} attention plots to {directory}", file=sys.stderr)


if __name__ == "__main__":
    main()
