"""Translating many sentences: batches of similar length, results back in input order."""

import logging
import time

logger = logging.getLogger(__name__)


def translate_lines(translate_batch, lines, batch_size=64, progress=False):
    """Translates `lines` (a list of str) with `translate_batch(list of str) -> (translations, scores)`.

    Lines are sorted by length into batches of `batch_size`, so little work goes to padding, and returned in
    input order: output i always translates input i, empty lines included. Returns `(translations, scores)`.
    """
    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
    translations, scores = [""] * len(lines), [0.0] * len(lines)
    started = time.perf_counter()
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        outputs, batch_scores = translate_batch([lines[i] for i in batch])
        for i, text, score in zip(batch, outputs, batch_scores):
            translations[i], scores[i] = text, score
        if progress:
            done = min(start + batch_size, len(order))
            logger.info("translated %d/%d sentences (%.1f/s)", done, len(order),
                        done / (time.perf_counter() - started))
    return translations, scores


def batch_fn(translate):
    """Adapts `translate(text=...)` (a `kmt.export.Translator`'s, or a loaded SavedModel's `translate` signature)
    to the `translate_batch` that `translate_lines` takes."""
    import tensorflow as tf

    def translate_batch(batch):
        outputs = translate(text=tf.constant(batch, dtype=tf.string))
        texts = [t.decode("utf-8") for t in outputs["translation"].numpy()]
        return texts, [float(s) for s in outputs["score"].numpy()]

    return translate_batch
