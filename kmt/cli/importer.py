"""`kmt-import PATH_OR_HUB_ID`: a Hugging Face MarianMT checkpoint (an OPUS-MT model) as a kmt run directory.

The run directory it writes is what every kmt command takes: `kmt-translate RUN_DIR`, `kmt-evaluate`, `kmt-export`
(SavedModel or CTranslate2), `kmt-serve RUN_DIR`, and `kmt-train trainer.init_from=RUN_DIR` to fine-tune it on your
data (the model keeps its vocabulary and shape). PATH_OR_HUB_ID is a directory holding config.json, vocab.json,
source.spm, target.spm and model.safetensors (or pytorch_model.bin, read with PyTorch's weights_only loader), or a hub
id such as Helsinki-NLP/opus-mt-es-en, downloaded through huggingface_hub where the network allows.

Bilingual models with one shared vocabulary (the OPUS-MT models) import, tied or untied output; a checkpoint kmt
cannot map (another architecture, separate vocabularies, >>xx<< target-language tokens, pre-norm) is refused in one
line before anything is written.

Examples:
    kmt-import Helsinki-NLP/opus-mt-es-en --output runs/opus-mt-es-en
    kmt-import ~/models/opus-mt-es-en
"""

import argparse

from kmt.cli import console_script
from kmt.cli.common import setup_logging
from kmt.cli.errors import exit_on_user_error


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-import", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint", metavar="PATH_OR_HUB_ID", help="a MarianMT checkpoint directory or hub id")
    parser.add_argument("--output", metavar="RUN_DIR", help="the run directory to write (default: runs/NAME)")
    return parser.parse_args(argv)


@console_script
def main(argv=None):
    args = parse_args(argv)
    setup_logging(verbose=True)
    with exit_on_user_error():
        from kmt.importers.marian import import_marian

        output = import_marian(args.checkpoint, args.output)
    print(f"imported {args.checkpoint} to {output}")


if __name__ == "__main__":
    main()
