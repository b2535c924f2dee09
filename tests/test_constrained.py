"""kmt.inference.constrained: lexically constrained beam search over a random first-order language model."""

import numpy as np
import pytest
from keras import ops

from kmt.inference.constrained import advance, constrained_beam_search, flatten_constraints
from kmt.inference.search import beam_search

PAD, START, END = 0, 2, 3
VOCAB = 12


class Markov:
    """A fake language model: the next token's logits depend on the last token only (a random table)."""

    def __init__(self, seed):
        self.table = np.random.default_rng(seed).normal(0, 2, (VOCAB, VOCAB)).astype("float32")
        self.table[:, END] += 2  # translations end, as a trained model's do

    def next_fn(self, tokens, index, state):
        last = ops.take(tokens, ops.reshape(index, (1,)), axis=1)[:, 0]
        return ops.take(ops.convert_to_tensor(self.table), last, axis=0), state


def phrases(rows, width=3):
    """Constraints as the search takes them: int (B, C, W), pad after each phrase's ids."""
    count = max(1, max(len(row) for row in rows))
    out = np.zeros((len(rows), count, width), "int32")
    for i, row in enumerate(rows):
        for j, phrase in enumerate(row):
            out[i, j, : len(phrase)] = phrase
    return ops.convert_to_tensor(out)


def search(model, constraints, batch, beam_size=4, max_length=12, nbest=None, prefix=None, constrained=True):
    state = ops.zeros((batch * beam_size,), "int32")
    kwargs = dict(beam_size=beam_size, length_penalty=0.6, num_hypotheses=nbest, prefix=prefix)
    if constrained:
        outputs = constrained_beam_search(model.next_fn, state, batch, max_length, constraints, **kwargs)
    else:
        outputs = beam_search(model.next_fn, state, batch, max_length, **kwargs)
    return [ops.convert_to_numpy(x) for x in outputs]


def contains(tokens, phrase):
    tokens = list(tokens)
    return any(tokens[i : i + len(phrase)] == list(phrase) for i in range(len(tokens) - len(phrase) + 1))


def emitted(row):
    """The tokens after the start token, up to and including the end token."""
    row = list(row[1:])
    return row[: row.index(END) + 1] if END in row else row


def test_the_state_advances_abandons_and_completes_phrases():
    tokens, first, last, width = flatten_constraints(phrases([[[5, 6, 7], [8]]]))
    met, position = ops.zeros((1, 7), "bool"), ops.convert_to_tensor([-1])
    trail = []
    for token in (5, 6, 9, 8, 5, 6, 7):  # begin, advance, abandon (5 and 6 unmet again), single, then all of it
        met, position = advance(met, position, ops.convert_to_tensor([token]), tokens, first, last, width)
        trail.append((ops.convert_to_numpy(met)[0].astype(int).tolist(), int(ops.convert_to_numpy(position)[0])))
    assert trail == [
        ([1, 0, 0, 0, 0, 0, 0], 1),
        ([1, 1, 0, 0, 0, 0, 0], 2),
        ([0, 0, 0, 0, 0, 0, 0], -1),
        ([0, 0, 0, 1, 0, 0, 0], -1),
        ([1, 0, 0, 1, 0, 0, 0], 1),
        ([1, 1, 0, 1, 0, 0, 0], 2),
        ([1, 1, 1, 1, 0, 0, 0], -1),
    ]


@pytest.mark.parametrize("beam_size,nbest", [(1, None), (3, None), (4, 2)])
def test_without_constraints_it_is_beam_search_hypothesis_for_hypothesis(beam_size, nbest):
    model = Markov(0)
    empty = phrases([[], [], []])
    tokens, scores, met = search(model, empty, 3, beam_size, nbest=nbest)
    expected_tokens, expected_scores = search(model, None, 3, beam_size, nbest=nbest, constrained=False)
    np.testing.assert_array_equal(tokens, expected_tokens)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-6)
    assert met.all()


@pytest.mark.parametrize("seed", range(4))
def test_every_output_contains_every_phrase_and_says_so(seed):
    rng = np.random.default_rng(seed)
    model = Markov(seed)
    normal = list(set(range(VOCAB)) - {PAD, START, END, 1})
    rows = [[list(rng.choice(normal, rng.integers(1, 4))) for _ in range(rng.integers(1, 3))] for _ in range(4)]
    tokens, scores, met = search(model, phrases(rows), 4, beam_size=5, max_length=16, nbest=2)
    assert met.all(), rows
    for sentence, row in zip(tokens, rows):
        for hypothesis in sentence:
            output = emitted(hypothesis)
            assert all(contains(output, phrase) for phrase in row), (output, row)
    assert (scores[:, 0] >= scores[:, 1]).all()


def test_a_phrase_that_cannot_fit_is_reported_unmet_and_the_others_still_translate():
    model = Markov(1)
    rows = [[[4, 5, 6, 7, 8, 9, 10, 11, 4, 5]], [[6]]]
    tokens, _, met = search(model, phrases(rows, width=10), 2, beam_size=3, max_length=6)
    assert met.tolist() == [False, True]
    assert contains(emitted(tokens[1]), [6]) and len(emitted(tokens[0])) == 6


def test_a_prefix_comes_first_and_a_phrase_inside_it_counts_as_met():
    model = Markov(2)
    prefix = ops.convert_to_tensor(np.array([[7, 8], [9, 0]], "int32"))
    tokens, _, met = search(model, phrases([[[8]], [[10, 11]]]), 2, beam_size=3, prefix=prefix)
    assert met.all()
    assert emitted(tokens[0])[:2] == [7, 8] and emitted(tokens[1])[0] == 9 and contains(emitted(tokens[1]), [10, 11])
