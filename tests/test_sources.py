"""Tests of kmt.data.sources: reading and validating real corpora, and fetching them (through file:// URLs)."""

import gzip
import io
import os
import zipfile
from pathlib import Path

import pytest

from kmt.data.sources import (
    MULTI30K_URL,
    ParallelText,
    ensure_multi30k_file,
    load_multi30k,
    load_parallel,
    load_spa_eng,
    multi30k_url,
    read_parallel,
)
from kmt.errors import DataError

DATA_DIR = os.environ.get("KMT_DATA_DIR")
needs_real_data = pytest.mark.skipif(not DATA_DIR, reason="set KMT_DATA_DIR to the folder holding multi30k/, spa-eng/")


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def raises_one_line(*names, call):
    """Run `call`, expect a DataError, check its message is one line naming every one of `names`; return it."""
    with pytest.raises(DataError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    for name in names:
        assert str(name) in message, message
    return message


# read_parallel


def test_reads_aligned_files_and_strips_only_line_ends_and_outer_whitespace(tmp_path):
    source = write(tmp_path / "a.en", "  Two dogs.  \nA man in \tred.\n\nEnd\n")
    target = write(tmp_path / "a.de", "Zwei Hunde.\nEin Mann in\tRot.\n\nEnde")  # no final newline
    text = read_parallel(source, target)
    assert text.source == ["Two dogs.", "A man in \tred.", "", "End"]  # TAB kept, empty line kept
    assert text.target == ["Zwei Hunde.", "Ein Mann in\tRot.", "", "Ende"]
    assert len(text) == 4 and text.source_path == str(source) and text.target_path == str(target)


def test_crlf_line_endings(tmp_path):
    source = write(tmp_path / "a.en", "one\r\ntwo\r\n")
    target = write(tmp_path / "a.de", "eins\r\nzwei\r\n")
    assert read_parallel(source, target) == ParallelText(["one", "two"], ["eins", "zwei"], str(source), str(target))


def test_unicode_line_separators_inside_a_sentence_do_not_split_it(tmp_path):
    source = write(tmp_path / "a.en", "a\u2028b\x85c\rd\nnext\n")
    target = write(tmp_path / "a.de", "x\ny\n")
    assert read_parallel(source, target).source == ["a\u2028b\x85c\rd", "next"]


def test_byte_order_mark_is_dropped(tmp_path):
    text = read_parallel(write(tmp_path / "a.en", "\ufeffHello\n"), write(tmp_path / "a.de", "Hallo\n"))
    assert text.source == ["Hello"]


def test_missing_file_names_it(tmp_path):
    target = write(tmp_path / "a.de", "x\n")
    raises_one_line(tmp_path / "nope.en", call=lambda: read_parallel(tmp_path / "nope.en", target))


def test_empty_file_names_it(tmp_path):
    source, target = write(tmp_path / "a.en", "x\n"), write(tmp_path / "a.de", b"")
    assert "empty" in raises_one_line(target, call=lambda: read_parallel(source, target))


def test_invalid_utf8_names_file_line_byte_and_column(tmp_path):
    source = write(tmp_path / "train.en", "ok\nok\nok\n")
    target = write(tmp_path / "train.de", b"gut\r\ngut\r\nZwei M\xffnner\r\n")
    message = raises_one_line(target, call=lambda: read_parallel(source, target))
    assert message == f"{target} line 3: not valid UTF-8 (byte 0xff at column 7)"


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    source, target = write(tmp_path / "a.en", "1\n2\n3\n"), write(tmp_path / "a.de", "1\n2\n")
    message = raises_one_line(source, target, call=lambda: read_parallel(source, target))
    assert "3 lines" in message and "has 2" in message


# load_parallel


def test_load_parallel_with_and_without_test(tmp_path):
    files = {
        name: (write(tmp_path / f"{name}.src", "a\nb\n"), write(tmp_path / f"{name}.tgt", "c\nd\n"))
        for name in ("train", "val", "test")
    }
    assert {k: len(v) for k, v in load_parallel(files).items()} == {"train": 2, "val": 2, "test": 2}
    assert set(load_parallel({"train": files["train"], "val": files["val"]})) == {"train", "val"}
    assert set(load_parallel({**files, "test": None})) == {"train", "val"}


def test_load_parallel_rejects_bad_layouts(tmp_path):
    pair = (write(tmp_path / "a.src", "a\n"), write(tmp_path / "a.tgt", "b\n"))
    raises_one_line("dev", call=lambda: load_parallel({"train": pair, "val": pair, "dev": pair}))
    raises_one_line("val", call=lambda: load_parallel({"train": pair}))
    raises_one_line("train", "only-one", call=lambda: load_parallel({"train": "only-one", "val": pair}))


# load_multi30k


def fake_multi30k_upstream(root, sizes, langs=("en", "de")):
    """Lay out `root/data/task1/raw/<name>.<lang>.gz` as the Multi30k repository does."""
    for name, size in sizes.items():
        for lang in langs:
            lines = "".join(f"{lang} caption {i}\n" for i in range(size))
            write(root / "data" / "task1" / "raw" / f"{name}.{lang}.gz", gzip.compress(lines.encode()))
    return root.as_uri()


def test_multi30k_downloads_through_file_url_and_then_reads_locally(tmp_path):
    url = fake_multi30k_upstream(tmp_path / "upstream", {"train": 5, "val": 3, "test_2016_flickr": 2})
    corpus = load_multi30k(tmp_path / "data", "de", "en", url=url)
    assert {k: len(v) for k, v in corpus.items()} == {"train": 5, "val": 3, "test": 2}
    assert corpus["val"].source[2] == "de caption 2" and corpus["val"].target[2] == "en caption 2"
    folder = tmp_path / "data" / "multi30k"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"{n}.{lang}" for n in ("train", "val", "test_2016_flickr") for lang in ("en", "de")
    )  # no temporary files left
    again = load_multi30k(tmp_path / "data", "de", "en", download=False, url="file:///nowhere")
    assert again == corpus


