"""Prepared data: every split of a corpus encoded once into compact token-id shards (fairseq-preprocess's job).

A prepared directory (made by `kmt-prepare`, or by `kmt-train` inside its run directory) holds:

    meta.json                    format, max_length, vocabulary sizes, the id dtype, and per split the pairs read,
                                 kept and dropped (per rule, `kmt.data.cleaning`), and the tokens of each side;
                                 written last
    config.yaml                  the composed config it was prepared with
    tokenizer/                   the SentencePiece vocabulary (`kmt.tokenizer.Vocabularies`)
    <split>.source.ids           the kept pairs' source ids, end to end, uint16 (int32 for vocabularies of more
    <split>.target.ids           than 65,536 pieces); no start or end tokens
    <split>.index.npy            int64 (N + 1, 2): where each kept pair's source and target ids start
    <split>.lines.npy            int64 (N,): the line of the split each kept pair came from
    <split>.source.txt           every line of the split as read (kept or not: BLEU translates every source line,
    <split>.target.txt           and subword sampling segments the kept ones afresh)
    train.alignments.links       with `data.train.alignments` (guided alignment): the kept pairs' word links, uint16
    train.alignments.index.npy   (source word, target word) pairs end to end, and int64 (N + 1,): where each pair's
                                 start (`kmt.data.alignments`)

The ids and the index are read from disk pair by pair (`OnDisk`), so a corpus larger than memory trains, and a
process's memory does not grow with its corpus; writing streams over the text in chunks, so preparing one is not
bounded by memory either. Ids come from the `sentencepiece` library (`Tokenizer.encode`): no
TensorFlow is needed to prepare or to read.
"""

import itertools
import json
import logging
import operator
import os
import time
from array import array
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from kmt.data.alignments import Links, LinksWriter
from kmt.data.cleaning import Cleaner
from kmt.errors import DataError
from kmt.run_dir import write_atomically

logger = logging.getLogger(__name__)

FORMAT = "kmt-prepared/1"
CHUNK = 8192  # pairs encoded at a time
SIDES = ("source", "target")


def write_split(directory, name, pairs, vocabularies, max_length, clean=None, alignments=None):
    """Encodes the `(source, target)` string pairs of the iterable `pairs` into `directory`'s files for split `name`,
    dropping pairs that are empty or longer than `max_length` on a side, and those the `clean` group's rules drop
    (`kmt.data.cleaning.Cleaner`; None: none); returns the split's entry of `meta.json`. With `alignments` (a
    `kmt.data.alignments.AlignmentFile` read along with the pairs), the kept pairs' word links are written too."""
    directory = Path(directory)
    dtype = id_dtype(vocabularies)
    offsets, lines = array("q", [0, 0]), array("q")
    read, cleaner, tokens = 0, Cleaner(max_length, clean), [0, 0]
    links = LinksWriter(directory, name) if alignments is not None else None
    files = {side: open(directory / f"{name}.{side}.ids", "wb") for side in SIDES}
    # errors="replace": a line that was not UTF-8 (dropped, data.clean.invalid_utf8=drop) is kept as text, readable
    texts = {
        side: open(directory / f"{name}.{side}.txt", "w", encoding="utf-8", errors="replace", newline="\n")
        for side in SIDES
    }
    try:
        pairs = iter(pairs)
        while chunk := list(itertools.islice(pairs, CHUNK)):
            sources, targets = [s for s, _ in chunk], [t for _, t in chunk]
            # every line of links is checked against its pair, kept or not
            chunk_links = alignments.take(sources, targets) if links is not None else None
            for side, text in zip(SIDES, (sources, targets)):
                texts[side].write("".join(f"{line}\n" for line in text))
            source_ids = vocabularies.source.encode(cleaner.encodable(sources))
            target_ids = vocabularies.target.encode(cleaner.encodable(targets))
            kept = {side: [] for side in SIDES}
            for k, (s, t, s_ids, t_ids) in enumerate(zip(sources, targets, source_ids, target_ids)):
                if cleaner.keep(s, t, len(s_ids), len(t_ids)):
                    kept["source"].append(s_ids)
                    kept["target"].append(t_ids)
                    lines.append(read + k)
                    tokens[0] += len(s_ids)
                    tokens[1] += len(t_ids)
                    offsets.extend((tokens[0], tokens[1]))
                    if links is not None:
                        links.add(chunk_links[k], f"{alignments.path} line {read + k + 1}")
            for side in SIDES:
                if kept[side]:
                    np.concatenate(kept[side]).astype(dtype).tofile(files[side])
            read += len(chunk)
        if links is not None:
            alignments.finish()
    finally:
        for handle in (*files.values(), *texts.values(), *([links.file, alignments] if links is not None else [])):
            handle.close()
    np.save(directory / f"{name}.index.npy", np.frombuffer(offsets, np.int64).reshape(-1, 2))
    np.save(directory / f"{name}.lines.npy", np.frombuffer(lines, np.int64))
    kept_pairs = len(lines)
    logger.info("%s", cleaner.summary(name, read, kept_pairs))
    entry = {
        "pairs": kept_pairs,
        "read": read,
        "dropped": cleaner.dropped,
        "source_tokens": tokens[0],
        "target_tokens": tokens[1],
    }
    if links is not None:
        entry["alignments"] = {"file": str(alignments.path), "links": links.finish()}
        logger.info("%s: %d word links of the kept pairs from %s", name, entry["alignments"]["links"], alignments.path)
    return entry


