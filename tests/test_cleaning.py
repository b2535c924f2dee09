"""Cleaning the training split (kmt.data.cleaning, data.clean): each rule drops exactly its pairs, counted per rule in
the log line and in meta.json, val and test kept whole; and through kmt-prepare on a crafted corpus."""

import json
import logging

import numpy as np
import pytest
from omegaconf import OmegaConf

from kmt.config import CleanConfig
from kmt.data.cleaning import Cleaner
from kmt.data.prepared import prepare_data
from kmt.data.shards import PreparedData, write_prepared
from kmt.errors import ConfigError, DataError
from kmt.tokenizer import Vocabularies
from tests.helpers import compose_config, run_cli

NORMAL = [(f"alpha {i} beta", f"gamma {i} delta") for i in range(40)]
OUTLIERS = {
    "empty": [("", "gamma"), ("alpha", "  ")],
    "too_long": [(" ".join(f"a{i}" for i in range(40)), " ".join(f"g{i}" for i in range(40)))],  # a ratio near 1
    "length_ratio": [("a", "g d g d g d g d g"), ("a b a b a b a b a", "d")],  # each letter a token at least
    "identical": [("alpha beta", "alpha beta")] * 3,  # the second and third are identical first, not duplicates
    "duplicate": NORMAL[:4] + NORMAL[:1],
}
MAX = 32  # model.max_length: the tiny vocabulary spells these words nearly letter by letter
CLEAN = CleanConfig(max_length_ratio=3, deduplicate=True, drop_identical=True)


@pytest.fixture(scope="module")
def vocabularies():
    sentences = [s for pair in NORMAL for s in pair] + ["alpha beta gamma delta"]
    return Vocabularies.train(sentences, sentences, joint=True, vocab_size=300)


def crafted():
    """NORMAL with every outlier after it, and which lines are the outliers."""
    pairs = list(NORMAL)
    for outliers in OUTLIERS.values():
        pairs += outliers
    return pairs


def test_each_rule_drops_exactly_its_pairs_counted_once_under_the_first_rule():  # a character a token
    cleaner = Cleaner(MAX, CLEAN)
    rules = [cleaner.rule(s, t, len(s), len(t)) for s, t in crafted()]
    expected = [None] * len(NORMAL) + [rule for rule, outliers in OUTLIERS.items() for _ in outliers]
    assert rules == expected
    kept = Cleaner(MAX, CLEAN)
    assert sum(kept.keep(s, t, len(s), len(t)) for s, t in crafted()) == len(NORMAL)
    assert kept.dropped == {rule: len(outliers) for rule, outliers in OUTLIERS.items()}


def test_the_length_ratio_is_the_longer_side_over_the_shorter_and_moses_keeps_it_at_the_ratio():
    cleaner = Cleaner(100, CleanConfig(max_length_ratio=1.5))
    assert cleaner.rule("a", "b", 2, 3) is None and cleaner.rule("a", "b", 3, 2) is None
    assert cleaner.rule("a", "b", 2, 4) == "length_ratio" and cleaner.rule("a", "b", 4, 2) == "length_ratio"


def test_lines_that_are_not_utf8_are_dropped_only_when_asked():
    bad = b"caf\xe9".decode("utf-8", "surrogateescape")
    assert Cleaner(16, CleanConfig(invalid_utf8="drop")).rule(bad, "x", 1, 1) == "invalid_utf8"
    assert Cleaner(16, CleanConfig(invalid_utf8="drop")).encodable([bad, "x"]) == ["", "x"]
    assert "invalid_utf8" not in Cleaner(16, CleanConfig()).dropped


def test_write_prepared_cleans_the_training_split_only_and_counts_in_meta_json(vocabularies, tmp_path, caplog):
    pairs = crafted()
    with caplog.at_level(logging.INFO, logger="kmt.data.shards"):
        write_prepared(tmp_path, {"train": pairs, "val": pairs}, vocabularies, MAX, "{}\n", CLEAN)
    meta = json.loads((tmp_path / "meta.json").read_text())
    train, val = meta["splits"]["train"], meta["splits"]["val"]
    assert train["dropped"] == {rule: len(outliers) for rule, outliers in OUTLIERS.items()}
    assert train["pairs"] == len(NORMAL) and train["read"] == len(pairs)
    assert val["dropped"] == {"empty": 2, "too_long": 1}  # val: only what no model can take
    assert val["pairs"] == len(pairs) - 3
    split = PreparedData(tmp_path).split("train")
    assert split.dropped == train["dropped"] and split.text().kept.tolist() == list(range(len(NORMAL)))
    assert (
        f"train: kept 40 of {len(pairs)} pairs (dropped 2 empty, 1 longer than 32 tokens, 2 length ratio over 3, "
        "5 duplicates, 3 identical source and target)" in caplog.text
    )
    assert f"val: kept {len(pairs) - 3} of {len(pairs)} pairs (dropped 2 empty, 1 longer than 32 tokens)" in caplog.text


