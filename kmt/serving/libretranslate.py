"""LibreTranslate's API on kmt-serve, beside TensorFlow Serving's, so that its clients (browser extensions, Nextcloud,
Discourse, libretranslatepy, ...) translate with a kmt model unchanged.

- `POST /translate`: `q` (a string or a list of strings), `source` (a code, or `auto`), `target`, `format` (`text`),
  `alternatives` (how many other translations), `api_key`; a JSON or form body. The answer is
  `{"translatedText": ...}`, a string or a list as `q` was, with `"alternatives"` when asked and, for `source=auto`,
  `"detectedLanguage": {"confidence": 0-100, "language": code}` (a list of them for a list `q`). Each sentence of
  each line (pysbd's split) is translated on its own; empty lines stay empty. kmt's one addition, `alignments`
  (true), answers `"alignment"` too: Pharaoh pairs `i-j` of each text, source word i to target word j over
  whitespace-split words (the web page's highlight; `format=text`, no glossary).
- `GET /languages`: `[{"code", "name", "targets"}]`, the languages the server translates from.
- `POST /detect`: `q` -> `[{"confidence", "language"}]`, by py3langid (Lui & Baldwin's langid.py), restricted to the
  languages the server knows.
- `GET /frontend/settings`: what LibreTranslate's web page and clients read (limits, whether a key is needed).

Errors are `{"error": "..."}`, as LibreTranslate's: 400 for a bad request, 403 for a missing or unknown key.
A `/translate` body with `q` is LibreTranslate's; one with `text` is kmt's own (`kmt.serving.app`).
"""

import asyncio
import collections
import time
import uuid
from pathlib import PurePath

from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, JSONResponse

from kmt.documents import FORMATS as FORMATS_OF_FILES
from kmt.documents import Sentences
from kmt.errors import KmtError
from kmt.run_dir import write_atomically
from kmt.serving.languages import Detector, Pair, name_of
from kmt.serving.protocol import (
    FORMATS,
    TRUE,
    RequestError,
    alternatives_of,
    joined,
    lines_of,
    parse_form_or_json,
    required,
    texts,
)

# ISO 639-1 codes and the English names LibreTranslate gives them; a code not here is named by itself.


