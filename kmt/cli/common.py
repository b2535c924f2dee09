"""Helpers the entry points share: loading an exported SavedModel and reading text files, with one-line errors."""

import logging
import sys
from pathlib import Path

from kmt.cli.errors import fail, quiet_tensorflow


def setup_logging(verbose=False):
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    quiet_tensorflow()


def load_export(directory, signature="translate"):
    """A signature (`translate` or `translate_nbest`) of a kmt SavedModel at `directory` (tensorflow-text's ops
    registered first)."""
    directory = Path(directory)
    if not (directory / "saved_model.pb").is_file():
        fail(f"{directory} is not a SavedModel directory (no saved_model.pb); pass a run's export/ directory")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the graph uses)

    loaded = tf.saved_model.load(str(directory))
    if "translate" not in loaded.signatures:
        fail(f"{directory} has no 'translate' signature; was it exported by kmt?")
    if signature not in loaded.signatures:
        fail(f"{directory} has no '{signature}' signature: it was exported by an older kmt; export the run again "
             f"with `kmt-export RUN_DIR`")
    return loaded.signatures[signature]
