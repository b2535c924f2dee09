import math
import re

import keras
import numpy as np
import pytest
from keras import ops

from kmt.decoding import (
    cached_next_fn, decode_length, decode_lengths, encode, ensemble_log_probs, score_ids, translate_ids,
    uncached_next_fn
)
from kmt.search import beam_search, expand_to_beams, greedy_search, sample_search
from kmt.model import build_transformer

TINY = dict(vocab_size=20, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0, max_length=24)
UNTIED_PRE_NORM = dict(
    shared_embeddings=False, target_vocab_size=17, tied_output=False, norm_first=True, learned_positions=True
)
SOURCE = np.array([[5, 6, 7, 8, 9, 3, 0], [4, 4, 5, 3, 0, 0, 0], [7, 11, 13, 17, 19, 12, 3]], "int32")
PAD, START, END, X, Y, JUNK_TOKEN = 0, 2, 3, 4, 5, 1  # the fake vocabulary of the tree tests
VOCAB = 6


def _np(x):
    return ops.convert_to_numpy(x)


def _log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


class Tree:
    """A fake language model over VOCAB tokens: a state machine whose state (node id per row) the search carries.

    `nodes[i] = (probs, children)`: token -> probability (unlisted tokens get 1e-6) and token -> next node
    (unlisted tokens lead to the last node). Because the node travels in `state`, a search that reorders its beams
    but not its state produces wrong log-probabilities.
    """

    def __init__(self, nodes):
        self.table = np.full((len(nodes), VOCAB), 1e-6)
        self.children = np.full((len(nodes), VOCAB), len(nodes) - 1)
        for i, (probs, children) in enumerate(nodes):
            for token, p in probs.items():
                self.table[i, token] = p
            for token, child in children.items():
                self.children[i, token] = child
        self.log_probs = _log_softmax(np.log(self.table))  # what the search sees, pad included in the softmax

    def next_fn(self, tokens, index, node):
        token = ops.take(tokens, ops.reshape(index, (1,)), axis=1)[:, 0]  # (N,)
        moved = ops.take(ops.convert_to_tensor(self.children.reshape(-1), "int32"), node * VOCAB + token)
        node = ops.where(ops.equal(index, 0), node, moved)  # index 0 holds the start token: stay at the root
        return ops.take(ops.convert_to_tensor(np.log(self.table), "float32"), node, axis=0), node

    def log_prob(self, tokens, node=0):
        """Sum of log-probabilities of the emitted tokens (after the start token, up to and including the end)."""
        total = 0.0
        for token in tokens[1:]:
            if token == PAD:
                break
            total += self.log_probs[node, token]
            node = self.children[node, token]
        return total


# Greedy takes X (0.55) and ends (0.55 * 0.4 = 0.22); "Y END" is better (0.45 * 0.9 = 0.405).
CLASSIC = Tree([({X: 0.55, Y: 0.45}, {X: 1, Y: 2}), ({END: 0.4, X: 0.3, Y: 0.3}, {}), ({END: 0.9}, {}), ({}, {})])
# "X END" (log p ~ -0.89, 2 tokens) against "Y Y Y END" (log p ~ -1.07, 4 tokens); the junk node never ends.
SHORT_LONG = Tree(
    [
        ({X: 0.6, Y: 0.4}, {X: 1, Y: 2}),
        ({END: 0.683, JUNK_TOKEN: 0.317}, {}),
        ({Y: 0.95, JUNK_TOKEN: 0.05}, {Y: 3}),
        ({Y: 0.95, JUNK_TOKEN: 0.05}, {Y: 4}),
        ({END: 0.95, JUNK_TOKEN: 0.05}, {}),
        ({JUNK_TOKEN: 0.6, X: 0.4}, {}),
    ]
)


