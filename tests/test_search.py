"""kmt.inference.search: greedy, sampling and beam search driven by a fake language model (`Tree`)."""

import math
import re

import numpy as np
import pytest
from keras import ops

from kmt.inference.search import beam_search, expand_to_beams, greedy_search, sample_search

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


@pytest.mark.parametrize("beam_size", [None, 2])
def test_the_pad_and_start_tokens_are_never_emitted_and_keep_their_share(beam_size):
    # The root favours pad and start (an imported Marian model's start token is its pad token): both are skipped for
    # X, whose log-probability is still log 0.2 (pad's and start's shares stay in the normaliser).
    tree = Tree([({PAD: 0.3, START: 0.4, X: 0.2, Y: 0.1}, {X: 1}), ({END: 0.9, START: 0.1}, {})])
    tokens, scores = _search(tree, beam_size, max_length=4)
    np.testing.assert_array_equal(tokens[0, :3], [START, X, END])
    np.testing.assert_allclose(scores, [tree.log_prob(tokens[0])], rtol=1e-5)
    np.testing.assert_allclose(scores, [math.log(0.2 * 0.9)], rtol=1e-4)
    drawn, _ = _sample(tree, [[0.1, 0.1, 0.5, 0.5]])  # noise 0.1 falls on pad or start without the mask
    np.testing.assert_array_equal(drawn[0, :3], [START, X, END])


@pytest.mark.parametrize("beam_size", [None, 1, 2])
def test_a_prefix_is_emitted_first_and_the_search_goes_on_from_it(beam_size):
    # CLASSIC's best start is Y (beam) or X (greedy); forced to X, both go on from node 1: X X ... or X END. Row 1's
    # prefix is empty: its search is the ordinary one. Row 0's prefix tokens are scored as any emitted token.
    state = ops.convert_to_tensor(np.array([0, 0], "int32"))
    prefix = ops.convert_to_tensor(np.array([[X], [PAD]], "int32"))
    if beam_size is None:
        tokens, scores = greedy_search(CLASSIC.next_fn, state, 2, 8, prefix=prefix)
    else:
        state = expand_to_beams(state, beam_size)
        tokens, scores = beam_search(CLASSIC.next_fn, state, 2, 8, beam_size, 0.0, prefix=prefix)
    tokens, scores = _np(tokens), _np(scores)
    assert tokens[0, 1] == X
    np.testing.assert_array_equal(tokens[0, :3], [START, X, END])  # after X, END (0.4) beats X or Y (0.3 each)
    np.testing.assert_array_equal(tokens[1], _search(CLASSIC, beam_size)[0][0])  # no prefix: as without one
    np.testing.assert_allclose(scores[0], CLASSIC.log_prob(tokens[0]), rtol=1e-5)


def test_a_prefix_longer_than_one_step_forces_every_step_it_covers_in_sampling():
    # Noise 0.01 draws X at the root (vocabulary order, X first); the prefix's step takes Y instead, and the draw
    # resumes at node 2, which ends. A prefix of three X's covers three steps, whatever the noise.
    state = ops.convert_to_tensor(np.array([0], "int32"))
    prefix = ops.convert_to_tensor(np.array([[Y]], "int32"))
    noise = np.full((1, 4), 0.01, "float32")
    tokens, _ = (_np(x) for x in sample_search(CLASSIC.next_fn, state, 1, 4, noise, top_k=0, prefix=prefix))
    np.testing.assert_array_equal(tokens[0, :3], [START, Y, END])
    forced = ops.convert_to_tensor(np.array([[X, X, X]], "int32"))
    tokens, _ = (_np(x) for x in sample_search(CLASSIC.next_fn, state, 1, 4, noise, top_k=0, prefix=forced))
    np.testing.assert_array_equal(tokens[0, :4], [START, X, X, X])