def id_dtype(vocabularies):
    """uint16 where every id fits (half the bytes), else int32."""
    largest = max(vocabularies.source.vocab_size, vocabularies.target.vocab_size)
    return np.dtype(np.uint16 if largest <= 2**16 else np.int32)


def write_prepared(directory, splits, vocabularies, max_length, config_yaml, clean=None, alignments=None):
    """Writes a prepared directory: `splits` maps split names to iterables of `(source, target)` string pairs, each
    encoded with `vocabularies` (saved into `directory/tokenizer` unless there already) and filtered to
    `max_length`; the train split is also cleaned by the rules of `clean` (the `data.clean` group; None: none), and
    keeps the word links of `alignments` (a `kmt.data.alignments.AlignmentFile`; None: none).
    `meta.json` is written last, atomically: a directory without it is incomplete."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    from kmt.tokenizer import Vocabularies

    if not Vocabularies.exists(directory / "tokenizer"):
        vocabularies.save(directory / "tokenizer")
    write_atomically(directory / "config.yaml", config_yaml)
    entries = {
        name: write_split(
            directory, name, pairs, vocabularies, max_length, *((clean, alignments) if name == "train" else ())
        )
        for name, pairs in splits.items()
    }
    meta = {
        "format": FORMAT,
        "max_length": max_length,
        "joint": vocabularies.joint,
        "vocab_size": {"source": vocabularies.source.vocab_size, "target": vocabularies.target.vocab_size},
        "id_dtype": id_dtype(vocabularies).name,
        "splits": entries,
        "seconds": round(time.perf_counter() - started, 3),
    }
    write_atomically(directory / "meta.json", json.dumps(meta, indent=2) + "\n")
    return meta


class PreparedData:
    """A prepared directory, read: `PreparedData(path).split("train")`.

    Raises `DataError` naming the directory when it is not a complete prepared directory.
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        path = self.directory / "meta.json"
        if not path.is_file():
            what = (
                "does not exist"
                if not self.directory.exists()
                else "has no meta.json (an unfinished or other directory)"
            )
            raise DataError(f"{self.directory} is not prepared data: it {what}; make it with kmt-prepare")
        try:
            self.meta = json.loads(path.read_text())
        except ValueError as error:
            raise DataError(f"{path} is damaged ({error}); prepare the data again") from None
        if self.meta.get("format") != FORMAT:
            raise DataError(f"{path}: format {self.meta.get('format')!r}, kmt reads {FORMAT!r}; prepare it again")

    @property
    def max_length(self):
        return self.meta["max_length"]

    @property
    def names(self):
        return list(self.meta["splits"])

    @cached_property
    def vocabularies(self):
        from kmt.tokenizer import Vocabularies

        return Vocabularies.load(self.directory / "tokenizer")

    def config(self):
        from omegaconf import OmegaConf

        return OmegaConf.load(self.directory / "config.yaml")

    def split(self, name):
        if name not in self.meta["splits"]:
            raise DataError(f"{self.directory} has no {name} split (it has {', '.join(self.names)})")
        return Split(self.directory, name, self.meta["splits"][name], np.dtype(self.meta["id_dtype"]))


class Rows:
    """Pairs of token-id rows, stored flat: `pair(i)` is pair i's source and target ids, numpy arrays.

    `source`, `target` (the ids end to end) and `offsets` ((N + 1, 2): where each pair's ids start) are numpy arrays
    or `OnDisk` arrays: anything sliced like a numpy array. `links` (`kmt.data.alignments.Links` or None): the pairs'
    word alignments, pair i's `links.of(i)`."""

    def __init__(self, source, target, offsets, links=None):
        self.source_ids, self.target_ids, self.offsets, self.links = source, target, offsets, links

    def __len__(self):
        return len(self.offsets) - 1

    def lengths(self, start=0, stop=None):
        """Source and target tokens of pairs `start` to `stop`: two int64 arrays."""
        stop = len(self) if stop is None else min(stop, len(self))
        counts = np.diff(np.asarray(self.offsets[start : stop + 1], np.int64), axis=0)
        return counts[:, 0], counts[:, 1]

    def pair(self, i):
        (s0, t0), (s1, t1) = self.offsets[i : i + 2]
        return self.source_ids[s0:s1], self.target_ids[t0:t1]

    @property
    def target_tokens(self):
        """Target tokens the loss sees per pass (each sentence's tokens plus its end token)."""
        return int(self.offsets[-1][1]) + len(self)


