"""data=wmt14_en_de from a file:// mirror of tiny archives laid out as upstream's: fetched, checked, resumed, not
fetched twice, extracted to line-aligned text; several training corpora mixed by weight; kmt-prepare end to end."""

import dataclasses
import hashlib
import http.server
import io
import json
import sys
import tarfile
import threading
from collections import Counter

import pytest

from kmt.data import load_corpus, wmt14
from kmt.data.download import download_archive
from kmt.data.sources import ParallelText, mix_corpora
from kmt.errors import ConfigError, DataError
from tests.helpers import compose_config, run_cli

SIZES = {"europarl_v7": 5, "commoncrawl": 4, "news_commentary_v9": 3, "newstest2013": 3, "newstest2014": 2}


def pairs(name, count):
    return [(f"the {name} sentence number {i}", f"der {name} Satz Nummer {i}") for i in range(count)]


def plain(lines):
    return "".join(f"{line}\n" for line in lines).encode()


def sgml(lines):
    segments = "".join(f'<seg id="{i}">  {line} </seg>\n' for i, line in enumerate(lines, start=1))
    header = '<srcset setid="x" srclang="any">\n<doc docid="d" genre="news" origlang="en">\n<p>\n'
    return f"{header}{segments}</p>\n</doc>\n</srcset>\n".encode()


