"""Guided-alignment training (`data.train.alignments`): Pharaoh lines checked and kept with the prepared pairs, word
links turned into subword links in the batches, the loss of the supervised head, the graph that trains on them, and
one real run whose supervised head follows the alignments."""

import json
import re

import keras
import numpy as np
import pytest
from keras import ops

from kmt.config import validate
from kmt.data.alignments import AlignmentFile, Links, parse_links, subword_links, word_indices
from kmt.data.batches import Batcher, sample_rows
from kmt.data.dates import date_splits
from kmt.data.shards import PreparedData, write_prepared
from kmt.errors import ConfigError, DataError
from kmt.layers import GuidedAlignment
from kmt.losses import guided_alignment_loss
from kmt.models import Transformer
from kmt.tokenizer import Tokenizer, Vocabularies
from tests.helpers import compose_config, train_main

SOURCES = ["the small house", "a cat sleeps here", "", "the house of the cat"]
TARGETS = ["das kleine haus", "eine katze schläft hier", "leer", "das haus der katze"]
LINKS = ["0-0 1-1 2-2", "0-0 1-1 2-2 3-3", "", "0-0 1-1 3-3 4-3"]


@pytest.fixture(scope="module")
def vocabularies():
    return Vocabularies.train(SOURCES * 3, TARGETS * 3, joint=True, vocab_size=300)


def write(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


# === Word links -> subword links ===


def test_pharaoh_lines_parse_and_a_bad_one_names_its_file_and_line():
    assert parse_links("0-1 2-0", 3, 2, "f line 1").tolist() == [[0, 1], [2, 0]]
    assert parse_links("", 3, 2, "f line 1").shape == (0, 2)
    for line, message in [
        ("0-1 2:0", "f line 7: '2:0' is not a link; Pharaoh links read SOURCE-TARGET"),
        ("0-1 1-", "f line 7: '1-' is not a link"),
        ("0-2", "f line 7: link 0-2 is outside the pair's words (3 source, 2 target, counted from 0)"),
        ("3-0", "f line 7: link 3-0 is outside"),
    ]:
        with pytest.raises(DataError, match=re.escape(message)):
            parse_links(line, 3, 2, "f line 7")


def test_a_subword_belongs_to_its_word_and_tokens_of_no_word_link_nothing(vocabularies):
    tokenizer = vocabularies.source
    ids = tokenizer.encode(["the small house"])[0]
    pieces = [tokenizer._processor.id_to_piece(int(i)) for i in ids]
    words = word_indices(ids, tokenizer.word_starts)
    # Each piece's word is the number of word-starting ("▁") pieces up to it, less one; three words in all.
    assert words.tolist() == list(np.cumsum([piece.startswith("▁") for piece in pieces]) - 1)
    assert words.max() == 2
    # A source side that appends the end token (an imported Marian vocabulary): the end token is no word's.
    appending = Tokenizer(tokenizer.model_proto, append_end=True)
    source = appending.encode(["the small house"])[0]
    target = tokenizer.encode(["das kleine haus"])[0]
    assert source[-1] == 3 and word_indices(source, appending.word_starts)[-1] == -1
    matrix = subword_links(
        parse_links("0-0 2-2", 3, 3, "x"), source, target, appending.word_starts, tokenizer.word_starts
    )
    source_words = word_indices(source, appending.word_starts)
    target_words = word_indices(target, tokenizer.word_starts)
    assert matrix.shape == (len(target), len(source)) and matrix.dtype == np.uint8
    for t, s in np.ndindex(matrix.shape):
        assert matrix[t, s] == ((source_words[s], target_words[t]) in {(0, 0), (2, 2)})
    assert not matrix[:, -1].any()  # the appended end token


# === Prepared data ===


def test_links_follow_the_kept_pairs_into_the_shards_and_the_batches(tmp_path, vocabularies):
    alignments = AlignmentFile(write(tmp_path / "train.align", LINKS))
    splits = {"train": zip(SOURCES, TARGETS), "val": zip(SOURCES[:2], TARGETS[:2])}
    meta = write_prepared(tmp_path / "prepared", splits, vocabularies, 32, "{}\n", alignments=alignments)
    assert meta["splits"]["train"]["pairs"] == 3  # the empty source dropped, with its (empty) line
    assert meta["splits"]["train"]["alignments"]["links"] == 3 + 4 + 4
    train, val = (PreparedData(tmp_path / "prepared").split(name) for name in ("train", "val"))
    assert val.links is None
    assert [train.links.of(i).tolist() for i in range(3)] == [
        parse_links(LINKS[line], 9, 9, "x").tolist() for line in (0, 1, 3)
    ]

    words = (vocabularies.source.word_starts, vocabularies.target.word_starts)
    batcher = Batcher(train, 32, batch_size=8, alignment=words)
    inputs, target_out = batcher.pad(0, [(train, 0), (train, 2)])
    assert set(inputs) == {"source", "target_in", "alignment"}
    assert inputs["alignment"].shape == (2, *inputs["target_in"].shape[1:], inputs["source"].shape[1])
    for row, i in enumerate((0, 2)):
        source, target = train.pair(i)
        expected = subword_links(train.links.of(i), source, target, *words)
        assert (inputs["alignment"][row, : len(target), : len(source)] == expected).all()
        assert inputs["alignment"][row].sum() == expected.sum()  # nothing on pads, nor on the end token's row
    assert not Batcher(val, 32, batch_size=8, alignment=words).pad(0, [(val, 0)])[0]["alignment"].any()
    assert "alignment" not in Batcher(train, 32, batch_size=8).pad(0, [(train, 0)])[0]

    # Subword sampling draws other pieces but keeps each pair's links (and drops those of the pairs it drops).
    text = train.text()
    kept = [text.source[i] for i in text.kept], [text.target[i] for i in text.kept]
    drawn = sample_rows(vocabularies, 0.1, *kept, 32, (0, 1), train.links)
    assert [drawn.links.of(i).tolist() for i in range(3)] == [train.links.of(i).tolist() for i in range(3)]
    assert Links(np.zeros((0, 2)), np.zeros(4, np.int64)).subset([2, 0]).of(1).shape == (0, 2)


@pytest.mark.parametrize(
    "lines, limited, message",
    [
        (LINKS[:3], False, "train.align has 3 lines but the training split has more pairs"),
        ([*LINKS, "0-0"], False, "train.align has 5 lines but the training split has 4 pairs; it must line up"),
        (["0-0", "0-0 x", "", ""], False, "train.align line 2: 'x' is not a link"),
        (["0-0", "", "", "9-0"], False, "train.align line 4: link 9-0 is outside the pair's words (5 source"),
    ],
)
def test_an_alignment_file_that_does_not_fit_its_pairs_names_the_file_and_line(
    tmp_path, vocabularies, lines, limited, message
):
    alignments = AlignmentFile(write(tmp_path / "train.align", lines), limited)
    with pytest.raises(DataError, match=re.escape(message)):
        write_prepared(
            tmp_path / "p", {"train": zip(SOURCES, TARGETS)}, vocabularies, 32, "{}\n", alignments=alignments
        )


def test_a_limited_corpus_takes_the_first_lines_and_a_missing_file_is_named(tmp_path, vocabularies):
    alignments = AlignmentFile(write(tmp_path / "train.align", [*LINKS, "0-0"]), limited=True)
    write_prepared(tmp_path / "p", {"train": zip(SOURCES, TARGETS)}, vocabularies, 32, "{}\n", alignments=alignments)
    with pytest.raises(DataError, match="data.train.alignments=/no/such.align: no such file"):
        AlignmentFile("/no/such.align")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data=prepared", "data.path=/p", "data.train.alignments=a"], "give data.train.alignments to kmt-prepare"),
        (
            ["data.train.alignments=a", "model=lstm"],
            "trains a Transformer's cross-attention. Received: model.arch=lstm",
        ),
        (["optim.guided_alignment_weight=-1"], "optim.guided_alignment_weight must be >= 0. Received: -1.0"),
        (["model.alignment_layer=1"], "model.alignment_layer must name one of the 1 decoder layers"),
        (["model.alignment_heads=3"], "model.alignment_heads must be in [0, model.num_heads=2]. Received: 3"),
    ],
)
def test_guided_alignment_settings_are_checked_before_any_data_is_read(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose_config(*overrides))