def test_the_defaults_drop_what_they_dropped_before(vocabularies, tmp_path):
    write_prepared(tmp_path, {"train": crafted()}, vocabularies, MAX, "{}\n", CleanConfig())
    assert PreparedData(tmp_path).split("train").dropped == {"empty": 2, "too_long": 1}


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.clean.max_length_ratio=0.5", "data.clean.max_length_ratio must be 0 (off) or >= 1. Received: 0.5"),
        ("data.clean.invalid_utf8=skip", "data.clean.invalid_utf8 must be error or drop. Received: 'skip'"),
    ],
)
def test_the_config_refuses_a_ratio_under_one_and_an_unknown_utf8_choice(override, message):
    from kmt.config import validate

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(compose_config(override))


def write_corpus(directory):
    """A crafted data=parallel corpus: NORMAL, the outliers, two lines of invalid UTF-8; a small val set."""
    train = [(s.encode(), t.encode()) for s, t in crafted()] + [(b"alpha caf\xe9", b"gamma"), (b"alpha", b"\xffdelta")]
    for name, pairs in (("train", train), ("dev", [(s.encode(), t.encode()) for s, t in NORMAL[:5]])):
        for side, index in (("en", 0), ("de", 1)):
            (directory / f"{name}.{side}").write_bytes(b"".join(pair[index] + b"\n" for pair in pairs))
    return [
        "data=parallel",
        f"data.train.source={directory / 'train.en'}",
        f"data.train.target={directory / 'train.de'}",
        f"data.val.source={directory / 'dev.en'}",
        f"data.val.target={directory / 'dev.de'}",
        "data.tokenizer.vocab_size=300",
        "model.max_length=32",
    ]


def test_invalid_utf8_stops_the_run_at_its_line_unless_dropped(tmp_path):
    overrides = write_corpus(tmp_path)
    cfg = compose_config(*overrides)
    with pytest.raises(DataError, match=rf"train.en line {len(crafted()) + 1}: not valid UTF-8 \(byte 0xe9"):
        prepare_data(cfg.data, cfg.model, tmp_path / "strict", OmegaConf.to_yaml(cfg))
    cfg = compose_config(*overrides, "data.clean.invalid_utf8=drop")
    data = prepare_data(cfg.data, cfg.model, tmp_path / "out", OmegaConf.to_yaml(cfg))
    train = data.split("train")
    assert train.dropped == {"invalid_utf8": 2, "empty": 2, "too_long": 1}
    assert train.text().source[-2] == "alpha caf?"  # kept as text, readable, the byte replaced
    assert np.all(train.text().kept < len(crafted()))


def test_kmt_prepare_logs_the_counts_and_writes_them_to_meta_json(tmp_path):
    overrides = write_corpus(tmp_path)
    clean = [
        "data.clean.max_length_ratio=3",
        "data.clean.deduplicate=true",
        "data.clean.drop_identical=true",
        "data.clean.invalid_utf8=drop",
    ]
    out = tmp_path / "prepared"
    result = run_cli("prepare", *overrides, *clean, f"hydra.run.dir={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    line = (
        f"train: kept 40 of {len(crafted()) + 2} pairs (dropped 2 empty, 1 longer than 32 tokens, 2 length ratio "
        "over 3, 5 duplicates, 3 identical source and target, 2 invalid UTF-8)"
    )
    assert line in (out / "prepare.log").read_text()
    dropped = json.loads((out / "meta.json").read_text())["splits"]["train"]["dropped"]
    assert dropped == {"invalid_utf8": 2, **{rule: len(outliers) for rule, outliers in OUTLIERS.items()}}