def _search(tree, beam_size=None, alpha=0.0, max_length=8, start_nodes=(0,), max_lengths=None):
    state = ops.convert_to_tensor(np.array(start_nodes, "int32"))
    if max_lengths is not None:
        max_lengths = ops.convert_to_tensor(np.array(max_lengths, "int32"))
    if beam_size is None:
        outputs = greedy_search(tree.next_fn, state, len(start_nodes), max_length, max_lengths=max_lengths)
    else:
        state = expand_to_beams(state, beam_size)
        outputs = beam_search(
            tree.next_fn, state, len(start_nodes), max_length, beam_size, alpha, max_lengths=max_lengths
        )
    return [_np(x) for x in outputs]


def test_beam_finds_the_better_sequence_that_greedy_misses():
    greedy, greedy_score = _search(CLASSIC)
    beam, beam_score = _search(CLASSIC, beam_size=2)
    np.testing.assert_array_equal(greedy[0, :3], [START, X, END])
    np.testing.assert_array_equal(beam[0, :3], [START, Y, END])
    np.testing.assert_allclose(greedy_score, [math.log(0.22)], rtol=1e-4)
    np.testing.assert_allclose(beam_score, [CLASSIC.log_prob(beam[0])], rtol=1e-5)
    assert beam_score[0] > greedy_score[0]
    np.testing.assert_array_equal(_search(CLASSIC, beam_size=1)[0], greedy)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
def test_length_penalty_picks_the_winner_the_formula_predicts(alpha):
    short, long = [START, X, END], [START, Y, Y, Y, END]
    scores = {len(y) - 1: SHORT_LONG.log_prob(y) / ((5 + len(y) - 1) / 6) ** alpha for y in (short, long)}
    expected = short if scores[2] > scores[4] else long  # switches near alpha = ln(1.2) / ln(9 / 7) ~ 0.73
    assert (expected is short) == (alpha < 0.7)
    tokens, score = _search(SHORT_LONG, beam_size=2, alpha=alpha)
    np.testing.assert_array_equal(tokens[0, : len(expected)], expected)
    assert (tokens[0, len(expected) :] == PAD).all()
    np.testing.assert_allclose(score, [scores[len(expected) - 1]], rtol=1e-5)


def test_nbest_lists_the_finished_hypotheses_best_first():
    # Step 1's four candidates: Y END (0.45), X END (0.22), X X, X Y (0.165 each); both ends rank in the best 2.
    state = expand_to_beams(ops.convert_to_tensor(np.array([0], "int32")), 2)
    tokens, scores = (_np(x) for x in beam_search(CLASSIC.next_fn, state, 1, 8, 2, 0.0, num_hypotheses=2))
    assert tokens.shape == (1, 2, 9) and scores.shape == (1, 2)
    np.testing.assert_array_equal(tokens[0, :, :3], [[START, Y, END], [START, X, END]])
    assert (tokens[0, :, 3:] == PAD).all()
    np.testing.assert_allclose(scores[0], [CLASSIC.log_prob(tokens[0, 0]), math.log(0.22)], rtol=1e-4)
    np.testing.assert_allclose(scores[0, 0], math.log(0.45), rtol=1e-4)  # node 2 ends with probability ~1
    best, best_score = _search(CLASSIC, beam_size=2)
    np.testing.assert_array_equal(tokens[:, 0], best)
    np.testing.assert_allclose(scores[:, 0], best_score)
    one_tokens, one_scores = beam_search(CLASSIC.next_fn, state, 1, 8, 2, 0.0, num_hypotheses=1)
    np.testing.assert_array_equal(_np(one_tokens), tokens[:, :1])
    with pytest.raises(ValueError, match="num_hypotheses must be an int from 1 to beam_size=2. Received: 3"):
        beam_search(CLASSIC.next_fn, state, 1, 8, 2, 0.0, num_hypotheses=3)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_nbest_ranks_hypotheses_finished_at_different_steps(alpha):
    # "X END" finishes at step 1, "Y Y Y END" at step 3; the length penalty decides which ranks first.
    short, long = [START, X, END], [START, Y, Y, Y, END]
    state = expand_to_beams(ops.convert_to_tensor(np.array([0], "int32")), 2)
    tokens, scores = (_np(x) for x in beam_search(SHORT_LONG.next_fn, state, 1, 8, 2, alpha, num_hypotheses=2))
    expected = [short, long] if alpha < 0.7 else [long, short]
    for hypothesis, score, y in zip(tokens[0], scores[0], expected):
        np.testing.assert_array_equal(hypothesis[: len(y)], y)
        assert (hypothesis[len(y) :] == PAD).all()
        np.testing.assert_allclose(score, SHORT_LONG.log_prob(y) / ((5 + len(y) - 1) / 6) ** alpha, rtol=1e-5)
    assert scores[0, 0] > scores[0, 1]


