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


def translate_fn(model, vocabularies, decode_cfg, beam_size=None):
    """`translate_batch(list of str) -> (translations, scores)` for `translate_lines`, searching with `decode_cfg`'s
    settings (`beam_size`, when given, instead of its beam and without sampling), as the export does.

    Under TensorFlow it is the `Translator` graph the SavedModel holds (tokenizer, search and detokenizer traced
    once); under JAX and PyTorch the same `search_ids` on ids from the `sentencepiece` library, so no TensorFlow is
    imported. Inputs are cut to the model's `max_length` tokens; an empty input translates to "" with score 0."""
    import keras

    if keras.backend.backend() == "tensorflow":
        from kmt.inference.translator import build_translator

        return batch_fn(build_translator(model, vocabularies, decode_cfg, beam_size).translate)
    import numpy as np

    from kmt.inference.decoding import search_ids

    max_length = model.max_length
    search = dict(beam_size=beam_size or decode_cfg.beam_size, length_penalty=decode_cfg.length_penalty,
                  max_length_a=decode_cfg.max_length_a, max_length_b=decode_cfg.max_length_b,
                  sampling_topk=decode_cfg.sampling_topk if beam_size is None else 1,
                  sampling_temperature=decode_cfg.sampling_temperature, sampling_topp=decode_cfg.sampling_topp)

    def translate_batch(lines):
        rows = [ids[:max_length] for ids in vocabularies.source.encode(lines)]
        source = np.zeros((len(rows), max(1, *map(len, rows))), np.int32)
        for i, row in enumerate(rows):
            source[i, : len(row)] = row
        tokens, scores = search_ids(model, source, max_length=max_length, **search)
        tokens, scores = keras.ops.convert_to_numpy(tokens), keras.ops.convert_to_numpy(scores)
        texts = vocabularies.target.decode(tokens)
        return ([text if len(row) else "" for text, row in zip(texts, rows)],
                [float(score) if len(row) else 0.0 for score, row in zip(scores, rows)])

    return translate_batch
