import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

from kmt.layers import DecoderLayer, EncoderLayer
from kmt.losses import MaskedAccuracy, MaskedCrossEntropy
from kmt.models import Transformer
from tests.helpers import model_inputs, model_logits, token_batch

TINY = dict(vocab_size=23, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.1)
MARIAN = dict(activation="swish", position_layout="halves", output_bias=True)  # the switches an OPUS-MT import sets


@pytest.fixture
def batch():
    return token_batch()


def test_base_preset_has_the_papers_parameter_count():
    model = Transformer(vocab_size=37000, num_layers=6, hidden_dim=512, num_heads=8, intermediate_dim=2048)
    assert 60e6 <= model.count_params() <= 66e6  # the paper reports 65M


def test_logits_shape_and_dtype(batch):
    model = Transformer(**TINY)
    logits = model(model_inputs(*batch))
    assert tuple(logits.shape) == (3, 6, 23)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"


def test_future_target_tokens_do_not_change_past_logits(batch):
    model = Transformer(**TINY)
    source, target_in = batch
    changed = target_in.copy()
    changed[:, 3:] = (changed[:, 3:] % 22) + 1
    before, after = model_logits(model, source, target_in), model_logits(model, source, changed)
    np.testing.assert_allclose(before[:, :3], after[:, :3], atol=1e-5)
    assert not np.allclose(before[:, 3:], after[:, 3:])


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_source_padding_does_not_change_logits(batch, policy):
    keras.config.set_dtype_policy(policy)
    model = Transformer(**TINY)
    source, target_in = batch
    padded = np.concatenate([source, np.zeros((3, 4), source.dtype)], axis=1)
    before, after = model_logits(model, source, target_in), model_logits(model, padded, target_in)
    assert np.isfinite(after).all()
    tolerance = 1e-5 if policy == "float32" else 2e-2
    np.testing.assert_allclose(before, after, atol=tolerance)


def test_untied_separate_vocabularies_and_pre_norm(batch):
    model = Transformer(
        **TINY | {"vocab_size": 23},
        target_vocab_size=31,
        shared_embeddings=False,
        tied_output=False,
        norm_first=True,
        learned_positions=True,
        max_length=16,
    )
    source, target_in = batch
    assert model_logits(model, source, target_in).shape == (3, 6, 31)
    assert model.get_layer("source_embedding") is not model.get_layer("target_embedding")
    with pytest.raises(ValueError, match="joint vocabulary"):
        Transformer(**TINY, target_vocab_size=31)
    with pytest.raises(ValueError, match="dropout=-0.1"):
        Transformer(**TINY | {"dropout": -0.1})


def test_tied_embeddings_are_one_matrix():
    model = Transformer(**TINY)
    embeddings = [w for w in model.weights if "embeddings" in w.path]
    assert len(embeddings) == 1 and tuple(embeddings[0].shape) == (23, 16)


def test_dropout_acts_only_in_training(batch):
    model = Transformer(**TINY | {"dropout": 0.3})
    inputs = model_inputs(*batch)
    a, b = (ops.convert_to_numpy(model(inputs, training=False)) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, ops.convert_to_numpy(model(inputs, training=True)))


def test_residual_dropouts_are_the_embeddings_and_sublayer_outputs_only():
    model = Transformer(**TINY | {"dropout": 0.3, "attention_dropout": 0.2, "activation_dropout": 0.1})
    layers = model.residual_dropouts()
    # two embeddings, two sublayers in each of 2 encoder layers, three in each of 2 decoder layers
    assert len(layers) == 2 + 2 * 2 + 2 * 3 and len({id(layer) for layer in layers}) == len(layers)
    assert {layer.rate for layer in layers} == {0.3}
    every = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dropout)]
    assert sorted(layer.rate for layer in every if layer not in layers) == [0.1] * 4 + [0.2] * 6

    assert model.set_residual_dropout(0.25) == len(layers)
    assert {layer.rate for layer in layers} == {0.25}
    assert sorted(layer.rate for layer in every if layer not in layers) == [0.1] * 4 + [0.2] * 6
    configs = [layer.get_config() for layer in model.layers if isinstance(layer, (EncoderLayer, DecoderLayer))]
    assert len(configs) == 4 and {config["dropout"] for config in configs} == {0.25}  # what a .keras file keeps


def test_word_dropout_zeroes_whole_positions_in_training_only(batch):
    plain = Transformer(**TINY)
    assert not [layer.name for layer in plain.layers if "word_dropout" in layer.name]  # off: no layer at all
    model = Transformer(**TINY, source_word_dropout=0.5, target_word_dropout=0.25)
    model.set_weights(plain.get_weights())  # word dropout has no weights
    np.testing.assert_allclose(model_logits(model, *batch), model_logits(plain, *batch), atol=1e-6)

    word = model.get_layer("source_word_dropout")
    assert model.get_layer("target_word_dropout").rate == 0.25
    out = ops.convert_to_numpy(word(np.ones((4, 9, 16), "float32"), training=True))
    zeroed = (out == 0).all(-1)  # (4, 9): a draw per position, not per feature
    assert zeroed.any() and (~zeroed).any()
    np.testing.assert_allclose(out[~zeroed], 2.0)  # the kept positions scaled by 1 / (1 - 0.5)

    # Late dropout changes the residual and embedding rates only; word dropout keeps its own.
    assert word not in model.residual_dropouts()
    assert model.set_residual_dropout(0.3) == 2 + 2 * 2 + 2 * 3 and word.rate == 0.5