def _sample(tree, noise, top_k=0, temperature=1.0, top_p=1.0, max_length=4):
    noise = np.asarray(noise, "float32")
    state = ops.convert_to_tensor(np.zeros(len(noise), "int32"))
    outputs = sample_search(tree.next_fn, state, len(noise), max_length, noise, top_k, temperature, top_p)
    return [_np(x) for x in outputs]


def test_sampling_inverts_the_distribution_at_the_given_noise():
    # Root: X 0.55 then Y 0.45 in vocabulary order (the other tokens ~1e-6 each, pad 0). After X: END 0.4, X, Y 0.3.
    tokens, scores = _sample(CLASSIC, [[0.3, 0.2, 0.5, 0.5], [0.8, 0.5, 0.5, 0.5]])
    np.testing.assert_array_equal(tokens[:, :3], [[START, X, END], [START, Y, END]])
    assert (tokens[:, 3:] == PAD).all()
    np.testing.assert_allclose(scores, [CLASSIC.log_prob(t) for t in tokens], rtol=1e-5)  # the model's log p
    greedy, greedy_scores = _search(CLASSIC, max_length=4, start_nodes=(0, 0))
    np.testing.assert_array_equal(_sample(CLASSIC, [[0.99] * 4, [0.01] * 4], top_k=1)[0], greedy)
    # The two best renormalized (0.55 / 0.45) put 0.52 on X; at a high temperature they are near 0.5 / 0.5: Y.
    assert _sample(CLASSIC, [[0.52, 0.5, 0.5, 0.5]], top_k=2)[0][0, 1] == X
    assert _sample(CLASSIC, [[0.52, 0.5, 0.5, 0.5]], top_k=2, temperature=100.0)[0][0, 1] == Y
    # Nucleus: X alone holds 0.55 >= 0.5, so top_p 0.5 keeps only X; 0.6 needs Y too (renormalized as before).
    assert _sample(CLASSIC, [[0.9, 0.5, 0.5, 0.5]], top_p=0.5)[0][0, 1] == X
    assert _sample(CLASSIC, [[0.9, 0.5, 0.5, 0.5]], top_p=0.6)[0][0, 1] == Y
    assert _sample(CLASSIC, [[0.9, 0.5, 0.5, 0.5]], top_k=2, top_p=0.5)[0][0, 1] == X
    with pytest.raises(ValueError, match="temperature must be positive"):
        _sample(CLASSIC, [[0.5] * 4], temperature=0.0)
    with pytest.raises(ValueError, match=re.escape("top_p must be in (0, 1]. Received: top_p=0.0")):
        _sample(CLASSIC, [[0.5] * 4], top_p=0.0)


def test_sampled_tokens_follow_the_model_distribution():
    noise = np.random.default_rng(0).random((4000, 4))
    tokens, _ = _sample(CLASSIC, noise)
    first = tokens[:, 1]
    assert abs((first == X).mean() - 0.55) < 0.025 and abs((first == Y).mean() - 0.45) < 0.025
    after_x = tokens[first == X, 2]
    assert abs((after_x == END).mean() - 0.4) < 0.035  # END 0.4, X and Y 0.3 each after X
    for row in tokens:  # pad only after the end token
        ends = np.flatnonzero(row == END)
        stop = ends[0] + 1 if len(ends) else len(row)
        assert (row[:stop] != PAD).all() and (row[stop:] == PAD).all()


