"""Scoring: a model's log-probability of given translations (forced decoding)."""

from keras import ops

from kmt.inference.ensemble import ensemble_log_probs, ensemble_members
from kmt.inference.lengths import max_length_of
from kmt.special_ids import END_ID, PAD_ID, START_ID


def score_ids(model, source, target, *, start_id=START_ID, end_id=END_ID, pad_id=PAD_ID):
    """The model's log-probability of given translations (forced decoding): each target token and the end token,
    predicted from the source and the target prefix in one teacher-forced pass, as in training but without
    dropout. fairseq-generate's `--score-reference`, OpenNMT-tf's `score` run type: for filtering a corpus, reranking
    an n-best list with another model, or a test set's perplexity.

    Args:
        model: a `kmt.models.Seq2SeqModel`, or a list of them sharing one vocabulary: an ensemble, whose
            probability of a token is the mean of the models' (as in `kmt.inference.decoding.search_ids`).
        source: int `(B, S)` source ids, pad 0.
        target: int `(B, T)` target ids WITHOUT start and end tokens, pad after each sentence's last token;
            T + 1 positions (the start token's and T tokens') must fit the model's `max_length`.
        start_id, end_id, pad_id: ints. Default to `kmt.special_ids`' `START_ID`, `END_ID`, `PAD_ID`.

    Returns `(scores, lengths)`: float32 `(B,)` sums of the log-probabilities of each sentence's tokens and its end
    token (what greedy search reports for its own output), and int32 `(B,)` the count of tokens scored (target
    tokens + 1).
    """
    source = ops.convert_to_tensor(source, "int32")
    target = ops.convert_to_tensor(target, "int32")
    models = ensemble_members(model)
    max_length = max_length_of(models)
    if max_length and isinstance(target.shape[1], int) and target.shape[1] + 1 > max_length:
        raise ValueError(
            f"score_ids: targets of {target.shape[1]} tokens plus the start token do not fit the model's "
            f"max_length {max_length}. Received: target.shape={tuple(target.shape)}"
        )
    lengths = ops.sum(ops.cast(ops.not_equal(target, pad_id), "int32"), axis=1)  # (B,)
    column = ops.zeros((ops.shape(target)[0], 1), "int32")  # (B, 1) pad
    target_in = ops.concatenate([column + start_id, target], axis=1)  # (B, T+1): shifted right behind the start
    labels = ops.concatenate([target, column], axis=1)  # (B, T+1), the end token goes at each sentence's length
    positions = ops.expand_dims(ops.arange(ops.shape(labels)[1], dtype="int32"), 0)  # (1, T+1)
    labels = ops.where(ops.equal(positions, ops.expand_dims(lengths, 1)), end_id, labels)
    inputs = {"source": source, "target_in": target_in}
    log_probs = ensemble_log_probs([member(inputs, training=False) for member in models])  # (B, T+1, V)
    picked = ops.take_along_axis(log_probs, ops.expand_dims(labels, -1), axis=-1)[..., 0]  # (B, T+1)
    scores = ops.sum(ops.where(ops.not_equal(labels, pad_id), picked, 0.0), axis=1)
    return scores, lengths + 1
