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


LINES = ["Tuesday, March 5, 1996", "", "5 june 2001", "1 May 1990"]
PHRASES = [["1996"], [], ["06", "2001"], ["1990-05"]]


def test_a_run_and_its_savedmodel_put_every_phrase_in_their_translations(smoke_run):
    import kmt
    from kmt.errors import KmtError
    from kmt.inference.keras_translator import KerasTranslator
    from kmt.inference.settings import SettingsError
    from kmt.inference.translators import met

    run, export = kmt.load(smoke_run), kmt.load(smoke_run / "export")
    greedy = run.translate(LINES, constraints=PHRASES, nbest=1)
    assert [hypotheses[0].text for hypotheses in greedy] == [
        h[0].text for h in export.translate(LINES, constraints=PHRASES, nbest=1)
    ]  # the export searches as the run does (greedy)
    assert all(met(phrases, h[0]) for phrases, h in zip(PHRASES, greedy)) and greedy[1][0].text == ""
    beam = run.translate(LINES, settings=run.settings.replace(beam_size=3), constraints=PHRASES, nbest=2)
    assert all(met(phrases, h) for phrases, hypotheses in zip(PHRASES, beam) for h in hypotheses)
    assert run.translate(LINES[2:3], constraints=[[]]) == run.translate(LINES[2:3])  # no phrase: plain search
    aligned = run.translate(LINES, constraints=PHRASES, alignments=True)  # alignments of the constrained output
    assert [h.text for h in aligned] == [h[0].text for h in greedy] and aligned[0].alignment
    ensemble = KerasTranslator([run.model, run.model], run.vocabularies, run.settings.replace(beam_size=2))
    assert all(met(p, h) for p, h in zip(PHRASES, ensemble.translate(LINES, constraints=PHRASES, alignments=True)))

    with pytest.raises(SettingsError, match=r"^Sampling\(.*\) cannot take constraints; Greedy or Beam can"):
        run.translate(LINES, settings=run.settings.replace(sampling_topk=5), constraints=PHRASES)
    with pytest.raises(KmtError, match="^line 3: a constraint is empty"):
        export.translate(LINES, constraints=[[], [], ["2001", " "], []])
    with pytest.raises(KmtError, match="^line 1: the constraints need more tokens than the sentence's output limit"):
        run.translate(LINES[:1], constraints=[["1996 " * 60]])
    with pytest.raises(KmtError, match="whose translate_constrained takes no prefix: .* come from the run directory"):
        export.translate(LINES, constraints=PHRASES, prefixes=["1996"] * 4)
    steered = run.translate(LINES, constraints=PHRASES, prefixes=["19", "", "", "1990"])  # the run takes both
    assert steered[0].startswith("19") and "1996" in steered[0] and steered[3].startswith("1990-05")


def test_kmt_translate_takes_fairseqs_layout_and_counts_what_it_could_not_meet(smoke_run, tmp_path, capsys, caplog):
    from kmt.cli import translate
    from tests.helpers import refused

    path = tmp_path / "constrained.tsv"
    path.write_text("".join("\t".join([line, *phrases]) + "\n" for line, phrases in zip(LINES, PHRASES)))
    out = tmp_path / "out.txt"
    translate.main([str(smoke_run / "export"), "--constraints", str(path), "--output", str(out)])
    outputs = out.read_text().split("\n")[:-1]
    assert len(outputs) == 4 and outputs[1] == ""
    assert all(phrase in text for text, phrases in zip(outputs, PHRASES) for phrase in phrases), outputs

    path.write_text("5 june 2001\t2001\n5 june 2001\t\uff12\uff10\uff10\uff11\n")  # NFKC makes it 2001
    translate.main([str(smoke_run / "export"), "--constraints", str(path), "--output", str(out)])
    assert "1 of 2 translations miss a constraint (lines 2)" in caplog.text

    path.write_text("Tuesday, March 5, 1996\t1996\t\n")
    status, line = refused(capsys, translate.main, smoke_run / "export", "--constraints", path)
    assert (status, line) == (2, "error: line 1: a constraint is empty: give each a word or more")
    status, line = refused(capsys, translate.main, smoke_run / "export", "--constraints", path, "--input", path)
    assert status == 2 and line.endswith("leave out --input")


def test_a_glossary_finds_whole_words_in_their_case_longest_first_and_names_a_bad_line(tmp_path):
    from kmt import Glossary
    from kmt.errors import KmtError

    path = tmp_path / "terms.tsv"
    path.write_text("dog\tHund\nhot  dog\tHotdog\n\nCat\tKatze\n", encoding="utf-8")
    glossary = Glossary.load(path)
    assert len(glossary) == 3
    assert glossary.constraints("A hot dog, a dog and a dog.") == ["Hotdog", "Hund"]
    assert glossary.constraints("Dogs, hotdogs, a cat.") == [] and glossary.constraints("Cat!") == ["Katze"]
    path.write_text("dog\tHund\ncat Katze\n", encoding="utf-8")
    with pytest.raises(KmtError, match=rf"^{path}:2: a glossary line is 'source term<TAB>target term'"):
        Glossary.load(path)


def test_kmt_translate_with_a_glossary_puts_each_found_terms_translation_in(smoke_run, tmp_path, capsys):
    from tests.helpers import refused

    terms = tmp_path / "terms.tsv"
    terms.write_text("March\t03\njune\t06\nJune\t07\n", encoding="utf-8")  # "june" only
    source = tmp_path / "src.txt"
    source.write_text("".join(f"{line}\n" for line in LINES))
    out = tmp_path / "out.txt"
    from kmt.cli import translate

    translate.main([str(smoke_run), "--glossary", str(terms), "--input", str(source), "--output", str(out)])
    outputs = out.read_text().split("\n")[:-1]
    assert len(outputs) == 4 and "03" in outputs[0] and "06" in outputs[2] and outputs[1] == ""

    terms.write_text("March 03\n")
    status, line = refused(capsys, translate.main, smoke_run / "export", "--glossary", terms)
    assert status == 2 and line.startswith(f"error: {terms}:1: a glossary line is 'source term<TAB>target term'")
