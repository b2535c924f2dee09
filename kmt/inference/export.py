"""Writing a `kmt.inference.translator.Translator` as a TensorFlow SavedModel (its signatures: see that module)."""

import logging
from pathlib import Path

import tensorflow as tf

from kmt.inference.graph_merge import merge_duplicate_nodes
from kmt.run_dir import write_atomically

logger = logging.getLogger(__name__)


def export_translator(translator, directory):
    """Writes `translator` as a SavedModel at `directory`, replacing what was there only once the new one is
    complete. Returns the size in bytes."""
    directory = Path(directory)
    signatures = {
        "translate": translator.translate,
        "serving_default": translator.translate,
        "translate_nbest": translator.translate_nbest,
        "translate_prefix": translator.translate_prefix,
        "score": translator.score,
    }
    # A Transformer's alignments come from its cross-attention; a sampling export takes no constraints.
    for name in ("translate_constrained", "translate_align", "align"):
        if hasattr(translator, name):
            signatures[name] = getattr(translator, name)

    def write(partial):
        tf.saved_model.save(translator, str(partial), signatures=signatures)
        before, after = merge_duplicate_nodes(partial)
        logger.debug("merged duplicate graph nodes: %d -> %d", before, after)

    write_atomically(directory, write)
    size = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
    logger.info("exported a SavedModel to %s (%.1f MB)", directory, size / 1e6)
    return size