class LibreTranslate:
    """LibreTranslate's routes over a kmt-serve app's state (`kmt.serving.app._State`): its settings, its models
    (each `Served` with a language pair answers that pair), body limits and batching queues."""

    def __init__(self, state):
        self.state = state
        self.by_pair = {served.pair: served for served in state.served.values() if served.pair is not None}
        self.codes = sorted({code for pair in self.by_pair for code in (pair.source, pair.target)})
        self.detector = Detector(self.codes)
        self._calls = collections.defaultdict(collections.deque)  # client -> times of its requests this minute
        self.files = None  # where /translate_file writes (a temporary directory), each file --file-ttl-s

    @property
    def pairs(self):
        """The language pairs served, in the order the models were given."""
        if not self.by_pair:
            raise RequestError(
                400,
                "this server does not know its model's languages: start kmt-serve with --languages SOURCE-TARGET "
                "(or --model SOURCE-TARGET=EXPORT)",
            )
        return list(self.by_pair)

    def _expire(self, now=None):
        """Deletes the translated files older than --file-ttl-s (LibreTranslate's files expire too)."""
        oldest = (time.time() if now is None else now) - self.state.settings.file_ttl_s
        for path in self.files.iterdir():
            try:
                if path.stat().st_mtime < oldest:
                    path.unlink()
            except FileNotFoundError:  # a download that raced it
                pass

    def _admit(self, request, params):
        """The api_key check and the per-client request limit."""
        settings, key = self.state.settings, params.get("api_key") or None
        if settings.api_keys is not None:
            if key is None:
                raise RequestError(400, "Please contact the server operator to get an API key")
            if key not in settings.api_keys:
                raise RequestError(403, "Invalid API key")
        if settings.req_limit:
            client = key or (request.client.host if request.client else "-")
            calls, now = self._calls[client], time.monotonic()
            while calls and calls[0] <= now - 60:
                calls.popleft()
            if len(calls) >= settings.req_limit:
                raise RequestError(429, f"Slowdown: {settings.req_limit} per 1 minute", {"Retry-After": "60"})
            calls.append(now)

    def most_alternatives(self, served, glossary):
        """The alternatives a model can give: its beam less the best (none from a constrained search)."""
        model = self.state._ready_model(served)
        if "translate_nbest" not in model.signatures or (glossary is not None and not model.inline_terms):
            return 0
        return max(model.signatures["translate_nbest"].outputs["translations"].shape[-1] - 1, 0)

    async def translate(self, request, params):
        settings = self.state.settings
        texts_, many = texts(params, settings.max_chars)
        source, target = (str(required(params, name)).lower() for name in ("source", "target"))
        glossary, detected = settings.glossary, None
        self.pairs  # noqa: B018 (a server that does not know its languages says so first)
        if source == "auto":
            detected = self.detector(" ".join(texts_))
        for code in (detected[0] if detected else source, target):
            if code not in self.codes:
                raise RequestError(400, f"{'auto' if detected and code == detected[0] else code} is not supported")
        if detected:
            source = detected[0]
        served = self.by_pair.get(Pair(source, target))
        count = alternatives_of(params, self.most_alternatives(served, glossary) if served else 0)
        self._admit(request, params)
        form = params.get("format") or "text"
        if form not in FORMATS:
            raise RequestError(400, f"{form} format is not supported")
        if served is None:
            raise RequestError(
                400,
                f"{name_of(target)} ({target}) is not available as a target language from {name_of(source)} ({source})",
            )
        if form == "html":
            best, alternatives = await self._html(request, served, texts_, source), [[] for _ in texts_]
            return self._answer(best, alternatives if count else None, detected, many)
        lines, spans = lines_of(texts_)
        aligns = "translate_align" in served.model.signatures  # a model that cannot align answers without
        if params.get("alignments") in TRUE and aligns and glossary is None and not count:
            return await self._aligned(request, served, lines, spans, source, detected, many)
        split = Sentences(lines, source, aligned=False)  # a model translates a sentence at a time
        lines = split.sentences
        if glossary is not None:
            signature, inputs = self.state._glossed(served, glossary, lines)
        else:
            signature, inputs = "translate", {"text": lines}
        if count:
            signature = "translate_nbest"
        outputs = await self.state._run(request, served, signature, inputs)
        if count:
            beams = outputs["translations"]
            best = joined(split.join([beam[0] for beam in beams]), spans)
            others = [
                joined(split.join([beam[min(k, len(beam) - 1)] for beam in beams]), spans) for k in range(1, count + 1)
            ]
            alternatives = [list(dict.fromkeys(o[i] for o in others if o[i] != best[i])) for i in range(len(best))]
        else:
            best = joined(split.join(outputs["translation"]), spans)
        return self._answer(best, alternatives if count else None, detected, many)

    async def _aligned(self, request, served, lines, spans, language, detected, many):
        """Texts' translations with their alignments: `translate_align` on every sentence of every line, each line's
        words counted on from the lines before it."""
        from kmt.inference.alignments import parse_pharaoh

        split = Sentences(lines, language)
        outputs = {"translation": [], "alignment": []}
        if split.sentences:
            outputs = await self.state._run(request, served, "translate_align", {"text": split.sentences})
        results = split.join(zip(outputs["translation"], map(parse_pharaoh, outputs["alignment"])))
        best, alignments = [], []
        for start, stop in spans:
            links, source_at, target_at = [], 0, 0
            for line, (translation, alignment) in zip(lines[start:stop], results[start:stop]):
                links += [f"{i + source_at}-{j + target_at}" for i, j in alignment]
                source_at, target_at = source_at + len(line.split()), target_at + len(translation.split())
            best.append("\n".join(translation for translation, _ in results[start:stop]))
            alignments.append(" ".join(links))
        response = self._answer(best, None, detected, many, send=False)
        response["alignment"] = alignments if many else alignments[0]
        return JSONResponse(response)

    def _answer(self, best, alternatives, detected, many, send=True):
        answer = {"translatedText": best if many else best[0]}
        if alternatives is not None:
            answer["alternatives"] = alternatives if many else alternatives[0]
        if detected:
            language = {"confidence": detected[1], "language": detected[0]}
            answer["detectedLanguage"] = [language] * len(best) if many else language
        return JSONResponse(answer) if send else answer

    async def _html(self, request, served, texts_, language):
        """Each HTML text translated with its markup kept (`kmt.documents.markup`): its segments through
        `translate_align`, the tags put back around the aligned words (no glossary: its constraints or inline terms
        would move the words the alignments count)."""
        from kmt.documents.markup import Fragment
        from kmt.inference.alignments import parse_pharaoh

        if "translate_align" not in served.model.signatures:
            raise RequestError(400, "html format needs word alignments, and this model gives none (not a Transformer)")
        fragments = [Fragment(text) for text in texts_]
        split = Sentences([line for fragment in fragments for line in fragment.lines], language)
        outputs = {"translation": [], "alignment": []}
        if split.sentences:
            outputs = await self.state._run(request, served, "translate_align", {"text": split.sentences})
        results = iter(split.join(zip(outputs["translation"], map(parse_pharaoh, outputs["alignment"]))))
        return [fragment.render([next(results) for _ in fragment.lines]) for fragment in fragments]

    async def detect(self, request):
        body = await self.state._body(request)
        params = parse_form_or_json(body, request.headers.get("content-type", ""))
        texts_, _ = texts(params, self.state.settings.max_chars)
        self._admit(request, params)
        self.pairs  # noqa: B018 (a server that does not know its languages says so)
        code, confidence = self.detector(" ".join(texts_))
        return JSONResponse([{"confidence": confidence, "language": code}])

    async def languages(self, request):
        targets = collections.defaultdict(list)
        for pair in self.pairs:
            targets[pair.source].append(pair.target)
        return JSONResponse(
            [{"code": code, "name": name_of(code), "targets": sorted(codes)} for code, codes in targets.items()]
        )

    async def translate_file(self, request):
        """`POST /translate_file`: a multipart upload (`file`, `source`, `target`, `api_key`) of a `kmt.documents`
        format, translated with its layout kept; the answer names where to download it."""
        from kmt.documents import document_from

        settings = self.state.settings
        try:
            async with asyncio.timeout(settings.request_timeout_s):
                form = await request.form(max_files=1, max_fields=16, max_part_size=settings.max_file_bytes)
        except TimeoutError:
            raise RequestError(
                408, f"the upload did not arrive within --request-timeout-s {settings.request_timeout_s:g}"
            ) from None
        except (HTTPException, AssertionError) as error:
            detail = getattr(error, "detail", None) or str(error)
            raise RequestError(400, f"Invalid request: {detail}") from None
        params = {key: value for key, value in form.items() if isinstance(value, str)}
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise RequestError(400, "Invalid request: missing file parameter")
        source, target = (str(required(params, name)).lower() for name in ("source", "target"))
        self._admit(request, params)
        self.pairs  # noqa: B018
        content = await upload.read()
        if len(content) > settings.max_file_bytes:
            raise RequestError(413, f"the file is over {settings.max_file_bytes} bytes, --max-file-bytes")
        if not content.strip():
            raise RequestError(400, "Invalid request: empty file")
        suffix = PurePath(upload.filename or "").suffix.lower()
        if suffix not in FORMATS_OF_FILES:
            raise RequestError(400, "Invalid request: file format not supported")
        if source == "auto":
            source = self.detector(content[:4000].decode("utf-8", "replace"))[0]
        for code in (source, target):
            if code not in self.codes:
                raise RequestError(400, f"{code} is not supported")
        served = self.by_pair.get(Pair(source, target))
        if served is None:
            raise RequestError(
                400,
                f"{name_of(target)} ({target}) is not available as a target language from {name_of(source)} ({source})",
            )
        self.state._ready_model(served)
        try:
            document = document_from(content, suffix, source, name=upload.filename)
        except KmtError as error:
            raise RequestError(400, f"Invalid request: {error}") from None
        translations = await self._sentences(request, served, document.sentences, document.alignments)
        name = f"{uuid.uuid4().hex}.{PurePath(upload.filename).name}"
        self._expire()
        write_atomically(self.files / name, document.render(translations))
        return JSONResponse({"translatedFileUrl": str(request.url_for("download_file", filename=name))})

    async def _sentences(self, request, served, sentences, alignments):
        """The translations of `sentences` (with their alignments), --max-sentences at a time through the queue."""
        from kmt.inference.alignments import parse_pharaoh

        signature = "translate_align" if alignments else "translate"
        if alignments and signature not in served.model.signatures:
            raise RequestError(400, "html needs word alignments, and this model gives none (not a Transformer)")
        step, results = self.state.settings.max_sentences, []
        for start in range(0, len(sentences), step):
            outputs = await self.state._run(request, served, signature, {"text": sentences[start : start + step]})
            if alignments:
                results += zip(outputs["translation"], map(parse_pharaoh, outputs["alignment"]))
            else:
                results += outputs["translation"]
        return results

    async def download_file(self, request):
        name = request.path_params["filename"]
        if "/" in name or name.startswith(".") or "\\" in name:
            raise RequestError(400, "Invalid filename")
        path = self.files / name
        self._expire()
        if not path.is_file():
            ttl = self.state.settings.file_ttl_s
            raise RequestError(404, f"no translated file {name} (a file lasts {ttl:g} s, --file-ttl-s)")
        return FileResponse(path, filename=name.partition(".")[2])

    async def frontend_settings(self, request):
        settings, pair = self.state.settings, self.pairs[0]
        return JSONResponse(
            {
                "charLimit": settings.max_chars,
                "frontendTimeout": 500,
                "apiKeys": settings.api_keys is not None,
                "keyRequired": settings.api_keys is not None,
                "suggestions": False,
                "filesTranslation": True,
                "supportedFilesFormat": list(FORMATS_OF_FILES),
                # kmt's: the most alternatives each pair gives (the web page's button)
                "alternatives": {str(p): self.most_alternatives(s, settings.glossary) for p, s in self.by_pair.items()},
                "language": {
                    "source": {"code": pair.source, "name": name_of(pair.source)},
                    "target": {"code": pair.target, "name": name_of(pair.target)},
                },
            }
        )