@pytest.mark.parametrize("beam_size", [None, 1, 2])
def test_sequences_stop_at_end_then_pad_and_respect_max_length(beam_size):
    # Row 0 (root 0) emits X X END; row 1 (root 3) repeats X and is cut at max_length.
    step = {X: 0.7, Y: 0.3}
    nodes = [(step, {X: 1}), (step, {X: 2}), ({END: 0.7, Y: 0.3}, {}), (step, {X: 3}), ({Y: 0.8, X: 0.2}, {})]
    tree = Tree(nodes)  # the last node (after any Y) never ends
    tokens, scores = _search(tree, beam_size, alpha=0.6, max_length=6, start_nodes=(0, 3))
    np.testing.assert_array_equal(tokens, [[START, X, X, END, PAD, PAD, PAD], [START] + [X] * 6])
    penalties = [1.0, 1.0] if beam_size is None else [((5 + 3) / 6) ** 0.6, ((5 + 6) / 6) ** 0.6]
    expected = [tree.log_prob(tokens[0]) / penalties[0], tree.log_prob(tokens[1], node=3) / penalties[1]]
    np.testing.assert_allclose(scores, expected, rtol=1e-5)


@pytest.mark.parametrize("beam_size", [None, 1, 2])
def test_each_sentence_stops_at_its_own_limit(beam_size):
    # X forever, never an end token: each row is cut at its own limit (3 and 5), below the loop bound 8.
    tree = Tree([({X: 0.7, Y: 0.3}, {X: 0}), ({Y: 0.8, X: 0.2}, {})])
    tokens, scores = _search(tree, beam_size, alpha=0.6, max_length=8, start_nodes=(0, 0), max_lengths=(3, 5))
    np.testing.assert_array_equal(tokens, [[START] + [X] * 3 + [PAD] * 5, [START] + [X] * 5 + [PAD] * 3])
    penalties = [1.0, 1.0] if beam_size is None else [((5 + 3) / 6) ** 0.6, ((5 + 5) / 6) ** 0.6]
    expected = [tree.log_prob(row) / penalty for row, penalty in zip(tokens, penalties)]
    np.testing.assert_allclose(scores, expected, rtol=1e-5)


def _random_model(**overrides):
    keras.utils.set_random_seed(1)
    return build_transformer(**TINY | overrides)


@pytest.mark.parametrize("overrides", [{}, UNTIED_PRE_NORM], ids=["tied_post_norm", "untied_pre_norm"])
def test_cached_and_uncached_next_fn_give_the_models_logits(overrides):
    model = _random_model(num_layers=2, **overrides)
    length = 6
    tokens = np.random.default_rng(0).integers(1, 17, size=(3, length + 1)).astype("int32")
    tokens[:, 0] = START
    expected = _np(model({"source": SOURCE, "target_in": tokens}, training=False))  # (B, L+1, V)
    encoder_outputs, source_mask = encode(model, ops.convert_to_tensor(SOURCE))
    cached, state = cached_next_fn(model, encoder_outputs, source_mask, length)
    uncached, empty = uncached_next_fn(model, encoder_outputs, source_mask, length)
    for index in range(length):
        index_tensor = ops.convert_to_tensor(index, "int32")
        logits, state = cached(ops.convert_to_tensor(tokens), index_tensor, state)
        np.testing.assert_allclose(_np(logits), expected[:, index], atol=1e-5)
        np.testing.assert_allclose(_np(uncached(tokens, index_tensor, empty)[0]), expected[:, index], atol=1e-5)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_and_uncached_decoding_agree(beam_size):
    model = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    cached, cached_scores = (_np(x) for x in translate_ids(model, SOURCE, beam_size=beam_size))
    uncached, uncached_scores = (_np(x) for x in translate_ids(model, SOURCE, beam_size=beam_size, use_cache=False))
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_allclose(cached_scores, uncached_scores, atol=1e-4)
    assert cached.shape == (3, min(24, math.ceil(1.5 * 7 + 10)))
    for row, length in zip(cached, (SOURCE != PAD).sum(axis=1)):  # no pad before the end or limit, only pad after
        ends = np.flatnonzero(row == END)
        stop = ends[0] + 1 if len(ends) else math.ceil(1.5 * length + 10)
        assert (row[:stop] != PAD).all() and (row[stop:] == PAD).all()


