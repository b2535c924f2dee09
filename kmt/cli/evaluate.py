"""`kmt-evaluate EXPORT_DIR --source FILE --reference FILE`: translate a test set and score it.

Prints sacreBLEU BLEU and chrF on raw text with their signatures. With `--tokenized-reference` (for Multi30k,
`$KMT_DATA_DIR/multi30k/tok/test_2016_flickr.lc.norm.tok.de`) it also prints the lowercased, Moses-tokenized
BLEU that published Multi30k results use; the two conventions are not comparable. With `--compare`, it also tests
other systems against this one on the same sentences (sacreBLEU's paired bootstrap: each score's 95% confidence
interval, and the p-value of each difference). For a test set with no tokenized copy, `--tokenize-reference`
makes one from `--reference` the way Multi30k's were made (lowercased, punctuation normalized, Moses-tokenized).

Example:
    kmt-evaluate runs/multi30k/<time>/export --source $KMT_DATA_DIR/multi30k/test_2016_flickr.en \\
        --reference $KMT_DATA_DIR/multi30k/test_2016_flickr.de \\
        --tokenized-reference $KMT_DATA_DIR/multi30k/tok/test_2016_flickr.lc.norm.tok.de
    kmt-evaluate runs/a/export --source test.en --reference test.de --compare runs/b/export other_system.de
    kmt-evaluate RUN/export --source RUN/data/test.source.txt --reference RUN/data/test.target.txt \\
        --tokenize-reference --lang en
"""

import argparse
import json
from pathlib import Path

from kmt.cli import console_script
from kmt.cli.common import setup_logging
from kmt.cli.errors import exit_on_user_error
from kmt.data.sources import read_lines, read_parallel
from kmt.errors import DataError
from kmt.metrics import moses_languages, moses_tokenize


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("export_dir", help="a SavedModel written by kmt-train or kmt-export")
    parser.add_argument("--source", required=True, help="source sentences, one per line")
    parser.add_argument("--reference", required=True, help="reference translations, line-aligned with --source")
    tokenization = parser.add_mutually_exclusive_group()
    tokenization.add_argument("--tokenized-reference", help="lowercased Moses-tokenized references (Multi30k tok/)")
    tokenization.add_argument(
        "--tokenize-reference",
        action="store_true",
        help="also print tokenized BLEU, against --reference lowercased and Moses-tokenized "
        "here as Multi30k's tok/ files were made (for test sets with no such copy)",
    )
    tokenization.add_argument(
        "--tokenized",
        action="store_true",
        help="source, references and output are lowercased Moses-tokenized text (a model "
        "trained with data.tokenized=true): BLEU splits on spaces only, the published "
        "Multi30k way",
    )
    parser.add_argument(
        "--lang",
        help="the target language, whose Moses rules tokenize the output (and, with "
        "--tokenize-reference, the references) for tokenized BLEU (default: the "
        "suffix of --reference or --tokenized-reference that names a language, as "
        "test.de does)",
    )
    parser.add_argument("--hypotheses", help="also write the translations to this file")
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="SYSTEM",
        help="other systems to test against this one, each a SavedModel directory or a file of "
        "translations of --source, one per line (paired bootstrap, 1,000 resamples)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--verbose", action="store_true", help="log progress to stderr")
    return parser.parse_args(argv)


def moses_language(args):
    """The language whose Moses rules tokenize the output for tokenized BLEU: `--lang`, else the first
    file suffix that names a language Moses knows (`test.de`), else an error: rules of the wrong language (a
    `.txt` suffix, or a `--lang` Moses has no rules for) would split "don't" unlike the references do, and quietly
    lower the score."""
    if args.lang:
        known = moses_languages()
        if args.lang not in known:
            raise DataError(
                f"--lang {args.lang}: Moses has no tokenization rules for it (it knows {', '.join(sorted(known))})"
            )
        return args.lang
    for path in (args.reference, args.tokenized_reference):
        if path is None:
            continue
        suffix = Path(path).suffix.lstrip(".").lower()
        if suffix in moses_languages():
            return suffix
    named = " or ".join(str(path) for path in (args.reference, args.tokenized_reference) if path is not None)
    raise DataError(f"cannot tell the target language from {named}: pass --lang, e.g. --lang en")


@console_script
def main(argv=None):
    args = parse_args(argv)
    setup_logging(args.verbose)
    with exit_on_user_error():
        from kmt.api import evaluate, load

        test = read_parallel(args.source, args.reference)
        tokenized = read_lines(args.tokenized_reference) if args.tokenized_reference else None
        lang = None
        if tokenized is not None or args.tokenize_reference:
            lang = moses_language(args)
        if args.tokenize_reference:
            tokenized = moses_tokenize(test.target, lang)
        if tokenized is not None and len(tokenized) != len(test):
            raise DataError(
                f"{args.tokenized_reference} has {len(tokenized)} lines but {args.reference} has {len(test)}"
            )
        # Files of translations are read first: a mistake in one stops before any model loads.
        compare = {system: read_lines(system) for system in args.compare or [] if not Path(system).is_dir()}
        for system, lines in compare.items():
            if len(lines) != len(test):
                raise DataError(f"{system} has {len(lines)} lines but {args.source} has {len(test)}")
        translator = load(args.export_dir, batch_size=args.batch_size)
        compare = {
            system: compare[system] if system in compare else load(system, batch_size=args.batch_size)
            for system in args.compare or []
        }
        scores = evaluate(
            translator,
            test.source,
            test.target,
            tokenized_references=tokenized,
            lang=lang,
            compare=compare,
            tokenized=args.tokenized,
            name=args.export_dir,
        )
    hypotheses = scores.pop("translations")
    if args.hypotheses:
        Path(args.hypotheses).write_text("".join(h.replace("\n", " ") + "\n" for h in hypotheses), encoding="utf-8")
    if args.json:
        print(json.dumps(scores))
        return
    print(f"BLEU = {scores['bleu']:.2f}  ({scores['bleu_signature']}; hyp/ref length {scores['length_ratio']:.3f})")
    print(f"chrF = {scores['chrf']:.2f}  ({scores['chrf_signature']})")
    if tokenized is not None:
        print(
            f"tokenized BLEU = {scores['tokenized_bleu']:.2f}  (lowercased, Moses-tokenized; "
            f"{scores['tokenized_bleu_signature']})"
        )
    print(f"exact match = {100 * scores['exact_match']:.1f}%  ({len(test)} sentences)")
    if args.compare:
        print_comparison(scores["compare"], scores["compare_signatures"])


def print_comparison(results, signatures):
    """A table: one row per system, one column per metric, `score (mean +- 95% half-width, p = ...)`."""
    names = {"bleu": "BLEU", "chrf": "chrF", "tokenized_bleu": "tokenized BLEU"}
    metrics = list(signatures)
    width = max(len(system) for system in results)
    print(
        "\npaired bootstrap against the first system (95% confidence; p: how likely a difference this large is "
        "by chance)"
    )
    print((f"{'system':<{width}}  " + "  ".join(f"{names[m]:<32}" for m in metrics)).rstrip())
    for system, row in results.items():
        cells = []
        for metric in metrics:
            r = row[metric]
            p = "" if r["p"] is None else f", p = {r['p']:.3f}"
            cells.append(f"{r['score']:.2f} ({r['mean']:.1f} ± {r['ci']:.1f}{p})")
        print((f"{system:<{width}}  " + "  ".join(f"{cell:<32}" for cell in cells)).rstrip())
    for metric in metrics:
        print(f"{names[metric]}: {signatures[metric]}")


if __name__ == "__main__":
    main()
