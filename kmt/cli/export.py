"""`kmt-export RUN_DIR`: write a run's SavedModel again, from its best or last checkpoint, any weights file, or the
average of its last N epoch checkpoints; or, with `--ensemble`, one SavedModel that decodes with several runs.

The run's resolved `config.yaml` and `tokenizer/` rebuild the model; `--beam-size` and `--length-penalty`
override the search settings baked into the SavedModel. Training already exports to `RUN_DIR/export` when it ends.

With `--format ctranslate2` it writes a CTranslate2 model directory instead (`RUN_DIR/ctranslate2` by default, or
`RUN_DIR/ctranslate2_int8` and so on with `--quantization`) for fast decoding on CPUs and GPUs with `kmt-translate`:
the model, the SentencePiece model(s) and the search settings (`pip install "kmt[ctranslate2]"`).

An ensemble scores each next token by the mean of its models' probabilities (fairseq's `--path a.pt:b.pt`), in the
search and in the `score` signature. Its runs must share RUN_DIR's vocabulary: train them on the same data with the
same `data.tokenizer` settings (the vocabulary does not depend on `seed`), or fine-tune one from another
(`trainer.init_from`). Their models may differ in size. The search settings are RUN_DIR's.

Examples:
    kmt-export runs/dates/<time> --checkpoint best --beam-size 1
    kmt-export runs/multi30k/<time> --average 10 --output runs/multi30k/<time>/export_avg10
    kmt-export runs/multi30k/<time1> --ensemble runs/multi30k/<time2> --average 5 --output ensemble_export
    kmt-export runs/multi30k/<time> --format ctranslate2 --quantization int8
"""

import argparse

from kmt.cli import console_script
from kmt.cli.common import add_search_flags, search_overrides, setup_logging
from kmt.cli.errors import exit_on_user_error
from kmt.inference.settings import OPTIONS

SEARCH = tuple(option.name for option in OPTIONS if option.config)  # a flag for each key of the decode group


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", help="a kmt-train run directory (holding config.yaml, tokenizer/, checkpoints/)")
    parser.add_argument(
        "--checkpoint",
        default="last",
        help="'last' (newest epoch), 'best' (best trainer.monitor of the run: lowest val loss by "
        "default), or a .weights.h5 path (default: last)",
    )
    parser.add_argument(
        "--average",
        type=int,
        metavar="N",
        help="average the last N epoch checkpoints instead (they must be on disk: "
        "trainer.keep_checkpoints >= N); also saves checkpoints/average_last{N}.weights.h5",
    )
    parser.add_argument(
        "--ensemble",
        nargs="+",
        metavar="OTHER_RUN",
        help="also decode with these runs (each at the same --checkpoint last or best, or the same "
        "--average N): the export scores each next token by the mean of the models' "
        "probabilities; every run must share RUN_DIR's vocabulary",
    )
    parser.add_argument(
        "--format",
        default="savedmodel",
        help="'savedmodel' (TensorFlow, the default) or 'ctranslate2' (a CTranslate2 model directory)",
    )
    parser.add_argument(
        "--quantization",
        help="with --format ctranslate2: store the weights as int8, int16 or float16 (default: float32)",
    )
    parser.add_argument(
        "--output",
        help="where to write the SavedModel (default: RUN_DIR/export; with --format "
        "ctranslate2, RUN_DIR/ctranslate2 or RUN_DIR/ctranslate2_QUANTIZATION)",
    )
    add_search_flags(
        parser.add_argument_group("search settings baked into the export (default: the run's decode)"), SEARCH
    )
    return parser.parse_args(argv)


@console_script
def main(argv=None):
    args = parse_args(argv)
    setup_logging(verbose=True)
    with exit_on_user_error():
        from kmt.api import export

        output = export(
            args.run_dir,
            checkpoint=args.checkpoint,
            average=args.average,
            ensemble=args.ensemble or (),
            search=search_overrides(args, SEARCH),
            format=args.format,
            output=args.output,
            quantization=args.quantization,
        )
    weights = f"the average of the last {args.average} epochs" if args.average else args.checkpoint
    runs = " + ".join(f"{run}:{weights}" for run in [args.run_dir, *(args.ensemble or [])])
    print(f"exported {runs if args.ensemble else weights} to {output}")


if __name__ == "__main__":
    main()
