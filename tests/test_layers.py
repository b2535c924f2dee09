import math

import keras
import numpy as np
import pytest
from keras import ops

from kmt.layers import (
    MASK_VALUE,
    Bias,
    DecoderLayer,
    Dropout,
    EncoderLayer,
    FeedForward,
    MultiHeadAttention,
    PositionalEmbedding,
    causal_mask,
    positional_encoding,
    source_attention_mask,
    target_attention_mask,
)


def test_positional_encoding_matches_the_formula():
    length, depth = 20, 10
    table = ops.convert_to_numpy(positional_encoding(length, depth))
    assert table.shape == (length, depth)
    for pos in range(length):
        for i in range(depth // 2):
            angle = pos / 10000 ** (2 * i / depth)
            assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-5)


def marian_sinusoids(n_pos, dim):
    """transformers' MarianSinusoidalPositionalEmbedding.create_weight, in numpy (float64, then float32)."""
    position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)])
    out = np.empty((n_pos, dim), np.float32)
    sentinel = dim // 2 if dim % 2 == 0 else (dim // 2) + 1
    out[:, 0:sentinel] = np.sin(position_enc[:, 0::2])
    out[:, sentinel:] = np.cos(position_enc[:, 1::2])
    return out


def test_halves_layout_is_marians_table():
    table = ops.convert_to_numpy(positional_encoding(64, 16, layout="halves"))
    np.testing.assert_allclose(table, marian_sinusoids(64, 16), atol=2e-5)  # kmt computes the angles in float32
    interleaved = ops.convert_to_numpy(positional_encoding(64, 16))
    np.testing.assert_array_equal(table[:, :8], interleaved[:, 0::2])  # the same sines and cosines, moved
    np.testing.assert_array_equal(table[:, 8:], interleaved[:, 1::2])
    layer = PositionalEmbedding(vocab_size=11, hidden_dim=16, position_layout="halves")
    ids = np.array([[3, 4, 5]])
    out = ops.convert_to_numpy(layer(ids))
    expected = ops.convert_to_numpy(layer.embeddings)[ids[0]] * 4.0 + table[:3]
    np.testing.assert_allclose(out[0], expected, atol=1e-5)
    with pytest.raises(ValueError, match="position_layout must be interleaved or halves"):
        positional_encoding(4, 16, layout="alternate")
    with pytest.raises(ValueError, match="even depth"):
        positional_encoding(4, 15, layout="halves")


@pytest.mark.parametrize("activation", ["swish", "silu"])
def test_swish_feed_forward_is_x_times_sigmoid_x(activation):
    layer = FeedForward(hidden_dim=8, intermediate_dim=16, activation=activation)
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    out = ops.convert_to_numpy(layer(x))
    w1, b1 = (ops.convert_to_numpy(v) for v in (layer.intermediate_dense.kernel, layer.intermediate_dense.bias))
    w2, b2 = (ops.convert_to_numpy(v) for v in (layer.output_dense.kernel, layer.output_dense.bias))
    h = x @ w1 + b1
    np.testing.assert_allclose(out, (h / (1 + np.exp(-h))) @ w2 + b2, atol=1e-5)
    encoder = EncoderLayer(hidden_dim=8, num_heads=2, intermediate_dim=16, activation=activation)
    encoder(x)
    assert encoder.feed_forward.activation == activation


def test_bias_adds_a_learned_vector_zeros_at_first():
    layer = Bias(name="output_bias")
    logits = np.random.default_rng(0).normal(size=(2, 3, 5)).astype("float32")
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(logits)), logits)
    assert [w.path for w in layer.weights] == ["output_bias/bias"]
    layer.bias.assign(np.arange(5, dtype="float32"))
    np.testing.assert_allclose(ops.convert_to_numpy(layer(logits)), logits + np.arange(5), atol=1e-6)


def test_masks_are_boolean_and_true_means_attend():
    source = np.array([[5, 6, 0]])
    np.testing.assert_array_equal(ops.convert_to_numpy(source_attention_mask(source)), [[[True, True, False]]])
    target = np.array([[1, 7, 0]])
    expected = [[True, False, False], [True, True, False], [True, True, False]]
    np.testing.assert_array_equal(ops.convert_to_numpy(target_attention_mask(target))[0], expected)
    np.testing.assert_array_equal(ops.convert_to_numpy(causal_mask(2, 4, offset=2)), [[1, 1, 1, 0], [1, 1, 1, 1]])
    assert np.float16(MASK_VALUE) == MASK_VALUE  # representable, hence finite, in float16


