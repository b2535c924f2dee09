"""Greedy and beam search over a `next_fn`, and the adapters that drive them with a Transformer's key/value cache.

The searches know nothing about the model. They call `next_fn(tokens, index, state) -> (logits, state)`:
`tokens` `(N, L+1)` int32 holds what was decoded so far (column 0 the start token, pad after `index`), `index` is
the position of the last known token (scalar int32), `logits` `(N, V)` score the token at `index + 1`, and
`state` is any nest of tensors with the rows on axis 0 (beam search reorders it when beams are reordered).
Both searches use `keras.ops.while_loop` with fixed-shape state, so they run under JAX and inside a TensorFlow
`tf.function` (the exported SavedModel) with dynamic batch and length. The pad token is never emitted before the
end token (its log-probability is set to -inf, as in fairseq), so pad only ever follows the end.

Example:
>>> from kmt.model import build_transformer
>>> model = build_transformer(vocab_size=20, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
>>> tokens, scores = translate_ids(model, keras.ops.ones((2, 5), dtype="int32"), beam_size=3)
>>> tuple(tokens.shape)  # (B, min(256, ceil(1.5 * 5 + 10)))
(2, 18)
"""

import math
from typing import Callable, NamedTuple

import keras
from keras import ops

from kmt.layers.masks import causal_mask, padding_mask, source_attention_mask, target_attention_mask

NEG_INF = float("-inf")


def _log_probs(logits, pad_id):
    """float32 log-softmax of `logits` (N, V), with the pad token made impossible."""
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)  # (N, V)
    vocab = ops.arange(ops.shape(log_probs)[-1])[None, :]  # (1, V)
    return ops.where(ops.equal(vocab, pad_id), NEG_INF, log_probs)


def _start_tokens(shape, max_length, start_id, pad_id):
    """int32 `(*shape, L+1)`: the start token in column 0, pad after it."""
    columns = ops.arange(max_length + 1)  # (L+1,)
    row = ops.cast(ops.where(ops.equal(columns, 0), start_id, pad_id), "int32")
    return ops.zeros((*shape, 1), "int32") + row  # (*shape, L+1)


def _write_column(tokens, column, values):
    """`tokens` (..., L+1) with `values` (...) written at `column` (a scalar tensor; no slice op needed)."""
    columns = ops.arange(ops.shape(tokens)[-1])  # (L+1,)
    return ops.where(ops.equal(columns, column), ops.expand_dims(values, -1), tokens)


