"""Loading a kmt-serve app's models: each loaded on a thread and ready once the signatures a plain request takes have
run once, then the others run once, so that no request pays for a signature's set-up after that."""

import asyncio
import dataclasses
import logging
import time

from kmt.errors import KmtError
from kmt.serving.batching import Batcher, Unbatched
from kmt.serving.model import load_model, warm_up

logger = logging.getLogger("kmt.serving")


@dataclasses.dataclass
class Served:
    """One model a server serves: its name (`/v1/models/NAME`), its path, its language pair (a
    `kmt.serving.languages.Pair`, or None) and, once loaded, its model and queue."""

    name: str
    path: object
    pair: object = None
    model: object = None
    queue: object = None
    ready: bool = False
    warmed: set = dataclasses.field(default_factory=set)  # the signatures run once


async def load_all(state, on_load_failure):
    """Loads the models one after the other, each ready once the signatures a plain request takes have run once
    (`first_signatures`); then runs each model's other signatures once, unless the server is stopping, and logs
    that it did (`PATH: warmed NAMES in S s`)."""
    for served in state.served.values():
        if not await _load(state, served, on_load_failure):
            return
    for served in state.served.values():
        started, rest = time.perf_counter(), [n for n in served.model.signatures if n not in served.warmed]
        for name in rest:
            if state.stopping:
                return
            try:
                await asyncio.to_thread(warm_up, served.model, name)
            except Exception as error:  # its requests get the same error as a 500
                logger.error("%s: %s failed on a test sentence: %s", served.path, name, " ".join(str(error).split()))
            served.warmed.add(name)
        logger.info(
            "%s: warmed %s in %.1f s", served.path, ", ".join(rest) or "nothing more", time.perf_counter() - started
        )


def first_signatures(settings, model):
    """The signatures run before a model is ready: those kmt's `/translate` and a predict request without a
    `signature_name` take. The others are warmed after (`load_all`): TensorFlow sets each of a SavedModel's up on
    its first call (graph optimization, kernels), which a first request to one before then waits for once."""
    names = {"serving_default", "translate"}
    if settings.glossary is not None and not model.inline_terms:
        names.add("translate_constrained")
    return [name for name in model.signatures if name in names]


async def _load(state, served, on_load_failure):
    """Loads a model on a thread, runs its first signatures once (`first_signatures`), then opens its queue; whether
    it could."""
    settings, model_path = state.settings, served.path
    try:
        started = time.perf_counter()
        model = await asyncio.to_thread(load_model, model_path)
        if settings.glossary is not None and not model.inline_terms and "translate_constrained" not in model.signatures:
            raise KmtError(f"--glossary needs a model that can constrain a translation; {model_path} cannot")
        for name in first_signatures(settings, model):
            await asyncio.to_thread(warm_up, model, name)
            served.warmed.add(name)
    except Exception as error:
        logger.error("could not load %s: %s", model_path, " ".join(str(error).split()))
        on_load_failure()
        return False
    if settings.batching:
        queue = Batcher(
            model,
            settings.max_batch_size,
            settings.batch_timeout_ms / 1000,
            settings.max_queue,
            state.metrics.observe_batch,
        )
    else:
        queue = Unbatched(model, settings.max_queue, state.metrics.observe_batch)
    await queue.start()
    served.model, served.queue, served.ready = model, queue, True
    names = "" if len(state.served) == 1 else f" as {served.name}"
    logger.info(
        "%s: %s%s loaded and %s warmed in %.1f s (signatures: %s)",
        "ready" if state.ready else "loaded",
        model_path,
        names,
        ", ".join(sorted(served.warmed)) or "nothing",
        time.perf_counter() - started,
        ", ".join(sorted(model.signatures)),
    )
    return True
