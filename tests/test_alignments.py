"""Target prefixes and word alignments: the word-alignment function on hand-made attention, and on a trained run
(e2e) the same prefixed translations and the same alignments from its Keras model, its SavedModel and its CTranslate2
directory."""

import importlib.util

import numpy as np
import pytest
from keras import ops

from kmt.errors import KmtError
from kmt.inference.alignments import INSIDE, NOT_A_WORD, WORD_START, parse_pharaoh, pharaoh, word_alignment

# A vocabulary of kinds: 0 pad, 1 unk, 2 start, 3 end (not words), 4-5 begin a word, 6 continues one.
KINDS = np.array([NOT_A_WORD, INSIDE, NOT_A_WORD, NOT_A_WORD, WORD_START, WORD_START, INSIDE], np.int32)


def test_subword_attention_is_summed_to_words_and_each_target_word_takes_its_most_attended_source_word():
    source = np.array([[4, 6, 5, 3, 0]])  # words: "4 6" (0), "5" (1), then the end token and pad
    target = np.array([[5, 4, 6, 3]])  # words: "5" (0), "4 6" (1), end
    attention = np.zeros((1, 4, 5), np.float32)
    attention[0, 0] = [0.3, 0.3, 0.4, 0.0, 0.0]  # target word 0: source word 0 gets 0.6 over two pieces
    attention[0, 1] = [0.1, 0.0, 0.2, 0.7, 0.0]  # most on the end token, which is no word: word 1 (0.2) > 0 (0.1)
    attention[0, 2] = [0.0, 0.1, 0.1, 0.8, 0.0]  # target word 1's second piece: word 1 sums 0.3 against 0.2
    attention[0, 3] = [0.0, 0.0, 0.0, 1.0, 0.0]  # the end token's step: not a word
    best = ops.convert_to_numpy(word_alignment(attention, source, target, KINDS, KINDS))
    np.testing.assert_array_equal(best, [[0, 1, -1, -1]])
    empty = ops.convert_to_numpy(word_alignment(attention, np.array([[3, 0, 0, 0, 0]]), target, KINDS, KINDS))
    np.testing.assert_array_equal(empty, [[-1, -1, -1, -1]])  # no source word: nothing to link


def test_pharaoh_lines_are_written_and_read_back():
    assert pharaoh([(0, 0), (2, 1)]) == "0-0 2-1" and parse_pharaoh("0-0 2-1") == ((0, 0), (2, 1))
    assert parse_pharaoh("0-1-0.5 ") == ((0, 1),) and parse_pharaoh("") == ()
    with pytest.raises(KmtError, match="line 3: 'a-b' is not a Pharaoh link"):
        parse_pharaoh("0-0 a-b", "line 3")


needs_ctranslate2 = pytest.mark.skipif(
    importlib.util.find_spec("ctranslate2") is None,
    reason='needs ctranslate2, an optional dependency: pip install "kmt[ctranslate2]"',
)
LINES = ["Tuesday, March 5, 1996", "5 march 96", "", "the third of May 2001", "12/31/1999", "x" * 300]
PREFIXES = ["19", "2001-", "x", "", "1999 12", "20"]


@needs_ctranslate2
@pytest.mark.e2e
def test_the_run_its_savedmodel_and_ctranslate2_translate_from_prefixes_and_align_alike(smoke_run, tmp_path):
    import kmt
    from kmt.inference.loading import load_translator

    kmt.export(smoke_run, format="ctranslate2", output=tmp_path / "ct2")  # the run's decode: greedy (debug=smoke)
    paths = {"run": smoke_run, "savedmodel": smoke_run / "export", "ctranslate2": tmp_path / "ct2"}
    translators = {name: load_translator(path) for name, path in paths.items()}
    results = {name: t.translate(LINES, prefixes=PREFIXES, alignments=True) for name, t in translators.items()}
    texts = {name: [h.text for h in hypotheses] for name, hypotheses in results.items()}
    assert texts["run"] == texts["savedmodel"] == texts["ctranslate2"]
    for line, prefix, text in zip(LINES, PREFIXES, texts["run"]):
        assert text.startswith(prefix) if line else text == ""
    assert texts["run"][3] == translators["run"].translate([LINES[3]])[0]  # an empty prefix: the plain translation
    scores = {name: [h.score for h in hypotheses] for name, hypotheses in results.items()}
    for other in ("savedmodel", "ctranslate2"):  # the whole translation's, the prefix's tokens included
        np.testing.assert_allclose(scores[other], scores["run"], rtol=1e-4)
    alignments = {name: [h.alignment for h in hypotheses] for name, hypotheses in results.items()}
    assert alignments["run"] == alignments["savedmodel"] == alignments["ctranslate2"]
    for line, text, alignment in zip(LINES, texts["run"], alignments["run"]):
        assert all(0 <= i < len(line.split()) and 0 <= j < len(text.split()) for i, j in alignment)
        assert {j for _, j in alignment} == set(range(len(text.split()))) if line else alignment == ()
    targets = ["1996 - 03 - 05", "1996-03-05", "a", "", "1999 12 31", "x"]
    forced = {name: t.align(LINES, targets) for name, t in translators.items()}
    assert forced["run"] == forced["savedmodel"] == forced["ctranslate2"]
    assert forced["run"][2] == forced["run"][3] == ()  # an empty side aligns nothing
    with pytest.raises(KmtError, match=r"^line 2: the prefix '2 2 2 .*' is longer than the sentence's output limit"):
        translators["savedmodel"].translate(["1 1", "5 march 96"], prefixes=["", "2 " * 100])
