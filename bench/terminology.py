"""Terminology two ways, on the same terms: a plain model with constrained decoding against a model trained with
the terminology transform (`data.terminology`, Dinu et al., 2019) that takes the terms inline.

    python bench/terminology.py glossary --source train.en --target train.de --alignments train.fwd --out terms.tsv
    python bench/terminology.py compare PLAIN_RUN TERMS_RUN --glossary terms.tsv --source test.en --target test.de

`glossary` derives a word glossary from a word-aligned training corpus (Pharaoh links, `eflomal-align`'s output):
each source word aligned at least `--min-count` times, not among the `--skip` most frequent words of either side,
with the target word it is aligned to most, where that word takes at least `--min-share` of its links (punctuation
stripped, case kept).

`compare` finds, in each test sentence, the glossary's source terms whose target term its reference uses (Dinu et
al.'s test set: a term the reference translates otherwise is no test of the term), then translates every sentence
three ways through the runs' SavedModels: the plain run as it is, the plain run with those target terms as
constraints (`translate_constrained`), and the terms run with them inline (`kmt.Glossary.annotate`). Reported: term
usage (the share of the test's terms whose target term is in the translation, whole words), sacreBLEU over every
sentence and over those with terms, and sentences a second at `--batch-size` (medians over `--repeats`, side by
side in a rotating order). Both runs are exported alike for it (`--beam-size`, `--length-penalty`); a SavedModel
directory given in place of a run is taken as it was exported.
"""

import argparse
import collections
import os
import re
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import hardware, median, print_json, print_table, timed  # noqa: E402  (bench/ is on sys.path)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    glossary = commands.add_parser("glossary", help="a word glossary from a word-aligned corpus")
    glossary.add_argument("--source", required=True, help="source sentences, one a line")
    glossary.add_argument("--target", required=True, help="their translations, line by line")
    glossary.add_argument("--alignments", required=True, help="Pharaoh links over whitespace-split words")
    glossary.add_argument("--out", required=True, help="the glossary TSV to write")
    glossary.add_argument("--min-count", type=int, default=20, help="least links of a source word (default: 20)")
    glossary.add_argument("--min-share", type=float, default=0.5, help="least share of its best word (default: 0.5)")
    glossary.add_argument("--skip", type=int, default=150, help="most frequent words left out (default: 150)")
    compare = commands.add_parser("compare", help="constrained decoding against inline terms")
    compare.add_argument("plain_run", help="a kmt-train run trained without the transform (or its SavedModel)")
    compare.add_argument("terms_run", help="a kmt-train run trained with data.terminology (or its SavedModel)")
    compare.add_argument("--glossary", required=True, help="the glossary TSV")
    compare.add_argument("--source", required=True, help="test sentences")
    compare.add_argument("--target", required=True, help="their references")
    compare.add_argument("--batch-size", type=int, default=64, help="sentences a call (default: 64)")
    compare.add_argument("--repeats", type=int, default=1, help="timed passes (default: 1)")
    compare.add_argument("--beam-size", type=int, default=5, help="both exports' beam (default: 5)")
    compare.add_argument("--length-penalty", type=float, default=0.6, help="both exports' GNMT alpha (default: 0.6)")
    return parser.parse_args(argv)


WORD = re.compile(r"^\W+|\W+$")


def word(token):
    """A whitespace-split token without the punctuation around it ("" for punctuation alone)."""
    return WORD.sub("", token)


def derive_glossary(sources, targets, links, min_count, min_share, skip):
    """`(source word, target word)` pairs of the aligned corpus (see the module's docstring), most linked first."""
    pairs, frequency = collections.Counter(), [collections.Counter(), collections.Counter()]
    for source, target, line in zip(sources, targets, links):
        source, target = [word(t) for t in source.split()], [word(t) for t in target.split()]
        frequency[0].update(source)
        frequency[1].update(target)
        for link in line.split():
            i, j = map(int, link.replace("?", "-").split("-"))
            if source[i].isalpha() and target[j].isalpha():
                pairs[source[i], target[j]] += 1
    frequent = [{w for w, _ in counts.most_common(skip)} for counts in frequency]
    by_source = collections.defaultdict(collections.Counter)
    for (source, target), count in pairs.items():
        by_source[source][target] += count
    terms = []
    for source, counts in by_source.items():
        total = sum(counts.values())
        target, count = counts.most_common(1)[0]
        if total >= min_count and count >= min_share * total and source not in frequent[0]:
            if target not in frequent[1]:
                terms.append((count, source, target))
    return [(source, target) for _, source, target in sorted(terms, reverse=True)]


def lines_of(path):
    return Path(path).read_text(encoding="utf-8").splitlines()


