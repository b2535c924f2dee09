"""Translating token ids with a Transformer: the encoder once per batch, then greedy or beam search
(`kmt.search`) driven by a key/value cache. Several models that share a vocabulary decode as one ensemble: each step
scores the next token by the mean of their probabilities (fairseq's `--path a.pt:b.pt`).

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
from kmt.search import beam_search, expand_to_beams, greedy_search, sample_search

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


def ensemble_members(model):
    """A model, or a list or tuple of models (an ensemble), as a non-empty list of models."""
    models = list(model) if isinstance(model, (list, tuple)) else [model]
    if not models:
        raise ValueError("An ensemble needs at least one model. Received: an empty list")
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


def _max_length(parts, max_length):
    """The caller's `max_length`, else the shortest `max_length` of the members' target embeddings."""
    if max_length:
        return max_length
    lengths = [part.target_embedding.max_length for part in parts]
    return min(lengths) if all(lengths) else None


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
    num_hypotheses=None,
    sampling_topk=1,
    sampling_temperature=1.0,
    sampling_topp=1.0,
    random_uniform=None,
):
    """Translates a batch of token ids: encode once, then greedy (`beam_size=1`) or beam search.

    Beams share the encoder output (it is expanded to beams after encoding). Sentence i emits at most
    `min(max_length, ceil(max_length_a * S_i + max_length_b))` tokens, S_i being its count of non-pad source tokens
    (`decode_lengths`), so its translation is the same alone as in any batch. The output has L columns, L being the
    limit of the padded length S: the longest sentence's limit (for `max_length_a >= 0`) in a batch padded to its
    longest sentence, and a static width whenever S is static. The search stops once every sentence has ended or
    reached its own limit.

    Args:
        model: a `build_transformer` model, or a list of them sharing one vocabulary: an ensemble, whose search
            scores each next token by the mean of the models' probabilities (`ensemble_next_fn`).
        source: int `(B, S)` source ids, pad 0.
        beam_size: int K; 1 is greedy search. Defaults to `1`.
        length_penalty: float alpha of the GNMT penalty (beam search only). Defaults to `0.6`.
        max_length_a, max_length_b: the output limit's slope and intercept in S_i. Default to `1.5` and `10`.
        max_length: int cap on the output length. Defaults to the model's `max_length` (its embedding's config;
            an ensemble's shortest).
        use_cache: bool. Key/value cache (True) or rerunning the decoder on the prefix (False). Defaults to `True`.
        start_id, end_id, pad_id: ints. Defaults to `2`, `3`, `0`.
        num_hypotheses: int n, 1 to K: return the n best hypotheses of each sentence (`beam_search`'s n-best list;
            greedy search has one). Defaults to `None`: the best one, without the hypothesis axis.
        sampling_topk: int. With `beam_size` 1, 0 draws each token from the whole distribution and k > 1 from the
            k most probable tokens (`sample_search`); 1 is greedy search (OpenNMT-tf's `sampling_topk`). Defaults
            to `1`.
        sampling_temperature: float. Divides the logits that tokens are drawn from. Defaults to `1.0`.
        sampling_topp: float in (0, 1]. Draws from the fewest most probable tokens that hold this much of the
            probability (nucleus sampling; fairseq's `--sampling-topp`); 1 is off. Defaults to `1.0`.
        random_uniform: `shape -> float32 uniform [0, 1)` tensor, the randomness of sampling. Defaults to
            `keras.random.uniform` (Keras's global seed generator).

    Returns `(tokens, scores)`: int32 `(B, L)` emitted tokens WITHOUT the start token, the end token then pad
    after it (a sentence stopped by its limit has no end token, only pad after it), and float32 `(B,)` scores
    (greedy: the sum of log-probabilities; beam: that sum divided by the length penalty); with `num_hypotheses` n,
    `(B, n, L)` and `(B, n)`, best first.
    """
    models = ensemble_members(model)
    max_length = _max_length([transformer_parts(member) for member in models], max_length)
    if not max_length:
        raise ValueError(f"translate_ids needs max_length or a model with one. Received: max_length={max_length}")
    if sampling_topk != 1 and beam_size != 1:
        raise ValueError(f"sampling needs beam_size 1. Received: beam_size={beam_size}, sampling_topk={sampling_topk}")
    source = ops.convert_to_tensor(source, "int32")
    batch_size, source_length = ops.shape(source)[0], ops.shape(source)[1]
    limit = decode_length(source_length, max_length, max_length_a, max_length_b)  # L, the buffer's width
    limits = decode_lengths(source, max_length, max_length_a, max_length_b)  # (B,) each sentence's own
    make_next_fn = cached_next_fn if use_cache else uncached_next_fn
    next_fns, states = [], []
    for member in models:
        encoder_outputs, source_mask = encode(member, source)
        if beam_size > 1:
            encoder_outputs, source_mask = expand_to_beams((encoder_outputs, source_mask), beam_size)
        member_fn, member_state = make_next_fn(member, encoder_outputs, source_mask, limit)
        next_fns.append(member_fn)
        states.append(member_state)
    next_fn, state = ensemble_next_fn(next_fns), (states if len(models) > 1 else states[0])
    ids = dict(start_id=start_id, end_id=end_id, pad_id=pad_id, max_lengths=limits)
    if beam_size == 1:
        if num_hypotheses not in (None, 1):
            raise ValueError(f"beam_size 1 gives one hypothesis. Received: num_hypotheses={num_hypotheses}")
        if sampling_topk == 1:
            tokens, scores = greedy_search(next_fn, state, batch_size, limit, **ids)
        else:
            noise = (random_uniform or keras.random.uniform)((batch_size, limit))
            tokens, scores = sample_search(
                next_fn, state, batch_size, limit, noise, sampling_topk, sampling_temperature, sampling_topp, **ids
            )
        if num_hypotheses == 1:
            tokens, scores = tokens[:, None], scores[:, None]
    else:
        tokens, scores = beam_search(
            next_fn, state, batch_size, limit, beam_size, length_penalty, num_hypotheses=num_hypotheses, **ids
        )
    return tokens[..., 1:], scores


def score_ids(model, source, target, *, start_id=2, end_id=3, pad_id=0):
    """The model's log-probability of given translations (forced decoding): each target token and the end token,
    predicted from the source and the target prefix in one teacher-forced pass, as in training but without
    dropout. fairseq-generate's `--score-reference`, OpenNMT-tf's `score` run type: for filtering a corpus, reranking
    an n-best list with another model, or a test set's perplexity.

    Args:
        model: a `build_transformer` model, or a list of them sharing one vocabulary: an ensemble, whose
            probability of a token is the mean of the models' (as in `translate_ids`).
        source: int `(B, S)` source ids, pad 0.
        target: int `(B, T)` target ids WITHOUT start and end tokens, pad after each sentence's last token;
            T + 1 positions (the start token's and T tokens') must fit the model's `max_length`.
        start_id, end_id, pad_id: ints. Defaults to `2`, `3`, `0`.

    Returns `(scores, lengths)`: float32 `(B,)` sums of the log-probabilities of each sentence's tokens and its end
    token (what greedy search reports for its own output), and int32 `(B,)` the count of tokens scored (target
    tokens + 1).
    """
    source = ops.convert_to_tensor(source, "int32")
    target = ops.convert_to_tensor(target, "int32")
    models = ensemble_members(model)
    max_length = _max_length([transformer_parts(member) for member in models], None)
    if max_length and isinstance(target.shape[1], int) and target.shape[1] + 1 > max_length:
        raise ValueError(f"score_ids: targets of {target.shape[1]} tokens plus the start token do not fit the model's "
                         f"max_length {max_length}. Received: target.shape={tuple(target.shape)}")
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
