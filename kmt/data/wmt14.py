"""WMT 2014 English-German, the corpus of the paper's headline results: fetched, checked and extracted to plain text.

The training corpora are the three of fairseq's `examples/translation/prepare-wmt14en2de.sh --icml17` (the paper's
setting; without `--icml17` it takes News Commentary v12) and of tensor2tensor's WMT14 En-De: Europarl v7, Common
Crawl and News Commentary v9, about 4.5M pairs together. Validation is newstest2013 and test newstest2014 in
sacreBLEU's copies (`sacrebleu -t wmt13` and `-t wmt14/full`): the *full* newstest2014 (3,003 sentences, the set
that fairseq, tensor2tensor and the papers reproducing Vaswani et al. score; `wmt14` alone is the 2,737-sentence
filtered set of the 2014 evaluation).

Everything goes under `<data_dir>/wmt14_en_de/`: the archives in `archives/` under their upstream names, and one
line-aligned pair of UTF-8 files per set, `<set>.<lang>` (`europarl_v7.en`, `newstest2013.de`,
`newstest2014_en_de.en`, ...). The SGML test sets become plain lines as sacreBLEU makes them: the text of each
`<seg>`, whitespace collapsed. A set whose files are there is not fetched again; an archive is checked against the
digest pinned here (SHA-256 from TensorFlow Datasets' checksums, MD5 from sacreBLEU's) and a download cut short
continues where it stopped (`kmt.data.download.download_archive`).

Example:

>>> files = wmt14_en_de_files("data")  # doctest: +SKIP
>>> files["val"]  # doctest: +SKIP
(PosixPath('data/wmt14_en_de/newstest2013.en'), PosixPath('data/wmt14_en_de/newstest2013.de'))
"""

import dataclasses
import logging
import os
import re
import shutil
import tarfile
from collections.abc import Mapping
from pathlib import Path

from kmt.data.download import download_archive
from kmt.errors import DataError
from kmt.run_dir import write_atomically

logger = logging.getLogger(__name__)

FOLDER = "wmt14_en_de"
LANGUAGES = ("en", "de")


@dataclasses.dataclass(frozen=True)
class WmtSet:
    """One set of WMT14 En-De: the archive that holds it and its file in each language there.

    Args:
        url: the archive upstream; a mirror holds it under the same file name (`url`'s last part).
        checksum: `"<algorithm>:<hex digest>"` of the archive.
        members: language -> path of that side's file inside the archive (`.sgm`: a test set in WMT's SGML).
    """

    url: str
    checksum: str
    members: Mapping[str, str]

    @property
    def archive(self) -> str:
        return self.url.rsplit("/", 1)[-1]


_TEST_FULL = ("https://statmt.org/wmt14/test-full.tgz", "md5:a8cd784e006feb32ac6f3d9ec7eb389a")  # sacreBLEU's
SETS = {
    "europarl_v7": WmtSet(
        "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
        "sha256:0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
        {lang: f"training/europarl-v7.de-en.{lang}" for lang in LANGUAGES},
    ),
    "commoncrawl": WmtSet(
        "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        "sha256:c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
        {lang: f"commoncrawl.de-en.{lang}" for lang in LANGUAGES},
    ),
    "news_commentary_v9": WmtSet(
        "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
        "sha256:cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485",
        {lang: f"training/news-commentary-v9.de-en.{lang}" for lang in LANGUAGES},
    ),
    "newstest2013": WmtSet(  # sacreBLEU's wmt13: the same two files in both directions
        "https://statmt.org/wmt13/test.tgz",
        "md5:48eca5d02f637af44e85186847141f67",
        {lang: f"test/newstest2013-src.{lang}.sgm" for lang in LANGUAGES},
    ),
    # sacreBLEU's wmt14/full, whose source and reference files differ by direction, as its langpairs list them
    "newstest2014_en_de": WmtSet(
        *_TEST_FULL, {"en": "test-full/newstest2014-deen-src.en.sgm", "de": "test-full/newstest2014-deen-ref.de.sgm"}
    ),
    "newstest2014_de_en": WmtSet(
        *_TEST_FULL, {"de": "test-full/newstest2014-deen-src.de.sgm", "en": "test-full/newstest2014-deen-ref.en.sgm"}
    ),
}
TRAIN_SETS = ("europarl_v7", "commoncrawl", "news_commentary_v9")  # the paper's training corpora, in this order


