"""Word alignments for guided-alignment training (`data.train.alignments`; Garg et al., 2019, "Jointly Learning to
Align and Translate with Transformer Models"): read from a Pharaoh file, kept with the prepared pairs, and turned into
the subword links a batch carries.

A Pharaoh line holds links `i-j` (source word i, target word j, counted from 0 over the whitespace-split words of
the pair's lines), e.g. `0-0 1-2 2-1`; an empty line links nothing. Line n aligns training pair n as read, before
cleaning drops pairs (`kmt.data.shards.write_split` keeps the kept pairs' links, `Links`). Every line is checked
against its pair while the data is prepared: a malformed line, a word index outside its sentence, or a file that
does not line up with the pairs stops with one line naming the file and line.

In a batch a subword belongs to its word (a SentencePiece piece starting with "▁" begins one,
`kmt.tokenizer.Tokenizer.word_starts`), and target subword t links source subword s when their words are linked
(`subword_links`); the tokens a tokenizer adds (the end token Marian's source side ends with) belong to no word.
The same works on any segmentation of the pair, so subword sampling (`data.subword_sampling`) keeps its links.

Example:

>>> parse_links("0-0 2-1", source_words=3, target_words=2, where="a.txt line 1").tolist()
[[0, 0], [2, 1]]
>>> starts = np.array([-1, 0, -1, -1, 1, 0, 1])  # pad, unk, start, end, "▁a", "b", "▁c"
>>> subword_links(np.array([[0, 1], [1, 0]]), np.array([4, 5, 6, 3]), np.array([6, 4]), starts, starts).tolist()
[[0, 0, 1, 0], [1, 1, 0, 0]]
"""

import os
from array import array
from pathlib import Path

import numpy as np

from kmt.errors import DataError

LINK_DTYPE = np.dtype(np.uint16)  # a word index of a kept pair: its words are no more than model.max_length pieces


def parse_links(line, source_words, target_words, where):
    """The links of one Pharaoh line (str) for a pair of `source_words` and `target_words` words: int64 `(K, 2)`,
    (source word, target word). `where` (`"FILE line N"`) names the line in the `DataError` a malformed link or an
    index outside the words raises."""
    fields = line.split()
    links = np.zeros((len(fields), 2), np.int64)
    for k, field in enumerate(fields):
        source, dash, target = field.partition("-")
        if not (dash and source.isdigit() and target.isdigit() and source.isascii() and target.isascii()):
            raise DataError(f"{where}: {field!r} is not a link; Pharaoh links read SOURCE-TARGET, e.g. '0-0 1-2'")
        links[k] = int(source), int(target)
        if links[k, 0] >= source_words or links[k, 1] >= target_words:
            raise DataError(
                f"{where}: link {field} is outside the pair's words ({source_words} source, {target_words} target, "
                "counted from 0)"
            )
    return links


class AlignmentFile:
    """A Pharaoh file read line by line along with the training pairs it aligns (`take`), then checked to end with
    them (`finish`).

    Args:
        path: the file (`data.train.alignments`).
        limited: the pairs are the first ones of a longer corpus (`data.limit`): the file may go on past them.
            Defaults to `False`.

    Raises `DataError` naming the file when it is missing or not a file.
    """

    def __init__(self, path, limited=False):
        self.path, self.limited = Path(path), limited
        if not self.path.is_file():
            what = "no such file" if not self.path.exists() else "not a regular file"
            raise DataError(f"data.train.alignments={path}: {what}")
        self._file = open(self.path, "rb")  # closed by `close`
        self.read = 0  # lines taken so far

    def take(self, sources, targets):
        """The links of the next `len(sources)` lines, one int64 `(K, 2)` array a pair of `sources` and `targets`
        (lists of str), each checked against its pair's words."""
        taken = []
        for source, target in zip(sources, targets):
            raw = self._file.readline()
            if not raw:
                raise DataError(
                    f"{self.path} has {self.read} lines but the training split has more pairs; each pair needs its "
                    "line of links (an empty line for none)"
                )
            self.read += 1
            where = f"{self.path} line {self.read}"
            try:
                line = raw.decode("ascii")
            except UnicodeDecodeError:
                raise DataError(f"{where}: not Pharaoh links (a byte that is not ASCII)") from None
            taken.append(parse_links(line, len(source.split()), len(target.split()), where))
        return taken

    def finish(self):
        """Raises `DataError` when the file has lines past the last pair taken (unless `limited`)."""
        rest = 0 if self.limited else sum(1 for _ in self._file)
        if rest:
            raise DataError(
                f"{self.path} has {self.read + rest} lines but the training split has {self.read} pairs; it must "
                "line up with them one to one"
            )

    def close(self):
        self._file.close()


