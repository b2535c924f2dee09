"""Step functions: a `next_fn(tokens, index, state) -> (logits, state)` (see `kmt.inference.search`) that runs a
model's decoder (a `kmt.models.Seq2SeqModel`'s decoding methods) over what was decoded so far, with a cache
(`decode_step`: a Transformer's keys and values, an LSTM's recurrent state) or without (`decode`)."""

from keras import ops


def cached_next_fn(model, encoder_outputs, source_mask, max_length):
    """A `next_fn` that feeds one token per step, carrying the model's `initial_state` and closing over its
    `decoding_context` (what the beams of a sentence share, projected once).

    Args:
        model: a `kmt.models.Seq2SeqModel`.
        encoder_outputs: `(N, S, D)` from `model.encode`, expanded to beams if searching with beams.
        source_mask: `(N, 1, S)` bool from `model.encode`, expanded alike.
        max_length: int or scalar int tensor L; the token buffer has L+1 columns.

    Returns `(next_fn, initial_state)`.
    """
    context = model.decoding_context(encoder_outputs, source_mask)

    def next_fn(tokens, index, state):
        return model.decode_step(tokens, index, state, context)  # (N, V)

    return next_fn, model.initial_state(encoder_outputs, source_mask, max_length)


def uncached_next_fn(model, encoder_outputs, source_mask, max_length):
    """A `next_fn` that reruns the decoder over the whole token buffer each step (for tests and benchmarks): the
    logits are read at `index`, which what follows it cannot reach. The state is empty and `max_length` is unused;
    the signature matches `cached_next_fn` so either can be passed."""

    def next_fn(tokens, index, state):
        logits = model.decode(tokens, encoder_outputs, source_mask)  # (N, L+1, V)
        return ops.take(logits, ops.reshape(index, (1,)), axis=1)[:, 0, :], state  # (N, V)

    return next_fn, ()