def test_beam_size_one_equals_greedy_on_a_model():
    model = _random_model()
    encoder_outputs, source_mask = encode(model, ops.convert_to_tensor(SOURCE))
    next_fn, state = cached_next_fn(model, encoder_outputs, source_mask, 9)
    greedy, _ = greedy_search(next_fn, state, 3, 9)
    beam, _ = beam_search(next_fn, expand_to_beams(state, 1), 3, 9, beam_size=1)
    np.testing.assert_array_equal(_np(beam), _np(greedy))
    np.testing.assert_array_equal(_np(translate_ids(model, SOURCE, max_length=9)[0]), _np(greedy)[:, 1:])


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_sentence_decodes_alike_alone_and_beside_a_longer_one(beam_size):
    model = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    bias = model.get_layer("output_projection").bias
    bias.assign(np.where(np.arange(17) == END, -1e4, _np(bias)))  # the end token never wins: the limits bind
    alone_tokens, alone_scores = (_np(x) for x in translate_ids(model, SOURCE[1:2, :4], beam_size=beam_size))
    tokens, scores = (_np(x) for x in translate_ids(model, SOURCE, beam_size=beam_size))  # row 1 padded to 7
    assert alone_tokens.shape == (1, 16) and tokens.shape == (3, 21)  # ceil(1.5 * 4 + 10), ceil(1.5 * 7 + 10)
    assert (alone_tokens != PAD).all()
    np.testing.assert_array_equal(tokens[1], np.pad(alone_tokens[0], (0, 21 - 16)))
    np.testing.assert_allclose(scores[1], alone_scores[0], atol=1e-5)
    assert (tokens[2] != PAD).all() and (tokens != END).all()


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_ids_nbest_starts_with_the_best(beam_size):
    model = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    tokens, scores = (_np(x) for x in translate_ids(model, SOURCE, beam_size=beam_size))
    nbest, nbest_scores = (_np(x) for x in translate_ids(model, SOURCE, beam_size=beam_size, num_hypotheses=beam_size))
    assert nbest.shape == (3, beam_size, tokens.shape[1]) and nbest_scores.shape == (3, beam_size)
    np.testing.assert_array_equal(nbest[:, 0], tokens)
    np.testing.assert_allclose(nbest_scores[:, 0], scores, atol=1e-5)
    assert (np.diff(nbest_scores, axis=1) <= 0).all()
    assert all(len({tuple(h) for h in row}) == beam_size for row in nbest)  # distinct hypotheses
    if beam_size == 1:
        with pytest.raises(ValueError, match="beam_size 1 gives one hypothesis"):
            translate_ids(model, SOURCE, num_hypotheses=2)


def test_translate_ids_samples_with_the_noise_it_is_given():
    model = _random_model()
    rng = np.random.default_rng(1)
    fixed = [rng.random((3, 21)).astype("float32") for _ in range(2)]  # limit ceil(1.5 * 7 + 10) = 21

    def sample(noise, **kwargs):
        uniform = lambda shape: ops.convert_to_tensor(noise)  # noqa: E731
        return _np(translate_ids(model, SOURCE, sampling_topk=0, random_uniform=uniform, **kwargs)[0])

    first = sample(fixed[0])
    np.testing.assert_array_equal(sample(fixed[0]), first)  # the same noise draws the same translations
    assert (sample(fixed[1]) != first).any()
    np.testing.assert_array_equal(sample(fixed[0], sampling_temperature=1e-4), _np(translate_ids(model, SOURCE)[0]))
    with pytest.raises(ValueError, match="sampling needs beam_size 1"):
        translate_ids(model, SOURCE, beam_size=2, sampling_topk=0)


