"""The Starlette app: TensorFlow Serving's REST routes, `/translate`, health, readiness and metrics.

Routes (`protocol.py` has the bodies):

- `POST /v1/models/NAME:predict`: TensorFlow Serving's predict, row (`instances`) or columnar (`inputs`);
- `GET /v1/models/NAME`: TensorFlow Serving's model status (`LOADING`, then `AVAILABLE`);
- `POST /translate`: `{"text": [...]}` -> `{"translations": [...], "scores": [...]}`;
- `GET /healthz` (the process answers), `GET /readyz` (the model is loaded and warmed), `GET /metrics`.

The server listens at once and loads the model on a thread, so `/healthz` answers while it loads; the model routes
answer 503 until `/readyz` does. Every error is `{"error": "<one line>"}` with TensorFlow Serving's status codes
(400 bad request, 404 unknown model or signature), plus 413 (body over the limits), 503 (queue full or loading,
with `Retry-After`), 504 (the request's timeout) and 500 (decoding failed). One access log line per request.
"""

import asyncio
import contextlib
import dataclasses
import logging
import time

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from kmt.serving.batching import Batcher, DecodingFailed, QueueFull, Unbatched
from kmt.serving.metrics import Metrics
from kmt.serving.model import load_model
from kmt.serving.protocol import RequestError, parse_json, parse_predict, parse_translate, predict_response

logger = logging.getLogger("kmt.serving")
access_logger = logging.getLogger("kmt.serving.access")
MODEL_ROUTES = ("/v1/models/:predict", "/translate")


@dataclasses.dataclass
class Settings:
    """What `kmt-serve`'s flags set (kmt/cli/serve.py says what each means)."""

    model_name: str = "kmt"
    max_batch_size: int = 32
    batch_timeout_ms: float = 5.0
    max_queue: int = 1024
    request_timeout_s: float = 30.0
    max_sentences: int = 64
    max_chars: int = 1000
    batching: bool = True

    @property
    def max_body_bytes(self):
        """The most a request within the limits can weigh: two inputs of UTF-8 (4 bytes a character) a sentence,
        JSON-escaped (up to 6 bytes a character), plus room for the keys."""
        return self.max_sentences * (2 * 6 * self.max_chars + 64) + 4096


def create_app(model_path, settings, on_load_failure=lambda: None):
    """The app serving the export at `model_path`; `on_load_failure()` is called if loading it fails."""
    state = _State(settings, Metrics(settings.max_batch_size))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        loading = asyncio.create_task(_load(state, model_path, on_load_failure))
        yield
        await loading
        if state.queue is not None:
            await state.queue.stop()  # decodes what is still queued

    routes = [
        Route("/v1/models/{name}:predict", state.predict, methods=["POST"]),
        Route("/v1/models/{name}", state.model_status, methods=["GET"]),
        Route("/translate", state.translate, methods=["POST"]),
        Route("/healthz", lambda request: JSONResponse({"status": "ok"}), methods=["GET"]),
        Route("/readyz", state.readyz, methods=["GET"]),
        Route("/metrics", state.metrics_text, methods=["GET"]),
    ]
    handlers = {RequestError: _error_response, HTTPException: _http_error, Exception: _internal_error}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    return AccessLog(app, state.metrics)


