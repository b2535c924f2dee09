"""Request and response bodies: TensorFlow Serving's REST predict API, kmt's plain `/translate` and LibreTranslate's
requests (`q`, `source`, `target`, ... as JSON or a form).

TensorFlow Serving's two request formats (its REST API reference), for a signature whose inputs are `[None]`
strings (or `[None, None]`: a list of strings per sentence, as `translate_constrained`'s `constraints`):

- row: `{"signature_name": S, "instances": [...]}`, one instance per sentence: a string when the signature has one
  input (`"7 May 1971"`, or `{"text": "7 May 1971"}`), else an object naming every input
  (`{"source": ..., "target": ...}`). The answer is `{"predictions": [...]}`, one per instance: an object of the
  outputs, or the bare value when the signature has one output.
- columnar: `{"signature_name": S, "inputs": ...}`: a list of strings when the signature has one input, else an
  object of equally long lists. The answer is `{"outputs": {name: [...]}}`, or the bare list for one output.

`signature_name` defaults to `serving_default`. Every string is checked and normalized as it arrives: one that
UTF-8 cannot encode (a lone surrogate such as `"\\ud800"`, valid JSON) is refused naming its place
(`instances[3].text`), and the rest are put in Unicode's NFC form, so what reaches the model is text it can take.
Anything else is a `RequestError` with its HTTP status and one line.

`metadata_response` is TensorFlow Serving's `GET /v1/models/NAME/metadata` answer: the signature defs, with each
input's and output's dtype, shape and tensor name.
"""

import json
import unicodedata
import urllib.parse

DEFAULT_SIGNATURE = "serving_default"


class RequestError(Exception):
    """A request the server refuses: `status` (HTTP), `message` (one line) and extra response `headers`."""

    def __init__(self, status, message, headers=None):
        message = message.encode("utf-8", "backslashreplace").decode()  # a client's lone surrogate, quoted
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def parse_json(body):
    """The JSON object in `body` (bytes), or a 400 `RequestError`."""
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RequestError(400, f"malformed JSON: {error}") from None
    except RecursionError:
        raise RequestError(400, "malformed JSON: nested too deeply") from None
    if not isinstance(value, dict):
        raise RequestError(400, f"the request body must be a JSON object. Received: {type(value).__name__}")
    return value


def parse_predict(body, signatures):
    """`(signature name, {input: [str, ...]}, "row" or "columnar")` from a predict request's JSON object."""
    name = body.get("signature_name", DEFAULT_SIGNATURE)
    if not isinstance(name, str):
        raise RequestError(400, f"signature_name must be a string. Received: {type(name).__name__}")
    if name not in signatures:
        raise RequestError(404, f"signature '{name}' not found; the model has: {', '.join(sorted(signatures))}")
    unknown = set(body) - {"signature_name", "instances", "inputs"}
    if unknown:
        raise RequestError(400, f"unknown request fields: {', '.join(sorted(unknown))}")
    if ("instances" in body) == ("inputs" in body):
        raise RequestError(
            400, "the request must hold exactly one of 'instances' (row format) or 'inputs' (columnar format)"
        )
    names = tuple(signatures[name].inputs)
    lists = {
        key for key, tensor in signatures[name].inputs.items() if tensor.shape is not None and len(tensor.shape) == 2
    }
    if "instances" in body:
        return name, _rows(body["instances"], names, lists), "row"
    return name, _columns(body["inputs"], names, lists), "columnar"


def parse_translate(body):
    """`(sentences, glossary terms or None, model name or None)` of a `/translate` request, `{"text": [str, ...]}`
    with an optional `"glossary": [[source term, target term], ...]` and `"model"` (which of a server's models)."""
    unknown = set(body) - {"text", "glossary", "model"}
    if unknown or "text" not in body:
        raise RequestError(
            400,
            'a /translate request is {"text": [sentences]} (and "glossary": [[source term, target term], ...], '
            '"model": name)' + (f"; unknown fields: {', '.join(sorted(unknown))}" if unknown else ""),
        )
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError(400, f"model must be a model's name. Received: {type(model).__name__}")
    if "glossary" not in body:
        return _strings(body["text"], "text"), None, model
    terms = body["glossary"]
    if not isinstance(terms, list):
        raise RequestError(
            400, f"glossary must be a list of [source term, target term]. Received: {type(terms).__name__}"
        )
    for i, pair in enumerate(terms):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(t, str) and t.strip() for t in pair)):
            raise RequestError(400, f"glossary[{i}] must be [source term, target term], two non-empty strings")
    terms = [tuple(_strings(pair, f"glossary[{i}]")) for i, pair in enumerate(terms)]
    return _strings(body["text"], "text"), terms, model


