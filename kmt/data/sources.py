"""Real parallel corpora, read and validated before any training starts.

Three sources, each returning `{"train": ParallelText, "val": ..., "test": ...}`:

- `load_multi30k`: Multi30k Task 1 (Flickr30k captions, en/de/fr/cs), fetched from its GitHub repository if absent
  (`$KMT_MULTI30K_URL`, when set, names another copy of that repository: a mirror, or a `file://` folder laid out as
  it is, with `data/task1/raw/*.gz` and `data/task1/tok/*`).
- `load_spa_eng`: the Tatoeba English-Spanish file of the Keras and TensorFlow tutorials, split by unique English
  sentence so that no source sentence of the test set was seen in training.
- `load_parallel`: any pair of line-aligned UTF-8 files per split.

(WMT14 En-De lives in `kmt.data.wmt14`.) `mix_corpora` makes one training split of several corpora, each weighted.

Every user mistake (missing or empty file, invalid UTF-8, files that do not line up, an unknown language) raises
`DataError` with one line naming the file, and the line number where there is one. Empty lines are kept here:
the pipeline filters and counts them later.

Example:

>>> corpus = load_multi30k("data", "en", "de")  # doctest: +SKIP
>>> len(corpus["train"]), corpus["train"].source[0]  # doctest: +SKIP
(29000, 'Two young, White males are outside near many bushes.')
"""

import dataclasses
import gzip
import io
import logging
import os
import random
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from kmt.data.download import ensure
from kmt.errors import DataError

logger = logging.getLogger(__name__)

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master"
MULTI30K_URL_VARIABLE = "KMT_MULTI30K_URL"  # overrides MULTI30K_URL, e.g. with a file:// copy (tests, offline)
MULTI30K_LANGUAGES = ("en", "de", "fr", "cs")
# kmt split name -> Multi30k file stem: test is the standard "test2016" (sacreBLEU multi30k/2016).
MULTI30K_SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}

SPA_ENG_URL = "http://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip"
# The zip holds spa-eng/spa.txt and spa-eng/_about.txt; the latter carries the CC BY 2.0 attribution that must
# stay next to the data, so it is extracted too.

SPLITS = ("train", "val", "test")
_BOM = "\ufeff"


@dataclasses.dataclass(frozen=True)
class ParallelText:
    """Line-aligned source and target sentences, with the files they came from (for error messages).

    Args:
        source: source sentences.
        target: target sentences, `target[i]` translating `source[i]`.
        source_path: file the sources were read from. Defaults to `"<generated>"`.
        target_path: file the targets were read from. Defaults to `"<generated>"`.
    """

    source: list[str]
    target: list[str]
    source_path: str = "<generated>"
    target_path: str = "<generated>"

    def __post_init__(self):
        if len(self.source) != len(self.target):
            raise DataError(
                f"{self.source_path} has {len(self.source)} lines but {self.target_path} has "
                f"{len(self.target)}; parallel files must line up one to one"
            )

    def __len__(self) -> int:
        return len(self.source)