def glossary_command(args):
    terms = derive_glossary(
        lines_of(args.source),
        lines_of(args.target),
        lines_of(args.alignments),
        args.min_count,
        args.min_share,
        args.skip,
    )
    Path(args.out).write_text("".join(f"{s}\t{t}\n" for s, t in terms), encoding="utf-8")
    print(f"wrote {len(terms)} terms to {args.out}: {', '.join(f'{s}={t}' for s, t in terms[:8])}, ...")


def used(term, text):
    words = r"\s+".join(map(re.escape, term.split()))
    return re.search(rf"(?<!\w){words}(?!\w)", text) is not None


def compare_command(args):
    import sacrebleu
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SentencePiece ops)

    from kmt.inference.glossary import Glossary, annotated

    glossary = Glossary.load(args.glossary)
    sources, references = lines_of(args.source), lines_of(args.target)
    # Each sentence's test terms: found in its source, their target term in its reference.
    tests = [[(s, e, t) for s, e, t in glossary.matches(src) if used(t, ref)] for src, ref in zip(sources, references)]
    held = [i for i, terms in enumerate(tests) if terms]

    import kmt

    search = {"beam_size": args.beam_size, "length_penalty": args.length_penalty}
    with tempfile.TemporaryDirectory() as directory:  # runs exported with the same search; SavedModels as they are
        models = []
        for name in ("plain_run", "terms_run"):
            path = Path(getattr(args, name))
            if not (path / "saved_model.pb").is_file():
                kmt.export(path, output=Path(directory) / name, search=search)
                path = Path(directory) / name
            models.append(tf.saved_model.load(str(path)))
        plain, terms_model = models
    if not hasattr(terms_model, "inline_terms"):
        raise SystemExit(f"error: {args.terms_run} was not trained with data.terminology")
    width = max(len(terms) for terms in tests) or 1
    phrases = [[t for _, _, t in terms] + [""] * (width - len(terms)) for terms in tests]
    inline = [annotated(src, terms) for src, terms in zip(sources, tests)]
    systems = {
        "plain": lambda rows: plain.signatures["translate"](text=tf.constant([sources[i] for i in rows])),
        "plain + constraints": lambda rows: plain.signatures["translate_constrained"](
            text=tf.constant([sources[i] for i in rows]), constraints=tf.constant([phrases[i] for i in rows])
        ),
        "terms inline": lambda rows: terms_model.signatures["translate"](text=tf.constant([inline[i] for i in rows])),
    }
    batches = [list(range(i, min(i + args.batch_size, len(sources)))) for i in range(0, len(sources), args.batch_size)]
    outputs = {name: [""] * len(sources) for name in systems}
    seconds = collections.defaultdict(float)  # (system, repeat) -> its seconds over every batch
    for run in systems.values():
        run(batches[0])  # warm up
    for repeat in range(args.repeats):
        for batch in batches:
            order = list(systems)[repeat % len(systems) :] + list(systems)[: repeat % len(systems)]
            for name in order:
                result, elapsed = timed(systems[name], batch)
                seconds[name, repeat] += elapsed
                for i, text in zip(batch, result["translation"].numpy()):
                    outputs[name][i] = text.decode("utf-8")
    asked = sum(len(terms) for terms in tests)
    rows = []
    base = median([seconds["plain", r] for r in range(args.repeats)])
    for name in systems:
        hyps = outputs[name]
        hits = sum(used(t, hyps[i]) for i, terms in enumerate(tests) for _, _, t in terms)
        total = median([seconds[name, r] for r in range(args.repeats)])
        rows.append(
            {
                "system": name,
                "term_usage": round(100 * hits / max(asked, 1), 1),
                "bleu": round(sacrebleu.corpus_bleu(hyps, [references]).score, 2),
                "bleu_with_terms": round(
                    sacrebleu.corpus_bleu([hyps[i] for i in held], [[references[i] for i in held]]).score, 2
                ),
                "sentences_per_second": round(len(sources) / total, 2),
                "time": round(total / base, 2),
            }
        )
    print(f"{asked} terms in {len(held)} of {len(sources)} sentences, batches of {args.batch_size}; {hardware()}")
    columns = [
        ("system", "system"),
        ("term_usage", "term usage %"),
        ("bleu", "BLEU"),
        ("bleu_with_terms", "BLEU, sentences with terms"),
        ("sentences_per_second", "sentences/s"),
        ("time", "time vs plain"),
    ]
    print_table(rows, columns)
    print_json(
        "terminology",
        terms=asked,
        sentences_with_terms=len(held),
        sentences=len(sources),
        batch_size=args.batch_size,
        repeats=args.repeats,
        rows=rows,
    )


def main(argv=None):
    args = parse_args(argv)
    glossary_command(args) if args.command == "glossary" else compare_command(args)


if __name__ == "__main__":
    main()