def _load_keras_weights(ours, theirs):
    """Copies keras.layers.MultiHeadAttention's (D, H, Dh) einsum kernels into our (D, H*Dh) dense kernels."""
    q, qb, k, kb, v, vb, o, ob = [ops.convert_to_numpy(w) for w in theirs.weights]
    ours.set_weights(
        [
            q.reshape(q.shape[0], -1),
            qb.reshape(-1),
            k.reshape(k.shape[0], -1),
            kb.reshape(-1),
            v.reshape(v.shape[0], -1),
            vb.reshape(-1),
            o.reshape(-1, o.shape[-1]),
            ob,
        ]
    )


def test_attention_matches_keras_multi_head_attention():
    rng = np.random.default_rng(0)
    query = rng.normal(size=(2, 5, 16)).astype("float32")
    value = rng.normal(size=(2, 7, 16)).astype("float32")
    mask = rng.random((2, 5, 7)) > 0.3
    mask[..., 0] = True  # every query sees at least one key
    theirs = keras.layers.MultiHeadAttention(num_heads=4, key_dim=4)
    expected = theirs(query, value, attention_mask=mask)
    ours = MultiHeadAttention(num_heads=4, key_dim=4)
    ours(query, value)
    _load_keras_weights(ours, theirs)
    got = ours(query, value, attention_mask=mask)
    assert np.max(np.abs(ops.convert_to_numpy(got) - ops.convert_to_numpy(expected))) <= 1e-5


def test_attention_cache_step_by_step_equals_full_causal_pass():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 16)).astype("float32")
    attention = MultiHeadAttention(num_heads=4, key_dim=4)
    full = ops.convert_to_numpy(attention(x, x, attention_mask=causal_mask(6)[None]))
    cache = (ops.zeros((2, 4, 6, 4)), ops.zeros((2, 4, 6, 4)))  # keys, values: (B, H, L, d_k)
    for t in range(6):
        step, cache = attention(
            x[:, t : t + 1],
            x[:, t : t + 1],
            attention_mask=causal_mask(1, 6, offset=t)[None],
            cache=cache,
            cache_update_index=t,
        )
        np.testing.assert_allclose(ops.convert_to_numpy(step)[:, 0], full[:, t], atol=1e-5)
    for written, projected in zip(cache, attention.compute_cache(x)):  # each step wrote its own row, once
        np.testing.assert_allclose(ops.convert_to_numpy(written), ops.convert_to_numpy(projected), atol=1e-6)


def test_cross_attention_cache_equals_projecting_again():
    rng = np.random.default_rng(2)
    query, memory = rng.normal(size=(2, 3, 16)), rng.normal(size=(2, 5, 16))
    attention = MultiHeadAttention(num_heads=2, key_dim=8)
    expected = attention(query, memory)
    got, _ = attention(query, None, cache=attention.compute_cache(memory))
    np.testing.assert_allclose(ops.convert_to_numpy(got), ops.convert_to_numpy(expected), atol=1e-5)


def test_embedding_scales_tokens_and_adds_positions():
    layer = PositionalEmbedding(vocab_size=11, hidden_dim=8)
    ids = np.array([[3, 4, 5]])
    out = ops.convert_to_numpy(layer(ids))
    table = ops.convert_to_numpy(layer.embeddings)
    expected = table[ids[0]] * math.sqrt(8) + ops.convert_to_numpy(positional_encoding(3, 8))
    np.testing.assert_allclose(out[0], expected, atol=1e-5)
    shifted = ops.convert_to_numpy(layer(ids[:, 2:], start_index=2))
    np.testing.assert_allclose(shifted[0, 0], out[0, 2], atol=1e-5)
    logits = layer(np.ones((1, 2, 8), "float32"), reverse=True)
    assert tuple(logits.shape) == (1, 2, 11)


def test_learned_positions():
    layer = PositionalEmbedding(vocab_size=11, hidden_dim=8, max_length=16, learned_positions=True)
    assert tuple(layer(np.array([[1, 2, 3]])).shape) == (1, 3, 8)
    assert len(layer.weights) == 2
    with pytest.raises(ValueError, match="max_length"):
        PositionalEmbedding(vocab_size=11, hidden_dim=8, learned_positions=True)(np.array([[1]]))


LAYERS = [
    lambda: MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.1),
    lambda: PositionalEmbedding(vocab_size=13, hidden_dim=8, max_length=9, learned_positions=True),
    lambda: PositionalEmbedding(vocab_size=13, hidden_dim=8, position_layout="halves"),
    lambda: FeedForward(hidden_dim=8, intermediate_dim=16, activation_dropout=0.2),
    lambda: EncoderLayer(hidden_dim=8, num_heads=2, intermediate_dim=16, dropout=0.2, norm_first=True),
    lambda: DecoderLayer(hidden_dim=8, num_heads=2, intermediate_dim=16, attention_dropout=0.1, activation="swish"),
    lambda: Bias(name="output_bias"),
]


