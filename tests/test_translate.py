"""Translating many lines: order, batching by length, n-best lists, scoring, and streaming through a buffer."""

import math

import pytest

from kmt.inference.settings import SearchSettings
from kmt.inference.translate import translate_stream
from kmt.inference.translators import BatchedTranslator, Hypothesis, Score


class Recorder(BatchedTranslator):
    """A translator that upper-cases its lines (its n-best list: then lower-cased, ...) and records the batches it
    was given."""

    settings = SearchSettings.of(beam_size=2)

    def __init__(self, batch_size=2):
        self.batch_size = batch_size
        self.batches = []

    def _translate_batch(self, lines, settings, nbest, prefixes, constraints=None):
        self.batches.append(list(lines))
        return [
            [Hypothesis(line.upper() if k % 2 == 0 else line.lower(), float(len(line) - k)) for k in range(nbest)]
            for line in lines
        ]

    def _score_batch(self, sources, targets):
        self.batches.append(list(zip(sources, targets)))
        return [
            Score(-float(len(target)) if source else math.nan, len(target) + 1)
            for source, target in zip(sources, targets)
        ]


def test_translate_batches_by_length_and_keeps_input_order():
    lines = ["ccc", "a", "", "bb", "dddd"]
    recorder = Recorder()
    assert recorder.translate(lines) == ["CCC", "A", "", "BB", "DDDD"]
    assert recorder.batches == [["", "a"], ["bb", "ccc"], ["dddd"]]
    nbest = recorder.translate(lines, nbest=2)
    assert nbest[0] == [Hypothesis("CCC", 3.0), Hypothesis("ccc", 2.0)] and len(nbest) == len(lines)
    with pytest.raises(ValueError, match="nbest must be positive. Received: nbest=0"):
        recorder.translate(lines, nbest=0)


def test_progress_is_a_bar_at_a_terminal_and_log_lines_elsewhere(monkeypatch, caplog):
    import io
    import logging

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    lines = ["ccc", "a", "bb", "dddd", "e"]
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert Recorder().translate(lines, progress=True) == [line.upper() for line in lines]
    assert "translated: 100%" in terminal.getvalue() and "5/5" in terminal.getvalue()
    monkeypatch.setattr("sys.stderr", io.StringIO())
    caplog.set_level(logging.INFO, logger="kmt.inference.translate")
    Recorder().translate(lines, progress=True)
    assert [record.getMessage().split(" (")[0] for record in caplog.records] == [
        "translated 2/5",
        "translated 4/5",
        "translated 5/5",
    ]


def test_score_pairs_in_input_order():
    recorder = Recorder()
    scores = recorder.score(["a b", "", "c"], ["xy", "z", ""])
    assert scores[0] == Score(-2.0, 3) and math.isnan(scores[1].log_probability) and scores[2] == Score(-0.0, 1)
    with pytest.raises(ValueError, match="as many targets as sources. Received: 2 sources, 1 targets"):
        recorder.score(["a", "b"], ["c"])


def test_translate_stream_translates_a_buffer_before_reading_on():
    read = []

    def lines():
        for i in range(7):
            read.append(i)
            yield "x" * (7 - i)

    recorder = Recorder()
    stream = translate_stream(recorder, lines(), buffer_size=3)
    assert next(stream) == [Hypothesis("XXXXXXX", 7.0)]
    assert read == [0, 1, 2]  # the first buffer's lines only: output does not wait for the end of the input
    assert recorder.batches == [["xxxxx", "xxxxxx"], ["xxxxxxx"]]  # sorted by length within the buffer
    rest = list(stream)
    assert [hypotheses[0].text for hypotheses in rest] == ["X" * n for n in (6, 5, 4, 3, 2, 1)]
    assert recorder.batches[2:] == [["xx", "xxx"], ["xxxx"], ["x"]]  # buffers of 3, 3 and the last line
