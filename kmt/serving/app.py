"""The Starlette app: TensorFlow Serving's REST routes, `/translate`, health, readiness and metrics.

Routes (`protocol.py` has the bodies), MODEL being `NAME`, `NAME/versions/1` or `NAME/labels/LABEL`:

- `POST /v1/models/MODEL:predict`: TensorFlow Serving's predict, row (`instances`) or columnar (`inputs`);
- `GET /v1/models/MODEL`: TensorFlow Serving's model status (`LOADING`, then `AVAILABLE`);
- `GET /v1/models/MODEL/metadata`: TensorFlow Serving's model metadata (the signature defs);
- `POST /translate`: `{"text": [...]}` -> `{"translations": [...], "scores": [...]}`; with `"glossary": [[source
  term, target term], ...]` (or the server's `--glossary`), each sentence's translation holds the target term of every
  source term found in it (`translate_constrained`, or the terms inline for a model trained with them);
- `GET /` (unless `--no-frontend`): the web page (`kmt/serving/frontend/`), one more client of LibreTranslate's routes,
  its scripts and styles under `/static/`, with a Content-Security-Policy that allows nothing from elsewhere;
- `GET /healthz` (the process answers), `GET /readyz` (the model is loaded and warmed), `GET /metrics`;
- LibreTranslate's `POST /translate` (a body with `q`), `GET /languages`, `POST /detect`, `GET /frontend/settings`,
  `POST /translate_file` and `GET /download_file/NAME` (`kmt.serving.libretranslate`).

The server serves one version, `1`, which every label names. The server listens at once and loads the model on a
thread, so `/healthz` answers while it loads; the model routes answer 503 until `/readyz` does. Every error is
`{"error": "<one line>"}` with TensorFlow Serving's status codes (400 bad request, 404 unknown model, version or
signature), plus 405 (a known route, the wrong method), 408 (the body did not arrive within the request timeout),
413 (body over the limits), 503 (queue full or loading, with `Retry-After`), 504 (the request's timeout) and 500
(decoding failed). A client that goes away before its answer is logged and counted with status 499, as nginx does,
and its queued sentences are dropped. One access log line per request.
"""

import asyncio
import contextlib
import dataclasses
import logging
import re
import tempfile
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from kmt.inference.glossary import Glossary
from kmt.serving.batching import DecodingFailed, QueueFull
from kmt.serving.libretranslate import LibreTranslate
from kmt.serving.loading import Served, load_all
from kmt.serving.metrics import CLIENT_GONE, AccessLog, Metrics
from kmt.serving.protocol import (
    RequestError,
    metadata_response,
    parse_json,
    parse_predict,
    parse_translate,
    parse_translate_body,
    predict_response,
)