class LinksWriter:
    """Writes the links of a split's kept pairs, in order (`add`), to `<split>.alignments.links` (the `(K, 2)`
    links end to end, uint16) and `<split>.alignments.index.npy` (int64 `(N + 1,)`: where each pair's start)."""

    def __init__(self, directory, name):
        self.directory, self.name = Path(directory), name
        self.file = open(self.directory / f"{name}.alignments.links", "wb")  # closed by its writer's caller
        self.offsets = array("q", [0])

    def add(self, links, where):
        if len(links) and links.max() > np.iinfo(LINK_DTYPE).max:
            raise DataError(f"{where}: a word index past {np.iinfo(LINK_DTYPE).max}, more than kmt keeps")
        links.astype(LINK_DTYPE).tofile(self.file)
        self.offsets.append(self.offsets[-1] + len(links))

    def finish(self):
        """Writes the index (once `file` is closed); returns how many links were written."""
        np.save(self.directory / f"{self.name}.alignments.index.npy", np.frombuffer(self.offsets, np.int64))
        return self.offsets[-1]


class Links:
    """Word alignments of pairs, stored flat: `of(i)` is pair i's links, int64 `(K, 2)` (source word, target word).

    `links` (`(K_all, 2)`) and `offsets` (`(N + 1,)`: where each pair's links start) are numpy arrays or
    `kmt.data.shards.OnDisk` arrays; `order` (int array or None) picks and orders the pairs (`subset`)."""

    def __init__(self, links, offsets, order=None):
        self.links, self.offsets, self.order = links, offsets, order

    @classmethod
    def read(cls, directory, name):
        """The links `LinksWriter` wrote for split `name` in `directory`, read from disk pair by pair."""
        from kmt.data.shards import OnDisk

        path = Path(directory) / f"{name}.alignments.links"
        return cls(
            OnDisk(path, LINK_DTYPE, (os.path.getsize(path) // (2 * LINK_DTYPE.itemsize), 2)),
            OnDisk.npy(Path(directory) / f"{name}.alignments.index.npy"),
        )

    def __len__(self):
        return len(self.offsets) - 1 if self.order is None else len(self.order)

    def of(self, i):
        if self.order is not None:
            i = int(self.order[i])
        start, stop = (int(offset) for offset in self.offsets[i : i + 2])
        return np.asarray(self.links[start:stop], np.int64).reshape(-1, 2)

    def subset(self, indices):
        """The links of pairs `indices` (ints into these pairs), in that order."""
        indices = np.asarray(indices, np.int64)
        return Links(self.links, self.offsets, indices if self.order is None else np.asarray(self.order)[indices])


def word_indices(ids, starts):
    """The word each token of `ids` (int, `(L,)`) belongs to, counted from 0, given the `starts` of its vocabulary
    (`Tokenizer.word_starts`: 1 a piece that begins a word, 0 one that continues it, -1 a control token): int64
    `(L,)`, -1 for control tokens (pad, start, end), which belong to no word."""
    kind = starts[np.asarray(ids, np.int64)]  # (L,)
    words = np.maximum(np.cumsum(kind == 1) - 1, 0)  # pieces before the first word start join the first word
    return np.where(kind < 0, -1, words)


def subword_links(links, source_ids, target_ids, source_starts, target_starts):
    """Word links `(K, 2)` as subword links: uint8 `(T, S)` for a pair of `target_ids` `(T,)` and `source_ids`
    `(S,)`, 1 where target token t and source token s belong to linked words."""
    source_words, target_words = word_indices(source_ids, source_starts), word_indices(target_ids, target_starts)
    size = (
        max(int(source_words.max(initial=0)), int(links[:, 0].max(initial=0))) + 1,
        max(int(target_words.max(initial=0)), int(links[:, 1].max(initial=0))) + 1,
    )
    linked = np.zeros(size, bool)
    linked[links[:, 0], links[:, 1]] = True
    matrix = linked[source_words[None, :], target_words[:, None]]  # (T, S); -1 (no word) masked out below
    return (matrix & (source_words >= 0)[None, :] & (target_words >= 0)[:, None]).astype(np.uint8)
