"""Greedy and beam search over a `next_fn`, independent of the model.

The searches call `next_fn(tokens, index, state) -> (logits, state)`: `tokens` `(N, L+1)` int32 holds what was
decoded so far (column 0 the start token, pad after `index`), `index` is the position of the last known token
(scalar int32), `logits` `(N, V)` score the token at `index + 1`, and `state` is any nest of tensors with the rows on
axis 0 (beam search reorders it when beams are reordered). Both searches use `keras.ops.while_loop` with
fixed-shape state, so they run under JAX and inside a TensorFlow `tf.function` (the exported SavedModel) with
dynamic batch and length. The pad token is never emitted before the end token (its log-probability is set to -inf,
as in fairseq), so pad only ever follows the end; nor is the start token (an imported Marian model's start token is
its pad token). Each takes an optional `prefix`, int `(B, P)` target ids each hypothesis must begin with (pad after
each row's): while `index` is inside a sentence's prefix, its next token is the prefix's, and the search continues
from there (CTranslate2's `target_prefix`, fairseq's `--prefix-size`). `kmt.inference.decoding` drives them with a
Transformer's key/value cache (`kmt.inference.steps`).
"""

import keras
from keras import ops

from kmt.special_ids import END_ID, PAD_ID, START_ID

NEG_INF = float("-inf")


def _log_probs(logits, pad_id, start_id):
    """float32 log-softmax of `logits` (N, V), with the pad and start tokens made impossible afterwards (the other
    tokens keep their log-probabilities)."""
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)  # (N, V)
    vocab = ops.arange(ops.shape(log_probs)[-1])[None, :]  # (1, V)
    return ops.where(ops.equal(vocab, pad_id) | ops.equal(vocab, start_id), NEG_INF, log_probs)


def _start_tokens(shape, max_length, start_id, pad_id):
    """int32 `(*shape, L+1)`: the start token in column 0, pad after it."""
    columns = ops.arange(max_length + 1)  # (L+1,)
    row = ops.cast(ops.where(ops.equal(columns, 0), start_id, pad_id), "int32")
    return ops.zeros((*shape, 1), "int32") + row  # (*shape, L+1)


def _write_column(tokens, column, values):
    """`tokens` (..., L+1) with `values` (...) written at `column` (a scalar tensor; no slice op needed)."""
    columns = ops.arange(ops.shape(tokens)[-1])  # (L+1,)
    return ops.where(ops.equal(columns, column), ops.expand_dims(values, -1), tokens)


def _forced(prefix, index, pad_id):
    """`(forced (N,) bool, token (N,) int32)`: whether the token after `index` is the prefix's (`prefix` int `(N, P)`,
    pad after each row's ids), and that token."""
    width = ops.shape(prefix)[1]
    column = ops.reshape(ops.minimum(index, width - 1), (1,))
    token = ops.cast(ops.take(prefix, column, axis=1)[:, 0], "int32")  # (N,)
    return ops.logical_and(ops.less(index, width), ops.not_equal(token, pad_id)), token


def _prefix_rows(prefix, pad_id):
    """`prefix` as an int32 tensor with at least one column (all pad when it had none)."""
    prefix = ops.convert_to_tensor(prefix, "int32")
    return ops.pad(prefix, [[0, 0], [0, 1]], constant_values=pad_id)  # (N, P+1): a pad column past the end