def _length_penalty(length, alpha):
    """GNMT length penalty `lp(Y) = ((5 + |Y|) / 6) ** alpha` (Wu et al., 2016, section 7)."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def _sentence_limits(batch_size, max_length, max_lengths):
    """int32 `(B,)` per-sentence limits: `max_lengths`, or `max_length` for every sentence when it is None."""
    if max_lengths is None:
        return ops.zeros((batch_size,), "int32") + max_length
    return ops.convert_to_tensor(max_lengths, "int32")


def expand_to_beams(state, beam_size):
    """Repeats every row of every tensor in the nest `state` `beam_size` times on axis 0: (B, ...) -> (B*K, ...).

    Rows of one sentence stay adjacent (row `b * K + k` is beam k of sentence b), the layout `beam_search` uses.
    """
    return keras.tree.map_structure(lambda x: ops.repeat(x, beam_size, axis=0), state)


def greedy_search(next_fn, state, batch_size, max_length, start_id=2, end_id=3, pad_id=0, max_lengths=None):
    """Emits the most probable token at each step until every sequence has emitted `end_id` or reached its limit.

    Args:
        next_fn: `(tokens (B, L+1), index, state) -> (logits (B, V), state)`, see the module docstring.
        state: nest of tensors with leading axis B, passed to `next_fn`.
        batch_size: int or scalar tensor B.
        max_length: int or scalar int tensor L, the most tokens emitted after the start token (the loop bound).
        start_id, end_id, pad_id: ints. Defaults to `2`, `3`, `0`.
        max_lengths: int `(B,)` each sentence's own limit (at most L); a sentence that reaches it is finished,
            pad follows. Defaults to `None`: L for every sentence.

    Returns `(tokens, scores)`: int32 `(B, L+1)` with the start token in column 0 and pad after each `end_id`,
    and float32 `(B,)` sums of the log-probabilities of the emitted tokens (end included).
    """
    max_lengths = _sentence_limits(batch_size, max_length, max_lengths)  # (B,)
    tokens = _start_tokens((batch_size,), max_length, start_id, pad_id)  # (B, L+1)
    scores = ops.zeros((batch_size,), "float32")
    finished = ops.less_equal(max_lengths, 0)  # (B,)

    def cond(index, tokens, scores, finished, state):
        return ops.logical_and(ops.less(index, max_length), ops.logical_not(ops.all(finished)))

    def body(index, tokens, scores, finished, state):
        logits, state = next_fn(tokens, index, state)
        log_probs = _log_probs(logits, pad_id)  # (B, V)
        token = ops.cast(ops.argmax(log_probs, axis=-1), "int32")  # (B,)
        token_log_prob = ops.take_along_axis(log_probs, token[:, None], axis=1)[:, 0]  # (B,)
        token = ops.where(finished, pad_id, token)
        scores = scores + ops.where(finished, 0.0, token_log_prob)
        finished = ops.logical_or(finished, ops.equal(token, end_id))
        finished = ops.logical_or(finished, ops.greater_equal(index + 1, max_lengths))
        return index + 1, _write_column(tokens, index + 1, token), scores, finished, state

    index = ops.convert_to_tensor(0, "int32")
    _, tokens, scores, _, _ = ops.while_loop(cond, body, (index, tokens, scores, finished, state))
    return tokens, scores


def beam_search(
    next_fn,
    state,
    batch_size,
    max_length,
    beam_size=4,
    length_penalty=0.6,
    start_id=2,
    end_id=3,
    pad_id=0,
    max_lengths=None,
):
    """Beam search with the GNMT length penalty; returns the best finished hypothesis of each sentence.

    A hypothesis Y scores `log p(Y) / lp(Y)` with `lp(Y) = ((5 + |Y|) / 6) ** length_penalty` (Wu et al., 2016),
    |Y| counting the emitted tokens, end included. Each step extends the K alive beams by every token and keeps the
    2K best candidates by log-probability (at step 0 only beam 0 is alive, the others start at -inf). As in
    fairseq, a candidate ending in `end_id` is finished only if it ranks among the K best, and the K best
    non-finished candidates stay alive; a candidate reaching its sentence's limit (`max_lengths`) is finished there,
    so at that step the sentence's K best candidates finish and it is complete.

    Stopping: a sentence is complete once K hypotheses have finished (fairseq's rule; with K = 1 it makes beam
    search exactly greedy search), or earlier once no alive beam can beat its best finished score: an alive beam's
    log-probability can only fall and `lp` lies between `lp(index + 1)` and `lp(limit)`, so no alive beam can
    exceed `max(alive log p) / max(lp(index + 1), lp(limit))`. That bound never changes the result. The loop
    ends when every sentence is complete, else after `max_length` steps.

    Args:
        next_fn: `(tokens (B*K, L+1), index, state) -> (logits (B*K, V), state)`, see the module docstring.
        state: nest of tensors with leading axis B*K (use `expand_to_beams`); reordered with the beams.
        batch_size: int or scalar tensor B.
        max_length: int or scalar int tensor L, the most tokens emitted after the start token (the loop bound).
        beam_size: int K. Defaults to `4`.
        length_penalty: float alpha; 0 ranks by log-probability alone. Defaults to `0.6`.
        start_id, end_id, pad_id: ints. Defaults to `2`, `3`, `0`.
        max_lengths: int `(B,)` each sentence's own limit (at most L). Defaults to `None`: L for every sentence.

    Returns `(tokens, scores)`: int32 `(B, L+1)` with the start token in column 0 and pad after the end token,
    and float32 `(B,)` scores `log p(Y) / lp(Y)`.
    """
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive int. Received: beam_size={beam_size}")
    b, k = batch_size, beam_size
    rows = ops.arange(b)[:, None] * k  # (B, 1): row of each sentence's beam 0 in the flat (B*K) layout
    max_lengths = _sentence_limits(b, max_length, max_lengths)  # (B,)

    def cond(index, alive_tokens, alive_log_probs, best_tokens, best_scores, num_finished, state):
        penalty = ops.maximum(_length_penalty(index + 1, length_penalty), _length_penalty(max_lengths, length_penalty))
        bound = ops.max(alive_log_probs, axis=1) / penalty  # (B,) the best score an alive beam could still reach
        done = ops.logical_or(ops.greater_equal(num_finished, k), ops.greater_equal(best_scores, bound))
        return ops.logical_and(ops.less(index, max_length), ops.logical_not(ops.all(done)))

    def body(index, alive_tokens, alive_log_probs, best_tokens, best_scores, num_finished, state):
        length = index + 1  # tokens emitted once this step's token is appended
        flat_tokens = ops.reshape(alive_tokens, (b * k, -1))  # (B*K, L+1)
        logits, state = next_fn(flat_tokens, index, state)
        log_probs = _log_probs(logits, pad_id)  # (B*K, V)
        vocab_size = ops.shape(log_probs)[-1]
        log_probs = ops.reshape(log_probs, (b, k, vocab_size)) + alive_log_probs[:, :, None]  # (B, K, V)
        candidate_log_probs, candidates = ops.top_k(ops.reshape(log_probs, (b, k * vocab_size)), 2 * k)  # (B, 2K)
        candidate_beams, candidate_tokens = candidates // vocab_size, candidates % vocab_size  # (B, 2K) each
        ends = ops.logical_or(ops.equal(candidate_tokens, end_id), ops.greater_equal(length, max_lengths[:, None]))

        # Finished: ends ranked among the K best, while the sentence has fewer than K finished hypotheses.
        finishing = ops.logical_and(ends, ops.arange(2 * k)[None, :] < k)  # (B, 2K)
        finishing_count = ops.cumsum(ops.cast(finishing, "int32"), axis=1)  # (B, 2K)
        finishing = ops.logical_and(finishing, num_finished[:, None] + finishing_count <= k)
        num_finished = num_finished + ops.sum(ops.cast(finishing, "int32"), axis=1)
        scores = ops.where(finishing, candidate_log_probs / _length_penalty(length, length_penalty), NEG_INF)
        best = ops.expand_dims(ops.argmax(scores, axis=1), 1)  # (B, 1) best finishing candidate
        new_tokens = ops.take(flat_tokens, rows[:, 0] + ops.take_along_axis(candidate_beams, best, axis=1)[:, 0], 0)
        new_tokens = _write_column(new_tokens, length, ops.take_along_axis(candidate_tokens, best, axis=1)[:, 0])
        new_scores = ops.max(scores, axis=1)  # (B,)
        improved = ops.greater(new_scores, best_scores)
        best_tokens = ops.where(improved[:, None], new_tokens, best_tokens)
        best_scores = ops.where(improved, new_scores, best_scores)

        # Alive: the K best candidates that did not end; the state follows its beams.
        alive_log_probs, alive = ops.top_k(ops.where(ends, NEG_INF, candidate_log_probs), k)  # (B, K)
        origins = rows + ops.take_along_axis(candidate_beams, alive, axis=1)  # (B, K)
        origins = ops.reshape(origins, (b * k,))  # (B*K,)
        alive_tokens = ops.reshape(ops.take(flat_tokens, origins, axis=0), (b, k, -1))  # (B, K, L+1)
        alive_tokens = _write_column(alive_tokens, length, ops.take_along_axis(candidate_tokens, alive, axis=1))
        state = keras.tree.map_structure(lambda x: ops.take(x, origins, axis=0), state)
        return length, alive_tokens, alive_log_probs, best_tokens, best_scores, num_finished, state

    alive_tokens = _start_tokens((b, k), max_length, start_id, pad_id)  # (B, K, L+1)
    first_beam = ops.where(ops.equal(ops.arange(k), 0), 0.0, NEG_INF)  # (K,)
    alive_log_probs = ops.zeros((b, 1), "float32") + ops.cast(first_beam, "float32")  # (B, K)
    best_tokens = _start_tokens((b,), max_length, start_id, pad_id)  # (B, L+1)
    best_scores = ops.full((b,), NEG_INF, "float32")
    num_finished = ops.where(ops.less_equal(max_lengths, 0), k, 0)  # (B,) a sentence with limit 0 is complete
    index = ops.convert_to_tensor(0, "int32")
    loop_vars = (index, alive_tokens, alive_log_probs, best_tokens, best_scores, num_finished, state)
    outputs = ops.while_loop(cond, body, loop_vars)
    return outputs[3], outputs[4]


class TransformerParts(NamedTuple):
    """The sublayers of a `build_transformer` model that decoding calls, found by their names."""

    source_embedding: keras.layers.Layer
    target_embedding: keras.layers.Layer
    encoder_layers: list
    decoder_layers: list
    encoder_norm: keras.layers.Layer | None
    decoder_norm: keras.layers.Layer | None
    output_projection: Callable  # decoder states (B, T, D) -> logits (B, T, V)

    def logits(self, states):
        """Final decoder norm (pre-norm models), then the output projection: (B, T, D) -> float32 (B, T, V)."""
        if self.decoder_norm is not None:
            states = self.decoder_norm(states)
        return ops.cast(self.output_projection(states), "float32")


def transformer_parts(model):
    """Resolves the layer-name contract of `kmt.model.build_transformer` (see its docstring)."""
    layers = {layer.name: layer for layer in model.layers}

    def stack(prefix):  # prefix_0, prefix_1, ... in order
        return [layers[f"{prefix}_{i}"] for i in range(len(layers)) if f"{prefix}_{i}" in layers]

    encoder_layers, decoder_layers = stack("encoder_layer"), stack("decoder_layer")
    if "source_embedding" not in layers or not encoder_layers or not decoder_layers:
        raise ValueError(
            "Decoding needs a model from kmt.model.build_transformer (layers source_embedding, encoder_layer_0, "
            f"decoder_layer_0, ...). Received: model {model.name!r} with layers {sorted(layers)}"
        )
    target_embedding = layers.get("target_embedding", layers["source_embedding"])
    projection = layers.get("output_projection") or (lambda states: target_embedding(states, reverse=True))
    return TransformerParts(
        source_embedding=layers["source_embedding"],
        target_embedding=target_embedding,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        encoder_norm=layers.get("encoder_norm"),
        decoder_norm=layers.get("decoder_norm"),
        output_projection=projection,
    )


def encode(model, source):
    """Runs the encoder once (training=False): `source` int `(B, S)` -> (outputs `(B, S, D)`, mask `(B, 1, S)`)."""
    parts = transformer_parts(model)
    source_mask = source_attention_mask(source)  # (B, 1, S)
    x = parts.source_embedding(source)  # (B, S, D)
    for layer in parts.encoder_layers:
        x = layer(x, attention_mask=source_mask, training=False)
    if parts.encoder_norm is not None:
        x = parts.encoder_norm(x)
    return x, source_mask


def cached_next_fn(model, encoder_outputs, source_mask, max_length):
    """A `next_fn` that feeds one token per step and keeps each decoder layer's keys and values.

    The state is a list, one self-attention cache `(N, 2, L+1, H, D/H)` per decoder layer, zeros at first; step
    `index` embeds the token at `index` (position `index`), writes its keys and values there and attends to keys
    `<= index`. The cross-attention caches `(N, 2, S, H, D/H)` are projected once here and closed over rather than
    carried in the state: beams are only ever reordered within a sentence, whose rows all hold the same encoder
    output, so reordering them would change nothing.

    Args:
        model: a `build_transformer` model.
        encoder_outputs: `(N, S, D)` from `encode`, expanded to beams if searching with beams.
        source_mask: `(N, 1, S)` bool from `encode`, expanded alike.
        max_length: int or scalar int tensor L; the token buffer has L+1 columns.

    Returns `(next_fn, initial_state)`.
    """
    parts = transformer_parts(model)
    rows = ops.shape(encoder_outputs)[0]
    cross_caches = [layer.cross_attention.compute_cache(encoder_outputs) for layer in parts.decoder_layers]
    state = [
        ops.zeros((rows, 2, max_length + 1, layer.num_heads, layer.hidden_dim // layer.num_heads), layer.compute_dtype)
        for layer in parts.decoder_layers
    ]

    def next_fn(tokens, index, state):
        token = ops.take(tokens, ops.reshape(index, (1,)), axis=1)  # (N, 1)
        x = parts.target_embedding(token, start_index=index)  # (N, 1, D)
        self_mask = causal_mask(1, max_length + 1, offset=index)[None, :, :]  # (1, 1, L+1): keys <= index
        caches = []
        for layer, cache, cross_cache in zip(parts.decoder_layers, state, cross_caches):
            x, cache, _ = layer(
                x,
                self_attention_mask=self_mask,
                cross_attention_mask=source_mask,
                self_attention_cache=cache,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache,
                training=False,
            )
            caches.append(cache)
        return parts.logits(x)[:, 0, :], caches  # (N, V)

    return next_fn, state


def uncached_next_fn(model, encoder_outputs, source_mask, max_length):
    """A `next_fn` that reruns the decoder over the whole token buffer each step (for tests and benchmarks).

    Future positions are hidden by the model's own causal-and-padding mask; the logits are read at `index`. The
    state is empty and `max_length` is unused; the signature matches `cached_next_fn` so either can be passed.
    """
    parts = transformer_parts(model)

    def next_fn(tokens, index, state):
        y = parts.target_embedding(tokens)  # (N, L+1, D)
        self_mask = target_attention_mask(tokens)  # (N, L+1, L+1)
        for layer in parts.decoder_layers:
            y = layer(
                y, encoder_outputs, self_attention_mask=self_mask, cross_attention_mask=source_mask, training=False
            )
        y = ops.take(y, ops.reshape(index, (1,)), axis=1)  # (N, 1, D)
        return parts.logits(y)[:, 0, :], state  # (N, V)

    return next_fn, ()


def decode_length(source_length, max_length, max_length_a, max_length_b):
    """`min(max_length, ceil(max_length_a * S + max_length_b))`: a Python int when S is one, else an int32 tensor
    shaped like S (a dynamic length inside a `tf.function`, or lengths `(B,)`). Both compute in float64, so eager and
    graph calls agree.
    """
    if isinstance(source_length, int):
        return min(max_length, math.ceil(max_length_a * source_length + max_length_b))
    limit = ops.ceil(ops.cast(source_length, "float64") * max_length_a + max_length_b)
    return ops.minimum(ops.cast(limit, "int32"), max_length)


def decode_lengths(source, max_length, max_length_a, max_length_b):
    """Each sentence's output limit, int32 `(B,)`: `decode_length` of its own count of non-pad tokens in `source`
    `(B, S)`, so that a sentence's translation does not depend on the lengths of its batch-mates.

    With S static (eager, JAX) the limits are looked up in a table of the Python `decode_length(0..S)`; with S
    dynamic (inside a `tf.function`) they are float64 tensors. Both compute in float64, so eager and graph calls
    agree, and JAX needs no 64-bit mode.
    """
    lengths = ops.sum(ops.cast(padding_mask(source), "int32"), axis=1)  # (B,)
    source_length = ops.shape(source)[1]
    if isinstance(source_length, int):
        table = [decode_length(n, max_length, max_length_a, max_length_b) for n in range(source_length + 1)]
        return ops.take(ops.convert_to_tensor(table, "int32"), lengths)  # (B,)
    return decode_length(lengths, max_length, max_length_a, max_length_b)


def translate_ids(
    model,
    source,
    *,
    beam_size=1,
    length_penalty=0.6,
    max_length_a=1.5,
    max_length_b=10,
    max_length=None,
    use_cache=True,
    start_id=2,
    end_id=3,
    pad_id=0,
):
    """Translates a batch of token ids: encode once, then greedy (`beam_size=1`) or beam search.

    Beams share the encoder output (it is expanded to beams after encoding). Sentence i emits at most
    `min(max_length, ceil(max_length_a * S_i + max_length_b))` tokens, S_i being its count of non-pad source tokens
    (`decode_lengths`), so its translation is the same alone as in any batch. The output has L columns, L being the
    limit of the padded length S: the longest sentence's limit (for `max_length_a >= 0`) in a batch padded to its
    longest sentence, and a static width whenever S is static. The search stops once every sentence has ended or
    reached its own limit.

    Args:
        model: a `build_transformer` model.
        source: int `(B, S)` source ids, pad 0.
        beam_size: int K; 1 is greedy search. Defaults to `1`.
        length_penalty: float alpha of the GNMT penalty (beam search only). Defaults to `0.6`.
        max_length_a, max_length_b: the output limit's slope and intercept in S_i. Default to `1.5` and `10`.
        max_length: int cap on the output length. Defaults to the model's `max_length` (its embedding's config).
        use_cache: bool. Key/value cache (True) or rerunning the decoder on the prefix (False). Defaults to `True`.
        start_id, end_id, pad_id: ints. Defaults to `2`, `3`, `0`.

    Returns `(tokens, scores)`: int32 `(B, L)` emitted tokens WITHOUT the start token, the end token then pad
    after it (a sentence stopped by its limit has no end token, only pad after it), and float32 `(B,)` scores
    (greedy: the sum of log-probabilities; beam: that sum divided by the length penalty).
    """
    parts = transformer_parts(model)
    max_length = max_length or parts.target_embedding.max_length
    if not max_length:
        raise ValueError(f"translate_ids needs max_length or a model with one. Received: max_length={max_length}")
    source = ops.convert_to_tensor(source, "int32")
    batch_size, source_length = ops.shape(source)[0], ops.shape(source)[1]
    limit = decode_length(source_length, max_length, max_length_a, max_length_b)  # L, the buffer's width
    limits = decode_lengths(source, max_length, max_length_a, max_length_b)  # (B,) each sentence's own
    encoder_outputs, source_mask = encode(model, source)
    if beam_size > 1:
        encoder_outputs, source_mask = expand_to_beams((encoder_outputs, source_mask), beam_size)
    make_next_fn = cached_next_fn if use_cache else uncached_next_fn
    next_fn, state = make_next_fn(model, encoder_outputs, source_mask, limit)
    ids = dict(start_id=start_id, end_id=end_id, pad_id=pad_id, max_lengths=limits)
    if beam_size == 1:
        tokens, scores = greedy_search(next_fn, state, batch_size, limit, **ids)
    else:
        tokens, scores = beam_search(next_fn, state, batch_size, limit, beam_size, length_penalty, **ids)
    return tokens[:, 1:], scores