@pytest.mark.parametrize(
    "make", LAYERS, ids=["attention", "embedding", "embedding_halves", "feed_forward", "encoder", "decoder", "bias"]
)
def test_from_config_round_trips(make):
    layer = make()
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is type(layer) and revived.get_config() == config


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_and_decoder_shapes_and_dropout_only_in_training(norm_first):
    x, memory = np.random.rand(2, 4, 8).astype("float32"), np.random.rand(2, 6, 8).astype("float32")
    encoder = EncoderLayer(hidden_dim=8, num_heads=2, intermediate_dim=16, dropout=0.5, norm_first=norm_first)
    decoder = DecoderLayer(hidden_dim=8, num_heads=2, intermediate_dim=16, dropout=0.5, norm_first=norm_first)
    for call in (lambda **kw: encoder(x, **kw), lambda **kw: decoder(x, memory, **kw)):
        inference = [ops.convert_to_numpy(call(training=False)) for _ in range(2)]
        assert inference[0].shape == (2, 4, 8)
        np.testing.assert_array_equal(inference[0], inference[1])
        training = ops.convert_to_numpy(call(training=True))
        assert not np.allclose(training, inference[0])


def test_encoder_ignores_masked_positions():
    x = np.random.rand(1, 5, 8).astype("float32")
    encoder = EncoderLayer(hidden_dim=8, num_heads=2, intermediate_dim=16)
    mask = np.array([[[True, True, True, False, False]]])
    changed = x.copy()
    changed[:, 3:] = 9.0
    a = ops.convert_to_numpy(encoder(x, attention_mask=mask))
    b = ops.convert_to_numpy(encoder(changed, attention_mask=mask))
    np.testing.assert_allclose(a[:, :3], b[:, :3], atol=1e-5)


def test_heads_must_divide_hidden_dim():
    with pytest.raises(ValueError, match="hidden_dim=10, num_heads=3"):
        EncoderLayer(hidden_dim=10, num_heads=3, intermediate_dim=16)(np.zeros((1, 2, 10), "float32"))


def test_decoder_returns_cross_attention_weights_on_request():
    x, memory = np.random.rand(2, 3, 8).astype("float32"), np.random.rand(2, 5, 8).astype("float32")
    decoder = DecoderLayer(hidden_dim=8, num_heads=2, intermediate_dim=16)
    mask = np.array([[[True] * 5]] + [[[True, True, True, False, False]]])
    outputs, weights = decoder(x, memory, cross_attention_mask=mask, return_attention_scores=True)
    plain = decoder(x, memory, cross_attention_mask=mask)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), ops.convert_to_numpy(plain), atol=1e-6)
    weights = ops.convert_to_numpy(weights)
    assert weights.shape == (2, 2, 3, 5)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.abs(weights[1, :, :, 3:]).max() < 1e-6  # masked source positions get no attention


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_dropout_drops_the_rate_it_is_given_and_keeps_the_mean_in_bfloat16(rate):
    x = ops.ones((2000, 1000), dtype="bfloat16")  # 2M draws: the kept fraction's standard error is 0.0003
    layer = Dropout(rate, dtype="mixed_bfloat16", seed=1)
    y = ops.convert_to_numpy(ops.cast(layer(x, training=True), "float32"))
    assert (y != 0).mean() == pytest.approx(1 - rate, abs=0.0015)
    assert y.mean() == pytest.approx(1.0, abs=0.002)
    assert set(np.unique(y)) == {0.0, float(ops.cast(ops.cast(1 / (1 - rate), "bfloat16"), "float32"))}
    assert ops.convert_to_numpy(ops.cast(layer(x, training=False), "float32")).min() == 1.0
    if keras.backend.backend() == "tensorflow":  # what Keras's own Dropout does there: draws in bfloat16
        theirs = keras.layers.Dropout(rate, dtype="mixed_bfloat16", seed=1)
        kept = (ops.convert_to_numpy(ops.cast(theirs(x, training=True), "float32")) != 0).mean()
        assert kept < 1 - rate - 0.001  # from 128 bfloat16 values: 0.1 drops 10.16%, 0.3 drops 30.47%


def test_dropout_noise_shape_drops_whole_positions():
    x = ops.ones((8, 50, 16))
    y = ops.convert_to_numpy(Dropout(0.5, noise_shape=(None, None, 1), seed=2)(x, training=True))
    per_position = y.reshape(-1, 16)
    assert all(len(set(row)) == 1 for row in per_position)  # each position all kept (x2) or all dropped
    assert 0 < (per_position[:, 0] == 0).mean() < 1
