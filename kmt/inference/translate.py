"""Translating many sentences: batches of similar length, results back in input order (`map_sorted`), and a stream
of lines translated a buffer at a time (`translate_stream`)."""

import itertools
import logging
import sys
import time

logger = logging.getLogger(__name__)


def map_sorted(fn, items, batch_size=64, key=len, progress=False, verb="translated"):
    """`fn` over `items` in batches of similar `key` (a length), so little work goes to padding; returns the
    results in input order. `fn(list of items) -> list of results`, one per item. With `progress`, a tqdm bar on
    stderr at a terminal, else a log line `<verb> done/total (items/s)` after each batch."""
    order = sorted(range(len(items)), key=lambda i: key(items[i]))
    results = [None] * len(items)
    bar = _bar(len(order), verb) if progress else None
    started = time.perf_counter()
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        for i, result in zip(batch, fn([items[i] for i in batch])):
            results[i] = result
        if bar is not None:
            bar.update(len(batch))
        elif progress:
            done = min(start + batch_size, len(order))
            logger.info("%s %d/%d (%.1f/s)", verb, done, len(order), done / (time.perf_counter() - started))
    if bar is not None:
        bar.close()
    return results


def _bar(total, verb):
    """A tqdm progress bar of `total` sentences on stderr, where stderr is a terminal (None elsewhere: logs read
    better there)."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=verb, unit=" sentences", file=sys.stderr, dynamic_ncols=True)


def translate_stream(
    translator,
    lines,
    *,
    settings=None,
    nbest=1,
    buffer_size=1000,
    progress=False,
    prefixes=None,
    alignments=False,
    constraints=None,
    glossary=None,
):
    """Yields each line's `nbest` best `kmt.inference.translators.Hypothesis`es for each line of the iterable `lines`,
    in order, as soon as it is translated by `translator` (a `kmt.inference.translators.Translator`, searching with
    `settings`, its own by default).

    Reads `buffer_size` lines at a time and translates them together (sorted by length within the buffer), so a
    large file never sits in memory whole, its translations come out while it is read, and a `buffer_size` of 1
    answers each line as it arrives (an interactive session; fairseq-interactive's `--buffer-size`).

    `prefixes`, an iterable of one target prefix per line, `alignments`, `constraints`, an iterable of one list of
    phrases per line (read after its line), and `glossary` are `Translator.translate`'s; a `KmtError` says whether
    the lines or the prefixes ran out first when they are not as long as each other.
    """
    from kmt.errors import KmtError

    lines, done, started = iter(lines), 0, time.perf_counter()
    prefixes = None if prefixes is None else iter(prefixes)
    constraints = None if constraints is None else iter(constraints)
    while chunk := list(itertools.islice(lines, buffer_size)):
        options = dict(settings=settings, nbest=nbest, alignments=alignments, glossary=glossary)
        if constraints is not None:
            options["constraints"] = list(itertools.islice(constraints, len(chunk)))
        if prefixes is not None:
            options["prefixes"] = list(itertools.islice(prefixes, len(chunk)))
            if len(options["prefixes"]) < len(chunk):
                raise KmtError(
                    f"the prefixes end at line {done + len(options['prefixes'])}, before the input does: give one "
                    "prefix a line (an empty line for none)"
                )
        if constraints is not None or prefixes is not None:  # their messages name the stream's line numbers
            options["first_line"] = done + 1
        yield from translator.translate(chunk, **options)
        done += len(chunk)
        if progress:
            logger.info("translated %d sentences (%.1f/s)", done, done / (time.perf_counter() - started))
    if prefixes is not None and next(prefixes, None) is not None:
        raise KmtError(f"the prefixes go on past the input's {done} lines: give one prefix a line")
