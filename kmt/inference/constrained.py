"""Lexically constrained beam search: every constraint, a target phrase, appears in the output (dynamic beam
allocation, Post & Vilar, 2018, in the vectorized form of Hu et al., 2019; fairseq's `--constraints`).

Constraints are int `(B, C, W)`: up to C phrases a sentence, each up to W target ids, pad after each phrase's ids
(a phrase of pad only is no constraint). A hypothesis carries which constraint tokens it has produced (`met`,
`(N, C*W)` over the flattened phrases) and where it stands inside a phrase it has begun (`position`, the flat index
of the phrase's next token, or -1). Emitting a phrase's next token advances it; any other token abandons the phrase
(its tokens count as unmet again) and may begin another unmet phrase; a phrase's last token completes it.

At each step the candidates of a sentence are the union, over its K beams, of the 2K best extensions (as in
`beam_search`), each beam's best extension, and each beam's extensions that advance a constraint (the next token of
the phrase it is in, else the first token of each unmet phrase). The K beams kept are spread over banks, a bank
holding the candidates that have met the same number of constraint tokens: the best of each bank first, from the
fullest bank down, then the second best of each, and so on (the vectorized allocation of Hu et al.). The end token
is allowed only to hypotheses that have met every constraint, so a finished hypothesis meets them all unless its
sentence's length limit stopped it; finished hypotheses that meet them all rank first.
"""

import keras
from keras import ops

from kmt.inference.search import (
    NEG_INF,
    _forced,
    _gather_rows,
    _hypotheses_of,
    _length_penalty,
    _log_probs,
    _prefix_rows,
    _sentence_limits,
    _start_tokens,
    _write_column,
)
from kmt.special_ids import END_ID, PAD_ID, START_ID

UNMET = 1e6  # finished hypotheses that miss a constraint rank below every one that meets them all


def flatten_constraints(constraints, pad_id=PAD_ID):
    """int `(B, C, W)` phrases -> `(tokens, first, last)`, each `(B, C*W+1)`: the ids, whether a position begins a
    phrase and whether it ends one (a pad column comes last, so a sentence without phrases has one column)."""
    constraints = ops.convert_to_tensor(constraints, "int32")
    shape = ops.shape(constraints)
    batch, width = shape[0], shape[2]
    tokens = ops.reshape(constraints, (batch, -1))  # (B, C*W)
    tokens = ops.pad(tokens, [[0, 0], [0, 1]], constant_values=pad_id)  # (B, T)
    valid = ops.not_equal(tokens, pad_id)
    column = ops.arange(ops.shape(tokens)[1]) % ops.maximum(width, 1)  # position inside its phrase
    first = ops.logical_and(valid, ops.equal(column, 0)[None, :])
    following = ops.pad(valid[:, 1:], [[0, 0], [0, 1]], constant_values=False)
    last = ops.logical_and(valid, ops.logical_or(ops.logical_not(following), ops.equal(column, width - 1)[None, :]))
    return tokens, first, last, ops.maximum(width, 1)


