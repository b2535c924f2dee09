"""`kmt-score EXPORT_DIR --source FILE --target FILE`: the model's log-probability of each given translation.

EXPORT_DIR is a SavedModel export, a CTranslate2 directory or a run directory (`kmt.inference.loading`).
Forced decoding: for each pair of lines, the model predicts the target's tokens and its end token from
the source and the target prefix, and the sum of their log-probabilities (natural log) is written, one line per
pair (fairseq-generate's --score-reference, OpenNMT-tf's `score` run type). Uses: filtering a noisy corpus,
reranking `kmt-translate --nbest` lists with another model (a target-to-source model scores the source given each
hypothesis), or a test set's perplexity, which is printed to stderr at the end:
    scored N pairs, T tokens: <mean log-probability> per token, perplexity <exp(-mean)>

Scores are the model's own: no length penalty. `--per-token` divides each by its count of tokens (the target's
and the end token). An empty target is scored (the probability that the translation is empty), but a pair with an
empty source, or with a side longer than the model's maximum length (which cannot be scored whole), is not: its
line reads `nan`, every other pair is still scored, and the command exits 1 naming those lines.

This is not `kmt-evaluate`, which translates the source and scores the translations against references with BLEU.

Example:
    kmt-score runs/multi30k/<time>/export --source test.en --target test.de > test.scores
"""

import argparse
import math
import sys

from kmt.cli import console_script
from kmt.cli.common import setup_logging
from kmt.cli.errors import exit_on_user_error, fail
from kmt.data.sources import read_parallel
from kmt.inference.loading import load_translator


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-score", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "export_dir",
        help="a SavedModel written by kmt-train or kmt-export (a run's export/), a "
        "CTranslate2 directory (kmt-export RUN_DIR --format ctranslate2) or a run "
        "directory",
    )
    parser.add_argument("--source", required=True, help="source sentences, one per line")
    parser.add_argument("--target", required=True, help="translations to score, line-aligned with --source")
    parser.add_argument("--output", default="-", help="file to write the scores to instead of stdout")
    parser.add_argument(
        "--per-token", action="store_true", help="divide each score by its count of tokens (fairseq's normalized score)"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="pairs per batch (default: 64)")
    parser.add_argument("--verbose", action="store_true", help="log progress to stderr")
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error(f"--batch-size must be positive. Received: {args.batch_size}")
    return args


@console_script
def main(argv=None):
    args = parse_args(argv)
    setup_logging(args.verbose)
    with exit_on_user_error():
        pairs = read_parallel(args.source, args.target)
        translator = load_translator(args.export_dir, batch_size=args.batch_size)
        results = translator.score(pairs.source, pairs.target, progress=args.verbose)
    try:
        out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    except OSError as error:
        fail(f"cannot write {args.output}: {error.strerror}")
    with out:
        for log_probability, tokens in results:
            out.write(f"{log_probability / tokens if args.per_token else log_probability:.4f}\n")
    scored = [(p, n) for p, n in results if not math.isnan(p)]
    total, tokens = sum(p for p, _ in scored), sum(n for _, n in scored)
    if tokens:
        print(
            f"scored {len(scored)} pairs, {tokens:,} tokens: {total / tokens:.3f} per token, perplexity "
            f"{math.exp(-total / tokens):.2f}",
            file=sys.stderr,
        )
    unscored = [number for number, (p, _) in enumerate(results, start=1) if math.isnan(p)]
    if unscored:
        empty = [n for n in unscored if not pairs.source[n - 1].strip()]
        too_long = [n for n in unscored if pairs.source[n - 1].strip()]
        reasons = [
            f"{what} (lines {_numbers(lines)})"
            for what, lines in (("an empty source", empty), ("a side longer than the model's maximum length", too_long))
            if lines
        ]
        fail(
            f"{len(unscored)} of {len(results)} pairs were not scored, their lines read nan: "
            f"{'; '.join(reasons)}; the other scores were written",
            exit_code=1,
        )


def _numbers(numbers, shown=10):
    return ", ".join(map(str, numbers[:shown])) + (", ..." if len(numbers) > shown else "")


if __name__ == "__main__":
    main()
