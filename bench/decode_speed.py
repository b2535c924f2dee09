"""Decoding speed through the exported SavedModel: greedy and beam 4, each with and without the key/value cache; or,
with --ctranslate2, the SavedModel against CTranslate2 float32 and int8 (greedy and beam 5), with tokenized BLEU.

    python bench/decode_speed.py runs/multi30k_en_de/<time>
    python bench/decode_speed.py RUN_DIR --source my.en --sentences 200 --batch-sizes 1,64 --repeats 3
    python bench/decode_speed.py RUN_DIR --ctranslate2 --source $KMT_DATA_DIR/multi30k/test_2016_flickr.en \
        --tokenized-reference $KMT_DATA_DIR/multi30k/tok/test_2016_flickr.lc.norm.tok.de

The run's model (its last epoch checkpoint) is exported four times with `kmt.inference.translator.TranslatorModule`, the
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

With --ctranslate2 the run's model is also written as two CTranslate2 directories (`kmt.inference.ctranslate2`: float32,
and int8 weights run as int8), decoded by `CT2Translator` as kmt-translate decodes (a one-thread worker a core), the
SavedModels' search settings and the same alpha (CTranslate2 divides by length^alpha, the SavedModel by GNMT's ((5 +
length) / 6)^alpha: beam outputs may differ). Every variant gets the same list of str and returns str. With
--tokenized-reference (aligned with the sentences, before any --min-source-tokens selection) each variant's translations
at the largest batch size are scored with tokenized BLEU (`kmt.metrics.tokenized_bleu`).

With --transformers CHECKPOINT_DIR (the MarianMT checkpoint a `kmt-import` run came from; needs `pip install -e
".[bench]"`) the run's SavedModel (cached) is timed against transformers' `generate` on that checkpoint (PyTorch,
eager, as many threads as there are cores), greedy and beam 4, both searches held to `--max-tokens` output tokens
(random weights seldom end a sentence), with no length penalty and the pad token never generated (as OPUS-MT's
generation config has it); transformers' outputs are counted with the run's vocabulary too.

    python bench/decode_speed.py RUN --transformers CKPT --source S --sentences 64 --max-tokens 40
    python bench/opus_mt.py --transformers --vocab-size 15000 --max-tokens 40   # makes CKPT and RUN, then the above

With --against OTHER_RUN_DIR the two runs' models (say a `model=lstm` run and a Transformer) are timed side by side
instead: each exported once greedy and once with beam 4 (cached, each run's own search settings), every output
counted with the first run's target vocabulary so that tokens/s share one yardstick; the ratios are the other run's
over the first's.

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

from common import cores, hardware, median, percentile, print_json, print_table, timed  # noqa: E402  (bench/ is on sys.path)

BEAM_SIZE = 4
VARIANTS = {  # name -> (beam size, use_cache)
    "greedy cached": (1, True),
    "greedy uncached": (1, False),
    f"beam{BEAM_SIZE} cached": (BEAM_SIZE, True),
    f"beam{BEAM_SIZE} uncached": (BEAM_SIZE, False),
}
CT2_BEAM_SIZE = 5
CT2_VARIANTS = {  # name -> (engine, beam size): the SavedModel (cached), or CTranslate2 with weights of a type
    f"{engine} {search}": (engine, beam_size)
    for search, beam_size in [("greedy", 1), (f"beam{CT2_BEAM_SIZE}", CT2_BEAM_SIZE)]
    for engine in ("SavedModel", "CT2 float32", "CT2 int8")
}
SEARCH_KEYS = ("length_penalty", "max_length_a", "max_length_b")
REFERENCE_VARIANTS = {  # name -> (engine, beam size): kmt's SavedModel (cached) or transformers' generate
    f"{engine} {search}": (engine, beam_size)
    for search, beam_size in [("greedy", 1), (f"beam{BEAM_SIZE}", BEAM_SIZE)]
    for engine in ("SavedModel", "transformers")
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a kmt-train run directory (holding config.yaml, tokenizer/, checkpoints/)")
    parser.add_argument("--source", help="source sentences, one per line (default: the run's validation split)")
    parser.add_argument("--sentences", type=int, default=200, help="sentences to translate (default: 200)")
    parser.add_argument(
        "--min-source-tokens",
        type=int,
        default=0,
        help="use only sentences of at least this many source subword tokens (default: 0)",
    )
    parser.add_argument("--batch-sizes", default="1,64", help="comma-separated batch sizes (default: 1,64)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the sentences (default: 3)")
    parser.add_argument("--out", help="where to write the exports (default: a temporary directory)")
    parser.add_argument(
        "--ctranslate2",
        action="store_true",
        help="compare the SavedModel with CTranslate2 float32 and int8, greedy and beam 5",
    )
    parser.add_argument(
        "--against",
        metavar="OTHER_RUN_DIR",
        help="time this run's model against another run's (same source language), greedy and beam 4",
    )
    parser.add_argument(
        "--transformers",
        metavar="CHECKPOINT_DIR",
        help="time the SavedModel against transformers' generate on the MarianMT checkpoint the run was imported "
        "from, greedy and beam 4",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        help="with --transformers: most output tokens a sentence, for both (default: the run's decode limits)",
    )
    parser.add_argument(
        "--tokenized-reference",
        help="tokenized, lowercased references aligned with the sentences (Multi30k's tok/ files): "
        "report each variant's tokenized BLEU",
    )
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
    if sum(map(bool, (args.against, args.ctranslate2, args.transformers))) > 1:
        parser.error("--against, --ctranslate2 and --transformers are different comparisons: choose one")
    if args.max_tokens is not None and not (args.transformers and args.max_tokens >= 1):
        parser.error("--max-tokens goes with --transformers and must be at least 1")
    return args


def pick_sentences(args, cfg, vocabularies):
    """The first `--sentences` lines of `--source` or the run's val split with enough source tokens, their mean
    source length, and their line numbers."""
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
    numbered = [(i, line) for i, line in enumerate(lines) if line.strip()]
    lengths = vocabularies.source.tokenize([line for _, line in numbered]).row_lengths().numpy()
    chosen = [(i, line, n) for (i, line), n in zip(numbered, lengths) if n >= args.min_source_tokens]
    chosen = chosen[: args.sentences]
    if not chosen:
        raise DataError(f"no sentence has at least {args.min_source_tokens} source tokens; lower --min-source-tokens")
    return [line for _, line, _ in chosen], float(sum(n for _, _, n in chosen) / len(chosen)), [i for i, _, _ in chosen]


def saved_model(model, vocabularies, search, path, beam_size, use_cache=True):
    """Exports a SavedModel to `path`, reloads it: `translate(list of str) -> list of str` through its signature."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the graph uses)

    from kmt.inference.export import export_translator
    from kmt.inference.settings import SearchSettings
    from kmt.inference.translator import TranslatorModule

    settings = SearchSettings.of(beam_size=beam_size, **search)
    export_translator(TranslatorModule(model, vocabularies, settings, use_cache=use_cache), path)
    signature = tf.saved_model.load(str(path)).signatures["translate"]
    return lambda batch: [t.decode("utf-8") for t in signature(text=tf.constant(batch))["translation"].numpy()]