def sgml_lines(data: bytes) -> bytes:
    """The text of each `<seg>` of a WMT SGML file, one a line, whitespace collapsed (sacreBLEU's conversion)."""
    lines = []
    for line in data.decode("utf-8").split("\n"):
        if line.startswith("<seg "):
            lines.append(" ".join(re.sub(r"<seg.*?>(.*)</seg>.*?", r"\1", line).split()))
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


def set_files(data_dir: str | os.PathLike, name: str) -> dict[str, Path]:
    """Language -> the extracted file of set `name` under `<data_dir>/wmt14_en_de/`."""
    return {lang: Path(data_dir) / FOLDER / f"{name}.{lang}" for lang in SETS[name].members}


def ensure_set(data_dir: str | os.PathLike, name: str, download: bool = True, mirror: str = "") -> dict[str, Path]:
    """`set_files(data_dir, name)`, fetched and extracted first unless every file is there.

    Args:
        data_dir: folder holding `wmt14_en_de/`.
        name: a key of `SETS`.
        download: fetch the archive when absent. Defaults to `True`.
        mirror: a URL (`https://`, `file://`) holding the archives under their upstream names, in place of their
            upstream URLs. Defaults to `""`: upstream.

    Raises:
        DataError: one line: the download failed (naming the URL and where to place the archive by hand), the
            archive's digest differs from the pinned one, or it lacks a file of the set.
    """
    wmt_set, files = SETS[name], set_files(data_dir, name)
    if all(path.exists() for path in files.values()):
        return files
    url = f"{mirror.rstrip('/')}/{wmt_set.archive}" if mirror else wmt_set.url
    archive = download_archive(url, Path(data_dir) / FOLDER / "archives" / wmt_set.archive, wmt_set.checksum, download)
    wanted = {member: lang for lang, member in wmt_set.members.items()}
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:  # one pass over the compressed stream, whatever order the files come in
                lang = wanted.pop(member.name, None)
                if lang is None or not member.isfile():
                    continue
                source = tar.extractfile(member)
                if member.name.endswith(".sgm"):
                    write_atomically(files[lang], sgml_lines(source.read()))
                else:  # the training corpora run to hundreds of MB: streamed, never whole
                    write_atomically(files[lang], lambda path, source=source: _copy(source, path))
                logger.info("extracted %s", files[lang])
    except (tarfile.TarError, OSError, EOFError, UnicodeDecodeError) as error:
        raise DataError(f"{archive}: cannot extract ({type(error).__name__}: {error}); delete it and rerun") from None
    if wanted:
        raise DataError(f"{archive} lacks {', '.join(sorted(wanted))}: not the archive of {wmt_set.url}")
    return files


def _copy(source, path):
    with open(path, "wb") as f:
        shutil.copyfileobj(source, f, 1 << 20)


def wmt14_en_de_files(
    data_dir: str | os.PathLike,
    source_lang: str = "en",
    target_lang: str = "de",
    train: tuple[str, ...] = TRAIN_SETS,
    download: bool = True,
    mirror: str = "",
) -> dict:
    """The files of WMT14 En-De in one direction, fetched and extracted first where absent (`ensure_set`).

    Args:
        data_dir: folder holding `wmt14_en_de/`.
        source_lang: "en" or "de". Defaults to `"en"`.
        target_lang: the other one. Defaults to `"de"`.
        train: the training corpora to make sure of, names in `TRAIN_SETS`. Defaults to all three.
        download: fetch absent archives. Defaults to `True`.
        mirror: a URL holding the archives under their upstream names. Defaults to `""`: upstream.

    Returns:
        `{"train": {corpus: (source file, target file)}, "val": (source, target), "test": (source, target)}`:
        val is newstest2013, test the full newstest2014.
    """
    if sorted((source_lang, target_lang)) != sorted(LANGUAGES):
        raise DataError(
            "wmt14_en_de translates en -> de or de -> en: set data.source_lang and data.target_lang to en and de. "
            f"Received: source_lang={source_lang!r}, target_lang={target_lang!r}"
        )
    unknown = [name for name in train if name not in TRAIN_SETS]
    if unknown:
        raise DataError(f"wmt14_en_de's training corpora are {', '.join(TRAIN_SETS)}. Received: {', '.join(unknown)}")

    def pair(name):
        files = ensure_set(data_dir, name, download, mirror)
        return files[source_lang], files[target_lang]

    return {
        "train": {name: pair(name) for name in train},
        "val": pair("newstest2013"),
        "test": pair(f"newstest2014_{source_lang}_{target_lang}"),
    }
