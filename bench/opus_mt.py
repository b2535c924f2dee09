"""An OPUS-MT-sized MarianMT checkpoint through kmt: import time, sizes on disk, and decode speed of the SavedModel
against CTranslate2 (float32 and int8) at batch 1 and 64.

    python bench/opus_mt.py                      # d=512, 6+6 layers, 8 heads, d_ff 2048, 58,101 shared pieces
    python bench/opus_mt.py --sentences 32 --repeats 2
    python bench/opus_mt.py --tiny               # the same path at test size (tests/test_bench.py)
    python bench/opus_mt.py --transformers --vocab-size 15000 --max-tokens 40   # the SavedModel vs transformers

The checkpoint is what `tests/marian_checkpoint.py` writes: a `MarianMTModel` of random weights saved by transformers
(needs `transformers` and PyTorch), the size of Helsinki-NLP's opus-mt models, its vocab.json padded to 58,101 pieces.
Random weights time the same work as trained ones, except that a random model seldom ends a sentence: every output
runs to its length limit (1.5 x source length + 10). No translation quality is measured.

`kmt-import`'s work (`kmt.importers.marian.import_marian`: reading, reordering, building and saving the model) is timed
in this process, after TensorFlow is imported; the exports are `kmt.export`'s. Decode speed is `bench/decode_speed.py
RUN_DIR --ctranslate2` on the imported run, with sentences made of the checkpoint's corpus words; with
`--transformers`, `bench/decode_speed.py RUN_DIR --transformers CHECKPOINT`: the SavedModel against transformers'
`generate` on the checkpoint it was imported from.
"""

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import hardware, print_json, print_table, timed  # noqa: E402  (bench/ is on sys.path)

# The random MarianMT checkpoint is the import tests' (tests/marian_checkpoint.py), at OPUS-MT's size here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.marian_checkpoint import SOURCES, make_checkpoint  # noqa: E402

OPUS_MT = dict(d_model=512, layers=6, heads=8, ffn_dim=2048, pieces=400, vocab_size=58_101, init_std=0.02)
TINY = dict(d_model=32, layers=1, heads=2, ffn_dim=64, pieces=60, vocab_size=None, init_std=0.2)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=64, help="sentences to translate (default: 64)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the sentences (default: 3)")
    parser.add_argument("--batch-sizes", default="1,64", help="comma-separated batch sizes (default: 1,64)")
    parser.add_argument("--tiny", action="store_true", help="a model of test size instead of OPUS-MT's")
    parser.add_argument(
        "--vocab-size", type=int, default=OPUS_MT["vocab_size"], help="vocab.json's entries (default: 58,101)"
    )
    parser.add_argument(
        "--transformers",
        action="store_true",
        help="time the SavedModel against transformers' generate instead of CTranslate2",
    )
    parser.add_argument(
        "--max-tokens", type=int, help="with --transformers: most output tokens a sentence (default: the run's)"
    )
    return parser.parse_args(argv)


def sentences(count, seed=0):
    """`count` Spanish-looking sentences of 8-20 words from the checkpoint's corpus."""
    words = " ".join(SOURCES).split()
    rng = random.Random(seed)
    return [" ".join(rng.choices(words, k=rng.randint(8, 20))) for _ in range(count)]


def size_mib(path):
    path = Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


def main(argv=None):
    args = parse_args(argv)
    import decode_speed
    import kmt
    from kmt.importers.marian import import_marian
    from kmt.tokenizer import Vocabularies

    shape = TINY if args.tiny else {**OPUS_MT, "vocab_size": args.vocab_size}
    with tempfile.TemporaryDirectory(prefix="opus_mt_") as scratch:
        scratch = Path(scratch)
        make_checkpoint(scratch / "hf", **shape)
        run, import_seconds = timed(import_marian, str(scratch / "hf"), scratch / "run")
        saved_model, export_seconds = timed(kmt.export, run, search={"beam_size": 1})
        ct2, ct2_seconds = timed(kmt.export, run, format="ctranslate2", quantization="int8")
        rows = [
            {"what": "MarianMT checkpoint (model.safetensors)", "mib": size_mib(scratch / "hf" / "model.safetensors")},
            {"what": "kmt-import", "seconds": import_seconds, "mib": size_mib(run / "checkpoints")},
            {"what": "SavedModel export (kmt-export)", "seconds": export_seconds, "mib": size_mib(saved_model)},
            {"what": "CTranslate2 int8 export", "seconds": ct2_seconds, "mib": size_mib(ct2)},
        ]
        pieces = Vocabularies.load(run / "tokenizer").source.vocab_size
        print(
            f"MarianMT d={shape['d_model']}, {shape['layers']}+{shape['layers']} layers, {pieces:,} pieces (kmt's "
            f"ids: Marian's and the start token), random weights; {hardware()}"
        )
        print_table(rows, [("what", "what"), ("seconds", "seconds"), ("mib", "MiB on disk")])
        print()
        print_json("opus_mt_import", shape=shape, rows=rows)
        print()
        source = scratch / "source.es"
        source.write_text("\n".join(sentences(args.sentences)) + "\n", encoding="utf-8")
        sys.stdout.flush()
        decode_speed.main(
            [
                str(run),
                *(["--transformers", str(scratch / "hf")] if args.transformers else ["--ctranslate2"]),
                *(["--max-tokens", str(args.max_tokens)] if args.max_tokens else []),
                "--source",
                str(source),
                "--sentences",
                str(args.sentences),
                "--batch-sizes",
                args.batch_sizes,
                "--repeats",
                str(args.repeats),
            ]
        )


if __name__ == "__main__":
    main()