def search_settings(cfg):
    """The run's search settings (its `decode` section) that every variant keeps: length penalty, maximum length."""
    decode = cfg.get("decode") or {}
    return {key: decode[key] for key in SEARCH_KEYS if key in decode}


def export_variants(cfg, vocabularies, model, directory, ctranslate2=False):
    """Exports every variant under `directory` and loads it: name -> `translate(list of str) -> list of str`."""
    search = search_settings(cfg)
    if not ctranslate2:
        return {
            name: saved_model(model, vocabularies, search, Path(directory) / name.replace(" ", "_"), *variant)
            for name, variant in VARIANTS.items()
        }, search
    from kmt.inference.ctranslate2 import CT2Translator, export_ctranslate2
    from kmt.inference.settings import SearchSettings

    translators = {}
    for weights in ("float32", "int8"):
        path = Path(directory) / f"ctranslate2_{weights}"
        quantization = None if weights == "float32" else weights
        export_ctranslate2(model, vocabularies, SearchSettings.of(beam_size=1, **search), path, quantization)
        translators[f"CT2 {weights}"] = CT2Translator(path, compute_type=weights)
    variants = {}
    for name, (engine, beam_size) in CT2_VARIANTS.items():
        if engine == "SavedModel":
            variants[name] = saved_model(model, vocabularies, search, Path(directory) / f"beam{beam_size}", beam_size)
        else:
            variants[name] = lambda batch, translator=translators[engine], beam_size=beam_size: translator.translate(
                batch, settings=translator.settings.replace(beam_size=beam_size)
            )
    return variants, search


