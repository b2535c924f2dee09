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
import json
import time
import unicodedata
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import PurePath

from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, JSONResponse

from kmt.documents import FORMATS as FORMATS_OF_FILES
from kmt.documents import Sentences
from kmt.errors import KmtError
from kmt.run_dir import write_atomically
from kmt.serving.protocol import RequestError, parse_json

# ISO 639-1 codes and the English names LibreTranslate gives them; a code not here is named by itself.
NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "fi": "Finnish", "fr": "French",
    "ga": "Irish", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "nb": "Norwegian", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian",
    "sv": "Swedish", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian", "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip
FORMATS = ("text", "html")
FIELDS = {"q", "source", "target", "format", "alternatives", "api_key"}  # a LibreTranslate request's
TRUE = (True, 1, "1", "true", "True", "on")  # a form's or JSON's yes


@dataclass(frozen=True)
class Pair:
    """The language pair a model translates: ISO 639-1 codes, `en-de` on the command line."""

    source: str
    target: str

    @classmethod
    def parse(cls, text):
        source, dash, target = str(text).partition("-")
        if not dash or not source.isalpha() or not target.isalpha() or source == target:
            raise ValueError(f"a language pair is two language codes joined by '-', such as en-de. Received: {text!r}")
        return cls(source.lower(), target.lower())

    def __str__(self):
        return f"{self.source}-{self.target}"


class Detector:
    """Language identification restricted to `languages` (py3langid, loaded on first use)."""

    def __init__(self, languages):
        self.languages = sorted(set(languages))
        self._identifier = None

    def __call__(self, text):
        """`(code, confidence 0-100)` of `text`."""
        if self._identifier is None:
            from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

            identifier = LanguageIdentifier.from_modelpath(MODEL_DIR / MODEL_FILE, norm_probs=True)
            if len(self.languages) > 1:
                identifier.set_languages(self.languages)
            self._identifier = identifier
        if len(self.languages) == 1:
            return self.languages[0], 100.0
        code, probability = self._identifier.classify(text)
        return code, round(100 * float(probability), 1)


def parse_form_or_json(body, content_type):
    """A LibreTranslate request's parameters: a JSON object (`is_json`), else an `application/x-www-form-urlencoded`
    body (its first value of each field; line endings as `\n`)."""
    if not is_json(body, content_type):
        return _form(body)
    try:
        value = json.loads(body) if body.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise RequestError(400, "Invalid request: the body is neither JSON nor a form") from None
    if not isinstance(value, dict):
        raise RequestError(400, "Invalid JSON format")
    return value


def parse_translate_body(body, content_type):
    """A `/translate` body, parsed once: `(parameters, True)` for LibreTranslate's (a JSON object or a form with its
    fields, `q`, `source`, ...), `(object, False)` for kmt's own (a JSON object with `text`); anything else gets
    kmt's errors (`parse_json`'s)."""
    if is_json(body, content_type):
        value = parse_json(body)
        return value, "text" not in value and bool(set(value) & FIELDS)
    try:
        fields = _form(body)
    except RequestError:
        fields = {}
    if set(fields) & FIELDS:
        return fields, True
    return parse_json(body), False  # not JSON: kmt's 400


def _form(body):
    try:
        fields = urllib.parse.parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise RequestError(400, "Invalid request: the form is not UTF-8") from None
    # LibreTranslate reads a form's first value of each field
    return {key: values[0].replace("\r\n", "\n") for key, values in fields.items()}


def is_json(body, content_type):
    """Whether a body is JSON: so typed, or an object whatever its type says (curl's `-d '{...}'` is typed as a
    form)."""
    return "json" in content_type.split(";")[0].lower() or body.lstrip()[:1] == b"{"


def required(params, name):
    """The parameter `name`, a non-empty string, or LibreTranslate's 400."""
    value = params.get(name)
    if value is None or value == "" or value == []:
        raise RequestError(400, f"Invalid request: missing {name} parameter")
    return value


def texts(params, char_limit):
    """`(list of texts, whether q was a list)`: `q` checked (each text at most `char_limit` characters), in NFC."""
    q = required(params, "q")
    many = isinstance(q, list)
    values = q if many else [q]
    if not all(isinstance(value, str) for value in values):
        raise RequestError(400, "Invalid request: q must be a string or a list of strings")
    for value in values:
        if len(value) > char_limit:
            raise RequestError(400, f"Invalid request: request ({len(value)}) exceeds text limit ({char_limit})")
    try:
        return [unicodedata.normalize("NFC", value.encode("utf-8").decode()) for value in values], many
    except UnicodeEncodeError:
        raise RequestError(400, "Invalid request: q holds text UTF-8 cannot encode") from None


def alternatives_of(params, limit):
    """How many alternatives a request asks (negative: none), at most `limit`."""
    value = params.get("alternatives", 0) or 0
    try:
        value = max(int(value), 0)
    except (TypeError, ValueError):
        raise RequestError(400, "Invalid request: alternatives parameter is not a number") from None
    if value > limit:
        raise RequestError(400, f"Invalid request: alternatives parameter must be <= {limit}")
    return value


def name_of(code):
    return NAMES.get(code, code)


def lines_of(texts):
    """Every line of every text, and where each text's lines are: `(lines, [(start, stop), ...])`."""
    lines, spans = [], []
    for text in texts:
        parts = text.split("\n")
        spans.append((len(lines), len(lines) + len(parts)))
        lines += parts
    return lines, spans


def joined(translations, spans):
    return ["\n".join(translations[start:stop]) for start, stop in spans]


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
