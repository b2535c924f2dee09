"""Decoding speed through the exported SavedModel: greedy and beam 4, each with and without the key/value cache.

    python bench/decode_speed.py runs/multi30k_en_de/<time>
    python bench/decode_speed.py RUN_DIR --source my.en --sentences 200 --batch-sizes 1,64 --repeats 3

The run's model (its last epoch checkpoint) is exported four times with `kmt.inference.translator.Translator`, the
search settings taken from the run's `decode` section except the beam size and the cache; each SavedModel is reloaded
with `tf.saved_model.load` and its `translate` signature is what gets timed, after one warm-up call per batch size.
At batch size b the N sentences are cut into ceil(N / b) calls of exactly b sentences (wrapping around to the first
sentences to fill the last call). Within each repeat the variants take turns call by call, in a rotating order,
so that all four see the same state of the machine.

Figures: sentences/s and tokens/s are medians over repeats; p50 and p95 are per-call latencies pooled over repeats
(at batch 1, the latency of one sentence). Output tokens are counted by re-tokenizing each translation with the
run's target vocabulary: the signature returns text, not ids, so this is the canonical SentencePiece segmentation of
the output, which matches the ids the decoder emitted except where it emitted a non-canonical segmentation, and it
leaves out the end token. The cached and uncached variants must give the same translations; the JSON line says
whether they did.

Sentences come from `--source`, or else from the run's own validation split (`kmt.data.load_corpus` on its
`config.yaml`, never downloading). Multi30k val sentences are short; raise `--min-source-tokens` until the reported
mean output length is near the length you care about (the issue's target: about 30 tokens).
"""

import argparse
import itertools
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import hardware, median, percentile, print_json, print_table, timed  # noqa: E402  (bench/ is on sys.path)