def test_translate_ids_limits_and_errors():
    model = _random_model()
    assert tuple(translate_ids(model, SOURCE, max_length=5)[0].shape) == (3, 5)
    dynamic = (ops.convert_to_tensor(7),) if keras.backend.backend() == "tensorflow" else ()  # as in tf.function
    for source_length in (7, *dynamic):
        assert int(decode_length(source_length, 24, 1.5, 10)) == 21  # ceil(1.5 * 7 + 10)
        assert int(decode_length(source_length, 24, 2.0, 1)) == 15
        assert int(decode_length(source_length, 12, 1.5, 10)) == 12
    np.testing.assert_array_equal(_np(decode_lengths(SOURCE, 20, 1.5, 10)), [19, 16, 20])  # lengths 6, 4, 7
    with pytest.raises(ValueError, match="beam_size=0"):
        translate_ids(model, SOURCE, beam_size=0)
    source = keras.Input((None,), dtype="int32")
    with pytest.raises(ValueError, match="Received: model 'not_a_transformer'"):
        translate_ids(keras.Model(source, keras.layers.Embedding(5, 4)(source), name="not_a_transformer"), SOURCE)


def test_score_ids_gives_the_search_its_own_scores():
    """Forced decoding of the beam's hypotheses (alpha 0: their scores are plain log-probability sums) must give back
    the scores the cached search computed step by step, for every hypothesis, short or long, in one padded batch."""
    model = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    bias = model.get_layer("output_projection").bias
    bias.assign(np.where(np.arange(17) == END, 1.0, _np(bias)))  # ends come early enough for every hypothesis
    tokens, scores = (_np(x) for x in translate_ids(model, SOURCE, beam_size=3, num_hypotheses=3, length_penalty=0.0))
    assert (tokens == END).any(axis=-1).all()
    hypotheses = np.where(tokens == END, PAD, tokens).reshape(9, -1)  # targets are given without their end token
    forced, lengths = (_np(x) for x in score_ids(model, np.repeat(SOURCE, 3, axis=0), hypotheses))
    np.testing.assert_allclose(forced, scores.reshape(9), atol=1e-4)
    np.testing.assert_array_equal(lengths, (hypotheses != PAD).sum(axis=1) + 1)
    assert len(set(lengths)) > 1
    # A pair scores the same alone as padded beside longer ones, and an empty target is its end token's score.
    alone, _ = score_ids(model, SOURCE[1:2, :4], hypotheses[3:4, :3])
    np.testing.assert_allclose(_np(alone), forced[3:4], atol=1e-5)
    empty, length = score_ids(model, SOURCE[:1], np.zeros((1, 0), "int32"))
    logits = _np(model({"source": SOURCE[:1], "target_in": np.array([[START]], "int32")}, training=False))
    np.testing.assert_allclose(_np(empty), _log_softmax(logits[:, 0])[:, END], atol=1e-5)
    assert _np(length).tolist() == [1]
    with pytest.raises(ValueError, match="do not fit the model's max_length 24"):
        score_ids(model, SOURCE, np.ones((3, 24), "int32"))


def _ensemble():
    """Two random models of different sizes over one vocabulary (source 20, target 17), pre-norm and post-norm."""
    first = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    keras.utils.set_random_seed(2)
    second = build_transformer(
        **TINY | dict(hidden_dim=24, num_heads=3, intermediate_dim=40, shared_embeddings=False, target_vocab_size=17,
             tied_output=False)
    )
    return [first, second]


def test_ensemble_log_probs_are_the_log_of_the_mean_probability():
    logits = [np.array([[2.0, 0.0, -1.0]], "float32"), np.array([[0.0, 3.0, 0.5]], "float32")]
    expected = np.log(np.mean([np.exp(_log_softmax(x)) for x in logits], axis=0))
    np.testing.assert_allclose(_np(ensemble_log_probs(logits)), expected, atol=1e-6)
    np.testing.assert_allclose(_np(ensemble_log_probs(logits[:1])), _log_softmax(logits[0]), atol=1e-6)


