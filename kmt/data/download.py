"""Fetching a public corpus file or archive: whole or not at all, checked, and one line naming the URL when it fails."""

import hashlib
import http.client
import logging
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

from kmt.errors import DataError
from kmt.run_dir import write_atomically

logger = logging.getLogger(__name__)

TIMEOUT_S = 60  # seconds without a byte before a download is given up


def fetch(url: str, path: Path, unpack: Callable[[bytes], dict[Path, bytes]]) -> None:
    """Fetch `url`, turn its bytes into `{path: contents}` with `unpack`, and write each file atomically.

    Raises:
        DataError: naming `url` and telling the user to place `path` by hand, if fetching or unpacking fails.
    """
    logger.info("downloading %s", url)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            files = unpack(response.read())
    except (
        OSError,
        EOFError,
        KeyError,
        ValueError,
        zlib.error,
        zipfile.BadZipFile,
        http.client.HTTPException,
    ) as error:  # IncompleteRead: the connection dropped mid-file
        raise download_error(url, error, f"place {path.name} in {path.parent} by hand") from None
    for destination, data in files.items():
        write_atomically(destination, data)
        logger.info("wrote %s (%d bytes)", destination, len(data))


def ensure(path: Path, download: bool, url: str, unpack: Callable[[bytes], dict[Path, bytes]]) -> None:
    """Make sure `path` exists, downloading it from `url` when absent and `download` is true."""
    if path.exists():
        return
    if not download:
        raise DataError(f"{path}: no such file (place the corpus there, or allow downloading with download=True)")
    fetch(url, path, unpack)


CHUNK_BYTES = 1 << 20  # an archive streams to disk a MiB at a time, never whole in memory


def file_digest(path: Path, algorithm: str) -> str:
    """The hex digest of `path`'s bytes by `algorithm` ("sha256", "md5", any `hashlib` name), read a MiB at a time."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download_error(url: str, error: Exception, by_hand: str) -> DataError:
    """The one line saying that fetching `url` failed with `error`, and how to place the file by hand instead."""
    reason = " ".join(str(getattr(error, "reason", error)).split())  # URLError keeps its cause in .reason
    return DataError(f"could not download {url} ({type(error).__name__}: {reason}); {by_hand}")


def download_archive(url: str, path: Path, checksum: str, download: bool = True) -> Path:
    """Make sure `path` holds the archive at `url` whose digest is `checksum`, downloading it when absent.

    The bytes stream into `<path>.part`, which survives a failed download: the next call asks the server for the rest
    (an HTTP `Range` request) and continues it when the server answers with the part (206), or starts over when it
    sends the whole file (200, and `file://` URLs). The part becomes `path` only once its digest matches; a
    mismatching part is deleted. An archive already at `path` (downloaded before, or placed there by hand) is
    checked, not fetched.

    Args:
        url: where the archive lives (any `urllib` URL, `file://` included).
        path: where it goes.
        checksum: `"<algorithm>:<hex digest>"`, e.g. `"sha256:0224c7..."` or `"md5:48eca5..."`.
        download: fetch the archive when absent. Defaults to `True`.

    Returns:
        `path`.

    Raises:
        DataError: one line: the download failed (naming `url` and where to place the file by hand), the archive's
            digest differs from `checksum`, or it is absent and `download` is false.
    """
    algorithm, expected = checksum.split(":", 1)
    by_hand = f"place {path.name} in {path.parent} by hand"
    if path.exists():
        actual = file_digest(path, algorithm)
        if actual != expected:
            raise DataError(
                f"{path}: {algorithm} {actual} differs from the expected {expected} (a corrupt or different file): "
                f"delete it and rerun, or {by_hand}"
            )
        return path
    if not download:
        raise DataError(f"{path}: no such file ({by_hand}, or allow downloading with download=True)")
    part = path.with_name(f"{path.name}.part")
    path.parent.mkdir(parents=True, exist_ok=True)
    offset = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    logger.info("downloading %s%s", url, f" from byte {offset:,}" if offset else "")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            resumed = offset and getattr(response, "status", None) == 206
            with open(part, "ab" if resumed else "wb") as f:
                for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                    f.write(chunk)
    except urllib.error.HTTPError as error:
        if error.code != 416:  # 416: nothing past `offset`, the part is whole (its digest decides)
            raise download_error(url, error, by_hand) from None
    except (OSError, http.client.HTTPException) as error:  # the part stays: the next call continues it
        raise download_error(url, error, by_hand) from None
    actual = file_digest(part, algorithm)
    if actual != expected:
        part.unlink()
        raise DataError(
            f"{url}: {algorithm} {actual} differs from the expected {expected} (the download was deleted): rerun, "
            f"or {by_hand}"
        )
    part.replace(path)
    logger.info("wrote %s (%d bytes)", path, path.stat().st_size)
    return path