class OnDisk:
    """A 1-D or 2-D array in a file, read with `os.pread` at each access instead of memory-mapped.

    A training stream reads pairs in random order. Mapped, each pair it reads stays resident in the process (with
    the kernel's read-ahead around it), so resident memory grew with the corpus; read, the pages stay in the page
    cache, which the kernel shares and reclaims, and the process holds only what it asked for. Indexing takes an
    int or a slice with step 1 (rows), then any numpy index within them, and returns numpy arrays; `np.asarray`
    reads the whole array.
    """

    def __init__(self, path, dtype, shape, offset=0):
        self.path, self.dtype, self.shape, self._offset = Path(path), np.dtype(dtype), tuple(shape), offset
        self._row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        self._file = open(self.path, "rb", buffering=0)  # closed with this object

    @classmethod
    def npy(cls, path):
        """The array of a `.npy` file."""
        with open(path, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            header = {(1, 0): np.lib.format.read_array_header_1_0}.get(version, np.lib.format.read_array_header_2_0)
            shape, fortran_order, dtype = header(handle)
            if fortran_order:
                raise DataError(f"{path}: a Fortran-ordered array; prepare the data again")
            return cls(path, dtype, shape, handle.tell())

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        if isinstance(key, tuple):  # rows first, then numpy's indexing within them
            rows, *within = key
            return self[rows][(slice(None), *within) if isinstance(rows, slice) else tuple(within)]
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                raise IndexError("OnDisk arrays are sliced with step 1")
            return self._read(start, max(start, stop))
        i = operator.index(key)
        if not -len(self) <= i < len(self):
            raise IndexError(f"index {i} is out of bounds for {len(self)} rows")
        i %= len(self)
        return self._read(i, i + 1)[0]

    def __array__(self, dtype=None, copy=None):
        whole = self._read(0, len(self))
        return whole if dtype is None else whole.astype(dtype)

    def _read(self, start, stop):
        count = stop - start
        data = os.pread(self._file.fileno(), count * self._row_bytes, self._offset + start * self._row_bytes)
        if len(data) != count * self._row_bytes:
            raise DataError(f"{self.path} is shorter than its index says; prepare the data again")
        return np.frombuffer(data, self.dtype).reshape(count, *self.shape[1:])


@dataclass
class Text:
    """The lines of a split as read (`source`, `target`: lists of str) and which were kept (`kept`: line numbers)."""

    source: list
    target: list
    kept: np.ndarray

    def __len__(self):
        return len(self.source)


class Split(Rows):
    """One split of a prepared directory: its kept pairs' ids (memory-mapped), their lines, and `text()`."""

    def __init__(self, directory, name, entry, dtype):
        self.name, self.entry, self._directory = name, entry, Path(directory)
        ids = {side: _ids(self._directory / f"{name}.{side}.ids", dtype) for side in SIDES}
        offsets = OnDisk.npy(self._directory / f"{name}.index.npy")
        links = Links.read(self._directory, name) if "alignments" in entry else None
        super().__init__(ids["source"], ids["target"], offsets, links)
        last = offsets[-1]
        if len(self) != entry["pairs"] or len(ids["source"]) != last[0] or len(ids["target"]) != last[1]:
            raise DataError(f"{self._directory}: the {name} split's files disagree with meta.json; prepare it again")
        if links is not None and (len(links) != len(self) or links.offsets[-1] != len(links.links)):
            raise DataError(f"{self._directory}: the {name} split's alignments disagree with its pairs; prepare again")

    @property
    def dropped(self):
        return self.entry["dropped"]

    def text(self):
        """Every line of the split as read, and which lines the kept pairs are (`Text`)."""
        source, target = (_read_lines(self._directory / f"{self.name}.{side}.txt") for side in SIDES)
        return Text(source, target, np.load(self._directory / f"{self.name}.lines.npy"))


def _ids(path, dtype):
    return OnDisk(path, dtype, (path.stat().st_size // np.dtype(dtype).itemsize,))


def _read_lines(path):
    with open(path, encoding="utf-8", newline="\n") as handle:
        return [line[:-1] if line.endswith("\n") else line for line in handle]