def test_an_ensemble_picks_each_token_by_the_mean_of_its_models_probabilities():
    """Greedy search over an ensemble against a hand loop: each step runs both models over the whole prefix, averages
    their probabilities, never picks pad, and pads after the end."""
    models = _ensemble()
    tokens, scores = (_np(x) for x in translate_ids(models, SOURCE, max_length=8))
    # The prefix so far, then pad: the decoder is causal, so position t's logits see tokens 0..t only. One width for
    # every step, so that JAX compiles each model's ops once rather than once a prefix length (a minute of CI).
    prefix, total, done = np.full((3, 9), PAD, "int32"), np.zeros(3), np.zeros(3, bool)
    prefix[:, 0] = START
    for t in range(8):
        probs = np.mean([np.exp(_log_softmax(_np(m({"source": SOURCE, "target_in": prefix}, training=False))[:, t]))
                         for m in models], axis=0)  # (B, V)
        probs[:, PAD] = 0.0
        token = probs.argmax(axis=-1)
        total += np.where(done, 0.0, np.log(probs[np.arange(3), token]))
        token = np.where(done, PAD, token)
        done |= token == END
        prefix[:, t + 1] = token
    np.testing.assert_array_equal(tokens, prefix[:, 1:])
    np.testing.assert_allclose(scores, total, atol=1e-4)
    for model in models:  # the ensemble's choices are neither model's own
        assert (_np(translate_ids(model, SOURCE, max_length=8)[0]) != tokens).any()


@pytest.mark.parametrize("beam_size", [1, 3])
def test_an_ensemble_of_one_model_twice_decodes_as_the_model(beam_size):
    model = _random_model(num_layers=2, **UNTIED_PRE_NORM)
    tokens, scores = (_np(x) for x in translate_ids(model, SOURCE, beam_size=beam_size))
    twice, twice_scores = (_np(x) for x in translate_ids([model, model], SOURCE, beam_size=beam_size))
    np.testing.assert_array_equal(twice, tokens)
    np.testing.assert_allclose(twice_scores, scores, atol=1e-4)


def test_score_ids_gives_an_ensemble_search_its_own_scores():
    models = _ensemble()
    for model in models:  # ends come early enough for every hypothesis
        bias = model.get_layer("output_projection").bias
        bias.assign(np.where(np.arange(17) == END, 1.5, _np(bias)))
    tokens, scores = (_np(x) for x in translate_ids(models, SOURCE, beam_size=3, num_hypotheses=3, length_penalty=0.0))
    assert (tokens == END).any(axis=-1).all()
    hypotheses = np.where(tokens == END, PAD, tokens).reshape(9, -1)
    forced, lengths = (_np(x) for x in score_ids(models, np.repeat(SOURCE, 3, axis=0), hypotheses))
    np.testing.assert_allclose(forced, scores.reshape(9), atol=1e-4)
    single, _ = score_ids(models[0], np.repeat(SOURCE, 3, axis=0), hypotheses)
    assert np.abs(_np(single) - forced).max() > 0.01  # the second model counts


def test_an_ensemble_needs_models_over_one_vocabulary():
    with pytest.raises(ValueError, match=r"share one target vocabulary. Received: vocabulary sizes \[17, 20\]"):
        translate_ids([_random_model(**UNTIED_PRE_NORM), _random_model()], SOURCE)
    with pytest.raises(ValueError, match="at least one model"):
        translate_ids([], SOURCE)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.function is TensorFlow's")
@pytest.mark.parametrize("beam_size", [1, 2])
def test_translate_ids_runs_in_a_tf_function_with_dynamic_shapes(beam_size):
    import tensorflow as tf

    model = _random_model()
    translate = tf.function(
        lambda source: translate_ids(model, source, beam_size=beam_size),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    limits = tf.function(lambda source: decode_lengths(source, 20, 1.5, 10), input_signature=translate.input_signature)
    np.testing.assert_array_equal(limits(tf.constant(SOURCE)).numpy(), [19, 16, 20])
    for source in (SOURCE, SOURCE[:2, :4]):
        eager_tokens, eager_scores = translate_ids(model, source, beam_size=beam_size)
        graph_tokens, graph_scores = translate(tf.constant(source))
        np.testing.assert_array_equal(graph_tokens.numpy(), _np(eager_tokens))
        np.testing.assert_allclose(graph_scores.numpy(), _np(eager_scores), atol=1e-5)
