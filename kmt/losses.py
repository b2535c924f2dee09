"""Label-smoothed cross-entropy, token accuracy and perplexity, all over non-pad target tokens only; and guided
alignment's cross-entropy of an attention head against word alignments."""

import keras
from keras import ops

from kmt.special_ids import PAD_ID


def _real_tokens(y_true, pad_id):
    """`(B, T)` float32: 1 at real target tokens, 0 at pads."""
    return ops.cast(ops.not_equal(y_true, pad_id), "float32")


def _log_probs(logits):
    """`(B, T, V)` float32 log-softmax of the logits. The loss and the perplexity metric both call this on the same
    logits, so a compiled train step holds the same ops twice and TensorFlow computes them once."""
    return ops.log_softmax(ops.cast(logits, "float32"), axis=-1)


def _nll(y_true, log_probs):
    """`(B, T)` -log p of the int32 targets `y_true`, picked out of the `(B, T, V)` `log_probs`. For the perplexity
    metric, which takes no gradient: the loss does not pick, as a pick's gradient is a scatter into a `(B, T, V)`
    zero tensor."""
    return -ops.squeeze(ops.take_along_axis(log_probs, y_true[..., None], axis=-1), axis=-1)


def _global_tokens(tokens):
    """The real target tokens of the whole global batch, of which this batch holds `tokens`.

    Under `tf.distribute`, each replica computes the loss of its share of the batch and the replicas' gradients are
    summed (Keras leaves a scalar loss as it is). Dividing each replica's sum by the global count makes the update
    follow the mean over every real token of the global batch, the update one device computes on the whole batch,
    and not the mean of the replicas' means. JAX's `keras.distribution` computes on the global batch itself."""
    if keras.backend.backend() != "tensorflow":
        return tokens
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tokens
    return context.all_reduce(tf.distribute.ReduceOp.SUM, tokens)


@keras.saving.register_keras_serializable(package="kmt")
class MaskedCrossEntropy(keras.losses.Loss):
    """Cross-entropy with label smoothing (Szegedy et al., 2016; the paper, section 5.4), averaged over the
    batch's non-pad target tokens.

    With smoothing epsilon and V classes the target distribution is `(1 - epsilon) * onehot + epsilon / V`, so
    `loss = (1 - epsilon) * -log p(y) + epsilon * mean_v(-log p(v))`. Pad positions (`y == pad_id`) weigh
    nothing, and the sum is divided by the number of real tokens, not by B * T.

    Args:
        label_smoothing: float in [0, 1). Defaults to `0.1`, the paper's epsilon_ls.
        pad_id: int. Target id that is ignored. Defaults to `0`.

    Call arguments:
        y_true: `(B, T)` int target ids.
        y_pred: `(B, T, V)` float logits.

    Example:
    >>> loss = MaskedCrossEntropy(label_smoothing=0.0)
    >>> float(loss(keras.ops.array([[1, 0]]), keras.ops.zeros((1, 2, 4))))  # log(4), the pad ignored
    1.3862943649291992
    """

    def __init__(self, label_smoothing=0.1, pad_id=PAD_ID, name="masked_cross_entropy", **kwargs):
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1). Received: label_smoothing={label_smoothing}")
        super().__init__(name=name, reduction="sum", **kwargs)
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        vocab_size = y_pred.shape[-1]
        # -sum_v target_v log p(v) with the smoothed target distribution written out, so the gradient reaching the
        # log-probabilities is -target, elementwise, and not the scatter of a pick's gradient into a (B, T, V) zero
        # tensor (docs/experiments/performance.md, "Where a step's time goes").
        target = ops.one_hot(y_true, vocab_size) * (1.0 - self.label_smoothing) + self.label_smoothing / vocab_size
        per_token = -ops.sum(target * _log_probs(y_pred), axis=-1)  # (B, T)
        weights = _real_tokens(y_true, self.pad_id)  # (B, T)
        return ops.sum(per_token * weights) / ops.maximum(_global_tokens(ops.sum(weights)), 1.0)

    def get_config(self):
        return {"name": self.name, "label_smoothing": self.label_smoothing, "pad_id": self.pad_id}