def test_saved_model_reloads_in_a_fresh_process(tmp_path, batch):
    model = Transformer(**TINY)
    path, inputs_path = tmp_path / "m.keras", tmp_path / "batch.npz"
    model.save(path)
    source, target_in = batch
    np.savez(inputs_path, source=source, target_in=target_in)
    expected = model_logits(model, source, target_in)
    script = (
        "import sys, numpy as np, keras, kmt.models.transformer\n"
        "m = keras.saving.load_model(sys.argv[1], safe_mode=True)\n"
        "b = np.load(sys.argv[2])\n"
        "inputs = {'source': b['source'].astype('int32'), 'target_in': b['target_in'].astype('int32')}\n"
        "out = m(inputs, training=False)\n"
        "np.save(sys.argv[3], keras.ops.convert_to_numpy(out))\n"
    )
    out_path = tmp_path / "logits.npy"
    subprocess.run(
        [sys.executable, "-c", script, str(path), str(inputs_path), str(out_path)],
        check=True,
        env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=600,
    )
    np.testing.assert_allclose(np.load(out_path), expected, atol=1e-6)


def test_marian_switches_shape_the_graph_and_decode_step_alike(batch):
    keras.utils.set_random_seed(3)
    model = Transformer(**TINY | {"dropout": 0.0, "max_length": 16}, **MARIAN)
    assert {layer.feed_forward.activation for layer in model.encoder_layers + model.decoder_layers} == {"swish"}
    assert model.source_embedding.position_layout == "halves"
    assert [w.path for w in model.output_bias.weights] == ["output_bias/bias"]
    source, target_in = batch
    target_in[:, 0] = 2  # the start token
    before = model_logits(model, source, target_in)
    bias = np.linspace(-1.0, 1.0, 23).astype("float32")
    model.output_bias.bias.assign(bias)
    full = model_logits(model, source, target_in)  # (B, T, V)
    np.testing.assert_allclose(full, before + bias, atol=1e-5)  # the training graph adds it

    from kmt.inference.steps import cached_next_fn

    encoder_outputs, source_mask = model.encode(ops.convert_to_tensor(source, "int32"))
    next_fn, state = cached_next_fn(model, encoder_outputs, source_mask, target_in.shape[1])
    tokens = ops.convert_to_tensor(np.pad(target_in, ((0, 0), (0, 1))), "int32")  # (B, T+1)
    for index in range(target_in.shape[1]):  # decode_step adds it too: the cached step is the teacher-forced pass
        logits, state = next_fn(tokens, ops.convert_to_tensor(index, "int32"), state)
        np.testing.assert_allclose(ops.convert_to_numpy(logits), full[:, index], atol=1e-5)


def test_marian_switches_change_the_outputs_and_refuse_what_they_cannot_be(batch):
    keras.utils.set_random_seed(3)
    plain = Transformer(**TINY)
    for switch, value in MARIAN.items():
        switched = Transformer(**TINY, **{switch: value})
        switched.set_weights(plain.get_weights() + [np.ones(23, "float32")] * (switch == "output_bias"))
        assert not np.allclose(model_logits(switched, *batch), model_logits(plain, *batch), atol=1e-3), switch
    with pytest.raises(ValueError, match="output_bias=True needs tied_output=True"):
        Transformer(**TINY, tied_output=False, output_bias=True)
    with pytest.raises(
        ValueError, match="activation must be one of relu, gelu, swish, silu. Received: activation='tanh'"
    ):
        Transformer(**TINY, activation="tanh")
    with pytest.raises(ValueError, match="position_layout must be one of interleaved, halves"):
        Transformer(**TINY, position_layout="t2t")


def test_marian_switches_survive_a_keras_save_and_load(tmp_path, batch):
    model = Transformer(**TINY, **MARIAN)
    model.output_bias.bias.assign(np.arange(23, dtype="float32") / 10)
    expected = model_logits(model, *batch)
    model.save(tmp_path / "m.keras")
    revived = keras.saving.load_model(tmp_path / "m.keras")
    assert {key: revived.get_config()[key] for key in MARIAN} == MARIAN
    np.testing.assert_allclose(model_logits(revived, *batch), expected, atol=1e-6)
    model.save_weights(tmp_path / "m.weights.h5")
    fresh = Transformer(**TINY, **MARIAN)
    fresh.load_weights(tmp_path / "m.weights.h5")
    np.testing.assert_allclose(model_logits(fresh, *batch), expected, atol=1e-6)


def test_model_learns_a_copy_task():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = Transformer(**TINY | {"dropout": 0.0})
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=MaskedCrossEntropy(), metrics=[MaskedAccuracy()])
    source = rng.integers(3, 23, size=(32, 6)).astype("int32")
    target_in = np.concatenate([np.full((32, 1), 1), source[:, :-1]], axis=1).astype("int32")
    losses = [float(model.train_on_batch(model_inputs(source, target_in), source)[0]) for _ in range(60)]
    assert losses[-1] < 0.6 * losses[0]
