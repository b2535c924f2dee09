"""kmt-serve against a real server process on 127.0.0.1: TensorFlow Serving's request and response shapes (the
default tier's one server), and in the e2e tier concurrent clients answered as serial ones, every bad request's
status and JSON error, poison, stalled and vanishing clients beside good ones, a full queue, a request's timeout,
SIGTERM draining the queue, and the load bench.

The tests wait on states (a log line, the queue depth or a count in /metrics), never on a wall-clock window: a batch
that must stay queued waits for a count it cannot reach (`--max-batch-size` above the sentences sent, a batch window
of `HELD_MS`), never for a timer; every wait has a bound."""

import functools
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

SENTENCES = [
    f"{day} {month} {year}"
    for day, month, year in zip(
        range(1, 29), ["May", "June", "July", "Aug", "September", "Oct", "Nov"] * 4, range(1950, 1978)
    )
]
SENTENCES += ["Tuesday, March 5, 1996", "7/4/21", "the 3rd of December 2001", "2020"]  # 32, of varied lengths
REQUEST_TIMEOUT_S = 20  # the module's server: how long a stalled body is waited for (ample for a few decodes)
STEERED = {  # a request of each steering signature: a target prefix, alignments of translations and of given pairs
    "translate_prefix": {"instances": [{"text": "3 June 1951", "prefix": "19"}, {"text": "2020", "prefix": ""}]},
    "translate_align": {"instances": SENTENCES[:3]},
    "align": {"inputs": {"source": SENTENCES[:2], "target": ["1950-05-01", "1951-06-02"]}},
}
HELD_MS = "600000"  # a 10-minute batch window: a batch forms at --max-batch-size sentences (or at SIGTERM)
WAIT_S = 120  # the bound on a wait for a state that a working server reaches in well under a second