def read_lines(path: str | os.PathLike) -> list[str]:
    """Read a UTF-8 text file, one stripped string per line (TABs inside a line are kept).

    Lines are split on "\\n" only, so a stray "\\r", "\\x85" or "\\u2028" inside a sentence cannot shift the
    alignment with the other file; a leading byte-order mark is dropped.

    Raises:
        DataError: the file does not exist, cannot be read, is empty, or holds bytes that are not UTF-8.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file" if not path.exists() else f"{path}: not a regular file")
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error.strerror})") from None
    if not raw:
        raise DataError(f"{path}: file is empty")
    lines = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataError(
                f"{path} line {number}: not valid UTF-8 (byte 0x{line[error.start]:02x} at column {error.start + 1})"
            ) from None
        lines.append(text.strip())
    if raw.endswith(b"\n"):
        lines.pop()  # the final newline ends the last line; it does not start a new one
    if lines and lines[0].startswith(_BOM):
        lines[0] = lines[0][len(_BOM) :].strip()
    return lines


def read_parallel(source_path: str | os.PathLike, target_path: str | os.PathLike) -> ParallelText:
    """Read two line-aligned UTF-8 files into a `ParallelText`.

    Raises:
        DataError: either file is missing, empty or not UTF-8 (naming the line), or their line counts differ.
    """
    source, target = read_lines(source_path), read_lines(target_path)
    return ParallelText(source, target, str(source_path), str(target_path))


def multi30k_file(data_dir: str | os.PathLike, split: str, lang: str, tokenized: bool = False) -> Path:
    """Where Multi30k's `split` ("train", "val" or "test") in `lang` lives under `<data_dir>/multi30k/`: the raw
    `{stem}.{lang}`, or with `tokenized` the lowercased, Moses-tokenized `tok/{stem}.lc.norm.tok.{lang}`."""
    stem = MULTI30K_SPLITS[split]
    folder = Path(data_dir) / "multi30k"
    return folder / "tok" / f"{stem}.lc.norm.tok.{lang}" if tokenized else folder / f"{stem}.{lang}"


def multi30k_url() -> str:
    """The root of the upstream Multi30k repository: `$KMT_MULTI30K_URL` when set, else `MULTI30K_URL`."""
    return os.environ.get(MULTI30K_URL_VARIABLE) or MULTI30K_URL


def ensure_multi30k_file(
    data_dir: str | os.PathLike,
    split: str,
    lang: str,
    tokenized: bool = False,
    download: bool = True,
    url: str | None = None,
) -> Path:
    """`multi30k_file(data_dir, split, lang, tokenized)`, fetched first if absent: the raw file from
    `<url>/data/task1/raw/<file>.gz` (unpacked), the tokenized one from `<url>/data/task1/tok/<file>` (upstream keeps
    tok/ uncompressed). The file appears whole or not at all.

    Args:
        data_dir: folder holding `multi30k/`.
        split: "train", "val" or "test".
        lang: "en", "de", "fr" or "cs".
        tokenized: the lowercased, tokenized copy in `tok/` instead of the raw text. Defaults to `False`.
        download: fetch the file when absent. Defaults to `True`.
        url: root of the upstream repository (any `urllib` URL, `file://` included). Defaults to `multi30k_url()`.

    Raises:
        DataError: the file is absent and `download` is false, or fetching it failed (naming the URL and where to
            place the file by hand).
    """
    path = multi30k_file(data_dir, split, lang, tokenized)
    root = (url or multi30k_url()).rstrip("/")
    if tokenized:
        ensure(path, download, f"{root}/data/task1/tok/{path.name}", lambda data: {path: data})
    else:
        ensure(path, download, f"{root}/data/task1/raw/{path.name}.gz", lambda data: {path: gzip.decompress(data)})
    return path


def load_multi30k(
    data_dir: str | os.PathLike,
    source_lang: str,
    target_lang: str,
    download: bool = True,
    url: str | None = None,
    tokenized: bool = False,
) -> dict[str, ParallelText]:
    """Load Multi30k Task 1 from `<data_dir>/multi30k/`, downloading absent files (`ensure_multi30k_file`).

    Raw, cased text: `{train,val,test_2016_flickr}.{lang}`. With `tokenized`, the lowercased, punctuation-normalized,
    Moses-tokenized copies that published systems train and score on: `tok/{stem}.lc.norm.tok.{lang}`.

    Args:
        data_dir: folder holding `multi30k/`.
        source_lang: one of "en", "de", "fr", "cs".
        target_lang: one of "en", "de", "fr", "cs", different from `source_lang`.
        download: fetch absent files from `url`. Defaults to `True`.
        url: root of the upstream repository (any `urllib` URL, `file://` included). Defaults to `multi30k_url()`:
            `$KMT_MULTI30K_URL` when set, else `MULTI30K_URL`.
        tokenized: read the lowercased, tokenized copies in `tok/` instead of the raw text. Defaults to `False`.

    Returns:
        `{"train": 29000 pairs, "val": 1014 pairs, "test": 1000 pairs}` for the real corpus.
    """
    for name, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        if lang not in MULTI30K_LANGUAGES:
            raise DataError(f"{name} must be one of {', '.join(MULTI30K_LANGUAGES)}. Received: {name}={lang!r}")
    if source_lang == target_lang:
        raise DataError(
            f"source_lang and target_lang must differ. Received: source_lang={source_lang!r}, "
            f"target_lang={target_lang!r}"
        )
    return {
        split: read_parallel(
            *(
                ensure_multi30k_file(data_dir, split, lang, tokenized, download, url)
                for lang in (source_lang, target_lang)
            )
        )
        for split in MULTI30K_SPLITS
    }


def load_spa_eng(
    data_dir: str | os.PathLike,
    seed: int = 1234,
    val_size: int = 2000,
    test_size: int = 2000,
    download: bool = True,
    url: str = SPA_ENG_URL,
    source_lang: str = "en",
    target_lang: str = "es",
) -> dict[str, ParallelText]:
    """Load the Tatoeba English-Spanish pairs from `<data_dir>/spa-eng/spa.txt`, split by unique English sentence.

    The sorted unique English sentences are shuffled with `random.Random(seed)`; the first `val_size` go to val,
    the next `test_size` to test, the rest to train, and every pair follows its English sentence, so an English
    sentence with several translations never sits in two splits. Pairs keep their file order within a split. The
    split is the same in both directions: `source_lang="es"` only swaps the sides.

    Args:
        data_dir: folder holding `spa-eng/`.
        seed: seed of the shuffle. Defaults to `1234`.
        val_size: number of unique English sentences in val. Defaults to `2000`.
        test_size: number of unique English sentences in test. Defaults to `2000`.
        download: fetch `spa-eng.zip` from `url` when `spa.txt` is absent. Defaults to `True`.
        url: address of the zip, member `spa-eng/spa.txt`. Defaults to `SPA_ENG_URL`.
        source_lang: "en" or "es". Defaults to `"en"`.
        target_lang: the other one. Defaults to `"es"`.
    """
    if sorted((source_lang, target_lang)) != ["en", "es"]:
        raise DataError(
            "spa_eng translates en -> es or es -> en: set data.source_lang and data.target_lang to en and es. "
            f"Received: source_lang={source_lang!r}, target_lang={target_lang!r}"
        )
    folder = Path(data_dir) / "spa-eng"
    path = folder / "spa.txt"

    def unzip(data: bytes) -> dict[Path, bytes]:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            files = {path: archive.read("spa-eng/spa.txt")}  # KeyError if absent: reported as a failed download
            if "spa-eng/_about.txt" in archive.namelist():
                files[folder / "_about.txt"] = archive.read("spa-eng/_about.txt")
            return files

    ensure(path, download, url, unzip)
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) < 2:
            raise DataError(f"{path} line {number}: expected 'English<TAB>Spanish', found {len(fields)} field(s)")
        pairs.append((fields[0].strip(), fields[1].strip()))

    english = sorted({source for source, _ in pairs})
    if min(val_size, test_size) < 0 or val_size + test_size >= len(english):
        raise DataError(
            f"{path} has {len(english)} unique English sentences, too few for the held-out sets. "
            f"Received: val_size={val_size}, test_size={test_size}"
        )
    random.Random(seed).shuffle(english)
    split_of = {sentence: "val" for sentence in english[:val_size]}
    split_of.update({sentence: "test" for sentence in english[val_size : val_size + test_size]})
    columns = {split: ([], []) for split in SPLITS}
    for source, target in pairs:
        sources, targets = columns[split_of.get(source, "train")]
        sources.append(source)
        targets.append(target)
    if source_lang == "es":
        columns = {split: (targets, sources) for split, (sources, targets) in columns.items()}
    return {split: ParallelText(*columns[split], str(path), str(path)) for split in SPLITS}


def load_parallel(
    paths: Mapping[str, Sequence[str] | None], required: Sequence[str] = ("train", "val")
) -> dict[str, ParallelText]:
    """Load user-supplied line-aligned files: `{"train": (src, tgt), "val": (src, tgt), "test": (src, tgt)}`.

    A split outside `required` may be absent or `None`, and is then absent from the result.

    Args:
        paths: split -> (source file, target file).
        required: the splits that must be given. Defaults to `("train", "val")` (train comes from elsewhere when
            `data.train_corpora` lists several corpora).

    Raises:
        DataError: an unknown split, a missing train or val, a value that is not a (source, target) pair, or any
            error of `read_parallel`.
    """
    unknown = sorted(set(paths) - set(SPLITS))
    if unknown:
        raise DataError(f"data paths must use the splits {', '.join(SPLITS)}. Received: {', '.join(unknown)}")
    corpus = {}
    for split in SPLITS:
        pair = paths.get(split)
        if pair is None:
            if split not in required:
                continue
            raise DataError(f"data paths need a (source, target) pair for {split}. Received: {split}=None")
        if isinstance(pair, (str, bytes)) or len(pair) != 2:
            raise DataError(f"data paths need a (source, target) pair for {split}. Received: {split}={pair!r}")
        corpus[split] = read_parallel(*pair)
    return corpus


def mix_corpora(parts: Mapping[str, tuple[ParallelText, float]], seed: int = 1234) -> ParallelText:
    """Several training corpora as one, each weighted: corpus `name` of `n` pairs contributes `round(weight * n)`.

    A weight of 1 takes every pair once; 2 takes every pair twice (up-sampling a small in-domain corpus, fairseq's
    `--upsample-primary`, Marian's and OpenNMT's data weights); 0.5 takes half the pairs, drawn without replacement;
    2.5 every pair twice plus half of them once more. The chosen pairs of all corpora are then shuffled together, so
    that any prefix (`data.limit`) holds each corpus in its share. All draws come from `random.Random(seed)`: the same
    seed and corpora, the same pairs in the same order. The number of pairs each corpus contributed is logged.

    Args:
        parts: corpus name -> (its pairs, its weight > 0), in a fixed order.
        seed: seed of the draws and the shuffle. Defaults to `1234`.

    Returns:
        The mixed pairs; their `source_path` and `target_path` list the corpora's files.

    Raises:
        DataError: a weight that is not positive, naming the corpus.
    """
    rng = random.Random(seed)
    pairs = []
    for name, (text, weight) in parts.items():
        if not weight > 0:
            raise DataError(f"the weight of training corpus {name} must be positive. Received: {weight}")
        whole, fraction = divmod(weight, 1.0)
        size = len(text)
        chosen = list(range(size)) * int(whole) + sorted(rng.sample(range(size), round(fraction * size)))
        pairs += [(text.source[i], text.target[i]) for i in chosen]
        logger.info("training corpus %s: %d pairs x weight %g -> contributed %d pairs", name, size, weight, len(chosen))
    rng.shuffle(pairs)
    logger.info("mixed %d training pairs from %d corpora", len(pairs), len(parts))
    return ParallelText(
        [source for source, _ in pairs],
        [target for _, target in pairs],
        ", ".join(text.source_path for text, _ in parts.values()),
        ", ".join(text.target_path for text, _ in parts.values()),
    )