logger = logging.getLogger("kmt.serving")
VERSION = "1"
DRAIN_BYTES = 64 * 2**20  # most of a body over the limit read (and dropped) so that its client gets the 413
FRONTEND = Path(__file__).parent / "frontend"
PAGE_HEADERS = {  # the page runs only its own files and talks only to this server
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_MODEL_PATH = re.compile(
    r"(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?:/(?P<metadata>metadata)|:(?P<verb>[^/:]+))?"
)


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
    glossary: object = None  # a kmt.inference.glossary.Glossary: constraints for the translate signatures
    pair: object = None  # an export path's kmt.serving.languages.Pair, for LibreTranslate's routes
    api_keys: frozenset | None = None  # LibreTranslate's routes need one of these as api_key; None: no key
    req_limit: int = 0  # LibreTranslate requests a client (its key, else its address) may make a minute; 0: any
    max_file_bytes: int = 10_000_000  # the largest upload /translate_file takes
    file_ttl_s: float = 1800.0  # how long a /translate_file result stays to download
    frontend: bool = True  # the web page at /

    @property
    def max_body_bytes(self):
        """The most a request within the limits can weigh: two inputs of UTF-8 (4 bytes a character) a sentence,
        JSON-escaped (up to 6 bytes a character), plus room for the keys."""
        return self.max_sentences * (2 * 6 * self.max_chars + 64) + 4096


def create_app(models, settings, on_load_failure=lambda: None):
    """The app serving `models`, a list of `Served` (or one export's path: served as `settings.model_name`, with
    `settings.pair`); `on_load_failure()` is called if loading one fails. The first model answers kmt's `/translate`
    unless a request names another."""
    if not isinstance(models, list):
        models = [Served(settings.model_name, models, settings.pair)]
    state = _State(settings, Metrics(settings.max_batch_size), models)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        loading = asyncio.create_task(load_all(state, on_load_failure))
        with tempfile.TemporaryDirectory(prefix="kmt-serve-files-") as files:  # /translate_file's, while it runs
            state.libre.files = Path(files)
            yield
        state.stopping = True  # the signatures not yet warmed stay cold
        await loading
        for served in state.served.values():
            if served.queue is not None:
                await served.queue.stop()  # decodes what is still queued

    routes = [
        Route("/v1/models/{path:path}", state.models, methods=["GET", "POST"]),
        Route("/translate", state.translate, methods=["POST"]),
        Route("/languages", state.libre.languages, methods=["GET"]),
        Route("/detect", state.libre.detect, methods=["POST"]),
        Route("/frontend/settings", state.libre.frontend_settings, methods=["GET"]),
        Route("/translate_file", state.libre.translate_file, methods=["POST"]),
        Route("/download_file/{filename}", state.libre.download_file, methods=["GET"], name="download_file"),
        Route("/healthz", lambda request: JSONResponse({"status": "ok"}), methods=["GET"]),
        Route("/readyz", state.readyz, methods=["GET"]),
        Route("/metrics", state.metrics_text, methods=["GET"]),
    ]
    if settings.frontend:
        routes += [
            Route("/", lambda request: FileResponse(FRONTEND / "index.html", headers=PAGE_HEADERS), methods=["GET"]),
            Mount("/static", StaticFiles(directory=FRONTEND), name="static"),
        ]
    handlers = {
        RequestError: _error_response,
        HTTPException: _http_error,
        ClientDisconnect: _client_gone,
        Exception: _internal_error,
    }
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    return AccessLog(app, state.metrics)


class _State:
    def __init__(self, settings, metrics, models):
        self.settings, self.metrics = settings, metrics
        self.served = {served.name: served for served in models}
        self.default = models[0]
        self.libre = LibreTranslate(self)
        self.stopping = False

    @property
    def ready(self):
        return all(served.ready for served in self.served.values())

    async def models(self, request):
        """Every route under /v1/models/: TensorFlow Serving's status, metadata and predict."""
        path = request.url.path
        route = _MODEL_PATH.fullmatch(request.path_params["path"])
        if route is None or route["verb"] not in (None, "predict", "classify", "regress"):
            raise RequestError(
                404,
                f"no route {path}; TensorFlow Serving's are /v1/models/NAME[/versions/N"
                f"|/labels/LABEL][/metadata|:predict]",
            )
        method = "POST" if route["verb"] else "GET"
        if request.method not in (method, "HEAD" if method == "GET" else None):
            raise RequestError(405, f"{path} takes {method}. Received: {request.method}", {"Allow": method})
        served = self._named(route["name"])
        if route["version"] not in (None, VERSION):
            raise RequestError(
                404,
                f"version {route['version']} of model '{route['name']}' not found; this server "
                f"serves version {VERSION}",
            )
        if route["verb"] in ("classify", "regress"):
            raise RequestError(
                400,
                f"{path}: kmt's signatures are tensorflow/serving/predict ones, which "
                f":{route['verb']} cannot call; use :predict",
            )
        if route["verb"]:
            return await self.predict(request, served)
        if route["metadata"]:
            return JSONResponse(metadata_response(served.name, VERSION, self._ready_model(served).signatures))
        state = "AVAILABLE" if served.ready else "LOADING"
        return JSONResponse(
            {
                "model_version_status": [
                    {"version": VERSION, "state": state, "status": {"error_code": "OK", "error_message": ""}}
                ]
            }
        )

    async def predict(self, request, served):
        model = self._ready_model(served)
        signature, inputs, form = parse_predict(parse_json(await self._body(request)), model.signatures)
        if signature in ("translate", "serving_default") and self.settings.glossary is not None:
            signature, inputs = self._glossed(served, self.settings.glossary, inputs["text"], signature)  # same outputs
        outputs = await self._run(request, served, signature, inputs)
        return JSONResponse(predict_response(outputs, form, len(next(iter(inputs.values())))))

    async def translate(self, request):
        body, content_type = await self._body(request), request.headers.get("content-type", "")
        value, libretranslate = parse_translate_body(body, content_type)
        if libretranslate:
            return await self.libre.translate(request, value)
        text, terms, name = parse_translate(value)
        served = self.default if name is None else self._named(name)
        self._ready_model(served)
        glossary = self.settings.glossary if terms is None else Glossary(terms)
        if glossary is None:
            signature, inputs = "translate", {"text": text}
        else:
            signature, inputs = self._glossed(served, glossary, text)
        outputs = await self._run(request, served, signature, inputs)
        return JSONResponse({"translations": outputs["translation"], "scores": outputs["score"]})

    async def readyz(self, request):
        if not self.ready:
            raise RequestError(503, "the model is loading", {"Retry-After": "1"})
        return JSONResponse({"status": "ready"})

    async def metrics_text(self, request):
        depth = sum(served.queue.depth for served in self.served.values() if served.queue is not None)
        return PlainTextResponse(self.metrics.render(depth, self.ready), media_type="text/plain; version=0.0.4")

    def _glossed(self, served, glossary, text, signature="translate"):
        """The signature and inputs that translate `text` with `glossary`: the terms inline for a model trained with
        the terminology transform, else `translate_constrained`, each sentence's constraints its glossary terms."""
        if served.model.inline_terms:
            return signature, {"text": [glossary.annotate(t) for t in text]}
        if "translate_constrained" not in served.model.signatures:
            raise RequestError(
                400,
                "this model cannot constrain a translation (a CTranslate2 directory or a sampling "
                "export), so it takes no glossary",
            )
        return "translate_constrained", {"text": text, "constraints": [glossary.constraints(t) for t in text]}

    def _named(self, name):
        if name not in self.served:
            names = ", ".join(f"'{served}'" for served in self.served)
            raise RequestError(404, f"model '{name}' not found; this server serves {names}")
        return self.served[name]

    def _ready_model(self, served):
        if not served.ready:
            raise RequestError(503, "the model is loading", {"Retry-After": "1"})
        return served.model

    async def _body(self, request):
        """The request's body, read within --request-timeout-s (else 408). A body over the limit is read on, up to
        `DRAIN_BYTES`, and dropped, so that its client, still sending, reads the 413 rather than a reset
        connection. Both answers close the connection."""
        settings, chunks, size = self.settings, [], 0
        limit, closing = settings.max_body_bytes, {"Connection": "close"}
        try:
            async with asyncio.timeout(settings.request_timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > DRAIN_BYTES:
                        break
                    if size <= limit:
                        chunks.append(chunk)
        except TimeoutError:
            raise RequestError(
                408,
                f"the request body did not arrive within --request-timeout-s {settings.request_timeout_s:g}",
                closing,
            ) from None
        if size > limit:
            raise RequestError(
                413,
                f"the request body is over {limit} bytes, the most that --max-sentences "
                f"{settings.max_sentences} and --max-chars {settings.max_chars} allow",
                closing,
            )
        return b"".join(chunks)

    async def _run(self, request, served, signature, inputs):
        """The outputs of `signature` on `inputs`, or a `RequestError`; `ClientDisconnect` if the client goes away
        first (its queued sentences are then dropped)."""
        decoding = asyncio.ensure_future(self._decode(served, signature, inputs))
        gone = asyncio.ensure_future(request.receive())  # the body is read: the next message is a disconnect
        await asyncio.wait((decoding, gone), return_when=asyncio.FIRST_COMPLETED)
        if decoding.done():
            gone.cancel()
            return decoding.result()
        decoding.cancel()
        raise ClientDisconnect()

    async def _decode(self, served, signature, inputs):
        settings = self.settings
        count = len(next(iter(inputs.values())))
        if count > settings.max_sentences:
            raise RequestError(
                400, f"the request has {count} sentences; the limit is --max-sentences {settings.max_sentences}"
            )
        for name, values in inputs.items():
            for i, value in enumerate(values):
                chars = len(value) if isinstance(value, str) else sum(len(item) + 1 for item in value)  # phrases
                if chars > settings.max_chars:
                    raise RequestError(
                        400,
                        f"sentence {i} ({name}) has {chars} characters; the limit is --max-chars {settings.max_chars}",
                    )
        try:
            return await asyncio.wait_for(served.queue.submit(signature, inputs), settings.request_timeout_s)
        except QueueFull as error:
            raise RequestError(503, str(error), {"Retry-After": "1"}) from None
        except TimeoutError:
            raise RequestError(
                504, f"the request was not answered within --request-timeout-s {settings.request_timeout_s:g}"
            ) from None
        except DecodingFailed as error:
            raise RequestError(500, str(error)) from None


def _error_response(request, error):
    return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)


def _internal_error(request, error):
    """Anything else is a bug: logged with its traceback (by uvicorn), answered in one line."""
    return JSONResponse({"error": f"internal error: {type(error).__name__}"}, status_code=500)


def _client_gone(request, error):
    """The client went away: nothing can be sent; the access log counts it as `CLIENT_GONE`."""
    return Response(status_code=CLIENT_GONE)


def _http_error(request, error):
    return JSONResponse(
        {"error": f"{error.detail}: {request.method} {request.url.path}"},
        status_code=error.status_code,
        headers=error.headers,
    )
