from concurrent.futures import ThreadPoolExecutor

import pytest
import tensorflow as tf

from kmt.data.dates import generate_date_pairs
from kmt.errors import ConfigError
from kmt.special_ids import END_ID, PAD_ID, START_ID, UNK_ID
from kmt.tokenizer import Tokenizer, Vocabularies, train_tokenizer

SOURCES = [s for s, _ in generate_date_pairs(400, seed=3)]
TARGETS = [t for _, t in generate_date_pairs(400, seed=3)]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(SOURCES + TARGETS, vocab_size=330)


def _round_trip(tokenizer, sentences):
    return [t.decode() for t in tokenizer.detokenize(tokenizer.tokenize(tf.constant(sentences))).numpy()]


def test_round_trips_seen_and_unseen_characters(tokenizer):
    sentences = ["Tuesday, March 5, 1996", "1996-03-05", "日本語 😀 مرحبا Ωmega", ""]
    assert _round_trip(tokenizer, sentences) == sentences
    ids = tokenizer.tokenize(tf.constant(["😀"])).flat_values.numpy()
    assert UNK_ID not in ids  # byte fallback: spelled in UTF-8 bytes, not <unk>


def test_reserved_ids_and_special_tokens_decode_to_nothing(tokenizer):
    ids = tokenizer.tokenize(tf.constant(["5 March 1996"])).to_tensor()
    padded = tf.concat([[[START_ID]], ids, [[END_ID, PAD_ID, PAD_ID]]], axis=1)
    assert tokenizer.detokenize(padded).numpy()[0].decode() == "5 March 1996"
    assert tokenizer.id_to_piece(tf.constant([PAD_ID, UNK_ID, START_ID, END_ID])).numpy().tolist() == [
        b"<pad>",
        b"<unk>",
        b"<s>",
        b"</s>",
    ]


def test_save_and_load_give_the_same_ids(tokenizer, tmp_path):
    tokenizer.save(tmp_path / "joint")
    assert (tmp_path / "joint.vocab").read_text().splitlines()[0].startswith("<pad>")
    loaded = Tokenizer.load(tmp_path / "joint")
    sentences = tf.constant(SOURCES[:20])
    assert loaded.tokenize(sentences).to_list() == tokenizer.tokenize(sentences).to_list()


def test_joint_and_separate_vocabularies(tmp_path):
    joint = Vocabularies.train(SOURCES, TARGETS, joint=True, vocab_size=330)
    assert joint.joint
    joint.save(tmp_path / "a")
    assert Vocabularies.load(tmp_path / "a").joint
    separate = Vocabularies.train(SOURCES, TARGETS, joint=False, vocab_size=300, byte_fallback=False)
    separate.save(tmp_path / "b")
    loaded = Vocabularies.load(tmp_path / "b")
    assert not loaded.joint and {p.name for p in (tmp_path / "b").iterdir()} >= {"source.model", "target.model"}


def test_too_small_a_vocabulary_grows_to_fit_the_characters():
    tokenizer = train_tokenizer(["abc", "abd"], vocab_size=270)
    assert tokenizer.vocab_size >= 4 + 256 + 4


def test_a_vocabulary_the_corpus_cannot_fill_is_logged_as_capped(caplog):
    with caplog.at_level("WARNING", logger="kmt.tokenizer"):
        tokenizer = train_tokenizer(["abc abd", "abd bca"], vocab_size=2000)
    assert tokenizer.vocab_size < 2000
    assert (
        f"tokenizer.vocab_size=2000 is more than the training text fills; capped at {tokenizer.vocab_size} "
        "pieces" in caplog.text
    )


def test_bad_model_type_is_a_config_error():
    with pytest.raises(ConfigError, match="model_type='wordpiece'"):
        train_tokenizer(SOURCES, vocab_size=400, model_type="wordpiece")


def test_sampling_draws_other_segmentations_of_the_same_text(tokenizer):
    sentences = SOURCES[:50]
    best = tokenizer.tokenize(tf.constant(sentences)).to_list()
    seeded = tokenizer.sample(sentences, 0.1, seed=5)
    assert seeded.to_list() != best and seeded.flat_values.shape[0] > sum(map(len, best))  # more, shorter pieces
    assert seeded.to_list() == tokenizer.sample(sentences, 0.1, seed=5).to_list()
    assert seeded.to_list() != tokenizer.sample(sentences, 0.1, seed=6).to_list()
    assert [t.decode() for t in tokenizer.detokenize(seeded).numpy()] == sentences


def test_a_sampler_draws_by_its_seed_and_draw_number_alone_on_any_thread(tokenizer):
    sentences = tf.constant(SOURCES[:50])
    draw = lambda seed, number: tokenizer.sampler(0.1, seed)(sentences, tf.constant(number, tf.int64))  # noqa: E731
    first = draw((7, 0), 0).to_list()
    assert [t.decode() for t in tokenizer.detokenize(tf.ragged.constant(first)).numpy()] == SOURCES[:50]
    assert draw((7, 1), 0).to_list() != first and draw((7, 0), 1).to_list() != first
    tokenizer.sample(SOURCES[:50], 0.1, seed=123)  # draws between the two calls do not shift the second
    with ThreadPoolExecutor(1) as pool:  # nor does the thread it runs on (a tf.data map's)
        assert pool.submit(lambda: draw((7, 0), 0).to_list()).result() == first
    graph = tf.function(lambda number: tokenizer.sampler(0.1, (7, 0))(sentences, number))
    assert graph(tf.constant(0, tf.int64)).to_list() == first