def test_kmt_train_stops_at_a_bad_alignment_file_with_one_line(monkeypatch, capsys, tmp_path):
    lines = ["0-0"] * 299 + ["0-7"]  # the smoke run's 300 dates; its last source has fewer than 8 words
    status, _, stderr = train_main(
        monkeypatch,
        capsys,
        "debug=smoke",
        f"data.train.alignments={write(tmp_path / 'dates.align', lines)}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    last = stderr.strip().splitlines()[-1]
    assert status == 2 and "Traceback" not in stderr
    assert re.fullmatch(r"error: .*dates\.align line 300: link 0-7 is outside the pair's words .*", last), last
    assert not (tmp_path / "run" / "checkpoints").exists()


# === The loss and the graph ===


def test_the_loss_is_the_cross_entropy_of_the_normalized_rows_over_supervised_rows_only():
    rng = np.random.default_rng(0)
    attention = rng.dirichlet(np.ones(4), size=(2, 3)).astype("float32")  # (B, T, S)
    reference = np.zeros((2, 3, 4), np.uint8)
    reference[0, 0, [1, 2]] = 1
    reference[1, 2, 3] = 1  # the other four rows have no link
    expected = (-(0.5 * np.log(attention[0, 0, 1]) + 0.5 * np.log(attention[0, 0, 2])) - np.log(attention[1, 2, 3])) / 2
    assert float(guided_alignment_loss(reference, attention)) == pytest.approx(expected, rel=1e-5)
    assert float(guided_alignment_loss(np.zeros_like(reference), attention)) == 0.0
    # A padded source position's weight is 0: no link there, and no NaN from its log.
    assert np.isfinite(float(guided_alignment_loss(reference, np.where(attention > 0.5, 0.0, attention))))


def test_the_guided_graph_takes_the_links_and_adds_the_weighted_loss_to_the_translation_loss():
    def model(**options):
        keras.utils.set_random_seed(3)
        return Transformer(vocab_size=30, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32, **options)

    plain, guided = model(), model(guided_alignment_weight=0.5)
    assert sorted(plain.input) == ["source", "target_in"] and sorted(guided.input) == [
        "alignment",
        "source",
        "target_in",
    ]
    # The same weights for a seed, and the same logits: a guided run's checkpoint loads into a plain model.
    assert all((a == b).all() for a, b in zip(plain.get_weights(), guided.get_weights()))
    rng = np.random.default_rng(1)
    source = rng.integers(4, 30, (3, 5)).astype("int32")
    target_in = rng.integers(4, 30, (3, 4)).astype("int32")
    reference = np.zeros((3, 4, 5), np.uint8)
    reference[:, np.arange(4), np.arange(4)] = 1
    logits = guided({"source": source, "target_in": target_in, "alignment": reference})
    assert np.allclose(
        ops.convert_to_numpy(logits), ops.convert_to_numpy(plain({"source": source, "target_in": target_in}))
    )
    # The loss added: 0.5 x the cross-entropy of head 0 of the last decoder layer.
    encoded, mask = guided.encode(source)
    guided.alignment_heads = 1
    head = guided.alignment(target_in, encoded, mask)
    assert float(guided.losses[0]) == pytest.approx(0.5 * float(guided_alignment_loss(reference, head)), rel=1e-4)
    restored = Transformer.from_config(guided.get_config())
    assert restored.guided_alignment_weight == 0.5 and "alignment" in restored.input
    assert GuidedAlignment.from_config(GuidedAlignment(0.3, head=1).get_config()).head == 1


# === One real run ===


def year_links(source, target):
    """A dates pair's alignment: the ISO date (the target's one word) links the source word holding the year."""
    return " ".join(f"{i}-0" for i, word in enumerate(source.split()) if re.search(r"\d{4}", word))


def linked_mass(run_dir, pairs, words):
    """The mean share of head 0's attention (of the alignment layer) that goes to the linked source subwords, over
    the target tokens of `pairs` (the first training pairs)."""
    from kmt.checkpoints import load_run_model

    cfg, vocabularies, model = load_run_model(run_dir)
    model.alignment_heads = 1
    shares = []
    for (source, target), line in zip(pairs, words):
        source_ids, target_ids = vocabularies.source.encode([source])[0], vocabularies.target.encode([target])[0]
        encoded, mask = model.encode(source_ids[None])
        target_in = np.concatenate([[2], target_ids])[None].astype("int32")
        attention = ops.convert_to_numpy(model.alignment(target_in, encoded, mask))[0, : len(target_ids)]  # (T, S)
        links = subword_links(
            parse_links(line, 99, 1, "x"),
            source_ids,
            target_ids,
            *(tokenizer.word_starts for tokenizer in (vocabularies.source, vocabularies.target)),
        )
        shares.append((attention * links).sum(axis=-1).mean())
    return float(np.mean(shares)), cfg


@pytest.mark.e2e
def test_a_guided_run_trains_its_head_to_follow_the_alignments(smoke_run, monkeypatch, capsys, tmp_path, caplog):
    """kmt-train debug=smoke trainer.epochs=2 (the shared smoke run) again with data.train.alignments: the same
    seed, vocabulary and first weights, so the share of head 0's attention on the linked source subwords tells the
    guidance apart. Measured: 0.34 unguided, 0.59 guided (weight 5, over the run's 12 updates)."""
    caplog.set_level("INFO")
    sources, targets = date_splits(300, 40, 40, 1234)["train"]
    lines = [year_links(s, t) for s, t in zip(sources, targets)]
    path = write(tmp_path / "dates.align", lines)
    run_dir = tmp_path / "guided"
    status, _, stderr = train_main(
        monkeypatch,
        capsys,
        "debug=smoke",
        "trainer.epochs=2",
        f"data.train.alignments={path}",
        "optim.guided_alignment_weight=5",
        f"hydra.run.dir={run_dir}",
    )
    assert status == 0, stderr[-3000:]
    assert "guided alignment: head 0 of decoder layer 0 learns the alignments" in caplog.text
    assert (run_dir / "export" / "saved_model.pb").exists()
    pairs = list(zip(sources, targets))[:40]
    guided, cfg = linked_mass(run_dir, pairs, lines)
    unguided, _ = linked_mass(smoke_run, pairs, lines)
    assert cfg.model.alignment_heads == 1 and cfg.data.train.alignments == str(path)
    assert json.loads((run_dir / "data" / "meta.json").read_text())["splits"]["train"]["alignments"]["links"] == 300
    assert guided > unguided + 0.1, (guided, unguided)