def _length_penalty(length, alpha):
    """GNMT length penalty `lp(Y) = ((5 + |Y|) / 6) ** alpha` (Wu et al., 2016, section 7)."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def _sentence_limits(batch_size, max_length, max_lengths):
    """int32 `(B,)` per-sentence limits: `max_lengths`, or `max_length` for every sentence when it is None."""
    if max_lengths is None:
        return ops.zeros((batch_size,), "int32") + max_length
    return ops.convert_to_tensor(max_lengths, "int32")


def _gather_rows(x, indices):
    """`x` (B, N, L) and int32 `indices` (B, M) -> (B, M, L): row `indices[b, m]` of `x[b]`.

    One gather on the flattened rows. `ops.take_along_axis` on axis 1 would do the same, but under TensorFlow it
    transposes int64 indices, and oneDNN then logs an error line ("oneDNN supports DT_INT64 only on platforms with
    AVX-512") on every first translation.
    """
    batch, rows, _ = ops.shape(x)
    flat = ops.reshape(ops.arange(batch)[:, None] * rows + indices, (-1,))  # (B*M,)
    return ops.reshape(ops.take(ops.reshape(x, (batch * rows, -1)), flat, axis=0), (batch, ops.shape(indices)[1], -1))


def _hypotheses_of(beam_size, num_hypotheses):
    """n, the hypotheses a beam search returns a sentence, once `beam_size` and `num_hypotheses` are checked."""
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive int. Received: beam_size={beam_size}")
    n = 1 if num_hypotheses is None else num_hypotheses
    if not isinstance(n, int) or not 1 <= n <= beam_size:
        raise ValueError(f"num_hypotheses must be an int from 1 to beam_size={beam_size}. Received: {num_hypotheses}")
    return n


def expand_to_beams(state, beam_size):
    """Repeats every row of every tensor in the nest `state` `beam_size` times on axis 0: (B, ...) -> (B*K, ...).

    Rows of one sentence stay adjacent (row `b * K + k` is beam k of sentence b), the layout `beam_search` uses.
    """
    return keras.tree.map_structure(lambda x: ops.repeat(x, beam_size, axis=0), state)


def greedy_search(
    next_fn,
    state,
    batch_size,
    max_length,
    start_id=START_ID,
    end_id=END_ID,
    pad_id=PAD_ID,
    max_lengths=None,
    prefix=None,
):
    """Emits the most probable token at each step until every sequence has emitted `end_id` or reached its limit.

    Args:
        next_fn: `(tokens (B, L+1), index, state) -> (logits (B, V), state)`, see the module docstring.
        state: nest of tensors with leading axis B, passed to `next_fn`.
        batch_size: int or scalar tensor B.
        max_length: int or scalar int tensor L, the most tokens emitted after the start token (the loop bound).
        start_id: int, the token column 0 holds. Defaults to `kmt.special_ids.START_ID`.
        end_id: int, the token that ends a sequence. Defaults to `kmt.special_ids.END_ID`.
        pad_id: int, the token after the end. Defaults to `kmt.special_ids.PAD_ID`.
        max_lengths: int `(B,)` each sentence's own limit (at most L); a sentence that reaches it is finished,
            pad follows. Defaults to `None`: L for every sentence.
        prefix: int `(B, P)` ids each translation begins with, pad after each row's (see the module docstring).
            Defaults to `None`.

    Returns `(tokens, scores)`: int32 `(B, L+1)` with the start token in column 0 and pad after each `end_id`,
    and float32 `(B,)` sums of the log-probabilities of the emitted tokens (end included).
    """

    def most_probable(log_probs, index):
        return ops.cast(ops.argmax(log_probs, axis=-1), "int32")

    return _step_search(
        next_fn, state, batch_size, max_length, most_probable, start_id, end_id, pad_id, max_lengths, prefix
    )


def _step_search(next_fn, state, batch_size, max_length, choose, start_id, end_id, pad_id, max_lengths, prefix):
    """One hypothesis per sentence, extended by `choose(log_probs (B, V), index) -> int32 (B,)` at each step until
    every sentence has emitted `end_id` or reached its limit; greedy and sampling search differ only in `choose`."""
    max_lengths = _sentence_limits(batch_size, max_length, max_lengths)  # (B,)
    prefix = None if prefix is None else _prefix_rows(prefix, pad_id)  # (B, P+1)
    tokens = _start_tokens((batch_size,), max_length, start_id, pad_id)  # (B, L+1)
    scores = ops.zeros((batch_size,), "float32")
    finished = ops.less_equal(max_lengths, 0)  # (B,)

    def cond(index, tokens, scores, finished, state):
        return ops.logical_and(ops.less(index, max_length), ops.logical_not(ops.all(finished)))

    def body(index, tokens, scores, finished, state):
        logits, state = next_fn(tokens, index, state)
        log_probs = _log_probs(logits, pad_id, start_id)  # (B, V)
        token = choose(log_probs, index)  # (B,)
        if prefix is not None:
            forced, prefix_token = _forced(prefix, index, pad_id)
            token = ops.where(forced, prefix_token, token)
        token_log_prob = ops.take_along_axis(log_probs, token[:, None], axis=1)[:, 0]  # (B,)
        token = ops.where(finished, pad_id, token)
        scores = scores + ops.where(finished, 0.0, token_log_prob)
        finished = ops.logical_or(finished, ops.equal(token, end_id))
        finished = ops.logical_or(finished, ops.greater_equal(index + 1, max_lengths))
        return index + 1, _write_column(tokens, index + 1, token), scores, finished, state

    index = ops.convert_to_tensor(0, "int32")
    _, tokens, scores, _, _ = ops.while_loop(cond, body, (index, tokens, scores, finished, state))
    return tokens, scores


def sample_search(
    next_fn,
    state,
    batch_size,
    max_length,
    noise,
    top_k=0,
    temperature=1.0,
    top_p=1.0,
    start_id=START_ID,
    end_id=END_ID,
    pad_id=PAD_ID,
    max_lengths=None,
    prefix=None,
):
    """Draws each token from the model's distribution (random sampling, for back-translation: Edunov et al., 2018).

    At step t each sentence's next token is drawn from `softmax(logits / temperature)`, restricted to its `top_k`
    most probable tokens when `top_k` > 0, then to the fewest most probable tokens that hold `top_p` of the
    probability when `top_p` < 1 (nucleus sampling, Holtzman et al., 2020), renormalized, by inverting that
    distribution's cumulative sum at `noise[:, t]`. The randomness is the caller's: the same noise gives the same
    sample, so tests can fix it and a SavedModel can draw it with a stateful op. `top_k=1` is greedy search. Like
    greedy search, a sentence ends at `end_id` or at its limit, and pad and start are never drawn.

    `next_fn`, `state`, `batch_size`, `max_length`, `start_id`, `end_id`, `pad_id`, `max_lengths` and `prefix` are
    as for `greedy_search` (a prefix's tokens are not drawn, the noise of their steps goes unused).

    Args:
        noise: float `(B, L)` uniform numbers in [0, 1), one per sentence and step.
        top_k: int; 0 samples from the whole vocabulary. Defaults to `0`.
        temperature: float > 0; above 1 flattens the distribution, below 1 sharpens it. Defaults to `1.0`.
        top_p: float in (0, 1]; 1 keeps every candidate. Defaults to `1.0`.

    Returns `(tokens, scores)` as `greedy_search` does: the scores are the model's own log-probabilities of the
    drawn tokens (at temperature 1, over the whole vocabulary), whatever `top_k` and `temperature` drew them.
    """
    if not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an int >= 0. Received: top_k={top_k}")
    if not temperature > 0:
        raise ValueError(f"temperature must be positive. Received: temperature={temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1]. Received: top_p={top_p}")
    if top_k == 1:  # one candidate: nothing to draw
        return greedy_search(next_fn, state, batch_size, max_length, start_id, end_id, pad_id, max_lengths, prefix)
    noise = ops.convert_to_tensor(noise, "float32")

    def draw(log_probs, index):
        if top_k > 0 or top_p < 1:  # (B, k), most probable first (all V of them for top-p alone)
            candidate_log_probs, candidates = ops.top_k(log_probs, top_k or ops.shape(log_probs)[-1])
        else:
            candidate_log_probs = log_probs
            candidates = ops.zeros_like(log_probs, "int32") + ops.arange(ops.shape(log_probs)[-1], dtype="int32")
        # softmax(log p / T) = softmax(logits / T): log p differs from the logits by a constant per sentence.
        probs = ops.softmax(candidate_log_probs / temperature, axis=-1)  # renormalized over the candidates
        if top_p < 1:  # the nucleus: candidates whose more probable predecessors hold less than top_p
            probs = ops.where(ops.cumsum(probs, axis=-1) - probs < top_p, probs, 0.0)
            probs = probs / ops.sum(probs, axis=-1, keepdims=True)
        u = ops.take(noise, ops.reshape(index, (1,)), axis=1)  # (B, 1)
        below = ops.sum(ops.cast(ops.cumsum(probs, axis=-1) <= u, "int32"), axis=-1, keepdims=True)  # (B, 1)
        # The first candidate whose cumulative sum passes u has a probability above 0. Rounding can leave the last
        # sums under u, pointing past the end or at a trailing zero: clamp, then take the most probable instead.
        below = ops.minimum(below, ops.shape(probs)[-1] - 1)
        below = ops.where(ops.take_along_axis(probs, below, axis=1) > 0, below, ops.argmax(probs, axis=-1)[:, None])
        return ops.cast(ops.take_along_axis(candidates, below, axis=1)[:, 0], "int32")

    return _step_search(next_fn, state, batch_size, max_length, draw, start_id, end_id, pad_id, max_lengths, prefix)


def beam_search(
    next_fn,
    state,
    batch_size,
    max_length,
    beam_size=4,
    length_penalty=0.6,
    start_id=START_ID,
    end_id=END_ID,
    pad_id=PAD_ID,
    max_lengths=None,
    num_hypotheses=None,
    prefix=None,
):
    """Beam search with the GNMT length penalty; returns each sentence's best finished hypothesis, or its n best.

    A hypothesis Y scores `log p(Y) / lp(Y)` with `lp(Y) = ((5 + |Y|) / 6) ** length_penalty` (Wu et al., 2016),
    |Y| counting the emitted tokens, end included. Each step extends the K alive beams by every token and keeps the
    2K best candidates by log-probability (at step 0 only beam 0 is alive, the others start at -inf). As in
    fairseq, a candidate ending in `end_id` is finished only if it ranks among the K best, and the K best
    non-finished candidates stay alive; a candidate reaching its sentence's limit (`max_lengths`) is finished there,
    so at that step the sentence's K best candidates finish and it is complete. Up to K finished hypotheses are
    kept per sentence, best first (fairseq's `--nbest` list; the earlier of two equal scores ranks first).

    Stopping: a sentence is complete once K hypotheses have finished (fairseq's rule; with K = 1 it makes beam
    search exactly greedy search), or earlier once no alive beam can beat its n-th best finished score (n =
    `num_hypotheses`, 1 by default): an alive beam's log-probability can only fall and `lp` lies between
    `lp(index + 1)` and `lp(limit)`, so no alive beam can exceed `max(alive log p) / max(lp(index + 1), lp(limit))`.
    That bound never changes the n best. The loop ends when every sentence is complete, else after `max_length`
    steps.

    Args:
        next_fn: `(tokens (B*K, L+1), index, state) -> (logits (B*K, V), state)`, see the module docstring.
        state: nest of tensors with leading axis B*K (use `expand_to_beams`); reordered with the beams.
        batch_size: int or scalar tensor B.
        max_length: int or scalar int tensor L, the most tokens emitted after the start token (the loop bound).
        beam_size: int K. Defaults to `4`.
        length_penalty: float alpha; 0 ranks by log-probability alone. Defaults to `0.6`.
        start_id: int, the token column 0 holds. Defaults to `kmt.special_ids.START_ID`.
        end_id: int, the token that ends a sequence. Defaults to `kmt.special_ids.END_ID`.
        pad_id: int, the token after the end. Defaults to `kmt.special_ids.PAD_ID`.
        max_lengths: int `(B,)` each sentence's own limit (at most L). Defaults to `None`: L for every sentence.
        num_hypotheses: int n, 1 to K: return the n best finished hypotheses of each sentence. Defaults to `None`:
            return the best one, without the hypothesis axis.
        prefix: int `(B, P)` ids every hypothesis of a sentence begins with, pad after each row's: while a sentence
            is inside its prefix only the prefix's token extends its beams (one beam stays alive, as at step 0).
            Defaults to `None`.

    Returns `(tokens, scores)`: int32 `(B, L+1)` with the start token in column 0 and pad after the end token,
    and float32 `(B,)` scores `log p(Y) / lp(Y)`; with `num_hypotheses` n, `(B, n, L+1)` and `(B, n)`, best first.
    """
    n = _hypotheses_of(beam_size, num_hypotheses)
    b, k = batch_size, beam_size
    rows = ops.arange(b)[:, None] * k  # (B, 1): row of each sentence's beam 0 in the flat (B*K) layout
    max_lengths = _sentence_limits(b, max_length, max_lengths)  # (B,)
    if prefix is not None:
        prefix = ops.repeat(_prefix_rows(prefix, pad_id), k, axis=0)  # (B*K, P+1): each beam's row

    def cond(index, alive_tokens, alive_log_probs, finished_tokens, finished_scores, num_finished, state):
        penalty = ops.maximum(_length_penalty(index + 1, length_penalty), _length_penalty(max_lengths, length_penalty))
        bound = ops.max(alive_log_probs, axis=1) / penalty  # (B,) the best score an alive beam could still reach
        done = ops.logical_or(ops.greater_equal(num_finished, k), ops.greater_equal(finished_scores[:, n - 1], bound))
        return ops.logical_and(ops.less(index, max_length), ops.logical_not(ops.all(done)))

    def body(index, alive_tokens, alive_log_probs, finished_tokens, finished_scores, num_finished, state):
        length = index + 1  # tokens emitted once this step's token is appended
        flat_tokens = ops.reshape(alive_tokens, (b * k, -1))  # (B*K, L+1)
        logits, state = next_fn(flat_tokens, index, state)
        log_probs = _log_probs(logits, pad_id, start_id)  # (B*K, V)
        vocab_size = ops.shape(log_probs)[-1]
        if prefix is not None:  # inside its prefix a beam can only take the prefix's token
            forced, prefix_token = _forced(prefix, index, pad_id)  # (B*K,) each
            other = ops.not_equal(ops.arange(vocab_size)[None, :], prefix_token[:, None])  # (B*K, V)
            log_probs = ops.where(ops.logical_and(forced[:, None], other), NEG_INF, log_probs)
        log_probs = ops.reshape(log_probs, (b, k, vocab_size)) + alive_log_probs[:, :, None]  # (B, K, V)
        candidate_log_probs, candidates = ops.top_k(ops.reshape(log_probs, (b, k * vocab_size)), 2 * k)  # (B, 2K)
        candidate_beams, candidate_tokens = candidates // vocab_size, candidates % vocab_size  # (B, 2K) each
        ends = ops.logical_or(ops.equal(candidate_tokens, end_id), ops.greater_equal(length, max_lengths[:, None]))

        # Finished: ends ranked among the K best, while the sentence has fewer than K finished hypotheses (so the
        # K slots of finished hypotheses always hold them all; merging is sorting them in).
        finishing = ops.logical_and(ends, ops.arange(2 * k)[None, :] < k)  # (B, 2K)
        finishing = ops.logical_and(finishing, candidate_log_probs > NEG_INF)  # none from a dead beam
        finishing_count = ops.cumsum(ops.cast(finishing, "int32"), axis=1)  # (B, 2K)
        finishing = ops.logical_and(finishing, num_finished[:, None] + finishing_count <= k)
        num_finished = num_finished + ops.sum(ops.cast(finishing, "int32"), axis=1)
        scores = ops.where(finishing, candidate_log_probs / _length_penalty(length, length_penalty), NEG_INF)
        finishing_tokens = _write_column(_gather_rows(alive_tokens, candidate_beams), length, candidate_tokens)
        finished_scores, kept = ops.top_k(ops.concatenate([finished_scores, scores], axis=1), k)  # (B, K)
        merged = ops.concatenate([finished_tokens, finishing_tokens], axis=1)  # (B, 3K, L+1)
        finished_tokens = _gather_rows(merged, kept)  # (B, K, L+1)

        # Alive: the K best candidates that did not end; the state follows its beams.
        alive_log_probs, alive = ops.top_k(ops.where(ends, NEG_INF, candidate_log_probs), k)  # (B, K)
        origins = rows + ops.take_along_axis(candidate_beams, alive, axis=1)  # (B, K)
        origins = ops.reshape(origins, (b * k,))  # (B*K,)
        alive_tokens = ops.reshape(ops.take(flat_tokens, origins, axis=0), (b, k, -1))  # (B, K, L+1)
        alive_tokens = _write_column(alive_tokens, length, ops.take_along_axis(candidate_tokens, alive, axis=1))
        state = keras.tree.map_structure(lambda x: ops.take(x, origins, axis=0), state)
        return length, alive_tokens, alive_log_probs, finished_tokens, finished_scores, num_finished, state

    alive_tokens = _start_tokens((b, k), max_length, start_id, pad_id)  # (B, K, L+1)
    first_beam = ops.where(ops.equal(ops.arange(k), 0), 0.0, NEG_INF)  # (K,)
    alive_log_probs = ops.zeros((b, 1), "float32") + ops.cast(first_beam, "float32")  # (B, K)
    finished_tokens = _start_tokens((b, k), max_length, start_id, pad_id)  # (B, K, L+1)
    finished_scores = ops.full((b, k), NEG_INF, "float32")
    num_finished = ops.where(ops.less_equal(max_lengths, 0), k, 0)  # (B,) a sentence with limit 0 is complete
    index = ops.convert_to_tensor(0, "int32")
    loop_vars = (index, alive_tokens, alive_log_probs, finished_tokens, finished_scores, num_finished, state)
    _, _, _, finished_tokens, finished_scores, _, _ = ops.while_loop(cond, body, loop_vars)
    if num_hypotheses is None:
        return finished_tokens[:, 0], finished_scores[:, 0]
    return finished_tokens[:, :n], finished_scores[:, :n]