def predict_response(outputs, form, count):
    """The response object for `outputs` ({output: list of `count` values}) in the request's `form`."""
    if form == "columnar":
        return {"outputs": next(iter(outputs.values())) if len(outputs) == 1 else outputs}
    if len(outputs) == 1:
        return {"predictions": next(iter(outputs.values()))}
    return {"predictions": [{key: values[i] for key, values in outputs.items()} for i in range(count)]}


def metadata_response(model_name, version, signatures):
    """TensorFlow Serving's model metadata for `signatures` ({name: `kmt.serving.model.Signature`})."""

    def tensor_info(tensor):
        dims = [{"size": str(size), "name": ""} for size in tensor.shape or ()]
        return {
            "dtype": tensor.dtype,
            "tensor_shape": {"dim": dims, "unknown_rank": tensor.shape is None},
            "name": tensor.name,
        }

    defs = {
        name: {
            "inputs": {key: tensor_info(t) for key, t in signature.inputs.items()},
            "outputs": {key: tensor_info(t) for key, t in signature.outputs.items()},
            "method_name": "tensorflow/serving/predict",
        }
        for name, signature in sorted(signatures.items())
    }
    return {
        "model_spec": {"name": model_name, "signature_name": "", "version": version},
        "metadata": {"signature_def": {"signature_def": defs}},
    }


def _rows(instances, names, lists=()):
    if not isinstance(instances, list):
        raise RequestError(400, f"'instances' must be a list. Received: {type(instances).__name__}")
    columns = {key: [] for key in names}
    for i, instance in enumerate(instances):
        if len(names) == 1 and not isinstance(instance, dict):
            instance = {names[0]: instance}
        if not isinstance(instance, dict) or set(instance) != set(names):
            shown = sorted(instance) if isinstance(instance, dict) else type(instance).__name__
            raise RequestError(
                400, f"instances[{i}] must be an object with the inputs {', '.join(names)}. Received: {shown}"
            )
        for key in names:
            check = _strings if key in lists else _string
            columns[key].append(check(instance[key], f"instances[{i}].{key}"))
    return columns


def _columns(inputs, names, lists=()):
    if len(names) == 1 and not isinstance(inputs, dict):
        inputs = {names[0]: inputs}
    if not isinstance(inputs, dict) or set(inputs) != set(names):
        shown = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
        raise RequestError(400, f"'inputs' must be an object with the inputs {', '.join(names)}. Received: {shown}")
    columns = {
        key: _lists(inputs[key], f"inputs.{key}") if key in lists else _strings(inputs[key], f"inputs.{key}")
        for key in names
    }
    lengths = {key: len(values) for key, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise RequestError(400, f"every input must have the same length. Received: {lengths}")
    return columns


def _strings(values, where):
    if not isinstance(values, list):
        raise RequestError(400, f"{where} must be a list of strings. Received: {type(values).__name__}")
    return [_string(value, f"{where}[{i}]") for i, value in enumerate(values)]


def _lists(values, where):
    if not isinstance(values, list):
        raise RequestError(400, f"{where} must be a list of lists of strings. Received: {type(values).__name__}")
    return [_strings(value, f"{where}[{i}]") for i, value in enumerate(values)]


def _string(value, where):
    """`value`, a string UTF-8 can encode, in NFC form."""
    if not isinstance(value, str):
        raise RequestError(400, f"{where} must be a string. Received: {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise RequestError(
            400,
            f"{where} is not valid text: character {error.start} is a lone surrogate "
            f"(U+{ord(value[error.start]):04X}), which UTF-8 cannot encode",
        ) from None
    return unicodedata.normalize("NFC", value)


# LibreTranslate's requests (kmt.serving.libretranslate answers them)
FORMATS = ("text", "html")
FIELDS = {"q", "source", "target", "format", "alternatives", "api_key"}  # a LibreTranslate request's
TRUE = (True, 1, "1", "true", "True", "on")  # a form's or JSON's yes


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
