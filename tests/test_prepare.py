"""kmt-prepare: the prepared directory it writes, the vocabulary it reuses, files it streams, and the one-line
refusals of kmt-prepare and of kmt-train data=prepared."""

import json

import numpy as np
import pytest
from omegaconf import OmegaConf

from kmt.data.prepared import prepare_data
from kmt.data.shards import PreparedData
from kmt.errors import DataError
from kmt.tokenizer import Vocabularies
from tests.helpers import compose_config, run_cli


def write_pairs(directory, name, pairs):
    for side, index in (("en", 0), ("de", 1)):
        (directory / f"{name}.{side}").write_text("".join(f"{pair[index]}\n" for pair in pairs))


def prepared(cfg, directory, vocabularies=None):
    """`cfg`'s corpus prepared into `directory`, as kmt-prepare prepares it."""
    return prepare_data(cfg.data, cfg.model, directory, OmegaConf.to_yaml(cfg, resolve=True), vocabularies)


def parallel(directory, train=None):
    rng = np.random.default_rng(0)
    words = lambda: " ".join(rng.choice(["alpha", "beta", "gamma", "delta"], size=rng.integers(1, 6)))  # noqa
    write_pairs(directory, "train", train or [(words(), words()) for _ in range(200)])
    write_pairs(directory, "dev", [(words(), words()) for _ in range(20)])
    return [
        f"data.train.source={directory / 'train.en'}",
        f"data.train.target={directory / 'train.de'}",
        f"data.val.source={directory / 'dev.en'}",
        f"data.val.target={directory / 'dev.de'}",
    ]


def test_kmt_prepare_writes_shards_an_index_the_text_and_meta_json_last(prepared_smoke):
    out = prepared_smoke
    meta = json.loads((out / "meta.json").read_text())
    assert meta["format"] == "kmt-prepared/1" and meta["max_length"] == 128 and meta["id_dtype"] == "uint16"
    assert {name: entry["pairs"] for name, entry in meta["splits"].items()} == {"train": 300, "val": 40, "test": 40}
    data = PreparedData(out)
    train = data.split("train")
    assert train.offsets.shape == (301, 2) and train.offsets[-1, 1] == meta["splits"]["train"]["target_tokens"]
    text = train.text()
    assert train.pair(7)[1].tolist() == data.vocabularies.target.encode([text.target[text.kept[7]]])[0].tolist()
    assert (out / "tokenizer" / "joint.model").is_file() and (out / "config.yaml").is_file()
    assert "kmt-train data=prepared data.path=" in (out / "prepare.log").read_text()


def test_a_parallel_corpus_streams_and_a_vocabulary_is_reused(tmp_path):
    overrides = parallel(tmp_path)
    first = prepared(compose_config("data=parallel", *overrides, "data.tokenizer.vocab_size=300"), tmp_path / "a")
    again = prepared(compose_config("data=parallel", *overrides, f"data.vocabulary={tmp_path / 'a'}"), tmp_path / "b")
    assert again.vocabularies.same_as(first.vocabularies)
    assert len(again.split("train")) == 200 and again.names == ["train", "val"]  # no test files given
    assert np.array_equal(again.split("val").source_ids, first.split("val").source_ids)


def test_mismatched_streamed_files_and_a_missing_prepared_directory_are_one_line(tmp_path):
    overrides = parallel(tmp_path)
    (tmp_path / "train.de").write_text("one\ntwo\n")
    vocabularies = Vocabularies.train(["alpha beta", "gamma"], ["delta"], joint=True, vocab_size=300)
    with pytest.raises(DataError, match=r"train.en has 200 lines but .*train.de has 2"):
        prepared(compose_config("data=parallel", *overrides), tmp_path / "out", vocabularies)
    assert not (tmp_path / "out" / "meta.json").exists()  # unfinished: no meta.json, so never read as prepared
    with pytest.raises(DataError, match="is not prepared data: it has no meta.json"):
        PreparedData(tmp_path / "out")


@pytest.mark.parametrize(
    "args, message",
    [
        (["data=prepared"], "data=prepared needs data.path=DIR"),
        (["data=prepared", "data.path=/no/such/dir"], "/no/such/dir is not prepared data: it does not exist"),
        (["model.max_length=40"], "was prepared with model.max_length=128; set model.max_length=128"),
    ],
)
def test_training_from_prepared_data_refuses_mistakes_in_one_line(prepared_smoke, tmp_path, args, message):
    if "data=prepared" not in args:
        args = ["data=prepared", f"data.path={prepared_smoke}", *args]
    result = run_cli("train", "debug=smoke", *args, f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: ") and message in result.stderr


def test_kmt_prepare_refuses_prepared_data_as_its_corpus(tmp_path):
    result = run_cli(
        "prepare", "debug=smoke", "data=prepared", f"data.path={tmp_path}", f"hydra.run.dir={tmp_path / 'out'}"
    )
    assert result.returncode == 2 and "kmt-prepare reads a corpus" in result.stderr.strip().splitlines()[-1]
