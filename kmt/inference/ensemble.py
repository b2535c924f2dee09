"""Several models that share a vocabulary decode as one ensemble: each step scores the next token by the mean of
their probabilities (fairseq's `--path a.pt:b.pt`)."""

import math

from keras import ops

from kmt.models.base import Seq2SeqModel


def ensemble_members(model):
    """A model, or a list or tuple of models (an ensemble), as a non-empty list of `kmt.models.Seq2SeqModel`s."""
    models = list(model) if isinstance(model, (list, tuple)) else [model]
    if not models:
        raise ValueError("An ensemble needs at least one model. Received: an empty list")
    for member in models:
        # A SavedModel's module decodes through `kmt.inference.translator.SharedGraphs`, a model's stand-in.
        if not isinstance(getattr(member, "shared_model", member), Seq2SeqModel):
            raise ValueError(
                "Decoding needs a kmt.models.Seq2SeqModel (a model.keras saved before kmt's models were "
                "classes loads with kmt.checkpoints.load_run_keras). Received: model "
                f"{getattr(member, 'name', member)!r} of type {type(member).__name__}"
            )
    sizes = [member.outputs[0].shape[-1] for member in models]
    if len(set(sizes)) > 1:
        raise ValueError(f"An ensemble's models must share one target vocabulary. Received: vocabulary sizes {sizes}")
    return models


def ensemble_log_probs(logits):
    """The log of the mean of several models' probabilities: `logits`, one `(..., V)` tensor per model ->
    float32 `(..., V)` log-probabilities, `log(1/M sum_m softmax(logits_m))`, computed as a logsumexp. One model's
    logits come back as its log-softmax."""
    log_probs = [ops.log_softmax(ops.cast(x, "float32"), axis=-1) for x in logits]
    if len(log_probs) == 1:
        return log_probs[0]
    return ops.logsumexp(ops.stack(log_probs), axis=0) - math.log(len(log_probs))  # (M, ..., V) -> (..., V)


def ensemble_next_fn(next_fns):
    """One `next_fn` over several models' `next_fn`s: each step runs every model on its own state (a list, one
    state per model) and returns `ensemble_log_probs` of their logits, which the searches' log-softmax leaves
    unchanged. A single `next_fn` is returned as it is."""
    if len(next_fns) == 1:
        return next_fns[0]

    def next_fn(tokens, index, states):
        logits, new_states = [], []
        for member_fn, state in zip(next_fns, states):
            member_logits, state = member_fn(tokens, index, state)
            logits.append(member_logits)
            new_states.append(state)
        return ensemble_log_probs(logits), new_states  # (N, V)

    return next_fn
