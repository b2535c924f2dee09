"""Step functions: a `next_fn(tokens, index, state) -> (logits, state)` (see `kmt.inference.search`) that runs a
model's decoder (`kmt.model.TransformerParts` or `kmt.lstm.LSTMParts`) over what was decoded so far, with a cache
(a Transformer's keys and values, an LSTM's recurrent state) or without."""

from keras import ops

from kmt.layers.masks import causal_mask, target_attention_mask
from kmt.lstm import lstm_parts
from kmt.model import transformer_parts


def decoding_parts(model):
    """`model`'s parts as decoding runs them: `LSTMParts` for a `build_lstm` model, else `TransformerParts`. Both
    have `max_length`, `encode(source) -> (encoder_outputs, source_mask)` and `logits(states)`."""
    return lstm_parts(model) or transformer_parts(model)


def cached_next_fn(model, encoder_outputs, source_mask, max_length):
    """A `next_fn` that feeds one token per step and keeps each decoder layer's keys and values.

    The state is a list, one self-attention cache `(N, 2, L+1, H, D/H)` per decoder layer, zeros at first; step
    `index` embeds the token at `index` (position `index`), writes its keys and values there and attends to keys
    `<= index`. The cross-attention caches `(N, 2, S, H, D/H)` are projected once here and closed over rather than
    carried in the state: beams are only ever reordered within a sentence, whose rows all hold the same encoder
    output, so reordering them would change nothing.

    Args:
        model: a `build_transformer` model.
        encoder_outputs: `(N, S, D)` from `TransformerParts.encode`, expanded to beams if searching with beams.
        source_mask: `(N, 1, S)` bool from `TransformerParts.encode`, expanded alike.
        max_length: int or scalar int tensor L; the token buffer has L+1 columns.

    Returns `(next_fn, initial_state)`.
    """
    if lstm_parts(model):
        return lstm_cached_next_fn(model, encoder_outputs, source_mask, max_length)
    parts = transformer_parts(model)
    cross_caches = parts.cross_caches(encoder_outputs)
    state = parts.empty_caches(ops.shape(encoder_outputs)[0], max_length + 1)

    def next_fn(tokens, index, state):
        token = ops.take(tokens, ops.reshape(index, (1,)), axis=1)  # (N, 1)
        self_mask = causal_mask(1, max_length + 1, offset=index)[None, :, :]  # (1, 1, L+1): keys <= index
        states, caches = parts.decode(token, None, source_mask, self_mask, start_index=index, caches=state,
                                      cross_caches=cross_caches)  # (N, 1, D)
        return parts.logits(states)[:, 0, :], caches  # (N, V)

    return next_fn, state


def uncached_next_fn(model, encoder_outputs, source_mask, max_length):
    """A `next_fn` that reruns the decoder over the whole token buffer each step (for tests and benchmarks).

    Future positions are hidden by the model's own causal-and-padding mask; the logits are read at `index`. The
    state is empty and `max_length` is unused; the signature matches `cached_next_fn` so either can be passed.
    """
    if lstm_parts(model):
        return lstm_uncached_next_fn(model, encoder_outputs, source_mask, max_length)
    parts = transformer_parts(model)

    def next_fn(tokens, index, state):
        y = parts.decode(tokens, encoder_outputs, source_mask, target_attention_mask(tokens))  # (N, L+1, D)
        y = ops.take(y, ops.reshape(index, (1,)), axis=1)  # (N, 1, D)
        return parts.logits(y)[:, 0, :], state  # (N, V)

    return next_fn, ()


def lstm_cached_next_fn(model, encoder_outputs, source_mask, max_length):
    """`cached_next_fn` for a `build_lstm` model: one token a step, the state being the decoder's (each layer's h
    and c, then the attentional vector it feeds back), `[(N, D), ...]`, from `AttentionDecoder.initial_state`. The
    attention keys are computed once and, with the encoder outputs and mask, closed over (beams of a sentence share
    them, as a Transformer's cross-attention caches). `max_length` is unused."""
    parts = lstm_parts(model)
    keys = parts.decoder.keys(encoder_outputs)  # (N, S, D)

    def next_fn(tokens, index, state):
        token = ops.take(tokens, ops.reshape(index, (1,)), axis=1)[:, 0]  # (N,)
        attentional, state = parts.decoder.step(parts.target_embedding(token), state, keys, encoder_outputs,
                                                source_mask)  # (N, D)
        return parts.logits(attentional), state  # (N, V)

    return next_fn, parts.decoder.initial_state(encoder_outputs)


def lstm_uncached_next_fn(model, encoder_outputs, source_mask, max_length):
    """`uncached_next_fn` for a `build_lstm` model: the decoder reruns over the whole token buffer each step (what
    follows `index` cannot reach it: the recurrence runs forward) and the logits are read at `index`."""
    parts = lstm_parts(model)

    def next_fn(tokens, index, state):
        y = parts.decode(tokens, encoder_outputs, source_mask)  # (N, L+1, D)
        y = ops.take(y, ops.reshape(index, (1,)), axis=1)[:, 0]  # (N, D)
        return parts.logits(y), state  # (N, V)

    return next_fn, ()