class Server:
    """A `kmt-serve` process on a free port of 127.0.0.1 (`--port 0`), its log lines collected as it writes them;
    ready once it logs that the model is loaded and warmed."""

    def __init__(self, export, *flags, timeout=300):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kmt.cli.serve", str(export), "--port", "0", *flags],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=_env(),
        )
        self.lines, self.url, self._closed, self._logged = [], None, False, threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.wait_for_line(r"^INFO kmt\.serving: ready: ", timeout=timeout)
        except AssertionError:
            self.process.kill()
            self.process.wait()
            raise

    def _read(self):
        for line in self.process.stderr:
            with self._logged:
                self.lines.append(line.rstrip("\n"))
                listening = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
                self.url = listening[1] if listening else self.url
                self._logged.notify_all()
        with self._logged:
            self._closed = True
            self._logged.notify_all()

    def wait_for_line(self, pattern, since=0, timeout=WAIT_S):
        """The first log line from `since` on that matches `pattern`, once the server has written it; fails if the
        server exits or `timeout` passes first."""

        def found():
            return next((line for line in self.lines[since:] if re.search(pattern, line)), None)

        with self._logged:
            self._logged.wait_for(lambda: found() or self._closed, timeout)
            line = found()
        assert line, f"kmt-serve never logged /{pattern}/:\n" + "\n".join(self.lines[-30:])
        return line

    @property
    def address(self):
        host, port = self.url.removeprefix("http://").split(":")
        return host, int(port)

    def request(self, method, path, body=None, timeout=WAIT_S):
        """`(status, headers, JSON or text)`; `body` is sent as JSON unless it is bytes. A request that gets no
        answer fails the test, with the server's last lines."""
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, headers, text = response.status, response.headers, response.read().decode()
        except urllib.error.HTTPError as error:
            status, headers, text = error.code, error.headers, error.read().decode()
        except OSError as error:
            raise AssertionError(
                f"{method} {path} got no answer ({error!r}); kmt-serve's last lines:\n" + "\n".join(self.lines[-30:])
            ) from None
        is_json = headers.get("content-type", "").startswith("application/json")
        return status, headers, json.loads(text) if is_json else text

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body):
        return self.request("POST", path, body)

    def stop(self, timeout=WAIT_S):
        """SIGTERM, then the exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.exited(timeout)

    def exited(self, timeout=WAIT_S):
        """The exit status, once the process has exited and every line it wrote is in `lines`."""
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=timeout)
        return code


def _env():
    import os

    return os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def server(smoke_run):
    """One server for the tests that need it answering: small limits, so that going past them is cheap."""
    running = Server(
        smoke_run / "export",
        "--max-sentences",
        "8",
        "--max-chars",
        "100",
        "--max-batch-size",
        "16",
        "--request-timeout-s",
        str(REQUEST_TIMEOUT_S),
    )
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def serial(server):
    """Each of SENTENCES translated in a request of its own, one request at a time: {sentence: (translation,
    score)}."""
    answers = {}
    for sentence in SENTENCES:
        status, _, body = server.post("/translate", {"text": [sentence]})
        assert status == 200, body
        answers[sentence] = (body["translations"][0], body["scores"][0])
    return answers


def answered(body):
    """A /translate answer as [(translation, score), ...], the scores to float32's rounding: a batch's other
    sentences change its padding, and so the order of a sum, by a unit in the last place."""
    return [
        (translation, pytest.approx(score, rel=1e-5))
        for translation, score in zip(body["translations"], body["scores"])
    ]


def test_tensorflow_serving_requests_and_responses(server, smoke_run):
    """The default tier's one kmt-serve process: ready once the signatures of a plain request have run once, the
    others run after; its answers are the export's, a batch's are each sentence's alone, and it stops on SIGTERM with
    status 0 (`server`'s teardown)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    ready = server.wait_for_line(r"^INFO kmt\.serving: ready: ")
    assert re.search(r" loaded and serving_default, translate warmed in [\d.]+ s ", ready), ready
    warmed = server.wait_for_line(r"^INFO kmt\.serving: \S+: warmed ")
    rest = re.fullmatch(r".*: warmed (.*) in [\d.]+ s", warmed)[1].split(", ")
    others = ["align", "score", "translate_align", "translate_constrained", "translate_nbest", "translate_prefix"]
    assert sorted(rest) == others, warmed

    sentences = SENTENCES[:3]
    signatures = tf.saved_model.load(str(smoke_run / "export")).signatures
    direct = signatures["translate"](text=tf.constant(sentences))
    expected = [
        {"translation": t.decode(), "score": pytest.approx(float(s), rel=1e-6)}
        for t, s in zip(direct["translation"].numpy(), direct["score"].numpy())
    ]

    row = server.post("/v1/models/kmt:predict", {"signature_name": "translate", "instances": sentences})
    assert row[0] == 200 and row[2] == {"predictions": expected}
    assert server.post("/v1/models/kmt:predict", {"instances": [{"text": s} for s in sentences]})[2] == row[2]
    columnar = server.post("/v1/models/kmt:predict", {"signature_name": "translate", "inputs": {"text": sentences}})
    assert columnar[2] == {
        "outputs": {
            "translation": [p["translation"] for p in row[2]["predictions"]],
            "score": [p["score"] for p in row[2]["predictions"]],
        }
    }
    assert server.post("/v1/models/kmt:predict", {"inputs": sentences})[2] == columnar[2]
    assert server.post("/translate", {"text": sentences})[2] == {
        "translations": columnar[2]["outputs"]["translation"],
        "scores": columnar[2]["outputs"]["score"],
    }
    alone = [server.post("/translate", {"text": [sentence]})[2] for sentence in sentences]
    assert answered(server.post("/translate", {"text": sentences})[2]) == [
        (body["translations"][0], body["scores"][0]) for body in alone
    ]  # each sentence's serial answer

    pairs = {"source": sentences[:2], "target": ["1950-05-01", "1951-06-02"]}
    scored = signatures["score"](**{key: tf.constant(values) for key, values in pairs.items()})
    status, _, body = server.post("/v1/models/kmt:predict", {"signature_name": "score", "inputs": pairs})
    assert status == 200 and body["outputs"]["length"] == scored["length"].numpy().tolist()
    assert body["outputs"]["score"] == pytest.approx(scored["score"].numpy().tolist(), rel=1e-6)
    rows = [{"source": s, "target": t} for s, t in zip(*pairs.values())]
    assert server.post("/v1/models/kmt:predict", {"signature_name": "score", "instances": rows})[2] == {
        "predictions": [{"score": s, "length": n} for s, n in zip(body["outputs"]["score"], body["outputs"]["length"])]
    }
    nbest = server.post("/v1/models/kmt:predict", {"signature_name": "translate_nbest", "instances": sentences[:1]})
    assert nbest[2]["predictions"][0]["translations"] == [row[2]["predictions"][0]["translation"]]  # greedy: K = 1
    assert server.post("/v1/models/kmt:predict", {"instances": []})[2] == {"predictions": []}

    steered = {"text": sentences[:2], "prefix": ["19", "1951-06"]}
    direct = signatures["translate_prefix"](**{key: tf.constant(values) for key, values in steered.items()})
    rows = [dict(zip(steered, row)) for row in zip(*steered.values())]
    status, _, body = server.post("/v1/models/kmt:predict", {"signature_name": "translate_prefix", "instances": rows})
    assert status == 200 and [p["translation"] for p in body["predictions"]] == [
        t.decode() for t in direct["translation"].numpy()
    ]
    assert [p["translation"][:2] for p in body["predictions"]] == ["19", "19"]  # each begins with its prefix
    direct = signatures["translate_align"](text=tf.constant(sentences))
    status, _, body = server.post(
        "/v1/models/kmt:predict", {"signature_name": "translate_align", "instances": sentences}
    )
    assert status == 200 and [(p["translation"], p["alignment"]) for p in body["predictions"]] == [
        (t.decode(), a.decode()) for t, a in zip(direct["translation"].numpy(), direct["alignment"].numpy())
    ]
    assert all(re.fullmatch(r"(\d+-\d+( \d+-\d+)*)?", p["alignment"]) for p in body["predictions"])  # Pharaoh
    direct = signatures["align"](**{key: tf.constant(values) for key, values in pairs.items()})
    status, _, body = server.post("/v1/models/kmt:predict", {"signature_name": "align", "inputs": pairs})
    assert status == 200 and body == {"outputs": [a.decode() for a in direct["alignment"].numpy()]}

    phrases = [["1951"], ["06", "19"], []]  # each translation holds its sentence's phrases, in rows and columns alike
    table = tf.constant([["1951", ""], ["06", "19"], ["", ""]])
    direct = signatures["translate_constrained"](text=tf.constant(sentences[:3]), constraints=table)
    rows = [{"text": text, "constraints": c} for text, c in zip(sentences, phrases)]
    status, _, body = server.post(
        "/v1/models/kmt:predict", {"signature_name": "translate_constrained", "instances": rows}
    )
    assert status == 200 and [p["translation"] for p in body["predictions"]] == [
        t.decode() for t in direct["translation"].numpy()
    ]
    assert all(phrase in p["translation"] for p, row in zip(body["predictions"], phrases) for phrase in row)
    columns = {"text": sentences[:3], "constraints": phrases}
    status, _, body = server.post(
        "/v1/models/kmt:predict", {"signature_name": "translate_constrained", "inputs": columns}
    )
    assert status == 200 and body["outputs"]["translation"] == [t.decode() for t in direct["translation"].numpy()]
    rows[0]["constraints"] = "1951"
    status, _, body = server.post(
        "/v1/models/kmt:predict", {"signature_name": "translate_constrained", "instances": rows}
    )
    assert (status, body) == (400, {"error": "instances[0].constraints must be a list of strings. Received: str"})

    assert server.get("/v1/models/kmt")[2] == {
        "model_version_status": [
            {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        ]
    }
    assert server.get("/healthz")[:3:2] == (200, {"status": "ok"})
    status, headers, metrics = server.get("/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert 'kmt_requests_total{route="/v1/models/:predict",code="200"}' in metrics
    assert "kmt_queue_depth 0" in metrics and "kmt_ready 1" in metrics
    assert re.search(r'^kmt_request_latency_seconds\{quantile="0.95"\} \d', metrics, re.M)
    assert any(re.search(r'"POST /v1/models/kmt:predict" 200 [\d.]+ms$', line) for line in server.lines)


@pytest.mark.e2e
def test_concurrent_clients_get_their_serial_answers(smoke_run, serial):
    requests = [SENTENCES[i : i + 1 + i % 3] for i in range(32)]  # 1 to 3 sentences each, overlapping
    count = sum(map(len, requests))
    together = Server(smoke_run / "export", "--max-batch-size", str(count), "--batch-timeout-ms", HELD_MS)
    try:
        with ThreadPoolExecutor(len(requests)) as pool:  # one batch, formed once every request's sentences wait
            answers = list(pool.map(lambda sentences: together.post("/translate", {"text": sentences}), requests))
        for sentences, (status, _, body) in zip(requests, answers):
            assert status == 200, body
            assert answered(body) == [serial[s] for s in sentences]
        assert batches(together) == (1, count)  # the requests were decoded together
    finally:
        assert together.stop() == 0


def batches(server):
    """How many batches the server has decoded, and how many sentences."""
    metrics = server.get("/metrics")[2]
    return tuple(int(re.search(rf"^kmt_batch_size_{key} (\d+)", metrics, re.M)[1]) for key in ("count", "sum"))


BAD = [  # (method, path, body, status, what the error says)
    ("POST", "/translate", b'{"text": ["7 May', 400, "malformed JSON"),
    ("POST", "/translate", b"\xff\xfe", 400, "malformed JSON"),
    ("POST", "/translate", [1, 2], 400, "must be a JSON object"),
    ("POST", "/translate", {"txt": ["7 May 1971"]}, 400, "unknown fields: txt"),
    ("POST", "/translate", {"text": "7 May 1971"}, 400, "text must be a list of strings"),
    ("POST", "/translate", {"text": ["7 May 1971", 3]}, 400, "text[1] must be a string"),
    ("POST", "/translate", {"text": ["7 May 1971"] * 9}, 400, "--max-sentences 8"),
    ("POST", "/translate", {"text": ["7 May 1971", "x" * 101]}, 400, "--max-chars 100"),
    ("POST", "/translate", {"text": ["x" * 100] * 200}, 413, "--max-sentences 8 and --max-chars 100"),
    ("POST", "/translate", b"x" * 10_000_000, 413, "--max-sentences 8 and --max-chars 100"),  # not a reset
    ("POST", "/translate", b"[" * 7000 + b"]" * 7000, 400, "malformed JSON: nested too deeply"),
    (
        "POST",
        "/translate",
        b'{"text": ["7 May 1971", "\\ud800"]}',
        400,
        "text[1] is not valid text: character 0 is a lone surrogate (U+D800)",
    ),
    (
        "POST",
        "/v1/models/kmt:predict",
        b'{"signature_name": "\\udfff", "inputs": ["a"]}',
        404,
        "signature '\\udfff' not found",
    ),
    ("POST", "/v1/models/kmt:predict", {"instances": [None]}, 400, "instances[0].text must be a string"),
    ("POST", "/v1/models/kmt:predict", {"instances": ["a"], "inputs": ["a"]}, 400, "exactly one of"),
    ("POST", "/v1/models/kmt:predict", {"signature_name": 7, "inputs": ["a"]}, 400, "signature_name must be"),
    (
        "POST",
        "/v1/models/kmt:predict",
        {"signature_name": "score", "inputs": {"source": ["a"], "target": []}},
        400,
        "same length",
    ),
    (
        "POST",
        "/v1/models/kmt:predict",
        {"signature_name": "score", "instances": [{"source": "a"}]},
        400,
        "inputs source, target",
    ),
    ("POST", "/v1/models/kmt:predict", {"signature_name": "nope", "inputs": ["a"]}, 404, "signature 'nope'"),
    ("POST", "/v1/models/other:predict", {"inputs": ["a"]}, 404, "model 'other' not found"),
    ("GET", "/v1/models/other", None, 404, "model 'other' not found"),
    ("GET", "/v1/models/kmt:predict", None, 405, "/v1/models/kmt:predict takes POST. Received: GET"),
    ("POST", "/v1/models/kmt/versions/1", b"", 405, "takes GET. Received: POST"),
    ("GET", "/v1/models/kmt/versions/2", None, 404, "version 2 of model 'kmt' not found"),
    ("POST", "/v1/models/kmt/versions/2:predict", {"inputs": ["a"]}, 404, "version 2 of model 'kmt' not found"),
    ("POST", "/v1/models/kmt:classify", {"examples": []}, 400, "which :classify cannot call; use :predict"),
    ("POST", "/v1/models/kmt/labels/stable:regress", {"examples": []}, 400, "which :regress cannot call"),
    ("GET", "/v1/models/kmt/metadata/x", None, 404, "no route /v1/models/kmt/metadata/x"),
    ("POST", "/healthz", b"", 405, "Method Not Allowed"),
    ("GET", "/nowhere", None, 404, "Not Found"),
]


@pytest.mark.e2e
def test_every_bad_request_gets_its_status_and_one_line_while_others_are_answered(server, serial):
    stop, good = threading.Event(), []

    def keep_asking(sentence):
        while True:  # at least once, beside the bad requests, until they are all answered
            try:
                status, _, body = server.post("/translate", {"text": [sentence]})
                good.append((sentence, status == 200 and answered(body) == [serial[sentence]] or body))
            except AssertionError as error:
                good.append((sentence, str(error)))
            if stop.is_set():
                break

    threads = [threading.Thread(target=keep_asking, args=(s,)) for s in SENTENCES[:4]]
    for thread in threads:
        thread.start()
    try:
        for method, path, body, status, says in BAD:
            got, _, answer = server.request(method, path, body)
            assert got == status, (path, body, answer)
            assert list(answer) == ["error"] and says in answer["error"] and "\n" not in answer["error"], answer
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=WAIT_S)
    assert not any(thread.is_alive() for thread in threads)
    assert len(good) >= len(threads) and all(ok is True for _, ok in good), [g for g in good if g[1] is not True]


POISON = [  # (path, body, what the 400 says): valid JSON holding text that UTF-8 cannot encode
    ("/translate", b'{"text": ["\\ud800"]}', "text[0] is not valid text"),
    ("/v1/models/kmt:predict", b'{"instances": ["7 May 1971", "\\udc00 May 1971"]}', "instances[1].text is not"),
    ("/v1/models/kmt:predict", b'{"inputs": {"text": ["x\\ud83d"]}}', "inputs.text[0] is not valid text"),
]


def ask_with_poison(server, requests):
    """`requests` ([sentences]) sent to /translate all at once with the POISON ones in between; checks that each
    poison one got its 400 and returns the others' (status, body)."""
    asks = [("/translate", {"text": sentences}) for sentences in requests]
    for i, (path, body, _) in enumerate(POISON * 3):
        asks.insert(4 * i, (path, body))
    with ThreadPoolExecutor(len(asks)) as pool:
        answers = list(pool.map(lambda ask: server.post(*ask), asks))
    good = []
    for (path, body), (status, _, answer) in zip(asks, answers):
        says = next((says for p, b, says in POISON if (p, b) == (path, body)), None)
        if says:
            assert status == 400 and says in answer["error"], answer
        else:
            good.append((status, answer))
    return good


@pytest.mark.e2e
def test_poison_requests_fail_alone_and_their_neighbours_get_their_serial_answers(server, serial):
    requests = [[SENTENCES[i % len(SENTENCES)]] for i in range(40)]
    good = ask_with_poison(server, requests)
    assert [status for status, _ in good] == [200] * 40, good
    assert [answered(body) for _, body in good] == [[serial[s] for s in sentences] for sentences in requests]


@pytest.mark.e2e
def test_tensorflow_serving_metadata_versions_and_labels(server, smoke_run):
    from google.protobuf.json_format import MessageToDict
    from tensorflow.core.protobuf import saved_model_pb2

    graph = saved_model_pb2.SavedModel.FromString((smoke_run / "export" / "saved_model.pb").read_bytes())
    defs = {
        name: MessageToDict(signature, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
        for name, signature in graph.meta_graphs[0].signature_def.items()
        if not name.startswith("__")
    }
    status, _, metadata = server.get("/v1/models/kmt/metadata")
    assert status == 200 and metadata["model_spec"] == {"name": "kmt", "signature_name": "", "version": "1"}
    assert metadata["metadata"]["signature_def"]["signature_def"] == {
        name: {key: value for key, value in signature.items() if key in ("inputs", "outputs", "method_name")}
        for name, signature in defs.items()
    }  # TensorFlow Serving prints the graph's signature defs so
    assert metadata["metadata"]["signature_def"]["signature_def"]["translate"]["inputs"]["text"] == {
        "dtype": "DT_STRING",
        "tensor_shape": {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False},
        "name": "translate_text:0",
    }
    for model in ("kmt/versions/1", "kmt/labels/stable"):
        assert server.get(f"/v1/models/{model}/metadata")[2] == metadata
        assert server.get(f"/v1/models/{model}")[2] == server.get("/v1/models/kmt")[2]
        predict = {"signature_name": "translate", "instances": SENTENCES[:2]}
        assert (
            server.post(f"/v1/models/{model}:predict", predict)[::2]
            == server.post("/v1/models/kmt:predict", predict)[::2]
        )


def requests_answered(server, code):
    """How many requests the server's /metrics counts with status `code`, over every route."""
    return sum(
        int(n)
        for n in re.findall(
            rf'^kmt_requests_total\{{route="[^"]*",code="{code}"\}} (\d+)', server.get("/metrics")[2], re.M
        )
    )


@pytest.mark.e2e
def test_stalled_bodies_get_408_and_their_connections_closed_while_others_are_answered(server, serial):
    """The 60 stalled bodies never arrive, so each gets its 408 after REQUEST_TIMEOUT_S; the 8 good requests are
    answered before any of them (the log's order), REQUEST_TIMEOUT_S being ample for 8 decodes."""
    lines = len(server.lines)
    stalled = [socket.create_connection(server.address) for _ in range(60)]
    try:
        for connection in stalled:  # a body of 100 bytes declared, 7 sent
            connection.sendall(b'POST /translate HTTP/1.1\r\nHost: kmt\r\nContent-Length: 100\r\n\r\n{"text"')
        for sentence in SENTENCES[:8]:
            status, _, body = server.post("/translate", {"text": [sentence]})
            assert status == 200 and answered(body) == [serial[sentence]], body
        assert not any('" 408 ' in line for line in server.lines[lines:]), "the stalled bodies held up the others"
        for connection in stalled:
            connection.settimeout(REQUEST_TIMEOUT_S + WAIT_S)
            reply = b"".join(iter(functools.partial(connection.recv, 4096), b""))  # until the server closes it
            assert reply.startswith(b"HTTP/1.1 408 ") and b"--request-timeout-s 20" in reply, reply
    finally:
        for connection in stalled:
            connection.close()


@pytest.mark.e2e
def test_a_client_that_goes_away_is_one_log_line_and_a_499(server):
    before, lines = requests_answered(server, 499), len(server.lines)
    body = json.dumps({"text": SENTENCES[:8]}).encode()
    head = b"POST /translate HTTP/1.1\r\nHost: kmt\r\nContent-Length: %d\r\n\r\n" % len(body)
    for sent in (head + body[:10], head + body):  # gone while sending its body, gone while waiting for its answer
        with socket.create_connection(server.address) as connection:
            connection.sendall(sent)
    wait_until(lambda: requests_answered(server, 499) == before + 2, "two 499s counted", server, lines)
    wait_for_depth(server, 0)  # the second one's sentences were dropped or decoded
    logged = server.lines[lines:]
    assert (
        sum('"POST /translate" 499 ' in line and "(the client went away; nothing sent)" in line for line in logged) == 2
    )
    assert not any("Traceback" in line or '" 500 ' in line for line in logged), logged


def test_mistakes_in_the_command_line_stop_in_one_line(capsys, smoke_run, tmp_path):
    from kmt.cli.serve import main
    from tests.helpers import refused

    assert refused(capsys, main, tmp_path) == (
        2,
        f"error: {tmp_path} is not a kmt run directory (config.yaml), "
        "SavedModel export (saved_model.pb) or CTranslate2 directory; pass "
        "a run, its export/ or the output of kmt-export --format "
        "ctranslate2",
    )
    assert refused(capsys, main, tmp_path, "--max-queue", "8")[1].endswith(
        "--max-queue must hold one request of --max-sentences. Received: --max-queue 8, --max-sentences 64"
    )
    assert refused(capsys, main, tmp_path, "--batch-timeout-ms", "-1")[1].endswith(
        "--batch-timeout-ms must not be negative. Received: -1.0"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, line = refused(capsys, main, smoke_run / "export", "--port", port)
    assert (code, line) == (2, f"error: cannot listen on 127.0.0.1:{port}: Address already in use")
    (tmp_path / "terms.tsv").write_text("June 06\n")
    assert refused(capsys, main, smoke_run / "export", "--glossary", tmp_path / "terms.tsv") == (
        2,
        f"error: {tmp_path / 'terms.tsv'}:1: a glossary line is 'source term<TAB>target term'. Received: 'June 06'",
    )


@pytest.mark.e2e
def test_a_glossary_puts_its_terms_in_every_translation_the_server_gives(smoke_run, server, tmp_path):
    (tmp_path / "terms.tsv").write_text("June\t06\nMay\t05\n")
    sentences, terms = ["3 June 1951", "1 May 1950", "7/4/21"], [["06"], ["05"], []]
    running = Server(smoke_run / "export", "--glossary", tmp_path / "terms.tsv")
    try:
        ready = running.wait_for_line(r"^INFO kmt\.serving: ready: ")
        assert " loaded and serving_default, translate, translate_constrained warmed in " in ready, ready
        status, _, body = running.post("/translate", {"text": sentences})
        assert status == 200 and "06" in body["translations"][0] and "05" in body["translations"][1], body
        rows = [{"text": text, "constraints": c} for text, c in zip(sentences, terms)]
        asked = server.post("/v1/models/kmt:predict", {"signature_name": "translate_constrained", "instances": rows})
        assert body["translations"] == [p["translation"] for p in asked[2]["predictions"]]  # the terms as constraints
        status, _, predicted = running.post("/v1/models/kmt:predict", {"instances": sentences})
        assert status == 200 and [p["translation"] for p in predicted["predictions"]] == body["translations"]
        own = running.post("/translate", {"text": sentences[:1], "glossary": [["1951", "1951-12"]]})[2]
        row = {"text": sentences[0], "constraints": ["1951-12"]}  # the request's glossary, not the server's
        asked = server.post("/v1/models/kmt:predict", {"signature_name": "translate_constrained", "instances": [row]})
        assert (
            own["translations"] == [asked[2]["predictions"][0]["translation"]] and "1951-12" in own["translations"][0]
        )
        status, _, refused = running.post("/translate", {"text": sentences, "glossary": [["June"]]})
        assert (status, refused) == (
            400,
            {"error": "glossary[0] must be [source term, target term], two non-empty strings"},
        )
    finally:
        assert running.stop() == 0


def wait_until(condition, what, server, since=0, timeout=WAIT_S):
    """Polls `condition()` until it holds; fails naming `what`, with the server's lines from `since`, after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never {what}:\n" + "\n".join(server.lines[since:][-30:])
        time.sleep(0.05)


def wait_for_depth(server, depth):
    """Waits until the server holds `depth` sentences not yet answered (its /metrics)."""
    wait_until(lambda: f"kmt_queue_depth {depth}\n" in server.get("/metrics")[2], f"{depth} sentences queued", server)


@pytest.mark.e2e
def test_full_queue_gets_503_and_a_slow_request_504(smoke_run):
    """A request of two sentences fills the queue (--max-queue 2) and stays there: its batch forms at three
    sentences (or at SIGTERM), and the full queue takes no third. So another request gets 503, and the first is
    never answered within its 1 s (504), however fast the machine decodes."""
    server = Server(
        smoke_run / "export",
        "--max-queue",
        "2",
        "--max-sentences",
        "2",
        "--max-batch-size",
        "3",
        "--batch-timeout-ms",
        HELD_MS,
        "--request-timeout-s",
        "1",
    )
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(server.post, "/translate", {"text": SENTENCES[:2]})
            wait_for_depth(server, 2)
            status, headers, body = server.post("/translate", {"text": SENTENCES[2:3]})
            assert (status, headers["retry-after"]) == (503, "1") and "--max-queue 2" in body["error"], body
            status, _, body = first.result(timeout=WAIT_S)
        assert status == 504 and "--request-timeout-s 1" in body["error"], body
    finally:
        assert server.stop() == 0


@pytest.mark.e2e
def test_sigterm_answers_every_queued_request_then_exits_0(smoke_run, serial):
    """32 requests queue in a batch that forms at 33 sentences; one more request has sent its headers and part of its
    body. SIGTERM closes the port; the last request's body, sent then, completes the batch, and all 33 are answered
    before kmt-serve exits 0."""
    server = Server(
        smoke_run / "export", "--max-batch-size", "33", "--batch-timeout-ms", HELD_MS, "--request-timeout-s", "300"
    )
    body = json.dumps({"text": [SENTENCES[0]]}).encode()
    with socket.create_connection(server.address) as last, ThreadPoolExecutor(32) as pool:
        try:
            last.sendall(b"POST /translate HTTP/1.1\r\nHost: kmt\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:5])
            answers = [pool.submit(server.post, "/translate", {"text": [s]}) for s in SENTENCES]
            wait_for_depth(server, 32)  # every request queued, in one batch that waits for one more sentence
            server.process.send_signal(signal.SIGTERM)
            server.wait_for_line("Waiting for connections to close")  # the port is closed, the requests still open
            with pytest.raises(ConnectionRefusedError):  # and nothing listens any more
                socket.create_connection(server.address, timeout=WAIT_S).close()
            last.sendall(body[5:])
            last.settimeout(WAIT_S)
            reply = b"".join(iter(functools.partial(last.recv, 4096), b""))  # until the server closes it
            for sentence, answer in zip(SENTENCES, answers):
                status, _, answer = answer.result(timeout=WAIT_S)
                assert status == 200 and answered(answer) == [serial[sentence]], answer
            assert server.exited() == 0
        finally:
            server.process.kill()  # if a check failed; nothing once it has exited
    head, _, answer = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and answered(json.loads(answer)) == [serial[SENTENCES[0]]], reply
    assert sum('/translate" 200' in line for line in server.lines) == 33


def serve_load(smoke_run, *flags):
    """`bench/serve_load.py --export EXPORT FLAGS` in a process of its own: the JSON line it ends with."""
    result = subprocess.run(
        [sys.executable, "bench/serve_load.py", "--export", str(smoke_run / "export"), *flags],
        capture_output=True,
        text=True,
        timeout=540,
        env=_env(),
        cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_load_bench_runs_batching_and_no_batching_side_by_side(smoke_run):
    # Each row ends after its 6 requests: --max-seconds is only a bound.
    report = serve_load(smoke_run, "--clients", "1,3", "--requests", "6", "--max-seconds", "120")
    assert report["exit_codes"] == {"batching": 0, "no batching": 0}
    rows = {(row["clients"], row["mode"]): row for row in report["rows"]}
    assert set(rows) == {(c, m) for c in (1, 3) for m in ("batching", "no batching")}
    assert all(row["requests"] == 6 and row["failed"] == 0 for row in rows.values())
    assert rows[1, "no batching"]["mean batch"] == rows[3, "no batching"]["mean batch"] == 1


@pytest.mark.e2e
def test_load_bench_puts_one_servers_routes_side_by_side(smoke_run):
    report = serve_load(smoke_run, "--routes", "--clients", "2", "--requests", "4", "--max-seconds", "120")
    assert report["exit_code"] == 0 and report["pair"] == ["en", "de"]
    assert [row["route"] for row in report["rows"]] == [
        "TF Serving predict",
        "kmt /translate",
        "LibreTranslate /translate",
    ]
    assert all(row["requests"] == 4 and row["failed"] == 0 for row in report["rows"])
    assert report["rows"][0]["vs predict"] == 1


@pytest.mark.e2e
def test_load_bench_answers_every_good_request_beside_hostile_clients_with_its_serial_answer(smoke_run):
    """docs/serving.md's hostile-client figures at a tiny size: rows of a few seconds (their good requests counted,
    whatever the machine's speed), every hostile client sending one request at least in each of its turns."""
    report = serve_load(smoke_run, "--hostile", "--clients", "2", "--max-seconds", "4")
    assert report["exit_code"] == 0
    rows = {row["mode"]: row for row in report["rows"]}
    assert list(rows) == ["alone", "beside hostile clients"]
    for row in rows.values():
        assert row["sent"] > 0 and row["answered"] == row["as serial"] == row["sent"], row
    assert rows["alone"]["hostile"] == {}
    assert set(rows["beside hostile clients"]["hostile"]) == {
        "poison 400",
        "nested 400",
        "stalled 408",
        "disconnecting sent, gone",
    }, rows["beside hostile clients"]["hostile"]


@pytest.mark.e2e
def approximately(body):
    """A predict answer with its scores compared to float32's rounding (CTranslate2 sums in another order)."""
    if isinstance(body, dict):
        return {key: pytest.approx(v, rel=1e-4) if key == "score" else approximately(v) for key, v in body.items()}
    return [approximately(item) for item in body] if isinstance(body, list) else body


def test_a_ctranslate2_directory_is_served_with_the_saved_models_answers(smoke_run, server, serial, tmp_path):
    from kmt.cli import export as export_cli

    export_cli.main([str(smoke_run), "--format", "ctranslate2", "--output", str(tmp_path / "ct2")])
    running = Server(tmp_path / "ct2")
    try:
        status, _, body = running.post("/translate", {"text": SENTENCES[:8]})
        assert status == 200, body
        assert body["translations"] == [serial[sentence][0] for sentence in SENTENCES[:8]]  # greedy: kmt's tokens
        good = ask_with_poison(running, [[sentence] for sentence in SENTENCES[:16]])
        assert [(status, body["translations"]) for status, body in good] == [
            (200, [serial[s][0]]) for s in SENTENCES[:16]
        ]
        status, _, body = running.post("/translate", {"text": SENTENCES[:1], "glossary": [["May", "05"]]})
        assert status == 400 and body["error"].startswith("this model cannot constrain a translation")
        status, _, body = running.post(
            "/v1/models/kmt:predict", {"signature_name": "translate", "instances": SENTENCES[:2]}
        )
        assert status == 200 and [p["translation"] for p in body["predictions"]] == [
            serial[s][0] for s in SENTENCES[:2]
        ]
        for signature, request in STEERED.items():  # the SavedModel's signatures, answered by CTranslate2
            request = {"signature_name": signature, **request}
            status, _, body = running.post("/v1/models/kmt:predict", request)
            assert status == 200 and approximately(body) == server.post("/v1/models/kmt:predict", request)[2]
    finally:
        assert running.stop() == 0


@pytest.mark.e2e
def test_a_run_directory_is_served_with_the_saved_models_answers(smoke_run, server, serial):
    # `kmt-serve RUN_DIR`: the run's Keras model, searching with its decode settings; --languages names its pair
    running = Server(smoke_run, "--languages", "fr-en")
    try:
        status, _, body = running.post("/translate", {"text": SENTENCES[:8]})
        assert status == 200, body
        assert body["translations"] == [serial[sentence][0] for sentence in SENTENCES[:8]]
        assert running.get("/languages")[2] == [{"code": "fr", "name": "French", "targets": ["en"]}]
        status, _, body = running.post("/translate", {"q": SENTENCES[0], "source": "fr", "target": "en"})
        assert (status, body) == (200, {"translatedText": serial[SENTENCES[0]][0]})
        request = {
            "signature_name": "translate_constrained",
            "instances": [{"text": text, "constraints": ["19", "05"]} for text in SENTENCES[:2]],
        }
        status, _, body = running.post("/v1/models/kmt:predict", request)
        assert status == 200 and approximately(body) == server.post("/v1/models/kmt:predict", request)[2]
    finally:
        assert running.stop() == 0
