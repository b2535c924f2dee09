import math

import keras
import numpy as np
import pytest
from keras import ops

from kmt.losses import MaskedAccuracy, MaskedCrossEntropy, MaskedPerplexity


def test_pad_tokens_carry_no_loss_and_mean_is_over_real_tokens():
    logits = np.random.default_rng(0).normal(size=(2, 3, 5)).astype("float32")
    y = np.array([[1, 2, 0], [3, 0, 0]])
    loss = MaskedCrossEntropy(label_smoothing=0.0)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(log_probs[0, 0, 1] + log_probs[0, 1, 2] + log_probs[1, 0, 3]) / 3
    assert float(loss(y, logits)) == pytest.approx(expected, rel=1e-5)
    changed = logits.copy()
    changed[y == 0] = 100.0  # whatever the model says at pads
    assert float(loss(y, changed)) == pytest.approx(expected, rel=1e-5)


def test_label_smoothing_matches_smoothed_one_hot_cross_entropy():
    rng = np.random.default_rng(1)
    logits, y, eps, vocab = rng.normal(size=(1, 4, 7)).astype("float32"), np.array([[1, 2, 3, 4]]), 0.1, 7
    target = np.eye(vocab)[y] * (1 - eps) + eps / vocab
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(target * log_probs).sum(-1).mean()
    assert float(MaskedCrossEntropy(label_smoothing=eps)(y, logits)) == pytest.approx(expected, rel=1e-5)


def gradient(fn, x):
    """d fn(x) / dx under the backend Keras runs on (CI runs these tests under TensorFlow and JAX)."""
    if keras.backend.backend() == "jax":
        import jax

        return np.asarray(jax.grad(fn)(x))
    import tensorflow as tf

    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = fn(x)
    return tape.gradient(value, x).numpy()


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradient_is_softmax_minus_smoothed_target_over_real_tokens(eps):
    rng = np.random.default_rng(3)
    logits, y, vocab = rng.normal(size=(2, 3, 6)).astype("float32"), np.array([[1, 2, 0], [5, 0, 0]]), 6
    target = np.eye(vocab)[y] * (1 - eps) + eps / vocab
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    real = (y != 0)[..., None]
    expected = (probs - target) * real / real.sum()  # pads get no gradient
    loss = MaskedCrossEntropy(label_smoothing=eps)
    assert gradient(lambda x: loss(y, x), logits) == pytest.approx(expected, abs=1e-6)


def test_uniform_logits_give_log_vocab():
    assert float(MaskedCrossEntropy()(np.array([[2, 1]]), np.zeros((1, 2, 8)))) == pytest.approx(math.log(8))


def test_masked_accuracy_counts_real_tokens_across_batches():
    metric = MaskedAccuracy()
    eye = np.eye(4, dtype="float32")
    metric.update_state(np.array([[1, 2, 0]]), eye[[[1, 3, 0]]])  # 1 of 2 right, the pad ignored
    metric.update_state(np.array([[3, 0, 0]]), eye[[[3, 1, 1]]])  # 1 of 1 right
    assert float(ops.convert_to_numpy(metric.result())) == pytest.approx(2 / 3)


def test_masked_perplexity_is_exp_of_unsmoothed_cross_entropy_across_batches():
    rng = np.random.default_rng(2)
    batches = [
        (np.array([[1, 2, 0]]), rng.normal(size=(1, 3, 6)).astype("float32")),
        (np.array([[3, 4, 5]]), rng.normal(size=(1, 3, 6)).astype("float32")),
    ]
    metric = MaskedPerplexity()
    nll = []
    for y, logits in batches:
        metric.update_state(y, logits)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        nll += [-log_probs[0, t, y[0, t]] for t in range(3) if y[0, t] != 0]  # 5 real tokens, the pad ignored
    assert float(ops.convert_to_numpy(metric.result())) == pytest.approx(math.exp(np.mean(nll)), rel=1e-5)
    smoothed = MaskedCrossEntropy(label_smoothing=0.1)(*batches[1])
    assert float(smoothed) != pytest.approx(np.mean(nll[2:]), rel=1e-3)  # the loss would not compare across epsilons


def test_rejects_bad_smoothing():
    with pytest.raises(ValueError, match="label_smoothing=1.5"):
        MaskedCrossEntropy(label_smoothing=1.5)