def test_multi30k_tokenized_reads_the_tok_copies(tmp_path):
    upstream = tmp_path / "upstream" / "data" / "task1" / "tok"
    for stem, size in {"train": 4, "val": 2, "test_2016_flickr": 3}.items():
        for lang in ("en", "fr"):
            write(upstream / f"{stem}.lc.norm.tok.{lang}", "".join(f"{lang} &apos; tok {i}\n" for i in range(size)))
    corpus = load_multi30k(tmp_path / "data", "fr", "en", url=(tmp_path / "upstream").as_uri(), tokenized=True)
    assert {k: len(v) for k, v in corpus.items()} == {"train": 4, "val": 2, "test": 3}
    assert corpus["test"].source[1] == "fr &apos; tok 1" and corpus["test"].target[1] == "en &apos; tok 1"
    assert corpus["train"].source_path == str(tmp_path / "data" / "multi30k" / "tok" / "train.lc.norm.tok.fr")
    assert not list((tmp_path / "data" / "multi30k").glob("*.fr"))  # the raw files are neither needed nor fetched


@needs_real_data
def test_multi30k_tokenized_real_files_are_lowercased_and_aligned():
    corpus = load_multi30k(DATA_DIR, "en", "de", download=False, tokenized=True)
    assert {k: len(v) for k, v in corpus.items()} == {"train": 29000, "val": 1014, "test": 1000}
    assert all(line == line.lower() for line in corpus["val"].target)
    assert corpus["test"].target_path.endswith("tok/test_2016_flickr.lc.norm.tok.de")


def test_multi30k_upstream_is_kmt_multi30k_url_when_set(tmp_path, monkeypatch):
    monkeypatch.delenv("KMT_MULTI30K_URL", raising=False)
    assert multi30k_url() == MULTI30K_URL
    url = fake_multi30k_upstream(tmp_path / "upstream", {"train": 2, "val": 2, "test_2016_flickr": 1})
    monkeypatch.setenv("KMT_MULTI30K_URL", url + "/")
    assert multi30k_url() == url + "/"
    corpus = load_multi30k(tmp_path / "data", "en", "de")  # as kmt-train calls it: no url given
    assert corpus["test"].source == ["en caption 0"]


def test_multi30k_file_is_fetched_whole_or_not_at_all(tmp_path):
    url = fake_multi30k_upstream(tmp_path / "upstream", {"test_2016_flickr": 3})  # no tok/ upstream
    raw = ensure_multi30k_file(tmp_path / "data", "test", "de", url=url)
    assert raw == tmp_path / "data" / "multi30k" / "test_2016_flickr.de" and raw.read_text().count("\n") == 3
    assert ensure_multi30k_file(tmp_path / "data", "test", "de", download=False, url="file:///nowhere") == raw
    missing = f"{url}/data/task1/tok/test_2016_flickr.lc.norm.tok.de"
    raises_one_line(
        missing,
        "place test_2016_flickr.lc.norm.tok.de in",
        "by hand",
        call=lambda: ensure_multi30k_file(tmp_path / "data", "test", "de", tokenized=True, url=url),
    )
    assert sorted(path.name for path in (tmp_path / "data").rglob("*")) == ["multi30k", "test_2016_flickr.de"]


