"""The recurrent baseline (`kmt.models.LSTM`, `kmt.layers.recurrent`) at tiny sizes, as tests/test_model.py checks the
Transformer, plus its decoding through the same search and an end-to-end `kmt-train model=lstm` run."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

from kmt.inference.decoding import search_ids
from kmt.inference.settings import SearchSettings
from kmt.inference.steps import cached_next_fn, uncached_next_fn
from kmt.layers import Dropout
from kmt.losses import MaskedAccuracy, MaskedCrossEntropy
from kmt.models import LSTM, Seq2SeqModel
from kmt.special_ids import END_ID, START_ID
from tests.helpers import model_inputs, model_logits, token_batch

TINY = dict(vocab_size=23, num_layers=2, hidden_dim=16, dropout=0.1, max_length=20)


@pytest.fixture
def batch():
    return token_batch()


@pytest.mark.parametrize("options", [{}, {"shared_embeddings": False, "tied_output": False, "score": "dot"}])
def test_logits_shape_and_dtype(batch, options):
    sizes = {"target_vocab_size": 29} if options else {}
    model = LSTM(**TINY, **options, **sizes)
    logits = model(model_inputs(*batch), training=False)
    assert tuple(logits.shape) == (3, 6, sizes.get("target_vocab_size", 23)) and logits.dtype == "float32"
    assert isinstance(model, Seq2SeqModel)


def test_tied_embeddings_are_one_matrix():
    model = LSTM(**TINY)
    embeddings = [w for w in model.weights if "embeddings" in w.path]
    assert len(embeddings) == 1 and tuple(embeddings[0].shape) == (23, 16)


def test_source_padding_does_not_change_logits(batch):
    model = LSTM(**TINY)
    source, target_in = batch
    padded = np.concatenate([source, np.zeros((3, 4), source.dtype)], axis=1)
    expected = model_logits(model, source, target_in)
    np.testing.assert_allclose(model_logits(model, padded, target_in), expected, atol=1e-5)


def test_future_target_tokens_do_not_change_past_logits(batch):
    model = LSTM(**TINY)
    source, target_in = batch
    changed = target_in.copy()
    changed[:, 4:] = 5
    expected = model_logits(model, source, target_in)[:, :4]
    np.testing.assert_allclose(model_logits(model, source, changed)[:, :4], expected, atol=1e-6)


def test_dropout_acts_only_in_training(batch):
    model = LSTM(**TINY | {"dropout": 0.5})
    inputs = model_inputs(*batch)
    np.testing.assert_array_equal(model_logits(model, *batch), model_logits(model, *batch))
    assert not np.allclose(ops.convert_to_numpy(model(inputs, training=True)), model_logits(model, *batch))


def test_late_dropout_sets_every_dropout_layer():
    model = LSTM(**TINY)  # embeddings (2), between the 2 encoder layers (1), the attentional vectors (1)
    assert len(model.residual_dropouts()) == 4 and model.set_residual_dropout(0.3) == 4
    assert {layer.rate for layer in model.layers if isinstance(layer, Dropout)} == {0.3}


@pytest.mark.parametrize("next_fn", [cached_next_fn, uncached_next_fn])
def test_step_by_step_decoding_matches_the_teacher_forced_logits(batch, next_fn):
    """The decoder run a token at a time (its recurrent state the cache) scores each position as the full
    teacher-forced forward pass does."""
    model = LSTM(**TINY)
    source, target_in = batch
    expected = model_logits(model, source, target_in)  # (B, T, V)
    encoder_outputs, source_mask = model.encode(source)
    fn, state = next_fn(model, encoder_outputs, source_mask, target_in.shape[1] - 1)
    tokens = ops.convert_to_tensor(target_in.astype("int32"))
    for index in range(target_in.shape[1]):
        logits, state = fn(tokens, ops.convert_to_tensor(index, "int32"), state)
        np.testing.assert_allclose(ops.convert_to_numpy(logits), expected[:, index], atol=1e-5)


def test_cached_and_uncached_search_agree(batch):
    model = LSTM(**TINY)
    source = batch[0]
    for beam_size in (1, 3):
        cached = search_ids(model, source, SearchSettings.of(beam_size=beam_size), use_cache=True)
        uncached = search_ids(model, source, SearchSettings.of(beam_size=beam_size), use_cache=False)
        np.testing.assert_array_equal(ops.convert_to_numpy(cached[0]), ops.convert_to_numpy(uncached[0]))
        np.testing.assert_allclose(ops.convert_to_numpy(cached[1]), ops.convert_to_numpy(uncached[1]), atol=1e-4)


@pytest.mark.e2e
def test_saved_model_reloads_in_a_fresh_process(tmp_path, batch):
    model = LSTM(**TINY)
    path, inputs_path = tmp_path / "m.keras", tmp_path / "batch.npz"
    model.save(path)
    source, target_in = batch
    np.savez(inputs_path, source=source, target_in=target_in)
    expected = model_logits(model, source, target_in)
    tokens = ops.convert_to_numpy(search_ids(model, source, SearchSettings.of(beam_size=2))[0])
    script = (
        "import sys, numpy as np, keras, kmt.models.lstm\n"
        "from kmt.inference.decoding import search_ids\n"
        "from kmt.inference.settings import SearchSettings\n"
        "m = keras.saving.load_model(sys.argv[1], safe_mode=True)\n"
        "b = {k: v.astype('int32') for k, v in np.load(sys.argv[2]).items()}\n"
        "out = m(b, training=False)\n"
        "tokens = search_ids(m, b['source'], SearchSettings.of(beam_size=2))[0]\n"
        "np.savez(sys.argv[3], logits=keras.ops.convert_to_numpy(out), tokens=keras.ops.convert_to_numpy(tokens))\n"
    )
    out_path = tmp_path / "out.npz"
    subprocess.run(
        [sys.executable, "-c", script, str(path), str(inputs_path), str(out_path)],
        check=True,
        env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=600,
    )
    loaded = np.load(out_path)
    np.testing.assert_allclose(loaded["logits"], expected, atol=1e-6)
    np.testing.assert_array_equal(loaded["tokens"], tokens)


def test_model_learns_a_copy_task():
    """Copying 6 random tokens: a few hundred Adam steps take the teacher-forced token accuracy near 1, and greedy
    search then copies held-out sentences."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = LSTM(vocab_size=16, num_layers=1, hidden_dim=32, dropout=0.0, max_length=12)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=MaskedCrossEntropy(), metrics=[MaskedAccuracy()])

    def pairs(count):
        source = rng.integers(4, 16, size=(count, 6)).astype("int32")
        labels = np.concatenate([source, np.full((count, 1), END_ID)], axis=1).astype("int32")  # then the end token
        target_in = np.concatenate([np.full((count, 1), START_ID), source], axis=1).astype("int32")  # start token first
        return source, target_in, labels

    for _ in range(300):
        source, target_in, labels = pairs(32)
        _, accuracy = model.train_on_batch(model_inputs(source, target_in), labels)[:2]
    assert accuracy > 0.9
    source, _, labels = pairs(16)
    tokens = ops.convert_to_numpy(search_ids(model, source, SearchSettings.of(beam_size=1, max_length=7))[0])
    assert (tokens[:, :7] == labels).all(axis=1).mean() >= 0.75