BEAM_SIZE = 4
VARIANTS = {  # name -> (beam size, use_cache)
    "greedy cached": (1, True),
    "greedy uncached": (1, False),
    f"beam{BEAM_SIZE} cached": (BEAM_SIZE, True),
    f"beam{BEAM_SIZE} uncached": (BEAM_SIZE, False),
}
SEARCH_KEYS = ("length_penalty", "max_length_a", "max_length_b")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a kmt-train run directory (holding config.yaml, tokenizer/, checkpoints/)")
    parser.add_argument("--source", help="source sentences, one per line (default: the run's validation split)")
    parser.add_argument("--sentences", type=int, default=200, help="sentences to translate (default: 200)")
    parser.add_argument("--min-source-tokens", type=int, default=0,
                        help="use only sentences of at least this many source subword tokens (default: 0)")
    parser.add_argument("--batch-sizes", default="1,64", help="comma-separated batch sizes (default: 1,64)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the sentences (default: 3)")
    parser.add_argument("--out", help="where to write the four SavedModels (default: a temporary directory)")
    args = parser.parse_args(argv)
    try:
        args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        parser.error(f"--batch-sizes must be comma-separated integers. Received: {args.batch_sizes!r}")
    for name in ("sentences", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1. Received: {getattr(args, name)}")
    if min(args.batch_sizes) < 1:
        parser.error(f"--batch-sizes must be at least 1. Received: {args.batch_sizes}")
    return args


def pick_sentences(args, cfg, vocabularies):
    """The first `--sentences` lines of `--source` or the run's val split with enough source tokens."""
    from kmt.data import load_corpus
    from kmt.data.sources import read_lines
    from kmt.errors import DataError

    if args.source:
        lines = read_lines(args.source)
    else:
        cfg.data.download = False
        try:
            lines = load_corpus(cfg.data)["val"].source
        except DataError as error:
            raise DataError(f"cannot read the run's val split ({error}); pass --source") from None
    lines = [line for line in lines if line.strip()]
    lengths = vocabularies.source.tokenize(lines).row_lengths().numpy()
    chosen = [(line, n) for line, n in zip(lines, lengths) if n >= args.min_source_tokens][: args.sentences]
    if not chosen:
        raise DataError(f"no sentence has at least {args.min_source_tokens} source tokens; lower --min-source-tokens")
    return [line for line, _ in chosen], float(sum(n for _, n in chosen) / len(chosen))


def export_variants(cfg, vocabularies, model, directory):
    """Exports one SavedModel per variant under `directory` and reloads each: name -> `translate` signature."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the graph uses)

    from kmt.inference.export import export_translator
    from kmt.inference.translator import Translator

    decode = cfg.get("decode") or {}
    search = {key: decode[key] for key in SEARCH_KEYS if key in decode}
    signatures = {}
    for name, (beam_size, use_cache) in VARIANTS.items():
        path = Path(directory) / name.replace(" ", "_")
        export_translator(Translator(model, vocabularies, beam_size=beam_size, use_cache=use_cache, **search), path)
        signatures[name] = tf.saved_model.load(str(path)).signatures["translate"]
    return signatures, search


def calls(sentences, batch_size):
    """ceil(N / b) lists of exactly `batch_size` sentences, wrapping around to fill the last."""
    count = -(-len(sentences) // batch_size)
    cycle = itertools.cycle(sentences)
    return [list(itertools.islice(cycle, batch_size)) for _ in range(count)]


def measure(signatures, sentences, batch_sizes, repeats, count_tokens):
    """Times every variant at every batch size, alternating variants call by call. Returns
    `({(name, b): {"seconds": [per repeat], "latencies": [per call], "tokens": int, "translations": [...]}}`."""
    import tensorflow as tf

    names = list(signatures)
    results = {(name, b): {"seconds": [], "latencies": [], "translations": []} for name in names for b in batch_sizes}
    for batch_size in batch_sizes:
        batches = [tf.constant(batch) for batch in calls(sentences, batch_size)]
        for name in names:  # warm-up: the first call of a loaded function pays for graph optimisation
            signatures[name](text=batches[0])
        for repeat in range(repeats):
            totals = dict.fromkeys(names, 0.0)
            for i, batch in enumerate(batches):
                shift = (repeat * len(batches) + i) % len(names)
                for name in names[shift:] + names[:shift]:
                    outputs, seconds = timed(signatures[name], text=batch)
                    totals[name] += seconds
                    results[name, batch_size]["latencies"].append(seconds)
                    if repeat == 0:
                        results[name, batch_size]["translations"] += outputs["translation"].numpy().tolist()
            for name in names:
                results[name, batch_size]["seconds"].append(totals[name])
        for name in names:
            results[name, batch_size]["tokens"] = count_tokens(results[name, batch_size]["translations"])
    return results


def summarize(results, batch_sizes):
    """Table rows, cached/uncached speedups and whether cached and uncached outputs agree."""
    rows = []
    for (name, batch_size), result in results.items():
        total = len(result["translations"])
        rows.append({
            "variant": name,
            "batch": batch_size,
            "sentences_per_second": total / median(result["seconds"]),
            "tokens_per_second": result["tokens"] / median(result["seconds"]),
            "p50_ms": 1000 * percentile(result["latencies"], 50),
            "p95_ms": 1000 * percentile(result["latencies"], 95),
            "mean_output_tokens": result["tokens"] / total,
        })
    by_key = {(row["variant"], row["batch"]): row for row in rows}
    speedups, outputs_match = [], {}
    for search in ("greedy", f"beam{BEAM_SIZE}"):
        for batch_size in batch_sizes:
            cached, uncached = by_key[f"{search} cached", batch_size], by_key[f"{search} uncached", batch_size]
            speedups.append({
                "search": search,
                "batch": batch_size,
                "cached_over_uncached": cached["sentences_per_second"] / uncached["sentences_per_second"],
            })
            same = (results[f"{search} cached", batch_size]["translations"]
                    == results[f"{search} uncached", batch_size]["translations"])
            outputs_match[search] = outputs_match.get(search, True) and same
    return rows, speedups, outputs_match


def main(argv=None):
    args = parse_args(argv)
    from kmt.checkpoints import load_run_model
    from kmt.cli.errors import exit_on_user_error, quiet_tensorflow

    quiet_tensorflow()
    with exit_on_user_error():
        cfg, vocabularies, model = load_run_model(args.run_dir)
        sentences, mean_source_tokens = pick_sentences(args, cfg, vocabularies)

    def count_tokens(translations):
        return int(vocabularies.target.tokenize(translations).row_lengths().numpy().sum())

    with tempfile.TemporaryDirectory(prefix="decode_speed_") as scratch:
        signatures, search = export_variants(cfg, vocabularies, model, args.out or scratch)
        results = measure(signatures, sentences, args.batch_sizes, args.repeats, count_tokens)
    rows, speedups, outputs_match = summarize(results, args.batch_sizes)

    print(f"{len(sentences)} sentences (mean {mean_source_tokens:.1f} source tokens), {args.repeats} repeats, "
          f"{hardware()}; search {search}")
    print_table(rows, [("variant", "variant"), ("batch", "batch"), ("sentences_per_second", "sentences/s"),
                       ("tokens_per_second", "tokens/s"), ("p50_ms", "p50 ms"), ("p95_ms", "p95 ms"),
                       ("mean_output_tokens", "mean output tokens")])
    print()
    print_table(speedups, [("search", "search"), ("batch", "batch"), ("cached_over_uncached", "cached / uncached")])
    print()
    print_json(
        "decode_speed",
        run_dir=str(args.run_dir),
        source=args.source or "val split",
        sentences=len(sentences),
        mean_source_tokens=mean_source_tokens,
        repeats=args.repeats,
        search=dict(search),
        rows=rows,
        speedups=speedups,
        outputs_match=outputs_match,
    )


if __name__ == "__main__":
    main()