def reference_variants(cfg, vocabularies, model, directory, checkpoint, max_tokens):
    """`--transformers`: the run's SavedModel (cached) and transformers' `generate` on `checkpoint`, greedy and beam
    `BEAM_SIZE`, both held to `max_tokens` output tokens when given: `(name -> translate, search settings)`."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    search = search_settings(cfg)
    if max_tokens:
        search = {**search, "max_length_a": 0.0, "max_length_b": max_tokens}
    torch.set_num_threads(cores())
    tokenizer = MarianTokenizer.from_pretrained(checkpoint)
    reference = MarianMTModel.from_pretrained(checkpoint).eval()
    # kmt's beam search divides by GNMT's length penalty, generate by length: with alpha 0 both compare raw sums
    search["length_penalty"] = 0.0

    def generate(batch, beam_size):
        inputs = tokenizer(batch, padding=True, truncation=True, return_tensors="pt")
        options = dict(num_beams=beam_size, do_sample=False)
        if beam_size > 1:
            options.update(length_penalty=0.0, early_stopping=True)
        if max_tokens:  # without a forced end token at the limit: kmt's searches stop there without one
            options.update(max_new_tokens=max_tokens, max_length=None, forced_eos_token_id=None)
        with torch.inference_mode():
            ids = reference.generate(**inputs, **options)
        return tokenizer.batch_decode(ids, skip_special_tokens=True)

    variants = {}
    for name, (engine, beam_size) in REFERENCE_VARIANTS.items():
        if engine == "SavedModel":
            variants[name] = saved_model(model, vocabularies, search, Path(directory) / f"beam{beam_size}", beam_size)
        else:
            variants[name] = lambda batch, beam_size=beam_size: generate(batch, beam_size)
    return variants, search


def labels(cfg, other_cfg):
    """The two runs' names in the tables: their architectures, or "first" and "other" when those are the same."""
    names = [(c.get("model") or {}).get("arch", "transformer") for c in (cfg, other_cfg)]
    return names if names[0] != names[1] else ["first", "other"]


def run_variants(runs, directory):
    """`--against`: for each `(label, cfg, vocabularies, model)` of `runs`, greedy and beam `BEAM_SIZE` SavedModels
    (cached) with the run's own search settings: `(name -> translate, label -> search settings)`."""
    variants, searches = {}, {}
    for label, cfg, vocabularies, model in runs:
        search = searches[label] = search_settings(cfg)
        for search_name, beam_size in (("greedy", 1), (f"beam{BEAM_SIZE}", BEAM_SIZE)):
            name = f"{label} {search_name}"
            variants[name] = saved_model(
                model, vocabularies, search, Path(directory) / name.replace(" ", "_"), beam_size
            )
    return variants, searches