def test_multi30k_failed_download_names_the_url(tmp_path):
    url = fake_multi30k_upstream(tmp_path / "upstream", {"train": 5, "val": 3})  # no test_2016_flickr upstream
    missing = f"{url}/data/task1/raw/test_2016_flickr.en.gz"
    message = raises_one_line(missing, call=lambda: load_multi30k(tmp_path / "data", "en", "de", url=url))
    assert "by hand" in message
    assert not list((tmp_path / "data" / "multi30k").glob("test_2016_flickr*"))


def test_multi30k_not_a_gzip_file_is_a_failed_download(tmp_path):
    url = fake_multi30k_upstream(tmp_path / "upstream", {"train": 1, "val": 1, "test_2016_flickr": 1})
    write(tmp_path / "upstream" / "data" / "task1" / "raw" / "train.en.gz", b"not gzip")
    raises_one_line("train.en.gz", "by hand", call=lambda: load_multi30k(tmp_path / "data", "en", "de", url=url))


def test_multi30k_absent_without_download_names_the_path(tmp_path):
    expected = tmp_path / "multi30k" / "train.en"
    raises_one_line(expected, call=lambda: load_multi30k(tmp_path, "en", "de", download=False))


@pytest.mark.parametrize("source, target, bad", [("en", "xx", "'xx'"), ("EN", "de", "'EN'"), ("de", "de", "'de'")])
def test_multi30k_bad_languages_name_the_value(tmp_path, source, target, bad):
    raises_one_line(bad, call=lambda: load_multi30k(tmp_path, source, target, download=False))


# load_spa_eng

SPA_LINES = [
    ("Go.", "Ve."),
    ("Go.", "Vete."),
    ("Go.", "Váyase."),
    ("Hi.", "Hola."),
    ("Run!", "¡Corre!"),
    ("Run!", "¡Corran!"),
    ("Who?", "¿Quién?"),
    ("Wow!", "¡Órale!"),
    ("Fire!", "¡Fuego!"),
    ("Help!", "¡Ayuda!"),
    ("Jump.", "Salta."),
    ("Stop!", "¡Para!"),
    ("Wait!", "¡Espera!"),
    ("Wait!", "¡Esperen!"),
    ("Hello!", "¡Hola!"),
]


def spa_text(lines=SPA_LINES):
    attribution = "CC-BY 2.0 (France) Attribution: tatoeba.org #"
    return "".join(f"{en}\t{es}\t{attribution}{i}\n" for i, (en, es) in enumerate(lines))


def test_spa_eng_split_by_english_sentence_is_disjoint_complete_and_seeded(tmp_path):
    write(tmp_path / "spa-eng" / "spa.txt", spa_text())
    splits = load_spa_eng(tmp_path, seed=1, val_size=3, test_size=2, download=False)
    english = {name: set(text.source) for name, text in splits.items()}
    assert len(english["val"]) == 3 and len(english["test"]) == 2
    assert sum(len(s) for s in english.values()) == len(set().union(*english.values()))  # no sentence in two splits
    pairs = sorted(pair for text in splits.values() for pair in zip(text.source, text.target))
    assert pairs == sorted(SPA_LINES)  # every pair in exactly one split, attribution column dropped
    assert splits == load_spa_eng(tmp_path, seed=1, val_size=3, test_size=2, download=False)
    others = [load_spa_eng(tmp_path, seed=s, val_size=3, test_size=2, download=False)["val"] for s in range(2, 7)]
    assert any(other != splits["val"] for other in others)


def test_spa_eng_from_spanish_swaps_the_sides_of_the_same_split(tmp_path):
    write(tmp_path / "spa-eng" / "spa.txt", spa_text())
    forward = load_spa_eng(tmp_path, seed=1, val_size=3, test_size=2, download=False)
    backward = load_spa_eng(
        tmp_path, seed=1, val_size=3, test_size=2, download=False, source_lang="es", target_lang="en"
    )
    for split in ("train", "val", "test"):
        assert (backward[split].source, backward[split].target) == (forward[split].target, forward[split].source)


