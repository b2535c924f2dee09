"""Fetching a public corpus file: whole or not at all, and one line naming the URL when it fails."""

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
        reason = " ".join(str(getattr(error, "reason", error)).split())  # URLError keeps its cause in .reason
        raise DataError(
            f"could not download {url} ({type(error).__name__}: {reason}); place {path.name} in {path.parent} by hand"
        ) from None
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
