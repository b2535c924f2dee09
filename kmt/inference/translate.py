"""Translating many sentences: batches of similar length, results back in input order."""

import itertools
import logging
import time

logger = logging.getLogger(__name__)


def map_sorted(fn, items, batch_size=64, key=len, progress=False, verb="translated"):
    """`fn` over `items` in batches of similar `key` (a length), so little work goes to padding; returns the
    results in input order. `fn(list of items) -> list of results`, one per item. With `progress`, logs
    `<verb> done/total (items/s)` after each batch."""
    order = sorted(range(len(items)), key=lambda i: key(items[i]))
    results = [None] * len(items)
    started = time.perf_counter()
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        for i, result in zip(batch, fn([items[i] for i in batch])):
            results[i] = result
        if progress:
            done = min(start + batch_size, len(order))
            logger.info("%s %d/%d (%.1f/s)", verb, done, len(order), done / (time.perf_counter() - started))
    return results


def translate_lines(translate_batch, lines, batch_size=64, progress=False):
    """Translates `lines` (a list of str) with `translate_batch(list of str) -> (translations, scores)`.

    Lines are sorted by length into batches of `batch_size` (`map_sorted`) and returned in input order: output i
    always translates input i, empty lines included. Returns `(translations, scores)`.
    """
    results = map_sorted(lambda batch: zip(*translate_batch(batch)), lines, batch_size, progress=progress)
    return [text for text, _ in results], [score for _, score in results]


def translate_stream(translate_batch, lines, batch_size=64, buffer_size=1000, progress=False):
    """Yields `(translation, score)` for each line of the iterable `lines`, in order, as soon as it is translated.

    Reads `buffer_size` lines at a time and translates them with `translate_lines` (sorted by length within the
    buffer), so a large file never sits in memory whole, its translations come out while it is read, and a
    `buffer_size` of 1 answers each line as it arrives (an interactive session; fairseq-interactive's
    `--buffer-size`).
    """
    lines, done, started = iter(lines), 0, time.perf_counter()
    while chunk := list(itertools.islice(lines, buffer_size)):
        yield from zip(*translate_lines(translate_batch, chunk, batch_size))
        done += len(chunk)
        if progress:
            logger.info("translated %d sentences (%.1f/s)", done, done / (time.perf_counter() - started))


def batch_fn(translate, nbest=None):
    """Adapts `translate(text=...)` (a `kmt.inference.translator.Translator`'s, or a loaded SavedModel's `translate`
    signature) to the `translate_batch` that `translate_lines` takes. With `nbest` n, `translate` is a `translate_nbest`
    signature and each sentence's translation and score are lists of its n best, best first."""
    import tensorflow as tf

    def translate_batch(batch):
        outputs = translate(text=tf.constant(batch, dtype=tf.string))
        if nbest is None:
            texts = [t.decode("utf-8") for t in outputs["translation"].numpy()]
            return texts, [float(s) for s in outputs["score"].numpy()]
        texts = [[t.decode("utf-8") for t in row[:nbest]] for row in outputs["translations"].numpy()]
        return texts, [[float(s) for s in row[:nbest]] for row in outputs["scores"].numpy()]

    return translate_batch
