"""`kmt-export RUN_DIR`: write a run's SavedModel again, from its best or last checkpoint or from any weights file.

The run's resolved `config.yaml` and `tokenizer/` rebuild the model; `--beam-size` and `--length-penalty`
override the search settings baked into the SavedModel. Training already exports to `RUN_DIR/export` when it ends.

Example:
    kmt-export runs/dates/<time> --checkpoint best --beam-size 1
"""

import argparse
from pathlib import Path

from kmt.cli.common import setup_logging
from kmt.cli.errors import exit_on_user_error
from kmt.errors import KmtError


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", help="a kmt-train run directory (holding config.yaml, tokenizer/, checkpoints/)")
    parser.add_argument("--checkpoint", default="last",
                        help="'last' (newest epoch), 'best' (lowest val loss), or a .weights.h5 path (default: last)")
    parser.add_argument("--output", help="where to write the SavedModel (default: RUN_DIR/export)")
    parser.add_argument("--beam-size", type=int, help="beam size baked into the export (1: greedy)")
    parser.add_argument("--length-penalty", type=float, help="GNMT length penalty alpha baked into the export")
    return parser.parse_args(argv)


def find_checkpoint(run_dir, which):
    checkpoints = run_dir / "checkpoints"
    if which == "best":
        path = checkpoints / "best.weights.h5"
    elif which == "last":
        epochs = sorted(checkpoints.glob("epoch_*.weights.h5"))
        path = epochs[-1] if epochs else checkpoints / "epoch_NNN.weights.h5"
    else:
        path = Path(which)
    if not path.is_file():
        raise KmtError(f"no checkpoint at {path}")
    return path


def main(argv=None):
    args = parse_args(argv)
    setup_logging(verbose=True)
    run_dir = Path(args.run_dir)
    with exit_on_user_error():
        if not (run_dir / "config.yaml").is_file():
            raise KmtError(f"{run_dir} is not a kmt run directory (no config.yaml)")
        checkpoint = find_checkpoint(run_dir, args.checkpoint)
        from omegaconf import OmegaConf

        from kmt.build import build_model, build_translator
        from kmt.export import export_translator
        from kmt.tokenizer import Vocabularies

        cfg = OmegaConf.load(run_dir / "config.yaml")
        if args.beam_size is not None:
            cfg.decode.beam_size = args.beam_size
        if args.length_penalty is not None:
            cfg.decode.length_penalty = args.length_penalty
        vocabularies = Vocabularies.load(run_dir / "tokenizer")
        model = build_model(cfg.model, vocabularies.source.vocab_size, vocabularies.target.vocab_size)
        model.load_weights(checkpoint)
        output = Path(args.output) if args.output else run_dir / "export"
        export_translator(build_translator(model, vocabularies, cfg.decode), output)
        print(f"exported {checkpoint} to {output}")


if __name__ == "__main__":
    main()