def advance(met, position, token, tokens, first, last, width):
    """The constraint state after emitting `token`: `met` bool `(..., T)`, `position` int `(...)` (-1: inside no
    phrase), `token` int `(...)`; `tokens`, `first`, `last` `(..., T)` the flattened phrases (`flatten_constraints`),
    `width` W. Returns the new `(met, position)`."""
    columns = ops.arange(ops.shape(met)[-1])  # (T,)
    inside = ops.greater_equal(position, 0)
    at = ops.maximum(position, 0)
    expected = ops.take_along_axis(tokens, at[..., None], axis=-1)[..., 0]
    advancing = ops.logical_and(inside, ops.equal(expected, token))
    # Abandoning a phrase unmeets the tokens of it already emitted.
    begun = (at // width) * width
    abandoned = ops.logical_and(ops.greater_equal(columns, begun[..., None]), ops.less(columns, at[..., None]))
    abandoned = ops.logical_and(abandoned, ops.logical_and(inside, ops.logical_not(advancing))[..., None])
    met = ops.logical_and(met, ops.logical_not(abandoned))
    met = ops.logical_or(met, ops.logical_and(advancing[..., None], ops.equal(columns, at[..., None])))
    # Otherwise the token may begin the first unmet phrase it starts.
    starts = ops.logical_and(ops.logical_and(first, ops.logical_not(met)), ops.equal(tokens, token[..., None]))
    starts = ops.logical_and(starts, ops.logical_not(advancing)[..., None])
    starting = ops.any(starts, axis=-1)
    start = ops.cast(ops.argmax(ops.cast(starts, "int32"), axis=-1), "int32")
    met = ops.logical_or(met, ops.logical_and(starting[..., None], ops.equal(columns, start[..., None])))
    ends_at = ops.take_along_axis(last, at[..., None], axis=-1)[..., 0]
    ends_start = ops.take_along_axis(last, start[..., None], axis=-1)[..., 0]
    position = ops.where(
        advancing, ops.where(ends_at, -1, at + 1), ops.where(starting, ops.where(ends_start, -1, start + 1), -1)
    )
    return met, ops.cast(position, "int32")


def _rank_in_bank(scores, banks, eligible):
    """int `(B, M)`: how many eligible candidates of the same bank score higher (the earlier of equal ones first)."""
    m = ops.shape(scores)[1]
    order = ops.arange(m)
    same = ops.logical_and(ops.equal(banks[:, :, None], banks[:, None, :]), eligible[:, None, :])
    better = ops.logical_or(
        ops.greater(scores[:, None, :], scores[:, :, None]),
        ops.logical_and(
            ops.equal(scores[:, None, :], scores[:, :, None]), ops.less(order[None, :], order[:, None])[None]
        ),
    )
    return ops.sum(ops.cast(ops.logical_and(same, better), "int32"), axis=-1)


def constrained_beam_search(
    next_fn,
    state,
    batch_size,
    max_length,
    constraints,
    beam_size=4,
    length_penalty=0.6,
    start_id=START_ID,
    end_id=END_ID,
    pad_id=PAD_ID,
    max_lengths=None,
    num_hypotheses=None,
    prefix=None,
):
    """Beam search whose hypotheses contain every constraint (see the module docstring); with no constraint it is
    `kmt.inference.search.beam_search`, hypothesis for hypothesis.

    Args are `beam_search`'s, and:
        constraints: int `(B, C, W)` target ids of each sentence's phrases, pad after each phrase's ids.

    Returns `(tokens, scores, met)`: `beam_search`'s tokens and scores, and bool `(B,)` (with `num_hypotheses`,
    `(B, n)`): whether each hypothesis contains every constraint of its sentence.
    """
    n = _hypotheses_of(beam_size, num_hypotheses)
    b, k = batch_size, beam_size
    rows = ops.arange(b)[:, None] * k  # (B, 1)
    max_lengths = _sentence_limits(b, max_length, max_lengths)  # (B,)
    if prefix is not None:
        prefix = ops.repeat(_prefix_rows(prefix, pad_id), k, axis=0)  # (B*K, P+1)
    tokens, first, last, width = flatten_constraints(constraints, pad_id)  # (B, T) each
    total = ops.sum(ops.cast(ops.not_equal(tokens, pad_id), "int32"), axis=1)  # (B,) constraint tokens to meet
    beam_tokens, beam_first, beam_last = (ops.repeat(x, k, axis=0) for x in (tokens, first, last))  # (B*K, T)
    t = ops.shape(tokens)[1]

    def cond(index, alive_tokens, alive_log_probs, met, position, finished, num_finished, state):
        finished_tokens, finished_scores, finished_keys, finished_met = finished
        penalty = ops.maximum(_length_penalty(index + 1, length_penalty), _length_penalty(max_lengths, length_penalty))
        bound = ops.max(alive_log_probs, axis=1) / penalty
        done = ops.logical_or(ops.greater_equal(num_finished, k), ops.greater_equal(finished_keys[:, n - 1], bound))
        return ops.logical_and(ops.less(index, max_length), ops.logical_not(ops.all(done)))

    def body(index, alive_tokens, alive_log_probs, met, position, finished, num_finished, state):
        finished_tokens, finished_scores, finished_keys, finished_met = finished
        length = index + 1
        flat_tokens = ops.reshape(alive_tokens, (b * k, -1))
        logits, state = next_fn(flat_tokens, index, state)
        log_probs = _log_probs(logits, pad_id, start_id)  # (B*K, V)
        vocab_size = ops.shape(log_probs)[-1]
        vocab = ops.arange(vocab_size)[None, :]
        flat_met, flat_position = ops.reshape(met, (b * k, t)), ops.reshape(position, (b * k,))
        complete = ops.equal(ops.sum(ops.cast(flat_met, "int32"), axis=1), ops.repeat(total, k))  # (B*K,)
        log_probs = ops.where(
            ops.logical_and(ops.logical_not(complete)[:, None], ops.equal(vocab, end_id)), NEG_INF, log_probs
        )
        if prefix is not None:
            forced, prefix_token = _forced(prefix, index, pad_id)
            other = ops.not_equal(vocab, prefix_token[:, None])
            log_probs = ops.where(ops.logical_and(forced[:, None], other), NEG_INF, log_probs)
        scores = ops.reshape(log_probs, (b, k, vocab_size)) + alive_log_probs[:, :, None]  # (B, K, V)

        # The candidates: the 2K best, each beam's best, each beam's constraint-advancing tokens.
        flat_scores = ops.reshape(scores, (b, k * vocab_size))
        kth = ops.top_k(flat_scores, 2 * k)[0][:, -1:]  # (B, 1)
        chosen = ops.greater_equal(scores, kth[:, :, None])
        chosen = ops.logical_or(chosen, ops.greater_equal(scores, ops.max(scores, axis=2, keepdims=True)))
        columns = ops.arange(t)[None, :]
        inside = ops.greater_equal(flat_position, 0)[:, None]
        wanted = ops.where(
            inside, ops.equal(columns, flat_position[:, None]), ops.logical_and(beam_first, ops.logical_not(flat_met))
        )
        wanted_tokens = ops.where(wanted, beam_tokens, vocab_size)  # (B*K, T), V: none
        advancing = ops.any(ops.equal(wanted_tokens[:, :, None], vocab[:, None, :]), axis=1)  # (B*K, V)
        chosen = ops.logical_or(chosen, ops.reshape(advancing, (b, k, vocab_size)))
        m = 3 * k + k * t  # at most this many distinct candidates
        m = (
            min(m, k * vocab_size)
            if isinstance(m, int) and isinstance(vocab_size, int)
            else ops.minimum(m, k * vocab_size)
        )
        candidate_scores, candidates = ops.top_k(ops.reshape(ops.where(chosen, scores, NEG_INF), (b, -1)), m)
        candidate_beams, candidate_tokens = candidates // vocab_size, candidates % vocab_size  # (B, M)
        valid = candidate_scores > NEG_INF
        origins = rows + candidate_beams  # (B, M) rows in the flat layout
        candidate_met, candidate_position = advance(
            ops.take(flat_met, origins, axis=0),
            ops.take(flat_position, origins, axis=0),
            candidate_tokens,
            ops.take(beam_tokens, origins, axis=0),
            ops.take(beam_first, origins, axis=0),
            ops.take(beam_last, origins, axis=0),
            width,
        )
        banks = ops.sum(ops.cast(candidate_met, "int32"), axis=-1)  # (B, M)
        full = ops.equal(banks, total[:, None])
        ends = ops.logical_or(ops.equal(candidate_tokens, end_id), ops.greater_equal(length, max_lengths[:, None]))

        # Finished: ends ranked among the K best of their bank; the K best finished are kept, those meeting every
        # constraint first.
        finishing = ops.logical_and(ends, ops.less(_rank_in_bank(candidate_scores, banks, valid), k))
        finishing = ops.logical_and(finishing, valid)
        num_finished = ops.minimum(num_finished + ops.sum(ops.cast(finishing, "int32"), axis=1), k)
        new_scores = candidate_scores / _length_penalty(length, length_penalty)
        new_keys = ops.where(finishing, ops.where(full, new_scores, new_scores - UNMET), NEG_INF)
        new_tokens = _write_column(_gather_rows(alive_tokens, candidate_beams), length, candidate_tokens)
        finished_keys, kept = ops.top_k(ops.concatenate([finished_keys, new_keys], axis=1), k)  # (B, K)
        finished_tokens = _gather_rows(ops.concatenate([finished_tokens, new_tokens], axis=1), kept)
        finished_scores = ops.take_along_axis(ops.concatenate([finished_scores, new_scores], axis=1), kept, axis=1)
        finished_met = ops.take_along_axis(ops.concatenate([finished_met, full], axis=1), kept, axis=1)

        # Alive: K candidates that did not end, spread over the banks (Hu et al.'s round robin, fullest first).
        staying = ops.logical_and(valid, ops.logical_not(ends))
        rank = _rank_in_bank(candidate_scores, banks, staying)
        order = ops.cast(rank * (t + 1) + (t - banks), "float32")
        _, alive = ops.top_k(ops.where(staying, -order, NEG_INF), k)  # (B, K)
        alive_log_probs = ops.where(
            ops.take_along_axis(staying, alive, axis=1), ops.take_along_axis(candidate_scores, alive, axis=1), NEG_INF
        )
        met = _gather_rows(ops.cast(candidate_met, "int32"), alive) > 0  # (B, K, T)
        position = ops.take_along_axis(candidate_position, alive, axis=1)  # (B, K)
        chosen_rows = ops.reshape(ops.take_along_axis(origins, alive, axis=1), (b * k,))
        alive_tokens = ops.reshape(ops.take(flat_tokens, chosen_rows, axis=0), (b, k, -1))
        alive_tokens = _write_column(alive_tokens, length, ops.take_along_axis(candidate_tokens, alive, axis=1))
        state = keras.tree.map_structure(lambda x: ops.take(x, chosen_rows, axis=0), state)
        finished = (finished_tokens, finished_scores, finished_keys, finished_met)
        return length, alive_tokens, alive_log_probs, met, position, finished, num_finished, state

    alive_tokens = _start_tokens((b, k), max_length, start_id, pad_id)
    first_beam = ops.where(ops.equal(ops.arange(k), 0), 0.0, NEG_INF)
    alive_log_probs = ops.zeros((b, 1), "float32") + ops.cast(first_beam, "float32")
    met = ops.zeros((b, k, t), "bool")
    position = ops.zeros((b, k), "int32") - 1
    finished = (
        _start_tokens((b, k), max_length, start_id, pad_id),
        ops.full((b, k), NEG_INF, "float32"),
        ops.full((b, k), NEG_INF, "float32"),
        ops.zeros((b, k), "bool"),
    )
    num_finished = ops.where(ops.less_equal(max_lengths, 0), k, 0)
    index = ops.convert_to_tensor(0, "int32")
    loop_vars = (index, alive_tokens, alive_log_probs, met, position, finished, num_finished, state)
    _, _, _, _, _, finished, _, _ = ops.while_loop(cond, body, loop_vars)
    finished_tokens, finished_scores, _, finished_met = finished
    if num_hypotheses is None:
        return finished_tokens[:, 0], finished_scores[:, 0], finished_met[:, 0]
    return finished_tokens[:, :n], finished_scores[:, :n], finished_met[:, :n]