class _State:
    def __init__(self, settings, metrics):
        self.settings, self.metrics = settings, metrics
        self.model = self.queue = None
        self.ready = False

    async def predict(self, request):
        self._check_name(request.path_params["name"])
        model = self._ready_model()
        signature, inputs, form = parse_predict(parse_json(await self._body(request)), model.signatures)
        outputs = await self._run(signature, inputs)
        return JSONResponse(predict_response(outputs, form, len(next(iter(inputs.values())))))

    async def translate(self, request):
        self._ready_model()
        text = parse_translate(parse_json(await self._body(request)))
        outputs = await self._run("translate", {"text": text})
        return JSONResponse({"translations": outputs["translation"], "scores": outputs["score"]})

    async def model_status(self, request):
        self._check_name(request.path_params["name"])
        state = "AVAILABLE" if self.ready else "LOADING"
        return JSONResponse({"model_version_status": [
            {"version": "1", "state": state, "status": {"error_code": "OK", "error_message": ""}}]})

    async def readyz(self, request):
        if not self.ready:
            raise RequestError(503, "the model is loading", {"Retry-After": "1"})
        return JSONResponse({"status": "ready"})

    async def metrics_text(self, request):
        depth = self.queue.depth if self.queue is not None else 0
        return PlainTextResponse(self.metrics.render(depth, self.ready), media_type="text/plain; version=0.0.4")

    def _check_name(self, name):
        if name != self.settings.model_name:
            raise RequestError(404, f"model '{name}' not found; this server serves '{self.settings.model_name}'")

    def _ready_model(self):
        if not self.ready:
            raise RequestError(503, "the model is loading", {"Retry-After": "1"})
        return self.model

    async def _body(self, request):
        limit, chunks, size = self.settings.max_body_bytes, [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"the request body is over {limit} bytes, the most that --max-sentences "
                                        f"{self.settings.max_sentences} and --max-chars {self.settings.max_chars} "
                                        f"allow")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _run(self, signature, inputs):
        settings = self.settings
        count = len(next(iter(inputs.values())))
        if count > settings.max_sentences:
            raise RequestError(400, f"the request has {count} sentences; the limit is --max-sentences "
                                    f"{settings.max_sentences}")
        for name, values in inputs.items():
            for i, value in enumerate(values):
                if len(value) > settings.max_chars:
                    raise RequestError(400, f"sentence {i} ({name}) has {len(value)} characters; the limit is "
                                            f"--max-chars {settings.max_chars}")
        try:
            return await asyncio.wait_for(self.queue.submit(signature, inputs), settings.request_timeout_s)
        except QueueFull as error:
            raise RequestError(503, str(error), {"Retry-After": "1"}) from None
        except TimeoutError:
            raise RequestError(504, f"the request was not answered within --request-timeout-s "
                                    f"{settings.request_timeout_s:g}") from None
        except DecodingFailed as error:
            raise RequestError(500, str(error)) from None


async def _load(state, model_path, on_load_failure):
    """Loads the model on a thread, runs each signature once (tracing, kernel set-up), then opens the queue."""
    settings = state.settings
    try:
        started = time.perf_counter()
        model = await asyncio.to_thread(load_model, model_path)
        for name, signature in model.signatures.items():
            await asyncio.to_thread(model.run, name, {key: ["warm up"] for key in signature.inputs})
    except Exception as error:
        logger.error("could not load %s: %s", model_path, " ".join(str(error).split()))
        on_load_failure()
        return
    if settings.batching:
        queue = Batcher(model, settings.max_batch_size, settings.batch_timeout_ms / 1000, settings.max_queue,
                        state.metrics.observe_batch)
    else:
        queue = Unbatched(model, settings.max_queue, state.metrics.observe_batch)
    await queue.start()
    state.model, state.queue, state.ready = model, queue, True
    logger.info("ready: %s loaded and warmed in %.1f s (signatures: %s)", model_path,
                time.perf_counter() - started, ", ".join(sorted(model.signatures)))


def _error_response(request, error):
    return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)


def _internal_error(request, error):
    """Anything else is a bug: logged with its traceback (by uvicorn), answered in one line."""
    return JSONResponse({"error": f"internal error: {type(error).__name__}"}, status_code=500)


def _http_error(request, error):
    return JSONResponse({"error": f"{error.detail}: {request.method} {request.url.path}"},
                        status_code=error.status_code, headers=error.headers)


class AccessLog:
    """ASGI middleware: one log line per request (client, method, path, status, milliseconds) and its metrics."""

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [500]

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            seconds = time.perf_counter() - started
            route = _route(scope["path"])
            self.metrics.observe_request(route, status[0], seconds, route in MODEL_ROUTES)
            client = "%s:%d" % tuple(scope["client"]) if scope.get("client") else "-"
            access_logger.info('%s "%s %s" %d %.1fms', client, scope["method"], scope["path"], status[0],
                               seconds * 1000)


def _route(path):
    """The metrics label of a path (a fixed set, whatever paths clients send)."""
    if path.startswith("/v1/models/"):
        return "/v1/models/:predict" if path.endswith(":predict") else "/v1/models/"
    return path if path in ("/translate", "/healthz", "/readyz", "/metrics") else "other"
