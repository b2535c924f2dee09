"""Dynamic batching: concurrent requests' sentences decoded together, each request answered with its own lines.

`Batcher.submit(signature, inputs)` queues a request's sentences and waits for their outputs. One task gathers
queued sentences: it waits for the first, then for more until it holds `max_batch_size` or `timeout_s` has passed
since the first; then it takes whatever else is already waiting too (under load, a backlog). It sorts those by
length (characters), cuts them into batches of at most `max_batch_size`, and decodes the batches one after another
on one worker thread, so a batch pads to sentences of about its own length and the event loop stays free to accept
and answer requests meanwhile. Each request's future resolves once its last sentence is decoded.

`Unbatched` is the comparison without a batcher: each request decoded alone, as it arrives, on a thread pool.

A batch the model fails on is decoded again one sentence at a time, so that a sentence the model cannot take fails
its own request only, never the requests it was batched with.

Both count the sentences accepted and not yet answered (`depth`) and refuse a request that would take it past
`max_queue` (`QueueFull`). A request that stops waiting (its timeout, a client gone) has its sentences dropped from
the queue; sentences already in a batch being decoded are decoded anyway, and only that request sees the timeout.
"""

import asyncio
import concurrent.futures
import dataclasses
import logging

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """The queue has no room for a request's sentences."""


class DecodingFailed(Exception):
    """The model raised while decoding one of a request's sentences alone (logged with its traceback)."""


class _Counted:
    def __init__(self, model, max_queue, on_batch):
        self._model, self.max_queue, self._on_batch = model, max_queue, on_batch or (lambda size: None)
        self.depth = 0

    def _reserve(self, count):
        if self.depth + count > self.max_queue:
            raise QueueFull(f"the queue is full ({self.depth} sentences waiting, --max-queue {self.max_queue})")
        self.depth += count

    def _empty_outputs(self, signature):
        return {name: [] for name in self._model.signatures[signature].outputs}


class Unbatched(_Counted):
    """Each request decoded by itself, in one call of its own, on asyncio's default thread pool."""

    async def start(self):
        pass

    async def stop(self):
        pass

    async def submit(self, signature, inputs):
        count = len(next(iter(inputs.values())))
        if count == 0:
            return self._empty_outputs(signature)
        self._reserve(count)
        try:
            outputs = await asyncio.to_thread(self._model.run, signature, inputs)
        except Exception as error:
            logger.exception("decoding a request of %d failed", count)
            raise DecodingFailed(f"decoding failed: {_one_line(error)}") from None
        finally:
            self.depth -= count
        self._on_batch(count)
        return outputs


@dataclasses.dataclass
class _Request:
    future: asyncio.Future
    outputs: dict
    remaining: int

    def put(self, index, outputs):
        for name, value in outputs.items():
            self.outputs[name][index] = value
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            self.future.set_result(self.outputs)


@dataclasses.dataclass
class _Sentence:
    signature: str
    inputs: dict  # {input name: str}
    request: _Request
    index: int  # its place in the request

    @property
    def length(self):
        return sum(len(value) if isinstance(value, str) else sum(map(len, value)) for value in self.inputs.values())


class Batcher(_Counted):
    """Gathers concurrent requests' sentences into batches of at most `max_batch_size`, waiting at most
    `timeout_s` after the first; `on_batch(size)` is called after each batch is decoded."""

    def __init__(self, model, max_batch_size, timeout_s, max_queue, on_batch=None):
        super().__init__(model, max_queue, on_batch)
        self.max_batch_size, self.timeout_s = max_batch_size, timeout_s
        self._queue, self._task, self._worker = asyncio.Queue(), None, None

    async def start(self):
        self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kmt-batcher")
        self._task = asyncio.create_task(self._loop())

    async def stop(self):
        """Decodes what is queued, then ends the gathering task and the worker thread."""
        self._queue.put_nowait(None)
        await self._task
        self._worker.shutdown()

    async def submit(self, signature, inputs):
        count = len(next(iter(inputs.values())))
        if count == 0:
            return self._empty_outputs(signature)
        self._reserve(count)
        outputs = {name: [None] * count for name in self._model.signatures[signature].outputs}
        request = _Request(asyncio.get_running_loop().create_future(), outputs, count)
        for index in range(count):
            self._queue.put_nowait(
                _Sentence(signature, {name: values[index] for name, values in inputs.items()}, request, index)
            )
        return await request.future

    async def _loop(self):
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                break
            pool, deadline = [first], asyncio.get_running_loop().time() + self.timeout_s
            while len(pool) < self.max_batch_size:
                try:
                    sentence = await asyncio.wait_for(self._queue.get(), deadline - asyncio.get_running_loop().time())
                except TimeoutError:
                    break
                if sentence is None:
                    stopping = True
                    break
                pool.append(sentence)
            while not stopping and not self._queue.empty():  # the backlog is sorted and batched with the rest
                sentence = self._queue.get_nowait()
                stopping = sentence is None
                pool += [] if stopping else [sentence]
            await self._decode(pool)

    async def _decode(self, pool):
        pool.sort(key=lambda sentence: (sentence.signature, sentence.length))
        start = 0
        while start < len(pool):
            batch = [s for s in pool[start : start + self.max_batch_size] if s.signature == pool[start].signature]
            start += len(batch)
            live = [sentence for sentence in batch if not sentence.request.future.done()]
            self.depth -= len(batch) - len(live)
            if live:
                try:
                    await self._decode_batch(live)
                finally:
                    self.depth -= len(live)

    async def _decode_batch(self, batch):
        """Decodes `batch` in one call; if that fails, each of its sentences alone, failing only those that fail
        alone."""
        signature = batch[0].signature
        inputs = {name: [sentence.inputs[name] for sentence in batch] for name in batch[0].inputs}
        loop = asyncio.get_running_loop()
        try:
            outputs = await loop.run_in_executor(self._worker, self._model.run, signature, inputs)
        except Exception as error:  # a failed batch fails the guilty requests only, never the server
            if len(batch) > 1:
                logger.warning(
                    "decoding a batch of %d failed (%s); decoding its sentences one at a time",
                    len(batch),
                    _one_line(error),
                )
                for sentence in batch:
                    if not sentence.request.future.done():  # a request with a failed sentence has failed
                        await self._decode_batch([sentence])
            else:
                logger.exception("decoding a sentence failed")
                if not batch[0].request.future.done():
                    batch[0].request.future.set_exception(DecodingFailed(f"decoding failed: {_one_line(error)}"))
        else:
            for row, sentence in enumerate(batch):
                sentence.request.put(sentence.index, {name: values[row] for name, values in outputs.items()})
        finally:
            self._on_batch(len(batch))


def _one_line(error):
    return " ".join(str(error).split())
