"""kmt-serve's batcher when the model fails on one sentence of a batch: only that sentence's request fails."""

import asyncio

from kmt.serving.batching import Batcher, DecodingFailed
from kmt.serving.model import Signature, Tensor


class FailsOnPoison:
    """A stand-in for a loaded export whose model raises on one input. kmt-serve refuses every input known to break
    the real exports when the request arrives (tests/test_serve.py), so none is left to drive a real batch into
    this path."""

    signatures = {
        "translate": Signature(
            inputs={"text": Tensor("DT_STRING", (-1,), "text")},
            outputs={"translation": Tensor("DT_STRING", (-1,), "translation")},
        )
    }

    def __init__(self):
        self.calls = []

    def run(self, signature, inputs):
        self.calls.append(len(inputs["text"]))
        if "poison" in inputs["text"]:
            raise ValueError("cannot take poison")
        return {"translation": [text.upper() for text in inputs["text"]]}


def test_a_failed_batch_is_decoded_again_one_sentence_at_a_time_and_only_the_guilty_request_fails():
    model, requests = FailsOnPoison(), [["a", "b"], ["poison", "c"], ["d"], ["e", "f", "g"]]  # 8: one batch

    async def serve():
        batcher = Batcher(model, max_batch_size=8, timeout_s=60, max_queue=64)  # formed by its count, not its window
        await batcher.start()
        answers = await asyncio.gather(
            *(batcher.submit("translate", {"text": text}) for text in requests), return_exceptions=True
        )
        await batcher.stop()
        return answers, batcher.depth

    answers, depth = asyncio.run(serve())
    assert isinstance(answers[1], DecodingFailed) and "cannot take poison" in str(answers[1])
    assert [answers[i] for i in (0, 2, 3)] == [
        {"translation": ["A", "B"]},
        {"translation": ["D"]},
        {"translation": ["E", "F", "G"]},
    ]
    assert model.calls == [8] + [1] * 8 and depth == 0  # the batch, then each of its sentences ("c" too)