@pytest.mark.parametrize("source, target", [("en", "fr"), ("es", "es"), ("de", "en")])
def test_spa_eng_in_other_languages_is_a_one_line_error(tmp_path, source, target):
    write(tmp_path / "spa-eng" / "spa.txt", spa_text())
    raises_one_line(
        f"Received: source_lang={source!r}, target_lang={target!r}",
        call=lambda: load_spa_eng(
            tmp_path, val_size=3, test_size=2, download=False, source_lang=source, target_lang=target
        ),
    )


def test_spa_eng_config_takes_its_languages_and_a_saved_run_from_before_them_reads_as_english_spanish(tmp_path):
    from omegaconf import OmegaConf

    from helpers import compose_config
    from kmt.data import load_corpus
    from kmt.run_dir import RunDir

    write(tmp_path / "spa-eng" / "spa.txt", spa_text())
    sizes = [f"data.dir={tmp_path}", "data.num_val=3", "data.num_test=2", "data.download=false"]
    val = load_corpus(compose_config("data=spa_eng", *sizes).data)["val"]
    assert set(zip(val.source, val.target)) <= set(SPA_LINES)  # English -> Spanish by default
    raises_one_line(
        "target_lang='de'", call=lambda: load_corpus(compose_config("data=spa_eng", "data.target_lang=de", *sizes).data)
    )  # asked for now: refused
    saved = compose_config("data=spa_eng", *sizes)
    saved.data.target_lang = "de"  # what runs saved before data.source_lang/target_lang applied to spa_eng hold
    write(tmp_path / "run" / "config.yaml", OmegaConf.to_yaml(saved, resolve=True))
    data = RunDir(tmp_path / "run").read_config().data
    assert (data.source_lang, data.target_lang) == ("en", "es")


def test_spa_eng_line_with_one_field_names_file_and_line(tmp_path):
    path = write(tmp_path / "spa-eng" / "spa.txt", "Go.\tVe.\nHi. Hola.\n")
    raises_one_line(f"{path} line 2", call=lambda: load_spa_eng(tmp_path, val_size=0, test_size=0, download=False))


def test_spa_eng_too_few_sentences_for_held_out_sets(tmp_path):
    write(tmp_path / "spa-eng" / "spa.txt", spa_text())
    raises_one_line("val_size=10", call=lambda: load_spa_eng(tmp_path, val_size=10, test_size=2, download=False))


def test_spa_eng_downloads_the_zip_through_file_url(tmp_path):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("spa-eng/spa.txt", spa_text())
        zipped.writestr("spa-eng/_about.txt", "www.manythings.org/anki and tatoeba.org\n")
    url = write(tmp_path / "spa-eng.zip", archive.getvalue()).as_uri()
    splits = load_spa_eng(tmp_path / "data", val_size=2, test_size=2, url=url)
    assert sum(len(text) for text in splits.values()) == len(SPA_LINES)
    assert sorted(p.name for p in (tmp_path / "data" / "spa-eng").iterdir()) == ["_about.txt", "spa.txt"]


def test_spa_eng_zip_without_spa_txt_is_a_failed_download(tmp_path):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("other/file.txt", "x")
    url = write(tmp_path / "spa-eng.zip", archive.getvalue()).as_uri()
    raises_one_line(url, "by hand", call=lambda: load_spa_eng(tmp_path / "data", url=url))


# The real corpora (skipped unless KMT_DATA_DIR is set)


@needs_real_data
def test_real_multi30k_en_de():
    corpus = load_multi30k(DATA_DIR, "en", "de", download=False)
    assert {k: len(v) for k, v in corpus.items()} == {"train": 29000, "val": 1014, "test": 1000}
    assert "einer \tWasserfontäne." in corpus["train"].target[7365]  # the TAB at line 7366 stays in the sentence
    assert Path(corpus["test"].target_path).name == "test_2016_flickr.de"


@needs_real_data
def test_real_spa_eng_split_accounts_for_every_pair():
    splits = load_spa_eng(DATA_DIR, download=False)
    assert sum(len(text) for text in splits.values()) == 118_964
    english = {name: set(text.source) for name, text in splits.items()}
    assert len(english["val"]) == 2000 and len(english["test"]) == 2000
    assert sum(len(s) for s in english.values()) == len(set().union(*english.values())) == 102_904
