"""Word-alignment quality: the alignment error rate (AER) of a Transformer run's attention alignments against a
reference, for each decoder layer (its heads averaged) and for the run's own alignment (`model.alignment_layer`
and `model.alignment_heads`: a guided run's supervised head), beside other aligners' output on the same pairs.

    python bench/alignment.py RUN_DIR --source val.en --target val.de --reference val.gold
    python bench/alignment.py RUN_DIR GUIDED_RUN --source val.en --target val.de --reference val.gold \
        --aligner eflomal=val.eflomal

The reference is Pharaoh lines, one a pair, source word - target word from 0 over whitespace-split words: `i-j` a
sure link, `i?j` or `ipj` a possible one (the gold-standard conventions of Och and Ney, 2003, and of the RWTH
German-English set). With sure links S, possible links P (the sure ones included) and an alignment A,
AER = 1 - (|A & S| + |A & P|) / (|A| + |S|); precision is |A & P| / |A|, recall |A & S| / |S|. Against a reference
with no possible links (another aligner's output), 1 - AER is the F1 of the two.

Each run force-aligns the given pairs (`kmt.load(RUN_DIR).align`, its Keras model). `--aligner NAME=FILE` adds the
Pharaoh output of another aligner (eflomal, fast_align) for the same pairs as a row.
"""

import argparse
import os
import re
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import hardware, print_json, print_table  # noqa: E402  (bench/ is on sys.path)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="kmt-train run directories of Transformers")
    parser.add_argument("--source", required=True, help="source sentences, one a line")
    parser.add_argument("--target", required=True, help="their translations, line by line")
    parser.add_argument("--reference", required=True, help="reference alignments (Pharaoh, sure i-j, possible i?j)")
    parser.add_argument("--aligner", action="append", default=[], help="NAME=FILE: another aligner's Pharaoh output")
    parser.add_argument("--sentences", type=int, help="the first N pairs only (default: all)")
    return parser.parse_args(argv)


def read_reference(line):
    """A reference line as (sure, possible) sets of (i, j); possible holds the sure links too."""
    sure, possible = set(), set()
    for item in line.split():
        i, mark, j = re.fullmatch(r"(\d+)([-?p])(\d+)", item).groups()
        possible.add((int(i), int(j)))
        if mark == "-":
            sure.add((int(i), int(j)))
    return sure, possible


def scores(alignments, references):
    """AER, precision and recall of `alignments` (sets of (i, j)) against `references` ((sure, possible) pairs)."""
    found = sure = hits_sure = hits_possible = 0
    for links, (gold_sure, gold_possible) in zip(alignments, references):
        links = set(links)
        found, sure = found + len(links), sure + len(gold_sure)
        hits_sure += len(links & gold_sure)
        hits_possible += len(links & gold_possible)
    return {
        "aer": 1 - (hits_sure + hits_possible) / max(found + sure, 1),
        "precision": hits_possible / max(found, 1),
        "recall": hits_sure / max(sure, 1),
    }


def lines(path, count):
    return Path(path).read_text(encoding="utf-8").splitlines()[:count]


def main(argv=None):
    import kmt
    from kmt.inference.alignments import parse_pharaoh

    args = parse_args(argv)
    sources, targets = lines(args.source, args.sentences), lines(args.target, args.sentences)
    references = [read_reference(line) for line in lines(args.reference, args.sentences)]
    if not len(sources) == len(targets) == len(references):
        raise SystemExit(f"error: {len(sources)} sources, {len(targets)} targets and {len(references)} reference lines")
    rows = []
    for name, path in (item.split("=", 1) for item in args.aligner):
        alignments = [parse_pharaoh(line, path) for line in lines(path, args.sentences)]
        rows.append({"aligner": name, "layer": "", "heads": "", **scores(alignments, references)})
    for run in args.runs:
        translator = kmt.load(run)
        model = translator.model
        own = model.alignment_layer, model.alignment_heads
        own_index = model.alignment_layer_index()
        for layer, heads in [(layer, 0) for layer in range(len(model.decoder_layers))] + [(own_index, own[1])] * (
            own[1] > 0
        ):
            model.alignment_layer, model.alignment_heads = layer, heads
            is_own = (layer, heads) == (own_index, own[1])
            rows.append(
                {
                    "aligner": Path(run).name + (" (its alignments)" if is_own else ""),
                    "layer": layer,
                    "heads": f"first {heads}" if heads else "all",
                    **scores(translator.align(sources, targets), references),
                }
            )
        model.alignment_layer, model.alignment_heads = own
    print(f"{len(sources)} pairs, {hardware()}")
    print_table(rows, ["aligner", "layer", "heads", "aer", "precision", "recall"])
    print_json("alignment", pairs=len(sources), reference=args.reference, rows=rows)


if __name__ == "__main__":
    main()
