"""Line-aligned corpus files read as they are iterated, never whole, for `kmt-prepare` on a corpus larger than memory:
the same checks and the same lines as `kmt.data.sources.read_lines`, one line at a time."""

import itertools
from pathlib import Path

from kmt.data.sources import _BOM
from kmt.errors import DataError


class StreamedParallel:
    """Two line-aligned UTF-8 files read as they are iterated, never whole (`kmt-prepare` on a large corpus): an
    iterable of `(source, target)` pairs, stripped, with `read_lines`'s checks, and a `DataError` at the end when the
    files' line counts differ. `source` and `target` iterate one side (re-iterable, as `ParallelText`'s lists).
    `errors="surrogateescape"` reads a line that is not UTF-8 instead of stopping (`stream_lines`)."""

    def __init__(self, source_path, target_path, errors="strict"):
        self.source_path, self.target_path, self.errors = Path(source_path), Path(target_path), errors
        for path in (self.source_path, self.target_path):
            if not path.is_file():
                raise DataError(f"{path}: no such file" if not path.exists() else f"{path}: not a regular file")
            if path.stat().st_size == 0:
                raise DataError(f"{path}: file is empty")
        self.source, self.target = FileLines(self.source_path, errors), FileLines(self.target_path, errors)

    def __iter__(self):
        source, target = stream_lines(self.source_path, self.errors), stream_lines(self.target_path, self.errors)
        for count, pair in enumerate(itertools.zip_longest(source, target), start=1):
            if None in pair:
                rest = 1 + sum(1 for _ in (source if pair[1] is None else target))
                lines = (count - 1 + rest, count - 1) if pair[1] is None else (count - 1, count - 1 + rest)
                raise DataError(
                    f"{self.source_path} has {lines[0]} lines but {self.target_path} has {lines[1]}; "
                    "parallel files must line up one to one"
                )
            yield pair


class FileLines:
    """The lines of a file (`stream_lines`), read afresh each time it is iterated."""

    def __init__(self, path, errors="strict"):
        self.path, self.errors = path, errors

    def __iter__(self):
        return stream_lines(self.path, self.errors)


def stream_lines(path, errors="strict"):
    """`read_lines`, one line at a time: yields each line of a UTF-8 file, stripped. `errors="surrogateescape"`
    yields a line that is not UTF-8 with its undecodable bytes as lone surrogates (for `kmt.data.cleaning` to drop
    and count) instead of raising `DataError` naming the file and line."""
    path = Path(path)
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                text = line.decode("utf-8", errors)
            except UnicodeDecodeError as error:
                raise DataError(
                    f"{path} line {number}: not valid UTF-8 (byte 0x{line[error.start]:02x} at column "
                    f"{error.start + 1})"
                ) from None
            if number == 1 and text.startswith(_BOM):
                text = text[len(_BOM) :]
            yield text.strip()