@pytest.mark.e2e
def test_kmt_train_model_lstm_trains_exports_and_translates(tmp_path):
    """`kmt-train model=lstm` trains and exports; `kmt-export` rebuilds the model from the run's config.yaml
    (here averaging its two epochs, with beam search) and both SavedModels translate."""
    from tests.helpers import run_cli

    run_dir = tmp_path / "run"
    trained = run_cli("train", "model=lstm", "debug=smoke", "trainer.epochs=2", f"hydra.run.dir={run_dir}")
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (run_dir / "export" / "saved_model.pb").exists() and (run_dir / "model.keras").exists()
    exported = run_cli("export", run_dir, "--average", "2", "--beam-size", "3", "--output", tmp_path / "beam")
    assert exported.returncode == 0, exported.stderr[-3000:]
    outputs = {}
    for export in (run_dir / "export", tmp_path / "beam"):
        translated = run_cli("translate", export, input="March 3, 2021\n1 Jan 1999\n\n")
        assert translated.returncode == 0, translated.stderr[-3000:]
        outputs[export.name] = translated.stdout.split("\n")[:-1]
    for lines in outputs.values():  # a translation for each sentence, nothing for the empty line
        assert len(lines) == 3 and all(line.strip() for line in lines[:2]) and lines[2] == ""
    refused = run_cli("export", run_dir, "--format", "ctranslate2", "--output", tmp_path / "ct2")
    assert refused.returncode != 0 and "converts Transformers only" in refused.stderr
