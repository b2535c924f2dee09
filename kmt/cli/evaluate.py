"""`kmt-evaluate EXPORT_DIR --source FILE --reference FILE`: translate a test set and score it.

Prints sacreBLEU BLEU and chrF on raw text with their signatures. With `--tokenized-reference` (for Multi30k,
`$KMT_DATA_DIR/multi30k/tok/test_2016_flickr.lc.norm.tok.de`) it also prints the lowercased, Moses-tokenized
BLEU that published Multi30k results use; the two conventions are not comparable.

Example:
    kmt-evaluate runs/multi30k/<time>/export --source $KMT_DATA_DIR/multi30k/test_2016_flickr.en \\
        --reference $KMT_DATA_DIR/multi30k/test_2016_flickr.de \\
        --tokenized-reference $KMT_DATA_DIR/multi30k/tok/test_2016_flickr.lc.norm.tok.de
"""

import argparse
import json
from pathlib import Path

from kmt.cli.common import load_export, setup_logging
from kmt.cli.errors import exit_on_user_error
from kmt.data.sources import read_lines, read_parallel
from kmt.errors import DataError
from kmt.scoring import tokenized_bleu, translation_scores
from kmt.translation import batch_fn, translate_lines


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("export_dir", help="a SavedModel written by kmt-train or kmt-export")
    parser.add_argument("--source", required=True, help="source sentences, one per line")
    parser.add_argument("--reference", required=True, help="reference translations, line-aligned with --source")
    tokenization = parser.add_mutually_exclusive_group()
    tokenization.add_argument("--tokenized-reference", help="lowercased Moses-tokenized references (Multi30k tok/)")
    tokenization.add_argument("--tokenized", action="store_true",
                              help="source, references and output are lowercased Moses-tokenized text (a model "
                                   "trained with data.tokenized=true): BLEU splits on spaces only, the published "
                                   "Multi30k way")
    parser.add_argument("--lang", help="target language for Moses tokenization of the output, with "
                                       "--tokenized-reference (default: the reference's suffix)")
    parser.add_argument("--hypotheses", help="also write the translations to this file")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--verbose", action="store_true", help="log progress to stderr")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    setup_logging(args.verbose)
    with exit_on_user_error():
        test = read_parallel(args.source, args.reference)
        tokenized = read_lines(args.tokenized_reference) if args.tokenized_reference else None
        if tokenized is not None and len(tokenized) != len(test):
            raise DataError(
                f"{args.tokenized_reference} has {len(tokenized)} lines but {args.reference} has {len(test)}"
            )
    translate = load_export(args.export_dir)
    hypotheses, _ = translate_lines(batch_fn(translate), test.source, args.batch_size, progress=args.verbose)
    if args.hypotheses:
        Path(args.hypotheses).write_text("".join(h.replace("\n", " ") + "\n" for h in hypotheses), encoding="utf-8")
    scores = translation_scores(hypotheses, test.target, args.tokenized) | {"sentences": len(test)}
    if tokenized is not None:
        lang = args.lang or Path(args.reference).suffix.lstrip(".") or "en"
        scores |= tokenized_bleu(hypotheses, tokenized, lang)
    if args.json:
        print(json.dumps(scores))
        return
    print(f"BLEU = {scores['bleu']:.2f}  ({scores['bleu_signature']}; hyp/ref length {scores['length_ratio']:.3f})")
    print(f"chrF = {scores['chrf']:.2f}  ({scores['chrf_signature']})")
    if tokenized is not None:
        print(f"tokenized BLEU = {scores['tokenized_bleu']:.2f}  (lowercased, Moses-tokenized; "
              f"{scores['tokenized_bleu_signature']})")
    print(f"exact match = {100 * scores['exact_match']:.1f}%  ({len(test)} sentences)")


if __name__ == "__main__":
    main()