def calls(sentences, batch_size):
    """ceil(N / b) lists of exactly `batch_size` sentences, wrapping around to fill the last."""
    count = -(-len(sentences) // batch_size)
    cycle = itertools.cycle(sentences)
    return [list(itertools.islice(cycle, batch_size)) for _ in range(count)]


def measure(variants, sentences, batch_sizes, repeats, count_tokens):
    """Times every variant at every batch size, alternating variants call by call. Returns
    `({(name, b): {"seconds": [per repeat], "latencies": [per call], "tokens": int, "translations": [...]}}`."""
    names = list(variants)
    results = {(name, b): {"seconds": [], "latencies": [], "translations": []} for name in names for b in batch_sizes}
    for batch_size in batch_sizes:
        batches = calls(sentences, batch_size)
        for name in names:  # warm-up: the first call of a loaded function pays for graph optimisation
            variants[name](batches[0])
        for repeat in range(repeats):
            totals = dict.fromkeys(names, 0.0)
            for i, batch in enumerate(batches):
                shift = (repeat * len(batches) + i) % len(names)
                for name in names[shift:] + names[:shift]:
                    outputs, seconds = timed(variants[name], batch)
                    totals[name] += seconds
                    results[name, batch_size]["latencies"].append(seconds)
                    if repeat == 0:
                        results[name, batch_size]["translations"] += outputs
            for name in names:
                results[name, batch_size]["seconds"].append(totals[name])
        for name in names:
            results[name, batch_size]["tokens"] = count_tokens(results[name, batch_size]["translations"])
    return results


def summarize(results, batch_sizes, pairs):
    """Table rows, and for each `(variant, baseline)` of `pairs` at each batch size the speedups and whether their
    translations agree."""
    rows = []
    for (name, batch_size), result in results.items():
        total = len(result["translations"])
        rows.append(
            {
                "variant": name,
                "batch": batch_size,
                "sentences_per_second": total / median(result["seconds"]),
                "tokens_per_second": result["tokens"] / median(result["seconds"]),
                "p50_ms": 1000 * percentile(result["latencies"], 50),
                "p95_ms": 1000 * percentile(result["latencies"], 95),
                "mean_output_tokens": result["tokens"] / total,
            }
        )
    by_key = {(row["variant"], row["batch"]): row for row in rows}
    speedups = []
    for name, baseline in pairs:
        for batch_size in batch_sizes:
            row, base = by_key[name, batch_size], by_key[baseline, batch_size]
            speedups.append(
                {
                    "variant": name,
                    "over": baseline,
                    "batch": batch_size,
                    "sentences_per_second_ratio": row["sentences_per_second"] / base["sentences_per_second"],
                    "tokens_per_second_ratio": row["tokens_per_second"] / base["tokens_per_second"],
                    "same_translations": results[name, batch_size]["translations"]
                    == results[baseline, batch_size]["translations"],
                }
            )
    return rows, speedups


def comparisons(ctranslate2, names=None, transformers=False):
    """`(variant, baseline)` pairs: cached over uncached, each CTranslate2 variant over the SavedModel, the
    SavedModel over transformers' `generate`, or with the two runs' `names` (`--against`) the other run's over the
    first's."""
    if transformers:
        return [(f"SavedModel {search}", f"transformers {search}") for search in ("greedy", f"beam{BEAM_SIZE}")]
    if names:
        return [(f"{names[1]} {search}", f"{names[0]} {search}") for search in ("greedy", f"beam{BEAM_SIZE}")]
    if not ctranslate2:
        return [(f"{search} cached", f"{search} uncached") for search in ("greedy", f"beam{BEAM_SIZE}")]
    return [
        (name, name.replace(engine, "SavedModel"))
        for name, (engine, _) in CT2_VARIANTS.items()
        if engine != "SavedModel"
    ]


def bleu_scores(results, count, path, lines, lang):
    """Each variant's tokenized BLEU at the largest batch size, against the lines `lines` of `path`."""
    from kmt.data.sources import read_lines
    from kmt.metrics import tokenized_bleu

    references = read_lines(path)
    references = [references[i] for i in lines]
    largest = max(batch for _, batch in results)
    return {
        name: round(tokenized_bleu(result["translations"][:count], references, lang)["tokenized_bleu"], 2)
        for (name, batch), result in results.items()
        if batch == largest
    }


def main(argv=None):
    args = parse_args(argv)
    from kmt.checkpoints import load_run_model
    from kmt.errors import KmtError

    try:
        cfg, vocabularies, model = load_run_model(args.run_dir)
        sentences, mean_source_tokens, lines = pick_sentences(args, cfg, vocabularies)
        other = load_run_model(args.against) if args.against else None
    except KmtError as error:
        raise SystemExit(f"error: {error}") from None
    names = labels(cfg, other[0]) if other else None

    def count_tokens(translations):
        return int(vocabularies.target.tokenize(translations).row_lengths().numpy().sum())

    with tempfile.TemporaryDirectory(prefix="decode_speed_") as scratch:
        if other:
            variants, search = run_variants(
                [(names[0], cfg, vocabularies, model), (names[1], *other)], args.out or scratch
            )
        elif args.transformers:
            variants, search = reference_variants(
                cfg, vocabularies, model, args.out or scratch, args.transformers, args.max_tokens
            )
        else:
            variants, search = export_variants(cfg, vocabularies, model, args.out or scratch, args.ctranslate2)
        results = measure(variants, sentences, args.batch_sizes, args.repeats, count_tokens)
    pairs = comparisons(args.ctranslate2, names, bool(args.transformers))
    rows, speedups = summarize(results, args.batch_sizes, pairs)
    bleu = {}
    if args.tokenized_reference:
        bleu = bleu_scores(results, len(sentences), args.tokenized_reference, lines, cfg.data.target_lang)
        for row in rows:
            row["tokenized_bleu"] = bleu[row["variant"]]

    print(
        f"{len(sentences)} sentences (mean {mean_source_tokens:.1f} source tokens), {args.repeats} repeats, "
        f"{hardware()}; search {search}"
    )
    print_table(
        rows,
        [
            ("variant", "variant"),
            ("batch", "batch"),
            ("sentences_per_second", "sentences/s"),
            ("tokens_per_second", "tokens/s"),
            ("p50_ms", "p50 ms"),
            ("p95_ms", "p95 ms"),
            ("mean_output_tokens", "mean output tokens"),
            *([("tokenized_bleu", "BLEU")] if bleu else []),
        ],
    )
    print()
    print_table(
        speedups,
        [
            ("variant", "variant"),
            ("over", "over"),
            ("batch", "batch"),
            ("sentences_per_second_ratio", "sentences/s ratio"),
            ("tokens_per_second_ratio", "tokens/s ratio"),
            ("same_translations", "same translations"),
        ],
    )
    print()
    print_json(
        "decode_speed",
        run_dir=str(args.run_dir),
        source=args.source or "val split",
        sentences=len(sentences),
        mean_source_tokens=mean_source_tokens,
        repeats=args.repeats,
        search=dict(search),  # with --against: each run's, by its label
        against=str(args.against) if args.against else None,
        transformers=str(args.transformers) if args.transformers else None,
        rows=rows,
        speedups=speedups,
        tokenized_bleu=bleu,
    )


if __name__ == "__main__":
    main()