def write_tgz(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def sides(name):
    text = pairs(name, SIZES[name])
    return {"en": [en for en, _ in text], "de": [de for _, de in text]}


@pytest.fixture
def mirror(tmp_path):
    """A folder of tiny archives under upstream's names and layouts; returns `(its file:// URL, SETS pinned to their
    SHA-256)`."""
    folder = tmp_path / "mirror"
    folder.mkdir()
    archives = {}
    for name in wmt14.TRAIN_SETS:
        members = {wmt14.SETS[name].members[lang]: plain(lines) for lang, lines in sides(name).items()}
        archives[wmt14.SETS[name].archive] = members
    archives["test.tgz"] = {
        f"test/newstest2013-src.{lang}.sgm": sgml(lines) for lang, lines in sides("newstest2013").items()
    }
    test = sides("newstest2014")
    archives["test-full.tgz"] = {
        "test-full/newstest2014-deen-src.en.sgm": sgml(test["en"]),
        "test-full/newstest2014-deen-ref.de.sgm": sgml(test["de"]),
        "test-full/newstest2014-deen-src.de.sgm": sgml(test["de"]),
        "test-full/newstest2014-deen-ref.en.sgm": sgml(test["en"]),
    }
    for archive, members in archives.items():
        write_tgz(folder / archive, members)
    digest = lambda archive: hashlib.sha256((folder / archive).read_bytes()).hexdigest()  # noqa: E731
    sets = {name: dataclasses.replace(s, checksum=f"sha256:{digest(s.archive)}") for name, s in wmt14.SETS.items()}
    return folder.as_uri(), sets


def test_the_sets_are_fetched_from_the_mirror_and_extracted_to_line_aligned_text(tmp_path, mirror, monkeypatch):
    url, sets = mirror
    monkeypatch.setattr(wmt14, "SETS", sets)
    files = wmt14.wmt14_en_de_files(tmp_path / "data", mirror=url)
    for name in wmt14.TRAIN_SETS:
        source, target = files["train"][name]
        assert source.read_text() == plain(sides(name)["en"]).decode() and target.name == f"{name}.de"
    assert files["val"][1].read_text().splitlines() == sides("newstest2013")["de"]  # <seg> text, spaces collapsed
    assert [path.name for path in files["test"]] == ["newstest2014_en_de.en", "newstest2014_en_de.de"]
    reverse = wmt14.wmt14_en_de_files(tmp_path / "data", "de", "en", mirror=url)
    assert reverse["test"][0].read_text().splitlines() == sides("newstest2014")["de"]
    archives = tmp_path / "data" / "wmt14_en_de" / "archives"
    assert sorted(path.name for path in archives.iterdir()) == sorted({s.archive for s in sets.values()})  # no .part


def test_extracted_sets_are_not_fetched_again(tmp_path, mirror, monkeypatch):
    url, sets = mirror
    monkeypatch.setattr(wmt14, "SETS", sets)
    wmt14.wmt14_en_de_files(tmp_path / "data", mirror=url)
    for archive in (tmp_path / "data" / "wmt14_en_de" / "archives").iterdir():
        archive.unlink()
    files = wmt14.wmt14_en_de_files(tmp_path / "data", mirror=(tmp_path / "nowhere").as_uri(), download=False)
    assert files["val"][0].read_text().splitlines() == sides("newstest2013")["en"]


def test_an_archive_that_does_not_match_its_checksum_is_one_line_and_deleted(tmp_path, mirror):
    url, _ = mirror  # the digests pinned in kmt are upstream's, not the tiny archives'
    with pytest.raises(DataError) as error:
        wmt14.ensure_set(tmp_path / "data", "europarl_v7", mirror=url)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{url}/training-parallel-europarl-v7.tgz: sha256 ")
    assert "differs from the expected 0224c7c710c8a063" in message and "by hand" in message
    assert not list((tmp_path / "data" / "wmt14_en_de" / "archives").iterdir())


def test_a_failed_download_names_the_url_and_where_to_place_the_archive(tmp_path):
    nowhere = (tmp_path / "nowhere").as_uri()
    with pytest.raises(DataError) as error:
        wmt14.ensure_set(tmp_path / "data", "news_commentary_v9", mirror=nowhere)
    archives = tmp_path / "data" / "wmt14_en_de" / "archives"
    assert str(error.value).startswith(f"could not download {nowhere}/training-parallel-nc-v9.tgz (")
    assert str(error.value).endswith(f"place training-parallel-nc-v9.tgz in {archives} by hand")
    with pytest.raises(DataError, match="no such file .*by hand, or allow downloading"):
        wmt14.ensure_set(tmp_path / "data", "news_commentary_v9", download=False)


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves `payload`, honouring `Range: bytes=N-` with a 206; records the ranges asked for."""

    payload, ranges = b"", []

    def do_GET(self):  # noqa: N802
        asked = self.headers.get("Range")
        self.ranges.append(asked)
        start = int(asked.removeprefix("bytes=").rstrip("-")) if asked else 0
        self.send_response(206 if asked else 200)
        self.send_header("Content-Length", str(len(self.payload) - start))
        self.end_headers()
        self.wfile.write(self.payload[start:])

    def log_message(self, *args):
        pass


def test_a_download_cut_short_continues_where_it_stopped_or_restarts_cleanly(tmp_path):
    payload = bytes(range(256)) * 40
    checksum = f"md5:{hashlib.md5(payload).hexdigest()}"
    RangeHandler.payload, RangeHandler.ranges = payload, []
    server = http.server.HTTPServer(("127.0.0.1", 0), RangeHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = tmp_path / "a.tgz"
        (tmp_path / "a.tgz.part").write_bytes(payload[:3000])  # what a dropped connection left
        download_archive(f"http://127.0.0.1:{server.server_port}/a.tgz", path, checksum)
    finally:
        server.shutdown()
    assert RangeHandler.ranges == ["bytes=3000-"] and path.read_bytes() == payload
    upstream = tmp_path / "upstream.tgz"  # file:// sends the whole file: the part is started over
    upstream.write_bytes(payload)
    (tmp_path / "b.tgz.part").write_bytes(b"garbage left by a different file")
    download_archive(upstream.as_uri(), tmp_path / "b.tgz", checksum)
    assert (tmp_path / "b.tgz").read_bytes() == payload and not (tmp_path / "b.tgz.part").exists()


def text(name, size):
    return ParallelText([f"{name} {i}" for i in range(size)], [f"{name} {i}" for i in range(size)])


def test_each_corpus_contributes_weight_times_its_pairs_shuffled_with_the_seed(caplog):
    parts = {"big": (text("big", 10), 1.0), "small": (text("small", 4), 2.5), "noisy": (text("noisy", 6), 0.5)}
    with caplog.at_level("INFO", logger="kmt.data.sources"):
        mixed = mix_corpora(parts, seed=7)
    counts = Counter(line.split()[0] for line in mixed.source)
    assert counts == {"big": 10, "small": 10, "noisy": 3}  # 10 x 1, 4 x 2.5, 6 x 0.5
    small = Counter(line for line in mixed.source if line.startswith("small"))
    assert sorted(small.values()) == [2, 2, 3, 3]  # every pair twice, half of them once more
    assert len(set(line for line in mixed.source if line.startswith("noisy"))) == 3  # drawn without replacement
    assert mixed.source == mixed.target  # pairs stay pairs
    assert "training corpus small: 4 pairs x weight 2.5 -> contributed 10 pairs" in caplog.text
    again, other = mix_corpora(parts, seed=7), mix_corpora(parts, seed=8)
    assert again.source == mixed.source and other.source != mixed.source
    assert sorted(mix_corpora({"one": (text("one", 5), 1.0)}).source) == sorted(text("one", 5).source)
    with pytest.raises(DataError, match="weight of training corpus big must be positive. Received: 0"):
        mix_corpora({"big": (text("big", 3), 0.0)})


def write_side_files(directory, name, count):
    for lang in ("en", "de"):
        (directory / f"{name}.{lang}").write_text(plain(sides_of(name, count)[lang]).decode())
    return directory / f"{name}.en", directory / f"{name}.de"


def sides_of(name, count):
    return {"en": [en for en, _ in pairs(name, count)], "de": [de for _, de in pairs(name, count)]}


def test_data_parallel_takes_several_weighted_training_corpora(tmp_path):
    first, second, val = (write_side_files(tmp_path, name, 6) for name in ("first", "second", "val"))
    corpora = f"[{{source: {first[0]}, target: {first[1]}, weight: 2}}, {{source: {second[0]}, target: {second[1]}}}]"
    cfg = compose_config(
        "data=parallel", f"data.val.source={val[0]}", f"data.val.target={val[1]}", f"data.train={corpora}"
    )  # data.train=[...] is data.train_corpora=[...] (kmt.config.aliased)
    assert cfg.data.train_corpora[0].weight == 2 and cfg.data.train.source is None
    corpus = load_corpus(cfg.data)
    assert sorted(corpus) == ["train", "val"] and len(corpus["train"]) == 18 and len(corpus["val"]) == 6
    assert Counter(line.split()[1] for line in corpus["train"].source) == {"first": 12, "second": 6}


def test_the_override_data_train_takes_a_list_and_leaves_the_other_forms_alone():
    from kmt.config import aliased

    assert aliased(["data.train=[{source: a, target: b}]", "++data.train=[]", "data.train.source=a"]) == [
        "data.train_corpora=[{source: a, target: b}]",
        "++data.train_corpora=[]",
        "data.train.source=a",
    ]
    assert aliased(["data.train={source: a, target: b}", "hydra.job.name=data.train=[x]"]) == [
        "data.train={source: a, target: b}",
        "hydra.job.name=data.train=[x]",
    ]


@pytest.mark.e2e
def test_kmt_train_on_two_weighted_corpora_logs_what_each_contributed_and_exports(tmp_path):
    news, web, val = (
        write_side_files(tmp_path, name, count) for name, count in [("news", 40), ("web", 30), ("dev", 8)]
    )
    corpora = (
        f"[{{name: news, source: {news[0]}, target: {news[1]}, weight: 2}}, "
        f"{{name: web, source: {web[0]}, target: {web[1]}, weight: 0.5}}]"
    )
    run = tmp_path / "run"
    result = run_cli(
        "train",
        "data=parallel",
        "debug=smoke",
        f"data.train={corpora}",
        f"data.val.source={val[0]}",
        f"data.val.target={val[1]}",
        "data.tokenizer.vocab_size=120",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = (run / "train.log").read_text()
    assert "training corpus news: 40 pairs x weight 2 -> contributed 80 pairs" in log
    assert "training corpus web: 30 pairs x weight 0.5 -> contributed 15 pairs" in log
    assert json.loads((run / "data" / "meta.json").read_text())["splits"]["train"]["pairs"] == 95
    assert (run / "export" / "saved_model.pb").is_file() and "train_corpora" in (run / "config.yaml").read_text()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            [
                "data=parallel",
                "data.train_corpora=[{source: a, target: b, weight: 0}]",
                "data.val.source=c",
                "data.val.target=d",
            ],
            r"data.train_corpora\[0\].weight must be positive. Received: 0.0",
        ),
        (
            ["data=parallel", "data.train_corpora=[{source: a}]", "data.val.source=c", "data.val.target=d"],
            r"set data.train_corpora\[0\].source and .target",
        ),
        (["data=multi30k", "data.train_corpora=[{source: a, target: b}]"], "applies to data=parallel and data=wmt14"),
        (["data=wmt14_en_de", "data.train_corpora=[{name: europarl_v7, source: a}]"], "are named, not given files"),
        (
            ["data=wmt14_en_de", "data.train_corpora=[{name: commoncrawl}, {name: commoncrawl}]"],
            "twice .*: commoncrawl",
        ),
        (
            ["data=wmt14_en_de", "data.train_corpora=[{name: europarl_v7, weight: 2}]"],
            r"weight=2.0 repeats pairs that data.clean.deduplicate=true would drop again",
        ),
    ],
)
def test_mistaken_training_corpora_are_refused_in_one_line(overrides, message):
    from kmt.config import validate

    with pytest.raises(ConfigError, match=message):
        validate(compose_config(*overrides))


def test_kmt_prepare_data_wmt14_en_de_runs_from_the_mirror(tmp_path, mirror, monkeypatch):
    from kmt.cli import prepare

    url, sets = mirror
    monkeypatch.setattr(wmt14, "SETS", sets)  # the digests of the tiny archives, in this process
    out = tmp_path / "prepared"
    weights = "[{name: europarl_v7, weight: 2}, {name: commoncrawl}, {name: news_commentary_v9}]"
    argv = ["data=wmt14_en_de", "debug=smoke", f"data.dir={tmp_path / 'data'}", f"data.mirror={url}"]
    argv.append("data.clean.deduplicate=false")  # it would drop the repeats a weight of 2 makes (refused with one)
    monkeypatch.setattr(sys, "argv", ["kmt-prepare", *argv, f"data.train={weights}", f"hydra.run.dir={out}"])
    prepare.main()
    meta = json.loads((out / "meta.json").read_text())
    assert {name: entry["pairs"] for name, entry in meta["splits"].items()} == {"train": 17, "val": 3, "test": 2}
    log = (out / "prepare.log").read_text()
    assert "training corpus europarl_v7: 5 pairs x weight 2 -> contributed 10 pairs" in log


def test_kmt_prepare_refuses_an_archive_with_the_wrong_checksum_in_one_line(tmp_path, mirror):
    url, _ = mirror
    result = run_cli(
        "prepare",
        "data=wmt14_en_de",
        "debug=smoke",
        f"data.dir={tmp_path}",
        f"data.mirror={url}",
        f"hydra.run.dir={tmp_path / 'out'}",
    )
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {url}/training-parallel-europarl-v7.tgz: sha256 ") and "by hand" in last


@pytest.mark.e2e
def test_the_base_recipe_runs_end_to_end_on_the_mirror(tmp_path, mirror, monkeypatch):
    """experiment=wmt14_en_de_base debug=smoke: fetch, clean, prepare, train by updates with checkpoints inside the
    epochs, average the last two, export and score the test set."""
    from kmt.cli import train

    url, sets = mirror
    monkeypatch.setattr(wmt14, "SETS", sets)  # the digests of the tiny archives, in this process
    run = tmp_path / "run"
    argv = [
        "experiment=wmt14_en_de_base",
        "debug=smoke",
        f"data.dir={tmp_path / 'data'}",
        f"data.mirror={url}",
        "data.max_tokens=128",  # a few batches an epoch from 17 pairs
        "data.bucket_width=1",
        "optim.gradient_accumulation_steps=1",
        "trainer.epochs=2",
        "trainer.save_every_updates=2",
        "trainer.average_last=2",
        f"hydra.run.dir={run}",
    ]
    monkeypatch.setattr(sys, "argv", ["kmt-train", *argv])
    train.main()
    updates = sorted(path.name for path in (run / "checkpoints").glob("update_*.weights.h5"))
    assert len(updates) >= 2, updates
    assert (run / "checkpoints" / "average_last2.weights.h5").is_file()
    assert (run / "export" / "saved_model.pb").is_file()
    meta = json.loads((run / "data" / "meta.json").read_text())
    assert {"length_ratio", "duplicate", "identical"} <= set(meta["splits"]["train"]["dropped"])
    assert json.loads((run / "metrics.json").read_text())["test"]["pairs"] == 2
