"""Translating many lines: order, batching by length, and streaming through a buffer."""

from kmt.inference.translate import translate_lines, translate_stream


class Recorder:
    """A `translate_batch` that upper-cases its lines and records the batches it was given."""

    def __init__(self):
        self.batches = []

    def __call__(self, batch):
        self.batches.append(list(batch))
        return [line.upper() for line in batch], [float(len(line)) for line in batch]


def test_translate_lines_batches_by_length_and_keeps_input_order():
    lines = ["ccc", "a", "", "bb", "dddd"]
    recorder = Recorder()
    translations, scores = translate_lines(recorder, lines, batch_size=2)
    assert translations == ["CCC", "A", "", "BB", "DDDD"] and scores == [3.0, 1.0, 0.0, 2.0, 4.0]
    assert recorder.batches == [["", "a"], ["bb", "ccc"], ["dddd"]]


def test_translate_stream_translates_a_buffer_before_reading_on():
    read = []

    def lines():
        for i in range(7):
            read.append(i)
            yield "x" * (7 - i)

    recorder = Recorder()
    stream = translate_stream(recorder, lines(), batch_size=2, buffer_size=3)
    assert next(stream) == ("XXXXXXX", 7.0)
    assert read == [0, 1, 2]  # the first buffer's lines only: output does not wait for the end of the input
    assert recorder.batches == [["xxxxx", "xxxxxx"], ["xxxxxxx"]]  # sorted by length within the buffer
    rest = list(stream)
    assert [text for text, _ in rest] == ["X" * n for n in (6, 5, 4, 3, 2, 1)]
    assert recorder.batches[2:] == [["xx", "xxx"], ["xxxx"], ["x"]]  # buffers of 3, 3 and the last line