class _MaskedTokenMean(keras.metrics.Metric):
    """The mean of a per-token value (`token_values`) over the non-pad target tokens of every batch so far."""

    def __init__(self, pad_id=PAD_ID, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.sum = self.add_variable(shape=(), initializer="zeros", name="sum")
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def token_values(self, y_true, y_pred):
        """`(B, T)` float32 value of each target position (pads included; they are weighed out)."""
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        weights = _real_tokens(y_true, self.pad_id)
        self.sum.assign_add(ops.sum(self.token_values(y_true, y_pred) * weights))
        self.total.assign_add(ops.sum(weights))

    def result(self):
        return self.sum / ops.maximum(self.total, 1.0)

    def get_config(self):
        return {"name": self.name, "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="kmt")
class MaskedAccuracy(_MaskedTokenMean):
    """Fraction of non-pad target tokens whose argmax prediction is right, accumulated over batches.

    Args:
        pad_id: int. Target id that is ignored. Defaults to `0`.
    """

    def __init__(self, pad_id=PAD_ID, name="accuracy", **kwargs):
        super().__init__(pad_id=pad_id, name=name, **kwargs)

    def token_values(self, y_true, y_pred):
        # The index of the largest logit, the first of equal ones as argmax picks it. ops.argmax would do, but on
        # TensorFlow it first casts bfloat16 logits to float32 and sets -0.0 apart from 0.0 in four more passes
        # over the (B, T, V) logits: top_k took 36 ms against its 81 on a (179, 21, 8000) bfloat16 batch here.
        predicted = ops.top_k(y_pred, 1, sorted=False)[1][..., 0]
        return ops.cast(ops.equal(ops.cast(predicted, "int32"), y_true), "float32")


@keras.saving.register_keras_serializable(package="kmt")
class MaskedPerplexity(_MaskedTokenMean):
    """Perplexity of the non-pad target tokens, `exp` of their mean cross-entropy without label smoothing,
    accumulated over batches (fairseq's `ppl`, OpenNMT-tf's perplexity).

    The training loss includes label smoothing, so runs with different `optim.label_smoothing` cannot be compared
    by loss; their perplexities can.

    Args:
        pad_id: int. Target id that is ignored. Defaults to `0`.

    Example:
    >>> metric = MaskedPerplexity()
    >>> metric.update_state(keras.ops.array([[1, 0]]), keras.ops.zeros((1, 2, 4)))  # uniform over 4, the pad ignored
    >>> round(float(metric.result()), 4)
    4.0
    """

    def __init__(self, pad_id=PAD_ID, name="ppl", **kwargs):
        super().__init__(pad_id=pad_id, name=name, **kwargs)

    def token_values(self, y_true, y_pred):
        return _nll(y_true, _log_probs(y_pred))

    def result(self):
        return ops.exp(super().result())  # of the mean cross-entropy


def guided_alignment_loss(reference, attention, epsilon=1e-9):
    """Guided alignment's cross-entropy (Garg et al., 2019, the alignment loss of their multi-task training;
    OpenNMT-tf's `guided_alignment_type: ce`): `-sum_s ref[t, s] * log(attention[t, s])`, each supervised row's
    links normalized to sum 1, averaged over the supervised rows (those with a link) of the whole global batch (as
    `MaskedCrossEntropy` averages over tokens); 0 when no row has a link.

    Args:
        reference: `(B, T, S)` links, 1 where target position t links source position s (any numeric dtype).
        attention: `(B, T, S)` attention weights, each row a distribution over the source.
        epsilon: float. The least weight taken to the log (a padded source position's is 0). Defaults to `1e-9`.

    Example:
    >>> reference = keras.ops.array([[[1, 1, 0], [0, 0, 0]]])  # row 0: source 0 and 1; row 1: no link
    >>> attention = keras.ops.array([[[0.5, 0.5, 0.0], [0.2, 0.2, 0.6]]])
    >>> round(float(guided_alignment_loss(reference, attention)), 4)  # -(0.5 log 0.5 + 0.5 log 0.5) = log 2
    0.6931
    """
    reference = ops.cast(reference, "float32")
    links = ops.sum(reference, axis=-1)  # (B, T)
    supervised = ops.cast(links > 0, "float32")  # (B, T)
    target = reference / ops.maximum(links, 1.0)[..., None]  # (B, T, S): rows summing to 1
    log_attention = ops.log(ops.maximum(ops.cast(attention, "float32"), epsilon))  # (B, T, S)
    per_row = -ops.sum(target * log_attention, axis=-1)  # (B, T)
    return ops.sum(per_row * supervised) / ops.maximum(_global_tokens(ops.sum(supervised)), 1.0)
