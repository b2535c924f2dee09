"""kmt.data.download: a corpus file arrives whole or not at all, and a failure is one line naming the URL."""

import gzip

import pytest

from kmt.data.download import ensure, fetch
from kmt.errors import DataError


def test_fetch_unpacks_and_writes_every_file(tmp_path):
    upstream = tmp_path / "upstream.gz"
    upstream.write_bytes(gzip.compress(b"a line\n"))
    first, second = tmp_path / "data" / "first.txt", tmp_path / "data" / "second.txt"
    fetch(upstream.as_uri(), first, lambda data: {first: gzip.decompress(data), second: b"other\n"})
    assert first.read_text() == "a line\n" and second.read_text() == "other\n"
    assert sorted(path.name for path in first.parent.iterdir()) == ["first.txt", "second.txt"]  # no temporaries


def test_a_failed_fetch_names_the_url_and_leaves_nothing(tmp_path):
    upstream = tmp_path / "upstream.gz"
    upstream.write_bytes(b"not gzip")
    path = tmp_path / "data" / "file.txt"
    with pytest.raises(DataError, match=f"could not download {upstream.as_uri()}.*place file.txt in .* by hand"):
        fetch(upstream.as_uri(), path, lambda data: {path: gzip.decompress(data)})
    assert not path.exists() and not list(tmp_path.glob("data/*"))


def test_ensure_keeps_a_present_file_and_refuses_a_missing_one_without_download(tmp_path):
    present = tmp_path / "present.txt"
    present.write_text("kept\n")
    ensure(present, True, (tmp_path / "nowhere").as_uri(), lambda data: {present: data})
    assert present.read_text() == "kept\n"
    with pytest.raises(DataError, match="absent.txt: no such file"):
        ensure(tmp_path / "absent.txt", False, (tmp_path / "nowhere").as_uri(), lambda data: {})
